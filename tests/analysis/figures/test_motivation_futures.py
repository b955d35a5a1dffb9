"""Tests for dashrepro.analysis.figures.motivation_futures: the matched pair of the motivation
figure's panel b (at a large D_t)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from dashrepro.analysis.figures import make_figure
from dashrepro.analysis.figures.motivation_futures import matched_pair

from .conftest import context


def _traces(profiles: dict) -> pd.DataFrame:
    """``future_divergence`` rows of run r, step 1, from rollout -> D_t per position."""
    rows = []
    for rollout, values in profiles.items():
        future = [sum(values[t + 1 :]) / (len(values) - t - 1) for t in range(len(values) - 1)]
        for t, value in enumerate(values[:-1]):
            rows.append({"run": "r", "step": 1, "rollout": rollout, "position": t,
                         "problem_id": f"p{rollout}", "r": value, "future_mean_r": future[t]})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_matched_pair_shares_d_t_and_differs_most_in_its_future():
    profiles = {  # rollout -> D_t per position
        0: [0.50, 0.10, 0.10, 0.10],
        1: [0.51, 0.90, 0.80, 0.90],
        2: [0.20, 0.30, 0.30, 0.30],
    }
    first, second, selection = matched_pair(_traces(profiles), tolerance=0.05, min_future=2)
    assert {first["rollout"], second["rollout"]} == {0, 1}
    assert first["position"] == second["position"] == 0
    assert selection["quantile"] < 0.9  # top decile: one token, no pair; lowered
    assert min(first["r"], second["r"]) >= selection["threshold"]
    with pytest.raises(ValueError, match="no two rollouts"):
        matched_pair(_traces(profiles), tolerance=0.0, min_future=2)


def test_the_matched_pair_prefers_a_large_d_t_over_a_near_zero_one():
    # Rollouts 0 and 1 agree at D_t ~ 0 with very different futures (the old choice); rollouts
    # 2 and 3 agree at a large D_t with less different futures.
    profiles = {
        0: [1e-4, 0.01, 0.01, 0.01, 0.01],
        1: [1e-4, 2.00, 2.00, 2.00, 2.00],
        2: [1.50, 0.20, 0.20, 0.20, 0.20],
        3: [1.51, 0.90, 0.90, 0.90, 0.90],
        **{4 + k: [0.05 * (k + 1)] * 5 for k in range(10)},  # filler: the bulk of D_t
    }
    frame = _traces(profiles)
    first, second, selection = matched_pair(frame, tolerance=0.05, min_future=2, quantile=0.9)
    assert {first["rollout"], second["rollout"]} == {2, 3}
    candidates = frame[frame["position"] <= frame["position"].max() - 2]["r"]
    assert selection["quantile"] == 0.9
    assert selection["threshold"] == pytest.approx(candidates.quantile(0.9))
    assert min(first["r"], second["r"]) >= selection["threshold"] > 1e-4
    everywhere = matched_pair(frame, tolerance=0.05, min_future=2, quantile=0.0)
    assert {everywhere[0]["rollout"], everywhere[1]["rollout"]} == {0, 1}


def test_motivation_futures_records_the_matched_d_t(tmp_path):
    rng = np.random.default_rng(1)
    rows = []
    for rollout in range(6):
        for t in range(30):
            rows.append({"step": 1, "rollout": rollout, "position": t, "problem_id": f"p{rollout}",
                         "r": 0.0, "divergence": float(rng.exponential(0.5)),
                         "reward": rollout % 2})  # fmt: skip
    path = tmp_path / "token_traces.parquet"
    pd.DataFrame(rows).to_parquet(path)
    spec = {"kind": "motivation_futures", "scale": "s", "methods": ["opsd"],
            "options": {"tolerance": 0.05}}  # fmt: skip
    _, data = make_figure(spec, {"traces": [path]}, context(["opsd"]))
    assert json.dumps(data)
    assert data["D_t_quantile"] == 0.9
    assert data["matched_D_t"] == [pair["D_t"] for pair in data["pair"]]
    assert min(data["matched_D_t"]) >= data["D_t_threshold"] > 0
    # Candidates: tokens with a future (the last is dropped) of min_future = 5 later tokens.
    divergence = pd.DataFrame(rows)[lambda f: f["position"] <= 28 - 5]["divergence"]
    assert data["D_t_threshold"] == pytest.approx(divergence.quantile(0.9))
