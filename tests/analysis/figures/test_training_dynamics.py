"""Tests for dashrepro.analysis.figures.training_dynamics: the per-method means over seeds."""

from __future__ import annotations

import pandas as pd

from dashrepro.analysis.figures import make_figure

from .conftest import context


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
