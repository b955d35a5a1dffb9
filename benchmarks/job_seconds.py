"""Job-seconds by rule of a finished run, counting the jobs of the current DAG only.

Every rule writes its job's wall time with Snakemake's ``benchmark:`` directive
(``results/<experiment>/job_timings/``). A folder that has seen several configs also holds the
timings of jobs the DAG no longer has; summing the folder would count them. This asks Snakemake
which jobs the target has now (a forced dry run) and sums those jobs' files only.

    python benchmarks/job_seconds.py                          # the default's `all`
    python benchmarks/job_seconds.py --configfile overlay.yaml --target all_tables
    python benchmarks/job_seconds.py --directory RUN --configfile RUN/c.yaml --replace-workflow-config

Prints one row per rule (jobs, job-seconds, seconds per job, jobs without a timing file), the
total, and the CPU it was read on (the timings themselves are the run's machine's).
"""

from __future__ import annotations

import argparse
import csv
import platform
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from dashrepro.numerics import cpu_model

REPO = Path(__file__).resolve().parents[1]
JOB = re.compile(r"^\s*(?:local)?rule (\S+):$")  # grouped jobs are indented
BENCHMARK = re.compile(r"^\s+benchmark: (\S+)$")


def current_jobs(dry_run_output: str) -> list[tuple[str, str]]:
    """(rule, benchmark file) of every job a dry run lists; jobs without one are left out."""
    jobs, rule = [], None
    for line in dry_run_output.splitlines():
        if match := JOB.match(line):
            rule = match.group(1)
        elif (match := BENCHMARK.match(line)) and rule is not None:
            jobs.append((rule, match.group(1)))
    return jobs


def job_seconds(path: Path) -> float | None:
    """The wall time in a ``benchmark:`` file (its ``s`` column), None when absent."""
    if not path.is_file():
        return None
    with path.open() as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    return sum(float(row["s"]) for row in rows) if rows else None


def by_rule(jobs: list[tuple[str, str]], root: Path) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = defaultdict(lambda: {"jobs": 0, "s": 0.0, "missing": 0})
    for rule, benchmark in jobs:
        seconds = job_seconds(root / benchmark)
        row = table[rule]
        row["jobs"] += 1
        if seconds is None:
            row["missing"] += 1
        else:
            row["s"] += seconds
    return dict(table)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--directory", type=Path, default=REPO, help="the run's working folder")
    parser.add_argument("--configfile", action="append", default=[], help="overlays, in order")
    parser.add_argument("--target", default="all")
    parser.add_argument("--replace-workflow-config", action="store_true",
                        help="the config files alone, as the run had them (Snakemake's flag)")  # fmt: skip
    args = parser.parse_args(argv)
    command = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"),
               "--directory", str(args.directory), "-n", "--forceall", args.target]  # fmt: skip
    for overlay in args.configfile:
        command += ["--configfile", overlay]
    if args.replace_workflow_config:
        command.append("--replace-workflow-config")
    dry = subprocess.run(command, capture_output=True, text=True)
    if dry.returncode:
        sys.exit(f"snakemake dry run failed:\n{dry.stdout[-3000:]}{dry.stderr[-3000:]}")
    jobs = current_jobs(dry.stdout + dry.stderr)
    if not jobs:
        sys.exit("the dry run listed no job with a benchmark file")
    table = by_rule(jobs, args.directory)
    print("| rule | jobs | job-seconds | s/job | no timing |\n|---|---|---|---|---|")
    for rule, row in sorted(table.items(), key=lambda item: -item[1]["s"]):
        timed = row["jobs"] - row["missing"]
        per_job = row["s"] / timed if timed else float("nan")
        print(f"| {rule} | {row['jobs']} | {row['s']:.0f} | {per_job:.1f} | {row['missing']} |")
    total = sum(row["s"] for row in table.values())
    print(f"| total | {len(jobs)} | {total:.0f} | | {sum(r['missing'] for r in table.values())} |")
    print(f"\nread on {cpu_model()}, {platform.system()} {platform.machine()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
