"""``--check`` for the studies' generated files: the committed record and page against what their
inputs give now, or, where the inputs are absent, the page against the committed record.

Exit statuses, shared by every study command: 0 the committed files are what the inputs (or the
record) give; 1 they differ (each file named, with the inputs whose sha256 moved); 3 nothing can
be compared (a missing or malformed record, no inputs).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

from dashrepro.io import atomic_path, write_text

SAME, DIFFERENT, CANNOT_CHECK = 0, 1, 3


def _diff(path: Path, text: str | bytes) -> list[str]:
    if isinstance(text, bytes):
        return [f"  {path}: {len(text):,} bytes now, other bytes committed"]
    old = path.read_text().splitlines() if path.is_file() else []
    lines = list(difflib.unified_diff(old, text.splitlines(), str(path), "now", lineterm="", n=0))
    return lines[:12] + ([f"... {len(lines) - 12} more lines"] if len(lines) > 12 else [])


def input_differences(committed: Mapping[str, str], current: Mapping[str, str]) -> list[str]:
    """The inputs whose sha256 differs between two records, or that one of them lacks."""
    lines = []
    for name in sorted(set(committed) | set(current)):
        if name not in current:
            lines.append(f"  {name}: in the committed record, not read now")
        elif name not in committed:
            lines.append(f"  {name}: read now, not in the committed record")
        elif committed[name] != current[name]:
            lines.append(f"  {name}: sha256 {committed[name][:12]}... now {current[name][:12]}...")
    return lines


def _write(path: Path, content: str | bytes) -> None:
    if isinstance(content, str):
        write_text(path, content)
        return
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(content)


def _same(path: Path, content: str | bytes) -> bool:
    data = content.encode() if isinstance(content, str) else content
    return path.is_file() and path.read_bytes() == data


def check_or_write(files: Mapping[Path, str | bytes], check: bool) -> int:
    """Write ``files`` (path -> text, or bytes for a figure) atomically, or with ``check``
    compare each with the committed one and name those that differ, with the record's moved
    inputs."""
    if not check:
        for path, text in files.items():
            _write(path, text)
            print(f"wrote {path}")
        return SAME
    status = SAME
    for path, text in files.items():
        if _same(path, text):
            print(f"{path}: as committed")
            continue
        status = DIFFERENT
        print(f"{path}: differs from what its inputs give now" if path.is_file()
              else f"{path}: missing")  # fmt: skip
        if path.suffix == ".json" and path.is_file():
            try:
                moved = input_differences(json.loads(path.read_text()).get("inputs", {}),
                                          json.loads(text).get("inputs", {}))  # fmt: skip
            except json.JSONDecodeError:
                moved = [f"  {path}: not JSON"]
            print("\n".join(moved) if moved else "  every input's sha256 as committed")
        print("\n".join(_diff(path, text)))
    return status


def check_committed_only(record_path: Path, derive: Callable[[dict], Mapping[Path, str | bytes]],
                         why: Exception) -> int:  # fmt: skip
    """The inputs are absent (``why``): check only that the files ``derive`` makes from a record
    (path -> text or bytes) are what the committed record gives."""
    print(f"inputs absent ({why}); checking the committed files against {record_path} only")
    try:
        record = json.loads(record_path.read_text())
    except FileNotFoundError:
        print(f"error: {record_path}: no committed record")
        return CANNOT_CHECK
    except json.JSONDecodeError as error:
        print(f"error: {record_path}: not JSON ({error})")
        return CANNOT_CHECK
    try:
        files = derive(record)
    except (KeyError, TypeError, ValueError) as error:
        print(f"error: {record_path}: malformed record ({type(error).__name__}: {error})")
        return CANNOT_CHECK
    return check_or_write(files, check=True)


def write_or_check(record_path: Path, compute: Callable[[], dict],
                   derive: Callable[[dict], Mapping[Path, str | bytes]], check: bool) -> int:  # fmt: skip
    """A study command's whole run: ``compute`` the record from its inputs, then write it and the
    files ``derive`` makes from it, or ``check`` them; inputs that cannot be read are a clear
    error (``CANNOT_CHECK``), or with ``check`` a check against the committed record alone."""
    try:
        record = compute()
    except (FileNotFoundError, ValueError, KeyError, json.JSONDecodeError) as error:
        if check:
            return check_committed_only(record_path, derive, error)
        print(f"error: {error}")
        return CANNOT_CHECK
    text = json.dumps(record, indent=2, default=float) + "\n"
    return check_or_write({record_path: text, **derive(record)}, check)
