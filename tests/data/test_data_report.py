"""Tests for dashrepro.data.report: the cleaning report's summary."""

from __future__ import annotations

import pandas as pd

from dashrepro.data import datasets as ds


def test_summary_lists_at_most_ten_ids():
    frame = pd.DataFrame({"id": ["d"] * 16, "problem": ["p"] * 16, "answer": ["1"] * 16})
    _, report = ds.normalise(frame, "local_benchmark", "src")
    line = report.summary().splitlines()[1]
    assert line.startswith("  duplicate id (first kept): 15 row(s): row 1 (id d")
    assert line.count("(id d") == 10
    assert line.endswith("... and 5 more")
