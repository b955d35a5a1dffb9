"""Tests for ``dashrepro.provenance.records``. Records never outlive their outputs: refused for a
missing output, removed with a failed job's outputs, marked as orphans by ``trace`` and pruned."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dashrepro.provenance import (
    discard_records,
    orphan_records,
    record_path,
    trace,
    write_provenance,
)


def test_no_record_for_an_output_that_does_not_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json"):
        write_provenance(tmp_path / "missing.json", "stage")
    assert not list(tmp_path.iterdir())


def test_discard_records_removes_file_and_folder_records(tmp_path):
    output = tmp_path / "summary.json"
    output.write_text("{}")
    write_provenance(output, "grade")
    folder = tmp_path / "checkpoint-2"
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(b"x")
    write_provenance(folder, "train")
    removed = discard_records([output, folder / "adapter_model.safetensors"])
    assert sorted(p.name for p in removed) == ["provenance.json", "summary.json.provenance.json"]
    assert not record_path(output).exists() and not (folder / "provenance.json").exists()


def test_trace_marks_orphans_and_prune_removes_them(tmp_path):
    data = tmp_path / "data.parquet"
    data.write_text("d")
    write_provenance(data, "data")
    table = tmp_path / "table.csv"
    table.write_text("t")
    write_provenance(table, "table", inputs={"data": str(data)})
    data.unlink()  # as if a failed job's output was deleted and its record left behind
    lines = trace(table, root=tmp_path)
    assert "orphan" in lines[1] and str(data) in lines[1]
    assert orphan_records(tmp_path) == [record_path(tmp_path / "data.parquet")]
    done = subprocess.run(
        [sys.executable, "-m", "dashrepro.provenance", "--prune-orphans", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "removed orphan record" in done.stdout
    assert orphan_records(tmp_path) == []
    assert record_path(table).exists()


def test_the_code_version_names_torch_without_importing_it():
    # A grading, selection or table job records what it ran with but never loads torch (~2.5 s).
    import subprocess
    import sys
    from importlib import metadata

    code = (
        "import sys; from dashrepro.provenance.records import code_version; v = code_version(); "
        "print('torch' in sys.modules, 'transformers' in sys.modules, v['torch'])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False", metadata.version("torch")]


def test_written_says_whether_each_file_is_the_whole_output_its_job_wrote(tmp_path):
    """`python -m dashrepro.provenance --written FILE ...` (docs/troubleshooting.md): what to
    check before keeping the outputs of a job that outlived a killed Snakemake."""
    whole = tmp_path / "responses.parquet"
    whole.write_bytes(b"rows")
    write_provenance(whole, "generate_checkpoint_responses")
    unrecorded = tmp_path / "samples.parquet"
    unrecorded.write_bytes(b"a job killed before its record")
    edited = tmp_path / "summary.json"
    edited.write_text("{}")
    write_provenance(edited, "grade_checkpoint")
    edited.write_text('{"edited": true}')

    def written(*paths):
        return subprocess.run(
            [sys.executable, "-m", "dashrepro.provenance", "--written", *map(str, paths)],
            capture_output=True, text=True,
        )  # fmt: skip

    done = written(whole)
    assert done.returncode == 0, done.stderr
    assert f"{whole}: written whole by rule generate_checkpoint_responses" in done.stdout
    done = written(whole, unrecorded, edited, tmp_path / "missing.parquet")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[1] == f"{unrecorded}: no provenance record (its job did not finish, or wrote none)"
    assert lines[2] == f"{edited}: not the file rule grade_checkpoint wrote (sha256 differs)"
    assert lines[3] == f"{tmp_path / 'missing.parquet'}: missing"
