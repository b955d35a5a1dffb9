"""Saving, checking and restoring a run's ``TrainingState`` across processes: the ``Checkpointer``.

Under ``<out_dir>/.resume`` it writes a state after checkpoint steps (and on a preemption notice,
or every ``state_every_minutes``: the recipe says when), exports each checkpoint's PEFT folder
from it, restores the newest state that checks out (naming in the log the folder, the step and
the files verified), discards damaged or stale ones, and keeps DeepSpeed's engine folders beside
their states. One folder's files are ``_folder``'s; which state to take and what to prune,
``_retention``'s. Every process calls each method; only the main one writes or removes.

    checkpointer = Checkpointer(out_dir, accelerator, run_config, name="dash seed 3")
    checkpointer.restore(state)              # state.step, learner and records, or step 0
    checkpointer.save(state, export=True)    # and checkpoint-<state.step>/
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

from dashrepro.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from dashrepro.io import atomic_dir
from dashrepro.layout import checkpoint_folder
from dashrepro.training.resume._folder import (
    StateCheck,
    companion_problems,
    config_differences,
    folder_file_record,
    load_state_folder,
    state_dir,
    write_state_folder,
)
from dashrepro.training.resume._retention import choose, engine_dir, prune
from dashrepro.training.resume._state import RECORD_FILES, RunRecords, TrainingState

#: Folder (in ``out_dir``) of the kept training states and scratch files; not a Snakemake output.
RESUME_DIR = ".resume"
#: The key of a state's ``extra`` that records its DeepSpeed folder's files.
DEEPSPEED_FILES = "deepspeed_files"
#: The hidden temporaries (io.atomic_dir's, atomic_path's) a kill leaves in ``out_dir`` when it
#: comes during a checkpoint's export or a record's write.
_LEFTOVER = re.compile(
    r"\.(checkpoint-\d+|" + "|".join(re.escape(name) for name in RECORD_FILES) + r")\..+\.tmp"
)


def export_adapter(state: Path, checkpoint: Path) -> None:
    """The declared PEFT checkpoint folder, copied from a training state's adapter files."""
    with atomic_dir(checkpoint) as tmp:
        for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
            shutil.copy2(state / name, tmp / name)


