"""``scipy.stats.bootstrap`` over a ``per_problem.ProblemGrid``: problem indices resampled
within each benchmark (strata) and, where asked, training seeds; a vector-valued statistic in
batches; a BCa bound that is undefined falls back to the percentile interval."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
from scipy import stats

from dashrepro.analysis.per_problem import ProblemGrid

INTERVAL_METHODS = ("percentile", "basic", "BCa")
#: Resamples per batch handed to the statistic (bounds memory: batch x S x T x P floats).
BATCH = 200


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


def bootstrap_interval(
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
    kwargs = dict(vectorized=True, paired=False, batch=BATCH, confidence_level=confidence)
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


def index_data(grid: ProblemGrid, resample_seeds: bool) -> tuple[np.ndarray, ...]:
    """The samples scipy resamples: problem indices per benchmark (stratified), then seeds."""
    data = [np.arange(len(p)) for p in grid.problems]
    if resample_seeds and len(grid.seeds) > 1:
        data.append(np.arange(len(grid.seeds)))
    return tuple(data)


def split_indices(grid: ProblemGrid, indices):
    """Problem index batches (R, P_b) shifted into global columns, and seed batches (R, S')."""
    lead, flat = _flatten(indices)
    n_bench = len(grid.benchmarks)
    columns = [idx + block.start for idx, block in zip(flat[:n_bench], grid.blocks, strict=True)]
    if len(flat) > n_bench:
        seeds = flat[n_bench]
    else:  # seeds not resampled: every replicate has all of them
        seeds = np.broadcast_to(np.arange(len(grid.seeds)), (flat[0].shape[0], len(grid.seeds)))
    return lead, columns, seeds
