"""What a run records: ``train_metrics.parquet`` (one row per step), ``rollout_weights.parquet``
(one row per rollout) and ``token_traces.parquet``.

A step's row holds the means of ``METRIC_KEYS`` over its micro-batches and processes (NaN
where a method has none), the sums of ``COUNT_KEYS``, the ``WEIGHT_KEYS`` pooled over the step's
rollouts on every process, each phase's seconds, then ``step``, ``lr``, ``grad_norm`` and
``update_norm`` (NaN under DeepSpeed), ``tokens_per_second`` and ``tracker_failures``. A token's
*weight* is the multiplier of its term in the objective before the batch normalisation
(``MicroLoss.weights``: c_k for DASH and its variants, 1 for OPSD, EOPD and AVSD); its *gate* is
the one ``gate_mean`` averages. docs/training.md ("Records") defines every column.

    tally = StepTally()
    tally.add(micro_result(share, kept, loss, tokens, mask, micro_batch=m))  # per micro-batch
    table = rollout_table(accelerator, tally, device)          # once per step, on every process
    row = reduce_step_metrics(accelerator, tally, device, table)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
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
# Per-step summaries of the tokens' weights and gates, pooled over the step's rollouts.
WEIGHT_KEYS = (
    "gate_high_share",
    "gate_low_share",
    "weight_top3_share",
    "weight_third_1",
    "weight_third_2",
    "weight_third_3",
    "effective_rollouts",
    "rollout_weight_mean",
)
#: A gate at or above GATE_HIGH passes almost all of the next token's coefficient on (the
#: saturated regime of issue 65); at or below GATE_LOW it almost cuts the horizon.
GATE_HIGH = 0.9
GATE_LOW = 0.1
#: The heaviest rollouts whose share of the step's weight ``weight_top3_share`` is.
TOP_ROLLOUTS = 3
#: The columns of ``rollout_weights.parquet``, one row per rollout trained on.
ROLLOUT_COLUMNS = (
    "step",
    "micro_batch",  # the step-wide micro-batch index (BatchLayout.global_micro)
    "rollout",  # its index in the micro-batch's share (empty rollouts are left out)
    "response_length",
    "reward",
    "weight_mean",
    "weight_total",
    "weight_third_1",
    "weight_third_2",
    "weight_third_3",
    "gate_median",
    "gate_high_share",
    "gate_low_share",
)
# The per-rollout table's columns (sums, so that processes and micro-batches pool exactly).
_TABLE = (
    "micro_batch",
    "rollout",
    "length",
    "reward",
    "weight_total",
    "third_1",
    "third_2",
    "third_3",
    "gate_median",
    "gate_high",
    "gate_low",
    "gated",
)
_COL = {name: i for i, name in enumerate(_TABLE)}


@dataclass
class MicroResult:
    """What one micro-batch contributes to its step: counts, metrics, and its token trace
    (None when every rollout was empty)."""

    counts: dict[str, float]
    metrics: dict[str, float]
    trace: dict[str, Any] | None
    rollouts: torch.Tensor | None = None  # rollout_weight_table's rows of its rollouts


@dataclass
class StepTally:
    """One process's running record of the current step."""

    timings: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0.0))
    micro_metrics: list[dict[str, float]] = field(default_factory=list)
    rollout_tables: list[torch.Tensor] = field(default_factory=list)
    update_norm: float = math.nan  # the optimizer step's parameter_change_norm

    def add(self, result: MicroResult) -> None:
        for key in COUNT_KEYS:
            self.sums[key] += result.counts.get(key, 0.0)
        if result.metrics:
            self.micro_metrics.append(result.metrics)
        if result.rollouts is not None:
            self.rollout_tables.append(result.rollouts)


def micro_counts(share: Share, kept: list[int], mask: torch.Tensor | None) -> dict[str, float]:
    """COUNT_KEYS of a micro-batch whose rollouts ``kept`` were used (``mask``: their tokens)."""
    return {
        "skipped_long_prompts": float(share.skipped_long_prompts),
        "empty_rollouts": float(len(share.samples) - len(kept)),
        "rollouts": float(len(kept)),
        "tokens": 0.0 if mask is None else float(mask.sum()),
    }


