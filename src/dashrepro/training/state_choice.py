"""Which kept training state a run resumes from, and which states' optimizer files are pruned.

``choose_state`` goes from the newest step down and takes the first state that verifies
(``state_integrity.state_problems``), reporting every damaged state newer than it;
``StateChoice.discard_damaged`` removes those. ``prune_states`` keeps every state's adapter
and record, and the optimizer and scheduler files of the ``KEPT_RESUME_POINTS`` newest complete
states only: the newest is the resume point, the one before it the fallback when the newest
turns out damaged.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from dashrepro.training.state_integrity import (
    OPTIMIZER_FILE,
    SCHEDULER_FILE,
    STATE_FILE,
    STEP_DIR,
    has_file_hashes,
    needed_files,
    read_state_record,
    state_problems,
)

_LOG = logging.getLogger(__name__)

#: How many of the newest complete states ``prune_states`` keeps whole (resumable): the newest,
#: and the one a resume falls back to when the newest turns out damaged.
KEPT_RESUME_POINTS = 2


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` for every ``root/step-N`` folder, ascending. atomic_dir's temporary
    folders start with a dot and never match."""
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = STEP_DIR.fullmatch(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def _is_complete(step: int, folder: Path) -> bool:
    try:
        record = read_state_record(folder)
    except (OSError, ValueError):  # json.JSONDecodeError is a ValueError
        return False
    if record["step"] != step:
        return False
    adapter_name = str(record.get("adapter_name", "default"))
    return all(path.is_file() for path in needed_files(folder, adapter_name))


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
    newest turns out damaged (``choose_state``). A pruned state is no longer resumable
    (``newest_complete_steps`` and ``choose_state`` pass over it).
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
