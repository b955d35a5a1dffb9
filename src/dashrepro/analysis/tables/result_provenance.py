"""Table kind ``result_provenance``: where each compared result comes from, and how many runs.

The paper's ``supp_result_provenance``, generated from the config: per method, "Our rerun" and
its seeds at each scale of the entry (from the run matrix), and the external rows (option
``external_rows``, e.g. ``{base: "Not applicable", sft: "As reported"}``) as copied from Zhao
et al. It reads no results, so it is right for the config that is run.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from dashrepro.analysis.tables._render import escape_latex
from dashrepro.analysis.tables.method_scores import EXTERNAL_LABELS

NEEDS: tuple[str, ...] = ()
OPTIONS = {"external_rows": "row id -> what the paper says of its runs (copied from Zhao et al.)"}
CAPTION = "Sources and training runs of the compared results, from the run matrix."


def seeds_text(seeds) -> str:
    seeds = sorted(seeds)
    if len(seeds) == 1:
        return f"One (s = {seeds[0]})"
    return "s in {" + ",".join(map(str, seeds)) + "}"


def build(spec: Mapping, inputs: Mapping, context: Mapping) -> pd.DataFrame:
    rows = []
    for row, runs in (spec.get("options") or {}).get("external_rows", {}).items():
        rows.append({"row": row, "label": EXTERNAL_LABELS.get(row, row),
                     "source": "Zhao et al.", "scale": "", "runs": runs, "n_runs": None})  # fmt: skip
    for method in spec["methods"]:
        for scale in context["scales"]:
            seeds = context["runs"][f"{method}/{scale}"]
            rows.append({"row": method, "label": context["method_labels"][method],
                         "source": "Our rerun", "scale": scale, "runs": seeds_text(seeds),
                         "n_runs": len(seeds)})  # fmt: skip
    return pd.DataFrame(rows, columns=["row", "label", "source", "scale", "runs", "n_runs"])


def render(cells: pd.DataFrame, spec: Mapping, context: Mapping) -> dict[str, str]:
    labels = context.get("scale_labels") or {}
    grouped = []
    for _, group in cells.groupby("row", sort=False):
        runs = "; ".join(
            f"{labels.get(r.scale, r.scale)}: {r.runs}" if r.scale else r.runs
            for r in group.itertuples()
        )
        if group["runs"].nunique() == 1 and group["scale"].ne("").all():
            runs = group["runs"].iloc[0]
        grouped.append((group["label"].iloc[0], group["source"].iloc[0], runs))
    md = ["| Method | Source | Training runs |", "|---|---|---|"]
    md += [f"| {label} | {source} | {runs} |" for label, source, runs in grouped]
    tex = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{@{}lll@{}}",
           r"\toprule", r"\textbf{Method} & \textbf{Source} & \textbf{Training runs} \\",
           r"\midrule"]  # fmt: skip
    for label, source, runs in grouped:
        runs = escape_latex(runs).replace("s in {", r"$s\in\{").replace("}", r"\}$")
        tex.append(rf"{escape_latex(label)} & {source} & {runs} \\")
    n_runs = int(cells["n_runs"].fillna(0).sum())
    caption = f"Sources and training runs of the compared results ({n_runs} of our runs)."
    tex += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
    return {"md": "\n".join(md) + "\n", "tex": "\n".join(tex) + "\n"}
