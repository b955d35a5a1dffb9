"""The registry of table and figure kinds: one module per kind, found by name.

A table or figure of the config (``tables:`` / ``figures:``, id -> ``kind``, ``scale``,
``methods``, ``options``) is made by ``dashrepro.analysis.tables.<kind>`` or
``dashrepro.analysis.figures.<kind>``. Each kind module declares, without importing matplotlib
or torch (Snakemake reads them while it parses): ``NEEDS`` (result sets from ``INPUT_SETS``),
``OPTIONS``, ``CAPTION``; tables ``build`` and ``render`` (optionally ``from_published`` and
``needs``), figures ``draw``. The contract in full: docs/extending.md. Adding a table or
figure: a module in ``tables/`` or ``figures/`` and an entry in the config.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from dashrepro.layout import BASE_ACCURACY, SAMPLES, SUMMARY, TOKEN_TRACES, TRAIN_METRICS

#: The result sets a kind may need, per (method, seed) of its spec at its scale.
INPUT_SETS = {
    "selections": "selection/<method>/<scale>/seed<s>.json: the selected checkpoint's scores",
    "summaries": f"eval/<method>/<scale>/seed<s>/step<t>/{SUMMARY} of every checkpoint",
    "samples": f"eval/<method>/<scale>/seed<s>/step<t>/{SAMPLES} of every checkpoint",
    "traces": f"runs/<method>/<scale>/seed<s>/{TOKEN_TRACES}",
    "metrics": f"runs/<method>/<scale>/seed<s>/{TRAIN_METRICS}",
    "base_accuracy": f"eval/base/<scale>/{BASE_ACCURACY} (one file per scale)",
    "published": "the paper's published numbers (config key published_numbers, one CSV)",
}

#: Table kinds whose rows are methods and whose cells are means over seeds of each seed's
#: selected checkpoint's Avg@k: the cells that the audit and the statistics follow.
SCORE_KINDS = ("method_scores", "seed_statistics")
#: The ``source`` of a number this pipeline computed (the published file says "this paper" or
#: "Zhao et al."; a table's copied external rows keep theirs).
OURS = "this run"


def kinds(group: str) -> list[str]:
    """The kind names of ``group`` ("tables" or "figures"): its modules."""
    package = importlib.import_module(f"dashrepro.analysis.{group}")
    return sorted(
        m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")
    )


def kind_module(group: str, kind: str) -> ModuleType:
    if kind not in kinds(group):
        raise ValueError(f"unknown {group[:-1]} kind {kind!r}; known: {kinds(group)}")
    return importlib.import_module(f"dashrepro.analysis.{group}.{kind}")


def kind_needs(group: str, spec: dict) -> tuple[str, ...]:
    """The input sets of one entry: its kind's ``needs(spec)`` where the kind has one (the sets
    may depend on its options), else ``NEEDS``."""
    module = kind_module(group, spec["kind"])
    return tuple(module.needs(spec)) if hasattr(module, "needs") else tuple(module.NEEDS)


def spec_problems(group: str, name: str, spec: dict) -> list[str]:
    """What is wrong with one ``tables``/``figures`` entry (an unknown kind, option, input set)."""
    where = f"{group}.{name}"
    if spec["kind"] not in kinds(group):
        return [f"{where}.kind: unknown kind {spec['kind']!r}; known: {kinds(group)}"]
    module = kind_module(group, spec["kind"])
    problems = [
        f"{where}.options.{key}: not an option of kind {spec['kind']!r} "
        f"(it takes {sorted(module.OPTIONS) or 'none'})"
        for key in spec.get("options") or {}
        if key not in module.OPTIONS
    ]
    problems += [
        f"{where}: kind {spec['kind']!r} needs unknown input set {need!r}"
        for need in kind_needs(group, spec)
        if need not in INPUT_SETS
    ]
    return problems
