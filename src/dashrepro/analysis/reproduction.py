"""Did a run reproduce the expected results? Its numbers against the page's, value by value.

``dashrepro compare tiny`` reads the record the expected-results page was written from
(``docs/expected-results.json``) and the user's ``results/tiny``, and gives every main-table
cell and every base accuracy one verdict: identical (value and interval, at the page's two
decimals); within what holds across CPUs (``ACROSS_CPUS_POINTS``, see docs/reproducibility.md);
or different, by how much against the page's interval. The run's time and CPU are printed beside
the page's as measurements. Exit status: 0 reproduced (identical or within), 1 different,
2 no run or no record.

    dashrepro compare tiny                      # results/tiny against docs/expected-results.json
    dashrepro compare tiny --directory ../other --expected their/expected-results.json
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from dashrepro.analysis import run_facts as rf
from dashrepro.layout import REPO_ROOT

IDENTICAL = "identical"
WITHIN = "within"
DIFFERENT = "different"

#: How far a value may move on another CPU and still count as reproduced, in points. On another
#: CPU the pinned kernels leave MKL's rounding, which moves a few samples: measured, 17 of the
#: main table's 20 cells identical and the others 0.17 apart (one sample of a cell's 600), the
#: base accuracies identical (docs/reproducibility.md). 0.5 points is three such samples.
ACROSS_CPUS_POINTS = 0.5

#: The normal quantile behind a base accuracy's interval (its standard error over problems).
Z95 = 1.959964


@dataclass(frozen=True)
class Value:
    """One number of a run with its 95 % interval (None where the run has none)."""

    value: float
    low: float | None = None
    high: float | None = None

    def text(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.value:.2f}"
        return f"{self.value:.2f} [{self.low:.2f}, {self.high:.2f}]"


@dataclass(frozen=True)
class Verdict:
    """One value of the page against the run's."""

    name: str  # e.g. "main table, DASH (Ours), AIME 2025"
    expected: Value
    observed: Value | None  # None: the run has no such value
    kind: str  # IDENTICAL, WITHIN or DIFFERENT
    detail: str  # for DIFFERENT: by how much, against the page's interval


def _main_table(facts: rf.RunFacts) -> dict[str, Value]:
    labels = rf.row_labels(facts)
    return {
        f"main table, {labels.get(row['row'], row['row'])}, {rf.COLUMN_TITLES[row['column']]}": Value(
            float(row["value"]), float(row["ci_low"]), float(row["ci_high"])
        )
        for row in facts.cells
    }


def _base(facts: rf.RunFacts) -> dict[str, Value]:
    values = {}
    for role in ("student", "teacher"):
        summary = facts.base.get(role) or {}
        for name, bench in summary.get("benchmarks", {}).items():
            half = Z95 * float(bench["stderr"]) if "stderr" in bench else None
            value = float(bench["avg_at_k"])
            values[f"base {role}, {name}"] = (
                Value(value, value - half, value + half) if half is not None else Value(value)
            )
        if "mean_over_benchmarks" in summary:
            values[f"base {role}, mean"] = Value(float(summary["mean_over_benchmarks"]))
    return values


def values(facts: rf.RunFacts) -> dict[str, Value]:
    """Every value the comparison covers: the main table's cells, then the base accuracies."""
    return {**_main_table(facts), **_base(facts)}


def _same_digits(a: float | None, b: float | None) -> bool:
    return (a is None) == (b is None) and (a is None or f"{a:.2f}" == f"{b:.2f}")


def judge(expected: Value, observed: Value | None, tolerance: float) -> tuple[str, str]:
    """(kind, detail) of one value."""
    if observed is None:
        return DIFFERENT, "missing from this run"
    ends = ((expected.value, observed.value), (expected.low, observed.low),
            (expected.high, observed.high))  # fmt: skip
    if all(_same_digits(a, b) for a, b in ends):
        return IDENTICAL, ""
    if all(a is None or b is None or abs(a - b) <= tolerance + 1e-9 for a, b in ends):
        return WITHIN, f"{observed.value - expected.value:+.2f}"
    delta = observed.value - expected.value
    detail = f"{delta:+.2f} points"
    if expected.low is not None and expected.high is not None:
        half = (expected.high - expected.value) if delta > 0 else (expected.value - expected.low)
        inside = expected.low <= observed.value <= expected.high
        share = f", {abs(delta) / half:.2f} of its half-width" if half > 0 else ""
        detail += f"; {'inside' if inside else 'outside'} the page's 95 % interval{share}"
    return DIFFERENT, detail


