"""The DASH aggregation math: gates, coefficients, horizons and every aggregation of a rollout.

Read next to the paper's appendix "Aggregation Coefficients and Supervision Horizons":

- DASH: recursion Eq. ``dash_recursion`` / objective Eq. ``dash_objective``, computed through
  the equivalent weighted form Eq. ``dash_weighted_objective`` (``c_1 = 1``,
  ``c_k = 1 + lambda_{k-1} c_{k-1}``), horizons Eq. ``supp_effective_horizon``, gradient
  Eq. ``supp_dash_gradient`` (gates and coefficients are detached);
- inverse-gap control Eq. ``inverse_gap_control``; OPSD Eq. ``opsd_loss``.

Not in the paper, so stated here: Soft-OR is named in the paper without a formula and is
implemented as the standard soft-OR ``1 - (1 - g_H)(1 - g_r)``; PW-OPSD follows its public code
(SaFo-Lab/PW-OPSD). Aggregations require each rollout's real tokens to be one contiguous run
(right or left padding; holes raise ``ValueError``); rollouts with no real token are left out
of the batch mean. The parameters' ranges and defaults: ``registry.AGGREGATION_SPECS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from dashrepro.objectives.masks import _as_bool_mask, _check_rollout_mask, masked_mean
from dashrepro.objectives.registry import AGGREGATION_SPECS

# ----------------------------------------------------------------------------------------------
# Gates, coefficients and horizons (appendix "Aggregation Coefficients and Supervision Horizons")
# ----------------------------------------------------------------------------------------------


def gates_from_gap(x: Tensor, mask: Tensor, kappa: float, sign: float = -1.0) -> Tensor:
    """Propagation gates ``sg[sigmoid(sign * kappa * (x_t - mean_b x))]``, ``[B, T]`` fp32.

    The mean is over each rollout's real tokens (the sequence-level mean ``bar r`` of
    Algorithm ``alg:dash``). ``sign=-1`` is DASH (Eq. ``inverse_gap_control``, left),
    ``sign=+1`` the inverse-gap control (right). Detached; 0 where ``mask`` is 0.
    """
    mask = _as_bool_mask(mask, x.shape)
    with torch.no_grad():
        xf = torch.where(mask, x.detach().float(), torch.zeros((), device=x.device))
        mean = masked_mean(xf, mask, dim=1, keepdim=True)
        gates = torch.sigmoid(sign * kappa * (xf - mean))
        return torch.where(mask, gates, torch.zeros_like(gates))


def _gates_and_mask_f64(gates: Tensor, mask: Tensor) -> tuple[np.ndarray, np.ndarray]:
    g = torch.where(mask, gates.detach(), torch.zeros_like(gates))
    return g.to("cpu", torch.float64).numpy(), mask.to("cpu", torch.float64).numpy()


def coefficients_from_gates(gates: Tensor, mask: Tensor) -> Tensor:
    """Aggregation coefficients of Eq. ``dash_weighted_objective``: ``c_1 = 1``,
    ``c_k = 1 + lambda_{k-1} c_{k-1}``, per rollout; detached fp32 ``[B, T]``, 0 where masked.

    Equivalently ``c_k = sum_{t<=k} prod_{j=t}^{k-1} lambda_j``
    (Eq. ``supp_coefficient_closed_form``). The gate at a rollout's last token is never used.
    The recursion runs in float64 on the CPU (``[B, T]`` is tiny), vectorised over rollouts.
    """
    mask = _check_rollout_mask(_as_bool_mask(mask, gates.shape))
    g, m = _gates_and_mask_f64(gates, mask)
    c = np.zeros_like(g)
    prev_c = np.zeros(g.shape[0])
    prev_g = np.zeros(g.shape[0])
    for k in range(g.shape[1]):
        # A padded predecessor has gate 0, so a rollout's first real token gets c = 1.
        prev_c = m[:, k] * (1.0 + prev_g * prev_c)
        prev_g = g[:, k]
        c[:, k] = prev_c
    return torch.from_numpy(c).to(device=gates.device, dtype=torch.float32)


def horizons_from_gates(gates: Tensor, mask: Tensor) -> Tensor:
    """Effective supervision horizons of Eq. ``supp_effective_horizon``,
    ``h_t = sum_{k>=t} prod_{j=t}^{k-1} lambda_j``, by the backward recursion ``h_T = 1``,
    ``h_t = 1 + lambda_t h_{t+1}``; detached fp32 ``[B, T]``, 0 where masked."""
    mask = _check_rollout_mask(_as_bool_mask(mask, gates.shape))
    g, m = _gates_and_mask_f64(gates, mask)
    h = np.zeros_like(g)
    nxt = np.zeros(g.shape[0])
    for t in range(g.shape[1] - 1, -1, -1):
        # Past a rollout's last token h_{T+1} = 0 (padding), which gives h_T = 1.
        nxt = m[:, t] * (1.0 + g[:, t] * nxt)
        h[:, t] = nxt
    return torch.from_numpy(h).to(device=gates.device, dtype=torch.float32)


def position_weights(
    mask: Tensor, position_w_min: float, position_tau: float, position_s: float
) -> Tensor:
    """PW-OPSD position weights ``w_t = w_min + (1 - w_min) sigmoid((f_t - tau) / s)`` with
    ``f_t = (t - 0.5) / T_b``, ``t`` the 1-based index among the rollout's real tokens and
    ``T_b`` its real length (SaFo-Lab/PW-OPSD). Detached fp32 ``[B, T]``, 0 where masked. The
    parameters' defaults and ranges are declared once, in ``registry.AGGREGATION_SPECS``."""
    mask = _as_bool_mask(mask, mask.shape)
    m = mask.float()
    length = m.sum(1, keepdim=True).clamp(min=1.0)
    frac = (m.cumsum(1) - 0.5) / length
    w = position_w_min + (1.0 - position_w_min) * torch.sigmoid((frac - position_tau) / position_s)
    return torch.where(mask, w, torch.zeros_like(w))


