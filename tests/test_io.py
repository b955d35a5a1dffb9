"""Atomic writes give the permissions a plain write would; reads name the file they failed on."""

from __future__ import annotations

import os
import stat

import pandas as pd
import pytest

from dashrepro.io import (
    UnreadableFileError,
    atomic_dir,
    read_json,
    read_parquet,
    read_parquet_record,
    write_json,
    write_parquet,
    write_text,
)


@pytest.fixture
def umask():
    """Set a umask for the test and put the previous one back."""
    previous = os.umask(0o022)
    os.umask(previous)

    def set_mask(mask: int) -> None:
        os.umask(mask)

    yield set_mask
    os.umask(previous)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_atomic_writes_honour_the_umask(tmp_path, umask, mask):
    umask(mask)
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    write_text(tmp_path / "a.txt", "x")
    write_json(tmp_path / "a.json", {"a": 1})
    write_parquet(tmp_path / "a.parquet", pd.DataFrame({"a": [1]}))
    for name in ("a.txt", "a.json", "a.parquet"):
        assert mode(tmp_path / name) == mode(plain) == 0o666 & ~mask, name
    with atomic_dir(tmp_path / "folder") as tmp:
        (tmp / "inside.txt").write_text("x")
        (tmp / "owner_only.bin").write_bytes(b"x")  # as safetensors leaves its files
        (tmp / "owner_only.bin").chmod(0o600)
    for name in ("inside.txt", "owner_only.bin"):
        assert mode(tmp_path / "folder" / name) == 0o666 & ~mask, name
    plain_dir = tmp_path / "plain_dir"
    plain_dir.mkdir()
    assert mode(tmp_path / "folder") == mode(plain_dir) == 0o777 & ~mask


def test_reads_name_the_file(tmp_path):
    garbage = tmp_path / "samples.parquet"
    garbage.write_bytes(b"not a parquet file at all")
    with pytest.raises(UnreadableFileError, match="samples.parquet: cannot read as parquet"):
        read_parquet(garbage)
    with pytest.raises(UnreadableFileError, match="missing.parquet: no such file"):
        read_parquet(tmp_path / "missing.parquet")
    bad_json = tmp_path / "summary.json"
    bad_json.write_text('{"a": 1,\n "b": }')
    with pytest.raises(UnreadableFileError, match=r"summary.json: not valid JSON at line 2"):
        read_json(bad_json)
    bad_json.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(UnreadableFileError, match="summary.json: not UTF-8"):
        read_json(bad_json)


def test_parquet_record_round_trips(tmp_path):
    path = tmp_path / "shard.parquet"
    write_parquet(path, pd.DataFrame({"a": [1, 2]}), record={"adapter": "abc", "k": 2})
    assert read_parquet_record(path) == {"adapter": "abc", "k": 2}
    assert list(read_parquet(path)["a"]) == [1, 2]
    write_parquet(path, pd.DataFrame({"a": [1]}))
    assert read_parquet_record(path) is None


def test_an_emptied_tokenizer_file_is_named_before_transformers_reads_it(tmp_path, tiny_setup):
    """The reliability probe emptied tokenizer.json in a base model folder: every job reading it
    failed with a bare JSONDecodeError naming no file."""
    import shutil

    from dashrepro.io import UnreadableFileError, load_tokenizer

    source, _, tokenizer = tiny_setup
    folder = tmp_path / "base"
    shutil.copytree(source, folder)
    assert load_tokenizer(folder).get_vocab() == tokenizer.get_vocab()
    (folder / "tokenizer.json").write_bytes(b"")
    with pytest.raises(
        UnreadableFileError, match=r"base: empty tokenizer file\(s\) tokenizer.json"
    ):
        load_tokenizer(folder)
    (folder / "tokenizer.json").write_text("{not json")
    with pytest.raises(UnreadableFileError, match="base: cannot load its tokenizer"):
        load_tokenizer(folder)
