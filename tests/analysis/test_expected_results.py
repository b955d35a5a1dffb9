"""The expected-results page: written from a run's files, every number taken from them."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from dashrepro.analysis import expected_results as er
from dashrepro.layout import Results

from .finished_run import TABLE, make_pages, make_run, shift_times, write_csv


@pytest.fixture
def run(tmp_path) -> Path:
    return make_run(tmp_path)


def test_the_page_holds_the_run_files_numbers(run):
    facts = er.read_run("tiny", run)
    page = er.page(facts)
    assert TABLE in page
    assert "| DASH (Ours) | 72.50 [68.50, 76.00] | 51.25 [47.25, 54.75] |" in page  # cells
    assert "| OPSD | +25.00 [+21.00, +28.50] |" in page  # lift over the base student's 45
    assert "## Against OPSD on the same problems" in page
    assert "| DASH (Ours) | +2.50 [-1.50, +6.00] |" in page  # paired, OPSD itself left out
    assert "The base student averages 45.00 (aime2024 50.00); the privileged teacher 90.00" in page
    # Wall time: first start 10:00:00 to last end 10:12:30; job-seconds by rule from the timings.
    assert "3 jobs in 12 min 30 s" in page and "Test CPU with torch's AVX2 kernels" in page
    assert "| `train_lora` | 2 | 42 |" in page and "| total | 3 | 44 |" in page
    assert (
        f"`results/tiny/tables/main_results.md`: sha256 `{facts.sources['results/tiny/tables/main_results.md']}`"
        in page
    )


def test_the_readme_block_replaces_only_what_is_between_the_markers(run):
    facts = er.read_run("tiny", run)
    readme = f"intro\n{er.BEGIN} (written by a command) -->\nold\n{er.END}\nrest\n"
    new = er.with_readme_block(readme, er.readme_block(facts))
    assert new.startswith(f"intro\n{er.BEGIN} (written by a command) -->\nThe main table")
    assert new.endswith(f"![{er.FIGURE}](docs/assets/{er.FIGURE}.png)\n{er.END}\nrest\n")
    assert er.with_readme_block(new, er.readme_block(facts)) == new
    with pytest.raises(ValueError, match="markers"):
        er.with_readme_block("no markers\n", "x")


def test_the_page_is_rendered_from_its_record_alone(run, tmp_path):
    root = make_pages(tmp_path)
    facts = er.read_run("tiny", run)
    er.write(facts, er.run_figure("tiny", run), root)
    record = er.read_record(root / er.RECORD)
    assert record == facts
    assert (root / er.PAGE).read_text() == er.page(record)
    assert (
        er.with_readme_block((root / er.README).read_text(), er.readme_block(record))
        == (root / er.README).read_text()
    )
    assert (root / er.FIGURE_COPY).read_bytes() == b"\x89PNG fake"


def test_a_finished_run_timed_differently_leaves_the_page_current(run, tmp_path, capsys):
    """The README's two commands in order: the demo's run reproduces the page's numbers but
    not its times (another machine, another load); the page is not stale for that."""
    root = make_pages(tmp_path)
    er.write(er.read_run("tiny", run), er.run_figure("tiny", run), root)
    written = (root / er.PAGE).read_text()
    shift_times(run)
    facts = er.read_run("tiny", run)
    assert facts.measured.wall_seconds == 25 * 3600 and facts.measured.job_seconds == 297
    assert er.check(facts, er.run_figure("tiny", run), root) == []
    assert er.main(["tiny", "--directory", str(run), "--root", str(root), "--check"]) == 0
    out = capsys.readouterr().out
    assert "the page is current" in out and "3 jobs in 12 min 30 s" in out  # the page's run
    assert "3 jobs in 1500 min 00 s" in out  # this run's, shown as a measurement
    assert (root / er.PAGE).read_text() == written


def test_a_run_whose_numbers_differ_is_reported_as_such_not_as_out_of_date(run, tmp_path):
    root = make_pages(tmp_path)
    er.write(er.read_run("tiny", run), er.run_figure("tiny", run), root)
    cells = run / Results("tiny").statistics("cell_statistics.csv")
    rows = list(csv.DictReader(cells.open()))
    rows[1]["value"] = str(float(rows[1]["value"]) + 1.0)
    write_csv(cells, rows)
    problems = er.check(er.read_run("tiny", run), er.run_figure("tiny", run), root)
    assert len(problems) == 1 and "numbers differ from the page's in 1 of" in problems[0]
    assert "out of date" not in problems[0] and "dashrepro compare tiny" in problems[0]


def test_a_page_that_is_not_what_the_run_gives_is_out_of_date(run, tmp_path):
    root = make_pages(tmp_path)
    er.write(er.read_run("tiny", run), er.run_figure("tiny", run), root)
    (root / er.PAGE).write_text((root / er.PAGE).read_text().replace("45.00", "45.01"))
    (root / er.FIGURE_COPY).write_bytes(b"another figure")
    problems = er.check(er.read_run("tiny", run), er.run_figure("tiny", run), root)
    assert [p.split(" is out of date")[0] for p in problems] == [
        str(root / er.PAGE),
        str(root / er.FIGURE_COPY),
    ]
    (root / er.RECORD).unlink()
    assert (
        "expected-results.json is missing"
        in er.check(er.read_run("tiny", run), er.run_figure("tiny", run), root)[0]
    )


def test_the_committed_page_is_the_default_runs_where_that_run_is_here(repo_root):
    """With a default run in results/tiny (``bash scripts/demo.sh``, before or after the
    tests): ``dashrepro compare`` answers for it, and if its numbers are the page's the page
    must be current, whatever the run's times."""
    if not (repo_root / Results("tiny").table("main_results", "md")).is_file():
        pytest.skip("no default run here (results/tiny): run `bash scripts/demo.sh` first")
    from dashrepro.analysis import reproduction

    done = subprocess.run([sys.executable, "-m", "dashrepro.cli", "compare", "tiny"],
                          cwd=repo_root, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert "REPRODUCED" in done.stdout.splitlines()[-1], done.stdout[-2000:]
    facts = er.read_run("tiny", repo_root)
    expected = er.read_record(repo_root / er.RECORD)
    if any(v.kind != reproduction.IDENTICAL for v in reproduction.compare(expected, facts)):
        pytest.skip("this run's numbers are not the page's (another machine): see the compare")
    assert done.returncode == 0 and "REPRODUCED: all" in done.stdout
    assert er.main(["tiny", "--directory", str(repo_root), "--check"]) == 0
