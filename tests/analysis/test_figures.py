"""The paper's figure kinds, drawn from small fixtures: every option of method_comparison, the
training dynamics, and the matched pair of the motivation figure's panel b."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dashrepro.analysis.figures import make_figure
from dashrepro.analysis.figures.motivation_futures import matched_pair

BENCHES = {"a": "A", "b": "B", "c": "C"}
METHODS = ["opsd", "dash_k1", "dash", "dash_k20"]


@pytest.fixture
def selections(tmp_path):
    paths = []
    for i, method in enumerate(METHODS):
        for seed in (0, 1):
            path = tmp_path / f"{method}-{seed}.json"
            scores = {b: 40.0 + 2 * i + seed + j for j, b in enumerate(BENCHES)}
            path.write_text(json.dumps({"method": method, "scale": "s", "seed": seed,
                                        "selected_step": 20, "benchmark_scores": scores}))  # fmt: skip
            paths.append(path)
    return paths


def context(methods) -> dict:
    return {"id": "f", "experiment": "e", "scale": "s", "scales": ["s"],
            "benchmarks": list(BENCHES), "benchmark_labels": BENCHES,
            "method_labels": {m: m.upper() for m in methods}}  # fmt: skip


@pytest.mark.parametrize(
    "options",
    [
        {"reference": "opsd", "highlight": ["dash"]},
        {"relative_to": "opsd"},
        {"style": "line", "x": {"dash_k1": 1, "dash": 5, "dash_k20": 20}, "reference": "opsd"},
        {"per_benchmark": True, "highlight": ["dash"]},
    ],
)
def test_method_comparison_draws_every_style(selections, options):
    spec = {"kind": "method_comparison", "scale": "s", "methods": METHODS, "options": options}
    fig, data = make_figure(spec, {"selections": selections}, context(METHODS))
    averages = {c["row"]: c["value"] for c in data["cells"] if c["column"] == "average"}
    assert averages["opsd"] == pytest.approx(41.5) and averages["dash"] == pytest.approx(45.5)
    assert fig.axes and json.dumps(data)  # the data is JSON


def test_training_dynamics_averages_each_methods_seeds(tmp_path):
    paths = []
    for method, seed, loss in (("opsd", 0, 1.0), ("opsd", 1, 3.0), ("dash", 0, 5.0)):
        path = tmp_path / "runs" / method / "s" / f"seed{seed}" / "train_metrics.parquet"
        path.parent.mkdir(parents=True)
        pd.DataFrame({"step": [1, 2], "loss": [loss, loss / 2], "rollout_accuracy": [0.1, 0.2],
                      "horizon_mean": [3.0, 4.0]}).to_parquet(path)  # fmt: skip
        paths.append(path)
    spec = {"kind": "training_dynamics", "scale": "s", "methods": ["opsd", "dash"]}
    _, data = make_figure(spec, {"metrics": paths}, context(["opsd", "dash"]))
    means = pd.DataFrame(data["step_means"]).set_index(["method", "step"])
    assert means.loc[("opsd", 1), "loss"] == 2.0 and means.loc[("dash", 2), "loss"] == 2.5


def test_the_matched_pair_shares_d_t_and_differs_most_in_its_future():
    rows = []
    profiles = {  # rollout -> D_t per position
        0: [0.50, 0.10, 0.10, 0.10],
        1: [0.51, 0.90, 0.80, 0.90],
        2: [0.20, 0.30, 0.30, 0.30],
    }
    for rollout, values in profiles.items():
        future = [sum(values[t + 1 :]) / (len(values) - t - 1) for t in range(len(values) - 1)]
        for t, value in enumerate(values[:-1]):
            rows.append({"run": "r", "step": 1, "rollout": rollout, "position": t,
                         "problem_id": f"p{rollout}", "r": value, "future_mean_r": future[t]})  # fmt: skip
    first, second = matched_pair(pd.DataFrame(rows), tolerance=0.05, min_future=2)
    assert {first["rollout"], second["rollout"]} == {0, 1}
    assert first["position"] == second["position"] == 0
    with pytest.raises(ValueError, match="no two rollouts"):
        matched_pair(pd.DataFrame(rows), tolerance=0.0, min_future=2)
