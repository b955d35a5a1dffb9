"""The data rules on real-layout local files: normalised output, a report, and clear refusals.

Runs Snakemake on just the data targets in a temporary directory (seconds, no model).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_workflow import snakemake

from dashrepro.embedded.smoke_config import smoke_config

ROWS = [
    {"id": "aime2024-I-1", "problem": "Find $1+1$.", "answer": "2"},
    {"id": "aime2024-I-2", "problem": "Find $2+2$.", "answer": "004"},
    {"id": "aime2024-I-3", "problem": "Find $\\frac{1}{2}+\\frac{1}{2}$.", "answer": "1"},
]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def workdir(tmp_path, default_config):
    digest = write_jsonl(tmp_path / "aime2024.jsonl", ROWS)
    config = smoke_config(default_config)
    config["benchmarks"]["aime2024"].update(
        n_problems=3,
        dataset={"path": "aime2024.jsonl", "sha256": digest, "layout": "local_benchmark"},
    )
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


def target(bench: str) -> str:
    return f"results/e2e/data/benchmarks/{bench}.parquet"


def test_local_benchmark_is_prepared_with_a_report(workdir, repo_root):
    done = snakemake(workdir, repo_root, "--cores", "1", target("aime2024"), target("aime2025"))
    assert done.returncode == 0, done.stderr[-3000:]
    real = pd.read_parquet(workdir / target("aime2024"))
    assert list(real["id"]) == [r["id"] for r in ROWS]
    assert list(real["answer"]) == ["2", "004", "1"]  # the source text is the authority
    report = json.loads((workdir / "results/e2e/data/benchmarks/aime2024.report.json").read_text())
    assert (
        report["rows_kept"] == 3
        and report["sha256"]
        == hashlib.sha256((workdir / "aime2024.jsonl").read_bytes()).hexdigest()
    )
    # The other benchmarks stay synthetic stand-ins of their configured size.
    synthetic = pd.read_parquet(workdir / target("aime2025"))
    assert len(synthetic) == 6 and set(synthetic["task"]) == {"add3"}
    record = json.loads((workdir / (target("aime2024") + ".provenance.json")).read_text())
    assert record["inputs"]["source"][0]["path"].endswith("aime2024.jsonl")


def test_changed_file_is_refused_by_its_hash(workdir, repo_root):
    write_jsonl(workdir / "aime2024.jsonl", [*ROWS[:2], {**ROWS[2], "answer": "2"}])
    done = snakemake(workdir, repo_root, "--cores", "1", target("aime2024"))
    assert done.returncode != 0
    log = (workdir / "results/e2e/logs/prepare_benchmark/aime2024.log").read_text()
    assert "aime2024.jsonl: sha256 mismatch" in log
    assert not (workdir / target("aime2024")).exists()


def test_wrong_size_stops_the_run_naming_the_benchmark(workdir, repo_root):
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["benchmarks"]["aime2024"]["n_problems"] = 30
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    done = snakemake(workdir, repo_root, "--cores", "1", target("aime2024"))
    assert done.returncode != 0
    log = (workdir / "results/e2e/logs/prepare_benchmark/aime2024.log").read_text()
    assert "benchmark aime2024: expected 30 problems after cleaning, got 3" in log


def test_missing_local_file_is_named_before_anything_runs(workdir, repo_root):
    (workdir / "aime2024.jsonl").unlink()
    dry = snakemake(workdir, repo_root, "-n", target("aime2024"))
    assert dry.returncode != 0
    assert "aime2024.jsonl" in dry.stdout + dry.stderr
