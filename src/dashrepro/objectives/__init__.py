"""Loss math for OPSD, DASH, their ablations and the EOPD / PW-OPSD baselines.

Pure tensor functions, no trainer state. The trainer computes student and teacher logits (or
final hidden states) along a student rollout and calls, per micro-batch,

    r = local_signal(student_logits, teacher_logits, mask)           # [B, T] fp32, per token
    agg = aggregate("dash", r, mask, kappa=5.0)                        # Aggregation
    agg.loss.backward()

Paper references (``paper/000_da563d0c50e8b155.txt``; labels are the paper's):

- local signal: forward-KL summand ``l_{t,v}`` of Eq. ``local_distillation_loss`` with the
  per-entry upper clip of Eq. ``supp_clipped_signal``: ``r_t = sum_v min(l_{t,v}, tau)``;
- DASH: recursion Eq. ``dash_recursion`` / objective Eq. ``dash_objective``, computed through
  the equivalent weighted form Eq. ``dash_weighted_objective`` (``c_1 = 1``,
  ``c_k = 1 + lambda_{k-1} c_{k-1}``), horizons Eq. ``supp_effective_horizon``, gradient
  Eq. ``supp_dash_gradient`` (gates and coefficients are detached);
- inverse-gap control Eq. ``inverse_gap_control``; OPSD Eq. ``opsd_loss``.

Shapes: logits ``[B, T, V]`` (bf16 or fp32; all arithmetic is fp32), ``mask`` ``[B, T]`` with 1
for real generated tokens (EOS included) and 0 for padding. Teacher inputs are always detached.
Padded positions are never read by the chunked paths, so garbage (even NaN) there is invisible.

Memory: the full-vocabulary signal is computed over chunks of real tokens by a custom autograd
function that recomputes each chunk in the backward pass; only one ``[B, T, V]`` tensor (the
gradient w.r.t. the student logits, which any implementation must return) is ever allocated.
``local_signal_from_hidden`` goes further and never holds a ``[T, V]`` tensor at all: logits are
computed from final hidden states chunk by chunk and recomputed in the backward.
``local_signal_reference`` is the naive full-tensor implementation, kept as the test oracle and
the benchmark baseline.

Temperature: every function takes logits as given; scale by 1/temperature before calling if the
training recipe uses one. Logits at real positions must be finite.

Not in the paper, so stated here: Soft-OR is named in the paper without a formula and is
implemented as the standard soft-OR ``1 - (1 - g_H)(1 - g_r)``; PW-OPSD and EOPD follow their
public code (SaFo-Lab/PW-OPSD); AVSD follows duykhuongnguyen/AVSD
``src/avsd/common/multiview_distill.py``; the GRPO term of the outcome-level hybrid (appendix
``sec:outcome_optimization``) follows TRL's ``trl/trainer/grpo_trainer.py`` defaults, and its
``gamma = lambda = 0.95`` aggregation, which the paper states without a formula, is the GAE-style
backward recursion ``A_t = a_t + gamma lambda A_{t+1}``. Aggregations require each rollout's
real tokens to be one contiguous run (right or left padding; holes raise ``ValueError``);
rollouts with no real token are left out of the batch mean.

Tests:      ``pytest tests/objectives -q``  (CPU, well under a minute)
Benchmark:  ``.venv/bin/python benchmarks/objectives.py --quick``
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from dashrepro.parameters import AGGREGATION_PARAMS

__all__ = [
    "AGGREGATIONS",
    "DIVERGENCES",
    "Aggregation",
    "aggregate",
    "aggregation_param_names",
    "coefficients_from_gates",
    "dash_coefficients",
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

DIVERGENCES = ("forward_kl", "reverse_kl", "jsd")

# Elements of one fp32 [rows, V] temporary per chunk when chunk_size is None: 16 MiB on
# accelerators (bigger kernels, caching allocator), 8 MiB on CPU, where glibc keeps freed
# chunk-sized blocks on its heap and the resident peak grows with the chunk (27 vs 13 rows at
# V=151936; see benchmarks/objectives.py).
_AUTO_CHUNK_ELEMENTS = {"cpu": 1 << 21}
_AUTO_CHUNK_ELEMENTS_DEFAULT = 1 << 22
# The hidden-state path re-reads the whole lm_head weight for every chunk (five matmuls per
# chunk over forward + backward), so it wants more rows per chunk: 64 MiB temporaries, 110 rows
# at V=151936, still a small fraction of the naive path's memory.
_AUTO_CHUNK_ELEMENTS_HIDDEN = 1 << 24

_LOG2 = math.log(2.0)


# ----------------------------------------------------------------------------------------------
# Validation helpers
# ----------------------------------------------------------------------------------------------


def _check_divergence(divergence: str) -> None:
    if divergence not in DIVERGENCES:
        raise ValueError(
            f"unknown divergence {divergence!r}; expected one of {', '.join(DIVERGENCES)}"
        )


def _check_top_k(top_k: int | None) -> None:
    if top_k is not None and (isinstance(top_k, bool) or int(top_k) != top_k or top_k < 1):
        raise ValueError(f"top_k must be None or a positive integer, got {top_k!r}")


def _check_chunk_size(chunk_size: int | None) -> None:
    if chunk_size is not None and (int(chunk_size) != chunk_size or chunk_size < 1):
        raise ValueError(f"chunk_size must be None or a positive integer, got {chunk_size!r}")


def _as_bool_mask(mask: Tensor, shape: torch.Size) -> Tensor:
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"mask has shape {tuple(mask.shape)}, expected {tuple(shape)}")
    return mask if mask.dtype == torch.bool else mask != 0


def _check_pair(student: Tensor, teacher: Tensor, mask: Tensor) -> Tensor:
    if student.dim() != 3 or student.shape != teacher.shape:
        raise ValueError(
            "student and teacher tensors must both be [B, T, D]; got "
            f"{tuple(student.shape)} and {tuple(teacher.shape)}"
        )
    return _as_bool_mask(mask, student.shape[:2])


def _auto_chunk(
    width: int, chunk_size: int | None, device: torch.device, budget: int | None = None
) -> int:
    _check_chunk_size(chunk_size)
    if chunk_size is not None:
        return int(chunk_size)
    if budget is None:
        budget = _AUTO_CHUNK_ELEMENTS.get(device.type, _AUTO_CHUNK_ELEMENTS_DEFAULT)
    return max(1, budget // max(1, width))


# ----------------------------------------------------------------------------------------------
# Per-row divergence math (rows = real token positions, fp32)
# ----------------------------------------------------------------------------------------------


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
        idx = t.topk(int(top_k), dim=-1).indices
        student_logp = _bucket_logprobs(s, idx)
        teacher_logp = _bucket_logprobs(t, idx)
    summands = divergence_summands(student_logp, teacher_logp, divergence)
    if tau is not None:
        # Per vocabulary entry, before the sum; autograd's subgradient at the threshold.
        summands = summands.clamp(max=tau)
    return summands.sum(-1)


# ----------------------------------------------------------------------------------------------
# Fused full-vocabulary signal and its hand-derived gradient (the main configuration's hot path)
# ----------------------------------------------------------------------------------------------


def _log_softmax_(x: Tensor) -> Tensor:
    """In-place log-softmax over the last dim of an fp32 buffer the caller owns."""
    return x.sub_(torch.logsumexp(x, dim=-1, keepdim=True))


def _fused_signal(zs: Tensor, zt: Tensor, divergence: str, tau: float | None, grad_out=None):
    """Full-vocabulary ``r_t`` (``grad_out is None``) or its gradient w.r.t. the student logits.

    ``zs``/``zt`` are fp32 ``[n, V]`` logit buffers owned by the caller; they are overwritten.
    Every summand ``l_v`` depends on ``(log pS(v), log pT(v))`` only, with

    - forward KL: ``dl_v/dlog pS(v) = -pT(v)``;
    - reverse KL: ``dl_v/dlog pS(v) = pS(v) (log pS(v) - log pT(v) + 1)``;
    - JSD:        ``dl_v/dlog pS(v) = 0.5 pS(v) (log pS(v) - log m(v))``;

    the clip ``min(l_v, tau)`` multiplies this by ``1[l_v <= tau]`` (the subgradient autograd uses
    for ``clamp``), and the log-softmax Jacobian maps ``d`` to ``d - pS sum_v d_v``. Working
    memory is three or four ``[n, V]`` buffers instead of the dozen autograd would keep.
    """
    ls = _log_softmax_(zs)
    lt = _log_softmax_(zt)
    if divergence == "forward_kl":
        summand = lt - ls
        pt = lt.exp_()
        summand.mul_(pt)
        if grad_out is None:
            return summand.clamp_(max=tau).sum(-1) if tau is not None else summand.sum(-1)
        d = pt.neg_()
    elif divergence == "reverse_kl":
        diff = lt.sub_(ls).neg_()  # log pS - log pT
        ps = ls.exp_()
        summand = ps * diff
        if grad_out is None:
            return summand.clamp_(max=tau).sum(-1) if tau is not None else summand.sum(-1)
        d = diff.add_(1.0).mul_(ps)
    else:  # jsd
        log_m = torch.logaddexp(ls, lt).sub_(_LOG2)
        pt = lt.exp()
        summand = lt.sub_(log_m).mul_(pt)  # pT (log pT - log m), in lt's buffer
        del pt
        d = ls.sub(log_m)  # log pS - log m
        ps = ls.exp_()
        d.mul_(ps)  # pS (log pS - log m)
        summand.add_(d).mul_(0.5)
        if grad_out is None:
            return summand.clamp_(max=tau).sum(-1) if tau is not None else summand.sum(-1)
        d.mul_(0.5)
    if tau is not None:
        d.masked_fill_(summand > tau, 0.0)
    del summand
    ps = ls if divergence != "forward_kl" else ls.exp_()
    d.addcmul_(ps, d.sum(-1, keepdim=True), value=-1.0)
    return d.mul_(grad_out.float()[:, None])


# ----------------------------------------------------------------------------------------------
# Chunked rows with recomputation in backward
# ----------------------------------------------------------------------------------------------


class _RowOp:
    """One per-token computation on gathered rows of real tokens.

    ``forward(s, w, t, aux) -> (values [n] fp32, stats [n, n_stats] or None)`` must be
    differentiable w.r.t. ``s`` and ``w`` when grad mode is on; ``backward`` by default
    recomputes it under autograd. ``s`` and ``t`` are fresh gathered copies (safe to overwrite).
    """

    n_stats = 0

    def forward(self, s, w, t, aux):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, s, w, t, aux, grad_out, need_s, need_w):
        with torch.enable_grad():
            s = s.detach().requires_grad_(need_s)
            w = None if w is None else w.detach().requires_grad_(need_w)
            val, _ = self.forward(s, w, t, aux)
            wrt = ([s] if need_s else []) + ([w] if need_w else [])
            grads = torch.autograd.grad(val, wrt, grad_outputs=grad_out)
        return (grads[0] if need_s else None), (grads[-1] if need_w else None)


class _SignalOp(_RowOp):
    """Local signal on logit rows, or on hidden-state rows through ``lm_head`` when
    ``from_hidden`` (logits formed per chunk in the input dtype, as the model would)."""

    def __init__(self, divergence, tau, top_k, from_hidden):
        self.divergence, self.tau, self.top_k = divergence, tau, top_k
        self.from_hidden = from_hidden

    def _fused(self, vocab: int) -> bool:
        return self.top_k is None or self.top_k >= vocab

    def _logits(self, s, w, t):
        if not self.from_hidden:
            return s, t
        with torch.no_grad():
            t_logits = F.linear(t, w.detach())
        return F.linear(s, w), t_logits

    def forward(self, s, w, t, aux):
        s_logits, t_logits = self._logits(s, w, t)
        if torch.is_grad_enabled() or not self._fused(s_logits.shape[-1]):
            return _signal_rows(s_logits, t_logits, self.divergence, self.tau, self.top_k), None
        # No-grad forward: the fused in-place kernel (buffers are fresh copies).
        zs = s_logits.float() if s_logits.dtype != torch.float32 else s_logits
        zt = t_logits.float() if t_logits.dtype != torch.float32 else t_logits
        return _fused_signal(zs, zt, self.divergence, self.tau), None

    def backward(self, s, w, t, aux, grad_out, need_s, need_w):
        vocab = w.shape[0] if self.from_hidden else s.shape[-1]
        if not self._fused(vocab):
            return super().backward(s, w, t, aux, grad_out, need_s, need_w)
        with torch.no_grad():
            s_logits, t_logits = self._logits(s, w, t)
            zs = s_logits.float() if s_logits.dtype != torch.float32 else s_logits
            zt = t_logits.float() if t_logits.dtype != torch.float32 else t_logits
            del t_logits
            grad_logits = _fused_signal(zs, zt, self.divergence, self.tau, grad_out)
            if not self.from_hidden:
                return grad_logits, None
            # Chain through logits = s @ w^T in the input dtype (what autograd would do).
            grad_logits = grad_logits.to(s.dtype)
            grad_s = grad_logits @ w if need_s else None
            grad_w = grad_logits.t() @ s if need_w else None
            return grad_s, grad_w


class _ChunkedRows(torch.autograd.Function):
    """Evaluate a :class:`_RowOp` on the real positions of ``[B, T, D]`` inputs, chunk by chunk.

    Forward runs under ``no_grad`` and keeps only references to the inputs; backward recomputes
    each chunk and writes its gradient into one zero-initialised gradient tensor, so the working
    memory is one chunk's temporaries. Differentiable inputs: ``student`` and ``weight``.
    """

    @staticmethod
    def forward(ctx, student, weight, teacher, aux, b_idx, t_idx, chunk, op):
        batch, length = student.shape[:2]
        values = torch.zeros(batch, length, dtype=torch.float32, device=student.device)
        stats = torch.zeros(batch, length, op.n_stats, dtype=torch.float32, device=student.device)
        with torch.no_grad():
            for start in range(0, b_idx.numel(), chunk):
                bi, ti = b_idx[start : start + chunk], t_idx[start : start + chunk]
                aux_rows = None if aux is None else aux[bi, ti]
                val, st = op.forward(student[bi, ti], weight, teacher[bi, ti], aux_rows)
                values[bi, ti] = val
                if op.n_stats:
                    stats[bi, ti] = st
        ctx.save_for_backward(student, weight, teacher, aux, b_idx, t_idx)
        ctx.chunk, ctx.op = chunk, op
        ctx.mark_non_differentiable(stats)
        return values, stats

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_values, _grad_stats):
        student, weight, teacher, aux, b_idx, t_idx = ctx.saved_tensors
        need_s = bool(ctx.needs_input_grad[0])
        need_w = weight is not None and bool(ctx.needs_input_grad[1])
        grad_s = torch.zeros_like(student) if need_s else None
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        if need_s or need_w:
            for start in range(0, b_idx.numel(), ctx.chunk):
                bi, ti = b_idx[start : start + ctx.chunk], t_idx[start : start + ctx.chunk]
                aux_rows = None if aux is None else aux[bi, ti]
                gs, gw = ctx.op.backward(
                    student[bi, ti], weight, teacher[bi, ti], aux_rows,
                    grad_values[bi, ti], need_s, need_w,
                )  # fmt: skip
                if need_s:
                    grad_s[bi, ti] = gs.to(grad_s.dtype)
                if need_w:
                    grad_w += gw.float()
        if grad_w is not None:
            grad_w = grad_w.to(weight.dtype)
        return grad_s, grad_w, None, None, None, None, None, None


def _run_chunked(
    op: _RowOp,
    student: Tensor,
    weight: Tensor | None,
    teacher: Tensor,
    aux: Tensor | None,
    mask: Tensor,
    chunk: int,
) -> tuple[Tensor, Tensor]:
    b_idx, t_idx = mask.nonzero(as_tuple=True)
    return _ChunkedRows.apply(student, weight, teacher.detach(), aux, b_idx, t_idx, chunk, op)


# ----------------------------------------------------------------------------------------------
# Public local signals
# ----------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------
# Gates, coefficients and horizons (appendix "Aggregation Coefficients and Supervision Horizons")
# ----------------------------------------------------------------------------------------------


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is nonzero (0 where there are none).

    Masked positions are excluded with ``where``, so non-finite values there do not leak.
    """
    mask = _as_bool_mask(mask, x.shape)
    xs = torch.where(mask, x, torch.zeros_like(x))
    if dim is None:
        return xs.sum() / mask.sum().clamp(min=1)
    return xs.sum(dim, keepdim=keepdim) / mask.sum(dim, keepdim=keepdim).clamp(min=1)