class Checkpointer:
    """The training states of one run (a (method, scale, seed) under ``out_dir``)."""

    def __init__(
        self,
        out_dir: Path,
        accelerator,
        run_config: dict,
        name: str,
        deepspeed: bool = False,
        log: Callable[[str], None] = print,
    ):
        self.out_dir = Path(out_dir)
        self.root = self.out_dir / RESUME_DIR
        self.accelerator = accelerator
        self.run_config = run_config  # what a kept state must have been written under
        self.name = name  # "<method> seed <seed>", for the log
        self.deepspeed = deepspeed
        self.log = log

    # --- Restore ---

    def restore(self, state: TrainingState) -> Path | None:
        """Load the newest kept state that checks out and was written under this run's config
        into ``state`` (its learner, step and records); the state's folder, or None (the run
        starts at step 0). Damaged and stale states are removed, each named in the log; the
        resume is logged with the folder, the step and how many files were verified."""
        chosen = self.resumable_state()
        if chosen is None or self.discard_if_stale(chosen):
            return None
        # Checked once, in resumable_state: the files are not hashed again here.
        load_state_folder(
            chosen, model=state.policy, optimizer=state.optimizer, scheduler=state.scheduler
        )
        state.step = chosen.step
        if self.deepspeed:
            # Not strict: the state holds the trainable weights only (see save).
            engine = str(self.deepspeed_state(state.step))
            self.accelerator.load_state(engine, load_module_strict=False)
        state.records = RunRecords.read(self.root, state.step)
        self.log(
            f"[train] resuming {self.name} after step {state.step} from {chosen.folder} "
            f"({self._verified(chosen)}; {len(state.records.rows)} metrics rows kept)"
        )
        return chosen.folder

    def _verified(self, chosen: StateCheck) -> str:
        """What the resume's check covered, for its log line."""
        if not chosen.hashed:
            return "written without file hashes: unverified"
        said = f"{chosen.files_verified} files verified by sha256"
        engine = chosen.record.get("extra", {}).get(DEEPSPEED_FILES) if self.deepspeed else None
        if isinstance(engine, dict):
            said += f", and {len(engine)} of its DeepSpeed folder"
        return said

    def resumable_state(self) -> StateCheck | None:
        """The newest kept state that checks out (``_retention.choose``). Damaged states newer
        than it are removed by the main process, each with a log line naming its folder and what
        is wrong; None, logged, when none checks out."""
        extra = self.deepspeed_state_problems if self.deepspeed else None
        choice = choose(self.root, extra)
        for line in choice.messages():
            self.log(f"[train] {line}")
        if choice.damaged:
            # Every process has chosen before the main one removes anything.
            self.accelerator.wait_for_everyone()
            if self.accelerator.is_main_process:
                choice.discard_damaged()
            self.accelerator.wait_for_everyone()
        return choice.state

    def deepspeed_state_problems(self, step: int, check: StateCheck) -> list[str]:
        """A state of a DeepSpeed run resumes only with DeepSpeed's folder of its step, each
        file as the state's record hashed it (states recorded before the hashes: presence)."""
        engine = self.deepspeed_state(step)
        if not engine.is_dir():
            return [f"{engine}: missing (the DeepSpeed engine's state of {check.folder.name})"]
        return companion_problems(check.record.get("extra", {}).get(DEEPSPEED_FILES), engine)

    def discard_if_stale(self, chosen: StateCheck) -> bool:
        """Remove the kept states when ``chosen`` was not made from this config and these
        inputs (a retrained base model or a new training set reruns this job with the old state
        there); True if they were removed. The one config check of a resume."""
        stale = config_differences(chosen.record, self.run_config)
        if not stale:
            return False
        self.log(
            f"[train] discarding the training states in {self.root}: {chosen.folder.name} was "
            f"written under other values: {'; '.join(stale)}"
        )
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            shutil.rmtree(self.root, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        return True

    # --- Save ---

    def save(self, state: TrainingState, export: bool = False) -> None:
        """The training state after ``state.step`` (every process takes part), and with
        ``export`` the declared PEFT folder ``checkpoint-<step>``."""
        accelerator, step = self.accelerator, state.step
        accelerator.wait_for_everyone()
        if self.deepspeed:
            # ZeRO-2 partitions the optimizer moments over the processes: each saves its part.
            # The frozen base weights stay out: they are the base model, an input (at 8B they
            # would add 16 GB to every state).
            accelerator.save_state(str(self.deepspeed_state(step)), exclude_frozen_parameters=True)
            # Every process's part is written before the main one hashes the folder.
            accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            self.write_state(state)
        accelerator.wait_for_everyone()
        if export and accelerator.is_main_process:
            export_adapter(state_dir(self.root, step), self.out_dir / checkpoint_folder(step))

    def write_state(self, state: TrainingState) -> None:
        """The main process's part of ``save``: the records, the state's folder, then the
        retention policy (``_retention.prune``)."""
        step = state.step
        # The records first: a resume keeps their rows up to the newest complete state, so rows
        # of steps after it are harmless, while a state whose records were never written (a
        # kill between the two) would lose the rows of its last steps.
        state.records.write(self.root)
        write_state_folder(
            state_dir(self.root, step),
            model=state.policy,
            optimizer=state.optimizer,
            scheduler=state.scheduler,
            step=step,
            run_config=self.run_config,
            # The engine's folder is hashed into the state's record, so that a resume can tell a
            # damaged partition from the one saved (``deepspeed_state_problems``).
            extra=(
                {DEEPSPEED_FILES: folder_file_record(self.deepspeed_state(step))}
                if self.deepspeed
                else None
            ),
        )
        prune(self.root)

    def deepspeed_state(self, step: int) -> Path:
        """accelerate's folder of the DeepSpeed engine's state after ``step``."""
        return engine_dir(self.root, step)

    # --- The end of the run ---

    def export_missing(self, steps) -> None:
        """The declared checkpoints of ``steps`` whose folder is gone (Snakemake removes a
        killed job's outputs before its rerun; the states keep every adapter). Main process."""
        for step in sorted(steps):
            checkpoint = self.out_dir / checkpoint_folder(step)
            if not (checkpoint / ADAPTER_WEIGHTS).exists():
                export_adapter(state_dir(self.root, step), checkpoint)

    def remove_states(self) -> None:
        """The kept states, and the temporaries of exports and writes killed mid-way (a rerun
        wrote the files whole), once the run's outputs are written. Main process."""
        shutil.rmtree(self.root, ignore_errors=True)
        for child in self.out_dir.iterdir():
            if _LEFTOVER.fullmatch(child.name):
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
