"""Atomic file writes, reads that name their file, and hashing.

Every stage writes its outputs through these helpers: the data goes to a temporary file in the
target folder first and is renamed into place, so a job killed mid-write never leaves a file
that looks complete to Snakemake or to the next stage. The renamed file gets the permissions a
plain ``open(path, "w")`` would give it (``0o666`` less the umask; folders ``0o777`` less the
umask), not the owner-only mode of the temporary file, so collaborators on a shared project
folder can read the results.

Reads go through :func:`read_json` and :func:`read_parquet`, which turn any failure to read
(missing, truncated, not the format, not UTF-8) into :class:`UnreadableFileError` naming the
file, so a rule's error says which file to look at.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd


class UnreadableFileError(ValueError):
    """A file that exists in the pipeline's layout but cannot be read; the message names it."""


_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's umask, read without changing it (Linux reports it in /proc/self/status;
    setting it and putting it back, the only way elsewhere before Python 3.13, gives a file
    another thread creates meanwhile other permissions)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename into it) to disk. Some network filesystems refuse to
    fsync folders: that is ignored (the rename stays atomic for crashes of the process)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(folder: str | os.PathLike) -> None:
    """Flush every file and folder under ``folder`` to disk, so a node crash cannot leave empty
    files behind a rename that did reach the disk."""
    folder = Path(folder)
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    for path in [folder, *(p for p in folder.rglob("*") if p.is_dir() and not p.is_symlink())]:
        fsync_dir(path)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def _give_plain_permissions(path: Path, directory: bool) -> None:
    os.chmod(path, (0o777 if directory else 0o666) & ~current_umask())