def micro_result(
    share: Share, kept: list[int], result: MicroLoss, tokens, mask, *, micro_batch: int
) -> MicroResult:
    """What a micro-batch (step-wide index ``micro_batch``) whose rollouts ``kept`` were
    trained on adds to its step."""
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
    rollouts = rollout_weight_table(
        result.weights, mask, result.trace.get("gate"), micro_batch, kept, trace["rewards"]
    )
    return MicroResult(micro_counts(share, kept, mask), metrics, trace, rollouts)


def rollout_weight_table(
    weights: torch.Tensor | None,
    mask: torch.Tensor,
    gates: torch.Tensor | None,
    micro_batch: int,
    rollouts: list[int],
    rewards: list[float],
) -> torch.Tensor:
    """One float64 row per rollout of a micro-batch (columns ``_TABLE``): its length, reward,
    total weight and each third's weight, median gate and counts of high and low gates.

    ``weights``, ``mask`` and ``gates`` are [B, T] (``weights`` None: the weight columns are
    NaN; ``gates`` None: the gate columns are NaN and no token counts as gated); ``rollouts``
    and ``rewards`` name the B rows. Computed on detached CPU copies: the loss never sees it.
    """
    m = mask.detach().to("cpu").bool().numpy()
    if len(rollouts) != m.shape[0] or len(rewards) != m.shape[0]:
        raise ValueError(
            f"rollout_weight_table: {m.shape[0]} rollouts in the mask, but "
            f"{len(rollouts)} rollout indices and {len(rewards)} rewards"
        )
    length = m.sum(1)
    if weights is None:
        w = np.full(m.shape, np.nan)
    else:
        if tuple(weights.shape) != m.shape:
            raise ValueError(
                f"token weights have shape {tuple(weights.shape)}, expected {m.shape} (the mask's)"
            )
        w = np.where(m, weights.detach().to("cpu", torch.float64).numpy(), 0.0)
    # Position among the rollout's real tokens (0-based), and the third its centre falls in.
    position = np.cumsum(m, axis=1) - 1
    third = np.minimum(np.floor(3.0 * (position + 0.5) / np.maximum(length, 1)[:, None]), 2)
    columns = {
        "micro_batch": np.full(m.shape[0], float(micro_batch)),
        "rollout": np.asarray(rollouts, dtype=float),
        "length": length.astype(float),
        "reward": np.asarray(rewards, dtype=float),
        "weight_total": w.sum(1),
        **{f"third_{j + 1}": np.where(m & (third == j), w, 0.0).sum(1) for j in range(3)},
    }
    if gates is None:
        nan = np.full(m.shape[0], np.nan)
        columns.update(gate_median=nan, gate_high=nan, gate_low=nan, gated=np.zeros(m.shape[0]))
    else:
        gates = gates.detach().to("cpu")
        g = gates.to(torch.float64).numpy()
        # Compared in the gates' own precision: fixed-lambda's fp32 gate 0.9 is >= 0.9 there,
        # while its float64 value (0.89999998) would not be.
        high, low = (gates >= GATE_HIGH).numpy(), (gates <= GATE_LOW).numpy()
        columns.update(
            gate_median=np.array(
                [np.median(g[b, m[b]]) if length[b] else np.nan for b in range(m.shape[0])]
            ),
            gate_high=(m & high).sum(1).astype(float),
            gate_low=(m & low).sum(1).astype(float),
            gated=length.astype(float),
        )
    return torch.from_numpy(np.stack([columns[name] for name in _TABLE], axis=1))


