"""Loss math for OPSD, DASH, their ablations and the EOPD / PW-OPSD / AVSD / GRPO baselines.

Pure tensor functions, no trainer state. The trainer computes student and teacher logits (or
final hidden states) along a student rollout and calls, per micro-batch,

    r = local_signal(student_logits, teacher_logits, mask)           # [B, T] fp32, per token
    agg = aggregate("dash", r, mask, kappa=5.0)                        # Aggregation
    agg.loss.backward()

Paper: "DASH: divergence-adaptive supervision horizons" (equation labels are the paper's):

- local signal: forward-KL summand ``l_{t,v}`` of Eq. ``local_distillation_loss`` with the
  per-entry upper clip of Eq. ``supp_clipped_signal``: ``r_t = sum_v min(l_{t,v}, tau)``;
- DASH: recursion Eq. ``dash_recursion`` / objective Eq. ``dash_objective``, computed through
  the equivalent weighted form Eq. ``dash_weighted_objective``, horizons
  Eq. ``supp_effective_horizon``, gradient Eq. ``supp_dash_gradient``;
- inverse-gap control Eq. ``inverse_gap_control``; OPSD Eq. ``opsd_loss``;
- outcome-level hybrid with a GRPO term, appendix ``sec:outcome_optimization``.

Modules, one idea each:

- :mod:`.signals`: the public local signals (chunked, from hidden states, naive reference) and
  the teacher entropy;
- :mod:`.divergences`: per-row divergence summands and the top-k tail support;
- :mod:`.kernels`: the chunked custom-autograd machinery with recomputation in the backward;
- :mod:`.masks`: mask and shape checks, the masked mean;
- :mod:`.aggregations`: gates, coefficients, horizons and the aggregation registry;
- :mod:`.baselines`: EOPD and AVSD;
- :mod:`.grpo`: GRPO advantages, the GRPO token loss and the hybrid loss.

Shapes: logits ``[B, T, V]`` (bf16 or fp32; all arithmetic is fp32), ``mask`` ``[B, T]`` with 1
for real generated tokens (EOS included) and 0 for padding. Teacher inputs are always detached.

Tests:      ``.venv/bin/pytest tests/objectives -q``  (CPU, well under a minute)
Benchmark:  ``.venv/bin/python benchmarks/objectives.py --quick``
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