# ----------------------------------------------------------------------------------------------
# Aggregations over one rollout
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Aggregation:
    """Result of :func:`aggregate`.

    ``loss``: scalar, mean over non-empty rollouts of ``(1/T_b) sum_k c_k r_k``;
    ``per_rollout``: ``[B]`` those per-rollout terms (0 for an empty rollout);
    ``coefficients``: detached ``[B, T]`` ``c_k``; ``gates``: detached ``[B, T]`` gates or None;
    ``diagnostics``: floats (means over real tokens).
    """

    loss: Tensor
    per_rollout: Tensor
    coefficients: Tensor
    gates: Tensor | None
    diagnostics: dict[str, float] = field(default_factory=dict)


def _uniform(mask: Tensor) -> Tensor:
    return mask.float()


def _agg_opsd(r, mask, *, teacher_entropy=None):
    """Eq. ``opsd_loss``: ``c_k = 1``."""
    return _uniform(mask), None


def _agg_dash(r, mask, *, teacher_entropy=None, kappa):
    """Eq. ``dash_weighted_objective`` with ``lambda_t = sg[sigmoid(-kappa (r_t - bar r))]``."""
    gates = gates_from_gap(r, mask, kappa, sign=-1.0)
    return coefficients_from_gates(gates, mask), gates


def _agg_fixed_lambda(r, mask, *, teacher_entropy=None, lam):
    """Same recursion with one constant gate ``lambda`` (``lam = 0`` is OPSD)."""
    gates = torch.where(mask, torch.full(mask.shape, lam, device=r.device), 0.0)
    return coefficients_from_gates(gates, mask), gates


def _agg_inverse_gap(r, mask, *, teacher_entropy=None, kappa):
    """Eq. ``inverse_gap_control`` (right): ``lambda_t = sg[sigmoid(+kappa (r_t - bar r))]``."""
    gates = gates_from_gap(r, mask, kappa, sign=+1.0)
    return coefficients_from_gates(gates, mask), gates