def _check_rollout_mask(mask: Tensor) -> Tensor:
    """[B, T] bool mask whose real tokens form one contiguous run per rollout."""
    if mask.dim() != 2:
        raise ValueError(f"mask must be [B, T], got {tuple(mask.shape)}")
    mask = mask if mask.dtype == torch.bool else mask != 0
    starts = mask[:, :1].long().sum(1) + (mask[:, 1:] & ~mask[:, :-1]).long().sum(1)
    if bool((starts > 1).any()):
        raise ValueError(
            "each rollout's real tokens must be one contiguous run (right padding); "
            "found a mask with holes"
        )
    return mask


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


def dash_coefficients(r: Tensor, mask: Tensor, kappa: float = 5.0) -> Tensor:
    """DASH coefficients ``c_k`` (Eq. ``dash_weighted_objective``) with gates
    ``lambda_t = sg[sigmoid(-kappa (r_t - bar r))]`` (Algorithm ``alg:dash``); detached."""
    return coefficients_from_gates(gates_from_gap(r, mask, kappa, sign=-1.0), mask)


def position_weights(
    mask: Tensor,
    position_w_min: float = 0.25,
    position_tau: float = 0.30,
    position_s: float = 0.10,
) -> Tensor:
    """PW-OPSD position weights ``w_t = w_min + (1 - w_min) sigmoid((f_t - tau) / s)`` with
    ``f_t = (t - 0.5) / T_b``, ``t`` the 1-based index among the rollout's real tokens and
    ``T_b`` its real length (SaFo-Lab/PW-OPSD). Detached fp32 ``[B, T]``, 0 where masked."""
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


