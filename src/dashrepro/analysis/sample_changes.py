"""Did training change what a model writes? Sample texts against the base model's and each other's.

A short schedule can leave an adapter too small to flip any sampled token: its samples are then
the base model's, sample for sample, and a table row measures the base model, not the method.
With Hugging Face sampling, the same shard seed and the same prompts give the same draws, so
two models' samples of one (benchmark, problem, sample index) differ only where the models do.

- ``changed_fraction``: the share of samples whose text differs between two sample frames made
  under the same seeds and the same number of samples per problem (else: not comparable, None);
- ``sample_changes``: per run, its share of samples that differ from the base student's;
- ``identical_runs``: the pairs of distinct runs (same scale and seed) whose samples are
  identical on every problem.

    sample_changes({("dash", "tiny", 0): samples, ...}, {"tiny": base_student_samples})
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations

import pandas as pd

KEY = ["benchmark", "problem_id", "sample_index"]
COLUMNS = ["method", "scale", "seed", "n_samples", "comparable", "differs_from_base"]


def _indexed(samples: pd.DataFrame, benchmarks=None) -> pd.DataFrame:
    frame = samples if benchmarks is None else samples[samples["benchmark"].isin(benchmarks)]
    return frame.set_index(KEY).sort_index()


def changed_fraction(first: pd.DataFrame, second: pd.DataFrame) -> float | None:
    """The share of samples whose ``response`` differs, over the samples both frames hold of
    the benchmarks they share; None where the two were not drawn alike (other seeds, another
    number of samples per problem, other problems), so that a difference would mean nothing."""
    benchmarks = sorted(set(first["benchmark"]) & set(second["benchmark"]))
    a, b = _indexed(first, benchmarks), _indexed(second, benchmarks)
    if a.empty or not a.index.equals(b.index) or not (a["seed"] == b["seed"]).all():
        return None
    return float((a["response"] != b["response"]).mean())


def sample_changes(
    runs: Mapping[tuple[str, str, int], pd.DataFrame], base: Mapping[str, pd.DataFrame]
) -> pd.DataFrame:
    """One row per run ``(method, scale, seed)``: its samples' share that differs from the
    base student of ``base[scale]`` (NaN, ``comparable`` False, where not drawn alike)."""
    rows = []
    for (method, scale, seed), samples in sorted(runs.items()):
        fraction = changed_fraction(samples, base[scale])
        rows.append(
            {"method": method, "scale": scale, "seed": seed, "n_samples": len(samples),
             "comparable": fraction is not None,
             "differs_from_base": float("nan") if fraction is None else fraction}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def identical_runs(
    runs: Mapping[tuple[str, str, int], pd.DataFrame],
) -> list[tuple[str, int, str, str]]:
    """``(scale, seed, method, other)`` for every two methods whose samples at one scale and
    seed are the same text on every problem."""
    found = []
    for (m1, c1, s1), (m2, c2, s2) in combinations(sorted(runs), 2):
        if (c1, s1) == (c2, s2) and changed_fraction(runs[(m1, c1, s1)], runs[(m2, c2, s2)]) == 0:
            found.append((c1, s1, m1, m2))
    return found
