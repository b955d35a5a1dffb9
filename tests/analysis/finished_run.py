"""A finished run's files as the workflow names them (the expected-results page and
``dashrepro compare`` read them), built in a temporary folder, and a page's repository."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from dashrepro.analysis import expected_results as er
from dashrepro.layout import Results

TABLE = """| Method | AIME 2024 | AIME 2025 | HMMT 2025 | Average | Seeds |
|---|---|---|---|---|---|
| OPSD | 70.00 | 50.00 | 20.00 | 46.67 | 1 |
| DASH (Ours) | **72.50** | **51.25** | **21.00** | **48.25** | 1 |"""
VALUES = {"opsd": (70.0, 50.0, 20.0, 46.6666), "dash": (72.5, 51.25, 21.0, 48.25)}
LABELS = {"opsd": "OPSD", "dash": "DASH (Ours)"}


def write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def statistics_rows(kind: str) -> list[dict]:
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


def table_rows() -> list[dict]:
    """``main_results.csv`` as the table rule writes it (``TABLE`` is its Markdown): one seed,
    so no std (pandas writes NaN as an empty field)."""
    return [
        {"table": "main_results", "row": method, "label": LABELS[method], "scale": "tiny",
         "column": column, "value": value, "std": "", "n_seeds": 1, "seeds": "0",
         "selected_steps": "40", "source": "this run"}
        for method, values in VALUES.items()
        for column, value in zip(er.COLUMNS, values, strict=True)
    ]  # fmt: skip


def make_run(tmp_path: Path) -> Path:
    """A finished run's files, as the workflow names them, under tmp_path/results/tiny."""
    results = Results("tiny")
    (tmp_path / results.table("main_results", "md")).parent.mkdir(parents=True)
    (tmp_path / results.table("main_results", "md")).write_text(TABLE + "\n")
    write_csv(tmp_path / results.table("main_results", "csv"), table_rows())
    for kind, name in (("cells", "cell_statistics.csv"), ("lift", "base_lift.csv"),
                       ("paired", "paired_differences.csv")):  # fmt: skip
        write_csv(tmp_path / results.statistics(name), statistics_rows(kind))
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


def make_pages(tmp_path: Path) -> Path:
    """A repository's README (with the markers) and docs/, where the page is written."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / "README.md").write_text(f"intro\n{er.BEGIN} (written by a command) -->\n{er.END}\n")
    return root


def shift_times(run: Path) -> None:
    """The same run's files, timed on a slower machine: every job took longer."""
    for path in (run / "results" / "tiny" / "job_timings").rglob("*.tsv"):
        path.write_text("s\th:m:s\n99.0\t0:01:39\n")
    for path in (run / "results" / "tiny").glob("*.provenance.json"):
        record = json.loads(path.read_text())
        record["finished_utc"] = "2026-01-03T11:00:00+00:00"
        path.write_text(json.dumps(record))
