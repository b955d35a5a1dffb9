"""Resumable training states of the LoRA trainer: save, validate, find, load, prune.

A *training state* is everything the trainer (``recipe.DistillationRecipe``) needs to continue a
run as if it had never stopped: the adapter weights, the AdamW moments, the LR scheduler's
counters, every random number generator a step touches (``rng``: torch CPU and CUDA, numpy's
global one, Python's global one and a caller's own ``random.Random``) and a JSON data cursor.
Continuing from a state on the same hardware and library versions reproduces the uninterrupted
run bit for bit (``tests/training/test_checkpointing.py`` checks it on a toy loop,
``tests/training/test_trainer_resume.py`` on the trainer after ``kill -9`` and SIGUSR1).

On-disk layout, one folder per step (``state_dir(root, step)`` -> ``root/step-000040``)::

    step-000040/
      adapter_config.json          PEFT adapter (model.save_pretrained); peft and vLLM load it
      adapter_model.safetensors
      README.md                    written by peft, unused
      optimizer.pt                 torch.save(optimizer.state_dict())
      scheduler.pt                 torch.save(scheduler.state_dict())
      rng_state.pt                 torch.save of the torch/CUDA/numpy/Python RNG states
                                   (all three .pt files load with torch.load(weights_only=True))
      trainer_state.json           step, data_state, extra, run_config, fingerprint, versions,
                                   files (size and sha256 of every file a resume reads) and
                                   record_sha256 (of the record itself)

The folder is written through ``io.atomic_dir``: it is built under a hidden temporary name
(``.step-000040.<random>.tmp``) and renamed into place only once every file is written, fsynced
and read back, so a job killed mid-save (preemption, time limit, OOM) never leaves a folder under
the final name that a resume could trust. Nothing here is pickled beyond tensors, numbers,
strings, lists, tuples and dicts: numpy arrays and Python's RNG tuples are stored as int64 tensors.

A state is checked before it is trusted: ``save_training_state`` records in trainer_state.json the
size and sha256 of every file a resume reads (the adapter's config and weights, optimizer.pt,
scheduler.pt, rng_state.pt), hashed in the temporary folder before the rename, and a sha256 of
the record itself. ``state_problems`` lists what no longer matches (a flipped bit, a truncated or
missing file), one line per problem naming the file; ``load_training_state`` refuses such a state
(``StateFileError``), and ``resumable_state`` -- what the trainer resumes from -- removes every
damaged state newer than the newest that verifies and returns that one. For this fallback
``prune_states`` keeps the two newest complete states whole. A state written before the record
had file hashes is resumed unverified (``StateChoice.unverified``; the trainer logs it); a file
of any state that does not load anyway raises ``StateFileError`` naming it. A folder saved beside
a state (a DeepSpeed run's engine state) is recorded the same way in the state's ``extra``
(``folder_file_record``) and checked by ``companion_folder_problems``.

A state is tied to the run's config through ``config_fingerprint``: ``load_training_state``
refuses a state written under a different config (``ResumeConfigMismatch``), naming every key
that differs, instead of silently mixing two runs; ``state_config_differences`` lists those keys
without raising (the trainer then discards the kept states and starts afresh).

Use (sketch; ``preemption.PreemptionGuard`` turns SIGTERM/SIGUSR1 into ``guard.requested``)::

    with PreemptionGuard() as guard:
        start = 0
        if (latest := resumable_state(states, log=print)) is not None:
            start = load_training_state(latest, model=model, optimizer=optimizer,
                                        scheduler=scheduler, python_rng=rng,
                                        run_config=run_config)["step"]
        for step in range(start + 1, steps + 1):
            ...  # one optimisation step
            if step in save_at or guard.requested:
                save_training_state(state_dir(states, step), model=model, ..., step=step)
                # Keep every adapter but the optimizer moments of the two newest states only.
                prune_states(states, keep_steps=set())
            if guard.requested:
                sys.exit(PREEMPTED_EXIT_CODE)  # the scheduler requeues; the rerun resumes here

Saving happens between optimisation steps only (after ``scheduler.step()``), never inside one:
the state then has no half-accumulated gradients to carry. ``PreemptionGuard``,
``PREEMPTED_EXIT_CODE`` (``preemption``) and the adapter-folder helpers ``AdapterFileError``,
``check_adapter_files``, ``load_adapter`` (``adapters``) are importable from here too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import random
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from peft import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file

from dashrepro.adapters import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    AdapterFileError,
    save_adapter,
)
from dashrepro.io import atomic_dir, sha256_file
from dashrepro.training.fingerprint import config_diff, config_fingerprint, normalised_config
from dashrepro.training.rng import capture_rng, restore_rng

_LOG = logging.getLogger(__name__)

#: Version of the folder layout above; ``load_training_state`` refuses any other.
FORMAT_VERSION = 1

OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
RNG_FILE = "rng_state.pt"
STATE_FILE = "trainer_state.json"

#: How many of the newest complete states ``prune_states`` keeps whole (resumable): the newest,
#: and the one a resume falls back to when the newest turns out damaged.
KEPT_RESUME_POINTS = 2

_STEP_DIR = re.compile(r"step-(\d+)")


class ResumeConfigMismatch(ValueError):
    """A training state was written under a different run config than the current one."""


class StateFileError(ValueError):
    """A training state's file is damaged: it does not match the state's record or does not
    load. The message names the file."""


# ------------------------------------------------------------------------------------------------
# Save / load


def state_dir(root: str | os.PathLike, step: int) -> Path:
    """The folder of the state after ``step`` optimisation steps: ``root/step-{step:06d}``."""
    return Path(root) / f"step-{step:06d}"


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


def _adapter_folder(folder: Path, adapter_name: str) -> Path:
    # peft's save_pretrained writes the "default" adapter at the top and any other under its name.
    return folder if adapter_name == "default" else folder / adapter_name


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


def save_training_state(
    ckpt_dir: str | os.PathLike,
    *,
    model,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    step: int,
    data_state: Mapping,
    python_rng: random.Random,
    run_config: Mapping,
    extra: Mapping | None = None,
) -> Path:
    """Write the training state after ``step`` steps to ``ckpt_dir`` atomically; return it.

    ``model`` is a peft ``PeftModel`` with one active adapter; ``data_state`` and ``extra`` must
    be JSON-serialisable (tuples read back as lists). An existing ``ckpt_dir`` is replaced.
    """
    ckpt_dir = Path(ckpt_dir)
    adapter_name = _adapter_name(model)
    fingerprint = config_fingerprint(run_config)
    # Capture RNG first: nothing below draws random numbers, but the order makes it obvious that
    # the state is the one the next step would have seen.
    rng_state = capture_rng(python_rng)
    record = {
        "format_version": FORMAT_VERSION,
        "step": int(step),
        "data_state": json.loads(json.dumps(data_state)),  # fails early if not JSON
        "extra": json.loads(json.dumps(dict(extra or {}))),
        "run_config": normalised_config(run_config),
        "fingerprint": fingerprint,
        "adapter_name": adapter_name,
        "versions": _library_versions(),
    }
    with atomic_dir(ckpt_dir) as tmp:
        save_adapter(model, tmp, selected_adapters=[adapter_name])
        _torch_save_checked(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        _torch_save_checked(scheduler.state_dict(), tmp / SCHEDULER_FILE)
        _torch_save_checked(rng_state, tmp / RNG_FILE)
        # Hashed as written, before the rename: a resume verifies what it reads against these.
        record["files"] = _file_record(tmp, adapter_name)
        record["record_sha256"] = _record_digest(record)
        # Written last: for copies that do not go through atomic_dir (rsync, cp -r), a folder
        # with trainer_state.json is one whose other files are already there.
        (tmp / STATE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    # atomic_dir flushed every file and the rename to disk.
    return ckpt_dir


def _needed_files(folder: Path, adapter_name: str) -> list[Path]:
    """Every file a resume reads (trainer_state.json aside)."""
    adapter_dir = _adapter_folder(folder, adapter_name)
    return [
        adapter_dir / ADAPTER_CONFIG,
        adapter_dir / ADAPTER_WEIGHTS,
        folder / OPTIMIZER_FILE,
        folder / SCHEDULER_FILE,
        folder / RNG_FILE,
    ]


def _file_record(folder: Path, adapter_name: str) -> dict[str, dict[str, Any]]:
    """``{relative path: {"bytes", "sha256"}}`` of every file a resume reads."""
    return {
        path.relative_to(folder).as_posix(): {
            "bytes": path.stat().st_size,
            "sha256": sha256_file(path),
        }
        for path in _needed_files(folder, adapter_name)
    }


def _record_digest(record: Mapping) -> str:
    """sha256 of the record without its own ``record_sha256``, in canonical JSON (the record is
    JSON already, so the value survives the write and the read unchanged)."""
    body = {k: v for k, v in record.items() if k != "record_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _read_state_record(ckpt_dir: Path) -> dict[str, Any]:
    record = json.loads((ckpt_dir / STATE_FILE).read_text())
    if not isinstance(record, dict) or not isinstance(record.get("step"), int):
        raise ValueError(f"{ckpt_dir / STATE_FILE}: not a training-state record")
    return record


def state_config_differences(ckpt_dir: str | os.PathLike, run_config: Mapping) -> list[str]:
    """Why the state in ``ckpt_dir`` was not written under ``run_config`` (empty: it was).

    One line per differing key (``train.lr: 0.002 -> 0.001``); an unreadable record, another
    format version or a hand-edited fingerprint are differences too.
    """
    ckpt_dir = Path(ckpt_dir)
    try:
        record = _read_state_record(ckpt_dir)
    except (OSError, ValueError) as exc:
        return [f"its record cannot be read ({exc})"]
    if record.get("format_version") != FORMAT_VERSION:
        return [f"format_version: {record.get('format_version')!r} -> {FORMAT_VERSION}"]
    if record.get("fingerprint") == config_fingerprint(run_config):
        return []
    return config_diff(record.get("run_config"), normalised_config(run_config)) or [
        "fingerprint: differs although no key does (edited by hand?)"
    ]


def load_training_state(
    ckpt_dir: str | os.PathLike,
    *,
    model,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    python_rng: random.Random,
    run_config: Mapping,
) -> dict[str, Any]:
    """Restore a state written by ``save_training_state`` into the given live objects.

    Loads the adapter weights in place (the optimizer keeps pointing at the same parameters),
    then the optimizer, the scheduler and every RNG. Returns ``{"step", "data_state", "extra"}``.
    Raises, before touching anything, ``ResumeConfigMismatch`` when the state was written under
    a different ``run_config``, ``FileNotFoundError`` for a pruned or partial state and
    ``StateFileError`` when a file differs from the state's record (``state_problems``); a file
    that does not load (a damaged state written without file hashes) raises ``StateFileError``
    naming it, possibly after earlier files were loaded.
    """
    ckpt_dir = Path(ckpt_dir)
    record = _read_state_record(ckpt_dir)
    _check_record(ckpt_dir, record, run_config)
    adapter_name = str(record.get("adapter_name", "default"))
    _check_resumable(ckpt_dir, adapter_name, model)
    problems = state_problems(ckpt_dir)
    if problems:
        raise StateFileError(
            f"{ckpt_dir}: damaged training state; delete it to resume from an earlier one:\n"
            + "\n".join(f"  {line}" for line in problems)
        )
    _warn_changed_versions(ckpt_dir, record)
    _load_adapter_weights(ckpt_dir, adapter_name, model)
    # Optimizer before scheduler: the optimizer's param_groups carry the current lr, the
    # scheduler's state only its counters. map_location="cpu" keeps a state saved on cuda:1
    # loadable anywhere; load_state_dict moves the moments to each parameter's device.
    _load_state_file(ckpt_dir / OPTIMIZER_FILE, optimizer.load_state_dict)
    _load_state_file(ckpt_dir / SCHEDULER_FILE, scheduler.load_state_dict)
    # RNG last, so nothing done while loading can consume numbers after the restore.
    _load_state_file(ckpt_dir / RNG_FILE, lambda state: restore_rng(state, python_rng, ckpt_dir))
    return {"step": record["step"], "data_state": record["data_state"], "extra": record["extra"]}


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


def _check_record(ckpt_dir: Path, record: Mapping, run_config: Mapping) -> None:
    """Refuse another format version or a state written under another run config."""
    if record.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{ckpt_dir}: training-state format {record.get('format_version')!r}, this code reads "
            f"{FORMAT_VERSION}; delete the folder to start the run afresh"
        )
    if record["fingerprint"] != config_fingerprint(run_config):
        diff = config_diff(record.get("run_config"), normalised_config(run_config))
        details = "\n".join(f"  {line}" for line in diff) or (
            "  (no key differs in the stored config; its fingerprint does -- edited by hand?)"
        )
        raise ResumeConfigMismatch(
            f"refusing to resume from {ckpt_dir}: it was written under a different run config.\n"
            f"{details}\n"
            f"Delete {ckpt_dir} (and any other states beside it) to start this run afresh, or "
            f"restore the config it was written with to resume it."
        )


def _check_resumable(ckpt_dir: Path, adapter_name: str, model) -> None:
    """Refuse a pruned or partial state, or one of another adapter than the model's."""
    missing = [
        str(path.relative_to(ckpt_dir))
        for path in _needed_files(ckpt_dir, adapter_name)
        if not path.is_file()
    ]
    if missing:
        raise FileNotFoundError(
            f"{ckpt_dir}: not a resumable state (missing {', '.join(missing)}; pruned?)"
        )
    if adapter_name != _adapter_name(model):
        raise ValueError(
            f"{ckpt_dir}: state holds adapter {adapter_name!r}, model's active adapter is "
            f"{_adapter_name(model)!r}"
        )


