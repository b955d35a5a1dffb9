"""Table kind ``main_results``: Avg@k of each method's selected checkpoints, over seeds.

Per method and benchmark, the mean and the sample standard deviation (ddof = 1, the paper's Eq.
``supp_seed_statistics``) over seeds of the selected checkpoint's Avg@k, and the Average column:
the mean of the benchmark means (the paper gives no std for it: the benchmark scores of a seed
are paired). Selection is the paper's best-within-budget rule (``analysis.selection``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from dashrepro.analysis.tables._render import escape_latex, mean_std_cell

NEEDS = ("selections",)
OPTIONS: dict[str, str] = {}
CAPTION = (
    "Avg@k of the checkpoint with the best mean over the benchmarks, per method: mean "
    "± sample standard deviation over seeds (the paper's main results table)."
)


def main_results_table(
    records: Sequence[Mapping],
    methods: Sequence[str],
    method_labels: Mapping[str, str],
    benchmarks: Sequence[str],
) -> pd.DataFrame:
    """One row per method; ``records`` carry method, seed and benchmark_scores."""
    rows = []
    for method in methods:
        mine = [r for r in records if r["method"] == method]
        if not mine:
            raise ValueError(f"no selection records for method {method!r}")
        row = {"method": method, "label": method_labels[method], "n_seeds": len(mine)}
        means = []
        for bench in benchmarks:
            values = pd.Series([r["benchmark_scores"][bench] for r in mine], dtype=float)
            mean = float(values.mean())
            std = float(values.std(ddof=1)) if len(values) > 1 else math.nan
            row[f"{bench}_mean"], row[f"{bench}_std"] = mean, std
            means.append(mean)
        row["average"] = sum(means) / len(means)
        by_seed = sorted(mine, key=lambda r: r["seed"])
        row["seeds"] = ",".join(str(r["seed"]) for r in by_seed)
        row["selected_steps"] = ",".join(str(r["selected_step"]) for r in by_seed)
        rows.append(row)
    return pd.DataFrame(rows)


def build(spec: Mapping, inputs: Mapping, context: Mapping) -> pd.DataFrame:
    from dashrepro.io import read_json

    records = [read_json(path) for path in inputs["selections"]]
    return main_results_table(
        records, spec["methods"], context["method_labels"], context["benchmarks"]
    )


def markdown(table: pd.DataFrame, context: Mapping) -> str:
    labels = context["benchmark_labels"]
    header = ["Method", *labels.values(), "Average", "Seeds"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table.to_dict("records"):
        cells = [row["label"]]
        cells += [mean_std_cell(row[f"{b}_mean"], row[f"{b}_std"], False) for b in labels]
        cells += [f"{row['average']:.2f}", str(row["n_seeds"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def latex(table: pd.DataFrame, context: Mapping) -> str:
    labels = context["benchmark_labels"]
    caption = (
        f"Experiment {context['experiment']}, scale {context['scale']}: Avg@k of the "
        "checkpoint with the best mean over the benchmarks, mean $\\pm$ sample std over "
        f"{len(context['seeds'])} seeds."
    )
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        r"\begin{tabular}{@{}l" + "c" * (len(labels) + 1) + "@{}}",
        r"\toprule",
        r"\textbf{Method} & "
        + " & ".join(rf"\textbf{{{escape_latex(v)}}}" for v in labels.values())
        + r" & \textbf{Average} \\",
        r"\midrule",
    ]
    for row in table.to_dict("records"):
        cells = [escape_latex(row["label"])]
        cells += [mean_std_cell(row[f"{b}_mean"], row[f"{b}_std"], True) for b in labels]
        cells.append(f"{row['average']:.2f}")
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"
