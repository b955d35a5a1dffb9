"""dashrepro compare: a run's numbers against the expected results', each with its verdict."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from dashrepro.analysis import expected_results as er
from dashrepro.analysis import reproduction as rp
from dashrepro.layout import Results

from .finished_run import (
    LABELS,
    TABLE,
    make_pages,
    make_run,
    shift_times,
    table_rows,
    write_csv,
)


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
    """Shift one main-table cell of the run by ``by`` points, as another run would have it:
    its value and interval in the statistics, its value in the table (csv and md)."""
    results = Results("tiny")
    path = run / results.statistics("cell_statistics.csv")
    rows = list(csv.DictReader(path.open()))
    for r in rows:
        if (r["table"], r["row"], r["column"]) == ("main_results", row, column):
            for key in ("value", "ci_low", "ci_high"):
                r[key] = str(float(r[key]) + by)
    write_csv(path, rows)
    table = run / results.table("main_results", "csv")
    rows = list(csv.DictReader(table.open()))
    for r in rows:
        if (r["row"], r["column"]) == (row, column):
            old, r["value"] = float(r["value"]), str(float(r["value"]) + by)
    write_csv(table, rows)
    md = run / results.table("main_results", "md")
    lines = md.read_text().splitlines()
    for i, line in enumerate(lines):
        cells = line.split("|")
        if len(cells) > 2 and cells[1].strip() == LABELS[row]:
            at = 2 + er.COLUMNS.index(column)
            cells[at] = cells[at].replace(f"{old:.2f}", f"{old + by:.2f}")
            lines[i] = "|".join(cells)
    md.write_text("\n".join(lines) + "\n")


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


def test_no_run_or_no_record_is_named_with_exit_3(run, expected, tmp_path, capsys):
    assert rp.run_cli(["tiny", "--directory", str(tmp_path / "nowhere"), "--expected", str(expected)]) == 3  # fmt: skip
    assert "nowhere/results/tiny: no such run" in capsys.readouterr().err
    assert rp.run_cli(["tiny", "--directory", str(run), "--expected", str(tmp_path / "x.json")]) == 3  # fmt: skip
    assert "x.json: cannot read" in capsys.readouterr().err


# --------------------------------------------------------------------------- issue 66, item 2
# Each case of the issue, as written: the table the user sees is read and held to its
# statistics; a malformed run or record exits 3 (cannot compare), never 1 or a traceback.

MAIN = Results("tiny").table("main_results", "md")
MAIN_CSV = Results("tiny").table("main_results", "csv")
STATISTICS = Results("tiny").statistics("cell_statistics.csv")


def _edit_csv(path: Path, row: str, column: str, key: str, value: str) -> None:
    rows = list(csv.DictReader(path.open()))
    for r in rows:
        if (r.get("table", "main_results"), r["row"], r["column"]) == ("main_results", row, column):
            r[key] = value
    write_csv(path, rows)


def _edit_record(expected: Path, edit) -> None:
    record = json.loads(expected.read_text())
    edit(record)
    expected.write_text(json.dumps(record))


def _cannot(run, expected, capsys, *extra) -> str:
    """The message of a comparison that exits 3 (cannot compare), with nothing on stdout."""
    code = rp.run_cli(["tiny", "--directory", str(run), "--expected", str(expected), *extra])
    out, err = capsys.readouterr()
    assert code == rp.CANNOT_COMPARE == 3, out + err
    assert out == "" and err.startswith("dashrepro compare: cannot compare: ")
    return err


def test_a_deleted_main_table_csv_cannot_be_compared(run, expected, capsys):
    (run / MAIN_CSV).unlink()
    assert f"{run / MAIN_CSV}: the run has no main table (csv) file" in _cannot(run, expected, capsys)  # fmt: skip


@pytest.mark.parametrize("column", ["aime2024", "average"])
def test_a_cell_of_the_csv_edited_to_99_is_named_and_not_reproduced(run, expected, capsys, column):
    _edit_csv(run / MAIN_CSV, "opsd", column, "value", "99.0")
    code, out = _compare(run, expected, capsys)
    assert code == rp.NOT_REPRODUCED == 1
    title = {"aime2024": "AIME 2024", "average": "Average"}[column]
    wanted = {"aime2024": "70.00", "average": "46.67"}[column]
    # The .md was rendered from the csv (99.00 there now), the csv beside the statistics.
    assert f"- {run / MAIN}: OPSD, {title} is {wanted}, but {run / MAIN_CSV} has 99.00" in out
    assert f"- {run / MAIN_CSV}: OPSD, {title} is 99.00, but {run / STATISTICS} has {wanted}" in out
    assert out.splitlines()[-1].startswith(
        "NOT REPRODUCED: the main table disagrees with the files it was rendered from in 2 cell(s)"
    )


def test_a_cell_of_the_markdown_edited_to_99_is_named_and_not_reproduced(run, expected, capsys):
    md = run / MAIN
    md.write_text(md.read_text().replace("| **51.25** |", "| **99.00** |"))
    code, out = _compare(run, expected, capsys)
    assert code == 1
    assert f"- {md}: DASH (Ours), AIME 2025 is **99.00**, but {run / MAIN_CSV} has 51.25" in out
    assert "in 1 cell(s)" in out.splitlines()[-1]


def test_a_row_deleted_from_the_markdown_cannot_be_compared(run, expected, capsys):
    md = run / MAIN
    md.write_text("\n".join(line for line in TABLE.splitlines() if "DASH" not in line) + "\n")
    err = _cannot(run, expected, capsys)
    assert f"{md}: no row 'DASH (Ours)', which {run / MAIN_CSV} has" in err


def test_a_relabelled_row_is_matched_by_its_label_never_by_its_position(run, expected, capsys):
    md = run / MAIN
    # A new name: no row of the table has it.
    md.write_text(TABLE.replace("| DASH (Ours) |", "| DASH v2 |") + "\n")
    assert f"{md}, line 4: row 'DASH v2' is no row of {run / MAIN_CSV}" in _cannot(run, expected, capsys)  # fmt: skip
    # DASH's row relabelled OPSD: two rows of one label.
    md.write_text(TABLE.replace("| DASH (Ours) |", "| OPSD |") + "\n")
    assert f"{md}, line 4: a second row 'OPSD'" in _cannot(run, expected, capsys)
    # The two labels swapped: each row is read as the method its label names, and its numbers
    # are not that method's (DASH's numbers are never judged as OPSD's).
    swapped = TABLE.replace("| OPSD |", "| X |").replace("| DASH (Ours) |", "| OPSD |")
    md.write_text(swapped.replace("| X |", "| DASH (Ours) |") + "\n")
    code, out = _compare(run, expected, capsys)
    assert code == 1
    assert f"- {md}: OPSD, AIME 2024 is **72.50**, but {run / MAIN_CSV} has 70.00" in out
    assert f"- {md}: DASH (Ours), AIME 2024 is 70.00, but {run / MAIN_CSV} has 72.50" in out
    assert "| main table, DASH (Ours), AIME 2024 | 72.50 [68.50, 76.00] | 72.50 [68.50, 76.00] | identical |" in out  # fmt: skip


def test_a_header_only_cell_statistics_cannot_be_compared(run, expected, capsys):
    path = run / STATISTICS
    path.write_text(path.read_text().splitlines()[0] + "\n")
    assert f"{path}: no row of the main table (main_results): header only?" in _cannot(run, expected, capsys)  # fmt: skip


def test_a_malformed_statistics_value_is_named_by_file_and_line(run, expected, capsys):
    _edit_csv(run / STATISTICS, "dash", "aime2025", "ci_low", "not a number")
    err = _cannot(run, expected, capsys)
    assert f"{run / STATISTICS}, line 7 (dash, aime2025): ci_low is 'not a number', not a number" in err  # fmt: skip


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda r: r["cells"][1].update(value="not a number"),
         "cells[1] (opsd, aime2025): value is 'not a number', not a number"),
        (lambda r: r["cells"][1].update(value="NaN"),
         "cells[1] (opsd, aime2025): value is 'NaN', not a finite number"),
        (lambda r: r["cells"][2].pop("ci_low"), "cells[2] (opsd, hmmt_feb2025): no ci_low"),
        (lambda r: r.update(cells=[]), "cells is empty: the record holds no main-table cell"),
        (lambda r: r["base"]["student"]["benchmarks"]["aime2024"].update(avg_at_k="NaN"),
         "student.benchmarks.aime2024: avg_at_k is 'NaN', not a finite number"),
    ],
    ids=["not-a-number", "nan", "no-ci_low", "no-cells", "base-nan"],
)  # fmt: skip
def test_a_malformed_record_cannot_be_compared(run, expected, capsys, edit, message):
    _edit_record(expected, edit)
    assert f"{expected}: {message}" in _cannot(run, expected, capsys)


@pytest.mark.parametrize(
    ("given", "why"),
    [("-1", "a finite number of points at least 0"), ("nan", "a finite number of points"),
     ("inf", "a finite number of points"), ("x", "'x' is not a number of points"),
     ("1e9", "1e+09 points is more than the page's own half-width, 3.50 points (its narrowest "
             "95 % interval, main table, OPSD, AIME 2024)")],
)  # fmt: skip
def test_a_tolerance_that_is_not_a_finite_number_within_the_pages_half_width_is_a_usage_error(
    run, expected, capsys, given, why
):
    with pytest.raises(SystemExit) as stopped:
        rp.run_cli(["tiny", "--directory", str(run), "--expected", str(expected),
                    "--tolerance", given])  # fmt: skip
    assert stopped.value.code == rp.USAGE == 2
    err = capsys.readouterr().err
    assert "argument --tolerance" in err and why in err


def test_the_page_half_width_is_the_narrowest_of_its_intervals(run, expected, capsys):
    page = er.read_record(expected)
    # The fixture's intervals reach 4.0 below and 3.5 above each value; the base has none.
    assert rp.narrowest_half_width(page) == (3.5, "main table, OPSD, AIME 2024")
    assert rp.run_cli(["tiny", "--directory", str(run), "--expected", str(expected),
                       "--tolerance", "3.5"]) == 0  # fmt: skip
    assert "REPRODUCED: all 11 values identical" in capsys.readouterr().out


def test_the_help_lists_the_exit_statuses_and_the_tolerance_range(capsys):
    with pytest.raises(SystemExit):
        rp.run_cli(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for code, text in rp.EXIT_STATUSES.items():
        assert f"{code} {' '.join(text.split())}" in out
    assert "at least 0 and at most the page's own half-width" in out
    bound = rp.narrowest_half_width(rp.read_expected(rp.REPO_ROOT / "docs/expected-results.json"))
    assert f"({bound[0]:.2f} points on the repository's page)" in out
    # The page that documents compare says the same number, of the same interval.
    guide = " ".join((rp.REPO_ROOT / "docs/getting-started.md").read_text().split())
    assert (
        f"({bound[0]:.2f} points on this repository's page: the base teacher's AIME 2024)" in guide
    )
    assert bound[1] == "base teacher, aime2024"


def test_the_renderers_own_markdown_reads_back_as_its_csv(tmp_path):
    """The Markdown the table renderer writes (rank marks, mean ± std, a copied row with a
    dagger and empty cells) agrees with its CSV cell by cell; a cell edited after is named."""
    from dashrepro.analysis.tables import _render

    rows = [{**r, "std": 1.5 if r["column"] != "average" else math.nan, "n_seeds": 2}
            for r in table_rows()]  # fmt: skip
    rows.append({**rows[0], "row": "base", "label": "Base", "source": "Zhao et al."})
    titles = dict(zip(er.COLUMNS, ("AIME 2024", "AIME 2025", "HMMT 2025", "Average"), strict=True))
    md = _render.score_table(
        _render.cells_frame(rows), sections=[(None, ["base"]), (None, ["opsd", "dash"])],
        scales=["tiny"], columns=titles, scale_labels={}, shading="rank", caption="",
    )["md"]  # fmt: skip
    assert "| Base† | <ins>70.00 ± 1.50</ins> | – |" in md and "**72.50 ± 1.50**" in md
    table = {(r["row"], r["scale"], r["column"]): rp._TableCell(
        r["label"], r["value"], r["std"], r["source"] != "this run") for r in rows}  # fmt: skip
    path, source = tmp_path / "main_results.md", tmp_path / "main_results.csv"
    path.write_text(md)
    assert rp.markdown_against_table(path, table, source) == []
    path.write_text(
        md.replace("| OPSD | <ins>70.00 ± 1.50</ins>", "| OPSD | <ins>70.00 ± 9.99</ins>")
    )
    assert [d.text() for d in rp.markdown_against_table(path, table, source)] == [
        f"{path}: OPSD, AIME 2024 is <ins>70.00 ± 9.99</ins>, but {source} has 70.00 ± 1.50"
    ]


def test_the_console_command_runs_it(run, expected):
    """As a user types it: ``dashrepro compare`` (the console script is dashrepro.cli:main)."""
    done = subprocess.run(
        [sys.executable, "-m", "dashrepro.cli", "compare", "tiny", "--directory", str(run),
         "--expected", str(expected)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "REPRODUCED: all 11 values identical"
