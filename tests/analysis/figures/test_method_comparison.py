"""Tests for dashrepro.analysis.figures.method_comparison: every option, drawn from small
fixtures, and its intervals."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from dashrepro.analysis import per_problem as pp
from dashrepro.analysis import statistics as st
from dashrepro.analysis.figures import make_figure

from .conftest import BENCHES, context

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
