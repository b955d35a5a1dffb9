"""Which file set a config key, as Snakemake's parse tells its jobs (``config_sources``)."""

from __future__ import annotations

import subprocess
import sys

from dashrepro import config_sources


def test_a_recorded_key_is_named_by_its_file_and_a_default_by_the_files_merged(monkeypatch):
    monkeypatch.setenv(config_sources.VARIABLE, "")  # restored after the test
    config_sources.record("base.yaml + exp.yaml", {"evaluation.device": "exp.yaml"})
    assert config_sources.set_in("evaluation.device") == "set in exp.yaml"
    assert config_sources.set_in("evaluation.seed") == (
        "in the configuration merged from base.yaml + exp.yaml"
    )


def test_outside_snakemake_nothing_is_recorded_and_the_job_says_so(monkeypatch):
    monkeypatch.delenv(config_sources.VARIABLE, raising=False)
    assert config_sources.set_in("evaluation.device") == "in the job's parameters"
    monkeypatch.setenv(config_sources.VARIABLE, "not json")
    assert config_sources.set_in("evaluation.device") == "in the job's parameters"


def test_a_job_started_by_this_process_inherits_the_record(monkeypatch):
    monkeypatch.setenv(config_sources.VARIABLE, "")
    config_sources.record("base.yaml", {"evaluation.device": "base.yaml"})
    child = subprocess.run(
        [sys.executable, "-c",
         "from dashrepro.config_sources import set_in; print(set_in('evaluation.device'))"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert child.stdout.strip() == "set in base.yaml"
