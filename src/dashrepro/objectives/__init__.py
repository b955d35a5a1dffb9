"""Loss math for OPSD, DASH, their ablations and the EOPD / PW-OPSD / AVSD / GRPO baselines.

Pure tensor functions, no trainer state: the trainer computes student and teacher logits (or
final hidden states) along a student rollout and calls, per micro-batch, a local signal and an
aggregation (or a baseline's per-token objective). One idea per module: ``signals``,
``divergences``, ``kernels``, ``masks``, ``aggregations``, ``baselines``, ``grpo``. Which
equation of the paper each function computes: docs/objectives.md.

    r = local_signal(student_logits, teacher_logits, mask)           # [B, T] fp32, per token
    agg = aggregate("dash", r, mask, kappa=5.0)                        # Aggregation
    agg.loss.backward()

Tests: ``.venv/bin/pytest tests/objectives -q``; benchmark:
``.venv/bin/python benchmarks/objectives.py --quick``.
"""

from __future__ import annotations

from dashrepro.objectives.aggregations import (
    AGGREGATIONS,
    Aggregation,
    aggregate,
    aggregation_param_names,
    coefficients_from_gates,
    gates_from_gap,
    horizons_from_gates,
    position_weights,
)
from dashrepro.objectives.aggregations import AggregationFn as AggregationFn
from dashrepro.objectives.baselines import avsd_target_logprobs, avsd_token_loss, eopd_token_loss
from dashrepro.objectives.divergences import DIVERGENCES, divergence_summands, topk_tail_logprobs
from dashrepro.objectives.grpo import GRPO_SCALES as GRPO_SCALES
from dashrepro.objectives.grpo import (
    discounted_token_advantages,
    group_advantages,
    grpo_token_loss,
    hybrid_loss,
)
from dashrepro.objectives.masks import masked_mean
from dashrepro.objectives.signals import (
    local_signal,
    local_signal_from_hidden,
    local_signal_reference,
    teacher_entropy,
)

__all__ = [
    "AGGREGATIONS",
    "DIVERGENCES",
    "Aggregation",
    "aggregate",
    "aggregation_param_names",
    "coefficients_from_gates",
    "divergence_summands",
    "avsd_target_logprobs",
    "avsd_token_loss",
    "discounted_token_advantages",
    "eopd_token_loss",
    "gates_from_gap",
    "group_advantages",
    "grpo_token_loss",
    "horizons_from_gates",
    "hybrid_loss",
    "local_signal",
    "local_signal_from_hidden",
    "local_signal_reference",
    "masked_mean",
    "position_weights",
    "teacher_entropy",
    "topk_tail_logprobs",
]
