"""Issue 13 statistics (analysis.statistics) against hand-computed values on small fixtures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dashrepro.analysis import statistics as st
from dashrepro.evaluation.scoring import summarize_samples

from .conftest import BENCH, HAND, _samples


def test_cell_statistics_equal_hand_computed_values(hand_per_problem):
    cells = st.cell_statistics(hand_per_problem, BENCH).set_index("column")
    # Selected: seed 1 @ 10 (b1 75, b2 25), seed 2 @ 20 (b1 100, b2 25).
    assert cells.loc["b1", "value"] == pytest.approx(87.5)  # (75 + 100) / 2
    assert cells.loc["b2", "value"] == pytest.approx(25.0)  # (25 + 25) / 2
    assert cells.loc["average", "value"] == pytest.approx(56.25)  # (87.5 + 25) / 2
    # Seed std, ddof = 1: |75 - 100| / sqrt(2); b2 equal; per-seed averages 50 and 62.5.
    assert cells.loc["b1", "seed_std"] == pytest.approx(25 / math.sqrt(2))
    assert cells.loc["b2", "seed_std"] == pytest.approx(0.0)
    assert cells.loc["average", "seed_std"] == pytest.approx(12.5 / math.sqrt(2))
    # Clustered SE. b1 problems' means over seeds: p1 (1 + 1)/2 -> 100, p2 (0.5 + 1)/2 -> 75;
    # sd(100, 75) = 25/sqrt(2), / sqrt(2 problems) = 12.5. b2: (0 + .5)/2 = (.5 + 0)/2 -> SE 0.
    # Average: sqrt(12.5^2 + 0^2) / 2 = 6.25.
    assert cells.loc["b1", "clustered_se"] == pytest.approx(12.5)
    assert cells.loc["b2", "clustered_se"] == pytest.approx(0.0)
    assert cells.loc["average", "clustered_se"] == pytest.approx(6.25)
    assert cells.loc["b1", "n_problems"] == 2 and cells.loc["average", "n_problems"] == 4
    assert cells.loc["b1", "selected_steps"] == "10,20" and cells.loc["b1", "seeds"] == "1,2"


def test_clustered_se_of_one_seed_is_the_summary_stderr(hand_per_problem):
    selected = hand_per_problem.query("seed == 1 and step == 10")
    se = st.clustered_standard_error(selected, BENCH).set_index("column")["se"]
    summary = summarize_samples(_samples(HAND[(1, 10)]), BENCH)["benchmarks"]
    # b1: per-problem 100 and 50, sd 25*sqrt(2), / sqrt(2) = 25.
    assert se["b1"] == pytest.approx(25.0) == pytest.approx(summary["b1"]["stderr"])
    assert se["b2"] == pytest.approx(summary["b2"]["stderr"])


def test_a_hole_in_the_grid_is_named(hand_per_problem):
    holed = hand_per_problem.drop(index=hand_per_problem.index[3])
    with pytest.raises(ValueError, match="missing .* rows"):
        st.cell_statistics(holed, BENCH)
    with pytest.raises(ValueError, match=r"per_problem: missing columns \['accuracy'\]"):
        st.cell_statistics(hand_per_problem.drop(columns="accuracy"), BENCH)
    with pytest.raises(ValueError, match="not percent"):
        st.cell_statistics(hand_per_problem.assign(accuracy=100.0), BENCH)


# --------------------------------------------------------------------------- paired difference


def _paired_fixture() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Reference accuracies r in eighths; the method adds 1/8 or 3/8 alternately on the 20
    problems of benchmark a (true mean +25 points) and exactly 1/8 on the 10 of b (+12.5)."""
    ref, mine = [], []
    for seed in (1, 2):
        for p in range(20):
            r = ((p + seed) % 5) / 8
            ref.append({"seed": seed, "benchmark": "a", "problem_id": p, "accuracy": r})
            mine.append({"seed": seed, "benchmark": "a", "problem_id": p,
                         "accuracy": r + (1 / 8 if p % 2 == 0 else 3 / 8)})  # fmt: skip
        for p in range(10):
            r = ((p * seed) % 7) / 8
            ref.append({"seed": seed, "benchmark": "b", "problem_id": p, "accuracy": r})
            mine.append({"seed": seed, "benchmark": "b", "problem_id": p, "accuracy": r + 1 / 8})
    return pd.DataFrame(mine), pd.DataFrame(ref)


