"""The per-problem frames the statistics read, and the grid they resample.

``per_problem``: one row per (training seed, step, benchmark, problem_id) with ``accuracy`` in
[0, 1], built from every checkpoint's ``samples.parquet`` (``checkpoint_problem_accuracy``);
``selected``: the same rows at each seed's selected checkpoint (the paper's rule,
``analysis.selection``); ``ProblemGrid``: those rows as a (seed, step, problem) array with the
benchmarks as column blocks. Pure functions on pandas frames, no file IO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from dashrepro.analysis.selection import select_best_checkpoint

#: The column id of the mean over benchmarks, as in the table cells.
AVERAGE = "average"
PER_PROBLEM_COLUMNS = ("seed", "step", "benchmark", "problem_id", "accuracy")
SELECTED_COLUMNS = ("seed", "benchmark", "problem_id", "accuracy")


def require_columns(frame: pd.DataFrame, columns: Sequence[str], name: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing columns {missing} (has {list(frame.columns)})")


def benchmark_columns(benchmarks: Sequence[str]) -> list[str]:
    return [*benchmarks, AVERAGE]


def per_problem_accuracy(samples: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Per (``by``..., benchmark, problem_id): ``accuracy`` = mean of ``correct``, ``n_samples``."""
    require_columns(samples, [*by, "benchmark", "problem_id", "correct"], "samples")
    if samples["correct"].isna().any():
        raise ValueError("samples: `correct` has missing values (ungraded samples)")
    keys = [*by, "benchmark", "problem_id"]
    grouped = samples.groupby(keys, sort=True)["correct"]
    out = grouped.agg(accuracy="mean", n_samples="count").reset_index()
    out["accuracy"] = out["accuracy"].astype(float)
    return out


def checkpoint_problem_accuracy(
    samples_by_checkpoint: Mapping[tuple[int, int], pd.DataFrame],
) -> pd.DataFrame:
    """``{(training seed, step): samples}`` -> the ``per_problem`` frame (PER_PROBLEM_COLUMNS).

    The samples' own ``seed`` column is the *generation* seed and is dropped: the seed here is
    the training seed of the run, taken from the key (the path's ``seed<s>``)."""
    if not samples_by_checkpoint:
        raise ValueError("samples_by_checkpoint is empty")
    frames = []
    for (seed, step), samples in sorted(samples_by_checkpoint.items()):
        frame = per_problem_accuracy(samples.drop(columns=["seed"], errors="ignore"))
        frames.append(frame.assign(seed=int(seed), step=int(step)))
    out = pd.concat(frames, ignore_index=True)
    return out[[*PER_PROBLEM_COLUMNS, "n_samples"]]


@dataclass(frozen=True)
class ProblemGrid:
    """Per-problem accuracies as an array (seed, step, problem), benchmarks as column blocks."""

    seeds: tuple[int, ...]
    steps: tuple[int, ...]  # ascending, so the first maximum is the earliest step
    benchmarks: tuple[str, ...]
    problems: tuple[tuple, ...]  # sorted problem ids per benchmark
    accuracy: np.ndarray  # (S, T, J), J = sum of P_b, blocks in benchmark order

    @property
    def blocks(self) -> list[slice]:
        starts = np.cumsum([0, *(len(p) for p in self.problems)])
        return [slice(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:], strict=True)]

    def benchmark_scores(self) -> np.ndarray:
        """(S, T, B) Avg@k in percent, as ``summarize_samples`` computes it."""
        return np.stack([100.0 * self.accuracy[..., b].mean(axis=-1) for b in self.blocks], -1)


