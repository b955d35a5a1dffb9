"""Tests for dashrepro.analysis.bootstrap: the seeded interval of a vector statistic, its BCa
fallback, and the stratified index data and index batches over a ``ProblemGrid``."""

from __future__ import annotations

import numpy as np
import pytest

from dashrepro.analysis.bootstrap import (
    INTERVAL_METHODS,
    bootstrap_interval,
    index_data,
    split_indices,
)
from dashrepro.analysis.per_problem import ProblemGrid

VALUES = np.array([1.0, 2.0, 3.0, 4.0, 10.0])  # mean 4
CONSTANT = np.full(5, 2.0)


def _mean_and_constant(idx, axis=-1):
    """Two outputs per resample: the mean of the drawn VALUES, and of a constant (always 2)."""
    return np.stack([VALUES[idx].mean(axis=-1), CONSTANT[idx].mean(axis=-1)])


def _mean(idx, axis=-1):
    return VALUES[idx].mean(axis=-1)


def _interval(statistic=_mean_and_constant, **kwargs):
    options = {"n_resamples": 400, "seed": 0, "confidence": 0.9, "method": "percentile"}
    return bootstrap_interval((np.arange(len(VALUES)),), statistic, **{**options, **kwargs})


def _grid(n_seeds: int, accuracy=None) -> ProblemGrid:
    """Two benchmarks: b1 with two problems (columns 0-1), b2 with three (columns 2-4)."""
    return ProblemGrid(
        seeds=tuple(range(1, n_seeds + 1)), steps=(10,), benchmarks=("b1", "b2"),
        problems=(("p1", "p2"), ("q1", "q2", "q3")),
        accuracy=np.zeros((n_seeds, 1, 5)) if accuracy is None else accuracy,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"method": "bca"}, "method must be one of .*'BCa'.*not 'bca'"),
        ({"n_resamples": 0}, "n_resamples must be positive, not 0"),
        ({"confidence": 1.0}, r"confidence must lie in \(0, 1\), not 1.0"),
        ({"confidence": 0}, r"confidence must lie in \(0, 1\), not 0"),
    ],
)
def test_bad_options_are_refused_naming_the_value(options, message):
    with pytest.raises(ValueError, match=message):
        _interval(**options)


def test_percentile_bounds_are_the_replicates_quantiles_per_output():
    low, high, used, replicates = _interval()
    assert replicates.shape == (2, 400)  # outputs x resamples
    assert list(used) == ["percentile", "percentile"]
    assert low[0] == pytest.approx(np.percentile(replicates[0], 5))
    assert high[0] == pytest.approx(np.percentile(replicates[0], 95))
    assert VALUES.min() <= low[0] < VALUES.mean() < high[0] <= VALUES.max()
    assert low[1] == high[1] == 2.0  # every resample of a constant has its mean


def test_basic_interval_reflects_the_percentiles_about_the_estimate():
    low, high, used, replicates = _interval(_mean, method="basic")
    assert replicates.shape == (1, 400)  # a scalar statistic: one output row
    assert used.tolist() == ["basic"]
    estimate = VALUES.mean()
    assert low[0] == pytest.approx(2 * estimate - np.percentile(replicates[0], 95))
    assert high[0] == pytest.approx(2 * estimate - np.percentile(replicates[0], 5))


def test_the_seed_fixes_the_resamples_and_a_wider_level_contains_the_narrower():
    first, again, other = _interval(), _interval(), _interval(seed=1)
    np.testing.assert_array_equal(first[3], again[3])
    assert not np.array_equal(first[3], other[3])
    wide = _interval(confidence=0.99)
    np.testing.assert_array_equal(wide[3], first[3])  # the same draws
    assert wide[0][0] <= first[0][0] and first[1][0] <= wide[1][0]


