"""Chunked custom-autograd machinery behind the local signals and the EOPD baseline.

The full-vocabulary signal is computed over chunks of real tokens by a custom autograd function
(:class:`_ChunkedRows`) that recomputes each chunk in the backward pass; only one ``[B, T, V]``
tensor (the gradient w.r.t. the student logits, which any implementation must return) is ever
allocated. On hidden-state inputs it never holds a ``[T, V]`` tensor at all: logits are computed
from final hidden states chunk by chunk and recomputed in the backward. Padded positions are
never read, so garbage (even NaN) there is invisible. For the full vocabulary the backward is a
fused, hand-derived gradient (:func:`_fused_signal`); for top-k it is autograd per chunk.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from dashrepro.objectives.divergences import _LOG2, _signal_rows

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


# ----------------------------------------------------------------------------------------------
# Chunk size
# ----------------------------------------------------------------------------------------------


def _check_chunk_size(chunk_size: int | None) -> None:
    if chunk_size is not None and (int(chunk_size) != chunk_size or chunk_size < 1):
        raise ValueError(f"chunk_size must be None or a positive integer, got {chunk_size!r}")


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