def _check_kappa(kappa: float) -> float:
    kappa = float(kappa)
    if not math.isfinite(kappa) or kappa < 0:
        raise ValueError(f"kappa must be a finite non-negative float, got {kappa!r}")
    return kappa


def _uniform(mask: Tensor) -> Tensor:
    return mask.float()


def _agg_opsd(r, mask, *, teacher_entropy=None):
    """Eq. ``opsd_loss``: ``c_k = 1``."""
    return _uniform(mask), None


def _agg_dash(r, mask, *, teacher_entropy=None, kappa=5.0):
    """Eq. ``dash_weighted_objective`` with ``lambda_t = sg[sigmoid(-kappa (r_t - bar r))]``."""
    gates = gates_from_gap(r, mask, _check_kappa(kappa), sign=-1.0)
    return coefficients_from_gates(gates, mask), gates


def _agg_fixed_lambda(r, mask, *, teacher_entropy=None, lam):
    """Same recursion with one constant gate ``lambda`` (``lam = 0`` is OPSD)."""
    lam = float(lam)
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"fixed_lambda: lam must lie in [0, 1], got {lam!r}")
    gates = torch.where(mask, torch.full(mask.shape, lam, device=r.device), 0.0)
    return coefficients_from_gates(gates, mask), gates


def _agg_inverse_gap(r, mask, *, teacher_entropy=None, kappa=5.0):
    """Eq. ``inverse_gap_control`` (right): ``lambda_t = sg[sigmoid(+kappa (r_t - bar r))]``."""
    gates = gates_from_gap(r, mask, _check_kappa(kappa), sign=+1.0)
    return coefficients_from_gates(gates, mask), gates


