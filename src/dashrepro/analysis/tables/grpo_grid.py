"""Table kind ``grpo_grid``: DASH + GRPO with and without outcome aggregation, and the gain.

The paper's ``supp_grpo_grid``: one row per (eta, K) point of the grid, the macro-average
(mean over benchmarks of the seed-mean Avg@k) of the run without the gamma-lambda aggregation of
the GRPO path, with it, and the gain (aggregated minus not). The best aggregated value and the
best gain are bold.

Option ``grid``: a list of ``{eta, group_size, no_agg: <method>, agg: <method>}``; every method
it names must be in the entry's ``methods``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from dashrepro.analysis.registry import OURS
from dashrepro.analysis.tables._render import cell_ranks, cells_frame, published_cells
from dashrepro.analysis.tables.method_scores import selection_cells
from dashrepro.layout import value_name

NEEDS = ("selections",)
OPTIONS = {"grid": "a list of {eta, group_size, no_agg: method, agg: method}"}
CAPTION = "Macro-average Avg@k of DASH + GRPO without and with GRPO-path aggregation."
COLUMNS = {"no_agg": "No agg.", "agg": "Agg.", "gain": "Gain"}


def row_id(point: Mapping) -> str:
    return f"grpo_eta{value_name(point['eta'])}_k{point['group_size']}"


def build(spec: Mapping, inputs: Mapping, context: Mapping) -> pd.DataFrame:
    from dashrepro.io import read_json

    records = [read_json(path) for path in inputs["selections"]]
    scale = context["scales"][0]
    scores = selection_cells(
        records, context["id"], spec["methods"], context["method_labels"],
        context["benchmarks"], [scale],
    )  # fmt: skip
    average = scores[scores["column"] == "average"].set_index("row")
    cells = []
    for point in spec["options"]["grid"]:
        values = {k: float(average.loc[point[k], "value"]) for k in ("no_agg", "agg")}
        values["gain"] = values["agg"] - values["no_agg"]
        for column, value in values.items():
            method = point["no_agg"] if column == "no_agg" else point["agg"]  # gain: the agg run's
            cells.append({
                "table": context["id"], "row": row_id(point),
                "label": f"eta = {point['eta']}, K = {point['group_size']}", "scale": scale,
                "column": column, "value": value, "std": math.nan,
                "n_seeds": average.loc[method, "n_seeds"], "seeds": average.loc[method, "seeds"],
                "selected_steps": average.loc[method, "selected_steps"], "source": OURS,
            })  # fmt: skip
    return cells_frame(cells)


def from_published(published: pd.DataFrame, spec: Mapping, context: Mapping) -> pd.DataFrame:
    return published_cells(published, context["id"], {}, printed_rank=True)


def render(cells: pd.DataFrame, spec: Mapping, context: Mapping) -> dict[str, str]:
    marked = cells[cells["column"].isin(["agg", "gain"])]
    cells = cells.assign(rank=cell_ranks(marked, "best").reindex(cells.index))
    by_key = {(r.row, r.column): r for r in cells.itertuples()}

    def text(row: str, column: str, latex: bool) -> str:
        cell = by_key.get((row, column))
        if cell is None:
            return "--"
        value = f"{cell.value:+.2f}" if column == "gain" else f"{cell.value:.2f}"
        if cell.rank == 1:
            return rf"\textbf{{{value}}}" if latex else f"**{value}**"
        return value

    md = ["| eta | K | " + " | ".join(COLUMNS.values()) + " |", "|" + "---|" * 5]
    tex = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{@{}ccccc@{}}",
           r"\toprule",
           r"$\boldsymbol{\eta}$ & $\boldsymbol{K}$ & "
           + " & ".join(rf"\textbf{{{c}}}" for c in COLUMNS.values()) + r" \\", r"\midrule"]  # fmt: skip
    for point in spec["options"]["grid"]:
        row = row_id(point)
        eta, k = str(point["eta"]), str(point["group_size"])
        md.append("| " + " | ".join([eta, k, *(text(row, c, False) for c in COLUMNS)]) + " |")
        tex.append(" & ".join([eta, k, *(text(row, c, True) for c in COLUMNS)]) + r" \\")
    caption = "Macro-average Avg@k of DASH + GRPO without and with GRPO-path aggregation."
    tex += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
    return {"md": "\n".join(md) + "\n", "tex": "\n".join(tex) + "\n"}
