"""The expected-results page: written from a run's files, every number taken from them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from dashrepro.analysis import expected_results as er
from dashrepro.layout import Results

TABLE = """| Method | AIME 2024 | AIME 2025 | HMMT 2025 | Average | Seeds |
|---|---|---|---|---|---|
| OPSD | 70.00 | 50.00 | 20.00 | 46.67 | 1 |
| DASH (Ours) | **72.50** | **51.25** | **21.00** | **48.25** | 1 |"""
VALUES = {"opsd": (70.0, 50.0, 20.0, 46.6666), "dash": (72.5, 51.25, 21.0, 48.25)}


def _csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _statistics_rows(kind: str) -> list[dict]:
    rows = []
    for method, values in VALUES.items():
        if kind == "paired" and method == "opsd":
            continue
        for column, value in zip(er.COLUMNS, values, strict=True):
            shift = (
                value - 45.0 if kind == "lift" else value - VALUES["opsd"][er.COLUMNS.index(column)]
            )
            number = value if kind == "cells" else shift
            row = {"table": "main_results", "row": method, "scale": "tiny", "column": column,
                   "ci_low": number - 4.0, "ci_high": number + 3.5, "interval": "bootstrap basic"}  # fmt: skip
            row["value" if kind == "cells" else "difference"] = number
            if kind == "paired":
                row["reference"] = "opsd"
            rows.append(row)
    rows.append({**rows[0], "table": "other_table"})  # another table's rows are left out
    return rows


@pytest.fixture
def run(tmp_path) -> Path:
    """A finished run's files, as the workflow names them, under tmp_path/results/tiny."""
    results = Results("tiny")
    (tmp_path / results.table("main_results", "md")).parent.mkdir(parents=True)
    (tmp_path / results.table("main_results", "md")).write_text(TABLE + "\n")
    for kind, name in (("cells", "cell_statistics.csv"), ("lift", "base_lift.csv"),
                       ("paired", "paired_differences.csv")):  # fmt: skip
        _csv(tmp_path / results.statistics(name), _statistics_rows(kind))
    base = {"student": {"mean_over_benchmarks": 45.0, "benchmarks": {"aime2024": {"avg_at_k": 50.0}}},
            "teacher": {"mean_over_benchmarks": 90.0, "benchmarks": {}}}  # fmt: skip
    accuracy = tmp_path / results.base_eval_file("accuracy.json", "tiny")
    accuracy.parent.mkdir(parents=True)
    accuracy.write_text(json.dumps(base))
    for rule, key, seconds in (
        ("train_lora", "a", 30.0),
        ("train_lora", "b", 12.5),
        ("table", None, 1.0),
    ):
        timing = tmp_path / results.job_timing(rule, key)
        timing.parent.mkdir(parents=True, exist_ok=True)
        timing.write_text(f"s\th:m:s\n{seconds}\t0:00:{int(seconds):02d}\n")
    for name, start, end in (("a", "2026-01-02T10:00:00+00:00", "2026-01-02T10:05:00+00:00"),
                             ("b", "2026-01-02T10:01:00+00:00", "2026-01-02T10:12:30+00:00")):  # fmt: skip
        record = {"started_utc": start, "finished_utc": end,
                  "numerics": {"cpu": "Test CPU", "aten_cpu_capability": "AVX2"}}  # fmt: skip
        (tmp_path / results.root / f"{name}.provenance.json").write_text(json.dumps(record))
    figure = tmp_path / results.figure(er.FIGURE, "png")
    figure.parent.mkdir(parents=True)
    figure.write_bytes(b"\x89PNG fake")
    return tmp_path


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


def test_a_missing_file_is_named(run):
    (run / Results("tiny").statistics("base_lift.csv")).unlink()
    with pytest.raises(FileNotFoundError, match="base_lift.csv: the run has no lifts file"):
        er.read_run("tiny", run)


def test_the_committed_page_is_the_default_runs_where_that_run_is_here(repo_root):
    """With a default run in results/tiny (``bash scripts/demo.sh``): if the page was written
    from these very files (their sha256 on the page), it must be what they give now."""
    if not (repo_root / Results("tiny").table("main_results", "md")).is_file():
        pytest.skip("no default run here (results/tiny): run `bash scripts/demo.sh` first")
    facts = er.read_run("tiny", repo_root)
    committed = (repo_root / "docs" / "expected-results.md").read_text()
    if any(digest not in committed for digest in facts.sources.values()):
        pytest.skip("docs/expected-results.md was written from another run's files")
    assert er.main(["tiny", "--directory", str(repo_root), "--check"]) == 0