def test_an_undefined_bca_bound_falls_back_to_the_percentile_interval():
    """BCa's acceleration is 0/0 for the constant output: that output alone is percentile."""
    low, high, used, replicates = _interval(method="BCa")
    assert used.tolist() == ["BCa", "percentile"]
    assert low[1] == high[1] == 2.0
    assert np.isfinite(low[0]) and np.isfinite(high[0]) and low[0] < VALUES.mean() < high[0]
    np.testing.assert_array_equal(replicates[1], 2.0)


def test_interval_methods_are_scipys_names():
    assert INTERVAL_METHODS == ("percentile", "basic", "BCa")


def test_index_data_is_problem_indices_per_benchmark_then_seeds_when_resampled():
    grid = _grid(n_seeds=2)
    data = index_data(grid, resample_seeds=True)
    assert [d.tolist() for d in data] == [[0, 1], [0, 1, 2], [0, 1]]
    assert [d.tolist() for d in index_data(grid, resample_seeds=False)] == [[0, 1], [0, 1, 2]]
    # One seed: nothing to resample.
    assert len(index_data(_grid(n_seeds=1), resample_seeds=True)) == 2


def test_split_indices_shifts_each_benchmark_into_its_columns_and_keeps_drawn_seeds():
    grid = _grid(n_seeds=2)
    b1 = np.array([[0, 0], [1, 0]])
    b2 = np.array([[2, 2, 0], [0, 1, 2]])
    seeds = np.array([[1, 1], [0, 1]])
    lead, columns, drawn = split_indices(grid, (b1, b2, seeds))
    assert lead == (2,)
    assert columns[0].tolist() == [[0, 0], [1, 0]]
    assert columns[1].tolist() == [[4, 4, 2], [2, 3, 4]]  # b2 starts at column 2
    assert drawn.tolist() == [[1, 1], [0, 1]]


def test_split_indices_gives_every_seed_where_seeds_are_not_resampled():
    grid = _grid(n_seeds=3)
    _, _, seeds = split_indices(grid, (np.array([[0, 1]] * 4), np.array([[0, 1, 2]] * 4)))
    assert seeds.tolist() == [[0, 1, 2]] * 4


def test_split_indices_broadcasts_and_flattens_the_batch_shape():
    grid = _grid(n_seeds=1)
    b1 = np.zeros((3, 2, 2), dtype=int)  # a (3, 2) batch
    b2 = np.array([[[0, 1, 2]]])  # (1, 1) batch: broadcast to (3, 2)
    lead, columns, seeds = split_indices(grid, (b1, b2))
    assert lead == (3, 2)
    assert columns[0].shape == (6, 2) and columns[1].shape == (6, 3)
    assert (columns[1] == [2, 3, 4]).all() and columns[1].dtype == np.intp
    assert seeds.shape == (6, 1)


def test_resampling_is_stratified_by_benchmark():
    """b1's problems are all 0 and b2's all 1: a replicate's per-benchmark mean is then exactly
    0 and 1, whatever it draws, only if each benchmark's indices stay in its own columns."""
    grid = _grid(n_seeds=2, accuracy=np.array([[[0, 0, 1, 1, 1]]] * 2, dtype=float))

    def statistic(*indices, axis=-1):
        lead, columns, seeds = split_indices(grid, indices)
        means = [
            grid.accuracy[seeds[:, :, None], 0, cols[:, None, :]].mean(axis=(1, 2))
            for cols in columns
        ]
        return np.stack(means).reshape(len(columns), *lead)

    low, high, _, replicates = bootstrap_interval(
        index_data(grid, resample_seeds=True), statistic, n_resamples=50, seed=3,
        confidence=0.95, method="percentile",
    )  # fmt: skip
    assert replicates.shape == (2, 50)
    np.testing.assert_array_equal(replicates[0], 0.0)
    np.testing.assert_array_equal(replicates[1], 1.0)
    assert low.tolist() == [0.0, 1.0] and high.tolist() == [0.0, 1.0]
