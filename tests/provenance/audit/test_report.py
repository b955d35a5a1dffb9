"""Tests for ``dashrepro.provenance.audit.report``: it audits the tables it is given."""

from __future__ import annotations

import pandas as pd
import pytest

from dashrepro.provenance.audit.report import audit_report, score_cells
from dashrepro.provenance.records import write_provenance

from .audit_helpers import RESULTS, write


def test_the_report_audits_the_tables_it_is_given(tree):
    write(tree / RESULTS / "tables/stale.csv", "table,row,scale,column,value\n")
    assert {c[0] for c in score_cells(tree, RESULTS)} == {"t"}  # a table without a record: skipped
    assert score_cells(tree, RESULTS, tables=["t"]) == [
        ("t", "dash", "s", "average"),
        ("t", "base", "s", "average"),
    ]
    # A table of copied rows only: its cells need no graded samples to be audited.
    copied = tree / RESULTS / "tables/c.csv"
    frame = pd.read_csv(tree / RESULTS / "tables/t.csv")
    write(copied, frame[frame["row"] == "base"].assign(table="c").to_csv(index=False))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tree)
        write_provenance(copied, "table", params={"spec": {"kind": "method_scores"}})
    rows, markdown, page = audit_report(tree, RESULTS, tables=["c"])
    assert [(r["table"], r["row"], r["status"], r["source"]) for r in rows] == [
        ("c", "base", "ok", "Zhao et al.")
    ]
    assert markdown.startswith("# Audit of every table cell") and "1 cells, 0 flagged" in markdown
    assert "| c | base | s | average | 37.10 |" in markdown and "<table" in page
