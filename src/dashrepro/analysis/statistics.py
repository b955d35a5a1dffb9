"""Statistics beyond the paper's tables: clustered errors, paired differences, selection optimism.

Issue 13, items 2 and 3, as pure functions on pandas frames (no file IO, deterministic given a
seed); the Snakemake rules read the files and call them.

The unit of evaluation is the *problem*: a benchmark's Avg@k is 100 x the mean over problems of
the per-problem fraction of correct samples (``evaluation.scoring.summarize_samples``), so the k
samples of a problem, and the same problem under different training seeds, are not independent.
Every error and interval below therefore resamples or clusters by problem (within benchmark:
benchmarks are disjoint problem sets, i.e. strata), and, where stated, by training seed.

Inputs, one (method, scale) at a time:

* ``per_problem``: one row per (seed, step, benchmark, problem_id) with ``accuracy`` in [0, 1]
  (``checkpoint_problem_accuracy`` builds it from the ``samples.parquet`` of every checkpoint);
  ``seed`` is the *training* seed of the run (the path's ``seed<s>``), not the generation seed
  stored in the samples.
* ``selected``: the same rows at each seed's selected checkpoint only
  (``selected_problem_accuracy``; selection is the paper's rule, ``analysis.selection``).

Definitions (percent points throughout; P_b problems of benchmark b, S seeds, B benchmarks):

* cell value: mean over seeds of the selected checkpoint's Avg@k (= the table cell); the
  ``average`` column is the mean of the benchmark values.
* seed std: sample std (ddof = 1) over seeds of the selected Avg@k (the table's std), and of the
  per-seed mean over benchmarks for ``average``.
* clustered SE (by problem): SE_b = scipy.stats.sem(ybar_p), ybar_p = 100 x mean over seeds of
  problem p's accuracy, i.e. sd(ybar_p, ddof=1)/sqrt(P_b); SE_avg = sqrt(sum_b SE_b^2)/B. For
  one seed it equals ``summarize_samples``' stderr. It is the cluster-robust (G/(G-1)) standard
  error of the balanced mean and is conditional on the trained seeds (a seed effect shared by
  all problems is the seed std's business, and the seed-resampling bootstraps' below).
* paired difference vs a reference (OPSD): d = cell(method) - cell(reference) on the same
  seeds and problems; interval from ``scipy.stats.bootstrap`` (BCa by default) resampling
  problems (stratified by benchmark) and, with two or more seeds, seeds, each draw applied to
  both methods (paired). BCa, not a t interval: per-problem accuracies are bounded and pile up
  at 0 and 1, and the same resampling serves the stratified ``average`` column.
* selection optimism: a bootstrap (``scipy.stats.bootstrap`` over index arrays) over problems
  (stratified) and seeds; each replicate redoes the paper's selection on its resampled problems.
  For replicate r, drawn seeds s and original choice t^_s, replicate choice t*_s:
  opt_r = mean_s [(A_r(s, t*_s) - A_r(s, t^_s)) - (A(s, t*_s) - A(s, t^_s))], A_r on the
  replicate's problems, A on all problems; optimism = mean_r opt_r. This is Harrell's optimism
  (A_r(t*) - A(t*)) minus the control variate A_r(t^) - A(t^), whose bootstrap expectation is
  exactly 0 (a mean is unbiased under resampling): same estimand, less Monte Carlo noise, and it
  is exactly 0 when all checkpoints are identical and >= 0 on the ``average`` column (both
  brackets are maximised by the choice made on their own data). ``corrected = value - optimism``.
  The interval is scipy's basic bootstrap interval of the re-selected cell value (2 x value
  minus the replicates' quantiles, so the replicates' own selection bias is subtracted): problem,
  seed and selection noise together. With many near-equal checkpoints the bootstrap is known to
  under-estimate selection bias (it is an estimate, not a bound).
* held-out selection: per seed, select on validation benchmarks' mean Avg@k (earliest on ties),
  report the test benchmarks' Avg@k of that checkpoint, beside the paper's best-on-test rule.
* reproduction gap: every published cell (and every cell of ours without one) with both values,
  ours - published, our interval and whether the published value lies in it; nothing dropped.

    from dashrepro.analysis import statistics as st
    pp = st.checkpoint_problem_accuracy({(seed, step): samples_frame, ...})
    st.cell_statistics(pp, ["aime2024", "aime2025", "hmmt_feb2025"])
    st.selection_optimism(pp, benchmarks, n_resamples=2000, seed=0)

Tests: ``pytest tests/analysis/test_statistics.py``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from dashrepro.analysis.registry import OURS
from dashrepro.analysis.selection import select_best_checkpoint

#: The column id of the mean over benchmarks, as in the table cells.
AVERAGE = "average"
PER_PROBLEM_COLUMNS = ("seed", "step", "benchmark", "problem_id", "accuracy")
SELECTED_COLUMNS = ("seed", "benchmark", "problem_id", "accuracy")
CELL_KEY = ("table", "row", "scale", "column")
GAP_STATUSES = ("compared", "missing_ours", "missing_published")
INTERVAL_METHODS = ("percentile", "basic", "BCa")
#: Resamples per batch handed to the statistic (bounds memory: batch x S x T x P floats).
_BATCH = 200


def _require(frame: pd.DataFrame, columns: Sequence[str], name: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name}: missing columns {missing} (has {list(frame.columns)})")


def _columns(benchmarks: Sequence[str]) -> list[str]:
    return [*benchmarks, AVERAGE]


# --------------------------------------------------------------------------- per-problem input


def per_problem_accuracy(samples: pd.DataFrame, by: Sequence[str] = ()) -> pd.DataFrame:
    """Per (``by``..., benchmark, problem_id): ``accuracy`` = mean of ``correct``, ``n_samples``."""
    _require(samples, [*by, "benchmark", "problem_id", "correct"], "samples")
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
class _Grid:
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


def _grid(frame: pd.DataFrame, benchmarks: Sequence[str], name: str, step: bool = True) -> _Grid:
    """The full seed x step x problem grid; every cell must be present exactly once."""
    keys = (
        ["seed", "step", "benchmark", "problem_id"] if step else ["seed", "benchmark", "problem_id"]
    )
    _require(frame, [*keys, "accuracy"], name)
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
    return _Grid(seeds, steps, tuple(benchmarks), problems, values.to_numpy(float).reshape(shape))


def checkpoint_benchmark_scores(
    per_problem: pd.DataFrame, benchmarks: Sequence[str]
) -> pd.DataFrame:
    """Per (seed, step, benchmark): ``avg_at_k`` (percent) and ``n_problems``."""
    grid = _grid(per_problem, benchmarks, "per_problem")
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


def _select(scores: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Per seed, the paper's selection (reusing ``select_best_checkpoint``) on ``scores``."""
    _require(scores, ["seed", "step", "benchmark", "avg_at_k"], "scores")
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
    return _select(checkpoint_benchmark_scores(per_problem, benchmarks), benchmarks)


