"""Figure kind ``method_comparison``: methods' seed-mean Avg@k side by side.

The paper's ablation figures, from the same selection records as the tables
(``tables.method_scores.selection_cells``): ``aggregation_adaptivity`` (the macro-average of
fixed lambda values and inverse gap beside DASH, OPSD as a reference line),
``factorial_ablation`` (gains over OPSD, the absolute value annotated on each bar),
``prop_kappa`` (the macro-average against kappa, a line, DASH's kappa = 5 starred) and
``distillation_divergence`` (forward KL, JSD and reverse KL per benchmark).

Options: ``style`` (``bars``, the default, or ``line``), ``x`` (method -> x value, for a
line, with ``xlabel``), ``relative_to`` (plot gains over this method; the absolute values are
annotated), ``per_benchmark`` (grouped bars per benchmark and the average), ``highlight``
(methods starred: the paper's settings), ``reference`` (a method drawn as a dashed line).
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

NEEDS = ("selections",)
OPTIONS = {
    "style": "bars (default) or line",
    "x": "method -> x value (line style)",
    "xlabel": "the x axis label (line style)",
    "relative_to": "a method: plot gains over it, annotate absolute values",
    "per_benchmark": "grouped bars per benchmark and the average",
    "highlight": "methods to star (the paper's settings)",
    "reference": "a method drawn as a dashed horizontal line at its average",
}
CAPTION = "Seed-mean Avg@k of compared methods (macro-average unless per benchmark)."


def figure_cells(spec: Mapping, inputs: Mapping, context: Mapping) -> pd.DataFrame:
    from dashrepro.analysis.tables.method_scores import selection_cells
    from dashrepro.io import read_json

    records = [read_json(path) for path in inputs["selections"]]
    return selection_cells(
        records, context["id"], spec["methods"], context["method_labels"],
        context["benchmarks"], [context["scale"]],
    )  # fmt: skip


def draw(spec: Mapping, inputs: Mapping, context: Mapping):
    import matplotlib.pyplot as plt

    options = spec.get("options") or {}
    cells = figure_cells(spec, inputs, context)
    average = cells[cells["column"] == "average"].set_index("row")["value"]
    reference = options.get("reference")
    relative = options.get("relative_to")
    shown = [m for m in spec["methods"] if m != reference and m != relative]
    labels = context["method_labels"]
    highlight = set(options.get("highlight") or [])
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    if options.get("per_benchmark"):
        columns = {**context["benchmark_labels"], "average": "Average"}
        by_key = cells.set_index(["row", "column"])["value"]
        width = 0.8 / max(len(shown), 1)
        for i, method in enumerate(shown):
            xs = [j + (i - (len(shown) - 1) / 2) * width for j in range(len(columns))]
            name = labels[method] + (" *" if method in highlight else "")
            ax.bar(xs, [by_key[(method, c)] for c in columns], width, label=name)
        ax.set_xticks(range(len(columns)), list(columns.values()), fontsize=8)
        ax.legend(fontsize=7)
    elif options.get("style") == "line":
        xs = [options["x"][m] for m in shown]
        ax.plot(xs, [average[m] for m in shown], marker="o")
        for m, x in zip(shown, xs, strict=True):
            if m in highlight:
                ax.scatter([x], [average[m]], marker="*", s=200, zorder=3)
        ax.set_xscale("log")
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.set_xlabel(options.get("xlabel", ""))
    else:
        base = average[relative] if relative else 0.0
        values = [average[m] - base for m in shown]
        bars = ax.bar(range(len(shown)), values)
        for bar, m in zip(bars, shown, strict=True):
            ax.annotate(f"{average[m]:.2f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)  # fmt: skip
        names = [labels[m] + (" *" if m in highlight else "") for m in shown]
        ax.set_xticks(range(len(shown)), names, rotation=30, ha="right", fontsize=7)
        if relative:
            ax.axhline(0.0, color="black", linewidth=0.8)
    if reference:
        ax.axhline(average[reference], linestyle="--", color="grey", label=labels[reference])
        ax.legend(fontsize=7)
    gain = f" over {labels[relative]}" if relative else ""
    ax.set_ylabel(
        f"Avg@k{gain} (%)" if options.get("per_benchmark") else f"macro-average{gain} (%)"
    )
    ax.set_title(f"experiment {context['experiment']}, scale {context['scale']}", fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    data = {"cells": cells.to_dict("records"), "options": dict(options)}
    return fig, data
