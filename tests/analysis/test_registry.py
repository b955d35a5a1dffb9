"""Tests for dashrepro.analysis.registry: finding table and figure kinds by name, their input
sets, and the problems of one config entry."""

from __future__ import annotations

import pytest

from dashrepro.analysis import registry
from dashrepro.analysis.tables import method_scores, seed_statistics


def test_kinds_are_the_public_modules_of_the_group_sorted():
    tables = registry.kinds("tables")
    assert tables == sorted(tables)
    assert {"method_scores", "seed_statistics"} <= set(tables)
    assert "_render" not in tables  # a private helper module is no kind
    assert "checkpoint_curves" in registry.kinds("figures")
    assert "checkpoint_curves" not in tables


def test_kind_module_imports_the_named_module():
    assert registry.kind_module("tables", "seed_statistics") is seed_statistics
    module = registry.kind_module("figures", "checkpoint_curves")
    assert module.__name__ == "dashrepro.analysis.figures.checkpoint_curves"


def test_kind_module_rejects_an_unknown_kind_naming_it_and_the_known_ones():
    with pytest.raises(ValueError, match="unknown table kind 'nope'") as info:
        registry.kind_module("tables", "nope")
    assert "method_scores" in str(info.value)
    with pytest.raises(ValueError, match="unknown figure kind 'method_scores'"):
        registry.kind_module("figures", "method_scores")  # a table kind is no figure kind


def test_kind_needs_uses_the_kinds_needs_function_where_it_has_one():
    assert registry.kind_needs("tables", {"kind": "seed_statistics"}) == ("selections",)
    plain = {"kind": "method_scores", "methods": ["dash"]}
    external = {**plain, "options": {"external_rows": ["base"]}}
    assert registry.kind_needs("tables", plain) == ("selections",)
    assert registry.kind_needs("tables", external) == ("selections", "published")
    assert registry.kind_needs("figures", {"kind": "checkpoint_curves"}) == (
        "summaries", "samples", "selections", "base_accuracy",
    )  # fmt: skip


def test_every_kind_needs_only_known_input_sets_and_score_kinds_are_table_kinds():
    for group in ("tables", "figures"):
        for kind in registry.kinds(group):
            assert set(registry.kind_module(group, kind).NEEDS) <= set(registry.INPUT_SETS)
    assert set(registry.SCORE_KINDS) <= set(registry.kinds("tables"))


def test_spec_problems_of_a_valid_entry_is_empty():
    assert registry.spec_problems("tables", "t", {"kind": "seed_statistics"}) == []
    spec = {"kind": "method_scores", "options": {"shading": "best", "external_rows": ["base"]}}
    assert registry.spec_problems("tables", "t", spec) == []


def test_spec_problems_names_an_unknown_kind_and_stops_there():
    (problem,) = registry.spec_problems("figures", "f", {"kind": "nope", "options": {"x": 1}})
    assert problem.startswith("figures.f.kind: unknown kind 'nope'; known: [")


def test_spec_problems_names_each_unknown_option_and_what_the_kind_takes():
    problems = registry.spec_problems(
        "tables", "t", {"kind": "seed_statistics", "options": {"x": 1, "y": 2}}
    )
    assert problems == [
        "tables.t.options.x: not an option of kind 'seed_statistics' (it takes none)",
        "tables.t.options.y: not an option of kind 'seed_statistics' (it takes none)",
    ]
    (problem,) = registry.spec_problems(
        "tables", "t", {"kind": "method_scores", "options": {"shade": "rank"}}
    )
    assert problem == (
        "tables.t.options.shade: not an option of kind 'method_scores' "
        f"(it takes {sorted(method_scores.OPTIONS)})"
    )


def test_spec_problems_names_an_unknown_input_set(monkeypatch):
    monkeypatch.setattr(seed_statistics, "NEEDS", ("selections", "tea_leaves"))
    assert registry.spec_problems("tables", "t", {"kind": "seed_statistics"}) == [
        "tables.t: kind 'seed_statistics' needs unknown input set 'tea_leaves'"
    ]
