"""Tests for ``dashrepro.objectives.signals``: the local signal values r_k.

Paper "DASH: divergence-adaptive supervision horizons", Eq. ``supp_clipped_signal`` (per-entry
clip, may be negative), Table ``tab:vocabulary_support`` (top-k plus a tail bucket). The
unclipped signals are checked against ``torch.nn.functional.kl_div`` references; the
divergences' own tests are in test_divergences.py.

Run: ``.venv/bin/pytest tests/objectives -q`` (CPU, small V, well under a minute).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from objectives_helpers import DIVS, SETTINGS, _logits, _mask

from dashrepro import objectives as obj


def _kl_reference(student_logits, teacher_logits, divergence):
    """Unclipped full-vocabulary divergences through torch.nn.functional.kl_div."""
    ls = F.log_softmax(student_logits.double(), -1)
    lt = F.log_softmax(teacher_logits.double(), -1)
    if divergence == "forward_kl":  # KL(pT || pS)
        return F.kl_div(ls, lt, reduction="none", log_target=True).sum(-1)
    if divergence == "reverse_kl":  # KL(pS || pT)
        return F.kl_div(lt, ls, reduction="none", log_target=True).sum(-1)
    log_m = torch.log(0.5 * (ls.exp() + lt.exp()))
    return 0.5 * F.kl_div(log_m, lt, reduction="none", log_target=True).sum(-1) + 0.5 * F.kl_div(
        log_m, ls, reduction="none", log_target=True
    ).sum(-1)


def test_signal_argument_validation():
    s, t = _logits(1, 2, 5, seed=0)
    mask = torch.ones(1, 2)
    with pytest.raises(ValueError, match="'tv_distance'"):
        obj.local_signal(s, t, mask, divergence="tv_distance")
    with pytest.raises(ValueError, match="'tv_distance'"):
        obj.local_signal_reference(s, t, mask, divergence="tv_distance")
    with pytest.raises(ValueError, match="top_k"):
        obj.local_signal(s, t, mask, top_k=0)
    with pytest.raises(ValueError, match="mask"):
        obj.local_signal(s, t, torch.ones(1, 3))


# ----------------------------------------------------------------------------------------------
# Local signals
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("divergence", DIVS)
@SETTINGS
@given(seed=st.integers(0, 10_000), V=st.integers(2, 40), scale=st.floats(0.1, 6.0))
def test_unclipped_divergences_match_kl_div(divergence, seed, V, scale):
    mask = _mask([3, 2], pad=1)
    s, t = _logits(2, 4, V, seed, scale)
    ref = _kl_reference(s, t, divergence).float() * mask
    for fn in (obj.local_signal, obj.local_signal_reference):
        r = fn(s, t, mask, divergence=divergence, tau=None)
        assert r.dtype == torch.float32
        torch.testing.assert_close(r, ref, rtol=1e-4, atol=1e-5)
    assert torch.all(ref[mask] >= -1e-6)  # unclipped divergences are non-negative


@pytest.mark.parametrize("divergence", DIVS)
def test_clip_is_per_vocabulary_entry_before_the_sum(divergence):
    mask = _mask([4])
    s, t = _logits(1, 4, 30, seed=11, scale=4.0)
    ls, lt = F.log_softmax(s, -1), F.log_softmax(t, -1)
    if divergence == "forward_kl":
        summands = F.kl_div(ls, lt, reduction="none", log_target=True)
    elif divergence == "reverse_kl":
        summands = F.kl_div(lt, ls, reduction="none", log_target=True)
    else:
        log_m = torch.log(0.5 * (ls.exp() + lt.exp()))
        summands = 0.5 * (
            F.kl_div(log_m, lt, reduction="none", log_target=True)
            + F.kl_div(log_m, ls, reduction="none", log_target=True)
        )
    expected = summands.clamp(max=0.05).sum(-1)
    r = obj.local_signal(s, t, mask, divergence=divergence, tau=0.05)
    torch.testing.assert_close(r, expected, rtol=1e-5, atol=1e-6)
    unclipped = obj.local_signal(s, t, mask, divergence=divergence, tau=None)
    assert torch.all(r <= unclipped + 1e-6)  # r_t <= d_t
    assert torch.all(r <= 0.05 * 30 + 1e-6)  # r_t <= tau |A|
    # Clipping the sum instead would give something else here.
    assert not torch.allclose(r, unclipped.clamp(max=0.05))


def test_clipped_signal_can_be_negative():
    """Appendix "Clipped Local Signal": large positive summands are capped, negative kept."""
    p_t = torch.tensor([0.5, 0.5, 1e-6])
    p_s = torch.tensor([0.01, 0.98, 0.01])
    s, t = p_s.log().view(1, 1, 3), (p_t / p_t.sum()).log().view(1, 1, 3)
    mask = torch.ones(1, 1)
    r = obj.local_signal(s, t, mask, tau=0.05)
    d = obj.local_signal(s, t, mask, tau=None)
    assert d.item() > 0 and r.item() < 0
    assert r.item() == pytest.approx(0.05 + 0.5 * math.log(0.5 / 0.98), abs=1e-3)


@pytest.mark.parametrize("divergence", DIVS)
def test_topk_signal_is_the_divergence_over_k_plus_one_outcomes(divergence):
    mask = _mask([3, 2], pad=1)
    s, t = _logits(2, 4, 20, seed=5)
    for k in (1, 4, 19):
        ls, lt = obj.topk_tail_logprobs(s, t, k)
        expected = obj.divergence_summands(ls, lt, divergence).clamp(max=0.05).sum(-1) * mask
        r = obj.local_signal(s, t, mask, divergence=divergence, top_k=k)
        torch.testing.assert_close(r, expected, rtol=1e-5, atol=1e-6)
    # With k = V - 1 the tail is one token: the k+1 outcomes are the full vocabulary.
    full = obj.local_signal(s, t, mask, divergence=divergence)
    torch.testing.assert_close(obj.local_signal(s, t, mask, divergence=divergence, top_k=19), full,
                               rtol=1e-5, atol=1e-6)  # fmt: skip
    torch.testing.assert_close(obj.local_signal(s, t, mask, divergence=divergence, top_k=50), full)


def test_teacher_gets_no_gradient():
    mask = _mask([4, 2])
    s, t = _logits(2, 4, 11, seed=9)
    s.requires_grad_(True)
    t.requires_grad_(True)
    for divergence in DIVS:
        for top_k in (None, 2):
            obj.local_signal(s, t, mask, divergence, top_k=top_k).sum().backward()
            obj.local_signal_reference(s, t, mask, divergence, top_k=top_k).sum().backward()
    obj.eopd_token_loss(s, t, torch.zeros(2, 4, dtype=torch.long), mask)[0].backward()
    assert obj.teacher_entropy(t, mask).requires_grad is False
    assert t.grad is None
    assert s.grad is not None and s.grad.abs().sum() > 0
    hs = torch.randn(2, 4, 5).requires_grad_(True)
    ht = torch.randn(2, 4, 5).requires_grad_(True)
    W = torch.randn(11, 5).requires_grad_(True)
    obj.local_signal_from_hidden(hs, ht, W, mask).sum().backward()
    assert ht.grad is None and hs.grad.abs().sum() > 0 and W.grad.abs().sum() > 0
    # W's gradient comes from the student branch only.
    (g_student,) = torch.autograd.grad(
        obj.local_signal_reference(hs.detach() @ W.T, (ht @ W.T).detach(), mask).sum(), W
    )
    torch.testing.assert_close(W.grad, g_student, rtol=1e-5, atol=1e-6)


def test_teacher_entropy():
    mask = _mask([3, 1], pad=1)
    s, t = _logits(2, 4, 17, seed=12)
    H = obj.teacher_entropy(t, mask, chunk_size=2)
    p = F.softmax(t.double(), -1)
    expected = (-(p * p.log()).sum(-1)).float() * mask
    torch.testing.assert_close(H, expected, rtol=1e-5, atol=1e-6)
    uniform = obj.teacher_entropy(torch.zeros(1, 2, 17), torch.ones(1, 2))
    torch.testing.assert_close(uniform, torch.full((1, 2), math.log(17)))
