"""LoRA on-policy self-distillation (OPSD family, DASH, EOPD, AVSD, GRPO hybrid): the entry point.

``train_run(...)`` trains one (method, scale, seed) run into ``out_dir``, resuming from a kept
training state if one is there; ``python -m dashrepro.training.trainer --spec run.json`` does
the same from ``RunSpec.to_json``'s file, which is how ``accelerate launch`` starts several
processes. The work is ``recipe.DistillationRecipe``'s; what one step does, how processes,
batches, checkpoints and resumes work, and what a run records: docs/training.md.

    python -m dashrepro.training.trainer --spec run.json           # one process
    accelerate launch --num_processes 2 -m dashrepro.training.trainer --spec run.json

Tests: ``pytest tests/training`` (CPU, a few minutes; real-process kill/resume and 2-process gloo).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pandas as pd
import torch

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.settings import LoraSettings, TrainSettings
from dashrepro.training.methods import MethodSpec
from dashrepro.training.recipe import DistillationRecipe
from dashrepro.training.run_spec import RunSpec


def train_run(
    *,
    base_model_dir: str | Path,
    train_parquet: str | Path,
    out_dir: str | Path,
    method: MethodSpec,
    train: TrainSettings | Mapping,
    lora: LoraSettings | Mapping,
    protocol: TeacherProtocol,
    seed: int,
    log: Callable[[str], None] = print,
    trace_rollouts: int = 4,
    progress: bool = False,
) -> pd.DataFrame:
    """Train one (method, scale, seed) run into ``out_dir``, resuming if a state is there."""
    spec = RunSpec(
        base_model_dir=base_model_dir,
        train_parquet=train_parquet,
        out_dir=out_dir,
        method=method,
        train=train,
        lora=lora,
        protocol=protocol,
        seed=seed,
        trace_rollouts=trace_rollouts,
        progress=progress,
    )
    return run_spec(spec, log)


def run_spec(spec: RunSpec, log: Callable[[str], None] = print) -> pd.DataFrame:
    """Train the run ``spec`` describes (setup, then the step loop); the metrics."""
    recipe = DistillationRecipe(spec, log=log)
    recipe.setup()
    return recipe.train()


def run_from_json(path: str | Path) -> pd.DataFrame:
    """Train from a JSON file holding train_run's keyword arguments (protocol as its mapping)."""
    return run_spec(RunSpec.from_json(path))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="JSON file with train_run's arguments")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and os.environ.get("RANK") == "0":
        # Where the processes met (distributed.launch_command lets the OS choose the port).
        print(f"[train] {os.environ['WORLD_SIZE']} processes met at "
              f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}", flush=True)  # fmt: skip
    run_from_json(args.spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
