"""Tests for ``dashrepro.objectives.baselines``: EOPD and AVSD against literal reference ports.

EOPD: SaFo-Lab/PW-OPSD ``ea_opsd_trainer.py``; AVSD: duykhuongnguyen/AVSD
``src/avsd/common/multiview_distill.py``.

Run: ``.venv/bin/pytest tests/objectives -q`` (CPU, small V, well under a minute).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from objectives_helpers import SETTINGS, _gen, _logits, _mask, _pad

from dashrepro import objectives as obj

# ----------------------------------------------------------------------------------------------
# EOPD (SaFo-Lab/PW-OPSD ea_opsd_trainer.py)
# ----------------------------------------------------------------------------------------------


def _eopd_reference(s, t, y, mask, threshold, k):
    """Literal full-tensor transcription: PPO-clipped sampled-token term at ratio 1, teacher
    entropy gate, top-k forward KL (teacher renormalised, student full vocabulary)."""
    ls = F.log_softmax(s.float(), -1)
    lt = F.log_softmax(t.float(), -1).detach()
    lps = ls.gather(-1, y[..., None]).squeeze(-1)
    lpt = lt.gather(-1, y[..., None]).squeeze(-1)
    adv = (lpt - lps).detach()
    ratio = torch.exp(lps - lps.detach())
    opd_ppo = torch.maximum(-ratio * adv, -ratio.clamp(0.8, 1.2) * adv)
    vals, idx = t.float().topk(k, -1)
    lt_k = F.log_softmax(vals, -1).detach()
    fkl = (lt_k.exp() * (lt_k - ls.gather(-1, idx))).sum(-1)
    H = -(lt.exp() * lt).sum(-1)
    gate = (H > threshold).float()
    n = mask.sum()
    loss_ppo = ((opd_ppo + gate * fkl) * mask).sum() / n
    loss_brief = ((-adv * lps + gate * fkl) * mask).sum() / n
    return loss_ppo, loss_brief, gate


@pytest.mark.parametrize("threshold", [0.0, 2.9, 100.0])
def test_eopd_matches_reference_value_and_gradient(threshold):
    mask = _mask([5, 3], pad=1)
    s, t = _logits(2, 6, 40, seed=41, scale=1.5)
    s.requires_grad_(True)
    y = torch.randint(0, 40, (2, 6), generator=_gen(3))
    loss, diag = obj.eopd_token_loss(s, t, y, mask, entropy_threshold=threshold, top_k=16,
                                     chunk_size=3)  # fmt: skip
    ref_ppo, ref_brief, gate = _eopd_reference(s, t, y, mask, threshold, 16)
    torch.testing.assert_close(loss, ref_brief, rtol=1e-5, atol=1e-6)
    assert diag["loss_ppo_form"] == pytest.approx(ref_ppo.item(), rel=1e-5, abs=1e-6)
    assert diag["high_entropy_frac"] == pytest.approx(gate[mask].mean().item())
    # Same gradient as the PPO-clipped on-policy form of the reference code.
    (g,) = torch.autograd.grad(loss, s)
    (g_ref,) = torch.autograd.grad(ref_ppo, s)
    torch.testing.assert_close(g, g_ref, rtol=1e-5, atol=1e-7)
    if threshold == 100.0:  # no token above the entropy threshold: L^OPD only
        assert diag["high_entropy_frac"] == 0.0
        assert diag["loss"] == pytest.approx(diag["opd_mean"], rel=1e-6)
    if threshold == 0.0:
        assert diag["high_entropy_frac"] == 1.0


# ----------------------------------------------------------------------------------------------
# AVSD (duykhuongnguyen/AVSD src/avsd/common/multiview_distill.py)
# ----------------------------------------------------------------------------------------------


def _avsd_reference(student, views, labels):
    """Literal transcription of duykhuongnguyen/AVSD ``build_uniform_sampled_tinker_target``
    (mode="avsd", gate_mode="avsd") and ``sampled_token_tinker_loss_from_log_probs``, in the
    reference's own layout: ``student`` [B, T], ``views`` [B, M, T], ``labels`` -100 = ignore."""
    eps = 1e-8
    num_views = views.shape[1]
    log_q_g = views.mean(dim=1)
    log_q_a = torch.logsumexp(views, dim=1) - math.log(num_views)
    jensen_gap = (log_q_a - log_q_g).clamp_min(0.0)
    delta = views - student.unsqueeze(1)
    delta_mean = delta.mean(dim=1)
    delta_abs_mean = delta.abs().mean(dim=1)
    consensus_adv = delta_mean
    avsd = consensus_adv.abs() / (delta_abs_mean + eps)
    gate = avsd * consensus_adv.abs() / (consensus_adv.abs() + jensen_gap + eps)
    target = log_q_g + gate * jensen_gap

    label_mask = labels != -100
    finite_mask = torch.isfinite(student) & torch.isfinite(target)
    mask = label_mask & finite_mask
    advantage = (target - student).detach()
    loss = -(advantage[mask] * student[mask]).mean()
    return target, {"gate": gate, "jensen_gap": jensen_gap, "avsd": avsd}, loss