def _warn_changed_versions(ckpt_dir: Path, record: Mapping) -> None:
    versions = _library_versions()
    changed = {
        k: (v, versions.get(k))
        for k, v in record.get("versions", {}).items()
        if versions.get(k) != v
    }
    if changed:
        # Not fatal: the run resumes correctly, but bit-for-bit equality with an uninterrupted
        # run is only expected under the same versions.
        _LOG.warning("%s: library versions changed since the save: %s", ckpt_dir, changed)


def _load_adapter_weights(ckpt_dir: Path, adapter_name: str, model) -> None:
    """Load the state's adapter into ``model`` in place, refusing any other key set, so that a
    state from another LoRA layout (rank, target modules) cannot load partially with the rest
    left at its fresh init."""
    adapter_dir = _adapter_folder(ckpt_dir, adapter_name)
    try:
        weights = load_file(str(adapter_dir / ADAPTER_WEIGHTS), device="cpu")
    except Exception as exc:  # safetensors' own error types name no file
        raise AdapterFileError(
            f"{adapter_dir / ADAPTER_WEIGHTS}: cannot load ({type(exc).__name__}: {exc})"
        ) from None
    expected = set(get_peft_model_state_dict(model, adapter_name=adapter_name))
    if set(weights) != expected:
        raise ValueError(
            f"{ckpt_dir}: adapter tensors do not match the model's adapter "
            f"(only in state: {sorted(set(weights) - expected)[:5]}, "
            f"only in model: {sorted(expected - set(weights))[:5]})"
        )
    result = set_peft_model_state_dict(model, weights, adapter_name=adapter_name)
    if result.unexpected_keys:
        raise ValueError(f"{ckpt_dir}: adapter keys not in the model: {result.unexpected_keys}")


