"""A run's resumable training states, as the recipe keeps them: ``TrainingStates``.

Under ``<out_dir>/.resume`` the recipe writes a state after checkpoint steps (and on a
preemption notice, or every ``state_every_minutes``), exports each checkpoint's PEFT folder from
it, resumes from the newest state that verifies, discards damaged or stale ones, and keeps
DeepSpeed's engine folders beside their states. The state files themselves are
``checkpointing``'s; which state to take and what to prune, ``state_choice``'s.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pandas as pd

from dashrepro.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from dashrepro.io import atomic_dir, read_parquet, write_parquet
from dashrepro.layout import TEACHER_CONTEXTS, TOKEN_TRACES, TRAIN_METRICS, checkpoint_folder
from dashrepro.training import checkpointing, state_choice, state_integrity

#: Folder (in ``out_dir``) of the kept training states and scratch files; not a Snakemake output.
RESUME_DIR = ".resume"
#: The key of a state's ``extra`` that records its DeepSpeed folder's files.
DEEPSPEED_FILES = "deepspeed_files"


def export_adapter(state: Path, checkpoint: Path) -> None:
    """The declared PEFT checkpoint folder, copied from a training state's adapter files."""
    with atomic_dir(checkpoint) as tmp:
        for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
            shutil.copy2(state / name, tmp / name)


class TrainingStates:
    """The state-keeping half of ``recipe.DistillationRecipe`` (which it is mixed into): it
    reads the recipe's accelerator, model, optimizer, schedule, records, ``tracking`` and
    ``resume_root``."""

    def _resumable_state(self) -> Path | None:
        """The newest kept state that verifies (``state_choice.choose_state``). Damaged states
        newer than it are removed by the main process, each with a log line naming its folder
        and what is wrong; None, logged, when none verifies (the run starts at step 0)."""
        extra = self._deepspeed_state_problems if self.deepspeed else None
        choice = state_choice.choose_state(self.resume_root, extra)
        for line in choice.messages():
            self.log(f"[train] {line}")
        if choice.damaged:
            # Every process has chosen before the main one removes anything.
            self.accelerator.wait_for_everyone()
            if self.accelerator.is_main_process:
                choice.discard_damaged()
                if self.deepspeed:
                    for step, _, _ in choice.damaged:
                        shutil.rmtree(self._deepspeed_state(step), ignore_errors=True)
            self.accelerator.wait_for_everyone()
        return choice.state

    def _deepspeed_state_problems(self, step: int, folder: Path) -> list[str]:
        """A state of a DeepSpeed run resumes only with DeepSpeed's folder of its step, each
        file as the state's record hashed it (states recorded before the hashes: presence)."""
        engine = self._deepspeed_state(step)
        if not engine.is_dir():
            return [f"{engine}: missing (the DeepSpeed engine's state of {folder.name})"]
        return state_integrity.companion_folder_problems(folder, DEEPSPEED_FILES, engine)

    def _discard_if_stale(self, latest: Path) -> bool:
        """Remove the kept states when ``latest`` was not made from this config and these
        inputs (a retrained base model or a new training set reruns this job with the old state
        there); True if they were removed."""
        stale = checkpointing.state_config_differences(latest, self.run_config)
        if not stale:
            return False
        self.log(
            f"[train] discarding the training states in {self.resume_root}: {latest.name} was "
            f"written under other values: {'; '.join(stale)}"
        )
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            shutil.rmtree(self.resume_root, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        return True

    def _resume(self, latest: Path) -> None:
        resumed = checkpointing.load_training_state(
            latest,
            model=self.policy,
            optimizer=self.optimizer_state,
            scheduler=self.scheduler,
            python_rng=random.Random(self.seed),
            run_config=self.run_config,
        )
        self.step = int(resumed["step"])
        if self.deepspeed:
            # Not strict: the state holds the trainable weights only (see save_checkpoint).
            self.accelerator.load_state(
                str(self._deepspeed_state(self.step)), load_module_strict=False
            )
        if (self.resume_root / TRAIN_METRICS).exists():
            done = read_parquet(self.resume_root / TRAIN_METRICS)
            self.rows = done[done["step"] <= self.step].to_dict("records")
        if (self.resume_root / TOKEN_TRACES).exists():
            done = read_parquet(self.resume_root / TOKEN_TRACES)
            self.traces = [done[done["step"] <= self.step]]
        if (self.resume_root / TEACHER_CONTEXTS).exists():
            done = read_parquet(self.resume_root / TEACHER_CONTEXTS)
            self.contexts = [done[done["step"] <= self.step]]
        self.log(
            f"[train] resuming {self.method.name} seed {self.seed} after step {self.step} "
            f"from {latest}"
        )

    def save_checkpoint(self, step: int) -> None:
        """The training state after ``step`` (every process takes part), and on a checkpoint
        step the declared PEFT folder ``checkpoint-<step>``."""
        accelerator = self.accelerator
        # The steps kept for W&B go out before the state that a resume would start after.
        self.tracking.flush(self.rows)
        accelerator.wait_for_everyone()
        if self.deepspeed:
            # ZeRO-2 partitions the optimizer moments over the processes: each saves its part.
            # The frozen base weights stay out: they are the base model, an input (at 8B they
            # would add 16 GB to every state).
            accelerator.save_state(str(self._deepspeed_state(step)), exclude_frozen_parameters=True)
            # Every process's part is written before the main one hashes the folder.
            accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            self._write_state(step)
        accelerator.wait_for_everyone()
        if step in self.save_at and accelerator.is_main_process:
            export_adapter(
                state_integrity.state_dir(self.resume_root, step),
                self.out_dir / checkpoint_folder(step),
            )

    def _write_state(self, step: int) -> None:
        # The records first: a resume keeps their rows up to the newest complete state, so rows
        # of steps after it are harmless, while a state whose records were never written (a
        # kill between the two) would lose the rows of its last steps.
        write_parquet(self.resume_root / TRAIN_METRICS, pd.DataFrame(self.rows))
        if self.traces:
            write_parquet(self.resume_root / TOKEN_TRACES, pd.concat(self.traces))
        write_parquet(self.resume_root / TEACHER_CONTEXTS, self._context_records())
        checkpointing.save_training_state(
            state_integrity.state_dir(self.resume_root, step),
            model=self.policy,
            optimizer=self.optimizer_state,
            scheduler=self.scheduler,
            step=step,
            data_state={
                "rollouts_consumed": step * self.layout.micros_per_step * self.layout.micro
            },
            python_rng=random.Random(self.seed),
            run_config=self.run_config,
            # The engine's folder is hashed into the state's record, so that a resume can tell a
            # damaged partition from the one saved (``_deepspeed_state_problems``).
            extra=(
                {DEEPSPEED_FILES: state_integrity.folder_file_record(self._deepspeed_state(step))}
                if self.deepspeed
                else None
            ),
        )
        state_choice.prune_states(self.resume_root, keep_steps=set())
        if self.deepspeed:
            # Like the optimizer files prune_states removes: the two newest complete states (the
            # resume point and its fallback should it turn out damaged) keep their DeepSpeed
            # folders, every other goes (a kill between the two saves can leave one behind).
            steps = {step, *state_choice.newest_complete_steps(self.resume_root)}
            keep = {self._deepspeed_state(s) for s in steps}
            for folder in self.resume_root.glob("deepspeed-step-*"):
                if folder not in keep:
                    shutil.rmtree(folder, ignore_errors=True)

    def _deepspeed_state(self, step: int) -> Path:
        """accelerate's folder of the DeepSpeed engine's state after ``step``."""
        return self.resume_root / f"deepspeed-step-{step:06d}"
