"""Did a run reproduce the expected results? Its numbers against the page's, value by value.

``dashrepro compare tiny`` reads the record the expected-results page was written from
(``docs/expected-results.json``) and the user's ``results/tiny``. The main table the user sees
(``tables/main_results.csv`` and ``.md``) is held cell by cell to the statistics beside it
(``statistics/cell_statistics.csv``), each disagreement named by file and cell; then every
main-table cell and base accuracy gets one verdict: identical (value and interval, at the page's
two decimals); within what holds across CPUs (``ACROSS_CPUS_POINTS``, docs/reproducibility.md);
or different, by how much against the page's interval. The run's time and CPU are printed beside
the page's as measurements. Exit status: ``EXIT_STATUSES`` (3: cannot compare, a file missing or
malformed, never a traceback).

    dashrepro compare tiny                      # results/tiny against docs/expected-results.json
    dashrepro compare tiny --directory ../other --expected their/expected-results.json
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dashrepro import layout
from dashrepro.analysis import run_facts as rf
from dashrepro.analysis.tables import EXTERNAL_SOURCES  # rows copied from the paper: no statistics
from dashrepro.io import read_json
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

REPRODUCED, NOT_REPRODUCED, USAGE, CANNOT_COMPARE = 0, 1, 2, 3
#: The command's exit statuses; a script tells "another run" (1) from "no answer" (2, 3).
EXIT_STATUSES = {
    REPRODUCED: "reproduced: every value identical, or within the tolerance",
    NOT_REPRODUCED: "not reproduced: a value differs beyond the tolerance, or the main table "
    "disagrees with the statistics beside it",
    USAGE: "a bad argument (e.g. --tolerance outside its range)",
    CANNOT_COMPARE: "cannot compare: a file of the run or of the record is missing or malformed",
}

TABLE = "main_results"
# The columns each file must have for the comparison to read it.
STATISTICS_COLUMNS = ("table", "row", "scale", "column", "value", "ci_low", "ci_high")
TABLE_COLUMNS = ("row", "label", "scale", "column", "value", "std", "source")
MARKUP = (
    re.compile(r"^\*\*(.*)\*\*$"),
    re.compile(r"^<ins>(.*)</ins>$"),
    re.compile(r"^\*(.*)\*$"),
)


class CannotCompare(ValueError):
    """A run or a record that cannot be compared: the message names the file, and the row,
    line or key that is missing or malformed."""


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


@dataclass(frozen=True)
class Disagreement:
    """A cell of the table the user sees that is not what the file it comes from says."""

    file: Path  # the file whose cell disagrees (main_results.csv or main_results.md)
    cell: str  # e.g. "DASH (Ours), AIME 2025"
    shown: str  # what that file says
    source: str  # what the file it was rendered from says, naming it

    def text(self) -> str:
        return f"{self.file}: {self.cell} is {self.shown}, but {self.source}"


# --------------------------------------------------------------------------- reading, checked


def _number(value: object, where: str, key: str, empty_is_nan: bool = False) -> float:
    """``value`` as a finite float (NaN for an empty value where ``empty_is_nan``); anything
    else is a ``CannotCompare`` naming ``where`` and ``key``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        if empty_is_nan:
            return math.nan
        raise CannotCompare(f"{where}: no {key}")
    try:
        if isinstance(value, bool):  # JSON's true is no number of points
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise CannotCompare(f"{where}: {key} is {value!r}, not a number") from None
    if empty_is_nan and math.isnan(number):
        return number
    if not math.isfinite(number):
        raise CannotCompare(f"{where}: {key} is {value!r}, not a finite number")
    return number


