"""Fault injection on a finished run: each fault, what the pipeline did, and a verdict.

Makes the smoke run (``dashrepro.embedded.smoke_config``: the embedded default cut to a few
minutes, every stage) in a working folder, or takes one already made (``--workdir``); then, for
each fault of ``FAULTS``, copies that folder, injects the fault, runs the command a user would run
next, and prints one table row:

- ``clear error``  the command failed and its output names the damaged file, key or row;
- ``unnamed error`` it failed without naming it;
- ``silent``       it succeeded (the fault went through, or was washed out unnoticed);
- ``caught by audit`` it succeeded, and ``dashrepro audit --verify`` names the file;
- ``nothing rerun`` / ``rerun`` for a change that is no fault (a touched file): whether the
  dry run of ``all`` had nothing to do.

The faults are those of the reliability probe (issue 24) and of the trust-boundary review
(issue 37) that a finished run can show in seconds each: damaged or replaced results, bad
config overlays (an experiment name outside results/, grading without a hard limit, a hub
benchmark at a branch), a damaged base model folder. A
damaged training state is checked where it is resumed (``tests/training/resume/test_folder.py``, ``test_retention.py``);
kill -9 and resume in ``tests/workflow/test_workflow.py``.

    python benchmarks/faults.py                 # ~10 min on 2 cores (the smoke run ~6 of them)
    python benchmarks/faults.py --workdir DIR   # DIR: a folder a previous call kept (--keep)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from dashrepro.layout import BASE_ACCURACY, RESPONSES, SAMPLES, SUMMARY, Results

ROOT = Path(__file__).resolve().parents[1]
LAYOUT = Results("e2e")  # the smoke run's experiment
RESULTS = LAYOUT.root
#: How Snakemake lists a job; a file named there is not named by an error.
JOB_LISTING = ("input:", "output:", "log:", "benchmark:", "reason:", "wildcards:", "jobid:",
               "resources:", "rule ", "localrule ", "threads:")  # fmt: skip


@dataclass
class Fault:
    name: str
    inject: Callable[[Path], str]  # returns the file, key or row the output must name
    command: Callable[[Path], list[str]]  # what the user runs next (arguments to snakemake)
    #: A change that is no fault (a file touched, its bytes unchanged): the run must have
    #: nothing to do, rather than name the file in an error.
    harmless: bool = False


def snakemake(workdir: Path, *args: str, configfiles: tuple[str, ...] = ()) -> list[str]:
    files = [str(workdir / "config.yaml"), *configfiles]
    return [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
            "--directory", str(workdir), "--configfile", *files, *args]  # fmt: skip


def run_all(workdir: Path) -> list[str]:
    return snakemake(workdir, "--cores", "2", "all")


# --------------------------------------------------------------------------------- the faults


def swap_adapter(workdir: Path) -> str:
    """Another run's adapter copied over a checkpoint (the probe: washed into the tables)."""
    target = workdir / LAYOUT.adapter("dash", "tiny", 0, 2)
    source = workdir / LAYOUT.adapter("opsd", "tiny", 0, 2)
    target.write_bytes(source.read_bytes())
    return str(target.relative_to(workdir))


def edit_markdown_table(workdir: Path) -> str:
    table = workdir / LAYOUT.table("main_results", "md")
    table.write_text(table.read_text().replace("|", "| ", 1))
    return str(table.relative_to(workdir))


def edit_latex_table(workdir: Path) -> str:
    table = workdir / LAYOUT.table("main_results", "tex")
    table.write_text(table.read_text() + "% edited\n")
    return str(table.relative_to(workdir))


def edit_csv_cell(workdir: Path) -> str:
    import pandas as pd

    table = workdir / LAYOUT.table("main_results", "csv")
    frame = pd.read_csv(table)
    frame.loc[0, "value"] = float(frame.loc[0, "value"]) + 0.5
    frame.to_csv(table, index=False)
    return str(table.relative_to(workdir))


