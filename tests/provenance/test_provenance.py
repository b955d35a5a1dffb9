"""Provenance records never outlive their outputs: refused for a missing output, removed with a
failed job's outputs, marked as orphans by ``trace`` and pruned on request."""

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


def job(tmp_path, inputs: dict, outputs: list, rule: str = "consumer"):
    """A stand-in for the ``snakemake`` object a rule script receives."""
    from types import SimpleNamespace

    class Named(list):
        def __init__(self, mapping):
            super().__init__(mapping.values())
            self._mapping = mapping

        def items(self):
            return self._mapping.items()

    return SimpleNamespace(rule=rule, input=Named(inputs), output=[str(o) for o in outputs],
                           params=Named({}), wildcards=Named({}), threads=1)  # fmt: skip


def test_a_record_holds_its_outputs_sha256_and_a_changed_input_stops_the_next_job(tmp_path):
    """A swapped adapter or an edited table is only *newer* to Snakemake, which would rerun on
    it; the job that reads it compares it with what its maker wrote and stops, naming it."""
    from dashrepro.io import read_json, sha256_path
    from dashrepro.provenance.job import ChangedInputError, check_inputs, record_job

    adapter = tmp_path / "adapter_model.safetensors"
    adapter.write_bytes(b"trained weights")
    record_job(job(tmp_path, {}, [adapter], rule="train_lora_tiny"), started_utc="t0")
    assert read_json(record_path(adapter))["output_sha256"] == sha256_path(adapter)

    consumer = job(tmp_path, {"adapter": str(adapter)}, [tmp_path / "responses.parquet"])
    hashed = check_inputs(consumer)  # as written: passes, and hands its hashes to the record
    assert hashed["adapter"][0]["sha256"] == sha256_path(adapter)

    adapter.write_bytes(b"another run's weights")
    with pytest.raises(ChangedInputError) as error:
        check_inputs(consumer)
    message = str(error.value)
    assert str(adapter) in message and "rule train_lora_tiny" in message
    assert "--forcerun" in message

    # Inputs without a record (hand-made data) or with an older record are not judged.
    (tmp_path / "data.csv").write_text("x")
    assert check_inputs(job(tmp_path, {"data": str(tmp_path / "data.csv")}, []))
