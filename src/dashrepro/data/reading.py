"""Reading sources: the raw rows of a local file or of a Hugging Face dataset.

``load_table(path_or_id, layout=..., revision=..., split=...)`` returns a source's rows in file
order after checking the layout's columns exist; cleaning is ``datasets.normalise``. Local files:
``.parquet``, ``.jsonl`` or ``.json`` (a list of objects), UTF-8, a bad byte or line named by
file and line. Hub datasets: ``owner/name`` at a pinned revision, through ``datasets`` when it
is installed. A string naming an existing file, or ending in a file suffix, is a local path
(docs/datasets.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from dashrepro.data.layouts import DataError, Layout, check_columns, get_layout
from dashrepro.io import UnreadableFileError, read_parquet

SUPPORTED_SUFFIXES = (".parquet", ".jsonl", ".json")
# Suffixes that mark a string as a file path rather than a hub id, even when the file is absent.
_FILE_LIKE_SUFFIXES = SUPPORTED_SUFFIXES + (".csv", ".tsv", ".txt", ".arrow", ".gz", ".zst")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _decoded_lines(path: Path):
    """``(line_number, text)`` of a UTF-8 file; a byte that is not UTF-8 names file and line."""
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            try:
                yield line_number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"{path}: line {line_number} is not UTF-8 text "
                    f"(byte 0x{raw[exc.start]:02x} at byte {exc.start + 1} of the line)"
                ) from None


def _read_jsonl(path: Path) -> pd.DataFrame:
    records = []
    for line_number, line in _decoded_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{path}: line {line_number} is not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(record, dict):
            raise DataError(
                f"{path}: line {line_number} holds a JSON {type(record).__name__}, "
                "expected an object"
            )
        records.append(record)
    return _frame_from_records(records)


def _read_json(path: Path) -> pd.DataFrame:
    text = "".join(line for _, line in _decoded_lines(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno} ({exc.msg})"
        ) from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of objects, found a {type(data).__name__}")
    for position, record in enumerate(data):
        if not isinstance(record, dict):
            raise DataError(
                f"{path}: row {position} holds a JSON {type(record).__name__}, expected an object"
            )
    return _frame_from_records(data)


def _frame_from_records(records: list[dict]) -> pd.DataFrame:
    # dtype=object keeps every value as parsed (an int stays an int even if another row lacks it).
    if not records:
        return pd.DataFrame()
    return pd.DataFrame(records, dtype=object)


def _read_parquet(path: Path) -> pd.DataFrame:
    """``io.read_parquet`` (its message names the file), as the data stage's ``DataError``."""
    try:
        return read_parquet(path)
    except UnreadableFileError as exc:
        raise DataError(str(exc)) from exc.__cause__


def _read_local(path: Path) -> pd.DataFrame:
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise DataError(
            f"{path}: unsupported file type {suffix or '(no extension)'!r}; "
            f"expected one of {', '.join(SUPPORTED_SUFFIXES)}"
        )
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if suffix == ".parquet":
        return _read_parquet(path)
    if suffix == ".jsonl":
        return _read_jsonl(path)
    return _read_json(path)


def _read_hub(repo_id: str, revision: str | None, split: str) -> pd.DataFrame:
    try:
        import datasets  # optional: imported only for hub loads
    except ImportError:
        datasets = None
    # Run as a script, the package's own datasets.py could be found as "datasets": require the
    # real API.
    if datasets is None or not hasattr(datasets, "load_dataset"):
        raise DataError(
            f"cannot load Hugging Face dataset {repo_id!r} (revision {revision}, split {split!r}): "
            "the `datasets` package is not installed; install it or pass a local file "
            "(.parquet, .jsonl, .json) instead"
        ) from None
    try:
        dataset = datasets.load_dataset(repo_id, revision=revision, split=split)
    except Exception as exc:  # network, auth, missing revision or split
        raise DataError(
            f"cannot load Hugging Face dataset {repo_id!r} (revision {revision}, split {split!r}): "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return dataset.to_pandas()


def _is_hub_id(path_or_id: str) -> bool:
    if Path(path_or_id).exists():
        return False
    if path_or_id.lower().endswith(_FILE_LIKE_SUFFIXES):
        return False
    return bool(_HUB_ID.match(path_or_id))


def load_table(
    path_or_id: str | Path,
    *,
    layout: str | Layout,
    revision: str | None = None,
    split: str = "train",
) -> pd.DataFrame:
    """The raw rows of a local file or a hub dataset, after checking the layout's columns exist.

    A string that names an existing file, or ends in a file suffix, is a local path (``revision``
    and ``split`` are then ignored); an ``owner/name`` string otherwise is a hub id.
    """
    layout = get_layout(layout)
    text = str(path_or_id)
    if isinstance(path_or_id, Path) or not _is_hub_id(text):
        path = Path(text)
        frame = _read_local(path)
        where = str(path)
    else:
        frame = _read_hub(text, revision, split)
        where = f"Hugging Face dataset {text!r} (revision {revision}, split {split!r})"
    check_columns(frame, layout, where)
    return frame.reset_index(drop=True)
