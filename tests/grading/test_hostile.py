"""Tests for dashrepro.grading.hostile: every class of the hostile-answer corpus through the
batch grader."""

from __future__ import annotations

from dashrepro.grading import ERROR_TEXT_LIMIT, PATHS, grade_batch


def test_every_hostile_answer_gets_a_named_verdict_and_none_is_lost():
    """The hostile-answer corpus (dashrepro.grading.hostile) through the batch grader: each class
    comes back, in order, with a verdict on a named path; boxes that only end in punctuation
    runs are still graded right (they once cost minutes: one rescan per dot)."""
    from dashrepro.grading.hostile import HOSTILE_ANSWERS

    names = list(HOSTILE_ANSWERS)
    responses = [HOSTILE_ANSWERS[name][0] for name in names]
    golds = [HOSTILE_ANSWERS[name][1] for name in names]
    results = grade_batch(responses, golds, workers=2, timeout_s=1.0, item_timeout_s=3.0)
    assert len(results) == len(names)
    for name, result in zip(names, results, strict=True):
        assert result["path"] in PATHS and isinstance(result["correct"], bool), name
        assert result["error"] is None or len(result["error"]) <= ERROR_TEXT_LIMIT + 40, name
    by_name = dict(zip(names, results, strict=True))
    for name in ("dots after the box", "dots inside the box", "punctuation run inside"):
        assert by_name[name]["path"] == "math_verify" and by_name[name]["correct"], name
    assert by_name["an unclosed box"]["path"] == "no_boxed"
    # Numbers no machine can hold are never computed to the end: a timeout, never a crash.
    for name in ("a huge exponent", "a tower of exponents", "a huge factorial"):
        assert by_name[name]["path"] == "timeout" and not by_name[name]["correct"], name
