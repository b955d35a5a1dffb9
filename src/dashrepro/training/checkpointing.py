"""Save and load a resumable training state of the LoRA trainer.

A training state is everything ``recipe.DistillationRecipe`` needs to continue a run as if it
had never stopped: the adapter weights, the AdamW moments, the LR scheduler's counters, every
random number generator a step touches and a JSON data cursor; resuming on the same hardware and
library versions reproduces the uninterrupted run bit for bit (``tests/training``). The folder
is written through ``io.atomic_dir`` and records the sha256 of every file a resume reads
(``state_integrity``); ``load_training_state`` refuses a damaged state (``StateFileError``) and
one written under another run config (``ResumeConfigMismatch``, naming every differing key).
Which state to resume and what to prune: ``state_choice``. Saving happens between optimisation
steps only, so a state carries no half-accumulated gradients. Nothing is pickled beyond tensors,
numbers, strings, lists, tuples and dicts.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import random
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from peft import get_peft_model_state_dict, set_peft_model_state_dict
from safetensors.torch import load_file

from dashrepro.adapters import (
    ADAPTER_WEIGHTS,
    AdapterFileError,
    save_adapter,
)
from dashrepro.io import atomic_dir
from dashrepro.training.fingerprint import config_diff, config_fingerprint, normalised_config
from dashrepro.training.rng import capture_rng, restore_rng
from dashrepro.training.state_integrity import (
    OPTIMIZER_FILE,
    RNG_FILE,
    SCHEDULER_FILE,
    STATE_FILE,
    adapter_folder,
    file_record,
    needed_files,
    read_state_record,
    record_digest,
    state_problems,
)

_LOG = logging.getLogger(__name__)

#: Version of the state folder's layout (``state_integrity``); ``load_training_state`` refuses
#: any other.
FORMAT_VERSION = 1


class ResumeConfigMismatch(ValueError):
    """A training state was written under a different run config than the current one."""


class StateFileError(ValueError):
    """A training state's file is damaged: it does not match the state's record or does not
    load. The message names the file."""


# ------------------------------------------------------------------------------------------------
# Save / load


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
        record["files"] = file_record(tmp, adapter_name)
        record["record_sha256"] = record_digest(record)
        # Written last: for copies that do not go through atomic_dir (rsync, cp -r), a folder
        # with trainer_state.json is one whose other files are already there.
        (tmp / STATE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    # atomic_dir flushed every file and the rename to disk.
    return ckpt_dir


def state_config_differences(ckpt_dir: str | os.PathLike, run_config: Mapping) -> list[str]:
    """Why the state in ``ckpt_dir`` was not written under ``run_config`` (empty: it was).

    One line per differing key (``train.lr: 0.002 (checkpoint) != 0.001 (now)``); an unreadable
    record, another format version or a hand-edited fingerprint are differences too.
    """
    ckpt_dir = Path(ckpt_dir)
    try:
        record = read_state_record(ckpt_dir)
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
    record = read_state_record(ckpt_dir)
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
        for path in needed_files(ckpt_dir, adapter_name)
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
    adapter_dir = adapter_folder(ckpt_dir, adapter_name)
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
