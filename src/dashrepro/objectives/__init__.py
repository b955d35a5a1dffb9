"""Loss math for OPSD, DASH, their ablations and the EOPD / PW-OPSD / AVSD / GRPO baselines.

Pure tensor functions, no trainer state: the trainer computes student and teacher logits (or
final hidden states) along a student rollout and calls, per micro-batch, a local signal and an
aggregation (or a baseline's per-token objective). One idea per module: ``registry`` (what each
aggregation, divergence and objective declares; torch-free), ``signals``, ``divergences``,
``kernels``, ``masks``, ``aggregations``, ``baselines``, ``grpo``. Importing the package loads
no torch: each name below loads its module on first use, so config validation can read
``registry`` at Snakemake's parse. Which equation each function computes: docs/objectives.md.

    r = local_signal(student_logits, teacher_logits, mask)           # [B, T] fp32, per token
    agg = aggregate("dash", r, mask, kappa=5.0)                        # Aggregation
    agg.loss.backward()

Tests: tests/objectives; benchmark: ``.venv/bin/python benchmarks/objectives.py --quick``.
"""

from __future__ import annotations

import importlib

#: Each public name and the module that defines it, loaded on first use (PEP 562).
_HOMES = {
    "aggregations": ("AGGREGATIONS", "Aggregation", "AggregationFn", "aggregate",
                     "aggregation_param_names", "coefficients_from_gates", "gates_from_gap",
                     "horizons_from_gates", "position_weights"),
    "baselines": ("avsd_target_logprobs", "avsd_token_loss", "eopd_token_loss"),
    "divergences": ("DIVERGENCES", "divergence_summands", "topk_tail_logprobs"),
    "grpo": ("GRPO_SCALES", "discounted_token_advantages", "group_advantages",
             "grpo_token_loss", "hybrid_loss"),
    "masks": ("masked_mean",),
    "signals": ("local_signal", "local_signal_from_hidden", "local_signal_reference",
                "teacher_entropy"),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
