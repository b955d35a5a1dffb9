"""Tests for dashrepro.evaluation.scoring: a checkpoint's summary is checked against its samples."""

import math

import pandas as pd
import pytest
from evaluation_helpers import responses

from dashrepro.evaluation.grade import grade_and_summarize
from dashrepro.evaluation.scoring import summarize_samples, unbiased_pass_at_k


def _graded_checkpoint(tmp_path):
    from dashrepro.io import write_json, write_parquet

    frame = responses([("\\boxed{1}", "1"), ("\\boxed{2}", "1"), ("\\boxed{3}", "3"), ("x", "3")])
    samples, summary = grade_and_summarize(
        frame,
        ["b"],
        {
            "grading_workers": 1,
            "grading_timeout_s": 5,
            "grading_item_timeout_s": 10,
            "grading_memory_gib": 4,
        },
    )
    write_parquet(tmp_path / "samples.parquet", samples)
    write_json(tmp_path / "summary.json", summary)
    return tmp_path / "summary.json", tmp_path / "samples.parquet"


def test_summary_is_checked_against_its_samples(tmp_path):
    from dashrepro.evaluation.scoring import SummaryMismatchError, load_checked_summary
    from dashrepro.io import UnreadableFileError, read_json, write_json, write_parquet

    summary_path, samples_path = _graded_checkpoint(tmp_path)
    assert load_checked_summary(summary_path, samples_path, ["b"]) == read_json(summary_path)

    samples = pd.read_parquet(samples_path)
    flipped = samples.copy()
    flipped.loc[1, "correct"] = True  # an edited grade
    write_parquet(samples_path, flipped)
    with pytest.raises(SummaryMismatchError) as info:
        load_checked_summary(summary_path, samples_path, ["b"])
    message = str(info.value)
    assert str(summary_path) in message and str(samples_path) in message
    assert "b.avg_at_k: 50.0 in the summary, 75.0 from the samples" in message

    write_parquet(samples_path, samples)
    edited = read_json(summary_path)
    edited["benchmarks"]["b"]["avg_at_k"] = 99.0  # an edited summary
    write_json(summary_path, edited)
    with pytest.raises(SummaryMismatchError, match="b.avg_at_k: 99.0 in the summary"):
        load_checked_summary(summary_path, samples_path, ["b"])

    samples_path.write_bytes(b"garbage")  # a corrupt samples file
    with pytest.raises(UnreadableFileError, match="samples.parquet: cannot read as parquet"):
        load_checked_summary(summary_path, samples_path, ["b"])


def test_avg_at_k_pass_at_k_and_clustered_stderr():
    rows = []
    # problem p0: 2/4 correct, p1: 0/4, p2: 4/4
    for pid, n_correct in [("p0", 2), ("p1", 0), ("p2", 4)]:
        for i in range(4):
            rows.append(
                {
                    "benchmark": "a",
                    "problem_id": pid,
                    "sample_index": i,
                    "correct": i < n_correct,
                    "finish_reason": "length" if pid == "p1" else "stop",
                    "grading_path": "no_boxed" if pid == "p1" else "math_verify",
                }
            )
    s = summarize_samples(pd.DataFrame(rows), ["a"])["benchmarks"]["a"]
    assert s["avg_at_k"] == pytest.approx(100 * (0.5 + 0 + 1) / 3)
    per_problem = pd.Series([0.5, 0.0, 1.0])
    assert s["stderr"] == pytest.approx(100 * per_problem.std(ddof=1) / math.sqrt(3))
    assert s["pass_at_k"] == pytest.approx(100 * 2 / 3)
    assert s["n_truncated"] == 4 and s["n_no_boxed"] == 4


def test_unbiased_pass_at_k_formula():
    assert unbiased_pass_at_k(12, 0, 1) == 0.0
    assert unbiased_pass_at_k(12, 3, 1) == pytest.approx(3 / 12)
    assert unbiased_pass_at_k(4, 1, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(4, 2))