def selected_problem_accuracy(per_problem: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """The ``per_problem`` rows of each seed's selected checkpoint (the ``selected`` frame)."""
    chosen = select_checkpoints(per_problem, benchmarks)[["seed", "selected_step"]]
    rows = per_problem[per_problem["benchmark"].isin(benchmarks)].merge(
        chosen, left_on=["seed", "step"], right_on=["seed", "selected_step"]
    )
    return rows.drop(columns="selected_step").reset_index(drop=True)


# --------------------------------------------------------------------------- per-cell statistics


def _selected_grid(selected: pd.DataFrame, benchmarks: Sequence[str], name: str) -> _Grid:
    """(S, 1, J) grid of a ``selected`` frame (one checkpoint per seed; ``step`` ignored)."""
    _require(selected, SELECTED_COLUMNS, name)
    return _grid(selected.drop(columns="step", errors="ignore"), benchmarks, name, step=False)


def clustered_standard_error(selected: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Per column: ``value`` (mean over seeds of Avg@k) and ``se`` clustered by problem.

    SE_b = scipy.stats.sem over problems of 100 x (mean over seeds of the problem's accuracy);
    SE_average = sqrt(sum_b SE_b^2) / B (benchmarks are disjoint, independent strata)."""
    grid = _selected_grid(selected, benchmarks, "selected")
    per_seed = grid.benchmark_scores()[:, 0, :]  # (S, B)
    rows, ses = [], []
    for k, (bench, block) in enumerate(zip(benchmarks, grid.blocks, strict=True)):
        cluster_means = 100.0 * grid.accuracy[:, 0, block].mean(axis=0)
        n = cluster_means.size
        se = float(stats.sem(cluster_means, ddof=1)) if n > 1 else math.nan
        ses.append(se)
        rows.append({"column": bench, "value": float(per_seed[:, k].mean()), "se": se,
                     "n_problems": n, "n_seeds": len(grid.seeds)})  # fmt: skip
    rows.append(
        {"column": AVERAGE, "value": float(np.mean([r["value"] for r in rows])),
         "se": math.sqrt(sum(se**2 for se in ses)) / len(ses),
         "n_problems": grid.accuracy.shape[-1], "n_seeds": len(grid.seeds)}
    )  # fmt: skip
    return pd.DataFrame(rows)


def seed_standard_deviation(selected: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Per column: sample std (ddof = 1) over seeds of the selected Avg@k (NaN for one seed)."""
    grid = _selected_grid(selected, benchmarks, "selected")
    per_seed = grid.benchmark_scores()[:, 0, :]
    per_seed = np.column_stack([per_seed, per_seed.mean(axis=1)])
    std = (
        per_seed.std(axis=0, ddof=1) if len(grid.seeds) > 1 else np.full(per_seed.shape[1], np.nan)
    )
    return pd.DataFrame({"column": _columns(benchmarks), "seed_std": std})


def cell_statistics(per_problem: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """One (method, scale) cell per column: value, seed std, clustered SE, counts, selections."""
    chosen = select_checkpoints(per_problem, benchmarks)
    selected = selected_problem_accuracy(per_problem, benchmarks)
    out = clustered_standard_error(selected, benchmarks)
    out = out.merge(seed_standard_deviation(selected, benchmarks), on="column")
    out["seeds"] = ",".join(str(s) for s in chosen["seed"])
    out["selected_steps"] = ",".join(str(s) for s in chosen["selected_step"])
    return out.rename(columns={"se": "clustered_se"})[
        ["column", "value", "seed_std", "clustered_se", "n_seeds", "n_problems", "seeds",
         "selected_steps"]
    ]  # fmt: skip


# --------------------------------------------------------------------------- bootstrap plumbing


def _flatten(indices: Sequence[np.ndarray]) -> tuple[tuple[int, ...], list[np.ndarray]]:
    """Broadcast scipy's (..., n_i) index batches to one leading shape, flattened to (R, n_i)."""
    lead = np.broadcast_shapes(*(a.shape[:-1] for a in indices))
    flat = [
        np.broadcast_to(np.asarray(a), (*lead, a.shape[-1]))
        .reshape(-1, a.shape[-1])
        .astype(np.intp)
        for a in indices
    ]
    return lead, flat


def _bootstrap(
    data: tuple[np.ndarray, ...],
    statistic,
    *,
    n_resamples: int,
    seed: int,
    confidence: float,
    method: str,
):
    """``scipy.stats.bootstrap`` with a seeded Generator, for a vector-valued ``statistic``:
    per output the interval bounds and the interval method used, and the replicates (outputs x
    resamples). A BCa bound that is undefined (a degenerate bootstrap
    distribution, e.g. every problem's difference equal) falls back to the percentile interval
    of the same replicates, which for a constant distribution is that constant."""
    if method not in INTERVAL_METHODS:
        raise ValueError(f"method must be one of {INTERVAL_METHODS}, not {method!r}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, not {n_resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), not {confidence}")
    kwargs = dict(vectorized=True, paired=False, batch=_BATCH, confidence_level=confidence)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        # BCa's acceleration is 0/0 on a constant output; that bound is NaN and replaced below.
        warnings.filterwarnings("ignore", "(invalid value|divide by zero)", RuntimeWarning)
        result = stats.bootstrap(
            data, statistic, n_resamples=n_resamples, method=method,
            rng=np.random.default_rng(seed), **kwargs,
        )  # fmt: skip
        low = np.atleast_1d(np.asarray(result.confidence_interval.low, float)).copy()
        high = np.atleast_1d(np.asarray(result.confidence_interval.high, float)).copy()
        used = np.full(low.shape, method, dtype=object)
        bad = np.isnan(low) | np.isnan(high)
        if bad.any():
            fallback = stats.bootstrap(
                data, statistic, n_resamples=0, method="percentile", bootstrap_result=result,
                rng=np.random.default_rng(seed), **kwargs,
            )  # fmt: skip
            low[bad] = np.atleast_1d(fallback.confidence_interval.low)[bad]
            high[bad] = np.atleast_1d(fallback.confidence_interval.high)[bad]
            used[bad] = "percentile"
    return low, high, used, np.atleast_2d(result.bootstrap_distribution)


def _index_data(grid: _Grid, resample_seeds: bool) -> tuple[np.ndarray, ...]:
    """The samples scipy resamples: problem indices per benchmark (stratified), then seeds."""
    data = [np.arange(len(p)) for p in grid.problems]
    if resample_seeds and len(grid.seeds) > 1:
        data.append(np.arange(len(grid.seeds)))
    return tuple(data)


def _split(grid: _Grid, indices):
    """Problem index batches (R, P_b) shifted into global columns, and seed batches (R, S')."""
    lead, flat = _flatten(indices)
    n_bench = len(grid.benchmarks)
    columns = [idx + block.start for idx, block in zip(flat[:n_bench], grid.blocks, strict=True)]
    if len(flat) > n_bench:
        seeds = flat[n_bench]
    else:  # seeds not resampled: every replicate has all of them
        seeds = np.broadcast_to(np.arange(len(grid.seeds)), (flat[0].shape[0], len(grid.seeds)))
    return lead, columns, seeds


# --------------------------------------------------------------------------- paired difference


def paired_difference(
    method_selected: pd.DataFrame,
    reference_selected: pd.DataFrame,
    benchmarks: Sequence[str],
    *,
    confidence: float = 0.95,
    n_resamples: int = 9999,
    seed: int = 0,
    interval: str = "BCa",
    resample_seeds: bool = True,
) -> pd.DataFrame:
    """Per column: method cell - reference cell on the same seeds and problems, with a CI.

    Both frames are ``selected`` frames (each seed's selected checkpoint). The interval is
    ``scipy.stats.bootstrap`` over problems (stratified by benchmark) and, when
    ``resample_seeds`` and there are two or more seeds, over seeds, each resample applied to
    both methods (pairing). ``se_clustered`` is the problem-clustered SE of the difference
    (sem of the per-problem, seed-averaged differences; strata combined as for a cell)."""
    mine = _selected_grid(method_selected, benchmarks, "method_selected")
    ref = _selected_grid(reference_selected, benchmarks, "reference_selected")
    if mine.seeds != ref.seeds:
        raise ValueError(
            f"paired_difference: seeds differ: method has {list(mine.seeds)}, reference has "
            f"{list(ref.seeds)}; pair on the common seeds"
        )
    for bench, a, b in zip(benchmarks, mine.problems, ref.problems, strict=True):
        if a != b:
            only_m = sorted(set(a) - set(b))[:5]
            only_r = sorted(set(b) - set(a))[:5]
            raise ValueError(
                f"paired_difference: problem sets of {bench!r} differ: only in the method "
                f"{only_m}, only in the reference {only_r}"
            )
    diff = _Grid(mine.seeds, (0,), mine.benchmarks, mine.problems, mine.accuracy - ref.accuracy)
    d = 100.0 * diff.accuracy[:, 0, :]  # (S, J) paired differences in points
    n_bench = len(benchmarks)

    def statistic(*indices, axis=-1):
        lead, columns, seeds = _split(diff, indices)
        per_bench = np.stack(
            [d[seeds[:, :, None], cols[:, None, :]].mean(axis=(1, 2)) for cols in columns], -1
        )  # (R, B): mean over drawn seeds and drawn problems
        out = np.column_stack([per_bench, per_bench.mean(axis=1)])
        return out.T.reshape(n_bench + 1, *lead)

    low, high, used, _ = _bootstrap(
        _index_data(diff, resample_seeds), statistic, n_resamples=n_resamples, seed=seed,
        confidence=confidence, method=interval,
    )  # fmt: skip
    cells_m = clustered_standard_error(method_selected, benchmarks).set_index("column")
    cells_r = clustered_standard_error(reference_selected, benchmarks).set_index("column")
    ses = [
        float(stats.sem(d[:, block].mean(axis=0), ddof=1)) if block.stop - block.start > 1
        else math.nan
        for block in diff.blocks
    ]  # fmt: skip
    ses.append(math.sqrt(sum(se**2 for se in ses)) / len(ses))
    rows = []
    for k, column in enumerate(_columns(benchmarks)):
        value_m, value_r = float(cells_m.at[column, "value"]), float(cells_r.at[column, "value"])
        rows.append(
            {"column": column, "method_value": value_m, "reference_value": value_r,
             "difference": value_m - value_r, "se_clustered": ses[k],
             "ci_low": float(low[k]), "ci_high": float(high[k]),
             "excludes_zero": bool(low[k] > 0 or high[k] < 0), "confidence": confidence,
             "interval": f"bootstrap {used[k]}", "n_seeds": len(diff.seeds),
             "seeds_resampled": bool(resample_seeds and len(diff.seeds) > 1),
             "n_problems": int(d.shape[1] if column == AVERAGE else len(diff.problems[k])),
             "n_resamples": n_resamples}
        )  # fmt: skip
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- selection optimism


def selection_optimism(
    per_problem: pd.DataFrame,
    benchmarks: Sequence[str],
    *,
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    interval: str = "basic",
    resample_seeds: bool = True,
) -> pd.DataFrame:
    """Per column: the paper's cell ``value``, the selection ``optimism``, ``corrected`` value,
    and the interval of the re-selected cell value, from a bootstrap over problems and seeds
    that redoes best-checkpoint selection inside every replicate (definition in the module
    docstring). ``reselection_rate``: the fraction of (replicate, seed) whose choice differs
    from the original one. The default interval is scipy's ``basic`` one (2 x value minus the
    replicate quantiles): a replicate re-selects on its own data, so its values sit above the
    estimate by about the selection bias; the basic interval subtracts that shift where the
    percentile interval would add it a second time, and BCa's jackknife acceleration assumes a
    smooth statistic, which one with an argmax inside is not."""
    grid = _grid(per_problem, benchmarks, "per_problem")
    n_bench = len(benchmarks)
    full = grid.benchmark_scores()  # (S, T, B): A(s, t) on all problems
    scores = checkpoint_benchmark_scores(per_problem, benchmarks)
    chosen = _select(scores, benchmarks)
    position = {t: j for j, t in enumerate(grid.steps)}
    t_hat = np.array([position[t] for t in chosen["selected_step"]])  # seeds in grid order
    steps = np.arange(len(grid.steps))

    def at(x: np.ndarray, t: np.ndarray) -> np.ndarray:  # x (R, S', T, B), t (R, S') -> (R, S', B)
        return np.take_along_axis(x, t[:, :, None, None], axis=2)[:, :, 0, :]

    def statistic(*indices, axis=-1):
        lead, columns, seeds = _split(grid, indices)
        replicate = np.stack(
            [
                100.0 * grid.accuracy[seeds[:, :, None, None], steps[None, None, :, None],
                                      cols[:, None, None, :]].mean(axis=-1)
                for cols in columns
            ],
            axis=-1,
        )  # (R, S', T, B): A_r(s, t)  # fmt: skip
        t_star = replicate.mean(axis=-1).argmax(axis=-1)  # first maximum: earliest step
        t_orig = t_hat[seeds]
        base = full[seeds]  # (R, S', T, B)
        value = at(replicate, t_star).mean(axis=1)  # (R, B)
        optimism = (
            (at(replicate, t_star) - at(replicate, t_orig)) - (at(base, t_star) - at(base, t_orig))
        ).mean(axis=1)
        changed = (t_star != t_orig).mean(axis=1)
        out = np.column_stack([value, value.mean(axis=1), optimism, optimism.mean(axis=1), changed])
        return out.T.reshape(2 * n_bench + 3, *lead)

    low, high, used, replicates = _bootstrap(
        _index_data(grid, resample_seeds), statistic, n_resamples=n_resamples, seed=seed,
        confidence=confidence, method=interval,
    )  # fmt: skip
    value = full[np.arange(len(grid.seeds)), t_hat, :].mean(axis=0)  # the table cell
    values = [*value, float(np.mean(value))]
    rows = []
    for k, column in enumerate(_columns(benchmarks)):
        optimism = float(replicates[n_bench + 1 + k].mean())
        rows.append(
            {"column": column, "value": float(values[k]), "optimism": optimism,
             "corrected": float(values[k]) - optimism,
             "ci_low": float(low[k]), "ci_high": float(high[k]), "confidence": confidence,
             "interval": f"bootstrap {used[k]}",
             "reselection_rate": float(replicates[-1].mean()), "n_seeds": len(grid.seeds),
             "seeds_resampled": bool(resample_seeds and len(grid.seeds) > 1),
             "n_checkpoints": len(grid.steps), "n_resamples": n_resamples}
        )  # fmt: skip
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- held-out selection


def heldout_selection(
    validation_scores: pd.DataFrame,
    test_scores: pd.DataFrame,
    benchmarks: Sequence[str],
) -> pd.DataFrame:
    """The held-out rule beside the paper's: per seed, pick the checkpoint with the best mean
    validation Avg@k (earliest on ties) and report its test Avg@k; ``best_on_test`` selects on
    the test benchmarks themselves (the paper's rule). Both frames: seed, step, benchmark,
    avg_at_k (``checkpoint_benchmark_scores``; the validation frame holds only validation
    benchmarks). Returns per (rule, column): value (mean over seeds), std (ddof = 1), seeds and
    the selected steps."""
    _require(validation_scores, ["seed", "step", "benchmark", "avg_at_k"], "validation_scores")
    _require(test_scores, ["seed", "step", "benchmark", "avg_at_k"], "test_scores")
    overlap = sorted(set(validation_scores["benchmark"]) & set(benchmarks))
    if overlap:
        raise ValueError(f"heldout_selection: validation benchmarks {overlap} are test benchmarks")
    val_keys = set(map(tuple, validation_scores[["seed", "step"]].drop_duplicates().to_numpy()))
    test_keys = set(map(tuple, test_scores[["seed", "step"]].drop_duplicates().to_numpy()))
    if val_keys != test_keys:
        raise ValueError(
            "heldout_selection: validation and test cover different (seed, step) checkpoints: "
            f"only validation {sorted(val_keys - test_keys)[:5]}, "
            f"only test {sorted(test_keys - val_keys)[:5]}"
        )
    validation = sorted(validation_scores["benchmark"].unique())
    heldout = _select(validation_scores, validation)[["seed", "selected_step"]]
    test = test_scores.set_index(["seed", "step", "benchmark"])["avg_at_k"]
    rules = {
        "heldout": heldout,
        "best_on_test": _select(test_scores, benchmarks)[["seed", "selected_step"]],
    }
    rows = []
    for rule, chosen in rules.items():
        per_seed = np.array(
            [[float(test[(s, t, b)]) for b in benchmarks] for s, t in chosen.to_numpy()]
        )
        per_seed = np.column_stack([per_seed, per_seed.mean(axis=1)])
        for k, column in enumerate(_columns(benchmarks)):
            std = float(per_seed[:, k].std(ddof=1)) if len(per_seed) > 1 else math.nan
            rows.append(
                {"rule": rule, "column": column, "value": float(per_seed[:, k].mean()),
                 "std": std, "n_seeds": len(per_seed),
                 "seeds": ",".join(str(int(s)) for s in chosen["seed"]),
                 "selected_steps": ",".join(str(int(t)) for t in chosen["selected_step"]),
                 "validation_benchmarks": ",".join(validation)}
            )  # fmt: skip
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- reproduction gap


def reproduction_gap(
    our_cells: pd.DataFrame,
    published: pd.DataFrame,
    intervals: pd.DataFrame | None = None,
    tables: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Every published cell beside ours: one row per (table, row, scale, column) of either.

    ``our_cells``: table cells (``analysis.tables._render.CELL_COLUMNS``); rows whose ``source``
    is not ours (copied external rows) are not reproductions and are ignored. ``published``:
    ``config/published/dash_paper.csv``. ``intervals``: table, row, scale, column, ci_low,
    ci_high (default: those columns of ``our_cells`` when present). ``tables``: the tables to
    compare (default: every table of either). Columns: ours, published, difference (ours -
    published), ci_low, ci_high, paper_inside_interval (NA without both values and an interval;
    bounds inclusive), status (compared / missing_ours / missing_published), published_source."""
    _require(our_cells, [*CELL_KEY, "value"], "our_cells")
    _require(published, [*CELL_KEY, "value"], "published")
    ours = our_cells
    if "source" in ours.columns:
        ours = ours[ours["source"].isna() | (ours["source"] == OURS)]
    if intervals is None:
        has = {"ci_low", "ci_high"} <= set(ours.columns)
        intervals = ours[[*CELL_KEY, "ci_low", "ci_high"]] if has else None
    if tables is not None:
        ours = ours[ours["table"].isin(tables)]
        published = published[published["table"].isin(tables)]
    for frame, name in ((ours, "our_cells"), (published, "published")):
        dup = frame[frame.duplicated(list(CELL_KEY), keep=False)]
        if not dup.empty:
            raise ValueError(f"{name}: duplicate cells, e.g. {dict(dup.iloc[0][list(CELL_KEY)])}")
    left = published[list(CELL_KEY)].assign(
        published=published["value"].astype(float),
        published_source=published["source"] if "source" in published.columns else None,
        _order=np.arange(len(published)),
    )
    right = ours[list(CELL_KEY)].assign(
        ours=ours["value"].astype(float), _order_ours=np.arange(len(ours))
    )
    gap = left.merge(right, on=list(CELL_KEY), how="outer")
    if intervals is not None:
        _require(intervals, [*CELL_KEY, "ci_low", "ci_high"], "intervals")
        dup = intervals[intervals.duplicated(list(CELL_KEY), keep=False)]
        if not dup.empty:
            raise ValueError(
                f"intervals: duplicate cells, e.g. {dict(dup.iloc[0][list(CELL_KEY)])}"
            )
        gap = gap.merge(intervals[[*CELL_KEY, "ci_low", "ci_high"]], on=list(CELL_KEY), how="left")
    else:
        gap = gap.assign(ci_low=math.nan, ci_high=math.nan)
    gap["ci_low"] = gap["ci_low"].astype(float)
    gap["ci_high"] = gap["ci_high"].astype(float)
    have_ours, have_paper = gap["ours"].notna(), gap["published"].notna()
    gap["status"] = np.select(
        [have_ours & have_paper, have_paper], ["compared", "missing_ours"], "missing_published"
    )
    gap["difference"] = gap["ours"] - gap["published"]
    checkable = have_ours & have_paper & gap["ci_low"].notna() & gap["ci_high"].notna()
    inside = (gap["ci_low"] <= gap["published"]) & (gap["published"] <= gap["ci_high"])
    gap["paper_inside_interval"] = pd.array(
        [bool(i) if c else pd.NA for i, c in zip(inside, checkable, strict=True)], dtype="boolean"
    )
    # Published order (the paper's), then our cells that the paper does not have, in our order.
    gap = gap.sort_values(["_order", "_order_ours"], na_position="last", kind="stable")
    columns = [*CELL_KEY, "ours", "published", "difference", "ci_low", "ci_high",
               "paper_inside_interval", "status", "published_source"]  # fmt: skip
    return gap[columns].reset_index(drop=True)
