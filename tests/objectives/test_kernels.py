"""Tests for ``dashrepro.objectives.kernels``: the chunked paths against the naive reference.

The chunked logit path and the hidden-state path equal ``local_signal_reference`` in value and
gradient for every chunk size, never read padded positions, and keep the peak memory a fraction
of the naive path's.

Run: ``.venv/bin/pytest tests/objectives -q`` (CPU, small V, well under a minute).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from objectives_helpers import DIVS, _gen, _logits, _mask, _pad

from dashrepro import objectives as obj

CASES = [(d, k, tau) for d in DIVS for k in (None, 3) for tau in (None, 0.05)]


@pytest.mark.parametrize("divergence,top_k,tau", CASES)
def test_chunked_path_equals_naive_path(divergence, top_k, tau):
    mask = _mask([7, 4, 1], pad=2)
    s, t = _logits(3, 9, 37, seed=21)
    s.requires_grad_(True)
    ref = obj.local_signal_reference(s, t, mask, divergence, tau, top_k)
    (g_ref,) = torch.autograd.grad((ref * torch.linspace(0.5, 2, 9)).sum(), s)
    for chunk in (1, 3, 5, None):
        r = obj.local_signal(s, t, mask, divergence, tau, top_k, chunk_size=chunk)
        torch.testing.assert_close(r, ref, rtol=1e-5, atol=1e-6)
        (g,) = torch.autograd.grad((r * torch.linspace(0.5, 2, 9)).sum(), s)
        torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-7)
    assert g_ref.abs().sum() > 0


@pytest.mark.parametrize("divergence", DIVS)
def test_chunked_path_equals_naive_path_bf16(divergence):
    mask = _mask([5, 3], pad=1)
    s, t = _logits(2, 6, 64, seed=8)
    s = s.bfloat16().requires_grad_(True)
    t = t.bfloat16()
    ref = obj.local_signal_reference(s, t, mask, divergence)
    r = obj.local_signal(s, t, mask, divergence, chunk_size=2)
    assert r.dtype == torch.float32
    torch.testing.assert_close(r, ref, rtol=1e-5, atol=1e-6)  # fp32 math on the same bf16 input
    (g_ref,) = torch.autograd.grad(ref.sum(), s)
    (g,) = torch.autograd.grad(r.sum(), s)
    assert g.dtype == torch.bfloat16
    torch.testing.assert_close(g.float(), g_ref.float(), rtol=2e-2, atol=1e-4)


@pytest.mark.parametrize("divergence,top_k,tau", CASES)
def test_hidden_state_path_equals_naive_path(divergence, top_k, tau):
    mask = _mask([6, 2], pad=1)
    g = _gen(31)
    hs = torch.randn(2, 7, 8, generator=g).requires_grad_(True)
    ht = torch.randn(2, 7, 8, generator=g)
    W = (torch.randn(29, 8, generator=g) * 0.8).requires_grad_(True)
    ref = obj.local_signal_reference(hs @ W.T, ht @ W.T, mask, divergence, tau, top_k)
    g_ref = torch.autograd.grad(ref.sum(), (hs, W))
    for chunk in (1, 4, None):
        r = obj.local_signal_from_hidden(hs, ht, W, mask, divergence, tau, top_k, chunk)
        torch.testing.assert_close(r, ref, rtol=1e-5, atol=1e-6)
        grads = torch.autograd.grad(r.sum(), (hs, W))
        for got, want in zip(grads, g_ref, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # lm_head frozen (LoRA): only the hidden states get a gradient.
    W_frozen = W.detach()
    r = obj.local_signal_from_hidden(hs, ht, W_frozen, mask, divergence, tau, top_k, 3)
    (g_h,) = torch.autograd.grad(r.sum(), hs)
    torch.testing.assert_close(g_h, g_ref[0], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Right padding is invisible
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("top_k", [None, 3])
def test_right_padding_is_invisible_to_signals(top_k):
    lengths, T, V, P = [5, 3], 5, 23, 3
    mask = _mask(lengths)
    s, t = _logits(2, T, V, seed=13)
    garbage = torch.randn(1, P, V, generator=_gen(99)) * 100
    garbage[0, 0, :3] = float("nan")
    garbage[0, 1, :3] = float("inf")
    sp = _pad(s, P, garbage).requires_grad_(True)
    tp = _pad(t, P, -garbage)
    mp = _pad(mask, P, torch.zeros(1, 1, dtype=torch.bool))
    s = s.requires_grad_(True)
    for div in DIVS:
        r = obj.local_signal(s, t, mask, div, top_k=top_k, chunk_size=2)
        rp = obj.local_signal(sp, tp, mp, div, top_k=top_k, chunk_size=2)
        assert torch.equal(rp[:, :T], r) and torch.all(rp[:, T:] == 0)
        (g,) = torch.autograd.grad(r.sum(), s)
        (gp,) = torch.autograd.grad(rp.sum(), sp)
        assert torch.equal(gp[:, :T], g) and torch.all(gp[:, T:] == 0)
    assert torch.equal(obj.teacher_entropy(tp, mp)[:, :T], obj.teacher_entropy(t, mask))
    tokens = torch.randint(0, V, (2, T), generator=_gen(1))
    tokens_p = _pad(tokens, P, torch.tensor([[7]]))
    loss, diag = obj.eopd_token_loss(s, t, tokens, mask)
    loss_p, diag_p = obj.eopd_token_loss(sp, tp, tokens_p, mp)
    # Real-token values are bitwise identical; the token mean differs at most by fp32
    # summation order over the longer (zero-padded) rows.
    torch.testing.assert_close(loss_p, loss, rtol=1e-6, atol=1e-7)
    assert diag_p == pytest.approx(diag, rel=1e-6, abs=1e-7)
    (g,) = torch.autograd.grad(loss, s)
    (gp,) = torch.autograd.grad(loss_p, sp)
    torch.testing.assert_close(gp[:, :T], g, rtol=1e-6, atol=1e-9)
    assert torch.all(gp[:, T:] == 0)


def test_right_padding_is_invisible_to_hidden_path():
    mask = _mask([4, 2])
    g = _gen(17)
    hs, ht = torch.randn(2, 4, 6, generator=g), torch.randn(2, 4, 6, generator=g)
    W = torch.randn(19, 6, generator=g)
    junk = torch.full((1, 2, 6), float("nan"))
    r = obj.local_signal_from_hidden(hs, ht, W, mask, chunk_size=2)
    rp = obj.local_signal_from_hidden(
        _pad(hs, 2, junk), _pad(ht, 2, junk), W, _pad(mask, 2, torch.zeros(1, 1, dtype=torch.bool)),
        chunk_size=2,
    )  # fmt: skip
    assert torch.equal(rp[:, :4], r) and torch.all(rp[:, 4:] == 0)


# ----------------------------------------------------------------------------------------------
# Memory: the chunked path's extra peak is a fraction of the naive path's
# ----------------------------------------------------------------------------------------------

_MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    from dashrepro.objectives import local_signal, local_signal_reference

    def rss():
        fields = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])

    def peak(fn, T, V):
        s = torch.randn(1, T, V).requires_grad_(True)
        t = torch.randn(1, T, V)
        m = torch.ones(1, T, dtype=torch.bool)
        before, _ = rss()
        open("/proc/self/clear_refs", "w").write("5")
        fn(s, t, m).sum().backward()
        return rss()[1] - before

    naive = lambda s, t, m: local_signal_reference(s, t, m)
    chunked = lambda s, t, m: local_signal(s, t, m, chunk_size=16)
    peak(naive, 4, 32768); peak(chunked, 4, 32768)  # fault in code pages
    print(json.dumps({"naive": peak(naive, 512, 32768), "chunked": peak(chunked, 512, 32768)}))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_chunked_peak_memory_is_a_quarter_of_naive_or_less():
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("cannot reset the resident-set high-water mark")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT], capture_output=True, text=True,
                         env=env, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr

    peaks = json.loads(out.stdout.strip().splitlines()[-1])
    grad_kib = 512 * 32768 * 4 / 1024  # the gradient w.r.t. the logits, needed by any path
    assert peaks["naive"] > 3 * grad_kib  # sanity: the naive path materialises [T, V] tensors
    assert peaks["chunked"] * 4 <= peaks["naive"], peaks