def edit_grade(workdir: Path) -> str:
    import pandas as pd

    samples = workdir / LAYOUT.checkpoint_file(SAMPLES, "dash", "tiny", 1, 2)
    frame = pd.read_parquet(samples)
    frame.loc[0, "correct"] = not frame.loc[0, "correct"]
    frame.to_parquet(samples, index=False)
    return str(samples.relative_to(workdir))


def edit_summary(workdir: Path) -> str:
    summary = workdir / LAYOUT.checkpoint_file(SUMMARY, "dash", "tiny", 1, 2)
    data = json.loads(summary.read_text())
    data["mean_over_benchmarks"] += 1.0
    summary.write_text(json.dumps(data))
    return str(summary.relative_to(workdir))


def truncate_responses(workdir: Path) -> str:
    responses = workdir / LAYOUT.checkpoint_file(RESPONSES, "opsd", "tiny", 0, 4)
    responses.write_bytes(responses.read_bytes()[:100])
    return str(responses.relative_to(workdir))


def empty_tokenizer(workdir: Path) -> str:
    """The base model folder's tokenizer.json emptied (not a declared output of any job)."""
    tokenizer = workdir / LAYOUT.base_model("tiny") / "tokenizer.json"
    tokenizer.write_bytes(b"")
    return str(tokenizer.parent.relative_to(workdir))


def touch_base_model(workdir: Path) -> str:
    """The base model's weights touched, bytes unchanged (a copy, a restore from a backup)."""
    weights = workdir / LAYOUT.base_model("tiny") / "model.safetensors"
    weights.touch()
    return str(weights.relative_to(workdir))


def dry_run_all(workdir: Path) -> list[str]:
    return snakemake(workdir, "-n", "all")


def overlay(text: bytes, names: str = "overlay.yaml") -> Callable[[Path], str]:
    """An overlay with ``text``, whose error must name ``names`` (the file, or the key)."""

    def inject(workdir: Path) -> str:
        (workdir / "overlay.yaml").write_bytes(text)
        return names

    return inject


def with_overlay(workdir: Path) -> list[str]:
    return snakemake(workdir, "-n", "all", configfiles=(str(workdir / "overlay.yaml"),))


def with_overlay_run(workdir: Path) -> list[str]:
    """A real run with the overlay (not a dry run): what the checks before the first job see."""
    return snakemake(workdir, "--cores", "2", "all", configfiles=(str(workdir / "overlay.yaml"),))


#: A benchmark from the hub at a branch, which can move under a finished run.
HUB_BENCHMARK_AT_A_BRANCH = b"""benchmarks:
  aime2024:
    dataset: {hf_id: HuggingFaceH4/aime_2024, revision: main, split: train,
              layout: hf_aime_2024, expected_size: 6}
"""


def forcerun_base_evaluation(workdir: Path) -> list[str]:
    target = LAYOUT.base_eval_file(BASE_ACCURACY, "tiny")
    return snakemake(workdir, "--cores", "2", "--forcerun", "evaluate_base_model", target)


FAULTS = [
    Fault("adapter replaced by another run's", swap_adapter, run_all),
    Fault("main_results.md edited", edit_markdown_table, run_all),
    Fault("main_results.tex edited", edit_latex_table, run_all),
    Fault("main_results.csv cell edited", edit_csv_cell, run_all),
    Fault("a grade flipped in samples.parquet", edit_grade, run_all),
    Fault("summary.json edited", edit_summary, run_all),
    Fault("responses.parquet truncated", truncate_responses, run_all),
    Fault("base model tokenizer.json emptied", empty_tokenizer, forcerun_base_evaluation),
    Fault("base model touched, bytes unchanged", touch_base_model, dry_run_all, harmless=True),
    Fault("overlay gives a key twice",
          overlay(b"statistics:\n  seed: 1\nstatistics:\n  seed: 2\n"), with_overlay),
    Fault("overlay sets lr: .inf",
          overlay(b"scales:\n  tiny:\n    train:\n      lr: .inf\n"), with_overlay),
    Fault("overlay names the experiment '..'",
          overlay(b"experiment: '..'\n", "experiment"), with_overlay),
    Fault("overlay sets grading_workers: 0",
          overlay(b"evaluation:\n  grading_workers: 0\n", "evaluation.grading_workers"),
          with_overlay),
    Fault("overlay's hard grading limit under math-verify's",
          overlay(b"evaluation:\n  grading_item_timeout_s: 1\n",
                  "evaluation.grading_item_timeout_s"), with_overlay),
    Fault("overlay takes a hub benchmark at a branch",
          overlay(HUB_BENCHMARK_AT_A_BRANCH, "benchmarks.aime2024.dataset.revision"),
          with_overlay_run),
    Fault("overlay is empty", overlay(b""), with_overlay),
    Fault("overlay is not UTF-8", overlay(b"experiment: \xff\xfe\n"), with_overlay),
]  # fmt: skip


