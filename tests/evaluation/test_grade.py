"""Tests for dashrepro.evaluation.grade: grading stored responses needs no model, and bad
responses lose nothing."""

import pandas as pd
import pytest
from evaluation_helpers import responses

from dashrepro.evaluation.grade import grade_and_summarize, grade_samples
from dashrepro.evaluation.responses import SAMPLE_COLUMNS


def test_grade_samples_adds_verdicts_and_keeps_every_row():
    frame = responses(
        [
            ("so \\boxed{\\frac{1}{2}}", "0.5"),
            ("no answer here", "3"),
            ("\\boxed{4} then \\boxed{5}", "5"),
            ("\\boxed{7", "7"),
        ]
    )
    graded = grade_samples(frame, grading_workers=0)
    assert list(graded.columns) == SAMPLE_COLUMNS
    assert list(graded["correct"]) == [True, False, True, False]
    assert list(graded["grading_path"]) == ["math_verify", "no_boxed", "math_verify", "no_boxed"]
    assert graded["response"].equals(frame["response"])


def test_grade_and_summarize_counts_flags():
    graded, summary = grade_and_summarize(
        responses([("\\boxed{1}", "1"), ("nothing", "1")]),
        ["b"],
        {
            "grading_workers": 0,
            "grading_timeout_s": 5.0,
            "grading_item_timeout_s": 10.0,
            "grading_memory_gib": 4.0,
        },
    )
    bench = summary["benchmarks"]["b"]
    assert bench["avg_at_k"] == pytest.approx(50.0)
    assert bench["n_no_boxed"] == 1
    assert summary["checkpoint"] == "m/s/seed0/step20"


def test_the_summary_counts_the_verdicts_each_answer_form_normalisation_changed():
    """A user sees what the grader did beyond the paper's plain check: per benchmark, how many
    verdicts a normalisation turned right, and by which; plain verdicts carry none."""
    graded, summary = grade_and_summarize(
        responses([("\\boxed{1\\,000}", "1000"), ("\\boxed{12^\\circ}", "12"),
                   ("\\boxed{42 \\pmod{1000}}", "42"), ("\\boxed{3, 375}", "3375"),
                   ("\\boxed{7}", "7"), ("\\boxed{1042 \\pmod{1000}}", "42")]),
        ["b"],
        {"grading_workers": 0, "grading_timeout_s": 5.0, "grading_item_timeout_s": 10.0, "grading_memory_gib": 4.0},
    )  # fmt: skip
    assert list(graded["correct"]) == [True, True, True, False, True, False]
    names = [n if isinstance(n, str) else None for n in graded["grading_normalisation"]]
    assert names == ["digit_grouping", None, "modulus", None, None, None]
    bench = summary["benchmarks"]["b"]
    assert bench["n_normalised"] == 2
    assert bench["n_normalised_digit_grouping"] == 1 and bench["n_normalised_modulus"] == 1
    assert bench["n_normalised_units"] == 0  # math-verify reads 12^\circ as 12 by itself


def test_the_validation_split_is_graded_and_summarised_apart():
    frame = pd.concat(
        [
            responses([("\\boxed{1}", "1"), ("nothing", "1")]),
            responses([("\\boxed{2}", "2"), ("\\boxed{2}", "2")]).assign(benchmark="validation"),
        ],
        ignore_index=True,
    )
    grading = {
        "grading_workers": 0,
        "grading_timeout_s": 5.0,
        "grading_item_timeout_s": 10.0,
        "grading_memory_gib": 4.0,
    }
    graded, summary = grade_and_summarize(frame, ["b"], grading, validation="validation")
    assert len(graded) == 4
    assert list(summary["benchmarks"]) == ["b"]  # the benchmarks' mean leaves it out
    assert summary["mean_over_benchmarks"] == pytest.approx(50.0)
    assert summary["validation"]["name"] == "validation"
    assert summary["validation"]["avg_at_k"] == pytest.approx(100.0)
    # Responses of a set the caller did not name stop the grading, named.
    with pytest.raises(ValueError, match="validation"):
        grade_and_summarize(frame, ["b"], grading)


def test_grade_samples_names_missing_columns():
    with pytest.raises(ValueError, match="gold"):
        grade_samples(responses([("x", "1")]).drop(columns=["gold"]), grading_workers=0)


def test_the_configured_limits_per_answer_reach_the_grader(monkeypatch):
    """evaluation.grading_item_timeout_s (the limit grade_batch kills a worker at; it was a fixed
    10 s) and grading_memory_gib reach the grader from the config's grading settings."""
    import dashrepro.evaluation.grade as grade

    seen = {}
    real = grade.grade_batch

    def spy(responses, golds, **kwargs):
        seen.update(kwargs)
        return real(responses, golds, **kwargs)

    monkeypatch.setattr(grade, "grade_batch", spy)
    frame = responses([("\\boxed{1}", "1")])
    grading = {"grading_workers": 1, "grading_timeout_s": 2.5, "grading_item_timeout_s": 7.5,
               "grading_memory_gib": 3.0}  # fmt: skip
    samples, _ = grade.grade_and_summarize(frame, ["b"], grading)
    assert seen == {"workers": 1, "timeout_s": 2.5, "item_timeout_s": 7.5, "memory_gib": 3.0}
    assert bool(samples["correct"].iloc[0])
