"""Tests for ``dashrepro.provenance.model_files`` and the ``read_files`` of a job's record: the
files loading a model reads beside its declared input are listed, hashed and recorded."""

from __future__ import annotations

from dashrepro.provenance.model_files import model_folder_files


def _folder(path, names):
    path.mkdir(parents=True)
    for name in names:
        (path / name).write_text(name)
    return path


def test_the_files_beside_a_declared_model_file_are_listed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # inputs are named relative to the workflow's directory
    _folder(tmp_path / "base", ["model.safetensors", "config.json", "generation_config.json",
                                "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                                "model.safetensors.provenance.json", ".gitattributes"])  # fmt: skip
    _folder(tmp_path / "ckpt", ["adapter_model.safetensors", "adapter_config.json", "README.md"])
    inputs = {"base_model": ["base/model.safetensors"],
              "adapter": ["ckpt/adapter_model.safetensors"],
              "adapter_config": ["ckpt/adapter_config.json"],
              "benchmarks": ["b.parquet"]}  # fmt: skip
    assert model_folder_files(inputs) == {
        # Weights, records, hidden files and the adapter's model card are not read by loading;
        # the adapter's config is a declared input of its own.
        "base_model_files": [
            "base/chat_template.jinja",
            "base/config.json",
            "base/generation_config.json",
            "base/tokenizer.json",
            "base/tokenizer_config.json",
        ],  # fmt: skip
    }
    # Without the declared config, the adapter's folder gives it.
    del inputs["adapter_config"]
    assert model_folder_files(inputs)["adapter_files"] == ["ckpt/adapter_config.json"]
    # A local model folder is hashed whole as the input; a hub id is no file: nothing beside.
    assert model_folder_files({"base_model": ["base"]}) == {}
    assert model_folder_files({"base_model": ["Qwen/Qwen3-1.7B"]}) == {}


def job(inputs: dict, outputs: list):
    """A stand-in for the ``snakemake`` object a rule script receives."""
    from types import SimpleNamespace

    class Named(list):
        def __init__(self, mapping):
            super().__init__(mapping.values())
            self._mapping = mapping

        def items(self):
            return self._mapping.items()

    return SimpleNamespace(rule="generate_checkpoint_responses", input=Named(inputs),
                           output=list(outputs), params=Named({}), wildcards=Named({}),
                           threads=1)  # fmt: skip


def test_a_jobs_record_hashes_the_files_read_beside_its_model(tmp_path, monkeypatch):
    from dashrepro.io import sha256_path
    from dashrepro.provenance.job import job_record

    monkeypatch.chdir(tmp_path)
    _folder(tmp_path / "base", ["model.safetensors", "config.json", "tokenizer_config.json"])
    record = job_record(job({"base_model": "base/model.safetensors"}, ["out.parquet"]), "t0")
    assert record["inputs"]["base_model"][0]["path"] == "base/model.safetensors"
    assert record["read_files"] == {
        "base_model_files": [
            {"path": "base/config.json", "sha256": sha256_path(tmp_path / "base/config.json")},
            {"path": "base/tokenizer_config.json",
             "sha256": sha256_path(tmp_path / "base/tokenizer_config.json")},
        ]
    }  # fmt: skip
