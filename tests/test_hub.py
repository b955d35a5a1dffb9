"""Hub access: a model is fetched once at a pinned commit, into a folder that is complete or absent."""

from __future__ import annotations

import json

import pytest

from dashrepro.hub import SNAPSHOT_RECORD, UnpinnedRevisionError, check_revision, download_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("revision", ["main", None, "v1.0", COMMIT[:12], COMMIT.upper()])
def test_an_unpinned_revision_stops_naming_the_key_and_how_to_pin(revision):
    with pytest.raises(UnpinnedRevisionError) as error:
        check_revision("Qwen/Qwen3-1.7B", revision, "scales.qwen3_1p7b.revision")
    message = str(error.value)
    assert message.startswith("scales.qwen3_1p7b.revision: model 'Qwen/Qwen3-1.7B'")
    assert "40-hex commit" in message and "model_info('Qwen/Qwen3-1.7B').sha" in message


def fake_hub(files: dict[str, bytes], calls: list):
    """huggingface_hub.snapshot_download's documented contract: the repository's files at
    ``revision`` matching ``allow_patterns`` land in ``local_dir`` (here from a dict)."""

    def snapshot_download(repo_id, *, revision, local_dir, allow_patterns, **_):
        calls.append({"repo_id": repo_id, "revision": revision, "allow_patterns": allow_patterns})
        for name, data in files.items():
            (local_dir / name).parent.mkdir(parents=True, exist_ok=True)
            (local_dir / name).write_bytes(data)
        (local_dir / ".cache").mkdir()
        (local_dir / ".cache" / "bookkeeping").write_text("x")
        return str(local_dir)

    return snapshot_download


def test_a_download_lands_whole_with_a_record_of_every_file(tmp_path, monkeypatch):
    import huggingface_hub

    from dashrepro.hub import source_fingerprint
    from dashrepro.io import sha256_file

    calls = []
    files = {"config.json": b"{}", "model.safetensors": b"weights", "tokenizer.json": b"{}"}
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_hub(files, calls))
    folder = tmp_path / "models" / "Qwen--Qwen3-1.7B" / COMMIT
    (folder.parent / f"{COMMIT}.partial").mkdir(parents=True)  # a killed earlier attempt
    record = download_model("Qwen/Qwen3-1.7B", COMMIT, folder, where="scales.x.revision")
    assert calls == [{"repo_id": "Qwen/Qwen3-1.7B", "revision": COMMIT,
                      "allow_patterns": calls[0]["allow_patterns"]}]  # fmt: skip
    assert "*.safetensors" in calls[0]["allow_patterns"]
    assert record["files"] == {n: sha256_file(folder / n) for n in files}
    assert json.loads((folder / SNAPSHOT_RECORD).read_text()) == record
    assert not (folder / ".cache").exists() and not folder.with_name(f"{COMMIT}.partial").exists()
    # A job fingerprints the snapshot by its record, not by hashing the weights again.
    assert source_fingerprint(folder) == f"snapshot:{sha256_file(folder / SNAPSHOT_RECORD)}"


def test_a_snapshot_without_weights_is_refused_and_leaves_no_folder(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_hub({"config.json": b"{}"}, []))
    folder = tmp_path / "m" / COMMIT
    with pytest.raises(FileNotFoundError, match="no .safetensors weights"):
        download_model("a/b", COMMIT, folder, where="scales.x.revision")
    assert not folder.exists()
