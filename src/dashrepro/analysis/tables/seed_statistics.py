"""Table kind ``seed_statistics``: one method's mean ± sample std over seeds, per scale.

The paper's ``supp_four_seed_results``: rows are the benchmarks (mean ± sample standard
deviation over the seeds, ddof = 1) and a macro-average row (the mean of the benchmark means,
without a std: a seed's benchmark scores are paired), columns are the scales.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from dashrepro.analysis.tables._render import escape_latex, mean_std_cell, published_cells
from dashrepro.analysis.tables.method_scores import selection_cells

NEEDS = ("selections",)
OPTIONS: dict[str, str] = {}
CAPTION = "One method's Avg@k per benchmark and scale: mean ± sample std over seeds."


def build(spec: Mapping, inputs: Mapping, context: Mapping) -> pd.DataFrame:
    from dashrepro.io import read_json

    if len(spec["methods"]) != 1:
        raise ValueError(f"tables.{context['id']}: seed_statistics reports one method")
    records = [read_json(path) for path in inputs["selections"]]
    return selection_cells(
        records, context["id"], spec["methods"], context["method_labels"],
        context["benchmarks"], context["scales"],
    )  # fmt: skip


def from_published(published: pd.DataFrame, spec: Mapping, context: Mapping) -> pd.DataFrame:
    return published_cells(published, context["id"], context["method_labels"], printed_rank=True)


def render(cells: pd.DataFrame, spec: Mapping, context: Mapping) -> dict[str, str]:
    scales = [s for s in context["scales"] if s in set(cells["scale"])]
    labels = context.get("scale_labels") or {}
    rows = {**context["benchmark_labels"], "average": "Macro avg."}
    by_key = {(r.scale, r.column): r for r in cells.itertuples()}

    def text(scale: str, column: str, latex: bool) -> str:
        cell = by_key.get((scale, column))
        return "--" if cell is None else mean_std_cell(cell.value, cell.std, latex)

    header = ["Benchmark", *(labels.get(s, s) for s in scales)]
    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    tex = [r"\begin{table}[t]", r"\centering", r"\small",
           r"\begin{tabular}{@{}l" + "c" * len(scales) + "@{}}", r"\toprule",
           " & ".join(rf"\textbf{{{escape_latex(h)}}}" for h in header) + r" \\", r"\midrule"]  # fmt: skip
    for column, label in rows.items():
        if column == "average":
            tex.append(r"\midrule")
        md.append("| " + " | ".join([label, *(text(s, column, False) for s in scales)]) + " |")
        tex.append(
            " & ".join([escape_latex(label), *(text(s, column, True) for s in scales)]) + r" \\"
        )
    method = context["method_labels"].get(spec["methods"][0], spec["methods"][0])
    caption = (
        f"{escape_latex(method)}: Avg@k per benchmark, mean $\\pm$ sample std over seeds; the "
        "last row is the mean of the benchmark means."
    )
    tex += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
    return {"md": "\n".join(md) + "\n", "tex": "\n".join(tex) + "\n"}
