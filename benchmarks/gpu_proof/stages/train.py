"""Stages ``train_opsd``, ``train_dash`` and ``smoke``: ``train_run`` (what rule ``train_lora`` calls)
for a few steps at a shape, without DeepSpeed; the smoke stage builds, trains and evaluates the
small shape on the device under test.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..common import (
    base_model_dir,
    cpu_peak_gib,
    paper_config,
    peak_gib,
    reset_peak,
    train_settings,
    training_parquet,
)
from ..shapes import SMOKE_SHAPE
from .build import stage_build
from .evaluate import evaluate


def train(args, method: str, shape: str, *, deepspeed: bool, tag: str = "") -> dict:
    """``train_run`` for one method at ``shape``: step seconds by phase, peak memory."""
    import pandas as pd

    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.training.methods import MethodSpec
    from dashrepro.training.trainer import train_run

    config = paper_config(args)
    entry = {k: v for k, v in config["methods"][method].items() if k != "label"}
    train_cfg, lora, protocol = train_settings(args, shape, deepspeed=deepspeed)
    out_dir = Path(args.out) / f"run{tag}_{method}_{shape}{'_deepspeed' if deepspeed else ''}"
    reset_peak()
    t0 = time.perf_counter()
    metrics: pd.DataFrame = train_run(
        base_model_dir=base_model_dir(args, shape),
        train_parquet=training_parquet(args),
        out_dir=out_dir,
        method=MethodSpec.from_config(method, entry),
        train=train_cfg,
        lora=lora,
        protocol=TeacherProtocol.from_config(protocol),
        seed=0,
    )
    wall = time.perf_counter() - t0
    phases = ["seconds_rollout", "seconds_teacher", "seconds_student", "seconds_optimizer"]
    # The first step pays for warm-up (kernel selection, allocator growth): the steps after it
    # are the per-step numbers; with one step there is nothing else.
    steady = metrics.iloc[1:] if len(metrics) > 1 else metrics
    result = {
        "method": method, "shape": shape, "deepspeed": deepspeed,
        "rollout_backend": train_cfg["rollout_backend"],
        "steps": len(metrics), "wall_seconds": round(wall, 1),
        "peak_gib": None if peak_gib() is None else round(peak_gib(), 2),
        "cpu_peak_gib": cpu_peak_gib(),
        "rollouts_per_step": int(train_cfg["micro_batch_size"]) * int(train_cfg["grad_accumulation"]),
        "max_new_tokens": train_cfg["max_new_tokens"],
        "checkpoint": str(out_dir / f"checkpoint-{train_cfg['steps']}"),
        "loss": [float(x) for x in metrics["loss"]] if "loss" in metrics else None,
    }  # fmt: skip
    for phase in phases:
        if phase in steady:
            result[phase.replace("seconds_", "mean_s_")] = round(float(steady[phase].mean()), 3)
    result["mean_step_s"] = round(sum(result.get(p.replace("seconds_", "mean_s_"), 0.0)
                                      for p in phases), 3)  # fmt: skip
    if "tokens_per_second" in steady:
        result["tokens_per_second"] = round(float(steady["tokens_per_second"].mean()), 1)
    return result


def stage_smoke(args) -> dict:
    """Build, train two steps, evaluate the checkpoint: the small shape on this device."""
    results = {"build": stage_build(args, SMOKE_SHAPE)}
    results["train"] = train(args, "opsd", SMOKE_SHAPE, deepspeed=False, tag="_smoke")
    results["evaluate"] = evaluate(args, SMOKE_SHAPE, results["train"]["checkpoint"])
    return results


def stage_train(args, method: str) -> dict:
    return train(args, method, args.shape, deepspeed=False)