def _agg_normalized_dash(r, mask, *, teacher_entropy=None, kappa=5.0):
    """DASH's coefficient profile rescaled to per-rollout mean 1 (the OPSD scale)."""
    c, gates = _agg_dash(r, mask, kappa=kappa)
    mean_c = masked_mean(c, mask, dim=1, keepdim=True).clamp(min=1e-12)
    return torch.where(mask, c / mean_c, torch.zeros_like(c)), gates


def _agg_scale_matched_opsd(r, mask, *, teacher_entropy=None, kappa=5.0):
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
    return gates_from_gap(teacher_entropy, mask, _check_kappa(kappa), sign=-1.0)


def _agg_entropy_gate(r, mask, *, teacher_entropy=None, kappa=5.0):
    """Gate input is the teacher-entropy gap ``H_t - mean H``: ``sg[sigmoid(-kappa gap)]``."""
    gates = _entropy_gates(teacher_entropy, mask, kappa, "entropy_gate")
    return coefficients_from_gates(gates, mask), gates


def _agg_soft_or(r, mask, *, teacher_entropy=None, kappa=5.0):
    """Soft-OR of the entropy gate and DASH's gap gate: ``1 - (1 - g_H)(1 - g_r)``.

    The paper names Soft-OR without a formula; this is the standard probabilistic OR.
    """
    g_h = _entropy_gates(teacher_entropy, mask, kappa, "soft_or")
    g_r = gates_from_gap(r, mask, _check_kappa(kappa), sign=-1.0)
    gates = torch.where(mask, 1.0 - (1.0 - g_h) * (1.0 - g_r), torch.zeros_like(g_h))
    return coefficients_from_gates(gates, mask), gates


