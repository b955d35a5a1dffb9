"""The EOPD and AVSD baselines, ported from their public code (SaFo-Lab/PW-OPSD, duykhuongnguyen/AVSD).

EOPD follows SaFo-Lab/PW-OPSD ``ea_opsd_trainer.py`` and runs on the chunked kernels of
:mod:`.kernels`; AVSD follows duykhuongnguyen/AVSD ``src/avsd/common/multiview_distill.py``
and works on sampled-token log-probs only.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from dashrepro.objectives.divergences import _check_top_k
from dashrepro.objectives.kernels import _auto_chunk, _RowOp, _run_chunked
from dashrepro.objectives.masks import _as_bool_mask, _check_pair

# ----------------------------------------------------------------------------------------------
# EOPD baseline (Jin et al. 2026, as reimplemented in SaFo-Lab/PW-OPSD ea_opsd_trainer.py)
# ----------------------------------------------------------------------------------------------

_EOPD_STATS = ("teacher_entropy", "high_entropy", "opd", "fkl", "sampled_rkl")


def _eopd_rows(s_logits, t_logits, tokens, entropy_threshold, top_k):
    ls = F.log_softmax(s_logits.float(), dim=-1)
    with torch.no_grad():
        t = t_logits.float()
        lt = F.log_softmax(t, dim=-1)
        entropy = -(lt.exp() * lt).sum(-1)
        top_vals, top_idx = t.topk(min(int(top_k), t.shape[-1]), dim=-1)
        lt_top = F.log_softmax(top_vals, dim=-1)  # teacher renormalised over its top-k
        lt_y = lt.gather(-1, tokens[:, None]).squeeze(-1)
    ls_y = ls.gather(-1, tokens[:, None]).squeeze(-1)
    advantage = (lt_y - ls_y).detach()
    # On-policy (ratio 1) sampled-token term: gradient -A * grad log pS(y_t), same as the
    # PPO-clipped form of the reference code at r = 1.
    opd = -advantage * ls_y
    # Forward KL, teacher renormalised over its top-k, student full-vocabulary log-probs.
    fkl = (lt_top.exp() * (lt_top - ls.gather(-1, top_idx))).sum(-1)
    high = (entropy > entropy_threshold).float()
    loss = opd + high * fkl
    stats = torch.stack([entropy, high, opd.detach(), fkl.detach(), -advantage], dim=-1)
    return loss, stats


class _EOPDOp(_RowOp):
    n_stats = len(_EOPD_STATS)

    def __init__(self, entropy_threshold: float, top_k: int):
        self.entropy_threshold, self.top_k = entropy_threshold, top_k

    def forward(self, s, w, t, aux):
        return _eopd_rows(s, t, aux.long(), self.entropy_threshold, self.top_k)


def eopd_token_loss(
    student_logits: Tensor,
    teacher_logits: Tensor,
    tokens: Tensor,
    mask: Tensor,
    entropy_threshold: float = 0.8,
    top_k: int = 16,
    chunk_size: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """EOPD per-token objective, global token mean (SaFo-Lab/PW-OPSD ``ea_opsd_trainer.py``).

    ``L_t = L_t^OPD + 1[H_t > entropy_threshold] L_t^FKL`` with
    ``L^OPD = -sg[log pT(y_t) - log pS(y_t)] log pS(y_t)`` (on-policy, ratio 1; the gradient
    equals the PPO-clipped form's), ``L^FKL = sum_{v in topk_T} pT~(v)(log pT~(v) - log pS(v))``
    with the teacher renormalised over its top-k and the student over the full vocabulary, and
    ``H_t`` the full-vocabulary teacher entropy. ``tokens`` ``[B, T]`` are the sampled tokens.

    Returns ``(loss, diagnostics)``; ``diagnostics["loss_ppo_form"]`` is the value the reference
    code logs (its ``L^OPD`` value is ``-A_t`` at ratio 1), with the same gradient as ``loss``.
    """
    mask = _check_pair(student_logits, teacher_logits, mask)
    if tuple(tokens.shape) != tuple(mask.shape):
        raise ValueError(f"tokens has shape {tuple(tokens.shape)}, expected {tuple(mask.shape)}")
    _check_top_k(top_k)
    chunk = _auto_chunk(student_logits.shape[-1], chunk_size, student_logits.device)

    op = _EOPDOp(float(entropy_threshold), int(top_k))
    per_token, stats = _run_chunked(op, student_logits, None, teacher_logits, tokens, mask, chunk)
    n = mask.sum().clamp(min=1)
    loss = torch.where(mask, per_token, torch.zeros((), device=per_token.device)).sum() / n
    with torch.no_grad():
        means = torch.where(mask[..., None], stats, 0.0).sum((0, 1)) / n
        ppo = means[_EOPD_STATS.index("sampled_rkl")] + (
            torch.where(mask, stats[..., 1] * stats[..., 3], 0.0).sum() / n
        )
        values = torch.cat([means, ppo[None], loss.detach()[None]]).tolist()
    names = [
        "teacher_entropy_mean",
        "high_entropy_frac",
        "opd_mean",
        "fkl_mean",
        "sampled_rkl_mean",
        "loss_ppo_form",
        "loss",
    ]
    return loss, dict(zip(names, values, strict=True))


# ----------------------------------------------------------------------------------------------
# AVSD baseline (Nguyen et al. 2026; duykhuongnguyen/AVSD src/avsd/common/multiview_distill.py)
# ----------------------------------------------------------------------------------------------

# The reference's ``eps`` in ``build_uniform_sampled_tinker_target`` (gate denominators).
_AVSD_EPS = 1e-8


def _checked_avsd_inputs(
    view_logprobs: Tensor, student_logprobs: Tensor, mask: Tensor, eps: float
) -> tuple[Tensor, float]:
    """``avsd_target_logprobs``' shapes checked (``ValueError`` naming the bad one); the boolean
    mask and ``eps`` as a positive finite float."""
    if view_logprobs.dim() != 3 or view_logprobs.shape[0] < 1:
        raise ValueError(f"view_logprobs must be [V, B, T] with V >= 1, got {view_logprobs.shape}")
    if student_logprobs.dim() != 2 or view_logprobs.shape[1:] != student_logprobs.shape:
        raise ValueError(
            f"student_logprobs has shape {tuple(student_logprobs.shape)}, expected "
            f"{tuple(view_logprobs.shape[1:])} (the [B, T] of view_logprobs)"
        )
    eps = float(eps)
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a positive finite float, got {eps!r}")
    return _as_bool_mask(mask, student_logprobs.shape), eps


def avsd_target_logprobs(
    view_logprobs: Tensor,
    student_logprobs: Tensor,
    mask: Tensor,
    eps: float = _AVSD_EPS,
) -> tuple[Tensor, dict[str, Tensor]]:
    """AVSD sampled-token target ``log q(y_t)`` (duykhuongnguyen/AVSD ``multiview_distill.py``).

    ``view_logprobs`` ``[V, B, T]``: log-prob of the sampled token ``y_t`` under each privileged
    teacher view (full solution, first half of the solution, final answer only);
    ``student_logprobs`` ``[B, T]``: ``log pS(y_t)``; ``mask`` ``[B, T]``. Per token:

    - geometric consensus ``log q_g = mean_v log p_v``;
    - arithmetic consensus ``log q_a = logmeanexp_v log p_v``;
    - Jensen gap ``J = max(0, log q_a - log q_g)`` (``>= 0`` by AM-GM; the clamp only absorbs
      rounding);
    - view advantages ``d_v = log p_v - log pS``;
    - gate ``g = (|mean d| / (mean |d| + eps)) * |mean d| / (|mean d| + J + eps)``;
    - target ``log q = log q_g + g J``.

    This is the ``gate_mode="avsd"`` branch of ``build_uniform_sampled_tinker_target`` in
    duykhuongnguyen/AVSD ``src/avsd/common/multiview_distill.py`` (uniform view weights,
    ``eps = 1e-8``), which its shipped scripts select (``scripts/math/train_avsd_qwen3_8b.sh``:
    ``--use_tinker_loss --multi_view_mode avsd --avsd_gate_mode avsd``). ``eps`` makes the 0/0
    cases safe: ``mean d = 0`` gives ``g = 0``. Since ``0 <= g < 1``, the target lies in
    ``[log q_g, log q_a]``, hence between the smallest and the largest view log-prob.

    In fp32 under ``no_grad`` (the reference detaches ``target - log pS`` in the loss instead:
    the same gradient). Returns ``target`` ``[B, T]`` and ``aux``, per-token tensors with the
    reference's names (``gate``, ``jensen_gap``, ``log_q_a``, ``log_q_g``, ``consensus_adv`` =
    ``mean_v d_v``, ``avsd`` = ``|mean d| / (mean |d| + eps)``), all 0 where ``mask`` is 0.
    """
    mask, eps = _checked_avsd_inputs(view_logprobs, student_logprobs, mask, eps)
    with torch.no_grad():
        zero = torch.zeros((), device=student_logprobs.device)
        lp_v = torch.where(mask, view_logprobs.detach().float(), zero)
        lp_s = torch.where(mask, student_logprobs.detach().float(), zero)
        n_views = lp_v.shape[0]
        log_q_g = lp_v.mean(0)
        log_q_a = torch.logsumexp(lp_v, dim=0) - math.log(n_views)
        jensen_gap = (log_q_a - log_q_g).clamp_min(0.0)
        delta = lp_v - lp_s
        delta_mean = delta.mean(0)
        delta_abs_mean = delta.abs().mean(0)
        agreement = delta_mean.abs() / (delta_abs_mean + eps)
        gate = agreement * delta_mean.abs() / (delta_mean.abs() + jensen_gap + eps)
        target = log_q_g + gate * jensen_gap
        aux = {
            "gate": gate,
            "jensen_gap": jensen_gap,
            "log_q_a": log_q_a,
            "log_q_g": log_q_g,
            "consensus_adv": delta_mean,
            "avsd": agreement,
        }
        aux = {k: torch.where(mask, v, zero) for k, v in aux.items()}
        target = torch.where(mask, target, zero)
    return target, aux


def avsd_token_loss(student_logprobs: Tensor, target: Tensor, mask: Tensor) -> Tensor:
    """AVSD sampled-token loss, global token mean (duykhuongnguyen/AVSD ``multiview_distill.py``).

    ``L = -(1/N) sum_{b,t} sg[target_t - log pS(y_t)] log pS(y_t)`` over the ``N`` real tokens
    of the whole micro-batch (not per sequence): ``sampled_token_tinker_loss_from_log_probs`` in
    duykhuongnguyen/AVSD ``src/avsd/common/multiview_distill.py`` returns
    ``-(advantage[mask] * student[mask]).mean()``. As there, tokens whose student log-prob or
    target is non-finite are left out of the mean, and a batch with no such token gives 0 (kept
    in the graph, so ``backward`` still works). The gradient w.r.t. ``log pS`` is
    ``-sg[target - log pS] / N`` per token; ``target`` never receives a gradient.
    """
    if student_logprobs.dim() != 2 or target.shape != student_logprobs.shape:
        raise ValueError(
            "student_logprobs and target must both be [B, T]; got "
            f"{tuple(student_logprobs.shape)} and {tuple(target.shape)}"
        )
    mask = _as_bool_mask(mask, student_logprobs.shape)
    lp = student_logprobs.float()
    tgt = target.detach().float()
    valid = mask & torch.isfinite(lp.detach()) & torch.isfinite(tgt)
    zero = torch.zeros((), device=lp.device)
    advantage = torch.where(valid, tgt - lp.detach(), zero)
    lp = torch.where(valid, lp, zero)
    return -(advantage * lp).sum() / valid.sum().clamp(min=1)