def _sampled_logprobs(V, B, T, seed, scale=2.0):
    """Log-probs of one sampled token under V views and the student (log_softmax of random
    logits over a small vocabulary, so values are realistic negative numbers)."""
    g = _gen(seed)
    logits = torch.randn(V + 1, B, T, 11, generator=g) * scale
    lp = F.log_softmax(logits, -1)[..., 0]
    return lp[:V], lp[V]


@pytest.mark.parametrize("V", [1, 2, 3, 5])
def test_avsd_matches_literal_reference_port(V):
    mask = _mask([7, 4, 1], pad=2)
    views, student = _sampled_logprobs(V, 3, mask.shape[1], seed=50 + V)
    student.requires_grad_(True)
    target, aux = obj.avsd_target_logprobs(views, student, mask)
    loss = obj.avsd_token_loss(student, target, mask)

    labels = torch.where(mask, 0, -100)
    ref_student = student.detach().clone().requires_grad_(True)
    ref_target, ref_aux, ref_loss = _avsd_reference(ref_student, views.permute(1, 0, 2), labels)
    torch.testing.assert_close(target[mask], ref_target[mask].detach(), rtol=1e-6, atol=1e-6)
    for key in ("gate", "jensen_gap", "avsd"):
        torch.testing.assert_close(aux[key][mask], ref_aux[key][mask].detach(), rtol=1e-6,
                                   atol=1e-6)  # fmt: skip
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-7)
    (g,) = torch.autograd.grad(loss, student)
    (g_ref,) = torch.autograd.grad(ref_loss, ref_student)
    torch.testing.assert_close(g, g_ref, rtol=1e-6, atol=1e-8)


def test_avsd_all_views_agree_gives_the_common_logprob():
    mask = _mask([5, 3], pad=1)
    common = -torch.rand(mask.shape, generator=_gen(60)) * 4 - 0.1
    views = common.expand(3, *common.shape).clone()
    student = common - 0.5 * torch.rand(mask.shape, generator=_gen(61)) - 0.2  # student != views
    target, aux = obj.avsd_target_logprobs(views, student, mask)
    assert torch.all(aux["jensen_gap"][mask] < 1e-6)  # J = 0 up to logsumexp rounding
    torch.testing.assert_close(target[mask], common[mask], rtol=0, atol=1e-6)
    # All d_v equal: |mean d| / mean |d| = 1, and |mean d| / (|mean d| + 0) = 1.
    torch.testing.assert_close(aux["avsd"][mask], torch.ones(int(mask.sum())), atol=1e-6,
                               rtol=0)  # fmt: skip
    torch.testing.assert_close(aux["gate"][mask], torch.ones(int(mask.sum())), atol=1e-5, rtol=0)
    # Student equal to every view: 0/0 in both gate factors, made safe by eps -> gate 0.
    target0, aux0 = obj.avsd_target_logprobs(views, common, mask)
    assert torch.all(aux0["gate"] == 0)
    torch.testing.assert_close(target0[mask], common[mask], rtol=0, atol=1e-6)


def test_avsd_single_view_target_is_that_view():
    mask = _mask([6, 2])
    views, student = _sampled_logprobs(1, 2, 6, seed=62)
    target, aux = obj.avsd_target_logprobs(views, student, mask)
    assert torch.all(aux["jensen_gap"][mask] < 1e-6)
    torch.testing.assert_close(target[mask], views[0][mask], rtol=0, atol=1e-6)