# ------------------------------------------------------------------------------------ running

GOOD_VERDICTS = ("clear error", "caught by audit", "nothing rerun")


def make_run(workdir: Path) -> None:
    from dashrepro.embedded.smoke_config import smoke_config
    from dashrepro.experiment.run_matrix import expand_config

    default = expand_config(yaml.safe_load((ROOT / "workflow_config.yaml").read_text()))
    (workdir / "config.yaml").write_text(yaml.safe_dump(smoke_config(default)))
    done = subprocess.run(run_all(workdir), capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the smoke run failed:\n{done.stderr[-3000:]}")


def audit_names(workdir: Path, named: str) -> bool:
    """Whether ``dashrepro audit --report`` over every cell names ``named``."""
    command = [sys.executable, "-m", "dashrepro.cli", "audit", "--root", str(workdir),
               "--results", RESULTS, "--report", "--out", str(workdir / "audit-probe")]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    return named in done.stdout


def probe(run: Path, fault: Fault, scratch: Path) -> dict:
    workdir = scratch / "probe"
    shutil.rmtree(workdir, ignore_errors=True)
    shutil.copytree(run, workdir, symlinks=True)
    named = fault.inject(workdir)
    t0 = time.perf_counter()
    done = subprocess.run(fault.command(workdir), capture_output=True, text=True)
    # Lines that say something, not Snakemake's listing of a job's files and reasons.
    said = [line.strip() for line in (done.stdout + done.stderr).splitlines()
            if named in line and not line.strip().startswith(JOB_LISTING)]  # fmt: skip
    if fault.harmless:
        idle = done.returncode == 0 and "Nothing to be done" in done.stdout + done.stderr
        verdict = "nothing rerun" if idle else "rerun"
        said = [] if idle else said
    elif done.returncode:
        verdict = "clear error" if said else "unnamed error"
    else:
        verdict = "caught by audit" if audit_names(workdir, named) else "silent"
    line = said[0] if said else ""
    return {"fault": fault.name, "verdict": verdict, "exit": done.returncode,
            "seconds": round(time.perf_counter() - t0, 1), "names": named,
            "line": line.strip()[:160]}  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="a finished smoke run (default: make one in a temporary folder)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the smoke run's folder")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="faults_"))
    run = args.workdir
    if run is None:
        run = scratch / "run"
        run.mkdir()
        print(f"making the smoke run in {run} ...", flush=True)
        make_run(run)
    rows = []
    for fault in FAULTS:
        rows.append(probe(run, fault, scratch))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print("\n| fault | verdict | exit | seconds | what it said |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['fault']} | {row['verdict']} | {row['exit']} | {row['seconds']} | "
              f"{row['line'].replace('|', '/')} |")  # fmt: skip
    shutil.rmtree(scratch / "probe", ignore_errors=True)
    if not args.keep and args.workdir is None:
        shutil.rmtree(scratch, ignore_errors=True)
    elif args.workdir is None:
        print(f"kept: {run}")
    return 0 if all(r["verdict"] in GOOD_VERDICTS for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
