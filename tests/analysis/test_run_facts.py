"""run_facts: a finished run's facts from its files, and their record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dashrepro.analysis import run_facts as rf
from dashrepro.layout import Results

from .finished_run import make_run


@pytest.fixture
def run(tmp_path) -> Path:
    return make_run(tmp_path)


def test_the_facts_round_trip_through_their_record(run, tmp_path):
    facts = rf.read_run("tiny", run)
    assert facts.measured.jobs == 3 and facts.measured.job_seconds == 43.5
    assert facts.measured.wall_seconds == 750.0  # 10:00:00 to 10:12:30
    (tmp_path / "record.json").write_text(json.dumps(facts.to_json()))
    assert rf.read_record(tmp_path / "record.json") == facts
    (tmp_path / "other.json").write_text(json.dumps({"experiment": "tiny"}))
    with pytest.raises(ValueError, match="other.json: not an expected-results record"):
        rf.read_record(tmp_path / "other.json")


def test_a_missing_file_is_named(run):
    (run / Results("tiny").statistics("base_lift.csv")).unlink()
    with pytest.raises(FileNotFoundError, match="base_lift.csv: the run has no lifts file"):
        rf.read_run("tiny", run)


def test_a_statistics_file_without_main_table_rows_is_named(run):
    """A header alone (an interrupted or filtered run): a clear error, not an IndexError."""
    cells = run / Results("tiny").statistics("cell_statistics.csv")
    cells.write_text(cells.read_text().splitlines()[0] + "\n")
    with pytest.raises(ValueError, match="cell_statistics.csv: no row of the main table"):
        rf.read_run("tiny", run)
