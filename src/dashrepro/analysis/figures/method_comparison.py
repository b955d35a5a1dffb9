"""Figure kind ``method_comparison``: methods' seed-mean Avg@k side by side, with intervals.

The paper's ablation figures (``aggregation_adaptivity``, ``factorial_ablation``, ``prop_kappa``,
``distillation_divergence``), from the same selection records as the tables. Intervals are
computed here from each seed's selected checkpoint's graded samples with the statistics rule's
functions (value +- z x the problem-clustered SE; gains: the paired bootstrap), so a method need
not be in a scores table. Options (``style``, ``x``, ``relative_to``, ``per_benchmark``,
``highlight``, ``reference``, ``confidence``, ``n_resamples``) and the JSON beside the figure:
docs/figures.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

NEEDS = ("selections", "samples")
OPTIONS = {
    "style": "bars (default) or line",
    "x": "method -> x value (line style)",
    "xlabel": "the x axis label (line style)",
    "relative_to": "a method: plot gains over it, annotate absolute values",
    "per_benchmark": "grouped bars per benchmark and the average",
    "highlight": "methods to star (the paper's settings)",
    "reference": "a method drawn as a dashed horizontal line at its average",
    "confidence": "the intervals' level (default 0.95)",
    "n_resamples": "bootstrap resamples of the paired gains with relative_to (default 1000)",
}
CAPTION = (
    "Seed-mean Avg@k of compared methods (macro-average unless per benchmark), with 95% "
    "intervals: problem-clustered standard errors, paired bootstrap intervals for gains."
)
#: The bootstrap's seed (as the config's ``statistics: seed``).
SEED = 0


def selected_accuracy(
    records: Sequence[Mapping],
    sample_paths: Sequence,
    sample_keys: Sequence[Sequence],
    method: str,
    scale: str,
) -> pd.DataFrame:
    """The ``statistics`` *selected* frame of one method: per seed, the per-problem accuracy of
    the checkpoint its selection record chose, from that checkpoint's ``samples.parquet``
    (``sample_keys``: each path's [method, scale, seed, step], in the same order)."""
    from dashrepro.analysis import per_problem as pp
    from dashrepro.io import read_parquet

    by_checkpoint = {
        (m, c, int(s), int(t)): p for p, (m, c, s, t) in zip(sample_paths, sample_keys, strict=True)
    }
    samples = {}
    for record in records:
        if record["method"] != method or record.get("scale", scale) != scale:
            continue
        seed, step = int(record["seed"]), int(record["selected_step"])
        key = (method, scale, seed, step)
        if key not in by_checkpoint:
            raise ValueError(
                "method_comparison: no samples.parquet of the selected checkpoint "
                f"{method}/{scale}/seed{seed}/step{step}"
            )
        columns = ["benchmark", "problem_id", "correct"]
        samples[(seed, step)] = read_parquet(by_checkpoint[key], columns=columns)
    return pp.checkpoint_problem_accuracy(samples)


def figure_cells(spec: Mapping, inputs: Mapping, context: Mapping) -> pd.DataFrame:
    """The selection cells with their intervals (module docstring)."""
    from scipy import stats

    from dashrepro.analysis import statistics as st
    from dashrepro.analysis.tables.method_scores import selection_cells
    from dashrepro.io import read_json

    options = spec.get("options") or {}
    confidence = float(options.get("confidence", 0.95))
    benchmarks, scale = context["benchmarks"], context["scale"]
    records = [read_json(path) for path in inputs["selections"]]
    cells = selection_cells(
        records, context["id"], spec["methods"], context["method_labels"], benchmarks, [scale]
    )
    keys = context["input_keys"]["samples"]
    selected = {
        m: selected_accuracy(records, inputs["samples"], keys, m, scale) for m in spec["methods"]
    }
    se = pd.concat(
        [st.clustered_standard_error(selected[m], benchmarks).assign(row=m) for m in selected]
    )
    cells = cells.merge(se[["row", "column", "se"]], on=["row", "column"], how="left")
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    cells["ci_low"] = cells["value"] - z * cells["se"]
    cells["ci_high"] = cells["value"] + z * cells["se"]
    cells["confidence"] = confidence
    relative = options.get("relative_to")
    if relative:
        value = cells.set_index(["row", "column"])["value"]
        gains = []
        for method in (m for m in spec["methods"] if m != relative):
            mine, ref = selected[method], selected[relative]
            common = sorted(set(mine["seed"]) & set(ref["seed"]))
            difference = st.paired_difference(
                mine[mine["seed"].isin(common)], ref[ref["seed"].isin(common)], benchmarks,
                confidence=confidence, n_resamples=int(options.get("n_resamples", 1000)),
                seed=SEED,
            )  # fmt: skip
            gains.append(
                difference[["column", "ci_low", "ci_high", "interval"]]
                .rename(columns={"ci_low": "gain_ci_low", "ci_high": "gain_ci_high",
                                 "interval": "gain_interval"})
                .assign(row=method, gain_seeds=",".join(str(s) for s in common))
            )  # fmt: skip
        cells = cells.merge(pd.concat(gains), on=["row", "column"], how="left")
        cells["gain"] = [
            value[(row, column)] - value[(relative, column)] if row != relative else np.nan
            for row, column in zip(cells["row"], cells["column"], strict=True)
        ]
    return cells


def _yerr(values, low, high) -> np.ndarray:
    """Error bar lengths below and above each value (never negative)."""
    values = np.asarray(values, float)
    return np.clip([values - np.asarray(low, float), np.asarray(high, float) - values], 0, None)


def _draw_per_benchmark(ax, by_key, shown, columns: Mapping, labels, highlight) -> None:
    """One group of bars per benchmark column, one bar per method, with its interval."""
    width = 0.8 / max(len(shown), 1)
    for i, method in enumerate(shown):
        xs = [j + (i - (len(shown) - 1) / 2) * width for j in range(len(columns))]
        name = labels[method] + (" *" if method in highlight else "")
        mine = by_key.loc[[(method, c) for c in columns]]
        yerr = _yerr(mine["value"], mine["ci_low"], mine["ci_high"])
        ax.bar(xs, mine["value"], width, yerr=yerr, capsize=2, label=name)
    ax.set_xticks(range(len(columns)), list(columns.values()), fontsize=8)
    ax.legend(fontsize=7)


def _draw_line(ax, average, shown, options: Mapping, highlight) -> None:
    """The average against the options' ``x`` of each method (log scale), with its band."""
    xs = [options["x"][m] for m in shown]
    mine = average.loc[shown]
    ax.plot(xs, mine["value"], marker="o")
    ax.fill_between(xs, mine["ci_low"], mine["ci_high"], alpha=0.2)
    for m, x in zip(shown, xs, strict=True):
        if m in highlight:
            ax.scatter([x], [average.at[m, "value"]], marker="*", s=200, zorder=3)
    ax.set_xscale("log")
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel(options.get("xlabel", ""))


def _draw_average_bars(ax, average, shown, labels, highlight, relative) -> None:
    """One bar per method: its average, or its gain over ``relative``, value printed above."""
    mine = average.loc[shown]
    if relative:
        values, low, high = mine["gain"], mine["gain_ci_low"], mine["gain_ci_high"]
    else:
        values, low, high = mine["value"], mine["ci_low"], mine["ci_high"]
    yerr = _yerr(values, low, high)
    bars = ax.bar(range(len(shown)), values, yerr=yerr, capsize=2)
    tops = np.nan_to_num(np.asarray(values, float) + yerr[1])  # above the error bar
    for bar, m, top in zip(bars, shown, tops, strict=True):
        ax.annotate(f"{average.at[m, 'value']:.2f}", (bar.get_x() + bar.get_width() / 2, top),
                    ha="center", va="bottom", fontsize=7)  # fmt: skip
    names = [labels[m] + (" *" if m in highlight else "") for m in shown]
    ax.set_xticks(range(len(shown)), names, rotation=30, ha="right", fontsize=7)
    if relative:
        ax.axhline(0.0, color="black", linewidth=0.8)


def draw(spec: Mapping, inputs: Mapping, context: Mapping):
    import matplotlib.pyplot as plt

    options = spec.get("options") or {}
    cells = figure_cells(spec, inputs, context)
    by_key = cells.set_index(["row", "column"])
    average = by_key.xs("average", level="column")
    reference = options.get("reference")
    relative = options.get("relative_to")
    shown = [m for m in spec["methods"] if m != reference and m != relative]
    labels = context["method_labels"]
    highlight = set(options.get("highlight") or [])
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    if options.get("per_benchmark"):
        columns = {**context["benchmark_labels"], "average": "Average"}
        _draw_per_benchmark(ax, by_key, shown, columns, labels, highlight)
    elif options.get("style") == "line":
        _draw_line(ax, average, shown, options, highlight)
    else:
        _draw_average_bars(ax, average, shown, labels, highlight, relative)
    if reference:
        ref = average.loc[reference]
        ax.axhline(ref["value"], linestyle="--", color="grey", label=labels[reference])
        ax.axhspan(ref["ci_low"], ref["ci_high"], color="grey", alpha=0.15, linewidth=0)
        ax.legend(fontsize=7)
    gain = f" over {labels[relative]}" if relative else ""
    ax.set_ylabel(
        f"Avg@k{gain} (%)" if options.get("per_benchmark") else f"macro-average{gain} (%)"
    )
    confidence = float(options.get("confidence", 0.95))
    ax.set_title(
        f"experiment {context['experiment']}, scale {context['scale']}; "
        f"{100 * confidence:.0f}% intervals",
        fontsize=8,
    )
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    intervals = {
        "confidence": confidence,
        "value": "value +- z x problem-clustered SE (statistics.clustered_standard_error)",
    }
    if relative:
        intervals["gain"] = (
            f"paired bootstrap over problems and seeds vs {relative} (statistics.paired_difference)"
        )
    data = {"cells": cells.to_dict("records"), "options": dict(options), "intervals": intervals}
    return fig, data