def test_paired_difference_hand_values_and_interval():
    mine, ref = _paired_fixture()
    out = st.paired_difference(mine, ref, ["a", "b"], n_resamples=2000, seed=3)
    out = out.set_index("column")
    # a: per-problem differences 12.5 and 37.5 alternately, mean 25; b: 12.5 everywhere.
    assert out.loc["a", "difference"] == pytest.approx(25.0)
    assert out.loc["b", "difference"] == pytest.approx(12.5)
    assert out.loc["average", "difference"] == pytest.approx(18.75)  # (25 + 12.5) / 2
    # se of a: deviations +-12.5 over 20 problems: sd = sqrt(20 * 12.5^2 / 19), / sqrt(20)
    # = 12.5 / sqrt(19); b: 0; average: sqrt(se_a^2 + 0) / 2.
    assert out.loc["a", "se_clustered"] == pytest.approx(12.5 / math.sqrt(19))
    assert out.loc["b", "se_clustered"] == pytest.approx(0.0)
    assert out.loc["average", "se_clustered"] == pytest.approx(12.5 / math.sqrt(19) / 2)
    # The interval holds the true difference and excludes no effect.
    assert out.loc["a", "ci_low"] <= 25.0 <= out.loc["a", "ci_high"]
    assert out.loc["a", "ci_low"] > 0 and bool(out.loc["a", "excludes_zero"])
    assert out.loc["average", "ci_low"] <= 18.75 <= out.loc["average", "ci_high"]
    # Every resample of b is 12.5: BCa is undefined, the percentile interval is the point.
    assert (out.loc["b", "ci_low"], out.loc["b", "ci_high"]) == (12.5, 12.5)
    assert out.loc["b", "interval"] == "bootstrap percentile"
    assert out.loc["a", "interval"] == "bootstrap BCa"
    assert bool(out.loc["a", "seeds_resampled"])
    again = st.paired_difference(mine, ref, ["a", "b"], n_resamples=2000, seed=3)
    pd.testing.assert_frame_equal(again.set_index("column"), out)


def test_paired_difference_refuses_mismatched_problems_and_seeds():
    mine, ref = _paired_fixture()
    with pytest.raises(ValueError, match=r"problem sets of 'a' differ: only in the method \[19\]"):
        st.paired_difference(mine, ref[~((ref.benchmark == "a") & (ref.problem_id == 19))],
                             ["a", "b"], n_resamples=10)  # fmt: skip
    with pytest.raises(ValueError, match=r"seeds differ: method has \[1, 2\], reference has \[1\]"):
        st.paired_difference(mine, ref[ref.seed == 1], ["a", "b"], n_resamples=10)


# --------------------------------------------------------------------------- selection optimism


def _grid(values) -> pd.DataFrame:
    """``values(seed, step_index, benchmark, problem)`` -> a per-problem frame, 3 seeds x 8
    checkpoints x 2 benchmarks x 12 problems."""
    return pd.DataFrame(
        [
            {"seed": s, "step": 25 * (j + 1), "benchmark": b, "problem_id": p,
             "accuracy": values(s, j, b, p)}
            for s in (1, 2, 3) for j in range(8) for b in BENCH for p in range(12)
        ]
    )  # fmt: skip


def test_selection_optimism_is_zero_for_identical_checkpoints():
    rng = np.random.default_rng(7)
    table = {(s, b, p): rng.integers(0, 9) / 8 for s in (1, 2, 3) for b in BENCH for p in range(12)}
    pp = _grid(lambda s, j, b, p: table[(s, b, p)])  # every checkpoint of a seed the same
    out = st.selection_optimism(pp, BENCH, n_resamples=300, seed=0).set_index("column")
    assert (out["optimism"] == 0.0).all()
    assert (out["reselection_rate"] == 0.0).all()
    assert (out["corrected"] == out["value"]).all()
    cells = st.cell_statistics(pp, BENCH).set_index("column")
    assert out["value"].to_numpy() == pytest.approx(cells["value"].to_numpy())


def test_selection_optimism_is_positive_for_pure_noise_checkpoints():
    rng = np.random.default_rng(11)
    noise = {
        (s, j, b, p): rng.binomial(8, 0.5) / 8
        for s in (1, 2, 3) for j in range(8) for b in BENCH for p in range(12)
    }  # fmt: skip
    pp = _grid(lambda s, j, b, p: noise[(s, j, b, p)])
    out = st.selection_optimism(pp, BENCH, n_resamples=400, seed=1).set_index("column")
    cells = st.cell_statistics(pp, BENCH).set_index("column")
    assert out["value"].to_numpy() == pytest.approx(cells["value"].to_numpy())
    assert out.loc["average", "optimism"] > 0.5  # points; >= 0 replicate by replicate
    assert out.loc["average", "corrected"] < out.loc["average", "value"]
    assert 0 < out.loc["average", "reselection_rate"] <= 1
    assert (
        out.loc["average", "ci_low"] < out.loc["average", "value"] < out.loc["average", "ci_high"]
    )
    again = st.selection_optimism(pp, BENCH, n_resamples=400, seed=1).set_index("column")
    pd.testing.assert_frame_equal(again, out)


def test_bootstrap_options_are_checked(hand_per_problem):
    with pytest.raises(ValueError, match="method must be one of"):
        st.selection_optimism(hand_per_problem, BENCH, n_resamples=10, interval="bca")
    with pytest.raises(ValueError, match="n_resamples must be positive"):
        st.selection_optimism(hand_per_problem, BENCH, n_resamples=0)


# --------------------------------------------------------------------------- held-out selection


def _scores(table: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [{"seed": s, "step": t, "benchmark": b, "avg_at_k": v}
         for (s, t), per in table.items() for b, v in per.items()]
    )  # fmt: skip


