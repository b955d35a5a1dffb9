"""Tests for dashrepro.analysis.statistics_report: the held-out selection and the base-model lift
of an experiment's tables."""

from __future__ import annotations

import pytest

from dashrepro.analysis import per_problem as pp

from .conftest import BENCH, HAND, _samples


def test_experiment_heldout_puts_the_validation_choice_beside_the_papers():
    from dashrepro.analysis.statistics_report import HELDOUT_COLUMNS, experiment_heldout

    # HAND plus a validation split: seed 1 is best on it at step 20, seed 2 at step 10, the
    # opposite of the paper's rule on the test benchmarks (seed 1 @ 10, seed 2 @ 20).
    val = {(1, 10): 0.0, (1, 20): 1.0, (2, 10): 1.0, (2, 20): 0.0}
    per_problem = pp.checkpoint_problem_accuracy(
        {key: _samples({**acc, "validation": [val[key]] * 2}) for key, acc in HAND.items()}
    )
    tables = {
        "main": {"kind": "method_scores", "scale": "tiny", "methods": ["dash"]},
        "curves": {"kind": "checkpoint_curves", "scale": "tiny", "methods": ["dash"]},
    }
    out = experiment_heldout(tables, BENCH, lambda m, s: per_problem, "validation")
    assert list(out.columns) == HELDOUT_COLUMNS
    assert set(out["table"]) == {"main"}  # scores tables only
    cell = out.set_index("column")
    # Held out: seed 1 @ 20 (b1 50, b2 50), seed 2 @ 10 (b1 25, b2 0).
    assert cell.loc["b1", "heldout"] == pytest.approx(37.5)
    assert cell.loc["average", "heldout"] == pytest.approx(31.25)
    # The paper's: seed 1 @ 10 (b1 75, b2 25), seed 2 @ 20 (b1 100, b2 25).
    assert cell.loc["b1", "best_on_test"] == pytest.approx(87.5)
    assert cell.loc["average", "best_on_test"] == pytest.approx(56.25)
    assert cell.loc["average", "difference"] == pytest.approx(-25.0)
    assert cell.loc["average", "steps_heldout"] == "20,10"
    assert cell.loc["average", "steps_best_on_test"] == "10,20"
    without = pp.checkpoint_problem_accuracy({key: _samples(acc) for key, acc in HAND.items()})
    with pytest.raises(ValueError, match="no graded samples of the validation split"):
        experiment_heldout(tables, BENCH, lambda m, s: without, "validation")


def test_base_lift_is_each_cell_minus_the_base_student_on_the_same_problems():
    from dashrepro.analysis.statistics_report import BASE_ROW, experiment_base_lift

    # HAND's selected cells: b1 87.5, b2 25 (seed 1 @ 10, seed 2 @ 20). The base student: b1
    # 50 (0.5, 0.5), b2 0 (0, 0); lifts +37.5 and +25, average +31.25.
    per_problem = pp.checkpoint_problem_accuracy({key: _samples(acc) for key, acc in HAND.items()})
    base = pp.per_problem_accuracy(_samples({"b1": [0.5, 0.5], "b2": [0.0, 0.0]}))
    tables = {
        "main": {"kind": "method_scores", "scale": "tiny", "methods": ["dash"]},
        "curves": {"kind": "checkpoint_curves", "scale": "tiny", "methods": ["dash"]},
    }
    scales_asked = []

    def base_of(scale):
        scales_asked.append(scale)
        return base

    out = experiment_base_lift(
        tables, BENCH, lambda m, s: per_problem, base_of, n_resamples=200, seed=0,
        confidence=0.95,
    )  # fmt: skip
    assert set(out["table"]) == {"main"} and set(out["reference"]) == {BASE_ROW}
    assert scales_asked == ["tiny"]
    cell = out.set_index("column")
    assert cell.loc["b1", "difference"] == pytest.approx(37.5)
    assert cell.loc["b2", "difference"] == pytest.approx(25.0)
    assert cell.loc["average", "difference"] == pytest.approx(31.25)
    assert cell.loc["average", "reference_value"] == pytest.approx(25.0)
    assert (out["ci_low"] <= out["difference"]).all() and (
        out["difference"] <= out["ci_high"]
    ).all()
    # The base model against itself: no lift, an interval of zero width.
    same = pp.checkpoint_problem_accuracy({(0, 0): _samples({"b1": [0.5, 0.5], "b2": [0.0, 0.0]})})
    flat = experiment_base_lift(
        tables, BENCH, lambda m, s: same, base_of, n_resamples=200, seed=0, confidence=0.95
    )
    assert (flat["difference"] == 0).all()
