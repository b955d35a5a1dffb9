"""Saving, verifying and restoring a run's ``TrainingState``: the ``Checkpointer``.

Under ``<out_dir>/.resume`` it writes a state after checkpoint steps (and on a preemption notice,
or every ``state_every_minutes``: the recipe says when), exports each checkpoint's PEFT folder
from it, restores the newest state that verifies, discards damaged or stale ones, and keeps
DeepSpeed's engine folders beside their states. The state files themselves are
``checkpointing``'s; which state to take and what to prune, ``state_choice``'s. Every process
calls each method; only the main one writes or removes.

    checkpointer = Checkpointer(out_dir, accelerator, run_config, ...)
    checkpointer.restore(state)              # state.step, learner and records, or step 0
    checkpointer.save(state, export=True)    # and checkpoint-<state.step>/
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path

from dashrepro.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from dashrepro.io import atomic_dir, read_parquet, write_parquet
from dashrepro.layout import TEACHER_CONTEXTS, TOKEN_TRACES, TRAIN_METRICS, checkpoint_folder
from dashrepro.training import checkpointing, state_choice, state_integrity
from dashrepro.training.run_state import RunRecords, TrainingState

#: Folder (in ``out_dir``) of the kept training states and scratch files; not a Snakemake output.
RESUME_DIR = ".resume"
#: The key of a state's ``extra`` that records its DeepSpeed folder's files.
DEEPSPEED_FILES = "deepspeed_files"


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
        seed: int,
        rollouts_per_step: int,
        name: str,
        deepspeed: bool = False,
        log: Callable[[str], None] = print,
    ):
        self.out_dir = Path(out_dir)
        self.root = self.out_dir / RESUME_DIR
        self.accelerator = accelerator
        self.run_config = run_config  # what a kept state must have been written under
        self.seed = seed  # the python RNG a state saves is random.Random(seed)'s
        self.rollouts_per_step = rollouts_per_step  # the data position a state records
        self.name = name  # "<method> seed <seed>", for the log
        self.deepspeed = deepspeed
        self.log = log

    # --- Restore ---

    def restore(self, state: TrainingState) -> Path | None:
        """Load the newest kept state that verifies and was written under this run's config
        into ``state`` (its learner, step and records); the state's folder, or None (the run
        starts at step 0). Damaged and stale states are removed, each named in the log."""
        latest = self.resumable_state()
        if latest is None or self.discard_if_stale(latest):
            return None
        resumed = checkpointing.load_training_state(
            latest,
            model=state.policy,
            optimizer=state.optimizer,
            scheduler=state.scheduler,
            python_rng=random.Random(self.seed),
            run_config=self.run_config,
        )
        state.step = int(resumed["step"])
        if self.deepspeed:
            # Not strict: the state holds the trainable weights only (see save).
            self.accelerator.load_state(
                str(self.deepspeed_state(state.step)), load_module_strict=False
            )
        saved = [self.root / name for name in (TRAIN_METRICS, TOKEN_TRACES, TEACHER_CONTEXTS)]
        state.records = RunRecords.up_to(
            state.step, *(read_parquet(p) if p.exists() else None for p in saved)
        )
        self.log(f"[train] resuming {self.name} after step {state.step} from {latest}")
        return latest

    def resumable_state(self) -> Path | None:
        """The newest kept state that verifies (``state_choice.choose_state``). Damaged states
        newer than it are removed by the main process, each with a log line naming its folder
        and what is wrong; None, logged, when none verifies."""
        extra = self.deepspeed_state_problems if self.deepspeed else None
        choice = state_choice.choose_state(self.root, extra)
        for line in choice.messages():
            self.log(f"[train] {line}")
        if choice.damaged:
            # Every process has chosen before the main one removes anything.
            self.accelerator.wait_for_everyone()
            if self.accelerator.is_main_process:
                choice.discard_damaged()
                if self.deepspeed:
                    for step, _, _ in choice.damaged:
                        shutil.rmtree(self.deepspeed_state(step), ignore_errors=True)
            self.accelerator.wait_for_everyone()
        return choice.state

    def deepspeed_state_problems(self, step: int, folder: Path) -> list[str]:
        """A state of a DeepSpeed run resumes only with DeepSpeed's folder of its step, each
        file as the state's record hashed it (states recorded before the hashes: presence)."""
        engine = self.deepspeed_state(step)
        if not engine.is_dir():
            return [f"{engine}: missing (the DeepSpeed engine's state of {folder.name})"]
        return state_integrity.companion_folder_problems(folder, DEEPSPEED_FILES, engine)

    def discard_if_stale(self, latest: Path) -> bool:
        """Remove the kept states when ``latest`` was not made from this config and these
        inputs (a retrained base model or a new training set reruns this job with the old state
        there); True if they were removed."""
        stale = checkpointing.state_config_differences(latest, self.run_config)
        if not stale:
            return False
        self.log(
            f"[train] discarding the training states in {self.root}: {latest.name} was "
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
            export_adapter(
                state_integrity.state_dir(self.root, step), self.out_dir / checkpoint_folder(step)
            )

    def write_state(self, state: TrainingState) -> None:
        """The main process's part of ``save``: the records, then the state's folder."""
        step, records = state.step, state.records
        # The records first: a resume keeps their rows up to the newest complete state, so rows
        # of steps after it are harmless, while a state whose records were never written (a
        # kill between the two) would lose the rows of its last steps.
        write_parquet(self.root / TRAIN_METRICS, records.metrics())
        traces = records.token_traces()
        if traces is not None:
            write_parquet(self.root / TOKEN_TRACES, traces)
        write_parquet(self.root / TEACHER_CONTEXTS, records.teacher_contexts())
        checkpointing.save_training_state(
            state_integrity.state_dir(self.root, step),
            model=state.policy,
            optimizer=state.optimizer,
            scheduler=state.scheduler,
            step=step,
            data_state={"rollouts_consumed": step * self.rollouts_per_step},
            python_rng=random.Random(self.seed),
            run_config=self.run_config,
            # The engine's folder is hashed into the state's record, so that a resume can tell a
            # damaged partition from the one saved (``deepspeed_state_problems``).
            extra=(
                {DEEPSPEED_FILES: state_integrity.folder_file_record(self.deepspeed_state(step))}
                if self.deepspeed
                else None
            ),
        )
        state_choice.prune_states(self.root, keep_steps=set())
        if self.deepspeed:
            # Like the optimizer files prune_states removes: the two newest complete states (the
            # resume point and its fallback should it turn out damaged) keep their DeepSpeed
            # folders, every other goes (a kill between the two saves can leave one behind).
            steps = {step, *state_choice.newest_complete_steps(self.root)}
            keep = {self.deepspeed_state(s) for s in steps}
            for folder in self.root.glob("deepspeed-step-*"):
                if folder not in keep:
                    shutil.rmtree(folder, ignore_errors=True)

    def deepspeed_state(self, step: int) -> Path:
        """accelerate's folder of the DeepSpeed engine's state after ``step``."""
        return self.root / f"deepspeed-step-{step:06d}"

    # --- The end of the run ---

    def export_missing(self, steps) -> None:
        """The declared checkpoints of ``steps`` whose folder is gone (Snakemake removes a
        killed job's outputs before its rerun; the states keep every adapter). Main process."""
        for step in sorted(steps):
            checkpoint = self.out_dir / checkpoint_folder(step)
            if not (checkpoint / ADAPTER_WEIGHTS).exists():
                export_adapter(state_integrity.state_dir(self.root, step), checkpoint)

    def remove_states(self) -> None:
        """The kept states, once the run's outputs are written. Main process."""
        shutil.rmtree(self.root, ignore_errors=True)