def _check_cells(cells: object, source: Path, where_of) -> None:
    """Every main-table cell has its row, column, value and interval, numbers all, once each."""
    if not isinstance(cells, list):
        raise CannotCompare(f"{source}: cells is not a list of main-table cells")
    seen = set()
    for index, cell in enumerate(cells):
        if not isinstance(cell, Mapping):
            raise CannotCompare(f"{where_of(index, {})}: not a mapping of a cell's keys")
        where = where_of(index, cell)
        for key in ("row", "column"):
            if not cell.get(key):
                raise CannotCompare(f"{where}: no {key}")
        for key in ("value", "ci_low", "ci_high"):
            _number(cell.get(key), where, key)
        key = (cell["row"], cell.get("scale"), cell["column"])
        if key in seen:
            raise CannotCompare(f"{where}: a second cell of {cell['row']}, {cell['column']}")
        seen.add(key)


def _check_base(base: object, source: Path) -> None:
    """The base accuracies the comparison reads are numbers (an interval's stderr too)."""
    if not isinstance(base, Mapping):
        raise CannotCompare(f"{source}: the base model's accuracies are not a mapping")
    for role in ("student", "teacher"):
        summary = base.get(role) or {}
        benchmarks = summary.get("benchmarks", {}) if isinstance(summary, Mapping) else None
        if not isinstance(benchmarks, Mapping):
            raise CannotCompare(f"{source}: {role}.benchmarks is not a mapping of benchmarks")
        for name, bench in benchmarks.items():
            where = f"{source}: {role}.benchmarks.{name}"
            if not isinstance(bench, Mapping):
                raise CannotCompare(f"{where}: not a mapping")
            _number(bench.get("avg_at_k"), where, "avg_at_k")
            if "stderr" in bench:
                _number(bench["stderr"], where, "stderr")
        if "mean_over_benchmarks" in summary:
            _number(summary["mean_over_benchmarks"], f"{source}: {role}", "mean_over_benchmarks")


def _labels(facts: rf.RunFacts, source: Path) -> dict[str, str]:
    """Method key -> the row label of the table ``facts`` hold (the record's own table)."""
    try:
        return rf.row_labels(facts)
    except (ValueError, IndexError, AttributeError, TypeError) as error:
        methods = len(dict.fromkeys(row["row"] for row in facts.cells))
        raise CannotCompare(
            f"{source}: its table's rows are not its cells' {methods} methods ({error})"
        ) from None


def read_expected(path: Path) -> rf.RunFacts:
    """The page's record, checked: every value the comparison reads is there and a number."""
    try:
        facts = rf.read_record(path)
    except (OSError, ValueError) as error:
        raise CannotCompare(str(error)) from None
    if not facts.cells:
        raise CannotCompare(f"{path}: cells is empty: the record holds no main-table cell")
    _check_cells(facts.cells, path,
                 lambda i, c: f"{path}: cells[{i}] ({c.get('row')}, {c.get('column')})")  # fmt: skip
    _check_base(facts.base, path)
    _labels(facts, path)
    return facts


def _csv_rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict]]:
    """(line, row) of a CSV with ``required`` columns; a missing file or column is named."""
    if not path.is_file():
        raise CannotCompare(f"{path}: no such file (is the run finished? run `all` first)")
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            rows = [(reader.line_num, row) for row in reader]
            header = reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise CannotCompare(f"{path}: cannot read as CSV ({error})") from None
    missing = [c for c in required if c not in header]
    if missing:
        raise CannotCompare(f"{path}: no column(s) {', '.join(missing)}")
    return rows


def _statistics_cells(path: Path) -> dict[tuple[str, str, str], dict]:
    """(row, scale, column) -> the main table's cell in ``cell_statistics.csv``, checked."""
    rows = [(n, r) for n, r in _csv_rows(path, STATISTICS_COLUMNS) if r["table"] == TABLE]
    if not rows:
        raise CannotCompare(f"{path}: no row of the main table ({TABLE}): header only?")
    _check_cells([r for _, r in rows], path,
                 lambda i, c: f"{path}, line {rows[i][0]} ({c.get('row')}, {c.get('column')})")  # fmt: skip
    return {(r["row"], r["scale"], r["column"]): r for _, r in rows}


@dataclass(frozen=True)
class _TableCell:
    label: str
    value: float
    std: float  # NaN: one seed (the table shows the mean alone)
    external: bool  # a row copied from the paper (no statistics)


