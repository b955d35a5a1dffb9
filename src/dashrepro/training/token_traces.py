"""Tracing a step's rollouts, apart from learning from them: the ``RolloutTracer``.

On step 1 and every checkpoint step, the first ``trace_rollouts`` rollouts of micro-batch 0 are
traced: their teacher contexts (``teacher.context_frame``), and per token the method's own
signals (r_t, the teacher's entropy, the gates and c_k, from the loss) with the unclipped
forward KL D_t of the motivation figure (``metrics.trace_frame``). The tracer adds them to the
run's ``RunRecords``; the learning step only hands it what it computed.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from dashrepro import objectives
from dashrepro.training.metrics import trace_frame
from dashrepro.training.resume import RunRecords
from dashrepro.training.teacher import context_frame


class RolloutTracer:
    """Which rollouts a run traces, and what it records of them."""

    def __init__(self, steps: Iterable[int], rollouts: int, temperature: float):
        self.steps = set(steps)  # the traced steps
        self.rollouts = rollouts  # traced rollouts of micro-batch 0
        self.temperature = temperature  # the loss temperature D_t is measured at

    def traces(self, step: int, global_micro: int) -> bool:
        """Whether this micro-batch of this step is traced."""
        return step in self.steps and global_micro == 0

    def add_contexts(self, records: RunRecords, tokenizer, step: int, method, share, kept,
                     contexts) -> None:  # fmt: skip
        """The teacher contexts of the traced rollouts among ``kept`` (a share's indices)."""
        traced = kept[: self.rollouts]
        analyses = None if share.analyses is None else [share.analyses[i] for i in traced]
        records.contexts.append(
            context_frame(
                tokenizer,
                step,
                method,
                [share.ids[i] for i in traced],
                contexts[: len(traced)],
                analyses,
            )  # fmt: skip
        )

    def divergence(self, student_logits, view_logits, mask) -> torch.Tensor:
        """The unclipped forward KL D_t per token of the traced rollouts (the motivation
        figure's D_t, whatever the method's own signal, clip or objective), at the loss
        temperature."""
        n = min(self.rollouts, student_logits.shape[0])
        with torch.no_grad():
            return objectives.local_signal(
                student_logits[:n].detach() / self.temperature,
                view_logits[0][:n] / self.temperature,
                mask[:n],
                divergence="forward_kl",
                tau=None,
            )

    def add_trace(self, records: RunRecords, trace, step: int) -> None:
        """One row per real token of the traced rollouts of a micro-batch's trace."""
        records.traces.append(trace_frame(trace, step, self.rollouts))
