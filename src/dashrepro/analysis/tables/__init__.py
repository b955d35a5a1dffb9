"""Table kinds (one module each; see ``dashrepro.analysis.registry``) and the shared rendering."""

from __future__ import annotations

from collections.abc import Mapping


def make_table(spec: Mapping, inputs: Mapping, context: Mapping) -> dict[str, str]:
    """The table of ``spec`` rendered as ``{"csv", "md", "tex"}`` text."""
    from dashrepro.analysis.registry import kind_module

    module = kind_module("tables", spec["kind"])
    table = module.build(spec, inputs, context)
    return {
        "csv": table.to_csv(index=False),
        "md": module.markdown(table, context),
        "tex": module.latex(table, context),
    }