def _agg_pw_opsd(
    r, mask, *, teacher_entropy=None, position_w_min=0.25, position_tau=0.30, position_s=0.10
):
    """PW-OPSD: the OPSD signal times a fixed position weight (see :func:`position_weights`)."""
    if float(position_s) <= 0:
        raise ValueError(f"pw_opsd: position_s must be positive, got {position_s!r}")
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


def _keyword_params(method: str) -> dict[str, inspect.Parameter]:
    sig = inspect.signature(_lookup(method))
    return {
        name: p
        for name, p in sig.parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name != "teacher_entropy"
    }


def aggregation_param_names(method: str) -> set[str]:
    """Hyper-parameter names ``aggregate(method, ...)`` accepts (``teacher_entropy`` excluded)."""
    return set(_keyword_params(method))


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
    accepted = _keyword_params(method)
    for key in params:
        if key not in accepted:
            raise ValueError(
                f"aggregation {method!r} does not take parameter {key!r} "
                f"(accepted: {', '.join(sorted(accepted)) or 'none'})"
            )
    for key, p in accepted.items():
        if p.default is inspect.Parameter.empty and key not in params:
            raise ValueError(f"aggregation {method!r} requires parameter {key!r}")
    # The ranges config validation checks before any job starts (dashrepro.parameters).
    for key, value in params.items():
        declared = AGGREGATION_PARAMS[method][key]
        why = declared.problem(value)
        if why:
            raise ValueError(f"aggregation {method!r}: {key} {why} ({declared.describe(key)})")
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
    """EOPD per-token objective, global token mean (METHODS.md "Baselines").

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


def avsd_target_logprobs(
    view_logprobs: Tensor,
    student_logprobs: Tensor,
    mask: Tensor,
    eps: float = _AVSD_EPS,
) -> tuple[Tensor, dict[str, Tensor]]:
    """AVSD sampled-token target ``log q(y_t)`` (METHODS.md "Baselines", AVSD).

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

    Everything is computed in fp32 under ``no_grad`` from detached inputs: no gradient flows
    through the target (the reference detaches ``target - log pS`` in the loss instead, which
    gives the same gradient). Returns ``(target, aux)``: ``target`` ``[B, T]`` and per-token
    detached ``[B, T]`` tensors ``aux`` with the reference's diagnostic names (``gate``,
    ``jensen_gap``, ``log_q_a``, ``log_q_g``, ``consensus_adv`` = ``mean_v d_v``, ``avsd`` =
    the agreement factor ``|mean d| / (mean |d| + eps)``); all are 0 where ``mask`` is 0, so
    padding (even NaN there) is invisible. Log means with :func:`masked_mean`.
    """
    if view_logprobs.dim() != 3 or view_logprobs.shape[0] < 1:
        raise ValueError(f"view_logprobs must be [V, B, T] with V >= 1, got {view_logprobs.shape}")
    if student_logprobs.dim() != 2 or view_logprobs.shape[1:] != student_logprobs.shape:
        raise ValueError(
            f"student_logprobs has shape {tuple(student_logprobs.shape)}, expected "
            f"{tuple(view_logprobs.shape[1:])} (the [B, T] of view_logprobs)"
        )
    mask = _as_bool_mask(mask, student_logprobs.shape)
    eps = float(eps)
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"eps must be a positive finite float, got {eps!r}")
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
    """AVSD sampled-token loss, global token mean (METHODS.md "Baselines", AVSD).

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
    ``gamma = lambda = 0.95`` aggregation (METHODS.md "Baselines", GRPO hybrid); the formula is
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
