"""Figure kinds (one module each; see ``dashrepro.analysis.registry``)."""

from __future__ import annotations

from collections.abc import Mapping


def make_figure(spec: Mapping, inputs: Mapping, context: Mapping):
    """The figure of ``spec`` and the data it shows: ``(matplotlib Figure, JSON-able dict)``."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display

    from dashrepro.analysis.registry import kind_module

    return kind_module("figures", spec["kind"]).draw(spec, inputs, context)
