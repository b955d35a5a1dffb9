"""Tests for dashrepro.analysis.per_problem: per-problem accuracy frames, checkpoint scores and
checkpoint selection, against the pipeline's own scoring."""

from __future__ import annotations

from dashrepro.analysis import per_problem as pp
from dashrepro.analysis.selection import select_best_checkpoint
from dashrepro.evaluation.scoring import summarize_samples

from .conftest import BENCH, HAND, _samples


def test_per_problem_frame_uses_the_training_seed_not_the_generation_seed(hand_per_problem):
    assert sorted(hand_per_problem["seed"].unique()) == [1, 2]  # not the samples' 987654
    row = hand_per_problem.query("seed == 1 and step == 10 and problem_id == 'b1-p2'")
    assert row["accuracy"].item() == 0.5 and row["n_samples"].item() == 2


def test_checkpoint_scores_and_selection_match_the_pipeline(hand_per_problem):
    scores = pp.checkpoint_benchmark_scores(hand_per_problem, BENCH)
    for (seed, step), acc in HAND.items():
        summary = summarize_samples(_samples(acc), BENCH)
        for bench in BENCH:
            mine = scores[
                (scores["seed"] == seed) & (scores["step"] == step) & (scores["benchmark"] == bench)
            ]
            assert mine["avg_at_k"].item() == summary["benchmarks"][bench]["avg_at_k"]
    chosen = pp.select_checkpoints(hand_per_problem, BENCH)
    # Seed 1 ties at 50 -> earliest step 10; seed 2: 62.5 at step 20 beats 12.5.
    assert chosen["selected_step"].tolist() == [10, 20]
    for seed, step in zip(chosen["seed"], chosen["selected_step"], strict=True):
        summaries = {t: summarize_samples(_samples(HAND[(seed, t)]), BENCH) for t in (10, 20)}
        assert select_best_checkpoint(summaries, BENCH)["selected_step"] == step
