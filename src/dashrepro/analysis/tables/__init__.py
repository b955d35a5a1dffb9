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


def make_published_table(
    published: pd.DataFrame, spec: Mapping, context: Mapping
) -> dict[str, str]:
    """The table of ``spec`` drawn from the paper's published numbers by the same renderer."""
    from dashrepro.analysis.registry import kind_module

    module = kind_module("tables", spec["kind"])
    return _rendered(module, module.from_published(published, spec, context), spec, context)