def _give_plain_permissions_tree(folder: Path) -> None:
    """Plain permissions for a folder and everything in it: libraries that write through their
    own temporary files (safetensors) leave them owner-only too."""
    mask = current_umask()
    for root, dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666 & ~mask)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o777 & ~mask)
    os.chmod(folder, 0o777 & ~mask)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success. The
    data is on disk before the rename and the rename before the return (a node that crashes
    then holds the old file or the whole new one, never an empty one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates the file 0600; a plain write would have honoured the umask.
        _give_plain_permissions(tmp_path, directory=False)
        _fsync_file(tmp_path)
        os.replace(tmp_path, path)
        fsync_dir(path.parent)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


#: renameat2's flag that swaps two paths in one step (Linux 3.15+, glibc 2.28+).
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange_paths(first: Path, second: Path) -> bool:
    """Swap two existing paths atomically (Linux's renameat2 with RENAME_EXCHANGE); False where
    the system or the filesystem cannot, and nothing was changed."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]  # fmt: skip
    result = renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second),
                       _RENAME_EXCHANGE)  # fmt: skip
    return result == 0


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; it replaces ``path`` only on success, flushed to
    disk first. An existing ``path`` is swapped with it in one step where the system can (no
    moment without the folder); elsewhere the old folder is renamed aside before the new one is
    renamed in, and removed after (a crash between leaves it beside, never lost)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old = None
    try:
        yield tmp
        _give_plain_permissions_tree(tmp)  # mkdtemp creates it 0700; safetensors files 0600
        fsync_tree(tmp)
        if path.exists() and exchange_paths(tmp, path):
            old = tmp  # the swap put the old folder where the new one was
        else:
            if path.exists():
                old = path.with_name(f".{path.name}.old.{tmp.name}")
                os.replace(path, old)
            os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        for leftover in (tmp, old):
            if leftover is not None and leftover.exists():
                shutil.rmtree(leftover)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    """The parsed JSON of ``path``; any failure names the file (and the line for bad JSON)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFileError(
            f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None
    except OSError as exc:
        raise UnreadableFileError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnreadableFileError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"
        ) from None


#: The parquet schema-metadata key under which :func:`write_parquet` stores a record.
PARQUET_RECORD_KEY = b"dashrepro"


def write_parquet(
    path: str | os.PathLike, frame: pd.DataFrame, record: Mapping[str, Any] | None = None
) -> None:
    """Write ``frame`` atomically; ``record`` (JSON) goes into the file's schema metadata."""
    with atomic_path(path) as tmp:
        if record is None:
            frame.to_parquet(tmp, index=False)
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pandas(frame, preserve_index=False)
        metadata = dict(table.schema.metadata or {})
        metadata[PARQUET_RECORD_KEY] = json.dumps(dict(record), sort_keys=True).encode()
        pq.write_table(table.replace_schema_metadata(metadata), tmp)


def read_parquet(path: str | os.PathLike, columns: list[str] | None = None) -> pd.DataFrame:
    """``pd.read_parquet`` whose failures (missing, truncated, garbage) name the file."""
    try:
        return pd.read_parquet(path, columns=columns)
    except FileNotFoundError:
        raise UnreadableFileError(f"{path}: no such file") from None
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise UnreadableFileError(
            f"{path}: cannot read as parquet ({type(exc).__name__}: {exc})"
        ) from exc


def read_csv(path: str | os.PathLike, required: Sequence[str] = ()) -> pd.DataFrame:
    """``pd.read_csv`` (strings kept as written) whose failures, and missing ``required``
    columns, name the file."""
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except FileNotFoundError:
        raise UnreadableFileError(f"{path}: no such file") from None
    except (UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise UnreadableFileError(f"{path}: cannot read as CSV ({exc})") from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise UnreadableFileError(f"{path}: missing columns {missing}")
    return frame


#: The files a Hugging Face tokenizer folder may hold; an empty one is a damaged folder.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json", "merges.txt", "chat_template.jinja")  # fmt: skip


def read_job_seconds(path: str | os.PathLike) -> float:
    """A job's wall seconds from its Snakemake ``benchmark:`` file (a TSV; column ``s``)."""
    with Path(path).open(newline="") as handle:
        return float(next(csv.DictReader(handle, delimiter="\t"))["s"])


def load_tokenizer(source: str | os.PathLike):
    """``AutoTokenizer.from_pretrained(source)`` whose failures name the folder: an empty
    tokenizer file there (which transformers reports as a bare JSON error) is named before
    loading, and any other failure is re-raised with the folder in the message."""
    from transformers import AutoTokenizer

    folder = Path(source)
    if folder.is_dir():
        empty = [name for name in TOKENIZER_FILES
                 if (folder / name).is_file() and (folder / name).stat().st_size == 0]  # fmt: skip
        if empty:
            raise UnreadableFileError(
                f"{folder}: empty tokenizer file(s) {', '.join(empty)}; make the folder again "
                "(for a base model: snakemake --forcerun on the rule that wrote it)"
            )
    try:
        return AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError) as exc:
        raise UnreadableFileError(
            f"{source}: cannot load its tokenizer ({type(exc).__name__}: {exc})"
        ) from exc


def read_parquet_columns(path: str | os.PathLike) -> list[str]:
    """The column names of a parquet file (its schema only), or an error naming the file."""
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except FileNotFoundError:
        raise UnreadableFileError(f"{path}: no such file") from None
    except Exception as exc:
        raise UnreadableFileError(
            f"{path}: cannot read as parquet ({type(exc).__name__}: {exc})"
        ) from exc


def read_parquet_record(path: str | os.PathLike) -> dict | None:
    """The record :func:`write_parquet` stored in ``path`` (None if it has none)."""
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_schema(path).metadata or {}
    except Exception as exc:
        raise UnreadableFileError(
            f"{path}: cannot read as parquet ({type(exc).__name__}: {exc})"
        ) from exc
    raw = metadata.get(PARQUET_RECORD_KEY)
    return None if raw is None else json.loads(raw)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def with_marked_block(text: str, begin: str, end: str, block: str, where: str) -> str:
    """``text`` (the page ``where``) with what lies between the line that starts with ``begin``
    and the ``end`` marker replaced by ``block``: a generated part of a hand-written page."""
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{where} has no {begin} ... {end} markers")
    head = text[: text.index("\n", start) + 1]
    return f"{head}{block}\n{text[stop:]}"


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _is_provenance_record(path: Path) -> bool:
    return path.name == "provenance.json" or path.name.endswith(".provenance.json")


def sha256_path(path: str | os.PathLike) -> str:
    """sha256 of a file, or of a folder's files (relative names and contents, sorted).

    A folder's provenance records are left out: they describe its contents (with times of day)
    and are not part of them, so a folder rewritten with the same files hashes the same.
    """
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    digest = hashlib.sha256()
    files = (p for p in path.rglob("*") if p.is_file() and not _is_provenance_record(p))
    for child in sorted(files):
        digest.update(str(child.relative_to(path)).encode())
        digest.update(sha256_file(child).encode())
    return digest.hexdigest()


def save_figure(fig, paths: Mapping[str, str | os.PathLike], dpi: int = 150) -> None:
    """``fig`` in each format of ``paths`` (``{"png": ..., "pdf": ...}``, in that order),
    atomically; the PDF without a creation date, so the same numbers draw the same bytes on
    any day."""
    for fmt, path in paths.items():
        metadata = {"CreationDate": None} if fmt == "pdf" else None
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi, metadata=metadata)