# ------------------------------------------------------------------------------------------------
# Verifying states


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
        record = _read_state_record(ckpt_dir)
    except (OSError, ValueError) as exc:  # json.JSONDecodeError, UnicodeDecodeError included
        return [f"{record_path}: cannot be read ({type(exc).__name__}: {exc})"]
    problems = []
    if "record_sha256" in record and record["record_sha256"] != _record_digest(record):
        problems.append(f"{record_path}: does not match its own record_sha256 (damaged or edited)")
    match = _STEP_DIR.fullmatch(ckpt_dir.name)
    if match and int(match.group(1)) != record["step"]:
        problems.append(f"{record_path}: records step {record['step']}, the folder's is {match[1]}")
    files = record.get("files")
    if files is not None and not isinstance(files, dict):
        problems.append(f"{record_path}: its files entry is not a mapping")
        files = {}
    for path in _needed_files(ckpt_dir, str(record.get("adapter_name", "default"))):
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
        expected = _read_state_record(Path(ckpt_dir)).get("extra", {}).get(key)
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
        return "files" in _read_state_record(Path(ckpt_dir))
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


# ------------------------------------------------------------------------------------------------
# Finding and pruning states


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` for every ``root/step-N`` folder, ascending. atomic_dir's temporary
    folders start with a dot and never match."""
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _STEP_DIR.fullmatch(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def _is_complete(step: int, folder: Path) -> bool:
    try:
        record = _read_state_record(folder)
    except (OSError, ValueError):  # json.JSONDecodeError is a ValueError
        return False
    if record["step"] != step:
        return False
    adapter_name = str(record.get("adapter_name", "default"))
    return all(path.is_file() for path in _needed_files(folder, adapter_name))


def latest_complete_checkpoint(root: str | os.PathLike) -> Path | None:
    """The resumable state with the highest step under ``root``, or None.

    A state counts when its ``trainer_state.json`` parses, names the folder's step, and every
    file needed to resume is present -- so pruned states, atomic_dir's hidden temporary folders,
    stray files and unreadable records are all skipped.
    """
    for step, folder in reversed(_step_dirs(Path(root))):
        if _is_complete(step, folder):
            return folder
    return None


@dataclass(frozen=True)
class StateChoice:
    """The state a resume should use (``choose_state``) and the damaged ones passed over."""

    root: Path
    #: The newest state that verifies (``state_problems`` finds nothing), or None.
    state: Path | None = None
    #: ``state`` was written without file hashes (older code): present, but unverified.
    unverified: bool = False
    #: ``(step, folder, problems)`` of every damaged state newer than ``state``, newest first.
    damaged: tuple[tuple[int, Path, tuple[str, ...]], ...] = ()
    #: Whether ``root`` held any step folder at all (pruned and partial ones included).
    any_states: bool = False

    def messages(self) -> list[str]:
        """What a resume should log: each damaged state discarded, an unverified state used,
        or kept states of which none verifies."""
        lines = [
            f"discarding damaged training state {folder}: {'; '.join(problems)}"
            for _, folder, problems in self.damaged
        ]
        if self.state is not None and self.unverified:
            lines.append(
                f"{self.state}: written without file hashes (older code); resuming it unverified"
            )
        if self.state is None and self.any_states:
            lines.append(f"no kept training state under {self.root} verifies; starting at step 0")
        return lines

    def discard_damaged(self) -> list[Path]:
        """Remove the damaged states' folders (call it from one process only); return them."""
        for _, folder, _ in self.damaged:
            shutil.rmtree(folder, ignore_errors=True)
        return [folder for _, folder, _ in self.damaged]


def choose_state(
    root: str | os.PathLike,
    extra_problems: Callable[[int, Path], list[str]] | None = None,
) -> StateChoice:
    """The newest state under ``root`` that verifies, and the damaged states newer than it.

    Reads only (several processes may call it at once). Going from the newest step down: a
    folder without trainer_state.json (a copy in progress) or without both optimizer.pt and
    scheduler.pt (pruned) is passed over as no resume point; one with any ``state_problems``
    -- or any ``extra_problems(step, folder)``, a caller's own requirement such as DeepSpeed's
    folder of that step -- is damaged; the first with none is the choice.
    """
    root = Path(root)
    folders = _step_dirs(root)
    damaged = []
    for step, folder in reversed(folders):
        if not (folder / STATE_FILE).exists():
            continue
        if not (folder / OPTIMIZER_FILE).exists() and not (folder / SCHEDULER_FILE).exists():
            continue
        problems = state_problems(folder)
        if not problems and extra_problems is not None:
            problems = list(extra_problems(step, folder))
        if problems:
            damaged.append((step, folder, tuple(problems)))
            continue
        unverified = not has_file_hashes(folder)
        return StateChoice(root, folder, unverified, tuple(damaged), any_states=True)
    return StateChoice(root, None, False, tuple(damaged), any_states=bool(folders))


def resumable_state(
    root: str | os.PathLike,
    log: Callable[[str], None] = _LOG.warning,
    extra_problems: Callable[[int, Path], list[str]] | None = None,
) -> Path | None:
    """The newest state under ``root`` that verifies, after removing the damaged states newer
    than it, each with a ``log`` line naming the folder and its problems; None (logged when
    there were states) if none verifies. For one process; several coordinate ``choose_state``
    and ``StateChoice.discard_damaged`` themselves (the trainer does)."""
    choice = choose_state(root, extra_problems)
    for line in choice.messages():
        log(line)
    choice.discard_damaged()
    return choice.state


def newest_complete_steps(root: str | os.PathLike, count: int = KEPT_RESUME_POINTS) -> list[int]:
    """The steps of the ``count`` newest complete states under ``root``, ascending (complete:
    the record parses and every needed file is present; nothing is hashed)."""
    if count <= 0:
        return []
    complete = [step for step, folder in _step_dirs(Path(root)) if _is_complete(step, folder)]
    return complete[-count:]


def prune_states(root: str | os.PathLike, keep_steps: Iterable[int]) -> list[Path]:
    """Delete optimizer.pt and scheduler.pt of every state whose step is not in ``keep_steps``.

    Retention policy: the adapter, rng_state.pt and trainer_state.json of every state stay (the
    adapter is what evaluation reads and is small; the other two are a few KB), and the
    ``KEPT_RESUME_POINTS`` (two) newest complete states always keep everything, whatever
    ``keep_steps`` says: the newest is the resume point, the one before it the fallback when the
    newest turns out damaged (``resumable_state``). A pruned state is no longer resumable
    (``latest_complete_checkpoint`` and ``choose_state`` pass over it).
    Leftover hidden temporary folders of saves killed mid-write (``.step-*.tmp``) are removed
    too; call this only from the process that writes the states (not during a save).
    Returns the paths removed.
    """
    root = Path(root)
    keep = set(keep_steps) | set(newest_complete_steps(root))
    removed: list[Path] = []
    for step, folder in _step_dirs(root):
        if step in keep:
            continue
        for name in (OPTIMIZER_FILE, SCHEDULER_FILE):
            path = folder / name
            if path.is_file():
                path.unlink()
                removed.append(path)
    if root.is_dir():
        for child in root.iterdir():
            if child.is_dir() and re.fullmatch(r"\.step-\d+\..*\.tmp", child.name):
                shutil.rmtree(child)
                removed.append(child)
    return removed
