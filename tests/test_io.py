"""Atomic writes give the permissions a plain write would; reads name the file they failed on."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pandas as pd
import pytest

import dashrepro.io
from dashrepro.io import (
    UnreadableFileError,
    atomic_dir,
    current_umask,
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


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_the_umask_is_read_without_being_changed(umask, monkeypatch, mask):
    """Setting the umask to read it gives a file another thread creates meanwhile other
    permissions: it is read from the kernel's report, and os.umask is never called."""
    umask(mask)

    def forbidden(_):
        raise AssertionError("current_umask changed the umask")

    monkeypatch.setattr(dashrepro.io.os, "umask", forbidden)
    assert current_umask() == mask


def test_atomic_writes_reach_the_disk_before_and_after_the_rename(tmp_path, monkeypatch):
    """The file's data is flushed before it is renamed onto its name, and its folder after, so a
    node crash leaves the old file or the whole new one."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(dashrepro.io.os, "fsync", fsync)
    monkeypatch.setattr(dashrepro.io.os, "replace", replace)
    write_json(tmp_path / "a.json", {"a": 1})
    kinds = [kind for kind, _ in events]
    assert kinds == ["fsync", "replace", "fsync"], events
    assert ".a.json." in events[0][1] and events[1][1] == str(tmp_path / "a.json")
    assert events[2][1] == str(tmp_path)


def test_a_folder_is_replaced_with_no_moment_without_it(tmp_path, monkeypatch):
    """Replacing a folder swaps it with the new one in one step: at every removal or rename that
    atomic_dir makes, the folder is there and whole (old or new contents, never neither)."""
    folder = tmp_path / "state"
    with atomic_dir(folder) as tmp:
        (tmp / "version").write_text("old")
    seen = []
    real_rmtree, real_replace = dashrepro.io.shutil.rmtree, os.replace

    def look(what):
        seen.append((what, folder.is_dir() and (folder / "version").read_text()))

    def rmtree(path, *args, **kwargs):
        look("before rmtree")
        real_rmtree(path, *args, **kwargs)
        look("after rmtree")

    def replace(src, dst):
        look("before replace")
        real_replace(src, dst)
        look("after replace")

    monkeypatch.setattr(dashrepro.io.shutil, "rmtree", rmtree)
    monkeypatch.setattr(dashrepro.io.os, "replace", replace)
    with atomic_dir(folder) as tmp:
        (tmp / "version").write_text("new")
    assert seen and all(state in ("old", "new") for _, state in seen), seen
    assert (folder / "version").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["state"]  # the old one and tmp are gone


def test_where_folders_cannot_be_swapped_the_old_one_is_kept_aside_until_the_new_is_in(
    tmp_path, monkeypatch
):
    folder = tmp_path / "state"
    with atomic_dir(folder) as tmp:
        (tmp / "version").write_text("old")
    monkeypatch.setattr(dashrepro.io, "exchange_paths", lambda a, b: False)
    moves = []
    real_replace = os.replace

    def replace(src, dst):
        moves.append((Path(src).name, Path(dst).name, (Path(src) / "version").read_text()))
        real_replace(src, dst)

    monkeypatch.setattr(dashrepro.io.os, "replace", replace)
    with atomic_dir(folder) as tmp:
        (tmp / "version").write_text("new")
    assert moves[0][0] == "state" and moves[0][1].startswith(".state.old.") and moves[0][2] == "old"
    assert moves[1][1] == "state" and moves[1][2] == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["state"]


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


def test_a_jobs_seconds_come_from_its_benchmark_file(tmp_path):
    from dashrepro.io import read_job_seconds

    path = tmp_path / "job.tsv"
    path.write_text("s\th:m:s\tmax_rss\n12.5\t0:00:12\t100.0\n")
    assert read_job_seconds(path) == 12.5
