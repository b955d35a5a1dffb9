"""Dry-run time of the workflow's DAG: how long Snakemake takes to parse the workflow and plan
every job (it re-parses the Snakefile in every cluster job, so this is paid per job).

    python benchmarks/dag.py            # the default `all`: median of 5 dry runs
    python benchmarks/dag.py --paper    # the paper's `all_tables` (149 runs, ~3,300 jobs),
                                        # beside a bare Snakefile with as many jobs
    python benchmarks/dag.py --runs 10

Goals on a 2-core CPU machine with nothing else running: the default at most 2 s; the paper at
most 10 s and at most 1.2 x the bare Snakefile with the same job count. A second baseline gives
the bare Snakefile the directives every rule of the workflow uses, which Snakemake itself pays
for per job (reading each job's script source, its conda environment), so that the workflow's
own share shows apart. Snakemake's start is timed too and taken out of each, so that a slow
start (a SLURM client whose controller is down costs ~9 s) does not hide the workflow's share.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 2.0
PAPER_GOAL_S = 10.0
PAPER_GOAL_RATIO = 1.2

BARE_SNAKEFILE = """
N = {n}

rule all:
    input: expand("out/{{i}}.txt", i=range(N))

rule job:
    output: "out/{{i}}.txt"
    shell: "touch {{output}}"
"""

# The same job count through rules that use the directives every rule of the workflow has
# (script, conda, log, benchmark, params): what Snakemake itself spends on them per job, so the
# workflow's own overhead (input functions, the config's parse and validation) shows apart.
DIRECTIVE_SNAKEFILE = """
N = {n}

rule all:
    input: expand("out/{{i}}.txt", i=range(N))

rule job:
    output: "out/{{i}}.txt"
    log: "logs/{{i}}.log"
    benchmark: "bench/{{i}}.tsv"
    conda: "env.yaml"
    params: value=lambda wc: {{"i": wc.i}}
    script: "job.py"
"""


def dry_run(snakefile: Path, workdir: Path, *args: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(snakefile), "--directory", str(workdir),
         "-n", *args],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return time.perf_counter() - started, done.stdout + done.stderr


def startup_seconds(runs: int) -> float:
    """Median seconds of ``snakemake --version``: Snakemake's start, paid by every dry run above
    whatever the workflow. On a machine with a SLURM client whose controller is down it holds
    ~9 s (the SLURM executor plugin asks ``scontrol`` when it is imported), which would
    otherwise hide the workflow's own share."""
    command = [sys.executable, "-m", "snakemake", "--version"]
    subprocess.run(command, check=True, capture_output=True)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def median_seconds(runs: int, *args) -> tuple[float, str]:
    dry_run(*args)  # warm the file system cache
    results = [dry_run(*args) for _ in range(runs)]
    return statistics.median(t for t, _ in results), results[0][1]


def paper_workdir(workdir: Path) -> None:
    """The paper overlay merged over the default, with empty benchmark stand-ins."""
    sys.path.insert(0, str(REPO / "src"))
    import yaml

    from dashrepro.experiment.config import merge_configs, read_config_file

    config = merge_configs(
        read_config_file(REPO / "workflow_config.yaml"),
        read_config_file(REPO / "config/experiments/paper.yaml"),
    )
    for name, bench in config["benchmarks"].items():
        bench["dataset"]["path"] = str(workdir / f"{name}.jsonl")
        (workdir / f"{name}.jsonl").touch()
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--paper", action="store_true", help="the paper's all_tables")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        if not args.paper:
            median, _ = median_seconds(args.runs, REPO / "Snakefile", workdir, "all", "--quiet")
            print(f"dry run of `all` (default config): median {median:.2f} s over {args.runs} "
                  f"runs; goal {GOAL_S:.1f} s -> ratio to goal {median / GOAL_S:.2f}")  # fmt: skip
            return
        paper_workdir(workdir)
        median, out = median_seconds(
            args.runs, REPO / "Snakefile", workdir, f"--configfile={workdir / 'config.yaml'}",
            "all_tables", "--quiet", "rules",
        )  # fmt: skip
        jobs = int(re.search(r"^total\s+(\d+)", out, re.MULTILINE).group(1))
        bare = workdir / "bare"
        bare.mkdir()
        (bare / "Snakefile").write_text(BARE_SNAKEFILE.format(n=jobs - 1))
        bare_median, _ = median_seconds(args.runs, bare / "Snakefile", bare, "--quiet", "rules")
        directives = workdir / "directives"
        directives.mkdir()
        (directives / "Snakefile").write_text(DIRECTIVE_SNAKEFILE.format(n=jobs - 1))
        (directives / "env.yaml").write_text("dependencies: [python]\n")
        (directives / "job.py").write_text("open(snakemake.output[0], 'w').close()\n")
        directive_median, _ = median_seconds(
            args.runs, directives / "Snakefile", directives, "--quiet", "rules"
        )
    print(f"dry run of the paper's `all_tables` ({jobs} jobs): median {median:.2f} s over "
          f"{args.runs} runs; goal {PAPER_GOAL_S:.0f} s -> ratio to goal "
          f"{median / PAPER_GOAL_S:.2f}")  # fmt: skip
    print(f"bare Snakefile with {jobs} jobs: median {bare_median:.2f} s -> ratio "
          f"{median / bare_median:.2f} (goal {PAPER_GOAL_RATIO})")  # fmt: skip
    print(f"bare Snakefile with {jobs} jobs using the workflow's directives (script, conda, log, "
          f"benchmark, params): median {directive_median:.2f} s -> ratio "
          f"{median / directive_median:.2f}")  # fmt: skip
    start = startup_seconds(args.runs)
    print(f"Snakemake's own start (`snakemake --version`): median {start:.2f} s, in each time "
          f"above; without it the paper takes {median - start:.2f} s, the bare Snakefile "
          f"{bare_median - start:.2f} s -> ratio {(median - start) / (bare_median - start):.2f}, "
          f"with directives {directive_median - start:.2f} s -> ratio "
          f"{(median - start) / (directive_median - start):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
