"""The expected-results page, written from a finished run's files, never by hand.

From a run's facts (``run_facts.read_run``: the main table with its intervals, the lifts, the
paired differences, the base accuracies, the run's time and CPU) and one figure, it writes their
record ``docs/expected-results.json`` (what ``dashrepro compare`` reads), renders
``docs/expected-results.md`` and the block between the README's markers from that record, and
copies the figure. ``--check`` says whether the page is what the run's files give: the run's
time and CPU are a measurement of that run, shown but never a reason to call the page stale.

    python -m dashrepro.analysis.expected_results tiny          # write the page
    python -m dashrepro.analysis.expected_results tiny --check  # exit 1 if stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from dashrepro import layout
from dashrepro.analysis import reproduction
from dashrepro.analysis.run_facts import (
    COLUMN_TITLES,
    COLUMNS,
    RECORD,
    Measurement,
    RunFacts,
    read_record,
    read_run,
    row_labels,
)
from dashrepro.io import atomic_path, with_marked_block, write_text
from dashrepro.layout import REPO_ROOT

__all__ = ["COLUMNS", "RECORD", "RunFacts", "read_record", "read_run"]  # the page's inputs

# Where the page lives, relative to the repository (main's --root); its record: RECORD.
PAGE = Path("docs") / "expected-results.md"
README = Path("README.md")
FIGURE = "checkpoint_curves"  # the figure the README shows
FIGURE_COPY = Path("docs") / "assets" / f"{FIGURE}.png"
BEGIN = "<!-- expected-results:begin"
END = "<!-- expected-results:end -->"


def run_figure(experiment: str, directory: Path = Path(".")) -> Path:
    """The run's PNG of the figure the README shows."""
    return directory / layout.Results(experiment).figure(FIGURE, "png")


def _interval_table(
    rows: list[dict], value: str, labels: dict[str, str], signed=False
) -> list[str]:
    """One row per method, one ``value [low, high]`` cell per column."""
    spec = "+.2f" if signed else ".2f"
    cells: dict[str, dict[str, str]] = defaultdict(dict)
    for row in rows:
        low, high = float(row["ci_low"]), float(row["ci_high"])
        cells[row["row"]][row["column"]] = (
            f"{float(row[value]):{spec}} [{low:{spec}}, {high:{spec}}]"
        )
    lines = ["| Method | " + " | ".join(COLUMN_TITLES.values()) + " |", "|---|---|---|---|---|"]
    for key, by_column in cells.items():
        lines.append(
            f"| {labels.get(key, key)} | " + " | ".join(by_column[c] for c in COLUMNS) + " |"
        )
    return lines


def readme_block(facts: RunFacts) -> str:
    """The README's block: the main table with its intervals, the run's time and CPU, a figure."""
    labels = row_labels(facts)
    interval = facts.cells[0]["interval"]
    lines = [
        f"The main table of the embedded default, each cell with its 95 % interval ({interval}, "
        "clustered by problem):",
        "",
        *_interval_table(facts.cells, "value", labels),
        "",
        f"Measured: {facts.measured.summary()}.",
        "",
        f"![{FIGURE}](docs/assets/{FIGURE}.png)",
    ]
    return "\n".join(lines)


def _base_lines(facts: RunFacts) -> list[str]:
    student, teacher = facts.base["student"], facts.base["teacher"]
    per = ", ".join(
        f"{name} {student['benchmarks'][name]['avg_at_k']:.2f}" for name in student["benchmarks"]
    )
    return [
        f"The base student averages {student['mean_over_benchmarks']:.2f} ({per}); the "
        f"privileged teacher {teacher['mean_over_benchmarks']:.2f} "
        f"(`{facts.experiment}`'s base model evaluation, `accuracy.json`).",
    ]


def _timing_lines(measured: Measurement) -> list[str]:
    rows = sorted(measured.seconds_by_rule.items(), key=lambda item: -item[1][1])
    lines = ["| rule | jobs | job-seconds |", "|---|---|---|"]
    lines += [f"| `{rule}` | {n} | {s:.0f} |" for rule, (n, s) in rows]
    lines.append(f"| total | {measured.jobs} | {measured.job_seconds:.0f} |")
    return lines


