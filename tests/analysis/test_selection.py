"""Tests for dashrepro.analysis.selection: checkpoint selection (paper Eqs.
supp_checkpoint_score/selection)."""

import pytest

from dashrepro.analysis.selection import select_best_checkpoint

BENCHES = ["a", "b", "c"]


def summary(a, b, c):
    return {"benchmarks": {"a": {"avg_at_k": a}, "b": {"avg_at_k": b}, "c": {"avg_at_k": c}}}


def test_selects_best_mean_and_reports_that_checkpoints_scores():
    # step 20 has the best single benchmark (a = 90) but step 40 the best mean.
    record = select_best_checkpoint(
        {20: summary(90, 0, 0), 40: summary(40, 40, 40), 60: summary(10, 20, 30)}, BENCHES
    )
    assert record["selected_step"] == 40
    assert record["selection_score"] == pytest.approx(40.0)
    assert record["benchmark_scores"] == {"a": 40, "b": 40, "c": 40}


def test_ties_go_to_the_earliest_checkpoint():
    record = select_best_checkpoint({40: summary(30, 30, 30), 20: summary(10, 40, 40)}, BENCHES)
    assert record["selected_step"] == 20


def test_missing_benchmark_is_an_error():
    with pytest.raises(ValueError, match="checkpoint 20"):
        select_best_checkpoint({20: {"benchmarks": {"a": {"avg_at_k": 1}}}}, BENCHES)
