"""Evaluation sampling speed on the three HF paths: eager, compiled, continuous batching.

Each path runs behind ``dashrepro.sampling.make_sampler`` exactly as rule
``generate_checkpoint_responses`` calls it: Avg@k over stand-in problems (each prompt repeated k
times, one call), fp32 on the CPU, the default's evaluation temperature and top-p:

- ``hf``: HF ``generate``, eager, on the model as loaded (the CPU default);
- ``hf_compiled``: HF ``generate`` on a plain copy, a static cache and a compiled decode step;
- ``hf_continuous``: transformers' continuous batching on the plain copy (a paged cache,
  finished responses leaving at once).

The model is the embedded default's base model (``results/tiny/base_model/tiny``, made by
``bash scripts/demo.sh``; ``--base-model`` another), or, where none was made, a random model of
the tiny scale's architecture (``workflow_config.yaml``) with a tokenizer trained on the
stand-in problems. A random model rarely emits EOS, so its responses run to the cap: the case
where continuous batching gains least. Every path's first call (a compile, a cache) is a
warm-up at the timed call's shape and is left out::

    python benchmarks/generation_paths.py                  # Avg@4 over 30 prompts, 64 tokens
    python benchmarks/generation_paths.py --k 8 --max-new-tokens 128 --threads 2

Prints a Markdown table, then each path's tokens/s over the eager path's. A measurement, not a
test: time it with nothing else running.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import yaml  # noqa: E402

from dashrepro.data.prompts import render_student_prompt  # noqa: E402
from dashrepro.embedded.synthetic_data import make_dataset  # noqa: E402
from dashrepro.sampling import SamplingSettings, make_sampler  # noqa: E402

PATHS = ("hf", "hf_compiled", "hf_continuous")
N_PROMPTS = 30


def random_base_model(folder: Path) -> Path:
    """A random model of the tiny scale's architecture, its tokenizer trained on stand-ins."""
    from dashrepro.embedded.tiny_model import build_tiny_qwen3
    from dashrepro.embedded.tiny_tokenizer import train_tokenizer

    config = yaml.safe_load((REPO / "workflow_config.yaml").read_text())
    architecture = config["scales"]["tiny"]["architecture"]
    train, _ = make_dataset(40, {"b": {"task": "add2", "n": 2}}, seed=0)
    tokenizer = train_tokenizer([*train["problem"], *train["reference_solution"]], 400)
    model = build_tiny_qwen3(
        architecture, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, seed=0
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def measure(path: str, folder: Path, settings: SamplingSettings, k: int) -> dict:
    """Load, one untimed call at the timed call's shape, then the timed Avg@k call."""
    started = time.perf_counter()
    sampler = make_sampler(path, base_model=folder)
    if path == "hf":
        sampler.policy()  # HF loads the model on first use: count that as its start-up
    startup = time.perf_counter() - started
    problems, _ = make_dataset(N_PROMPTS, {"b": {"task": "add2", "n": 2}}, seed=0)
    prompts = [render_student_prompt(sampler.tokenizer, p) for p in problems["problem"]]
    requests = [p for p in prompts[:N_PROMPTS] for _ in range(k)]
    started = time.perf_counter()
    sampler.sample(requests, settings, seed=1)  # the warm-up: the same shape
    warm = time.perf_counter() - started
    started = time.perf_counter()
    samples = sampler.sample(requests, settings, seed=0)
    seconds = time.perf_counter() - started
    tokens = sum(len(s.token_ids) for s in samples)
    del sampler
    gc.collect()
    return {"startup": startup, "warm": warm, "seconds": seconds, "tokens": tokens,
            "samples": len(samples),
            "stopped": sum(s.finish_reason == "stop" for s in samples)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", type=Path, default=REPO / "results/tiny/base_model/tiny")
    parser.add_argument("--k", type=int, default=4, help="samples per problem (Avg@k)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument(
        "--paths", default=",".join(PATHS), help="comma-separated, of " + ",".join(PATHS)
    )
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    evaluation = yaml.safe_load((REPO / "workflow_config.yaml").read_text())["evaluation"]
    settings = SamplingSettings(temperature=evaluation["temperature"], top_p=evaluation["top_p"],
                                max_new_tokens=args.max_new_tokens)  # fmt: skip
    paths = [p for p in args.paths.split(",") if p]
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder, model = args.base_model, "embedded default"
        if not (folder / "config.json").is_file():
            folder, model = random_base_model(Path(scratch) / "tiny"), "random tiny-scale"
        for path in paths:
            rows[path] = measure(path, folder, settings, args.k)
            print(f"[generation_paths] {path}: {rows[path]}", file=sys.stderr, flush=True)
    print(f"# Evaluation sampling: Avg@{args.k} over {N_PROMPTS} prompts, up to "
          f"{args.max_new_tokens} new tokens, fp32, {model} model, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads\n")  # fmt: skip
    print("| path | start-up s | warm-up s | generation s | tokens | stopped at EOS | tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for path, row in rows.items():
        print(f"| {path} | {row['startup']:.1f} | {row['warm']:.1f} | {row['seconds']:.1f} | "
              f"{row['tokens']} | {row['stopped']}/{row['samples']} | "
              f"{row['tokens'] / row['seconds']:.0f} |")  # fmt: skip
    if "hf" in rows:
        print()
        eager = rows["hf"]["tokens"] / rows["hf"]["seconds"]
        for path, row in rows.items():
            if path != "hf":
                print(f"- {path} / hf tokens per second: "
                      f"{row['tokens'] / row['seconds'] / eager:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
