"""What a run records: ``train_metrics.parquet`` (one row per step) and ``token_traces.parquet``.

A step's row holds the means of ``METRIC_KEYS`` over its micro-batches and processes (NaN
where a method has none: ``grpo_loss`` without GRPO, ``gate_mean`` for OPSD, ...), the sums of
``COUNT_KEYS``, the seconds of each phase (``seconds_rollout``, ``seconds_teacher``,
``seconds_student``, ``seconds_optimizer``), then ``step``, ``lr``, ``grad_norm`` (NaN under
DeepSpeed), ``tokens_per_second`` and ``tracker_failures`` (``step_tracking``). The traces hold, for the first rollouts of step 1 and of
every checkpoint step, one row per token: r_t, the teacher entropy, the gate and c_k, from which
the paper's motivation figure (D_t against the mean future divergence) is drawn.

    tally = StepTally()
    tally.add(micro_result(share, kept, loss, tokens, mask))  # once per micro-batch
    row = reduce_step_metrics(accelerator, tally, device)     # once per step, on every process
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from dashrepro.objectives.registry import OBJECTIVES

#: AVSD's teacher views, whose advantages the step rows carry.
AVSD_VIEWS = OBJECTIVES["avsd"].teacher_views

if TYPE_CHECKING:
    from dashrepro.training.losses import MicroLoss
    from dashrepro.training.rollouts import Share

# Per-step metrics averaged over micro-batches and processes (NaN where a method has none).
METRIC_KEYS = (
    "loss",
    "distill_loss",
    "grpo_loss",
    "r_mean",
    "r_std",
    "coef_mean",
    "coef_max",
    "gate_mean",
    "horizon_mean",
    "response_length",
    "truncated_fraction",
    "rollout_accuracy",
    "reward_mean",
    # AVSD: each teacher view's mean advantage over the sampled tokens (losses.avsd_loss).
    *(f"advantage_{view}" for view in AVSD_VIEWS),
)
# Per-step counts summed over micro-batches and processes.
COUNT_KEYS = ("rollouts", "tokens", "empty_rollouts", "skipped_long_prompts")
# The phases of a step, timed on each process (seconds_<phase> columns, in this order).
PHASES = ("rollout", "teacher", "student", "optimizer")


@dataclass
class MicroResult:
    """What one micro-batch contributes to its step: counts, metrics, and its token trace
    (None when every rollout was empty)."""

    counts: dict[str, float]
    metrics: dict[str, float]
    trace: dict[str, Any] | None


@dataclass
class StepTally:
    """One process's running record of the current step."""

    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0.0))
    micro_metrics: list[dict[str, float]] = field(default_factory=list)

    def add(self, result: MicroResult) -> None:
        for key in COUNT_KEYS:
            self.sums[key] += result.counts.get(key, 0.0)
        if result.metrics:
            self.micro_metrics.append(result.metrics)


def micro_counts(share: Share, kept: list[int], mask: torch.Tensor | None) -> dict[str, float]:
    """COUNT_KEYS of a micro-batch whose rollouts ``kept`` were used (``mask``: their tokens)."""
    return {
        "skipped_long_prompts": float(share.skipped_long_prompts),
        "empty_rollouts": float(len(share.samples) - len(kept)),
        "rollouts": float(len(kept)),
        "tokens": 0.0 if mask is None else float(mask.sum()),
    }


def micro_result(share: Share, kept: list[int], result: MicroLoss, tokens, mask) -> MicroResult:
    """What a micro-batch whose rollouts ``kept`` were trained on adds to its step."""
    correct = [share.rewards[i] for i in kept]
    metrics = dict(result.metrics)
    metrics.update(
        response_length=float(mask.sum(1).mean()),
        truncated_fraction=sum(share.samples[i].finish_reason == "length" for i in kept)
        / len(kept),
        rollout_accuracy=sum(correct) / len(correct),
        reward_mean=sum(correct) / len(correct),
    )
    trace = {
        **{k: v.detach().cpu() for k, v in result.trace.items()},
        "mask": mask.cpu(),
        "tokens": tokens.cpu(),
        "problem_ids": [share.ids[i] for i in kept],
        "rewards": [float(share.rewards[i]) for i in kept],
    }
    return MicroResult(micro_counts(share, kept, mask), metrics, trace)


def reduce_step_metrics(accelerator, tally: StepTally, device) -> dict[str, float]:
    """Means of METRIC_KEYS over micro-batches and processes; sums of COUNT_KEYS; timings."""
    means = [
        float(pd.Series([m.get(k, math.nan) for m in tally.micro_metrics], dtype=float).mean())
        if tally.micro_metrics
        else math.nan
        for k in METRIC_KEYS
    ]
    values = torch.tensor([*means, *(tally.sums[k] for k in COUNT_KEYS)], dtype=torch.float64)
    if accelerator.num_processes > 1:
        gathered = accelerator.gather(values.to(device)[None]).cpu()  # [world, K]
        n = len(METRIC_KEYS)
        means_t = torch.nanmean(gathered[:, :n], dim=0)
        counts_t = gathered[:, n:].sum(0)
        values = torch.cat([means_t, counts_t])
    row = dict(zip([*METRIC_KEYS, *COUNT_KEYS], values.tolist(), strict=True))
    row.update({f"seconds_{k}": v for k, v in tally.timings.items()})
    return row


def trace_frame(trace: Mapping[str, Any], step: int, n_rollouts: int) -> pd.DataFrame:
    """One row per real token of the first ``n_rollouts`` rollouts of a micro-batch's trace."""
    mask = trace["mask"][:n_rollouts].bool()
    rows = []
    for b in range(mask.shape[0]):
        for t in range(int(mask[b].sum())):
            row = {
                "step": step,
                "rollout": b,
                "problem_id": trace["problem_ids"][b],
                "reward": trace["rewards"][b] if "rewards" in trace else math.nan,
                "position": t,
                "token_id": int(trace["tokens"][b, t]),
            }
            for key in ("r", "divergence", "teacher_entropy", "gate", "coefficient"):
                if key in trace and b < trace[key].shape[0]:
                    row[key] = float(trace[key][b, t])
            rows.append(row)
    return pd.DataFrame(rows)
