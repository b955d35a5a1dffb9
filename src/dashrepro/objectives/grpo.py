"""The GRPO term of the outcome-level hybrid (appendix ``sec:outcome_optimization``).

Follows TRL's ``trl/trainer/grpo_trainer.py`` defaults. Its ``gamma = lambda = 0.95``
aggregation, which the paper states without a formula, is the GAE-style backward recursion
``A_t = a_t + gamma lambda A_{t+1}``; the hybrid loss is ``dash_loss + eta * grpo_loss``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from dashrepro.objectives.masks import _as_bool_mask, _check_rollout_mask

# ----------------------------------------------------------------------------------------------
# GRPO term of the outcome-level hybrid (appendix "Compatibility with Outcome-Level RL")
# ----------------------------------------------------------------------------------------------

GRPO_SCALES = ("group", "batch", "none")


def group_advantages(rewards: Tensor, eps: float = 1e-4, scale: str = "group") -> Tensor:
    """GRPO group-relative advantages ``(r - mean_group r) / (std + eps)``, ``[G, K]`` fp32.

    ``rewards`` ``[G, K]``: ``K`` rollouts (rows of one prompt's group) for each of ``G``
    prompts. Matches TRL ``trl/trainer/grpo_trainer.py`` (``_generate_and_score_completions``)
    with its default ``scale_rewards="group"``: the mean is over the group, the std is
    ``rewards.view(-1, K).std(dim=1)``, i.e. torch's default *unbiased* (Bessel, ``K - 1``)
    std, and ``eps = 1e-4`` is added to the std, not under the square root. ``scale="batch"``
    divides by the unbiased std over all ``G K`` rewards (TRL's ``"batch"``), ``scale="none"``
    only centres (Dr. GRPO). ``"std"`` is accepted as an alias of ``"group"``. A group with equal
    rewards (or ``K = 1``, where TRL sets the std to 0) gets advantage 0. Detached.
    """
    if rewards.dim() != 2 or rewards.numel() == 0:
        raise ValueError(f"rewards must be a non-empty [G, K] tensor, got {tuple(rewards.shape)}")
    scale = "group" if scale == "std" else scale
    if scale not in GRPO_SCALES:
        raise ValueError(f"unknown scale {scale!r}; expected one of {', '.join(GRPO_SCALES)}")
    eps = float(eps)
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite non-negative float, got {eps!r}")
    r = rewards.detach().float()
    if not bool(torch.isfinite(r).all()):
        raise ValueError("rewards must be finite")
    adv = r - r.mean(dim=1, keepdim=True)
    if scale == "none":
        return adv
    if scale == "group":
        std = r.std(dim=1, keepdim=True) if r.shape[1] > 1 else torch.zeros_like(r[:, :1])
    else:
        std = r.std() if r.numel() > 1 else torch.zeros((), device=r.device)
    return adv / (std + eps)


def discounted_token_advantages(
    token_advantages: Tensor, mask: Tensor, gamma: float = 0.95, lam: float = 0.95
) -> Tensor:
    """GAE-style backward aggregation of GRPO token advantages, ``[B, T]`` fp32, detached.

    ``A_t = a_t + gamma lambda A_{t+1}`` with ``A`` = 0 past each rollout's last real token, so
    the recursion starts at ``A_T = a_T`` and padded positions are 0 and contribute nothing.
    The paper's appendix ``sec:outcome_optimization`` only says that the GRPO path uses
    ``gamma = lambda = 0.95`` aggregation (the paper's outcome-level hybrid); the formula is
    the GAE recursion (Schulman et al. 2016) with per-token terms ``a_t``, the same backward
    recursion as DASH's Eq. ``dash_recursion`` with a constant gate ``gamma lambda``. Only the
    product ``gamma lambda`` matters. With the GRPO sequence advantage broadcast to every token
    (``a_t = A_hat``) this gives ``A_t = A_hat (1 - (gamma lambda)^n) / (1 - gamma lambda)``,
    ``n = T - t + 1`` the number of tokens from ``t`` to the end; with ``a_t = A_hat 1[t = T]``
    it gives the critic-free trace ``(gamma lambda)^(T - t) A_hat``. Which ``a_t`` to feed is the
    caller's choice. ``gamma = lambda = 0`` returns the input (masked).

    Each rollout's real tokens must be one contiguous run (right or left padding).
    """
    if token_advantages.dim() != 2:
        raise ValueError(f"token_advantages must be [B, T], got {tuple(token_advantages.shape)}")
    mask = _check_rollout_mask(_as_bool_mask(mask, token_advantages.shape))
    gamma, lam = float(gamma), float(lam)
    for name, v in (("gamma", gamma), ("lam", lam)):
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {v!r}")
    discount = gamma * lam
    m = mask.cpu().numpy().astype(np.float64)
    a = torch.where(mask, token_advantages.detach(), torch.zeros((), device=mask.device))
    a = a.cpu().double().numpy()
    out = np.zeros_like(a)
    nxt = np.zeros(a.shape[0])
    for t in range(a.shape[1] - 1, -1, -1):
        nxt = m[:, t] * (a[:, t] + discount * nxt)
        out[:, t] = nxt
    return torch.from_numpy(out).to(device=token_advantages.device, dtype=torch.float32)


def grpo_token_loss(student_logprobs: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """On-policy GRPO policy-gradient term, per-sequence token mean then batch mean.

    ``L = mean_b (1/T_b) sum_t -sg[A_{b,t}] log pS(y_t)`` over rollouts with ``T_b > 0`` real
    tokens; ``advantages`` is ``[B, T]`` (e.g. from :func:`discounted_token_advantages`) or
    ``[B]`` (one sequence advantage broadcast to every token, the "No agg." rows of
    Table ``tab:supp_grpo_grid``). This is TRL ``trl/trainer/grpo_trainer.py`` ``_compute_loss``
    with ``loss_type="grpo"`` (``((per_token_loss * mask).sum(-1) / mask.sum(-1)).mean()``, the
    same normalisation as :func:`aggregate`), ``beta = 0`` (no KL term) and one update per
    generation (``num_iterations = 1``): the ratio ``exp(log pS - sg[log pS])`` is 1, so the PPO
    clip is inactive and ``-min(ratio A, clip(ratio) A)`` has the value ``-A`` and the gradient
    of ``-A log pS`` used here. The gradient w.r.t. ``log pS(y_t)`` is ``-A_t / (T_b B')``,
    ``B'`` the number of non-empty rollouts.
    """
    if student_logprobs.dim() != 2:
        raise ValueError(f"student_logprobs must be [B, T], got {tuple(student_logprobs.shape)}")
    if advantages.dim() == 1 and advantages.shape[0] == student_logprobs.shape[0]:
        advantages = advantages[:, None].expand_as(student_logprobs)
    if advantages.shape != student_logprobs.shape:
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)}, expected "
            f"{tuple(student_logprobs.shape)} or ({student_logprobs.shape[0]},)"
        )
    mask = _as_bool_mask(mask, student_logprobs.shape)
    zero = torch.zeros((), device=student_logprobs.device)
    adv = torch.where(mask, advantages.detach().float(), zero)
    lp = torch.where(mask, student_logprobs.float(), zero)
    lengths = mask.sum(1)
    per_rollout = -(adv * lp).sum(1) / lengths.clamp(min=1)
    valid = (lengths > 0).float()
    return (per_rollout * valid).sum() / valid.sum().clamp(min=1.0)


def hybrid_loss(dash_loss: Tensor, grpo_loss: Tensor, eta: float) -> Tensor:
    """DASH plus the GRPO correctness term: ``dash_loss + eta * grpo_loss`` (appendix
    ``sec:outcome_optimization``; the paper's grid uses ``eta in {0.3, 0.5}``)."""
    eta = float(eta)
    if not math.isfinite(eta) or eta < 0:
        raise ValueError(f"eta must be a finite non-negative float, got {eta!r}")
    return dash_loss + eta * grpo_loss
