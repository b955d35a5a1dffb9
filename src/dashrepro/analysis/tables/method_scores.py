"""Table kind ``method_scores``: Avg@k of each method's selected checkpoints, over seeds.

The paper's main results table (three scales side by side, the Base/SFT/GRPO rows copied from
Zhao et al. with a dagger, rank shading) and its ablation tables (one scale, rows in titled
sections). Per method, scale and benchmark: the mean and the sample standard deviation (ddof =
1, the paper's Eq. ``supp_seed_statistics``) over the seeds the run matrix gives the pair, of
the selected checkpoint's Avg@k; the Average column is the mean of the benchmark means (no std:
the benchmark scores of a seed are paired). Selection is the paper's best-within-budget rule
(``analysis.selection``).

Options: ``sections`` (a list of ``{title, methods}``; default: one block of every method),
``external_rows`` (rows copied from the published numbers, e.g. ``[base, sft, grpo]``, drawn
first with a dagger), ``published_table`` (the published table this one reproduces, where the external
rows come from; default this table's id), ``shading`` (``rank``: top three per column, the default; ``best``; ``none``). A scale's
header is its ``label`` in the config.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import pandas as pd

from dashrepro.analysis.registry import OURS
from dashrepro.analysis.tables import published_table_id
from dashrepro.analysis.tables._render import (
    cells_frame,
    published_cells,
    score_table,
)

NEEDS = ("selections",)
OPTIONS: dict[str, str] = {
    "sections": "row blocks: a list of {title, methods}",
    "external_rows": "rows copied from the published numbers (drawn first, with a dagger)",
    "published_table": "the published table this one reproduces (default: this id)",
    "shading": "rank (top three distinct values per column), best, or none",
}
CAPTION = (
    "Avg@k of the checkpoint with the best mean over the benchmarks, per method: mean "
    "± sample standard deviation over seeds; † marks numbers copied from the published paper."
)
EXTERNAL_LABELS = {"base": "Base", "sft": "SFT", "grpo": "GRPO"}


def needs(spec: Mapping) -> tuple[str, ...]:
    """The input sets of one entry: the published numbers too when it copies external rows."""
    options = spec.get("options") or {}
    return (*NEEDS, "published") if options.get("external_rows") else NEEDS


def selection_cells(
    records: Sequence[Mapping],
    table: str,
    methods: Sequence[str],
    method_labels: Mapping[str, str],
    benchmarks: Sequence[str],
    scales: Sequence[str],
) -> pd.DataFrame:
    """One cell per (method, scale, benchmark) and its average; ``records`` are selection
    records (method, scale, seed, selected_step, benchmark_scores)."""
    cells = []
    for scale in scales:
        for method in methods:
            mine = sorted(
                (r for r in records if r["method"] == method and r.get("scale", scale) == scale),
                key=lambda r: r["seed"],
            )
            if not mine:
                raise ValueError(f"no selection records for method {method!r} at scale {scale!r}")
            common = {
                "table": table,
                "row": method,
                "label": method_labels[method],
                "scale": scale,
                "n_seeds": len(mine),
                "seeds": ",".join(str(r["seed"]) for r in mine),
                "selected_steps": ",".join(str(r["selected_step"]) for r in mine),
                "source": OURS,
            }
            means = []
            for bench in benchmarks:
                values = pd.Series([r["benchmark_scores"][bench] for r in mine], dtype=float)
                mean = float(values.mean())
                std = float(values.std(ddof=1)) if len(values) > 1 else math.nan
                cells.append({**common, "column": bench, "value": mean, "std": std})
                means.append(mean)
            cells.append(
                {**common, "column": "average", "value": sum(means) / len(means), "std": math.nan}
            )
    return cells_frame(cells)


def _external(spec: Mapping, inputs: Mapping, context: Mapping) -> pd.DataFrame | None:
    options = spec.get("options") or {}
    rows = options.get("external_rows") or []
    if not rows:
        return None
    from dashrepro.io import read_csv

    published = read_csv(inputs["published"][0])
    table = published_table_id(context["id"], spec)
    labels = {**EXTERNAL_LABELS, **context["method_labels"]}
    cells = published_cells(published, table, labels)
    cells = cells[cells["row"].isin(rows) & cells["scale"].isin(context["scales"])]
    missing = sorted(set(rows) - set(cells["row"]))
    if missing:
        raise ValueError(f"the published table {table!r} has no rows {missing}")
    return cells.assign(table=context["id"])


def build(spec: Mapping, inputs: Mapping, context: Mapping) -> pd.DataFrame:
    from dashrepro.io import read_json

    records = [read_json(path) for path in inputs["selections"]]
    cells = selection_cells(
        records,
        context["id"],
        spec["methods"],
        context["method_labels"],
        context["benchmarks"],
        context["scales"],
    )
    external = _external(spec, inputs, context)
    return cells if external is None else pd.concat([external, cells], ignore_index=True)


def from_published(published: pd.DataFrame, spec: Mapping, context: Mapping) -> pd.DataFrame:
    """The same table's cells from the paper's published numbers."""
    labels = {**EXTERNAL_LABELS, **context["method_labels"]}
    table = published_table_id(context["id"], spec)
    cells = published_cells(published, table, labels, printed_rank=True)
    return cells.assign(table=context["id"])


def render(cells: pd.DataFrame, spec: Mapping, context: Mapping) -> dict[str, str]:
    options = spec.get("options") or {}
    external = list(options.get("external_rows") or [])
    sections = [(s.get("title"), s["methods"]) for s in options.get("sections") or []]
    if not sections:
        sections = [(None, list(spec["methods"]))]
    if external:
        sections = [(None, external), *sections]
    columns = {**context["benchmark_labels"], "average": "Average"}
    seeds = sorted({int(s) for v in cells["seeds"].dropna() for s in str(v).split(",") if s})
    caption = (
        f"Experiment {context['experiment']}: Avg@k of the checkpoint with the best mean over "
        f"the benchmarks, mean $\\pm$ sample std over seeds ({len(seeds) or 'as published'})."
    )
    return score_table(
        cells,
        sections=sections,
        scales=[s for s in context["scales"] if s in set(cells["scale"])],
        columns=columns,
        scale_labels=context.get("scale_labels") or {},
        shading=options.get("shading", "rank"),
        caption=caption,
    )