@SETTINGS
@given(seed=st.integers(0, 10_000), V=st.integers(2, 6), scale=st.floats(0.1, 8.0))
def test_avsd_target_lies_between_geometric_and_arithmetic_consensus(seed, V, scale):
    # 0 <= g <= 1 and J = log q_a - log q_g >= 0 (AM-GM), so log q_g <= target <= log q_a, and
    # min_v log p_v <= log q_g, log q_a <= max_v log p_v.
    mask = _mask([9, 5, 1])
    views, student = _sampled_logprobs(V, 3, 9, seed=seed, scale=scale)
    target, aux = obj.avsd_target_logprobs(views, student, mask)
    tol = 1e-5
    assert torch.all((aux["gate"][mask] >= 0) & (aux["gate"][mask] <= 1))
    assert torch.all(aux["jensen_gap"][mask] >= 0)
    assert torch.all(target[mask] >= aux["log_q_g"][mask] - tol)
    assert torch.all(target[mask] <= aux["log_q_a"][mask] + tol)
    assert torch.all(target[mask] >= views.min(0).values[mask] - tol)
    assert torch.all(target[mask] <= views.max(0).values[mask] + tol)


def test_avsd_gradient_flows_only_through_student_logprobs():
    mask = _mask([6, 3], pad=1)
    views, student = _sampled_logprobs(3, 2, mask.shape[1], seed=63)
    views.requires_grad_(True)
    student.requires_grad_(True)
    target, aux = obj.avsd_target_logprobs(views, student, mask)
    assert not target.requires_grad and not any(v.requires_grad for v in aux.values())
    loss = obj.avsd_token_loss(student, target, mask)
    g_views, g_student = torch.autograd.grad(loss, [views, student], allow_unused=True)
    assert g_views is None
    # The target depends on log pS through the gate, but only sg[target - log pS] multiplies
    # log pS: d loss / d log pS = -(target - log pS) / N over the N real tokens (global mean).
    expected = torch.where(mask, -(target - student.detach()) / mask.sum(), 0.0)
    torch.testing.assert_close(g_student, expected, rtol=1e-6, atol=1e-8)


def test_avsd_padding_and_nonfinite_tokens_are_invisible():
    mask = _mask([5, 3])
    views, student = _sampled_logprobs(3, 2, 5, seed=64)
    student.requires_grad_(True)
    target, aux = obj.avsd_target_logprobs(views, student, mask)
    loss = obj.avsd_token_loss(student, target, mask)
    P = 3
    nan = torch.full((1, 1), float("nan"))
    mp = _pad(mask, P, torch.zeros(1, 1, dtype=torch.bool))
    vp = torch.stack([_pad(v, P, nan) for v in views])
    sp = _pad(student.detach(), P, nan).requires_grad_(True)
    tp, auxp = obj.avsd_target_logprobs(vp, sp, mp)
    assert torch.equal(tp[:, :5], target) and torch.all(tp[:, 5:] == 0)
    assert all(torch.equal(auxp[k][:, :5], aux[k]) for k in aux)
    lossp = obj.avsd_token_loss(sp, tp, mp)
    torch.testing.assert_close(lossp, loss, rtol=1e-6, atol=1e-7)
    (g,) = torch.autograd.grad(loss, student)
    (gp,) = torch.autograd.grad(lossp, sp)
    torch.testing.assert_close(gp[:, :5], g, rtol=1e-6, atol=1e-8)
    assert torch.all(gp[:, 5:] == 0)
    # As in the reference, a real token with a non-finite target is left out of the mean.
    bad = target.clone()
    bad[0, 1] = float("-inf")
    keep = mask.clone()
    keep[0, 1] = False
    torch.testing.assert_close(obj.avsd_token_loss(student, bad, mask),
                               obj.avsd_token_loss(student, target, keep))  # fmt: skip
    # No usable token: 0, still differentiable.
    empty = obj.avsd_token_loss(student, target, torch.zeros_like(mask))
    assert empty.item() == 0.0 and empty.requires_grad


def test_avsd_argument_validation():
    views, student = _sampled_logprobs(3, 2, 4, seed=65)
    mask = _mask([4, 2])
    with pytest.raises(ValueError):
        obj.avsd_target_logprobs(views[0], student, mask)
    with pytest.raises(ValueError):
        obj.avsd_target_logprobs(views[:, :, :3], student, mask)
    with pytest.raises(ValueError):
        obj.avsd_target_logprobs(views, student, mask, eps=0.0)
    with pytest.raises(ValueError):
        obj.avsd_token_loss(student, student[:, :3], mask)
