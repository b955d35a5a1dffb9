"""Table kind ``batch_runtime``: each scale's batch decomposition and measured training time.

The paper's ``supp_batch_runtime``: per scale, micro-batch / gradient accumulation / processes
(from the config, so it cannot disagree with what ran) and the wall time of one training run:
the sum over steps of the trainer's per-phase seconds (``train_metrics.parquet``), the mean over
the entry's runs at that scale (model loading and queueing excluded; the paper's times include
scheduler overhead).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pandas as pd

from dashrepro.analysis.registry import OURS
from dashrepro.analysis.tables._render import cells_frame, escape_latex, published_cells

NEEDS = ("metrics",)
OPTIONS: dict[str, str] = {}
CAPTION = "Batch decomposition (micro / accumulation / processes) and measured hours per run."
BATCH = ("micro_batch_size", "grad_accumulation", "num_gpus")


def run_hours(metrics: pd.DataFrame) -> float:
    """Hours of one run: the per-phase seconds of every step, summed."""
    seconds = [c for c in metrics.columns if c.startswith("seconds_")]
    return float(metrics[seconds].to_numpy().sum()) / 3600.0


def build(spec: Mapping, inputs: Mapping, context: Mapping) -> pd.DataFrame:
    from dashrepro.io import read_parquet

    hours: dict[str, list[float]] = {}
    # Each run's metrics with its [method, scale, seed] beside it (context["input_keys"]).
    keys = context["input_keys"]["metrics"]
    for path, (_, scale, _) in zip(inputs["metrics"], keys, strict=True):
        hours.setdefault(scale, []).append(run_hours(read_parquet(path)))
    cells = []
    for scale in context["scales"]:
        layout = context["train"][scale]  # Workflow.batch_layout's
        values = {
            "micro_batch_size": layout["micro_batch_size"],
            "grad_accumulation": layout["grad_accumulation"],
            "num_gpus": layout["num_processes"],
            "hours": sum(hours[scale]) / len(hours[scale]),
        }
        for column, value in values.items():
            cells.append({"table": context["id"], "row": spec["methods"][0],
                          "label": context["method_labels"][spec["methods"][0]], "scale": scale,
                          "column": column, "value": float(value), "std": math.nan,
                          "n_seeds": len(hours[scale]), "seeds": None, "selected_steps": None,
                          "source": OURS})  # fmt: skip
    return cells_frame(cells)


def from_published(published: pd.DataFrame, spec: Mapping, context: Mapping) -> pd.DataFrame:
    return published_cells(published, context["id"], context["method_labels"], printed_rank=True)


def render(cells: pd.DataFrame, spec: Mapping, context: Mapping) -> dict[str, str]:
    labels = context.get("scale_labels") or {}
    by_key = {(r.scale, r.column): r.value for r in cells.itertuples()}
    lines = []
    for scale in context["scales"]:
        batch = "/".join(
            "?" if (scale, c) not in by_key else str(int(by_key[(scale, c)])) for c in BATCH
        )
        hours = by_key.get((scale, "hours"))
        time = "--" if hours is None else f"{hours:.2f} h"
        lines.append((labels.get(scale, scale), batch, time))
    md = ["| Model | Micro/accum./GPU | Time per run |", "|---|---|---|"]
    md += [f"| {model} | {batch} | {time} |" for model, batch, time in lines]
    tex = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{@{}lcc@{}}",
           r"\toprule", r"\textbf{Model} & \textbf{Micro/accum./GPU} & \textbf{Time} \\",
           r"\midrule"]  # fmt: skip
    tex += [rf"{escape_latex(m)} & ${b}$ & {t} \\" for m, b, t in lines]
    caption = "Batch decomposition (per-device batch, accumulation, processes) and hours per run."
    tex += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{caption}}}", r"\end{table}"]
    return {"md": "\n".join(md) + "\n", "tex": "\n".join(tex) + "\n"}
