"""The facts of a finished run, read from its files, and their record (JSON).

``read_run`` reads ``results/<experiment>/``: the main table, its cells' intervals, the lift over
the base student and the paired differences against the reference method (``statistics/``),
the base model's accuracies, and, as a ``Measurement``, the job timings and the provenance
records (wall time, CPU). ``RunFacts.to_json`` is the record the expected-results page is
written from (``docs/expected-results.json``); ``dashrepro compare`` reads it back.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from dashrepro import layout
from dashrepro.io import read_job_seconds, read_json, sha256_file

#: Where the expected results' record lives in the repository.
RECORD = Path("docs") / "expected-results.json"
COLUMNS = ("aime2024", "aime2025", "hmmt_feb2025", "average")
COLUMN_TITLES = dict(zip(COLUMNS, ("AIME 2024", "AIME 2025", "HMMT 2025", "Average"), strict=True))
# The statistics columns the page (and the comparison) read; the record keeps only these.
KEPT_COLUMNS = ("table", "row", "scale", "column", "value", "difference", "reference",
                "ci_low", "ci_high", "interval")  # fmt: skip


@dataclass(frozen=True)
class Measurement:
    """How long a run took and on what: a measurement of that run, not a result to reproduce."""

    seconds_by_rule: dict[str, tuple[int, float]]  # rule -> (jobs, job-seconds)
    started: datetime  # the first job's start
    wall_seconds: float  # first job's start to last job's end
    cpu: str
    kernel_path: str

    @property
    def jobs(self) -> int:
        return sum(n for n, _ in self.seconds_by_rule.values())

    @property
    def job_seconds(self) -> float:
        return sum(s for _, s in self.seconds_by_rule.values())

    def summary(self) -> str:
        """One sentence: jobs, wall time, date, CPU and kernel path."""
        return (
            f"{self.jobs} jobs in {minutes(self.wall_seconds)} (first job's start to last "
            f"job's end) on {self.started:%Y-%m-%d}, on {self.cpu} with torch's "
            f"{self.kernel_path} kernels (from the run's provenance records)"
        )

    def to_json(self) -> dict:
        return {**asdict(self), "started": self.started.isoformat(),
                "seconds_by_rule": {r: list(v) for r, v in self.seconds_by_rule.items()}}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> Measurement:
        return cls(
            seconds_by_rule={
                r: (int(n), float(s)) for r, (n, s) in data["seconds_by_rule"].items()
            },
            started=datetime.fromisoformat(data["started"]),
            wall_seconds=float(data["wall_seconds"]),
            cpu=data["cpu"],
            kernel_path=data["kernel_path"],
        )


@dataclass(frozen=True)
class RunFacts:
    """What the page says of one run, each read from a file of the run. Its JSON form is the
    page's record (``docs/expected-results.json``): the page is rendered from it alone."""

    experiment: str
    table: str  # main_results.md as written
    cells: list[dict]  # cell_statistics rows of the main table
    lifts: list[dict]  # base_lift rows of the main table
    paired: list[dict]  # paired_differences rows of the main table
    base: dict  # eval/base/<scale>/accuracy.json
    measured: Measurement
    sources: dict[str, str]  # file (relative to the run's folder) -> sha256

    def to_json(self) -> dict:
        return {**asdict(self), "measured": self.measured.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> RunFacts:
        return cls(**{**data, "measured": Measurement.from_json(data["measured"])})


def _rows(path: Path, table: str = "main_results") -> list[dict]:
    with path.open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row.get("table") == table]
    return [{k: row[k] for k in KEPT_COLUMNS if k in row} for row in rows]


def job_seconds_by_rule(run: Path) -> dict[str, tuple[int, float]]:
    """Jobs and job-seconds per rule from ``job_timings/`` (Snakemake's ``benchmark:`` files)."""
    totals: dict[str, list[float]] = defaultdict(list)
    for path in sorted((run / "job_timings").rglob("*.tsv")):
        rule = path.relative_to(run / "job_timings").parts[0].removesuffix(".tsv")
        totals[rule].append(read_job_seconds(path))
    return {rule: (len(s), sum(s)) for rule, s in totals.items()}


def _provenance(run: Path) -> tuple[datetime, float, str, str]:
    """When the run started, its wall seconds (first job's start to last job's end), and the
    CPU and kernel path its provenance records name."""
    starts, ends, cpus, paths = [], [], set(), set()
    for path in run.rglob("*.provenance.json"):
        record = json.loads(path.read_text())
        starts.append(datetime.fromisoformat(record["started_utc"]))
        ends.append(datetime.fromisoformat(record["finished_utc"]))
        numerics = record.get("numerics") or {}
        cpus.add(numerics.get("cpu"))
        paths.add(numerics.get("aten_cpu_capability"))
    if not starts:
        raise FileNotFoundError(f"{run}: no provenance records (is this a finished run?)")
    wall = (max(ends) - min(starts)).total_seconds()
    return min(starts), wall, ", ".join(sorted(cpus - {None})), ", ".join(sorted(paths - {None}))


def read_run(experiment: str, directory: Path = Path(".")) -> RunFacts:
    """The facts of the run of ``experiment`` under ``directory`` (where its ``results/`` is),
    with the files they come from."""
    results = layout.Results(experiment)
    run = directory / results.root
    files = {
        "table": directory / results.table("main_results", "md"),
        "cells": directory / results.statistics(layout.CELL_STATISTICS),
        "lifts": directory / results.statistics(layout.BASE_LIFT),
        "paired": directory / results.statistics(layout.PAIRED_DIFFERENCES),
    }
    for name, path in files.items():
        if not path.is_file():
            raise FileNotFoundError(f"{path}: the run has no {name} file (run `all` first)")
    cells = _rows(files["cells"])
    if not cells:  # a header alone, or no row of the main table: nothing to write a page from
        raise ValueError(f"{files['cells']}: no row of the main table (table = main_results)")
    files["base"] = directory / results.base_eval_file(layout.BASE_ACCURACY, cells[0]["scale"])
    if not files["base"].is_file():
        raise FileNotFoundError(f"{files['base']}: the run has no base model evaluation")
    started, wall, cpu, kernel = _provenance(run)
    return RunFacts(
        experiment=experiment,
        table=files["table"].read_text().strip(),
        cells=cells,
        lifts=_rows(files["lifts"]),
        paired=_rows(files["paired"]),
        base=json.loads(files["base"].read_text()),
        measured=Measurement(job_seconds_by_rule(run), started, wall, cpu, kernel),
        sources={str(p.relative_to(directory)): sha256_file(p) for p in files.values()},
    )


def read_record(path: Path) -> RunFacts:
    """The facts a page was written from (its ``expected-results.json``)."""
    data = read_json(path)  # a missing or unreadable file is named as such
    try:
        return RunFacts.from_json(data)
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path}: not an expected-results record ({error})") from error


def row_labels(facts: RunFacts) -> dict[str, str]:
    """Method key -> the main table's row label (the statistics keep the table's row order)."""
    keys = list(dict.fromkeys(row["row"] for row in facts.cells))
    lines = [line for line in facts.table.splitlines() if line.startswith("| ")][1:]
    labels = [line.split("|")[1].strip() for line in lines if not line.startswith("|---")]
    return dict(zip(keys, labels, strict=True))


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {round(seconds % 60):02d} s"
