"""Stage ``evaluate``: a checkpoint's responses as rule ``generate_checkpoint_responses`` makes them,
then ``grade_and_summarize``; in a lane beside ``train_opsd`` it waits for that stage's first
checkpoint.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..common import base_model_dir, paper_config, peak_gib, reset_peak, rollout_backend
from ..shapes import SHAPES


def benchmark_parquet(args, n_problems: int) -> tuple[str, Path]:
    """(name, parquet) of the benchmark to evaluate: ``--benchmark`` prepared as rule
    ``prepare_benchmark`` does, its first ``n_problems``; else synthetic stand-ins."""
    from dashrepro.data.datasets import prepare_dataset

    path = Path(args.out) / "benchmark.parquet"
    if args.benchmark:
        # The paper overlay's entry of the same name (its sha256 and size), read from this file.
        name = Path(args.benchmark).stem
        entry = paper_config(args)["benchmarks"][name]
        spec = {**entry["dataset"], "path": str(Path(args.benchmark).resolve())}
        frame, _ = prepare_dataset(spec, expected_size=entry["n_problems"], name=name)
    else:
        from dashrepro.embedded.synthetic_data import make_dataset

        _, frames = make_dataset(8, {"standin": {"task": "add2", "n": n_problems}}, seed=1)
        raw = Path(args.out) / "standin_raw.parquet"
        frames["standin"].to_parquet(raw)
        frame, _ = prepare_dataset(None, source_file=raw, name="standin")
        name = "standin"
    frame.head(n_problems).to_parquet(path)
    return name, path


def evaluate(args, shape: str, checkpoint: str) -> dict:
    """The checkpoint's responses, as rule generate_checkpoint_responses makes them, graded."""
    from dashrepro.evaluation.grade import grade_and_summarize
    from dashrepro.evaluation.responses import generate_policy_responses

    config = paper_config(args)
    spec = SHAPES[shape]
    name, parquet = benchmark_parquet(args, spec["eval_problems"])
    generation = dict(config["evaluation"])
    generation.update(samples_per_problem=spec["eval_samples"],
                      max_new_tokens=spec["eval_max_new_tokens"],
                      backend=rollout_backend(args.backend))  # fmt: skip
    if generation["backend"] == "hf_compiled":
        import torch

        generation.update(device="cuda" if torch.cuda.is_available() else "cpu",
                          dtype="bfloat16", kv_cache_budget_gib=args.kv_budget_gib)  # fmt: skip
    reset_peak()
    t0 = time.perf_counter()
    timing = {}  # the sampling's own seconds (the responses frame holds data only)
    responses = generate_policy_responses(
        base_model_dir=base_model_dir(args, shape),
        adapter_dir=checkpoint,
        benchmark_files={name: parquet},
        generation=generation,
        checkpoint=f"opsd/{shape}/seed0/step{checkpoint_step(Path(checkpoint))}",
        timing=timing,
    )
    wall = time.perf_counter() - t0
    samples, summary = grade_and_summarize(responses, [name], generation)
    tokens = int(responses["n_tokens"].sum()) if "n_tokens" in responses else None
    seconds = float(timing.get("generation_seconds", wall))
    samples.to_parquet(Path(args.out) / f"samples_{shape}.parquet")
    return {
        "backend": generation["backend"], "checkpoint": checkpoint, "benchmark": name,
        "responses": len(responses),
        "columns": list(samples.columns), "tokens": tokens,
        "generation_seconds": round(seconds, 1),
        "tokens_per_second": None if not tokens else round(tokens / seconds, 1),
        "peak_gib": None if peak_gib() is None else round(peak_gib(), 2),
        "avg_at_k": summary["benchmarks"][name].get("avg_at_k"),
        "finish_reasons": responses["finish_reason"].value_counts().to_dict()
        if "finish_reason" in responses else None,
    }  # fmt: skip


def checkpoint_step(folder: Path) -> int:
    return int(folder.name.removeprefix("checkpoint-"))


def stage_evaluate(args) -> dict:
    """The newest checkpoint that stage ``train_opsd`` saved, evaluated. In a lane beside
    ``train_opsd`` it waits for that stage's first checkpoint (or for the stage's end)."""
    run_dir = Path(args.out) / f"run_opsd_{args.shape}"
    ended = Path(args.out) / "train_opsd.json"

    def saved() -> list[Path]:
        files = ("adapter_config.json", "adapter_model.safetensors")
        return [p for p in run_dir.glob("checkpoint-*") if all((p / f).exists() for f in files)]

    while not saved() and not ended.exists() and args.wait_for_checkpoint:
        time.sleep(1.0)
    if not saved():
        raise RuntimeError(f"no checkpoint in {run_dir}: stage train_opsd saved none")
    return evaluate(args, args.shape, str(max(saved(), key=checkpoint_step)))
