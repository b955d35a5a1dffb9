"""Tests for ``dashrepro.provenance.job``: a job's record holds its outputs' sha256, and a changed
input stops the next job."""

from __future__ import annotations

import pytest

from dashrepro.provenance import record_path


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