def test_heldout_selection_beside_the_paper_rule():
    test = _scores({
        (1, 10): {"x": 40, "y": 20},  # mean 30: seed 1's best on test
        (1, 20): {"x": 30, "y": 20},  # mean 25
        (2, 10): {"x": 10, "y": 30},  # mean 20
        (2, 20): {"x": 50, "y": 30},  # mean 40: seed 2's best on test
    })  # fmt: skip
    validation = _scores({
        (1, 10): {"v": 50}, (1, 20): {"v": 60},  # seed 1 -> step 20
        (2, 10): {"v": 70}, (2, 20): {"v": 70},  # tie -> earliest, step 10
    })  # fmt: skip
    out = st.heldout_selection(validation, test, ["x", "y"]).set_index(["rule", "column"])
    # Held out: seed 1 @ 20 (x 30, y 20, mean 25), seed 2 @ 10 (x 10, y 30, mean 20).
    assert out.loc[("heldout", "x"), "value"] == pytest.approx(20.0)
    assert out.loc[("heldout", "y"), "value"] == pytest.approx(25.0)
    assert out.loc[("heldout", "average"), "value"] == pytest.approx(22.5)
    assert out.loc[("heldout", "x"), "std"] == pytest.approx(20 / math.sqrt(2))
    assert out.loc[("heldout", "average"), "std"] == pytest.approx(5 / math.sqrt(2))
    assert out.loc[("heldout", "x"), "selected_steps"] == "20,10"
    # Paper rule: seed 1 @ 10 (x 40, y 20), seed 2 @ 20 (x 50, y 30).
    assert out.loc[("best_on_test", "x"), "value"] == pytest.approx(45.0)
    assert out.loc[("best_on_test", "average"), "value"] == pytest.approx(35.0)
    assert out.loc[("best_on_test", "x"), "selected_steps"] == "10,20"
    with pytest.raises(ValueError, match=r"different \(seed, step\) checkpoints"):
        st.heldout_selection(validation.iloc[:-1], test, ["x", "y"])
    with pytest.raises(ValueError, match=r"validation benchmarks \['x', 'y'\] are test benchmarks"):
        st.heldout_selection(test, test, ["x", "y"])


# --------------------------------------------------------------------------- reproduction gap


def test_reproduction_gap_keeps_every_cell():
    key = ["table", "row", "scale", "column"]
    published = pd.DataFrame(
        [
            ["T", "dash", "s1", "a", 50.0, "this paper"],
            ["T", "dash", "s1", "b", 40.0, "this paper"],  # not in our run
            ["T", "dash", "s1", "c", 60.0, "this paper"],
            ["T", "base", "s1", "a", 30.0, "Zhao et al."],  # only copied by us
            ["U", "dash", "s1", "a", 10.0, "this paper"],  # a table this run lacks
        ],
        columns=[*key, "value", "source"],
    )
    ours = pd.DataFrame(
        [
            ["T", "dash", "s1", "a", 52.0, "this run"],
            ["T", "dash", "s1", "c", 55.0, "this run"],
            ["T", "opsd", "s1", "a", 45.0, "this run"],  # the paper has no such cell
            ["T", "base", "s1", "a", 30.0, "Zhao et al."],  # a copy, not a reproduction
        ],
        columns=[*key, "value", "source"],
    )
    intervals = pd.DataFrame(
        [["T", "dash", "s1", "a", 49.0, 55.0], ["T", "dash", "s1", "c", 53.0, 57.0],
         ["T", "opsd", "s1", "a", 40.0, 50.0]],
        columns=[*key, "ci_low", "ci_high"],
    )  # fmt: skip
    gap = st.reproduction_gap(ours, published, intervals)
    assert len(gap) == 6  # 5 published + 1 of ours only: nothing dropped
    rows = gap.set_index(key)
    a = rows.loc[("T", "dash", "s1", "a")]
    assert (a["status"], a["difference"], a["paper_inside_interval"]) == ("compared", 2.0, True)
    c = rows.loc[("T", "dash", "s1", "c")]
    assert (c["status"], c["difference"], c["paper_inside_interval"]) == ("compared", -5.0, False)
    for cell in [("T", "dash", "s1", "b"), ("T", "base", "s1", "a"), ("U", "dash", "s1", "a")]:
        assert rows.loc[cell, "status"] == "missing_ours"
        assert pd.isna(rows.loc[cell, "ours"]) and pd.isna(rows.loc[cell, "paper_inside_interval"])
    opsd = rows.loc[("T", "opsd", "s1", "a")]
    assert opsd["status"] == "missing_published" and pd.isna(opsd["paper_inside_interval"])
    assert gap["row"].tolist()[-1] == "opsd"  # published order first, then ours only
    only_t = st.reproduction_gap(ours, published, intervals, tables=["T"])
    assert set(only_t["table"]) == {"T"} and len(only_t) == 5
    no_intervals = st.reproduction_gap(ours, published).set_index(key)
    assert pd.isna(no_intervals.loc[("T", "dash", "s1", "a"), "paper_inside_interval"])
    with pytest.raises(ValueError, match="our_cells: duplicate cells"):
        st.reproduction_gap(pd.concat([ours, ours.iloc[:1]]), published)