def _agg_normalized_dash(r, mask, *, teacher_entropy=None, kappa):
    """DASH's coefficient profile rescaled to per-rollout mean 1 (the OPSD scale)."""
    c, gates = _agg_dash(r, mask, kappa=kappa)
    mean_c = masked_mean(c, mask, dim=1, keepdim=True).clamp(min=1e-12)
    return torch.where(mask, c / mean_c, torch.zeros_like(c)), gates


def _agg_scale_matched_opsd(r, mask, *, teacher_entropy=None, kappa):
    """Uniform coefficients equal to DASH's mean coefficient on the same rollout."""
    c, _ = _agg_dash(r, mask, kappa=kappa)
    mean_c = masked_mean(c, mask, dim=1, keepdim=True)
    return torch.where(mask, mean_c.expand_as(c), torch.zeros_like(c)), None


def _entropy_gates(teacher_entropy, mask, kappa, method):
    if teacher_entropy is None:
        raise ValueError(f"aggregation {method!r} needs teacher_entropy ([B, T] tensor)")
    if tuple(teacher_entropy.shape) != tuple(mask.shape):
        raise ValueError(
            f"{method}: teacher_entropy has shape {tuple(teacher_entropy.shape)}, "
            f"expected {tuple(mask.shape)}"
        )
    # Same sign convention as DASH: above-average entropy closes the boundary.
    return gates_from_gap(teacher_entropy, mask, kappa, sign=-1.0)


def _agg_entropy_gate(r, mask, *, teacher_entropy=None, kappa):
    """Gate input is the teacher-entropy gap ``H_t - mean H``: ``sg[sigmoid(-kappa gap)]``."""
    gates = _entropy_gates(teacher_entropy, mask, kappa, "entropy_gate")
    return coefficients_from_gates(gates, mask), gates


def _agg_soft_or(r, mask, *, teacher_entropy=None, kappa):
    """Soft-OR of the entropy gate and DASH's gap gate: ``1 - (1 - g_H)(1 - g_r)``.

    The paper names Soft-OR without a formula; this is the standard probabilistic OR.
    """
    g_h = _entropy_gates(teacher_entropy, mask, kappa, "soft_or")
    g_r = gates_from_gap(r, mask, kappa, sign=-1.0)
    gates = torch.where(mask, 1.0 - (1.0 - g_h) * (1.0 - g_r), torch.zeros_like(g_h))
    return coefficients_from_gates(gates, mask), gates


def _agg_pw_opsd(r, mask, *, teacher_entropy=None, position_w_min, position_tau, position_s):
    """PW-OPSD: the OPSD signal times a fixed position weight (see :func:`position_weights`)."""
    return position_weights(mask, position_w_min, position_tau, position_s), None


AggregationFn = Callable[..., tuple[Tensor, Tensor | None]]

AGGREGATIONS: dict[str, AggregationFn] = {
    "opsd": _agg_opsd,
    "dash": _agg_dash,
    "fixed_lambda": _agg_fixed_lambda,
    "inverse_gap": _agg_inverse_gap,
    "normalized_dash": _agg_normalized_dash,
    "scale_matched_opsd": _agg_scale_matched_opsd,
    "entropy_gate": _agg_entropy_gate,
    "soft_or": _agg_soft_or,
    "pw_opsd": _agg_pw_opsd,
}


def _lookup(method: str) -> AggregationFn:
    try:
        return AGGREGATIONS[method]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown aggregation method {method!r}; known: {', '.join(sorted(AGGREGATIONS))}"
        ) from None


def aggregation_param_names(method: str) -> set[str]:
    """Hyper-parameter names ``aggregate(method, ...)`` accepts (``teacher_entropy`` excluded)."""
    _lookup(method)
    return set(AGGREGATION_SPECS[method].params)


