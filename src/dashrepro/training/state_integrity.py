"""What a training state's folder holds, and whether it is intact: the files, their record, the checks.

``save_training_state`` (``checkpointing``) writes one folder per step (``state_dir``)::

    step-000040/
      adapter_config.json, adapter_model.safetensors   the PEFT adapter
      optimizer.pt, scheduler.pt, rng_state.pt         torch.save (weights_only loadable)
      trainer_state.json                               step, data cursor, run config and
                                                       fingerprint, versions, and ``files``: the
                                                       size and sha256 of every file a resume
                                                       reads, then the record's own sha256

``state_problems`` lists, one line per file, what no longer matches that record (a flipped bit,
a truncated or missing file); ``companion_folder_problems`` does the same for a folder saved
beside a state (a DeepSpeed engine's). Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dashrepro.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from dashrepro.io import sha256_file

OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
RNG_FILE = "rng_state.pt"
STATE_FILE = "trainer_state.json"
#: A state folder's name (``state_dir``); atomic_dir's hidden temporary folders never match.
STEP_DIR = re.compile(r"step-(\d+)")


def state_dir(root: str | os.PathLike, step: int) -> Path:
    """The folder of the state after ``step`` optimisation steps: ``root/step-{step:06d}``."""
    return Path(root) / f"step-{step:06d}"


def adapter_folder(folder: Path, adapter_name: str) -> Path:
    # peft's save_pretrained writes the "default" adapter at the top and any other under its name.
    return folder if adapter_name == "default" else folder / adapter_name


def needed_files(folder: Path, adapter_name: str) -> list[Path]:
    """Every file a resume reads (trainer_state.json aside)."""
    adapter_dir = adapter_folder(folder, adapter_name)
    return [
        adapter_dir / ADAPTER_CONFIG,
        adapter_dir / ADAPTER_WEIGHTS,
        folder / OPTIMIZER_FILE,
        folder / SCHEDULER_FILE,
        folder / RNG_FILE,
    ]


def file_record(folder: Path, adapter_name: str) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "sha256"}}`` of every file a resume reads."""
    return {
        path.relative_to(folder).as_posix(): {
            "bytes": path.stat().st_size,
            "sha256": sha256_file(path),
        }
        for path in needed_files(folder, adapter_name)
    }


def record_digest(record: Mapping) -> str:
    """sha256 of the record without its own ``record_sha256``, in canonical JSON (the record is
    JSON already, so the value survives the write and the read unchanged)."""
    body = {k: v for k, v in record.items() if k != "record_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def read_state_record(ckpt_dir: Path) -> dict[str, Any]:
    record = json.loads((ckpt_dir / STATE_FILE).read_text())
    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
        raise ValueError(f"{ckpt_dir / STATE_FILE}: not a training-state record")
    return record


def state_problems(ckpt_dir: str | os.PathLike) -> list[str]:
    """What makes the state in ``ckpt_dir`` untrustworthy for a resume; empty when nothing does.

    One line per problem, each naming the file: an unreadable record or one whose own sha256
    no longer matches, a record naming another step than the folder's, a needed file that is
    missing, or one whose size or sha256 differs from the record (the size is compared first,
    so a truncated file reads ``optimizer.pt: 1234 bytes, its record says 5678``). A state
    written before records had file hashes is checked for missing files only (see
    ``has_file_hashes``). Whether it was written under the current config is another question
    (``state_config_differences``).
    """
    ckpt_dir = Path(ckpt_dir)
    record_path = ckpt_dir / STATE_FILE
    try:
        record = read_state_record(ckpt_dir)
    except (OSError, ValueError) as exc:  # json.JSONDecodeError, UnicodeDecodeError included
        return [f"{record_path}: cannot be read ({type(exc).__name__}: {exc})"]
    problems = []
    if "record_sha256" in record and record["record_sha256"] != record_digest(record):
        problems.append(f"{record_path}: does not match its own record_sha256 (damaged or edited)")
    match = STEP_DIR.fullmatch(ckpt_dir.name)
    if match and int(match.group(1)) != record["step"]:
        problems.append(f"{record_path}: records step {record['step']}, the folder's is {match[1]}")
    files = record.get("files")
    if files is not None and not isinstance(files, dict):
        problems.append(f"{record_path}: its files entry is not a mapping")
        files = {}
    for path in needed_files(ckpt_dir, str(record.get("adapter_name", "default"))):
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        if files is None:  # written by code that recorded no hashes
            continue
        problem = _file_problem(path, files.get(path.relative_to(ckpt_dir).as_posix()))
        if problem:
            problems.append(f"{path}: {problem}")
    return problems


def folder_file_record(folder: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "sha256"}}`` of every file under ``folder``: how a state
    records a folder saved beside it (DeepSpeed's engine state, ``extra["deepspeed_files"]``),
    which ``companion_folder_problems`` verifies on resume."""
    folder = Path(folder)
    return {
        path.relative_to(folder).as_posix(): {
            "bytes": path.stat().st_size,
            "sha256": sha256_file(path),
        }
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def companion_folder_problems(
    ckpt_dir: str | os.PathLike, key: str, folder: str | os.PathLike
) -> list[str]:
    """What no longer matches between ``folder`` and the file record the state in ``ckpt_dir``
    holds under ``extra[key]`` (``folder_file_record``), one line per file, each naming it: a
    missing file, one whose size or sha256 differs, one the record does not know. Empty when the
    state's record has no such entry (written before these records: checked for presence only)
    or cannot be read (``state_problems`` reports that)."""
    folder = Path(folder)
    try:
        expected = read_state_record(Path(ckpt_dir)).get("extra", {}).get(key)
    except (OSError, ValueError):
        return []
    if not isinstance(expected, dict):
        return []
    problems = []
    for relative, entry in sorted(expected.items()):
        path = folder / relative
        problem = _file_problem(path, entry) if path.is_file() else "missing"
        if problem:
            problems.append(f"{path}: {problem}")
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    for relative in sorted(present - set(expected)):
        problems.append(f"{folder / relative}: not in the state's record")
    return problems


def has_file_hashes(ckpt_dir: str | os.PathLike) -> bool:
    """Whether the state's record holds file hashes (older states' do not: unverifiable)."""
    try:
        return "files" in read_state_record(Path(ckpt_dir))
    except (OSError, ValueError):
        return False


def _file_problem(path: Path, expected: Any) -> str | None:
    if not isinstance(expected, dict):
        return "not in the state's record"
    size = path.stat().st_size
    if size != expected.get("bytes"):
        return f"{size} bytes, its record says {expected.get('bytes')}"
    digest = sha256_file(path)
    if digest != expected.get("sha256"):
        return f"sha256 {digest[:16]}..., its record says {str(expected.get('sha256'))[:16]}..."
    return None