def rollout_table(accelerator, tally: StepTally, device) -> torch.Tensor:
    """The step's rollout_weight_table rows from every process, ordered by (micro-batch,
    rollout) -- the same table on 1 process or N. A collective: every process calls it."""
    empty = torch.zeros((0, len(_TABLE)), dtype=torch.float64)
    local = torch.cat(tally.rollout_tables) if tally.rollout_tables else empty
    if accelerator.num_processes > 1:
        # Processes may hold different numbers of rollouts (empty ones are left out): pad to
        # the largest count, gather, and cut each process's rows back out.
        counts = accelerator.gather(torch.tensor([local.shape[0]], device=device)).cpu()
        width = max(int(counts.max()), 1)
        padded = torch.full((width, len(_TABLE)), math.nan, dtype=torch.float64)
        padded[: local.shape[0]] = local
        gathered = accelerator.gather(padded.to(device)[None]).cpu()  # [world, width, K]
        local = torch.cat([gathered[r, : int(n)] for r, n in enumerate(counts.tolist())])
    table = local.numpy()
    order = np.lexsort((table[:, _COL["rollout"]], table[:, _COL["micro_batch"]]))
    return torch.from_numpy(table[order].copy())


def weight_summary(table: torch.Tensor) -> dict[str, float]:
    """``WEIGHT_KEYS`` of a step's rollout table (NaN where there is nothing to divide by)."""
    t = table.numpy()
    nan = math.nan
    total = t[:, _COL["weight_total"]]
    s, s2 = float(total.sum()), float((total**2).sum())
    gated = float(t[:, _COL["gated"]].sum())
    thirds = [float(t[:, _COL[f"third_{j}"]].sum()) for j in (1, 2, 3)]
    heaviest = float(np.sort(total)[-TOP_ROLLOUTS:].sum()) if len(total) else nan
    positive = s > 0  # False for NaN too
    return {
        "gate_high_share": float(t[:, _COL["gate_high"]].sum()) / gated if gated else nan,
        "gate_low_share": float(t[:, _COL["gate_low"]].sum()) / gated if gated else nan,
        "weight_top3_share": heaviest / s if positive else nan,
        **{f"weight_third_{j}": thirds[j - 1] / s if positive else nan for j in (1, 2, 3)},
        "effective_rollouts": s * s / s2 if s2 > 0 else nan,
        "rollout_weight_mean": s / len(total) if len(total) else nan,
    }


def rollout_frame(table: torch.Tensor, step: int) -> pd.DataFrame:
    """``rollout_weights.parquet``'s rows (``ROLLOUT_COLUMNS``) of a step's rollout table."""
    t = table.numpy()
    col = {name: t[:, i] for i, name in enumerate(_TABLE)}
    total, length, gated = col["weight_total"], col["length"], col["gated"]
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = {f"weight_third_{j}": col[f"third_{j}"] / total for j in (1, 2, 3)}
        high = np.where(gated > 0, col["gate_high"] / gated, np.nan)
        low = np.where(gated > 0, col["gate_low"] / gated, np.nan)
        mean = total / length
    frame = pd.DataFrame(
        {
            "step": np.full(len(t), step, dtype=np.int64),
            "micro_batch": col["micro_batch"].astype(np.int64),
            "rollout": col["rollout"].astype(np.int64),
            "response_length": length.astype(np.int64),
            "reward": col["reward"],
            "weight_mean": mean,
            "weight_total": total,
            **shares,
            "gate_median": col["gate_median"],
            "gate_high_share": high,
            "gate_low_share": low,
        }
    )
    return frame[list(ROLLOUT_COLUMNS)]


def parameter_change_norm(params, before: list[torch.Tensor]) -> float:
    """The L2 norm of ``params``' change since ``before`` (their detached copies, same
    order): the size of an optimizer update, computed in float64 beside the training."""
    with torch.no_grad():
        squares = [
            (p.detach().double() - b.double()).pow(2).sum().cpu()
            for p, b in zip(params, before, strict=True)
        ]
    return float(torch.stack(squares).sum().sqrt()) if squares else math.nan


def reduce_step_metrics(
    accelerator, tally: StepTally, device, table: torch.Tensor | None = None
) -> dict[str, float]:
    """Means of METRIC_KEYS over micro-batches and processes; sums of COUNT_KEYS; WEIGHT_KEYS
    of the step's rollout ``table`` (``rollout_table``'s, gathered here when not given);
    timings."""
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
    if table is None:
        table = rollout_table(accelerator, tally, device)
    row.update(weight_summary(table))
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
