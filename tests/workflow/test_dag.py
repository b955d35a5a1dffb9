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


def paper_workdir(repo_root, tmp_path):
    """A working directory whose config is the paper overlay merged as Snakemake merges it,
    with empty stand-ins for the benchmark files (a dry run reads none of them)."""
    import yaml

    from dashrepro.config import merge_configs, read_config_file

    config = merge_configs(
        read_config_file(repo_root / "workflow_config.yaml"),
        read_config_file(repo_root / "config/experiments/paper.yaml"),
    )
    for name, bench in config["benchmarks"].items():
        bench["dataset"]["path"] = str(tmp_path / f"{name}.jsonl")
        (tmp_path / f"{name}.jsonl").touch()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


def snakemake_in(repo_root, workdir, *args):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo_root / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(workdir / "config.yaml"), *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def job_counts(output: str) -> dict[str, int]:
    """The job-stats table of a dry run: rule -> count."""
    counts = {}
    for line in output.split("Job stats:")[1].splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def test_the_paper_dry_runs_with_its_149_training_runs(repo_root, tmp_path):
    done = snakemake_in(repo_root, paper_workdir(repo_root, tmp_path), "-n", "all_tables")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    counts = job_counts(out)
    assert counts["train_lora_qwen3_1p7b"] == 123  # 2 x 4 + 3 x 1 + 28 ablations x 4
    assert counts["train_lora_qwen3_4b"] == 11 and counts["train_lora_qwen3_8b"] == 15
    assert counts["generate_checkpoint_responses"] == counts["grade_checkpoint"] == 1490
    assert counts["select_best_checkpoint"] == 149 and counts["evaluate_base_model"] == 3
    assert counts["table"] == 10


def test_the_published_tables_render_from_the_shipped_numbers(repo_root, tmp_path):
    workdir = paper_workdir(repo_root, tmp_path)
    done = snakemake_in(repo_root, workdir, "--cores", "2", "published_tables")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    main = (workdir / "results/published/tables/main_results.tex").read_text()
    assert r"\firstscore{45.07}" in main and r"GRPO$^{\dagger}$" in main
    assert len(list((workdir / "results/published/tables").glob("*.md"))) == 9
