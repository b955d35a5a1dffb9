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
      trainer_state.json           step, data_state, extra, run_config, fingerprint, versions

The folder is written through ``io.atomic_dir``: it is built under a hidden temporary name
(``.step-000040.<random>.tmp``) and renamed into place only once every file is written, fsynced
and read back, so a job killed mid-save (preemption, time limit, OOM) never leaves a folder under
the final name that a resume could trust. Nothing here is pickled beyond tensors, numbers,
strings, lists, tuples and dicts: numpy arrays and Python's RNG tuples are stored as int64 tensors.

A state is tied to the run's config through ``config_fingerprint``: ``load_training_state``
refuses a state written under a different config (``ResumeConfigMismatch``), naming every key
that differs, instead of silently mixing two runs; ``state_config_differences`` lists those keys
without raising (the trainer then discards the kept states and starts afresh).

Use (sketch; ``preemption.PreemptionGuard`` turns SIGTERM/SIGUSR1 into ``guard.requested``)::

    with PreemptionGuard() as guard:
        start = 0
        if (latest := latest_complete_checkpoint(states)) is not None:
            start = load_training_state(latest, model=model, optimizer=optimizer,
                                        scheduler=scheduler, python_rng=rng,
                                        run_config=run_config)["step"]
        for step in range(start + 1, steps + 1):
            ...  # one optimisation step
            if step in save_at or guard.requested:
                save_training_state(state_dir(states, step), model=model, ..., step=step)
                # Keep every adapter but the optimizer moments of the newest state only.
                prune_states(states, keep_steps=set())
            if guard.requested:
                sys.exit(PREEMPTED_EXIT_CODE)  # the scheduler requeues; the rerun resumes here

Saving happens between optimisation steps only (after ``scheduler.step()``), never inside one:
the state then has no half-accumulated gradients to carry. ``PreemptionGuard``,
``PREEMPTED_EXIT_CODE`` (``preemption``) and the adapter-folder helpers ``AdapterFileError``,
``check_adapter_files``, ``load_adapter`` (``adapters``) are importable from here too.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import random
import re
import shutil
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from peft import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file

from dashrepro.io import atomic_dir
from dashrepro.training.adapters import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    AdapterFileError,
    check_adapter_files,
    load_adapter,
)
from dashrepro.training.fingerprint import config_diff, config_fingerprint, normalised_config
from dashrepro.training.preemption import PREEMPTED_EXIT_CODE, PreemptionGuard
from dashrepro.training.rng import capture_rng, restore_rng

__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "FORMAT_VERSION",
    "OPTIMIZER_FILE",
    "PREEMPTED_EXIT_CODE",
    "RNG_FILE",
    "SCHEDULER_FILE",
    "STATE_FILE",
    "AdapterFileError",
    "PreemptionGuard",
    "ResumeConfigMismatch",
    "check_adapter_files",
    "config_fingerprint",
    "latest_complete_checkpoint",
    "load_adapter",
    "load_training_state",
    "prune_states",
    "save_training_state",
    "state_config_differences",
    "state_dir",
]

_LOG = logging.getLogger(__name__)

#: Version of the folder layout above; ``load_training_state`` refuses any other.
FORMAT_VERSION = 1

OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
RNG_FILE = "rng_state.pt"
STATE_FILE = "trainer_state.json"

_STEP_DIR = re.compile(r"step-(\d+)")


class ResumeConfigMismatch(ValueError):
    """A training state was written under a different run config than the current one."""


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


def _fsync_tree(folder: Path) -> None:
    """Flush every file (and the folders) to disk, so a node crash cannot leave empty files
    behind a rename that did reach the disk. Some network filesystems reject fsync on folders;
    those errors are ignored (the rename stays atomic for crashes of the process)."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
    for path in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
        _fsync_dir(path)


def _fsync_dir(path: Path) -> None:
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
        model.save_pretrained(str(tmp), selected_adapters=[adapter_name])
        _torch_save_checked(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        _torch_save_checked(scheduler.state_dict(), tmp / SCHEDULER_FILE)
        _torch_save_checked(rng_state, tmp / RNG_FILE)
        # Written last: for copies that do not go through atomic_dir (rsync, cp -r), a folder
        # with trainer_state.json is one whose other files are already there.
        (tmp / STATE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        _fsync_tree(tmp)
    _fsync_dir(ckpt_dir.parent)
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
    Raises ``ResumeConfigMismatch`` -- before touching anything -- when the state was written
    under a different ``run_config``, and ``FileNotFoundError`` for a pruned or partial state.
    """
    ckpt_dir = Path(ckpt_dir)
    record = _read_state_record(ckpt_dir)
    _check_record(ckpt_dir, record, run_config)
    adapter_name = str(record.get("adapter_name", "default"))
    _check_resumable(ckpt_dir, adapter_name, model)
    _warn_changed_versions(ckpt_dir, record)
    _load_adapter_weights(ckpt_dir, adapter_name, model)
    # Optimizer before scheduler: the optimizer's param_groups carry the current lr, the
    # scheduler's state only its counters. map_location="cpu" keeps a state saved on cuda:1
    # loadable anywhere; load_state_dict moves the moments to each parameter's device.
    optimizer.load_state_dict(
        torch.load(ckpt_dir / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
    )
    scheduler.load_state_dict(
        torch.load(ckpt_dir / SCHEDULER_FILE, map_location="cpu", weights_only=True)
    )
    # RNG last, so nothing done while loading can consume numbers after the restore.
    rng_state = torch.load(ckpt_dir / RNG_FILE, map_location="cpu", weights_only=True)
    restore_rng(rng_state, python_rng, ckpt_dir)
    return {"step": record["step"], "data_state": record["data_state"], "extra": record["extra"]}


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


def prune_states(root: str | os.PathLike, keep_steps: Iterable[int]) -> list[Path]:
    """Delete optimizer.pt and scheduler.pt of every state whose step is not in ``keep_steps``.

    Retention policy: the adapter, rng_state.pt and trainer_state.json of every state stay (the
    adapter is what evaluation reads and is small; the other two are a few KB), and the newest
    complete state always keeps everything, whatever ``keep_steps`` says, so a resume point
    survives. A pruned state is no longer resumable (``latest_complete_checkpoint`` skips it).
    Leftover hidden temporary folders of saves killed mid-write (``.step-*.tmp``) are removed
    too; call this only from the process that writes the states (not during a save).
    Returns the paths removed.
    """
    root = Path(root)
    keep = set(keep_steps)
    newest = latest_complete_checkpoint(root)
    removed: list[Path] = []
    for step, folder in _step_dirs(root):
        if step in keep or folder == newest:
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
