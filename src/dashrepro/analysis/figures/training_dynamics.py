"""Figure kind ``training_dynamics``: what happened during training, step by step.

From ``train_metrics.parquet`` of every run of the entry (each method's mean over its seeds):
the loss, the rollout accuracy, the response length with the truncated fraction, and DASH's
horizon and mean coefficient c_k (1 for OPSD), one line per method.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

NEEDS = ("metrics",)
OPTIONS: dict[str, str] = {}
CAPTION = (
    "Training dynamics per step (mean over seeds): loss, rollout accuracy, response length "
    "and truncated fraction, supervision horizon and mean coefficient."
)
PANELS = (
    ("loss", "loss"),
    ("rollout_accuracy", "rollout accuracy"),
    ("response_length", "response length (tokens)"),
    ("truncated_fraction", "truncated fraction"),
    ("horizon_mean", "horizon (tokens)"),
    ("coef_mean", "mean coefficient c_k"),
)


def step_means(inputs: Mapping, context: Mapping) -> pd.DataFrame:
    """(method, step) -> the mean over the method's runs of every panel's metric (each run's
    [method, scale, seed] beside its file in ``context["input_keys"]``)."""
    from dashrepro.io import read_parquet

    frames = []
    keys = context["input_keys"]["metrics"]
    for path, (method, _, _) in zip(inputs["metrics"], keys, strict=True):
        frame = read_parquet(path)
        keep = ["step", *(k for k, _ in PANELS if k in frame.columns)]
        frames.append(frame[keep].assign(method=method))
    rows = pd.concat(frames, ignore_index=True)
    return rows.groupby(["method", "step"], sort=False).mean(numeric_only=True).reset_index()


def draw(spec: Mapping, inputs: Mapping, context: Mapping):
    import matplotlib.pyplot as plt

    means = step_means(inputs, context)
    fig, axes = plt.subplots(2, 3, figsize=(9.0, 5.0), sharex=True)
    for ax, (key, title) in zip(axes.flat, PANELS, strict=True):
        for method in spec["methods"]:
            run = means[means["method"] == method]
            if key in run:
                ax.plot(run["step"], run[key], label=context["method_labels"][method])
        ax.set_title(title, fontsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("step")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"experiment {context['experiment']}, scale {context['scale']}", fontsize=8)
    fig.tight_layout()
    return fig, {"step_means": means.to_dict("records")}
