"""dashrepro compare: a run's numbers against the expected results', each with its verdict."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from dashrepro.analysis import expected_results as er
from dashrepro.analysis import reproduction as rp
from dashrepro.layout import Results

from .finished_run import make_pages, make_run, shift_times, write_csv


@pytest.fixture
def run(tmp_path) -> Path:
    return make_run(tmp_path)


@pytest.fixture
def expected(run, tmp_path) -> Path:
    """The record of a page written from ``run``'s files, before anything moved."""
    root = make_pages(tmp_path)
    er.write(er.read_run("tiny", run), er.run_figure("tiny", run), root)
    return root / er.RECORD


def _move(run: Path, row: str, column: str, by: float) -> None:
    """Shift one main-table cell of the run (value and interval) by ``by`` points."""
    path = run / Results("tiny").statistics("cell_statistics.csv")
    rows = list(csv.DictReader(path.open()))
    for r in rows:
        if (r["table"], r["row"], r["column"]) == ("main_results", row, column):
            for key in ("value", "ci_low", "ci_high"):
                r[key] = str(float(r[key]) + by)
    write_csv(path, rows)


def _compare(run: Path, expected: Path, capsys) -> tuple[int, str]:
    code = rp.run_cli(["tiny", "--directory", str(run), "--expected", str(expected)])
    return code, capsys.readouterr().out


def test_an_identical_run_is_reproduced_and_its_times_are_shown_not_compared(run, expected, capsys):
    shift_times(run)
    code, out = _compare(run, expected, capsys)
    assert code == 0
    assert out.splitlines()[-1] == "REPRODUCED: all 11 values identical"  # 8 cells, 3 base
    assert "| main table, DASH (Ours), AIME 2025 | 51.25 [47.25, 54.75] | 51.25 [47.25, 54.75] | identical |" in out  # fmt: skip
    assert "| base student, aime2024 | 50.00 | 50.00 | identical |" in out
    assert "- expected: 3 jobs in 12 min 30 s" in out and "; 44 job-seconds" in out
    assert "- this run: 3 jobs in 1500 min 00 s" in out and "; 297 job-seconds" in out


def test_a_cell_one_sample_away_is_within_what_holds_across_cpus(run, expected, capsys):
    _move(run, "opsd", "aime2024", 0.17)
    code, out = _compare(run, expected, capsys)
    assert code == 0
    assert "| main table, OPSD, AIME 2024 | 70.00 [66.00, 73.50] | 70.17 [66.17, 73.67] | within (+0.17) |" in out  # fmt: skip
    assert out.splitlines()[-1] == (
        "REPRODUCED within what holds across CPUs: 10 of 11 values identical, 1 within 0.50 points"
    )


@pytest.mark.parametrize(
    ("by", "where"),
    [(2.0, "inside the page's 95 % interval, 0.57 of its half-width"),
     (-5.0, "outside the page's 95 % interval, 1.25 of its half-width")],
)  # fmt: skip
def test_a_cell_beyond_the_tolerance_is_different_by_how_much_against_its_interval(
    run,
    expected,
    capsys,
    by,
    where,
):
    _move(run, "dash", "hmmt_feb2025", by)
    code, out = _compare(run, expected, capsys)
    assert code == 1
    assert f"| different ({by:+.2f} points; {where}) |" in out
    assert out.splitlines()[-1].startswith("NOT REPRODUCED: 1 of 11 values differ beyond 0.50")


def test_a_wider_tolerance_is_the_users_choice(run, expected, capsys):
    _move(run, "dash", "hmmt_feb2025", 2.0)
    assert rp.run_cli(["tiny", "--directory", str(run), "--expected", str(expected),
                       "--tolerance", "2.5"]) == 0  # fmt: skip
    assert "within (+2.00)" in capsys.readouterr().out


def test_values_missing_on_either_side_are_different(run, expected):
    page = er.read_record(expected)
    fewer = er.RunFacts(**{**page.__dict__, "cells": page.cells[1:]})
    verdicts = {v.name: v for v in rp.compare(page, fewer)}
    missing = verdicts["main table, OPSD, AIME 2024"]
    assert (missing.kind, missing.detail, missing.observed) == (rp.DIFFERENT, "missing from this run", None)  # fmt: skip
    extra = {v.name: v for v in rp.compare(fewer, page)}["main table, OPSD, AIME 2024"]
    assert (extra.kind, extra.detail) == (rp.DIFFERENT, "not on the page")


def test_no_run_or_no_record_is_named_with_exit_2(run, expected, tmp_path, capsys):
    assert rp.run_cli(["tiny", "--directory", str(tmp_path / "nowhere"), "--expected", str(expected)]) == 2  # fmt: skip
    assert "main_results.md: the run has no table file" in capsys.readouterr().err
    assert rp.run_cli(["tiny", "--directory", str(run), "--expected", str(tmp_path / "x.json")]) == 2  # fmt: skip
    assert "x.json: cannot read" in capsys.readouterr().err


def test_the_console_command_runs_it(run, expected):
    """As a user types it: ``dashrepro compare`` (the console script is dashrepro.cli:main)."""
    done = subprocess.run(
        [sys.executable, "-m", "dashrepro.cli", "compare", "tiny", "--directory", str(run),
         "--expected", str(expected)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "REPRODUCED: all 11 values identical"
