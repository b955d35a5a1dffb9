"""Table kinds (one module each; see ``dashrepro.analysis.registry``) and the shared rendering.

from dashrepro.analysis.tables import make_table, make_published_table
make_table(spec, inputs, context)          # {"csv", "md", "tex"} of our results
make_published_table(published, spec, context)   # the same table, the paper's numbers
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Snakemake imports this package while it parses: no pandas then
    import pandas as pd


def _rendered(module, cells: pd.DataFrame, spec: Mapping, context: Mapping) -> dict[str, str]:
    return {"csv": cells.to_csv(index=False), **module.render(cells, spec, context)}


def make_table(spec: Mapping, inputs: Mapping, context: Mapping) -> dict[str, str]:
    """The table of ``spec`` rendered as ``{"csv", "md", "tex"}`` text."""
    from dashrepro.analysis.registry import kind_module

    module = kind_module("tables", spec["kind"])
    return _rendered(module, module.build(spec, inputs, context), spec, context)


def publishable(spec: Mapping) -> bool:
    """Whether the kind of ``spec`` can draw the paper's published numbers."""
    from dashrepro.analysis.registry import kind_module

    return hasattr(kind_module("tables", spec["kind"]), "from_published")


def published_table_id(name: str, spec: Mapping) -> str:
    """The published table that config table ``name`` reproduces (option ``published_table``,
    default its own name)."""
    return (spec.get("options") or {}).get("published_table", name)


#: The sources of the rows the paper copies from other work (drawn with a dagger).
EXTERNAL_SOURCES = ("Zhao et al.",)


def published_layout(path) -> dict[str, dict[str, list[str]]]:
    """Each table the published numbers at ``path`` hold: its ``scales`` and its ``external_rows``
    (rows from ``EXTERNAL_SOURCES``), each in first-row order.

    Read with the standard library: Snakemake calls this while it parses the workflow."""
    import csv

    held: dict[str, dict[str, list[str]]] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            layout = held.setdefault(row["table"], {"scales": [], "external_rows": []})
            if row["scale"] not in layout["scales"]:
                layout["scales"].append(row["scale"])
            if row["source"] in EXTERNAL_SOURCES and row["row"] not in layout["external_rows"]:
                layout["external_rows"].append(row["row"])
    return held


def published_table_specs(tables: Mapping[str, Mapping], held: Mapping[str, Mapping]) -> dict:
    """The config tables the published numbers can draw, each as the paper prints it.

    Whatever experiment is selected, ``published_tables`` then renders the paper's tables at the
    paper's scales, with the rows it copies from other work: the config gives the kind, the rows
    and the options, the numbers (``published_layout``) the scales and the external rows. A table
    whose kind cannot draw published numbers, or whose published table the numbers do not hold,
    is left out rather than rendered empty."""
    from dashrepro.analysis.registry import kind_module

    specs = {}
    for name, spec in tables.items():
        layout = held.get(published_table_id(name, spec))
        if not layout or not publishable(spec):
            continue
        spec = {**spec, "scale": list(layout["scales"])}
        if (
            layout["external_rows"]
            and "external_rows" in kind_module("tables", spec["kind"]).OPTIONS
        ):
            options = {**(spec.get("options") or {}), "external_rows": layout["external_rows"]}
            spec["options"] = options
        specs[name] = spec
    return specs


def make_published_table(
    published: pd.DataFrame, spec: Mapping, context: Mapping
) -> dict[str, str]:
    """The table of ``spec`` drawn from the paper's published numbers by the same renderer."""
    from dashrepro.analysis.registry import kind_module

    module = kind_module("tables", spec["kind"])
    return _rendered(module, module.from_published(published, spec, context), spec, context)
