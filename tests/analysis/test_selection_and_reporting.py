"""Checkpoint selection (paper Eqs. supp_checkpoint_score/selection) and seed aggregation."""

import math

import pandas as pd
import pytest

from dashrepro.analysis.selection import select_best_checkpoint
from dashrepro.analysis.tables import method_scores
from dashrepro.evaluation.scoring import summarize_samples, unbiased_pass_at_k

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


def test_table_mean_and_sample_std_over_seeds():
    records = [
        {
            "method": "dash",
            "seed": s,
            "selected_step": 20,
            "benchmark_scores": dict(zip(BENCHES, v, strict=True)),
        }
        for s, v in enumerate([(10, 20, 30), (20, 20, 50)])
    ]
    cells = method_scores.selection_cells(
        records, "t", ["dash"], {"dash": "DASH"}, BENCHES, ["s"]
    ).set_index("column")
    assert cells.loc["a", "value"] == 15 and cells.loc["a", "std"] == pytest.approx(math.sqrt(50))
    assert cells.loc["b", "std"] == 0  # ddof = 1 over two equal values
    assert cells.loc["average", "value"] == pytest.approx((15 + 20 + 40) / 3)
    assert math.isnan(cells.loc["average", "std"]) and cells.loc["a", "seeds"] == "0,1"
    context = {"benchmark_labels": {"a": "A", "b": "B", "c": "C"}, "experiment": "e",
               "scales": ["s"], "id": "t"}  # fmt: skip
    rendered = method_scores.render(cells.reset_index(), {"methods": ["dash"]}, context)
    assert "| DASH | **15.00 ± 7.07** |" in rendered["md"]  # the only row ranks first
    tex = rendered["tex"]
    assert "\\toprule" in tex and "\\midrule" in tex and "\\bottomrule" in tex


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


def test_future_divergence_is_the_mean_over_later_tokens_of_the_same_rollout():
    from dashrepro.analysis.figures.divergence_association import (
        divergence_association,
        future_divergence,
    )

    traces = pd.DataFrame(
        {
            "step": [1] * 6,
            "rollout": [0, 0, 0, 0, 1, 1],
            "position": [0, 1, 2, 3, 0, 1],
            "r": [1.0, 2.0, 3.0, 4.0, 10.0, 20.0],
        }
    ).sample(frac=1.0, random_state=1)  # any row order
    frame = future_divergence(traces)
    got = {(int(r.rollout), int(r.position)): r.future_mean_r for r in frame.itertuples()}
    # The last token of each rollout has no future and is dropped.
    assert got == {(0, 0): 3.0, (0, 1): 3.5, (0, 2): 4.0, (1, 0): 20.0}
    stats = divergence_association(frame)
    assert stats["n_tokens"] == 4 and stats["n_rollouts"] == 2
    assert -1.0 <= stats["spearman"] <= 1.0
