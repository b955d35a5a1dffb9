"""Tests for dashrepro.data.layouts: a source's columns checked against its layout."""

from __future__ import annotations

import pytest
from data_helpers import write_jsonl, write_parquet

from dashrepro.data import layouts, reading


def test_missing_column_names_file_layout_and_column(tmp_path):
    path = write_parquet(tmp_path / "train.parquet", [{"Question": "q", "Answer": "1"}])
    with pytest.raises(layouts.DataError) as info:
        reading.load_table(path, layout="opsd_train")
    message = str(info.value)
    assert str(path) in message and "'opsd_train'" in message
    assert "'solution' (for reference_solution)" in message
    path = write_jsonl(tmp_path / "m.jsonl", [{"problem_idx": 1, "answer": "3"}])
    with pytest.raises(layouts.DataError, match=r"layout 'matharena' needs column\(s\) 'problem'"):
        reading.load_table(path, layout="matharena")
