"""Tests for dashrepro.analysis.figures.checkpoint_curves: the points of every (method, seed)
curve from checked summaries, the base model at step 0, and the drawn lines and circles."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from dashrepro.analysis.figures import checkpoint_curves, make_figure
from dashrepro.evaluation.scoring import SummaryMismatchError, summarize_samples
from dashrepro.io import write_json, write_parquet

from .conftest import BENCHES, context

METHODS = ["opsd", "dash"]
BASE = 40.0
# (method, seed, step): accuracy on benchmarks a, b, c (one problem, two samples each)
#   -> mean over benchmarks in percent
CHECKPOINTS = {
    ("dash", 0, 10): (0.5, 0.5, 0.5),  # 50
    ("dash", 0, 20): (0.0, 0.0, 0.5),  # 16.67
    ("dash", 1, 10): (1.0, 1.0, 0.5),  # 83.33
    ("dash", 1, 20): (1.0, 0.5, 0.5),  # 66.67
    ("opsd", 0, 10): (1.0, 0.5, 0.0),  # 50
    ("opsd", 0, 20): (1.0, 1.0, 1.0),  # 100
}
MEANS = {key: 100 * sum(acc) / 3 for key, acc in CHECKPOINTS.items()}
SELECTED = {("dash", 0): 10, ("dash", 1): 10, ("opsd", 0): 20}


def _samples(accuracy, checkpoint: str) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"checkpoint": checkpoint, "benchmark": b, "problem_id": f"{b}-p1",
             "correct": correct, "finish_reason": "stop", "grading_path": "math_verify"}
            for b, acc in zip(BENCHES, accuracy, strict=True)
            for correct in (acc >= 0.5, acc == 1.0)
        ]
    )  # fmt: skip


@pytest.fixture
def inputs(tmp_path) -> dict:
    """Each checkpoint's samples and the summary graded from them, the selection records and
    the base model's accuracy, as the figure rule passes them (flat names)."""
    out = {"summaries": [], "samples": [], "selections": [], "base_accuracy": []}
    for i, ((method, seed, step), accuracy) in enumerate(CHECKPOINTS.items()):
        samples = _samples(accuracy, f"checkpoint-{i}")
        summary = summarize_samples(samples, list(BENCHES))
        summary.update(checkpoint=f"checkpoint-{i}", method=method, scale="s", seed=seed, step=step)
        out["samples"].append(tmp_path / f"samples-{i}.parquet")
        out["summaries"].append(tmp_path / f"summary-{i}.json")
        write_parquet(out["samples"][-1], samples)
        write_json(out["summaries"][-1], summary)
    for i, ((method, seed), step) in enumerate(SELECTED.items()):
        out["selections"].append(tmp_path / f"selection-{i}.json")
        out["selections"][-1].write_text(
            json.dumps({"method": method, "scale": "s", "seed": seed, "selected_step": step})
        )
    out["base_accuracy"].append(tmp_path / "base_accuracy.json")
    write_json(out["base_accuracy"][0], {"student": {"mean_over_benchmarks": BASE}})
    return out


SPEC = {"kind": "checkpoint_curves", "scale": "s", "methods": METHODS}


def test_curve_points_start_every_run_at_the_base_model(inputs):
    curves, selected = checkpoint_curves.curve_points(SPEC, inputs, context(METHODS))
    assert len(curves) == 3 + len(CHECKPOINTS)  # one step-0 point per (method, seed)
    starts = curves[curves["step"] == 0]
    assert sorted(zip(starts["method"].astype(str), starts["seed"], strict=True)) == sorted(
        SELECTED
    )
    assert (starts["mean_over_benchmarks"] == BASE).all()
    points = {
        (r.method, r.seed, r.step): r.mean_over_benchmarks
        for r in curves[curves["step"] > 0].itertuples()
    }
    assert points == pytest.approx(MEANS)
    assert list(curves["method"].cat.categories) == METHODS and curves["method"].cat.ordered
    assert sorted(map(tuple, selected[["method", "seed", "step"]].values.tolist())) == sorted(
        (m, s, t) for (m, s), t in SELECTED.items()
    )


def test_a_summary_its_samples_do_not_support_stops_the_figure(inputs):
    path = inputs["summaries"][0]
    summary = json.loads(path.read_text())
    summary["mean_over_benchmarks"] = 99.0
    write_json(path, summary)
    with pytest.raises(
        SummaryMismatchError, match="mean_over_benchmarks: 99.0 in the summary"
    ) as info:
        checkpoint_curves.curve_points(SPEC, inputs, context(METHODS))
    assert str(path) in str(info.value)


def test_draw_gives_one_line_per_run_and_circles_each_selected_checkpoint(inputs):
    import matplotlib.pyplot as plt

    fig, data = make_figure(SPEC, inputs, context(METHODS))
    try:
        (ax,) = fig.axes
        assert ax.get_title() == "experiment e, scale s"
        lines = {line.get_label(): line for line in ax.lines}
        assert set(lines) == {"OPSD (seed 0)", "DASH (seed 0)", "DASH (seed 1)"}
        dash_1 = lines["DASH (seed 1)"]
        assert list(dash_1.get_xdata()) == [0, 10, 20]
        assert list(dash_1.get_ydata()) == pytest.approx(
            [BASE, MEANS[("dash", 1, 10)], MEANS[("dash", 1, 20)]]
        )
        # One colour per method, one line style per seed of a method.
        assert lines["DASH (seed 0)"].get_color() == dash_1.get_color()
        assert lines["OPSD (seed 0)"].get_color() != dash_1.get_color()
        assert lines["DASH (seed 0)"].get_linestyle() != dash_1.get_linestyle()
        circles = sorted(tuple(c.get_offsets()[0]) for c in ax.collections)
        expected = sorted((t, MEANS[(m, s, t)]) for (m, s), t in SELECTED.items())
        assert len(circles) == len(expected)
        for (x, y), (step, value) in zip(circles, expected, strict=True):
            assert x == step and y == pytest.approx(value)
    finally:
        plt.close(fig)
    assert {r["method"] for r in data["curves"]} == set(METHODS)
    assert all(isinstance(r["method"], str) for r in data["curves"])
    assert len(data["curves"]) == 3 + len(CHECKPOINTS) and len(data["selected"]) == 3
