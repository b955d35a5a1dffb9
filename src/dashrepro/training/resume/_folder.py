"""One training state's folder: its layout and format version, written, checked once, loaded.

    step-000040/                                     (``state_dir``; ``FORMAT_VERSION`` 1)
      adapter_config.json, adapter_model.safetensors   the PEFT adapter
      optimizer.pt, scheduler.pt, rng_state.pt         torch.save, weights_only loadable
      trainer_state.json    written last: step, run config and fingerprint, versions, ``extra``,
                            and ``files``, the size and sha256 of every file a resume reads;
                            then the record's own sha256

``write_state_folder`` saves it through ``io.atomic_dir``. ``check_state_folder`` reads the record
once and hashes each file once (``StateCheck``: the problems, each naming its file);
``config_differences`` is a resume's one comparison with the current config;
``load_state_folder`` restores a checked state into the live objects without hashing again. The
state resumes bit for bit on the same hardware and versions; nothing but tensors, numbers,
strings, lists, tuples and dicts is pickled.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from peft import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file

from dashrepro.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS, AdapterFileError, save_adapter
from dashrepro.io import atomic_dir, sha256_file
from dashrepro.training.resume._fingerprint import (
    config_diff,
    config_fingerprint,
    normalised_config,
)
from dashrepro.training.resume._rng import capture_rng, restore_rng

_LOG = logging.getLogger(__name__)

#: Version of the folder's layout; a state of any other is not resumed (``config_differences``).
FORMAT_VERSION = 1
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
RNG_FILE = "rng_state.pt"
STATE_FILE = "trainer_state.json"
#: A state folder's name (``state_dir``); atomic_dir's hidden temporary folders never match.
STEP_DIR = re.compile(r"step-(\d+)")


class StateFileError(ValueError):
    """A training state's file is damaged: it does not match the state's record or does not
    load. The message names the file."""


# ------------------------------------------------------------------------------------------------
# Layout


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


def is_resume_point(folder: Path) -> bool:
    """Whether ``folder`` is a state a resume may take, if it checks out: the one definition of
    a complete state. Its record, written last, is there (no record: a copy in progress), and
    it was not pruned (pruning removes its optimizer and scheduler files). Nothing is read."""
    return (folder / STATE_FILE).is_file() and any(
        (folder / name).exists() for name in (OPTIMIZER_FILE, SCHEDULER_FILE)
    )


# ------------------------------------------------------------------------------------------------
# The record and its file hashes


def folder_file_record(folder: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "sha256"}}`` of every file under ``folder``: how a state
    records a folder saved beside it (DeepSpeed's engine state, in its ``extra``), which
    ``companion_problems`` checks on resume."""
    folder = Path(folder)
    return {
        path.relative_to(folder).as_posix(): _file_entry(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def record_digest(record: Mapping) -> str:
    """sha256 of the record without its own ``record_sha256``, in canonical JSON (the record is
    JSON already, so the value survives the write and the read unchanged)."""
    body = {k: v for k, v in record.items() if k != "record_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def read_record(folder: Path) -> dict[str, Any]:
    """The state's trainer_state.json; ``ValueError`` (or ``OSError``) when it is not one."""
    record = json.loads((folder / STATE_FILE).read_text())
    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
        raise ValueError(f"{folder / STATE_FILE}: not a training-state record")
    return record


def _file_entry(path: Path) -> dict[str, Any]:
    return {"bytes": path.stat().st_size, "sha256": sha256_file(path)}


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


# ------------------------------------------------------------------------------------------------
# Check


@dataclass(frozen=True)
class StateCheck:
    """A state folder as ``check_state_folder`` found it: its record, read once, and what no
    longer matches it, each file hashed once."""

    folder: Path
    #: The parsed trainer_state.json (None when it cannot be read).
    record: dict[str, Any] | None
    #: One line per problem, each naming the file; empty when the state is intact.
    problems: tuple[str, ...]
    #: How many files matched their recorded sha256 (0 for a state written without hashes).
    files_verified: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def step(self) -> int:
        if self.record is None:
            raise ValueError(f"{self.folder / STATE_FILE}: cannot be read")
        return int(self.record["step"])

    @property
    def hashed(self) -> bool:
        """Whether the record holds file hashes (those of older code do not: unverified)."""
        return self.record is not None and "files" in self.record

    @property
    def adapter_name(self) -> str:
        return str((self.record or {}).get("adapter_name", "default"))

    def with_problems(self, more: list[str]) -> StateCheck:
        """This check with a caller's own problems added (DeepSpeed's engine folder)."""
        return StateCheck(self.folder, self.record, (*self.problems, *more), self.files_verified)


def check_state_folder(folder: str | os.PathLike) -> StateCheck:
    """The state in ``folder``, checked once: an unreadable record or one whose own sha256 no
    longer matches, a record naming another step than the folder's, a needed file that is
    missing, or one whose size or sha256 differs from the record (the size is compared first, so
    a truncated file reads ``optimizer.pt: 1234 bytes, its record says 5678``). A state written
    before records had file hashes is checked for missing files only. Whether it was written
    under the current config is ``config_differences``'s question."""
    folder = Path(folder)
    record_path = folder / STATE_FILE
    try:
        record = read_record(folder)
    except (OSError, ValueError) as exc:  # json.JSONDecodeError, UnicodeDecodeError included
        problem = f"{record_path}: cannot be read ({type(exc).__name__}: {exc})"
        return StateCheck(folder, None, (problem,))
    problems = []
    if "record_sha256" in record and record["record_sha256"] != record_digest(record):
        problems.append(f"{record_path}: does not match its own record_sha256 (damaged or edited)")
    match = STEP_DIR.fullmatch(folder.name)
    if match and int(match.group(1)) != record["step"]:
        problems.append(f"{record_path}: records step {record['step']}, the folder's is {match[1]}")
    files = record.get("files")
    if files is not None and not isinstance(files, dict):
        problems.append(f"{record_path}: its files entry is not a mapping")
        files = {}
    verified = 0
    for path in needed_files(folder, str(record.get("adapter_name", "default"))):
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        if files is None:  # written by code that recorded no hashes
            continue
        problem = _file_problem(path, files.get(path.relative_to(folder).as_posix()))
        if problem:
            problems.append(f"{path}: {problem}")
        else:
            verified += 1
    return StateCheck(folder, record, tuple(problems), verified)


def companion_problems(expected: Any, folder: str | os.PathLike) -> list[str]:
    """What no longer matches between ``folder`` and ``expected``, the file record a state holds
    of it (``folder_file_record``), one line per file, each naming it: a missing file, one whose
    size or sha256 differs, one the record does not know. Empty when there is no such record (a
    state written before these records: the caller checks the folder's presence only)."""
    if not isinstance(expected, dict):
        return []
    folder = Path(folder)
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


def config_differences(record: Mapping, run_config: Mapping) -> list[str]:
    """Why a state whose record is ``record`` was not written under ``run_config`` (empty: it
    was): another format version, or one line per differing key (``train.lr: 0.002
    (checkpoint) != 0.001 (now)``), or a fingerprint edited by hand."""
    if record.get("format_version") != FORMAT_VERSION:
        return [f"format_version: {record.get('format_version')!r} -> {FORMAT_VERSION}"]
    if record.get("fingerprint") == config_fingerprint(run_config):
        return []
    return config_diff(record.get("run_config"), normalised_config(run_config)) or [
        "fingerprint: differs although no key does (edited by hand?)"
    ]


# ------------------------------------------------------------------------------------------------
# Write


def _library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("torch", "transformers", "peft", "numpy", "safetensors", "dashrepro"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def _adapter_name(model) -> str:
    name = model.active_adapter
    if not isinstance(name, str):
        raise ValueError(f"expected one active adapter, found {name!r}")
    return name


def _torch_save_checked(obj: Any, path: Path) -> None:
    """torch.save, then prove the file loads with weights_only=True before it can be committed.

    A scheduler whose lr_lambda is a callable object, for instance, puts that object's __dict__
    into its state dict; if it holds anything but tensors and primitives, the save fails here
    (and atomic_dir discards the folder) instead of at resume time on another machine.
    """
    torch.save(obj, path)
    try:
        torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        raise TypeError(
            f"{path.name} would not load with torch.load(weights_only=True): {error}"
        ) from error


def write_state_folder(
    folder: str | os.PathLike,
    *,
    model,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    step: int,
    run_config: Mapping,
    extra: Mapping | None = None,
) -> Path:
    """Write the training state after ``step`` steps to ``folder`` atomically; return it.

    ``model`` is a peft ``PeftModel`` with one active adapter; ``extra`` must be
    JSON-serialisable (tuples read back as lists). An existing ``folder`` is replaced. Saving
    happens between optimisation steps only, so a state carries no half-accumulated gradients.
    """
    folder = Path(folder)
    adapter_name = _adapter_name(model)
    # Capture RNG first: nothing below draws random numbers, but the order makes it obvious that
    # the state is the one the next step would have seen.
    rng_state = capture_rng()
    record = {
        "format_version": FORMAT_VERSION,
        "step": int(step),
        "extra": json.loads(json.dumps(dict(extra or {}))),  # fails early if not JSON
        "run_config": normalised_config(run_config),
        "fingerprint": config_fingerprint(run_config),
        "adapter_name": adapter_name,
        "versions": _library_versions(),
    }
    with atomic_dir(folder) as tmp:
        save_adapter(model, tmp, selected_adapters=[adapter_name])
        _torch_save_checked(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        _torch_save_checked(scheduler.state_dict(), tmp / SCHEDULER_FILE)
        _torch_save_checked(rng_state, tmp / RNG_FILE)
        # Hashed as written, before the rename: a resume checks what it reads against these.
        record["files"] = {
            path.relative_to(tmp).as_posix(): _file_entry(path)
            for path in needed_files(tmp, adapter_name)
        }
        record["record_sha256"] = record_digest(record)
        # Written last: for copies that do not go through atomic_dir (rsync, cp -r), a folder
        # with trainer_state.json is one whose other files are already there.
        (tmp / STATE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    # atomic_dir flushed every file and the rename to disk.
    return folder


# ------------------------------------------------------------------------------------------------
# Load


def load_state_folder(
    state: StateCheck,
    *,
    model,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
) -> None:
    """Restore the checked ``state`` into the given live objects (its files are not hashed
    again): the adapter weights in place (the optimizer keeps pointing at the same parameters),
    then the optimizer, the scheduler and every RNG.

    Raises, before touching anything, ``StateFileError`` listing the check's problems, and
    ``ValueError`` for a state of another adapter than the model's. A file that does not load (a
    damaged state written without file hashes) raises ``StateFileError`` naming it, possibly
    after earlier files were loaded.
    """
    folder = state.folder
    if not state.ok:
        raise StateFileError(
            f"{folder}: damaged training state; delete it to resume from an earlier one:\n"
            + "\n".join(f"  {line}" for line in state.problems)
        )
    if state.adapter_name != _adapter_name(model):
        raise ValueError(
            f"{folder}: state holds adapter {state.adapter_name!r}, model's active adapter is "
            f"{_adapter_name(model)!r}"
        )
    _warn_changed_versions(folder, state.record)
    _load_adapter_weights(folder, state.adapter_name, model)
    # Optimizer before scheduler: the optimizer's param_groups carry the current lr, the
    # scheduler's state only its counters. map_location="cpu" keeps a state saved on cuda:1
    # loadable anywhere; load_state_dict moves the moments to each parameter's device.
    _load_state_file(folder / OPTIMIZER_FILE, optimizer.load_state_dict)
    _load_state_file(folder / SCHEDULER_FILE, scheduler.load_state_dict)
    # RNG last, so nothing done while loading can consume numbers after the restore.
    _load_state_file(folder / RNG_FILE, lambda saved: restore_rng(saved, folder / RNG_FILE))


def _load_state_file(path: Path, apply: Callable[[Any], None]) -> None:
    """torch.load ``path`` (weights_only) and hand the object to ``apply``; either failing
    raises ``StateFileError`` naming the file (torch's and pickle's own errors name none)."""
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise StateFileError(f"{path}: cannot load ({type(exc).__name__}: {exc})") from None
    try:
        apply(obj)
    except Exception as exc:
        raise StateFileError(
            f"{path}: loads, but cannot be restored ({type(exc).__name__}: {exc})"
        ) from None


def _warn_changed_versions(folder: Path, record: Mapping) -> None:
    versions = _library_versions()
    changed = {
        k: (v, versions.get(k))
        for k, v in record.get("versions", {}).items()
        if versions.get(k) != v
    }
    if changed:
        # Not fatal: the run resumes correctly, but bit-for-bit equality with an uninterrupted
        # run is only expected under the same versions.
        _LOG.warning("%s: library versions changed since the save: %s", folder, changed)


def _load_adapter_weights(folder: Path, adapter_name: str, model) -> None:
    """Load the state's adapter into ``model`` in place, refusing any other key set, so that a
    state from another LoRA layout (rank, target modules) cannot load partially with the rest
    left at its fresh init."""
    adapter_dir = adapter_folder(folder, adapter_name)
    try:
        weights = load_file(str(adapter_dir / ADAPTER_WEIGHTS), device="cpu")
    except Exception as exc:  # safetensors' own error types name no file
        raise AdapterFileError(
            f"{adapter_dir / ADAPTER_WEIGHTS}: cannot load ({type(exc).__name__}: {exc})"
        ) from None
    expected = set(get_peft_model_state_dict(model, adapter_name=adapter_name))
    if set(weights) != expected:
        raise ValueError(
            f"{folder}: adapter tensors do not match the model's adapter "
            f"(only in state: {sorted(set(weights) - expected)[:5]}, "
            f"only in model: {sorted(expected - set(weights))[:5]})"
        )
    result = set_peft_model_state_dict(model, weights, adapter_name=adapter_name)
    if result.unexpected_keys:
        raise ValueError(f"{folder}: adapter keys not in the model: {result.unexpected_keys}")