def compare(
    expected: rf.RunFacts, run: rf.RunFacts, tolerance: float = ACROSS_CPUS_POINTS
) -> list[Verdict]:
    """One verdict per value of the page, then one per value only the run has."""
    wanted, got = values(expected), values(run)
    verdicts = [Verdict(name, value, got.get(name), *judge(value, got.get(name), tolerance))
                for name, value in wanted.items()]  # fmt: skip
    for name in got.keys() - wanted.keys():
        verdicts.append(Verdict(name, Value(math.nan), got[name], DIFFERENT, "not on the page"))
    return verdicts


def summary(verdicts: list[Verdict], tolerance: float) -> str:
    """The one-line answer: reproduced, reproduced within the cross-CPU tolerance, or not."""
    count = {kind: sum(v.kind == kind for v in verdicts) for kind in (IDENTICAL, WITHIN, DIFFERENT)}
    total = len(verdicts)
    if count[DIFFERENT]:
        return (f"NOT REPRODUCED: {count[DIFFERENT]} of {total} values differ beyond "
                f"{tolerance:.2f} points ({count[IDENTICAL]} identical, {count[WITHIN]} within)")  # fmt: skip
    if count[WITHIN]:
        return (f"REPRODUCED within what holds across CPUs: {count[IDENTICAL]} of {total} values "
                f"identical, {count[WITHIN]} within {tolerance:.2f} points")  # fmt: skip
    return f"REPRODUCED: all {total} values identical"


def report(
    expected: rf.RunFacts, run: rf.RunFacts, verdicts: list[Verdict], tolerance: float
) -> str:
    """The comparison as Markdown: one row per value, the two runs' measurements, the answer."""
    lines = ["| value | expected | this run | verdict |", "|---|---|---|---|"]
    for v in verdicts:
        observed = v.observed.text() if v.observed is not None else "-"
        wanted = "-" if math.isnan(v.expected.value) else v.expected.text()
        shown = v.kind if v.kind == IDENTICAL else f"{v.kind} ({v.detail})"
        lines.append(f"| {v.name} | {wanted} | {observed} | {shown} |")
    page, ours = expected.measured, run.measured
    lines += [
        "",
        "Measurements (shown, not compared):",
        f"- expected: {page.summary()}; {page.job_seconds:,.0f} job-seconds",
        f"- this run: {ours.summary()}; {ours.job_seconds:,.0f} job-seconds",
        "",
        summary(verdicts, tolerance),
    ]
    return "\n".join(lines)


def run_cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dashrepro compare", description=__doc__.splitlines()[0])
    parser.add_argument("experiment", nargs="?", default="tiny", help="results/<experiment>")
    parser.add_argument("--directory", type=Path, default=Path("."), help="where results/ is")
    parser.add_argument("--expected", type=Path, default=REPO_ROOT / rf.RECORD,
                        help="the expected-results record (default: the repository's)")  # fmt: skip
    parser.add_argument("--tolerance", type=float, default=ACROSS_CPUS_POINTS,
                        help="points a value may move across CPUs (default %(default)s)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        expected = rf.read_record(args.expected)
        run = rf.read_run(args.experiment, args.directory)
    except (FileNotFoundError, ValueError) as error:
        print(f"dashrepro compare: {error}", file=sys.stderr)
        return 2
    verdicts = compare(expected, run, args.tolerance)
    print(f"{args.directory / 'results' / args.experiment} against {args.expected}:\n")
    print(report(expected, run, verdicts, args.tolerance))
    return 1 if any(v.kind == DIFFERENT for v in verdicts) else 0
