"""A run's kept states and the one retention policy: which state a resume takes, what is pruned.

The resume root holds ``step-N/`` state folders (``_folder``), DeepSpeed's ``deepspeed-step-N/``
engine folders beside them, and atomic_dir's hidden temporaries of saves killed mid-write.
``choose`` goes from the newest resume point (``_folder.is_resume_point``) down, checks each
once and takes the first that is intact; its ``StateChoice`` also holds the damaged states newer
than it, to log and discard. ``prune`` keeps every state's adapter and record, and the
``KEPT_RESUME_POINTS`` newest resume points whole, with their engine folders: the resume point
and the fallback should it turn out damaged. Reading is safe from every process; removing is
the main process's.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dashrepro.training.resume._folder import (
    OPTIMIZER_FILE,
    SCHEDULER_FILE,
    STEP_DIR,
    StateCheck,
    check_state_folder,
    is_resume_point,
)

#: How many of the newest resume points ``prune`` keeps whole: the newest, and the one a resume
#: falls back to when the newest turns out damaged.
KEPT_RESUME_POINTS = 2
#: accelerate's folder of the DeepSpeed engine's state after a step (``engine_dir``).
ENGINE_DIR = re.compile(r"deepspeed-step-(\d+)")
#: atomic_dir's temporary (or set-aside) folders of a state's save.
_SAVE_LEFTOVER = re.compile(r"\.step-\d+\..*\.tmp")


def engine_dir(root: str | os.PathLike, step: int) -> Path:
    """accelerate's folder of the DeepSpeed engine's state after ``step``."""
    return Path(root) / f"deepspeed-step-{step:06d}"


def step_folders(root: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(step, folder)`` for every ``root/step-N`` folder, ascending."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = STEP_DIR.fullmatch(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def resume_points(root: str | os.PathLike) -> list[int]:
    """The steps of the resume points under ``root``, ascending (nothing is hashed)."""
    return [step for step, folder in step_folders(root) if is_resume_point(folder)]


@dataclass(frozen=True)
class StateChoice:
    """The state a resume should use (``choose``) and the damaged ones passed over."""

    root: Path
    #: The newest resume point that checks out, or None.
    state: StateCheck | None = None
    #: ``(step, check)`` of every damaged resume point newer than ``state``, newest first.
    damaged: tuple[tuple[int, StateCheck], ...] = ()
    #: Whether ``root`` held any step folder at all (pruned and partial ones included).
    any_states: bool = False

    def messages(self) -> list[str]:
        """What a resume should log: each damaged state discarded, an unverified state used,
        or kept states of which none checks out."""
        lines = [
            f"discarding damaged training state {check.folder}: {'; '.join(check.problems)}"
            for _, check in self.damaged
        ]
        if self.state is not None and not self.state.hashed:
            lines.append(
                f"{self.state.folder}: written without file hashes (older code); resuming it "
                "unverified"
            )
        if self.state is None and self.any_states:
            lines.append(f"no kept training state under {self.root} verifies; starting at step 0")
        return lines

    def discard_damaged(self) -> list[Path]:
        """Remove the damaged states' folders and their engine folders (call it from one process
        only); return the state folders."""
        for step, check in self.damaged:
            shutil.rmtree(check.folder, ignore_errors=True)
            shutil.rmtree(engine_dir(self.root, step), ignore_errors=True)
        return [check.folder for _, check in self.damaged]


def choose(
    root: str | os.PathLike,
    extra_problems: Callable[[int, StateCheck], list[str]] | None = None,
) -> StateChoice:
    """The newest resume point under ``root`` that checks out, and the damaged ones newer.

    Reads only (several processes may call it at once). Going from the newest step down, each
    resume point is checked once (``check_state_folder``: every file hashed once), then, if
    intact, against ``extra_problems(step, check)``, a caller's own requirement such as
    DeepSpeed's folder of that step; the first with no problem is the choice. Folders that are no
    resume point (partial copies, pruned states) are passed over and kept.
    """
    root = Path(root)
    folders = step_folders(root)
    damaged = []
    for step, folder in reversed(folders):
        if not is_resume_point(folder):
            continue
        check = check_state_folder(folder)
        if check.ok and extra_problems is not None:
            check = check.with_problems(list(extra_problems(step, check)))
        if not check.ok:
            damaged.append((step, check))
            continue
        return StateChoice(root, check, tuple(damaged), any_states=True)
    return StateChoice(root, None, tuple(damaged), any_states=bool(folders))


def prune(root: str | os.PathLike) -> list[Path]:
    """Apply the retention policy under ``root``; return the paths removed.

    The adapter, rng_state.pt and trainer_state.json of every state stay (the adapter is what a
    declared checkpoint is exported from and is small; the other two are a few KB). The
    ``KEPT_RESUME_POINTS`` newest resume points keep everything, their DeepSpeed engine folders
    included; every other state loses optimizer.pt and scheduler.pt (so it is no resume point
    any more) and every other engine folder goes (a kill between the engine's save and the
    state's leaves one behind), as do the temporaries of saves killed mid-write. Call it only
    from the process that writes the states, after a save.
    """
    root = Path(root)
    keep = set(resume_points(root)[-KEPT_RESUME_POINTS:])
    removed: list[Path] = []
    for step, folder in step_folders(root):
        if step in keep:
            continue
        for name in (OPTIMIZER_FILE, SCHEDULER_FILE):
            path = folder / name
            if path.is_file():
                path.unlink()
                removed.append(path)
    if root.is_dir():
        for child in sorted(root.iterdir()):
            engine = ENGINE_DIR.fullmatch(child.name)
            stale_engine = engine is not None and int(engine.group(1)) not in keep
            if child.is_dir() and (stale_engine or _SAVE_LEFTOVER.fullmatch(child.name)):
                shutil.rmtree(child, ignore_errors=True)
                removed.append(child)
    return removed
