"""Per-row divergence math on rows of real token positions, all arithmetic in fp32.

The local signal of Eq. ``supp_clipped_signal``, ``r_t = sum_v min(l_{t,v}, tau)``, with
``l_{t,v}`` the summand of the forward KL of Eq. ``local_distillation_loss`` (or of the reverse
KL / JSD of the divergence ablation), over the full vocabulary or over the teacher's top-k
tokens plus one tail bucket (Table ``tab:vocabulary_support``). These are the autograd building
blocks; :mod:`.kernels` runs them chunk by chunk and :mod:`.signals` is the public API.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from dashrepro.objectives.registry import DIVERGENCES  # config validation reads it too

_LOG2 = math.log(2.0)


def _check_divergence(divergence: str) -> None:
    if divergence not in DIVERGENCES:
        raise ValueError(
            f"unknown divergence {divergence!r}; expected one of {', '.join(DIVERGENCES)}"
        )


def _check_top_k(top_k: int | None) -> None:
    if top_k is not None and (isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1):
        raise ValueError(f"top_k must be None or a positive integer, got {top_k!r}")


def divergence_summands(student_logp: Tensor, teacher_logp: Tensor, divergence: str) -> Tensor:
    """Per-outcome summands ``l_{t,v}`` whose sum over ``v`` is the divergence.

    Both inputs are normalised log-probabilities over the same outcomes (last dim).

    - ``forward_kl``: ``pT (log pT - log pS)`` (Eq. ``local_distillation_loss``);
    - ``reverse_kl``: ``pS (log pS - log pT)``;
    - ``jsd``: ``0.5 pT (log pT - log m) + 0.5 pS (log pS - log m)``, ``m = (pT + pS) / 2``.
    """
    _check_divergence(divergence)
    if divergence == "forward_kl":
        return teacher_logp.exp() * (teacher_logp - student_logp)
    if divergence == "reverse_kl":
        return student_logp.exp() * (student_logp - teacher_logp)
    log_m = torch.logaddexp(student_logp, teacher_logp) - _LOG2
    return 0.5 * (
        teacher_logp.exp() * (teacher_logp - log_m) + student_logp.exp() * (student_logp - log_m)
    )


def _bucket_logprobs(logits: Tensor, head_idx: Tensor) -> Tensor:
    """Log-probs of the ``head_idx`` tokens plus one tail bucket holding all other mass."""
    lse = logits.logsumexp(-1, keepdim=True)
    head = logits.gather(-1, head_idx) - lse
    tail = logits.scatter(-1, head_idx, float("-inf")).logsumexp(-1, keepdim=True) - lse
    return torch.cat([head, tail], dim=-1)


def topk_tail_logprobs(
    student_logits: Tensor, teacher_logits: Tensor, top_k: int
) -> tuple[Tensor, Tensor]:
    """Student and teacher log-probs over the teacher's top-k tokens plus one tail bucket.

    Returns two fp32 tensors ``[..., top_k + 1]`` (last entry = merged tail mass); each
    exponentiates to a distribution summing to 1. This is the support of the paper's
    vocabulary-support ablation (Table ``tab:vocabulary_support``). Requires ``top_k < V``.
    """
    _check_top_k(top_k)
    if top_k >= student_logits.shape[-1]:
        raise ValueError(f"top_k={top_k} leaves no tail for V={student_logits.shape[-1]}")
    s = student_logits.float()
    t = teacher_logits.detach().float()
    idx = t.topk(int(top_k), dim=-1).indices
    return _bucket_logprobs(s, idx), _bucket_logprobs(t, idx)


def _signal_rows(
    s_logits: Tensor, t_logits: Tensor, divergence: str, tau: float | None, top_k: int | None
) -> Tensor:
    """``r_t = sum_v min(l_{t,v}, tau)`` for a block of rows (Eq. ``supp_clipped_signal``)."""
    s = s_logits.float()
    t = t_logits.float()
    if top_k is None or top_k >= s.shape[-1]:
        # A top-k covering the whole vocabulary leaves an empty tail: the full-vocab signal.
        student_logp = F.log_softmax(s, dim=-1)
        teacher_logp = F.log_softmax(t, dim=-1)
    else:
        student_logp, teacher_logp = topk_tail_logprobs(s, t, top_k)
    summands = divergence_summands(student_logp, teacher_logp, divergence)
    if tau is not None:
        # Per vocabulary entry, before the sum; autograd's subgradient at the threshold.
        summands = summands.clamp(max=tau)
    return summands.sum(-1)
