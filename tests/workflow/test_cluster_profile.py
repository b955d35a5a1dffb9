"""The README's cluster command, run as written (a dry run) in a copy of the repository: it
parses, and the SLURM profile puts each job where it belongs. GPU counts come from the config
(a training job gets its scale's `num_processes` GPUs on one node, an evaluation job one),
GPU rules go to the GPU partition, the rest to the CPU partition, and grading is packed 16 checkpoints to a
SLURM job."""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import sys

import pytest

PROFILE_COMMAND = re.compile(r"^snakemake --profile slurm-a800 .*all_tables$", re.MULTILINE)


def readme_cluster_command(repo_root) -> str:
    commands = PROFILE_COMMAND.findall((repo_root / "README.md").read_text())
    assert commands, "README.md shows no `snakemake --profile slurm-a800 ... all_tables` command"
    return commands[0]


@pytest.fixture(scope="module")
def dry_run(repo_root, tmp_path_factory) -> str:
    """The README's command with `-n`, in a copy of the tracked files (the benchmark files,
    never committed, as empty stand-ins: a dry run reads none)."""
    from conftest import copy_tracked_files

    copy = copy_tracked_files(repo_root, tmp_path_factory.mktemp("repo"))
    (copy / "data/benchmarks").mkdir(parents=True, exist_ok=True)
    for name in ("aime2024", "aime2025", "hmmt_feb2025"):
        (copy / f"data/benchmarks/{name}.jsonl").touch()
    argv = shlex.split(readme_cluster_command(repo_root))
    assert argv[0] == "snakemake"
    done = subprocess.run([sys.executable, "-m", "snakemake", *argv[1:], "-n"], cwd=copy,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    return out


def resources(out: str, rule: str) -> list[dict[str, str]]:
    """The resources of every planned job of ``rule``."""
    found = []
    for block in re.split(r"\n\s*rule ", out)[1:]:
        if block.startswith(f"{rule}:"):
            line = re.search(r"resources: (.*)", block).group(1)
            found.append(dict(item.split("=", 1) for item in line.split(", ")))
    return found


@pytest.mark.parametrize(
    ("rule", "gpus", "partition"),
    [
        ("train_lora_qwen3_1p7b", "8", "a800"),
        ("train_lora_qwen3_4b", "8", "a800"),
        ("train_lora_qwen3_8b", "4", "a800"),
        ("generate_checkpoint_responses", "1", "a800"),
        ("evaluate_base_model", "1", "a800"),
        ("grade_checkpoint", None, "cpu"),
    ],
)
def test_each_job_asks_for_its_gpus_and_partition(dry_run, rule, gpus, partition):
    jobs = resources(dry_run, rule)
    assert jobs, rule
    for job in jobs:
        assert job.get("gpu") == gpus and job["slurm_partition"] == partition, job
        assert gpus is None or job["nodes"] == "1"


def test_grading_is_packed_into_group_jobs(repo_root, dry_run):
    from conftest import expected_jobs

    from dashrepro.experiment.config import load_config

    grading = len(resources(dry_run, "grade_checkpoint"))
    paper = load_config(
        repo_root / "workflow_config.yaml", repo_root / "config/experiments/paper.yaml"
    )
    assert grading == expected_jobs(paper)["grade_checkpoint"]
    assert dry_run.count("Group job grading") == math.ceil(grading / 16)


def test_downloads_and_data_preparation_run_where_snakemake_runs(repo_root):
    """Login nodes have the internet that compute nodes often lack. (A dry run prints every job
    as `rule`, local or not; tests/workflow/test_slurm_cluster.py checks on SLURM's records that
    no localrule is submitted.)"""
    snakefile = (repo_root / "Snakefile").read_text()
    block = snakefile.split("localrules:")[1].split("\n\n")[0]
    local = {name.strip(" ,") for name in block.split() if name.strip(" ,")}
    assert {"download_model", "prepare_training_set", "prepare_benchmark"} <= local
