"""Dry-run time of the default DAG: how long Snakemake takes to parse the workflow and plan
every job of `all` (it re-parses the Snakefile in every cluster job, so this is paid per job).

    python benchmarks/dag.py            # 5 dry runs in a fresh temporary folder; prints the median
    python benchmarks/dag.py --runs 10

Goal: at most 2 s on a 2-core CPU machine with nothing else running.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 2.0


def dry_run_seconds(workdir: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"),
         "--directory", str(workdir), "-n", "all", "--quiet"],
        check=True, capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        dry_run_seconds(Path(workdir))  # warm the file system cache
        times = [dry_run_seconds(Path(workdir)) for _ in range(args.runs)]
    median = statistics.median(times)
    print(f"dry run of `all` (default config): median {median:.2f} s over {args.runs} runs "
          f"(min {min(times):.2f}, max {max(times):.2f}); goal {GOAL_S:.1f} s -> "
          f"ratio to goal {median / GOAL_S:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
