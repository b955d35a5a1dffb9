"""The workflow deployed as the Snakemake workflow catalog deploys it: snakedeploy from a clean
folder, then Snakemake in that folder (config/README.md's commands).

snakedeploy's local provider names the module's Snakefile by a path relative to the source
(``"Snakefile"``), which only its GitHub and GitLab providers turn into a reference
(``github("owner/repo", path="Snakefile", tag=...)``): the test points that one line at the
source's Snakefile, as a release's reference would, and changes nothing else.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


@pytest.fixture(scope="module")
def deployed(repo_root, tmp_path_factory) -> tuple[Path, Path]:
    from conftest import copy_tracked_files

    source = copy_tracked_files(repo_root, tmp_path_factory.mktemp("source") / "dashrepro")
    dest = tmp_path_factory.mktemp("deploy") / "my-analysis"
    snakedeploy = Path(sys.executable).with_name("snakedeploy")
    done = subprocess.run(
        [str(snakedeploy), "deploy-workflow", str(source), str(dest), "--branch", "main"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    snakefile = dest / "workflow" / "Snakefile"
    text = snakefile.read_text()
    local = re.compile(r'snakefile:\s*\n\s*"Snakefile"')
    assert local.search(text), text
    snakefile.write_text(local.sub(f'snakefile:\n        "{source / "Snakefile"}"', text))
    return source, dest


def snakemake(dest: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=dest,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def test_snakedeploy_copies_the_config_and_the_profiles(repo_root, deployed):
    _, dest = deployed
    config = yaml.safe_load((dest / "config" / "config.yaml").read_text())
    assert config == yaml.safe_load((repo_root / "workflow_config.yaml").read_text())
    assert (dest / "config" / "experiments" / "paper.yaml").is_file()
    assert (dest / "profiles" / "slurm-a800" / "config.v8+.yaml").is_file()
    assert "use rule * from" in (dest / "workflow" / "Snakefile").read_text()


def test_the_deployed_workflow_plans_the_default_and_runs_its_first_jobs(deployed):
    source, dest = deployed
    planned = snakemake(dest, "-n", "all")
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]
    plain = snakemake(source, "-n", "all")
    total = re.compile(r"^total\s+(\d+)$", re.MULTILINE)
    assert total.findall(planned.stdout) == total.findall(plain.stdout) != []
    # A job's rule script runs from the module: the tokenizer, under the deployed folder.
    target = "results/tiny/tokenizer/tokenizer.json"
    done = snakemake(dest, "--cores", "2", target)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (dest / target).is_file() and not (source / target).exists()
