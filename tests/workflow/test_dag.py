"""Snakemake's parse of the workflow stays light: no model library is imported to build the DAG
(on a cluster every job re-parses the Snakefile)."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "peft", "vllm", "deepspeed", "accelerate", "matplotlib")

PARSE_AND_REPORT_MODULES = """
import atexit, sys
atexit.register(lambda: print("IMPORTED:", ",".join(m for m in {heavy!r} if m in sys.modules)))
from snakemake.cli import main
sys.argv = ["snakemake", "-s", {snakefile!r}, "--directory", {workdir!r}, "-n", "all"]
main()
"""


def test_dry_run_imports_no_model_library(repo_root, tmp_path):
    code = PARSE_AND_REPORT_MODULES.format(
        heavy=HEAVY, snakefile=str(repo_root / "Snakefile"), workdir=str(tmp_path)
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "This was a dry-run" in done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("IMPORTED:")
    assert last.removeprefix("IMPORTED:").strip() == "", f"parse imported {last}"