def _table_cells(path: Path) -> dict[tuple[str, str, str], _TableCell]:
    """(row, scale, column) -> the cell of ``main_results.csv``, checked."""
    rows = _csv_rows(path, TABLE_COLUMNS)
    if not rows:
        raise CannotCompare(f"{path}: header only: the main table has no cell")
    cells, labels = {}, {}
    for line, row in rows:
        where = f"{path}, line {line} ({row['row']}, {row['column']})"
        if not row["row"] or not row["column"] or not row["label"]:
            raise CannotCompare(f"{where}: no row, column or label")
        if labels.setdefault(row["label"], row["row"]) != row["row"]:
            raise CannotCompare(f"{where}: label {row['label']!r} is another row's too")
        key = (row["row"], row["scale"], row["column"])
        if key in cells:
            raise CannotCompare(f"{where}: a second cell of {row['row']}, {row['column']}")
        cells[key] = _TableCell(
            row["label"],
            _number(row["value"], where, "value"),
            _number(row["std"], where, "std", empty_is_nan=True),
            row["source"] in EXTERNAL_SOURCES,
        )
    return cells


def _cell_name(label: str, scale: str, column: str, several_scales: bool) -> str:
    title = rf.COLUMN_TITLES.get(column, column)
    return f"{label}, {scale} {title}" if several_scales else f"{label}, {title}"


def _same(a: float, b: float) -> bool:
    """Two full-precision values of one cell agree: equal at the table's two decimals (or
    equal up to the rounding of two ways of averaging the same numbers)."""
    return f"{a:.2f}" == f"{b:.2f}" or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def table_against_statistics(
    table: dict, statistics: dict, table_path: Path, statistics_path: Path
) -> list[Disagreement]:
    """Each cell of the table (``main_results.csv``) against the statistics' value of it."""
    ours = {key: cell for key, cell in table.items() if not cell.external}
    several = len({scale for _, scale, _ in ours}) > 1
    found = []
    for key, row in statistics.items():
        value = float(row["value"])
        cell = ours.get(key)
        label = cell.label if cell else row["row"]
        name = _cell_name(label, key[1], key[2], several)
        if cell is None:
            found.append(Disagreement(table_path, name, "missing",
                                      f"{statistics_path} has {value:.2f}"))  # fmt: skip
        elif not _same(cell.value, value):
            found.append(Disagreement(table_path, name, f"{cell.value:.2f}",
                                      f"{statistics_path} has {value:.2f}"))  # fmt: skip
    for key, cell in ours.items():
        if key not in statistics:
            name = _cell_name(cell.label, key[1], key[2], several)
            found.append(Disagreement(table_path, name, f"{cell.value:.2f}",
                                      f"{statistics_path} has no such cell"))  # fmt: skip
    return found


def _markdown_cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _plain(text: str) -> str:
    """A Markdown cell without its rank mark (bold, underline, italic)."""
    for pattern in MARKUP:
        match = pattern.match(text)
        if match:
            return match.group(1)
    return text


def _shown(cell: _TableCell | None) -> str:
    """The text the renderer writes for ``cell`` (``tables._render.mean_std_cell`` and its
    empty cell; not imported, as it would bring pandas into the command's start)."""
    if cell is None:
        return "–"
    return f"{cell.value:.2f}" if math.isnan(cell.std) else f"{cell.value:.2f} ± {cell.std:.2f}"


