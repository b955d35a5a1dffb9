"""A run's resumable state as one object: ``TrainingState``, with its records ``RunRecords``.

The recipe owns it and hands it to the ``Checkpointer``, which saves, verifies and restores it:
the learner (the policy and its LoRA adapter, the optimizer's moments, the schedule), the last
finished step, and what the run has recorded up to that step (one metrics row per step, the
weights of every rollout, the traced rollouts' token traces and teacher contexts). ``RunRecords``
writes and reads its own parquet files: beside the kept states while the run goes on, in the
run's folder at the end. Nothing else of the recipe is saved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dashrepro.io import read_parquet, write_parquet
from dashrepro.layout import ROLLOUT_WEIGHTS, TEACHER_CONTEXTS, TOKEN_TRACES, TRAIN_METRICS
from dashrepro.training.metrics import ROLLOUT_COLUMNS
from dashrepro.training.teacher import CONTEXT_COLUMNS

#: The records' files, in the order of ``RunRecords.up_to``'s arguments.
RECORD_FILES = (TRAIN_METRICS, TOKEN_TRACES, TEACHER_CONTEXTS, ROLLOUT_WEIGHTS)


@dataclass
class RunRecords:
    """What a run writes beside its adapters, kept across resumes."""

    rows: list[dict] = field(default_factory=list)  # train_metrics.parquet, one row per step
    traces: list[pd.DataFrame] = field(default_factory=list)  # token_traces.parquet's frames
    contexts: list[pd.DataFrame] = field(default_factory=list)  # teacher_contexts.parquet's
    weights: list[pd.DataFrame] = field(default_factory=list)  # rollout_weights.parquet's

    def metrics(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)

    def token_traces(self) -> pd.DataFrame | None:
        """Every traced token so far (None when nothing was traced)."""
        return pd.concat(self.traces, ignore_index=True) if self.traces else None

    def teacher_contexts(self) -> pd.DataFrame:
        """The traced rollouts' teacher contexts (the columns alone when there are none)."""
        return _frames(self.contexts, CONTEXT_COLUMNS)

    def rollout_weights(self) -> pd.DataFrame:
        """Every rollout's weights so far (the columns alone when there are none)."""
        return _frames(self.weights, ROLLOUT_COLUMNS)

    def write(self, folder: Path) -> None:
        """The records' files in ``folder``, each atomically: ``TRAIN_METRICS``,
        ``TEACHER_CONTEXTS``, ``ROLLOUT_WEIGHTS`` and, when anything was traced,
        ``TOKEN_TRACES``."""
        folder = Path(folder)
        traces = self.token_traces()
        if traces is not None:
            write_parquet(folder / TOKEN_TRACES, traces)
        write_parquet(folder / TEACHER_CONTEXTS, self.teacher_contexts())
        write_parquet(folder / ROLLOUT_WEIGHTS, self.rollout_weights())
        write_parquet(folder / TRAIN_METRICS, self.metrics())

    @classmethod
    def read(cls, folder: Path, step: int) -> RunRecords:
        """The records of steps 1..``step`` among those ``write`` left in ``folder`` (a kill
        after the records' write and before the state's leaves rows of later steps; a missing
        file holds none)."""
        saved = [Path(folder) / name for name in RECORD_FILES]
        return cls.up_to(step, *(read_parquet(p) if p.exists() else None for p in saved))

    @classmethod
    def up_to(
        cls,
        step: int,
        metrics: pd.DataFrame | None,
        traces: pd.DataFrame | None,
        contexts: pd.DataFrame | None,
        weights: pd.DataFrame | None = None,
    ) -> RunRecords:
        """The records of steps 1..``step`` among saved ones (None: no such file, as for the
        rollout weights of a state written before they were recorded)."""
        return cls(
            rows=[] if metrics is None else metrics[metrics["step"] <= step].to_dict("records"),
            traces=[] if traces is None else [traces[traces["step"] <= step]],
            contexts=[] if contexts is None else [contexts[contexts["step"] <= step]],
            weights=[] if weights is None else [weights[weights["step"] <= step]],
        )


def _frames(frames: list[pd.DataFrame], columns) -> pd.DataFrame:
    """The non-empty ``frames`` as one (``columns`` alone when there are none)."""
    kept = [f for f in frames if len(f)]
    if not kept:
        return pd.DataFrame(columns=list(columns))
    return pd.concat(kept, ignore_index=True)


@dataclass
class TrainingState:
    """Everything a resume restores, and nothing more."""

    policy: Any  # the student: the base network with its LoRA adapter (unwrapped)
    optimizer: Any  # AdamW, or distributed.StateInAccelerateFolder under DeepSpeed
    scheduler: Any  # the learning-rate schedule
    step: int = 0  # the last finished step
    records: RunRecords = field(default_factory=RunRecords)
