"""Public per-token local signals ``r_t`` (Eq. ``supp_clipped_signal``) and the teacher entropy.

``local_signal`` (logits) and ``local_signal_from_hidden`` (final hidden states and the
``lm_head`` weight) run the chunked kernels of :mod:`.kernels`; ``local_signal_reference`` is the
naive full-tensor implementation, kept as the test oracle and the benchmark baseline. The
divergence summands and the top-k tail support live in :mod:`.divergences`.

Shapes: logits ``[B, T, V]`` (bf16 or fp32; all arithmetic is fp32), ``mask`` ``[B, T]``.
Teacher inputs are always detached. Every function takes logits as given; scale by
1/temperature before calling if the training recipe uses one. Logits at real positions must be
finite.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from dashrepro.objectives.divergences import _check_divergence, _check_top_k, _signal_rows
from dashrepro.objectives.kernels import (
    _AUTO_CHUNK_ELEMENTS_HIDDEN,
    _auto_chunk,
    _run_chunked,
    _SignalOp,
)
from dashrepro.objectives.masks import _as_bool_mask, _check_pair


def _validate_signal_args(divergence, tau, top_k) -> None:
    _check_divergence(divergence)
    _check_top_k(top_k)
    if tau is not None and not math.isfinite(float(tau)):
        raise ValueError(f"tau must be None or a finite float, got {tau!r}")


def local_signal(
    student_logits: Tensor,
    teacher_logits: Tensor,
    mask: Tensor,
    divergence: str = "forward_kl",
    tau: float | None = 0.05,
    top_k: int | None = None,
    chunk_size: int | None = None,
) -> Tensor:
    """Per-token local signal ``r_t`` (Eq. ``supp_clipped_signal``), fp32 ``[B, T]``.

    ``r_t = sum_v min(l_{t,v}, tau)`` with ``l_{t,v}`` the summand of ``divergence`` (forward KL
    of Eq. ``local_distillation_loss`` by default; ``reverse_kl`` / ``jsd`` for the divergence
    ablation, clipping kept). ``tau=None`` disables the clip. ``top_k=k`` replaces the vocabulary
    by the teacher's top-k tokens plus one tail bucket per distribution (k+1 outcomes).

    Zero where ``mask`` is 0; differentiable w.r.t. ``student_logits`` only (teacher detached).
    Computed over chunks of ``chunk_size`` real tokens (None: 16 MiB of fp32 per temporary on
    CUDA, 8 MiB on CPU) and recomputed chunk-wise in the backward pass (a fused hand-derived gradient
    for the full vocabulary, autograd per chunk for top-k).
    """
    _validate_signal_args(divergence, tau, top_k)
    mask = _check_pair(student_logits, teacher_logits, mask)
    chunk = _auto_chunk(student_logits.shape[-1], chunk_size, student_logits.device)
    op = _SignalOp(divergence, tau, top_k, from_hidden=False)
    values, _ = _run_chunked(op, student_logits, None, teacher_logits, None, mask, chunk)
    return values


def local_signal_from_hidden(
    student_hidden: Tensor,
    teacher_hidden: Tensor,
    lm_head_weight: Tensor,
    mask: Tensor,
    divergence: str = "forward_kl",
    tau: float | None = 0.05,
    top_k: int | None = None,
    chunk_size: int | None = None,
) -> Tensor:
    """``local_signal(h_s @ W^T, h_t @ W^T, mask, ...)`` without materialising ``[T, V]`` logits.

    ``student_hidden``/``teacher_hidden``: final (post-norm) hidden states ``[B, T, H]``;
    ``lm_head_weight``: ``[V, H]`` (no bias, as in Qwen3). Logits are produced in the input
    dtype for one chunk of real tokens at a time (None: 64 MiB of fp32 per temporary, since
    every chunk re-reads ``W``) and recomputed in the backward pass. Gradients
    reach ``student_hidden`` and, if it requires grad, ``lm_head_weight`` (student branch only);
    ``teacher_hidden`` is detached.
    """
    _validate_signal_args(divergence, tau, top_k)
    mask = _check_pair(student_hidden, teacher_hidden, mask)
    if lm_head_weight.dim() != 2 or lm_head_weight.shape[1] != student_hidden.shape[-1]:
        raise ValueError(
            f"lm_head_weight must be [V, H={student_hidden.shape[-1]}], "
            f"got {tuple(lm_head_weight.shape)}"
        )
    chunk = _auto_chunk(
        lm_head_weight.shape[0], chunk_size, student_hidden.device, _AUTO_CHUNK_ELEMENTS_HIDDEN
    )
    op = _SignalOp(divergence, tau, top_k, from_hidden=True)
    values, _ = _run_chunked(op, student_hidden, lm_head_weight, teacher_hidden, None, mask, chunk)
    return values


def local_signal_reference(
    student_logits: Tensor,
    teacher_logits: Tensor,
    mask: Tensor,
    divergence: str = "forward_kl",
    tau: float | None = 0.05,
    top_k: int | None = None,
) -> Tensor:
    """Naive full-tensor local signal: both log-softmaxes over ``[B, T, V]``, materialised
    summands, clamp, sum. Same result as :func:`local_signal`; the test oracle and the
    benchmark baseline. Padded positions are computed and then zeroed (non-finite garbage
    there would leak NaN into the gradient, unlike the chunked path)."""
    _validate_signal_args(divergence, tau, top_k)
    mask = _check_pair(student_logits, teacher_logits, mask)
    r = _signal_rows(student_logits, teacher_logits.detach(), divergence, tau, top_k)
    return torch.where(mask, r, torch.zeros_like(r))


def teacher_entropy(teacher_logits: Tensor, mask: Tensor, chunk_size: int | None = None) -> Tensor:
    """Full-vocabulary teacher entropy ``H_t = -sum_v pT(v) log pT(v)`` (nats), fp32 ``[B, T]``.

    Detached; 0 where ``mask`` is 0; computed over chunks of real tokens.
    """
    if teacher_logits.dim() != 3:
        raise ValueError(f"teacher_logits must be [B, T, V], got {tuple(teacher_logits.shape)}")
    mask = _as_bool_mask(mask, teacher_logits.shape[:2])
    chunk = _auto_chunk(teacher_logits.shape[-1], chunk_size, teacher_logits.device)
    out = torch.zeros(mask.shape, dtype=torch.float32, device=teacher_logits.device)
    b_idx, t_idx = mask.nonzero(as_tuple=True)
    with torch.no_grad():
        for start in range(0, b_idx.numel(), chunk):
            bi, ti = b_idx[start : start + chunk], t_idx[start : start + chunk]
            logp = F.log_softmax(teacher_logits[bi, ti].float(), dim=-1)
            out[bi, ti] = -(logp.exp() * logp).sum(-1)
    return out
