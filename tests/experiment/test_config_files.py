"""Faults in the config files themselves stop the run before any job, naming the file and key:
a duplicate key, a non-finite number, an empty or non-UTF-8 file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dashrepro.experiment.config import (
    ConfigError,
    DuplicateKeyError,
    load_config,
    main,
    read_config_file,
)


def _write(folder: Path, name: str, content: bytes | str) -> Path:
    path = folder / name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def _snakemake_dry_run(repo_root: Path, workdir: Path, overlay: Path):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo_root / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(overlay), "-n", "all_tables"]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_every_shipped_config_file_has_unique_keys(repo_root):
    files = [repo_root / "workflow_config.yaml", *(repo_root / "config").rglob("*.yaml")]
    for path in files:
        assert isinstance(read_config_file(path), dict), path


@pytest.mark.parametrize(
    ("text", "key", "lines"),
    [
        ("experiment: a\nexperiment: b\n", "experiment", (1, 2)),
        ("evaluation:\n  seed: 1\n  temperature: 0.6\n  seed: 2\n", "evaluation.seed", (2, 4)),
        ("runs:\n  - methods: [a]\n    scales: [b]\n    methods: [c]\n", "runs.0.methods", (2, 4)),
        ("scales:\n  tiny: {lora: {r: 8, r: 16}}\n", "scales.tiny.lora.r", (2, 2)),  # flow, as JSON
    ],
)
def test_a_duplicate_key_names_file_key_and_both_lines(tmp_path, text, key, lines):
    path = _write(tmp_path, "dup.yaml", text)
    with pytest.raises(DuplicateKeyError) as info:
        read_config_file(path)
    assert str(info.value).startswith(
        f"{path}: duplicate key {key} (lines {lines[0]} and {lines[1]})"
    )


def test_a_merge_key_override_is_not_a_duplicate(tmp_path):
    path = _write(tmp_path, "merge.yaml", "a: &base {p: 1, q: 2}\nb:\n  <<: *base\n  p: 3\n")
    assert read_config_file(path) == {"a": {"p": 1, "q": 2}, "b": {"p": 3, "q": 2}}


def test_the_cli_rejects_a_duplicate_key_in_an_overlay(repo_root, tmp_path, monkeypatch):
    """``python -m dashrepro.experiment.config base overlay``, in-process (its exit message is the error)."""
    overlay = _write(tmp_path, "exp.yaml", "evaluation:\n  seed: 1\n\nevaluation:\n  seed: 2\n")
    monkeypatch.setattr(
        sys, "argv", ["config", str(repo_root / "workflow_config.yaml"), str(overlay)]
    )
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == f"{overlay}: duplicate key evaluation (lines 1 and 4); " + (
        "YAML would keep only the last, silently: keep one"
    )


@pytest.mark.parametrize(
    ("text", "key", "shown"),
    [
        ("scales:\n  tiny:\n    train:\n      lr: .inf\n", "scales.tiny.train.lr", "inf"),
        ("scales:\n  tiny:\n    sft:\n      lr: .nan\n", "scales.tiny.sft.lr", "nan"),
        ("evaluation:\n  temperature: .NaN\n", "evaluation.temperature", "nan"),
        ("evaluation:\n  grading_timeout_s: 1.0e+999\n", "evaluation.grading_timeout_s", "inf"),
        ("costs:\n  tiny: {train: .inf}\n", "costs.tiny.train", "inf"),
    ],
)
def test_a_non_finite_number_names_key_and_file(repo_root, tmp_path, text, key, shown):
    overlay = _write(tmp_path, "exp.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_config(repo_root / "workflow_config.yaml", overlay)
    assert f"  - {key}: {shown} is not a finite number [set in {overlay}]" in str(info.value)


def test_a_nan_parameter_is_named_once_with_its_range(repo_root, tmp_path):
    overlay = _write(tmp_path, "exp.yaml", "methods:\n  dash:\n    params: {kappa: .nan}\n")
    with pytest.raises(ConfigError) as info:
        load_config(repo_root / "workflow_config.yaml", overlay)
    lines = [line for line in str(info.value).splitlines() if "methods.dash.params.kappa" in line]
    assert len(lines) == 1 and "kappa >= 0" in lines[0] and f"[set in {overlay}]" in lines[0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty config file"),
        (b"# only a comment\n", "empty config file"),
        (b"evaluation:\n  seed: 1  # caf\xe9\n", "not UTF-8 text (byte 0xe9 on line 2)"),
    ],
)
def test_an_empty_or_non_utf8_overlay_names_the_file(repo_root, tmp_path, content, message):
    overlay = _write(tmp_path, "exp.yaml", content)
    with pytest.raises(ConfigError, match="^" + re.escape(f"{overlay}: {message}")):
        load_config(repo_root / "workflow_config.yaml", overlay)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "evaluation:\n  seed: 1\n  seed: 2\n",
            "exp.yaml: duplicate key evaluation.seed (lines 2 and 3)",
        ),
        (
            "scales:\n  tiny:\n    train:\n      lr: .inf\n",
            "scales.tiny.train.lr: inf is not a finite number [set in {overlay}]",
        ),
    ],
)
def test_the_dry_run_stops_before_any_job_naming_file_and_key(repo_root, tmp_path, text, expected):
    overlay = _write(tmp_path, "exp.yaml", text)
    done = _snakemake_dry_run(repo_root, tmp_path, overlay)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert expected.format(overlay=overlay) in out
    assert str(overlay) in out
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("content", [b"", b"evaluation:\n  seed: 1  # caf\xe9\n"])
def test_snakemake_stops_on_an_empty_or_non_utf8_overlay_before_any_job(
    repo_root, tmp_path, content
):
    """Snakemake loads ``--configfile``s (``ConfigSettings``) before it reads the Snakefile, so
    no code of the workflow runs first: its own error names no file. It does stop, though."""
    overlay = _write(tmp_path, "exp.yaml", content)
    done = _snakemake_dry_run(repo_root, tmp_path, overlay)
    assert done.returncode != 0, done.stdout + done.stderr
    assert not (tmp_path / "results").exists()
