"""premise.statistics: the gates' band and spread, D_t against its future within rollouts, and
the branch points of a problem's prefix tree, each against a value worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from dashrepro.analysis.figures.divergence_association import future_divergence
from dashrepro.objectives.aggregations import coefficients_from_gates, gates_from_gap
from dashrepro.premise.statistics import (
    BRANCH_COLUMNS,
    STATISTICS,
    association_statistics,
    branch_points,
    branch_statistics,
    gate_statistics,
    premise_statistics,
    statistics_by_task,
)


def rollout(problem, index, tokens, d, reward, gates=None):
    """One rollout's rows of a tokens frame; gates default to DASH's at kappa 5 on D."""
    n = len(tokens)
    d_tensor, mask = torch.tensor([d], dtype=torch.float32), torch.ones(1, n)
    g = gates_from_gap(d_tensor, mask, 5.0) if gates is None else torch.tensor([gates])
    c = coefficients_from_gates(g, mask)
    return pd.DataFrame({
        "problem_id": problem, "sample": index, "rollout": index, "position": range(n),
        "token_id": tokens, "D": d, "r": d, "gate": g[0].numpy(), "coefficient": c[0].numpy(),
        "reward": float(reward),
    })  # fmt: skip


def test_a_fixed_lambda_has_no_spread_and_no_departure_and_the_band_counts_used_gates():
    fixed = rollout("p", 0, [1, 2, 3, 4, 5], [0.1, 0.2, 0.3, 0.4, 0.5], 1, gates=[0.5] * 5)
    values = gate_statistics(fixed)
    assert values["gate_within_sd"] == 0.0
    assert values["weight_departure"] == pytest.approx(0.0, abs=1e-7)
    assert values["gate_mid_share"] == 1.0
    # The last gate is never used: only the first three count, one in each part of the band.
    banded = rollout("p", 1, [1, 2, 3, 4], [0, 0, 0, 0], 0, gates=[0.05, 0.5, 0.95, 0.5])
    values = gate_statistics(banded)
    assert (values["gate_low_share"], values["gate_mid_share"], values["gate_high_share"]) == (
        pytest.approx(1 / 3), pytest.approx(1 / 3), pytest.approx(1 / 3),
    )  # fmt: skip
    assert values["gate_within_sd"] == pytest.approx(np.std([0.05, 0.5, 0.95]))
    assert values["weight_departure"] > 0.05


def test_within_a_single_rollout_the_statistic_is_the_partial_spearman_given_position():
    rng = np.random.default_rng(0)
    d = list(rng.exponential(size=30))
    tokens = rollout("p", 0, list(range(30)), d, 1)
    values, _ = association_statistics(tokens)
    frame = future_divergence(tokens, "D")
    frame = frame.assign(
        rd=frame["r"].rank(), rf=frame["future_mean_r"].rank(), rp=frame["position"].rank()
    )
    r = frame[["rd", "rf", "rp"]].corr()
    partial = (r.loc["rd", "rf"] - r.loc["rd", "rp"] * r.loc["rf", "rp"]) / math.sqrt(
        (1 - r.loc["rd", "rp"] ** 2) * (1 - r.loc["rf", "rp"] ** 2)
    )
    assert values["spearman_within"] == pytest.approx(partial)
    assert values["n_within_rollouts"] == 1


def test_the_within_null_is_negative_and_a_persistent_divergence_stands_out_of_it():
    """Independent D_t: the statistic sits on its (negative) permutation null. D_t that persists
    (a random walk's size): far above it."""
    rng = np.random.default_rng(3)
    iid = pd.concat(
        [rollout("p", i, list(range(40)), list(rng.exponential(size=40)), 0) for i in range(20)],
        ignore_index=True,
    )
    values, within = association_statistics(iid)
    assert values["spearman_within_null"] < -0.05
    assert abs(values["spearman_within"] - values["spearman_within_null"]) < 0.1
    assert values["spearman_within_p"] > 0.05
    assert len(within) == 20 * 39
    walks = [np.abs(np.cumsum(rng.normal(size=40))) for _ in range(20)]
    persistent = pd.concat(
        [rollout("p", i, list(range(40)), list(w), 0) for i, w in enumerate(walks)],
        ignore_index=True,
    )
    values, _ = association_statistics(persistent)
    assert values["spearman_within"] > values["spearman_within_null"] + 0.2
    assert values["spearman_within_p"] < 0.01


def test_rollouts_of_different_levels_make_a_pooled_association_that_within_does_not_see():
    rng = np.random.default_rng(1)
    frames = [
        rollout("p", i, list(range(40)), list(level + 0.1 * rng.random(40)), 0)
        for i, level in enumerate([0.0, 1.0, 2.0, 3.0])
    ]
    values, _ = association_statistics(pd.concat(frames, ignore_index=True))
    assert values["spearman_pooled"] > 0.8
    assert abs(values["spearman_within"] - values["spearman_within_null"]) < 0.15


def test_branch_points_of_a_prefix_tree():
    """A = 1 2 3 9, B = 1 2 4 9, C = 1 5 6: they part at position 1 ({A, B} against {C}) and at
    position 2 (A against B)."""
    tokens = pd.concat([
        rollout("p", 0, [1, 2, 3, 9], [0.0, 0.4, 0.2, 0.6], 1),
        rollout("p", 1, [1, 2, 4, 9], [0.0, 0.4, 0.2, 0.2], 0),
        rollout("p", 2, [1, 5, 6], [0.0, 0.4, 1.0], 1),
        rollout("q", 3, [7, 8], [0.3, 0.1], 1),  # alone: no branch
    ], ignore_index=True)  # fmt: skip
    branches = branch_points(tokens)
    assert list(branches.columns) == list(BRANCH_COLUMNS)
    assert branches[["problem_id", "position", "n_rollouts", "n_branches"]].values.tolist() == [
        ["p", 1, 3, 2], ["p", 2, 2, 2],
    ]  # fmt: skip
    first, second = branches.iloc[0], branches.iloc[1]
    assert first["D"] == pytest.approx(0.4) and first["D_spread"] == 0.0
    assert first["reward_range"] == pytest.approx(0.5)  # {A, B}: 0.5; {C}: 1
    # Futures after position 1: A 0.4, B 0.2 (their branch: 0.3), C 1.0.
    assert first["future_range"] == pytest.approx(0.7)
    assert second["reward_range"] == 1.0
    assert second["future_range"] == pytest.approx(0.4)  # A 0.6, B 0.2
    values = branch_statistics(branches)
    assert values["n_branch_points"] == 2 and values["reward_split_share"] == 1.0
    assert math.isnan(values["spearman_D_reward_range"])  # fewer than 3 points


def test_premise_statistics_gives_every_statistic_in_order():
    rng = np.random.default_rng(2)
    tokens = pd.concat(
        [rollout(f"p{i % 2}", i, [int(t) for t in rng.integers(0, 3, 8)], list(rng.random(8)),
                 i % 2) for i in range(6)],
        ignore_index=True,
    )  # fmt: skip
    values, _ = premise_statistics(tokens, branch_points(tokens))
    assert list(values) == list(STATISTICS)
    assert values["n_problems"] == 2 and values["n_rollouts"] == 6 and values["n_tokens"] == 48
    assert values["mean_reward"] == 0.5


def test_by_task_gives_all_then_each_task_and_their_branches():
    rng = np.random.default_rng(4)
    frames = [
        rollout(
            f"p{i % 4}", i, [int(t) for t in rng.integers(0, 3, 8)], list(rng.random(8)), 1
        ).assign(task="a" if i % 4 < 2 else "b")
        for i in range(12)
    ]
    tokens = pd.concat(frames, ignore_index=True)
    rows, branches, within = statistics_by_task(tokens)
    assert list(rows) == ["all", "a", "b"]
    assert rows["all"]["n_rollouts"] == 12 and rows["a"]["n_rollouts"] == 6
    assert rows["a"]["n_branch_points"] + rows["b"]["n_branch_points"] == len(branches)
    assert set(branches["task"]) == {"a", "b"}
    one, _, _ = statistics_by_task(tokens.assign(task="all"))
    assert list(one) == ["all"] and one["all"] == rows["all"]
