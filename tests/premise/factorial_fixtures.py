"""The factorial study's synthetic inputs in the results layout: the families' base evaluation,
probe and OPSD pilot runs with their job timings (shared by the registration's and the page's
tests)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from dashrepro import layout
from dashrepro.io import write_parquet
from dashrepro.premise.factorial_pilot import PILOT_SCALES

CELLS = ("a", "b", "floor")
RESULTS = layout.Results("fam")


def probe(scales: dict[str, float], rollouts: int = 20, length: int = 60) -> pd.DataFrame:
    """A probe's tokens: per family, r exponential with the family's mean (nats)."""
    rng = np.random.default_rng(3)
    rows, rollout = [], 0
    for task, scale in scales.items():
        for _ in range(rollouts):
            rows += [{"task": task, "rollout": rollout, "position": t,
                      "r": scale * rng.exponential()} for t in range(length)]  # fmt: skip
            rollout += 1
    return pd.DataFrame(rows)


def pilot_scores(rng, decay=10.0) -> pd.DataFrame:
    """OPSD's pilot: lr 2e-3 peaks at step 20 and decays; 1e-3 climbs and holds; 5e-4 is slow."""
    means = {5.0e-4: (42, 45), 1.0e-3: (48, 55), 2.0e-3: (60, 60 - decay)}
    rows = [{"lr": lr, "seed": seed, "step": step, "cell": cell, "method": "opsd",
             "score": means[lr][i] + rng.normal(0, 1.5)}
            for lr in means for seed in range(4) for i, step in enumerate((20, 40))
            for cell in CELLS]  # fmt: skip
    return pd.DataFrame(rows)


def write_experiment(directory, lr_decay=10.0):
    """The families' base evaluation, probe and OPSD pilot runs (with their job timings)."""
    base = {"student": {"benchmarks": {"a": {"avg_at_k": 40.0}, "b": {"avg_at_k": 42.0},
                                       "floor": {"avg_at_k": 12.0}}},
            "teacher": {"benchmarks": {"a": {"avg_at_k": 95.0}, "b": {"avg_at_k": 96.0},
                                       "floor": {"avg_at_k": 97.0}}}}  # fmt: skip
    path = directory / RESULTS.base_eval_file(layout.BASE_ACCURACY, "tiny")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(base))
    tokens = directory / RESULTS.premise_file(layout.PREMISE_TOKENS, "tiny")
    tokens.parent.mkdir(parents=True)
    write_parquet(tokens, probe({"a": 0.4, "b": 0.05, "floor": 3.0}))
    scores = pilot_scores(np.random.default_rng(1), lr_decay)
    lr_scale = {lr: scale for scale, lr in PILOT_SCALES.items()}
    for (lr, seed, step), block in scores.groupby(["lr", "seed", "step"]):
        scale = lr_scale[lr]
        summary = {"seed": int(seed), "step": int(step), "benchmarks": {
            row.cell: {"avg_at_k": row.score} for row in block.itertuples()}}  # fmt: skip
        write_summary(directory, "opsd", scale, seed, step, summary)
        key = f"opsd/{scale}/seed{seed}"
        for rule, name, seconds in (("train_lora", f"{key}.tsv", 60.0),
                                    ("generate_checkpoint_responses", f"{key}/step{step}.tsv", 50.0)):  # fmt: skip
            timing = directory / RESULTS.root / "job_timings" / rule / name
            timing.parent.mkdir(parents=True, exist_ok=True)
            timing.write_text(f"s\th:m:s\n{seconds}\t0:01:00\n")


def write_summary(directory, method, scale, seed, step, summary):
    path = directory / RESULTS.checkpoint_file(layout.SUMMARY, method, scale, seed, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary))


