"""The paper's figure kinds, drawn from small fixtures: every option of method_comparison and
its intervals, the training dynamics, and the matched pair of the motivation figure's panel b
(at a large D_t)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from dashrepro.analysis import per_problem as pp
from dashrepro.analysis import statistics as st
from dashrepro.analysis.figures import make_figure
from dashrepro.analysis.figures.motivation_futures import matched_pair

BENCHES = {"a": "A", "b": "B", "c": "C"}
METHODS = ["opsd", "dash_k1", "dash", "dash_k20"]


N_PROBLEMS, K = 12, 4


@pytest.fixture
def selections(tmp_path):
    """Per (method, seed): the selected checkpoint's graded samples (method i solves more) and
    its selection record, whose scores are those samples' Avg@k. The files have flat names:
    what each one is comes with it (``input_keys``), as the workflow passes it."""
    rng = np.random.default_rng(0)
    paths, samples, keys = [], [], []
    for i, method in enumerate(METHODS):
        for seed in (0, 1):
            rows = [
                {"benchmark": b, "problem_id": f"{b}{p}", "seed": 7,
                 "correct": bool(rng.random() < 0.3 + 0.1 * i + 0.02 * p)}
                for b in BENCHES for p in range(N_PROBLEMS) for _ in range(K)
            ]  # fmt: skip
            frame = pd.DataFrame(rows)
            path = tmp_path / f"samples-{len(samples)}.parquet"
            frame.to_parquet(path)
            samples.append(path)
            keys.append([method, "s", seed, 20])
            scores = 100 * frame.groupby(["benchmark", "problem_id"])["correct"].mean()
            scores = scores.groupby(level="benchmark").mean().to_dict()
            path = tmp_path / f"{method}-{seed}.json"
            path.write_text(json.dumps({"method": method, "scale": "s", "seed": seed,
                                        "selected_step": 20, "benchmark_scores": scores}))  # fmt: skip
            paths.append(path)
    return {"selections": paths, "samples": samples}, {"samples": keys}


def context(methods, input_keys=None) -> dict:
    return {"id": "f", "experiment": "e", "scale": "s", "scales": ["s"],
            "benchmarks": list(BENCHES), "benchmark_labels": BENCHES,
            "method_labels": {m: m.upper() for m in methods},
            "input_keys": input_keys or {}}  # fmt: skip


@pytest.mark.parametrize(
    "options",
    [
        {"reference": "opsd", "highlight": ["dash"]},
        {"relative_to": "opsd", "n_resamples": 200},
        {"style": "line", "x": {"dash_k1": 1, "dash": 5, "dash_k20": 20}, "reference": "opsd"},
        {"per_benchmark": True, "highlight": ["dash"]},
    ],
)
def test_method_comparison_draws_every_style_with_intervals(selections, options):
    spec = {"kind": "method_comparison", "scale": "s", "methods": METHODS, "options": options}
    inputs, keys = selections
    fig, data = make_figure(spec, inputs, context(METHODS, keys))
    cells = pd.DataFrame(data["cells"])
    assert set(cells["row"]) == set(METHODS) and len(cells) == len(METHODS) * 4
    assert (cells["value"] > 0).all()
    # Every plotted value has a 95% interval around it: value +- z x the clustered SE of the
    # statistics rule (the same function, on the selected checkpoints' samples).
    assert (cells["ci_low"] < cells["value"]).all() and (cells["value"] < cells["ci_high"]).all()
    assert (cells["confidence"] == 0.95).all()
    selected = pd.concat(
        [pd.read_parquet(p).assign(seed=key[2])
         for p, key in zip(inputs["samples"], keys["samples"], strict=True) if key[0] == "dash"]
    )  # fmt: skip
    expected = st.clustered_standard_error(
        pp.per_problem_accuracy(
            selected.drop(columns="seed").assign(s=selected["seed"]), ["s"]
        ).rename(columns={"s": "seed"}),
        list(BENCHES),
    ).set_index("column")
    dash = cells[cells["row"] == "dash"].set_index("column")
    assert dash["se"].to_dict() == pytest.approx(expected["se"].to_dict())
    assert dash["value"].to_dict() == pytest.approx(expected["value"].to_dict())
    half = norm.ppf(0.975) * dash["se"]
    assert (dash["ci_high"] - dash["value"]).to_numpy() == pytest.approx(half.to_numpy())
    if "relative_to" in options:
        gains = cells[cells["row"] != "opsd"]
        assert gains["gain"].notna().all() and (gains["gain_seeds"] == "0,1").all()
        assert (gains["gain_ci_low"] <= gains["gain"]).all()
        assert (gains["gain"] <= gains["gain_ci_high"]).all()
        assert (gains["gain_ci_low"] < gains["gain_ci_high"]).all()
    assert fig.axes and json.dumps(data)  # the data is JSON
    assert "value" in data["intervals"]


def test_training_dynamics_averages_each_methods_seeds(tmp_path):
    paths, keys = [], []
    for method, seed, loss in (("opsd", 0, 1.0), ("opsd", 1, 3.0), ("dash", 0, 5.0)):
        path = tmp_path / f"metrics-{len(paths)}.parquet"  # what it is comes beside it
        keys.append([method, "s", seed])
        pd.DataFrame({"step": [1, 2], "loss": [loss, loss / 2], "rollout_accuracy": [0.1, 0.2],
                      "horizon_mean": [3.0, 4.0]}).to_parquet(path)  # fmt: skip
        paths.append(path)
    spec = {"kind": "training_dynamics", "scale": "s", "methods": ["opsd", "dash"]}
    _, data = make_figure(spec, {"metrics": paths}, context(["opsd", "dash"], {"metrics": keys}))
    means = pd.DataFrame(data["step_means"]).set_index(["method", "step"])
    assert means.loc[("opsd", 1), "loss"] == 2.0 and means.loc[("dash", 2), "loss"] == 2.5


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