def problem_grid(
    frame: pd.DataFrame, benchmarks: Sequence[str], name: str, step: bool = True
) -> ProblemGrid:
    """The full seed x step x problem grid; every cell must be present exactly once."""
    keys = (
        ["seed", "step", "benchmark", "problem_id"] if step else ["seed", "benchmark", "problem_id"]
    )
    require_columns(frame, [*keys, "accuracy"], name)
    if not len(benchmarks):
        raise ValueError("benchmarks is empty")
    if frame.empty:
        raise ValueError(f"{name} is empty")
    absent = [b for b in benchmarks if b not in set(frame["benchmark"])]
    if absent:
        raise ValueError(f"{name}: no rows for benchmarks {absent}")
    frame = frame[frame["benchmark"].isin(benchmarks)]
    dup = frame[frame.duplicated(keys, keep=False)]
    if not dup.empty:
        first = dup.iloc[0]
        raise ValueError(f"{name}: duplicate rows for {dict(first[keys])}")
    if frame["accuracy"].isna().any() or not frame["accuracy"].between(0, 1).all():
        raise ValueError(f"{name}: `accuracy` must lie in [0, 1] (a fraction, not percent)")
    seeds = tuple(sorted(int(s) for s in frame["seed"].unique()))
    steps = tuple(sorted(int(s) for s in frame["step"].unique())) if step else (0,)
    problems = tuple(
        tuple(sorted(frame.loc[frame["benchmark"] == b, "problem_id"].unique().tolist()))
        for b in benchmarks
    )
    full = pd.MultiIndex.from_tuples(
        [
            (s, t, b, p) if step else (s, b, p)
            for s in seeds
            for t in steps
            for b, probs in zip(benchmarks, problems, strict=True)
            for p in probs
        ],
        names=keys,
    )
    values = frame.set_index(keys)["accuracy"].reindex(full)
    if values.isna().any():
        holes = list(values[values.isna()].index[:5])
        raise ValueError(
            f"{name}: {int(values.isna().sum())} missing (seed, {'step, ' if step else ''}"
            f"benchmark, problem) rows, e.g. {holes}; every seed and checkpoint must be scored on "
            "the same problems"
        )
    shape = (len(seeds), len(steps), sum(len(p) for p in problems))
    return ProblemGrid(
        seeds, steps, tuple(benchmarks), problems, values.to_numpy(float).reshape(shape)
    )


def checkpoint_benchmark_scores(
    per_problem: pd.DataFrame, benchmarks: Sequence[str]
) -> pd.DataFrame:
    """Per (seed, step, benchmark): ``avg_at_k`` (percent) and ``n_problems``."""
    grid = problem_grid(per_problem, benchmarks, "per_problem")
    scores = grid.benchmark_scores()
    return pd.DataFrame(
        [
            {"seed": s, "step": t, "benchmark": b, "avg_at_k": float(scores[i, j, k]),
             "n_problems": len(grid.problems[k])}
            for i, s in enumerate(grid.seeds)
            for j, t in enumerate(grid.steps)
            for k, b in enumerate(benchmarks)
        ]
    )  # fmt: skip


def _summaries(scores: pd.DataFrame, benchmarks: Sequence[str], seed: int) -> dict:
    """One seed's ``{step: summary}`` in the shape ``select_best_checkpoint`` reads."""
    mine = scores[scores["seed"] == seed]
    out: dict[int, dict] = {}
    for row in mine.itertuples():
        out.setdefault(int(row.step), {"benchmarks": {}})["benchmarks"][row.benchmark] = {
            "avg_at_k": float(row.avg_at_k)
        }
    return out


def select_on_scores(scores: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Per seed, the paper's selection (reusing ``select_best_checkpoint``) on ``scores``."""
    require_columns(scores, ["seed", "step", "benchmark", "avg_at_k"], "scores")
    rows = []
    for seed in sorted(int(s) for s in scores["seed"].unique()):
        record = select_best_checkpoint(_summaries(scores, benchmarks, seed), benchmarks)
        rows.append(
            {"seed": seed, "selected_step": record["selected_step"],
             "selection_score": record["selection_score"], **record["benchmark_scores"]}
        )  # fmt: skip
    return pd.DataFrame(rows)


def select_checkpoints(per_problem: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Per seed: ``selected_step``, ``selection_score`` and the benchmarks' Avg@k there."""
    return select_on_scores(checkpoint_benchmark_scores(per_problem, benchmarks), benchmarks)


def selected_problem_accuracy(per_problem: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """The ``per_problem`` rows of each seed's selected checkpoint (the ``selected`` frame)."""
    chosen = select_checkpoints(per_problem, benchmarks)[["seed", "selected_step"]]
    rows = per_problem[per_problem["benchmark"].isin(benchmarks)].merge(
        chosen, left_on=["seed", "step"], right_on=["seed", "selected_step"]
    )
    return rows.drop(columns="selected_step").reset_index(drop=True)


def selected_grid(selected: pd.DataFrame, benchmarks: Sequence[str], name: str) -> ProblemGrid:
    """(S, 1, J) grid of a ``selected`` frame (one checkpoint per seed; ``step`` ignored)."""
    require_columns(selected, SELECTED_COLUMNS, name)
    return problem_grid(
        selected.drop(columns="step", errors="ignore"), benchmarks, name, step=False
    )