def markdown_against_table(path: Path, table: dict, table_path: Path) -> list[Disagreement]:
    """Each cell of ``main_results.md`` against the CSV it was rendered from, rows matched by
    their label (never by position): a row missing, added or relabelled is a ``CannotCompare``."""
    try:
        lines = [
            (n, line)
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if line.startswith("|")
        ]
    except (OSError, UnicodeDecodeError) as error:
        raise CannotCompare(f"{path}: cannot read ({error})") from None
    if len(lines) < 2 or not lines[1][1].replace(" ", "").startswith("|---"):
        raise CannotCompare(f"{path}: no Markdown table (a header row, then its |---| row)")
    header = _markdown_cells(lines[0][1])
    scales = list(dict.fromkeys(s for (_, s, _), c in table.items() if not c.external))
    columns = list(dict.fromkeys(c for (_, _, c) in table))
    width = len(scales) * len(columns)
    if len(header) - 1 - (header[-1] == "Seeds") != width:
        raise CannotCompare(f"{path}: its header has {len(header) - 1} columns after Method, "
                            f"for {width} cells a row in {table_path}")  # fmt: skip
    for i, title in enumerate(header[1 : 1 + width]):
        wanted = rf.COLUMN_TITLES.get(columns[i % len(columns)])
        if wanted and not title.endswith(wanted):
            raise CannotCompare(f"{path}: column {i + 2} is headed {title!r}, where "
                                f"{table_path} has {wanted}")  # fmt: skip
    rows_of = {cell.label: row for (row, _, _), cell in table.items()}
    shown: dict[str, tuple[int, list[str]]] = {}
    for n, line in lines[2:]:
        cells = _markdown_cells(line)
        if len(cells) != len(header):
            raise CannotCompare(f"{path}, line {n}: {len(cells)} cells, where the header has "
                                f"{len(header)}")  # fmt: skip
        label = cells[0]
        if label.startswith("*") and not any(cells[1:]):
            continue  # a section's title row
        label = label.removesuffix("†")
        if label not in rows_of:
            raise CannotCompare(f"{path}, line {n}: row {label!r} is no row of {table_path} "
                                f"(its rows: {', '.join(rows_of)}): a relabelled row?")  # fmt: skip
        if label in shown:
            raise CannotCompare(f"{path}, line {n}: a second row {label!r} (a relabelled row?)")
        shown[label] = (n, cells[1 : 1 + width])
    missing = [label for label in rows_of if label not in shown]
    if missing:
        raise CannotCompare(f"{path}: no row {', '.join(map(repr, missing))}, which {table_path} "
                            "has: a deleted or relabelled row?")  # fmt: skip
    found = []
    for label, (_, texts) in shown.items():
        for i, text in enumerate(texts):
            scale, column = scales[i // len(columns)], columns[i % len(columns)]
            cell = table.get((rows_of[label], scale, column))
            if _plain(text) != _shown(cell):
                name = _cell_name(label, scale, column, len(scales) > 1)
                found.append(Disagreement(path, name, text, f"{table_path} has {_shown(cell)}"))
    return found


def read_run(
    experiment: str, directory: Path = Path(".")
) -> tuple[rf.RunFacts, list[Disagreement]]:
    """The run's facts (``run_facts.read_run``), checked, and where the table the user sees
    disagrees with the files it was rendered from (``.md`` with ``.csv``, ``.csv`` with the
    statistics). A missing or malformed file is a ``CannotCompare`` naming it."""
    results = layout.Results(experiment)
    run = directory / results.root
    if not run.is_dir():
        raise CannotCompare(f"{run}: no such run (run `all` first, or give --directory, the "
                            "folder that holds results/)")  # fmt: skip
    csv_path = directory / results.table(TABLE, "csv")
    md_path = directory / results.table(TABLE, "md")
    statistics_path = directory / results.statistics(layout.CELL_STATISTICS)
    for path, name in ((csv_path, "main table (csv)"), (md_path, "main table"),
                       (statistics_path, "cell statistics")):  # fmt: skip
        if not path.is_file():
            raise CannotCompare(f"{path}: the run has no {name} file (run `all` first)")
    statistics = _statistics_cells(statistics_path)
    table = _table_cells(csv_path)
    disagreements = markdown_against_table(md_path, table, csv_path)
    disagreements += table_against_statistics(table, statistics, csv_path, statistics_path)
    scale = next(iter(statistics))[1]
    base_path = directory / results.base_eval_file(layout.BASE_ACCURACY, scale)
    if base_path.is_file():
        try:
            _check_base(read_json(base_path), base_path)
        except ValueError as error:  # read_json's own errors name the file
            raise CannotCompare(str(error)) from None
    try:
        facts = rf.read_run(experiment, directory)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CannotCompare(str(error) if str(run) in str(error) else f"{run}: {error}") from None
    return facts, disagreements


# --------------------------------------------------------------------------- the comparison


def _main_table(facts: rf.RunFacts, labels: Mapping[str, str]) -> dict[str, Value]:
    return {
        f"main table, {labels.get(row['row'], row['row'])}, "
        f"{rf.COLUMN_TITLES.get(row['column'], row['column'])}": Value(
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


def values(facts: rf.RunFacts, labels: Mapping[str, str] | None = None) -> dict[str, Value]:
    """Every value the comparison covers: the main table's cells (each named by its row's
    label in ``labels``, default the table ``facts`` hold), then the base accuracies."""
    return {**_main_table(facts, rf.row_labels(facts) if labels is None else labels),
            **_base(facts)}  # fmt: skip


def narrowest_half_width(facts: rf.RunFacts) -> tuple[float, str] | None:
    """The page's own half-width: the narrowest of its 95 % intervals, from value to the
    nearer end, with the value it belongs to (None: the page has no interval wider than 0)."""
    widths = [
        (min(v.value - v.low, v.high - v.value), name)
        for name, v in values(facts).items()
        if v.low is not None and v.high is not None
    ]
    positive = [width for width in widths if width[0] > 0]
    return min(positive, key=lambda width: width[0]) if positive else None  # first of ties


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


def _run_labels(run: rf.RunFacts) -> dict[str, str]:
    try:
        return rf.row_labels(run)
    except (ValueError, IndexError):
        return {}  # rows the page lacks are then named by their method key


def compare(
    expected: rf.RunFacts, run: rf.RunFacts, tolerance: float = ACROSS_CPUS_POINTS
) -> list[Verdict]:
    """One verdict per value of the page, then one per value only the run has. A cell is
    matched by its method key and column; both sides are named by the page's row labels."""
    labels = {**_run_labels(run), **rf.row_labels(expected)}
    wanted, got = values(expected, labels), values(run, labels)
    verdicts = [Verdict(name, value, got.get(name), *judge(value, got.get(name), tolerance))
                for name, value in wanted.items()]  # fmt: skip
    for name in got.keys() - wanted.keys():
        verdicts.append(Verdict(name, Value(math.nan), got[name], DIFFERENT, "not on the page"))
    return verdicts


def summary(verdicts: list[Verdict], tolerance: float, disagreements=()) -> str:
    """The one-line answer: reproduced, reproduced within the cross-CPU tolerance, or not."""
    count = {kind: sum(v.kind == kind for v in verdicts) for kind in (IDENTICAL, WITHIN, DIFFERENT)}
    total = len(verdicts)
    if disagreements:
        return (
            f"NOT REPRODUCED: the main table disagrees with the files it was rendered from in "
            f"{len(disagreements)} cell(s), listed above (of the {total} values, "
            f"{count[DIFFERENT]} differ beyond {tolerance:.2f} points)"
        )
    if count[DIFFERENT]:
        return (f"NOT REPRODUCED: {count[DIFFERENT]} of {total} values differ beyond "
                f"{tolerance:.2f} points ({count[IDENTICAL]} identical, {count[WITHIN]} within)")  # fmt: skip
    if count[WITHIN]:
        return (f"REPRODUCED within what holds across CPUs: {count[IDENTICAL]} of {total} values "
                f"identical, {count[WITHIN]} within {tolerance:.2f} points")  # fmt: skip
    return f"REPRODUCED: all {total} values identical"


def report(
    expected: rf.RunFacts,
    run: rf.RunFacts,
    verdicts: list[Verdict],
    tolerance: float,
    disagreements: list[Disagreement] = (),
) -> str:
    """The comparison as Markdown: one row per value, where the table the user sees disagrees
    with its sources, the two runs' measurements, the answer."""
    lines = ["| value | expected | this run | verdict |", "|---|---|---|---|"]
    for v in verdicts:
        observed = v.observed.text() if v.observed is not None else "-"
        wanted = "-" if math.isnan(v.expected.value) else v.expected.text()
        shown = v.kind if v.kind == IDENTICAL else f"{v.kind} ({v.detail})"
        lines.append(f"| {v.name} | {wanted} | {observed} | {shown} |")
    if disagreements:
        lines += ["", "The main table this run shows disagrees with the files it was rendered "
                  "from (the values above are the statistics'):"]  # fmt: skip
        lines += [f"- {d.text()}" for d in disagreements]
    page, ours = expected.measured, run.measured
    lines += [
        "",
        "Measurements (shown, not compared):",
        f"- expected: {page.summary()}; {page.job_seconds:,.0f} job-seconds",
        f"- this run: {ours.summary()}; {ours.job_seconds:,.0f} job-seconds",
        "",
        summary(verdicts, tolerance, disagreements),
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the command


def _tolerance(text: str) -> float:
    """``--tolerance``: a finite number of points, at least 0 (the page's bound comes later)."""
    try:
        points = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of points") from None
    if not math.isfinite(points) or points < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a finite number of points at least 0 (and at most the page's own "
            "half-width)"
        )
    return points


def _page_bound() -> str:
    """The default record's own half-width, for the help (empty where it cannot be read)."""
    try:
        bound = narrowest_half_width(read_expected(REPO_ROOT / rf.RECORD))
    except CannotCompare:
        return ""
    return f" ({bound[0]:.2f} points on the repository's page)" if bound else ""


def parser() -> argparse.ArgumentParser:
    statuses = "\n".join(f"  {code}  {text}" for code, text in EXIT_STATUSES.items())
    made = argparse.ArgumentParser(
        prog="dashrepro compare",
        description=__doc__.splitlines()[0],
        epilog=f"exit status:\n{statuses}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    made.add_argument("experiment", nargs="?", default="tiny", help="results/<experiment>")
    made.add_argument("--directory", type=Path, default=Path("."), help="where results/ is")
    made.add_argument("--expected", type=Path, default=REPO_ROOT / rf.RECORD,
                      help="the expected-results record (default: the repository's)")  # fmt: skip
    made.add_argument(
        "--tolerance", type=_tolerance, default=ACROSS_CPUS_POINTS,
        help="points a value and its interval's ends may move and still count as reproduced "
        "(default %(default)s, what moves across CPUs): a finite number, at least 0 and at most "
        "the page's own half-width, the narrowest of its 95 %% intervals from value to nearer "
        f"end{_page_bound()}",
    )  # fmt: skip
    return made


def run_cli(argv: list[str] | None = None) -> int:
    """``dashrepro compare``: the report on stdout, its exit status (``EXIT_STATUSES``)."""
    arguments = parser()
    args = arguments.parse_args(argv)
    try:
        expected = read_expected(args.expected)
        bound = narrowest_half_width(expected)
        if bound is not None and args.tolerance > bound[0] + 1e-9:
            arguments.error(
                f"argument --tolerance: {args.tolerance:g} points is more than the page's own "
                f"half-width, {bound[0]:.2f} points (its narrowest 95 % interval, {bound[1]}): "
                "a value outside the page's interval would be called reproduced"
            )
        run, disagreements = read_run(args.experiment, args.directory)
    except CannotCompare as error:
        print(f"dashrepro compare: cannot compare: {error}", file=sys.stderr)
        return CANNOT_COMPARE
    verdicts = compare(expected, run, args.tolerance)
    print(f"{args.directory / 'results' / args.experiment} against {args.expected}:\n")
    print(report(expected, run, verdicts, args.tolerance, disagreements))
    if disagreements or any(v.kind == DIFFERENT for v in verdicts):
        return NOT_REPRODUCED
    return REPRODUCED