def page(facts: RunFacts) -> str:
    """The whole expected-results page."""
    labels = row_labels(facts)
    reference = facts.paired[0]["reference"] if facts.paired else "the reference"
    command = f"python -m {__spec__.name if __spec__ else 'dashrepro.analysis.expected_results'}"
    when = facts.measured.summary()
    lines = [
        "# Expected results",
        "",
        f"Written by `{command} {facts.experiment}` from a finished run's files (listed at the",
        "end with their sha256); do not edit by hand. Another CPU gives the same base model and",
        "nearly every digit of these tables: [which digits hold](reproducibility.md).",
        f"`dashrepro compare {facts.experiment}` says whether your run reproduced them, value",
        "by value, from this page's record (`expected-results.json`, beside it):",
        "[Getting started](getting-started.md#did-your-run-reproduce).",
        "",
        "## The main table",
        "",
        "Each cell is the mean over seeds ± their std; the top three distinct values of each",
        "column are marked (bold, underlined, italic: the paper's rank shading).",
        "",
        facts.table,
        "",
        "## How noisy",
        "",
        "Each cell's 95 % interval, resampling problems (and seeds where there are several):",
        "",
        *_interval_table(facts.cells, "value", labels),
        "",
        "## Lift over the base student",
        "",
        *_base_lines(facts),
        "",
        *_interval_table(facts.lifts, "difference", labels, signed=True),
        "",
        f"## Against {labels.get(reference, reference)} on the same problems",
        "",
        *_interval_table(facts.paired, "difference", labels, signed=True),
        "",
        "## Time",
        "",
        f"{when[0].upper()}{when[1:]}. The jobs' own seconds, from",
        "`job_timings/` (Snakemake's `benchmark:` files):",
        "",
        *_timing_lines(facts.measured),
        "",
        f"![{FIGURE}](assets/{FIGURE}.png)",
        "",
        "## Source files",
        "",
        *[f"- `{path}`: sha256 `{digest}`" for path, digest in facts.sources.items()],
    ]
    return "\n".join(lines) + "\n"


def with_readme_block(readme: str, block: str) -> str:
    """``readme`` with the text between its markers replaced by ``block``."""
    return with_marked_block(readme, BEGIN, END, block, "README.md")


def rendered(facts: RunFacts, root: Path) -> dict[Path, str]:
    """What the page's three text files under ``root`` should hold for ``facts``."""
    readme = (root / README).read_text()
    record = json.dumps(facts.to_json(), indent=2) + "\n"  # in the run's order, as read
    return {
        root / RECORD: record,
        root / PAGE: page(facts),
        root / README: with_readme_block(readme, readme_block(facts)),
    }


def write(facts: RunFacts, figure: Path, root: Path = REPO_ROOT) -> None:
    """Write the record, the page and the README's block under ``root``; copy the figure."""
    for path, text in rendered(facts, root).items():
        write_text(path, text)
    with atomic_path(root / FIGURE_COPY) as tmp:
        tmp.write_bytes(figure.read_bytes())


def check(facts: RunFacts, figure: Path, root: Path = REPO_ROOT) -> list[str]:
    """Why the page under ``root`` is not what the run's ``facts`` give (empty: it is).

    The run's numbers come first: where a cell or a base accuracy differs from the page's, the
    run did not reproduce the page, and that is what is said (``dashrepro compare`` lists the
    cells). The run's time and CPU are not compared: the page keeps its own run's measurement.
    """
    if not (root / RECORD).is_file():
        return [f"{root / RECORD} is missing: write the page from a run"]
    committed = read_record(root / RECORD)
    verdicts = reproduction.compare(committed, facts)
    differing = [v for v in verdicts if v.kind != reproduction.IDENTICAL]
    if differing:
        return [
            f"this run's numbers differ from the page's in {len(differing)} of {len(verdicts)} "
            f"values (`dashrepro compare {facts.experiment}` lists them): it is another run, "
            "not a reason to rewrite the page"
        ]
    wanted = rendered(replace(facts, measured=committed.measured), root)
    stale = [str(p) for p, text in wanted.items() if not p.is_file() or p.read_text() != text]
    if (
        not (root / FIGURE_COPY).is_file()
        or (root / FIGURE_COPY).read_bytes() != figure.read_bytes()
    ):
        stale.append(str(root / FIGURE_COPY))
    return [f"{path} is out of date: run python -m {__name__} {facts.experiment}" for path in stale]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", help="the run's experiment name (results/<experiment>)")
    parser.add_argument("--directory", type=Path, default=Path("."), help="where results/ is")
    parser.add_argument(
        "--root", type=Path, default=REPO_ROOT, help="where README.md and docs/ are"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    facts = read_run(args.experiment, args.directory)
    figure = run_figure(args.experiment, args.directory)
    if args.check:
        problems = check(facts, figure, args.root)
        for problem in problems:
            print(problem, file=sys.stderr)
        if not problems:
            page_run = read_record(args.root / RECORD).measured
            print(f"the page is current; its run: {page_run.summary()}; this run (a measurement, "
                  f"not compared): {facts.measured.summary()}")  # fmt: skip
        return 1 if problems else 0
    write(facts, figure, args.root)
    print(f"wrote {args.root / RECORD}, {args.root / PAGE}, the README's block and "
          f"{args.root / FIGURE_COPY}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
