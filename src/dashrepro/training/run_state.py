"""A run's resumable state as one object: ``TrainingState``, with its records ``RunRecords``.

The recipe owns it and hands it to the ``checkpointer``, which saves, verifies and restores it:
the learner (the policy and its LoRA adapter, the optimizer's moments, the schedule), the last
finished step, and what the run has recorded up to that step (one metrics row per step, the
traced rollouts' token traces and teacher contexts). Nothing else of the recipe is saved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dashrepro.training.teacher import CONTEXT_COLUMNS


@dataclass
class RunRecords:
    """What a run writes beside its adapters, kept across resumes."""

    rows: list[dict] = field(default_factory=list)  # train_metrics.parquet, one row per step
    traces: list[pd.DataFrame] = field(default_factory=list)  # token_traces.parquet's frames
    contexts: list[pd.DataFrame] = field(default_factory=list)  # teacher_contexts.parquet's

    def metrics(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)

    def token_traces(self) -> pd.DataFrame | None:
        """Every traced token so far (None when nothing was traced)."""
        return pd.concat(self.traces, ignore_index=True) if self.traces else None

    def teacher_contexts(self) -> pd.DataFrame:
        """The traced rollouts' teacher contexts (the columns alone when there are none)."""
        frames = [f for f in self.contexts if len(f)]
        if not frames:
            return pd.DataFrame(columns=list(CONTEXT_COLUMNS))
        return pd.concat(frames, ignore_index=True)

    @classmethod
    def up_to(
        cls,
        step: int,
        metrics: pd.DataFrame | None,
        traces: pd.DataFrame | None,
        contexts: pd.DataFrame | None,
    ) -> RunRecords:
        """The records of steps 1..``step`` among saved ones (a kill can leave later rows)."""
        return cls(
            rows=[] if metrics is None else metrics[metrics["step"] <= step].to_dict("records"),
            traces=[] if traces is None else [traces[traces["step"] <= step]],
            contexts=[] if contexts is None else [contexts[contexts["step"] <= step]],
        )


@dataclass
class TrainingState:
    """Everything a resume restores, and nothing more."""

    policy: Any  # the student: the base network with its LoRA adapter (unwrapped)
    optimizer: Any  # AdamW, or distributed.StateInAccelerateFolder under DeepSpeed
    scheduler: Any  # the learning-rate schedule
    step: int = 0  # the last finished step
    records: RunRecords = field(default_factory=RunRecords)
