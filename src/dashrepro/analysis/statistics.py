"""Statistics beyond the paper's tables: clustered errors, paired differences, selection optimism.

Pure functions on the per-problem frames of ``analysis.per_problem`` (no file IO, deterministic
given a seed); the Snakemake rules read the files and call them. The unit of evaluation is the
problem: every error and interval resamples or clusters by problem (stratified by benchmark)
and, where stated, by training seed. The definitions, with their reasons, are in
docs/statistics.md.

    from dashrepro.analysis import per_problem as pp, statistics as st
    frame = pp.checkpoint_problem_accuracy({(seed, step): samples_frame, ...})
    st.cell_statistics(frame, ["aime2024", "aime2025", "hmmt_feb2025"])
    st.selection_optimism(frame, benchmarks, n_resamples=2000, seed=0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats

from dashrepro.analysis.bootstrap import (
    bootstrap_interval,
    index_data,
    split_indices,
)
from dashrepro.analysis.per_problem import (
    AVERAGE,
    ProblemGrid,
    benchmark_columns,
    checkpoint_benchmark_scores,
    problem_grid,
    require_columns,
    select_checkpoints,
    select_on_scores,
    selected_grid,
    selected_problem_accuracy,
)
from dashrepro.analysis.registry import OURS

CELL_KEY = ("table", "row", "scale", "column")
GAP_STATUSES = ("compared", "missing_ours", "missing_published")


# --------------------------------------------------------------------------- per-cell statistics


def clustered_standard_error(selected: pd.DataFrame, benchmarks: Sequence[str]) -> pd.DataFrame:
    """Per column: ``value`` (mean over seeds of Avg@k) and ``se`` clustered by problem.

    SE_b = scipy.stats.sem over problems of 100 x (mean over seeds of the problem's accuracy);
    SE_average = sqrt(sum_b SE_b^2) / B (benchmarks are disjoint, independent strata)."""
    grid = selected_grid(selected, benchmarks, "selected")
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
    grid = selected_grid(selected, benchmarks, "selected")
    per_seed = grid.benchmark_scores()[:, 0, :]
    per_seed = np.column_stack([per_seed, per_seed.mean(axis=1)])
    std = (
        per_seed.std(axis=0, ddof=1) if len(grid.seeds) > 1 else np.full(per_seed.shape[1], np.nan)
    )
    return pd.DataFrame({"column": benchmark_columns(benchmarks), "seed_std": std})


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
    diff = _difference_grid(method_selected, reference_selected, benchmarks)
    d = 100.0 * diff.accuracy[:, 0, :]  # (S, J) paired differences in points
    n_bench = len(benchmarks)

    def statistic(*indices, axis=-1):
        lead, columns, seeds = split_indices(diff, indices)
        per_bench = np.stack(
            [d[seeds[:, :, None], cols[:, None, :]].mean(axis=(1, 2)) for cols in columns], -1
        )  # (R, B): mean over drawn seeds and drawn problems
        out = np.column_stack([per_bench, per_bench.mean(axis=1)])
        return out.T.reshape(n_bench + 1, *lead)

    low, high, used, _ = bootstrap_interval(
        index_data(diff, resample_seeds), statistic, n_resamples=n_resamples, seed=seed,
        confidence=confidence, method=interval,
    )  # fmt: skip
    cells_m = clustered_standard_error(method_selected, benchmarks).set_index("column")
    cells_r = clustered_standard_error(reference_selected, benchmarks).set_index("column")
    ses = _clustered_difference_se(d, diff)
    rows = []
    for k, column in enumerate(benchmark_columns(benchmarks)):
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


def _difference_grid(
    method_selected: pd.DataFrame, reference_selected: pd.DataFrame, benchmarks: Sequence[str]
) -> ProblemGrid:
    """The (S, 1, J) grid of method - reference accuracies; both must have the same seeds and
    the same problems of each benchmark (``ValueError`` naming the difference otherwise)."""
    mine = selected_grid(method_selected, benchmarks, "method_selected")
    ref = selected_grid(reference_selected, benchmarks, "reference_selected")
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
    return ProblemGrid(
        mine.seeds, (0,), mine.benchmarks, mine.problems, mine.accuracy - ref.accuracy
    )


def _clustered_difference_se(d: np.ndarray, diff: ProblemGrid) -> list[float]:
    """Per benchmark the sem of the per-problem, seed-averaged differences ``d`` (S, J), then
    the strata combined as for a cell (the ``average`` column)."""
    ses = [
        float(stats.sem(d[:, block].mean(axis=0), ddof=1)) if block.stop - block.start > 1
        else math.nan
        for block in diff.blocks
    ]  # fmt: skip
    ses.append(math.sqrt(sum(se**2 for se in ses)) / len(ses))
    return ses


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
    that redoes best-checkpoint selection inside every replicate (definition in
    docs/statistics.md). ``reselection_rate``: the fraction of (replicate, seed) whose choice differs
    from the original one. The default interval is scipy's ``basic`` one (2 x value minus the
    replicate quantiles): a replicate re-selects on its own data, so its values sit above the
    estimate by about the selection bias; the basic interval subtracts that shift where the
    percentile interval would add it a second time, and BCa's jackknife acceleration assumes a
    smooth statistic, which one with an argmax inside is not."""
    grid = problem_grid(per_problem, benchmarks, "per_problem")
    n_bench = len(benchmarks)
    full = grid.benchmark_scores()  # (S, T, B): A(s, t) on all problems
    scores = checkpoint_benchmark_scores(per_problem, benchmarks)
    chosen = select_on_scores(scores, benchmarks)
    position = {t: j for j, t in enumerate(grid.steps)}
    t_hat = np.array([position[t] for t in chosen["selected_step"]])  # seeds in grid order
    statistic = _reselection_statistic(grid, full, t_hat)
    low, high, used, replicates = bootstrap_interval(
        index_data(grid, resample_seeds), statistic, n_resamples=n_resamples, seed=seed,
        confidence=confidence, method=interval,
    )  # fmt: skip
    value = full[np.arange(len(grid.seeds)), t_hat, :].mean(axis=0)  # the table cell
    values = [*value, float(np.mean(value))]
    rows = []
    for k, column in enumerate(benchmark_columns(benchmarks)):
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


def _at(x: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``x`` (R, S', T, B) at step indices ``t`` (R, S'): (R, S', B)."""
    return np.take_along_axis(x, t[:, :, None, None], axis=2)[:, :, 0, :]


def _reselection_statistic(grid: ProblemGrid, full: np.ndarray, t_hat: np.ndarray):
    """The bootstrap statistic of ``selection_optimism``: per replicate the re-selected cell
    value, the optimism (per benchmark and averaged) and the re-selection rate. ``full`` is
    A(s, t) on all problems (S, T, B); ``t_hat`` each seed's original choice."""
    n_bench = len(grid.benchmarks)
    steps = np.arange(len(grid.steps))

    def statistic(*indices, axis=-1):
        lead, columns, seeds = split_indices(grid, indices)
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
        value = _at(replicate, t_star).mean(axis=1)  # (R, B)
        optimism = (
            (_at(replicate, t_star) - _at(replicate, t_orig))
            - (_at(base, t_star) - _at(base, t_orig))
        ).mean(axis=1)
        changed = (t_star != t_orig).mean(axis=1)
        out = np.column_stack([value, value.mean(axis=1), optimism, optimism.mean(axis=1), changed])
        return out.T.reshape(2 * n_bench + 3, *lead)

    return statistic


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
    require_columns(
        validation_scores, ["seed", "step", "benchmark", "avg_at_k"], "validation_scores"
    )
    require_columns(test_scores, ["seed", "step", "benchmark", "avg_at_k"], "test_scores")
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
    heldout = select_on_scores(validation_scores, validation)[["seed", "selected_step"]]
    test = test_scores.set_index(["seed", "step", "benchmark"])["avg_at_k"]
    rules = {
        "heldout": heldout,
        "best_on_test": select_on_scores(test_scores, benchmarks)[["seed", "selected_step"]],
    }
    rows = []
    for rule, chosen in rules.items():
        per_seed = np.array(
            [[float(test[(s, t, b)]) for b in benchmarks] for s, t in chosen.to_numpy()]
        )
        per_seed = np.column_stack([per_seed, per_seed.mean(axis=1)])
        for k, column in enumerate(benchmark_columns(benchmarks)):
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


def _refuse_duplicate_cells(frame: pd.DataFrame, name: str) -> None:
    """``ValueError`` naming one cell that ``frame`` holds twice."""
    dup = frame[frame.duplicated(list(CELL_KEY), keep=False)]
    if not dup.empty:
        raise ValueError(f"{name}: duplicate cells, e.g. {dict(dup.iloc[0][list(CELL_KEY)])}")


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
    require_columns(our_cells, [*CELL_KEY, "value"], "our_cells")
    require_columns(published, [*CELL_KEY, "value"], "published")
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
        _refuse_duplicate_cells(frame, name)
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
        require_columns(intervals, [*CELL_KEY, "ci_low", "ci_high"], "intervals")
        _refuse_duplicate_cells(intervals, "intervals")
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
