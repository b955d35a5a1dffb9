"""Figure kind ``checkpoint_curves``: the mean Avg@k over benchmarks at every checkpoint.

One line per method and seed, the base model at step 0, each seed's selected checkpoint circled.
Every summary is checked against its samples (``evaluation.scoring.load_checked_summary``).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

NEEDS = ("summaries", "samples", "selections", "base_accuracy")
OPTIONS: dict[str, str] = {}
CAPTION = (
    "Mean Avg@k over the benchmarks at every checkpoint (step 0: the base model), one line per "
    "method and seed; circles mark each seed's selected checkpoint."
)


def curve_points(
    spec: Mapping, inputs: Mapping, context: Mapping
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(method, seed, step, mean_over_benchmarks) per checkpoint, and the selected steps."""
    from dashrepro.evaluation.scoring import load_checked_summary
    from dashrepro.io import read_json

    base = read_json(inputs["base_accuracy"][0])["student"]["mean_over_benchmarks"]
    rows = []
    for path, samples in zip(inputs["summaries"], inputs["samples"], strict=True):
        s = load_checked_summary(path, samples, context["benchmarks"])
        rows.append({"method": s["method"], "seed": s["seed"], "step": s["step"],
                     "mean_over_benchmarks": s["mean_over_benchmarks"]})  # fmt: skip
    curves = pd.DataFrame(rows)
    starts = curves[["method", "seed"]].drop_duplicates().assign(step=0, mean_over_benchmarks=base)
    curves = pd.concat([starts, curves], ignore_index=True)
    curves["method"] = pd.Categorical(curves["method"], categories=spec["methods"], ordered=True)
    selected = pd.DataFrame(
        [
            {"method": r["method"], "seed": r["seed"], "step": r["selected_step"]}
            for r in map(read_json, inputs["selections"])
        ]
    )
    return curves, selected


def plot_checkpoint_curves(
    curves: pd.DataFrame, selected: pd.DataFrame, method_labels: Mapping[str, str], title: str
):
    """``curves``: method, seed, step, mean_over_benchmarks; ``selected``: method, seed, step."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 3.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    for m_index, (method, per_method) in enumerate(
        curves.groupby("method", sort=False, observed=True)
    ):
        color = colors[m_index % len(colors)]
        for s_index, (seed, run) in enumerate(per_method.groupby("seed")):
            run = run.sort_values("step")
            ax.plot(run["step"], run["mean_over_benchmarks"], color=color,
                    linestyle=styles[s_index % len(styles)], marker="o", markersize=3,
                    label=f"{method_labels[method]} (seed {seed})")  # fmt: skip
            pick = selected[(selected["method"] == method) & (selected["seed"] == seed)]
            for step in pick["step"]:
                value = run.loc[run["step"] == step, "mean_over_benchmarks"]
                ax.scatter([step], value, s=90, facecolors="none", edgecolors=color)
    ax.set_xlabel("training step (0 = base model)")
    ax.set_ylabel("mean Avg@k over benchmarks (%)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def draw(spec: Mapping, inputs: Mapping, context: Mapping):
    curves, selected = curve_points(spec, inputs, context)
    title = f"experiment {context['experiment']}, scale {spec['scale']}"
    fig = plot_checkpoint_curves(curves, selected, context["method_labels"], title)
    data = {
        "curves": curves.astype({"method": str}).to_dict("records"),
        "selected": selected.to_dict("records"),
    }
    return fig, data