def _resolved_params(method: str, params: dict) -> dict[str, float]:
    """``params`` checked against the method's declaration (names, ranges), with the declared
    defaults filled in; numbers as floats."""
    declared = AGGREGATION_SPECS[method].params
    for key in params:
        if key not in declared:
            raise ValueError(
                f"aggregation {method!r} does not take parameter {key!r} "
                f"(accepted: {', '.join(sorted(declared)) or 'none'})"
            )
    resolved = {}
    for key, param in declared.items():
        if key not in params and param.default is None:
            raise ValueError(f"aggregation {method!r} requires parameter {key!r}")
        value = params.get(key, param.default)
        why = param.problem(value)
        if why:
            raise ValueError(f"aggregation {method!r}: {key} {why} ({param.describe(key)})")
        resolved[key] = float(value) if param.kind == "number" else int(value)
    return resolved


def _diagnostics(r: Tensor, mask: Tensor, c: Tensor, gates: Tensor | None) -> dict[str, float]:
    with torch.no_grad():
        rd = r.detach().float()
        n = mask.sum().clamp(min=1)
        r_mean = masked_mean(rd, mask)
        r_std = (masked_mean((rd - r_mean) ** 2, mask)).sqrt()
        names = ["r_mean", "r_std", "coef_mean", "coef_max"]
        c_max = torch.where(mask, c, torch.full_like(c, float("-inf"))).max()
        c_max = torch.where(mask.any(), c_max, torch.zeros_like(c_max))
        vals = [r_mean, r_std, torch.where(mask, c, 0.0).sum() / n, c_max]
        if gates is not None:
            names += ["gate_mean", "horizon_mean"]
            vals += [masked_mean(gates, mask), masked_mean(horizons_from_gates(gates, mask), mask)]
        floats = torch.stack([v.float().to(r.device) for v in vals]).tolist()
    return dict(zip(names, floats, strict=True))


def aggregate(
    method: str,
    r: Tensor,
    mask: Tensor,
    *,
    teacher_entropy: Tensor | None = None,
    **params,
) -> Aggregation:
    """Aggregate local signals ``r`` ``[B, T]`` over each rollout with ``method``.

    ``loss = mean_b (1/T_b) sum_k c_k r_k`` over rollouts with ``T_b > 0`` real tokens; the
    coefficients are detached, so gradients flow only through ``r`` (Eq.
    ``supp_dash_gradient``). For DASH this equals the recursion form
    ``(1/T) sum_t A_t`` of Eqs. ``dash_recursion``/``dash_objective``.

    Methods (params): ``opsd``; ``dash`` (kappa); ``fixed_lambda`` (lam); ``inverse_gap``
    (kappa); ``normalized_dash`` (kappa); ``scale_matched_opsd`` (kappa); ``entropy_gate``
    (kappa; needs ``teacher_entropy``); ``soft_or`` (kappa; needs ``teacher_entropy``);
    ``pw_opsd`` (position_w_min, position_tau, position_s). Unknown methods or params raise
    ``ValueError``.
    """
    fn = _lookup(method)
    params = _resolved_params(method, params)
    if r.dim() != 2:
        raise ValueError(f"r must be [B, T], got {tuple(r.shape)}")
    mask = _check_rollout_mask(_as_bool_mask(mask, r.shape))

    c, gates = fn(r, mask, teacher_entropy=teacher_entropy, **params)
    c = c.detach().float()
    gates = None if gates is None else gates.detach().float()

    lengths = mask.sum(1)
    weighted = torch.where(mask, c * r.float(), torch.zeros((), device=r.device))
    per_rollout = weighted.sum(1) / lengths.clamp(min=1)
    valid = (lengths > 0).float()
    loss = (per_rollout * valid).sum() / valid.sum().clamp(min=1.0)
    return Aggregation(
        loss=loss,
        per_rollout=per_rollout,
        coefficients=c,
        gates=gates,
        diagnostics=_diagnostics(r, mask, c, gates),
    )
