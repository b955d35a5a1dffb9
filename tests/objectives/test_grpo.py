"""Tests for ``dashrepro.objectives.grpo``: the GRPO term of the outcome-level hybrid.

Paper "DASH: divergence-adaptive supervision horizons", appendix ``sec:outcome_optimization``
("Compatibility with Outcome-Level RL"); TRL ``trl/trainer/grpo_trainer.py``.

Run: ``.venv/bin/pytest tests/objectives -q`` (CPU, small V, well under a minute).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from objectives_helpers import SETTINGS, _gen, _mask, _pad, lengths_st

from dashrepro import objectives as obj

# ----------------------------------------------------------------------------------------------
# GRPO hybrid (appendix "Compatibility with Outcome-Level RL"; TRL trl/trainer/grpo_trainer.py)
# ----------------------------------------------------------------------------------------------


def test_group_advantages_pinned_example_uses_unbiased_std():
    # One correct rollout out of K = 4: mean 0.25; unbiased std sqrt((0.75^2 + 3 0.25^2) / 3)
    # = 0.5 (TRL: rewards.view(-1, K).std(dim=1)); the biased std would be sqrt(0.1875).
    r = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    adv = obj.group_advantages(r)
    expected = torch.tensor([[0.75, -0.25, -0.25, -0.25]]) / (0.5 + 1e-4)
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(obj.group_advantages(r, scale="std"), adv)
    torch.testing.assert_close(obj.group_advantages(r, scale="none"), r - 0.25)


@SETTINGS
@given(seed=st.integers(0, 10_000), G=st.integers(1, 5), K=st.integers(2, 9))
def test_group_advantages_are_zero_mean_unit_std_per_group(seed, G, K):
    r = torch.randint(0, 2, (G, K), generator=_gen(seed)).float()
    r[0] = 1.0  # one group with equal rewards
    adv = obj.group_advantages(r)
    assert torch.all(adv[0] == 0)
    torch.testing.assert_close(adv.sum(1), torch.zeros(G), atol=1e-5, rtol=0)
    spread = r.std(1) > 0
    if spread.any():
        std = obj.group_advantages(r, eps=0.0)[spread].std(1)
        torch.testing.assert_close(std, torch.ones_like(std))


def test_group_advantages_degenerate_and_batch_scale():
    assert torch.all(obj.group_advantages(torch.tensor([[1.0], [0.0]])) == 0)  # K = 1
    assert torch.all(obj.group_advantages(torch.full((3, 4), 0.7)) == 0)
    r = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    adv = obj.group_advantages(r, scale="batch")
    torch.testing.assert_close(adv, (r - r.mean(1, keepdim=True)) / (r.std() + 1e-4))
    for bad in (dict(scale="rank"), dict(eps=-1.0)):
        with pytest.raises(ValueError):
            obj.group_advantages(r, **bad)
    with pytest.raises(ValueError):
        obj.group_advantages(torch.tensor([[1.0, float("nan")]]))


def _gae_reference(a, mask, discount):
    """Literal per-row loop: A_T = a_T, A_t = a_t + discount A_{t+1} over the real tokens."""
    out = torch.zeros_like(a, dtype=torch.float64)
    for b in range(a.shape[0]):
        idx = mask[b].nonzero().flatten().tolist()
        nxt = 0.0
        for t in reversed(idx):
            nxt = float(a[b, t]) + discount * nxt
            out[b, t] = nxt
    return out.float()


@SETTINGS
@given(lengths=lengths_st, pad=st.integers(0, 3), seed=st.integers(0, 10_000),
       gamma=st.floats(0.0, 1.0), lam=st.floats(0.0, 1.0))  # fmt: skip
def test_discounted_token_advantages_match_backward_recursion(lengths, pad, seed, gamma, lam):
    mask = _mask(lengths, pad)
    a = torch.randn(mask.shape, generator=_gen(seed))
    out = obj.discounted_token_advantages(a, mask, gamma, lam)
    torch.testing.assert_close(out, _gae_reference(a, mask, gamma * lam), rtol=1e-5, atol=1e-5)
    assert torch.all(out[~mask] == 0)
    # Only the product gamma * lambda matters.
    torch.testing.assert_close(out, obj.discounted_token_advantages(a, mask, gamma * lam, 1.0),
                               rtol=1e-6, atol=1e-6)  # fmt: skip


def test_discounted_token_advantages_zero_discount_is_identity():
    mask = _mask([5, 2, 4], pad=1)
    a = torch.randn(mask.shape, generator=_gen(70))
    out = obj.discounted_token_advantages(a, mask, gamma=0.0, lam=0.0)
    assert torch.equal(out, torch.where(mask, a, 0.0))


@pytest.mark.parametrize("gamma,lam", [(0.95, 0.95), (0.5, 0.9), (1.0, 1.0)])
def test_discounted_token_advantages_constant_closed_form(gamma, lam):
    lengths = [12, 5, 1]
    mask = _mask(lengths, pad=2)
    a = torch.tensor([0.7, -1.3, 2.0])[:, None].expand(mask.shape)
    out = obj.discounted_token_advantages(a, mask, gamma, lam)
    gl = gamma * lam
    for b, T in enumerate(lengths):
        n = torch.arange(T, 0, -1, dtype=torch.float64)  # tokens from t to the end
        closed = n if gl == 1.0 else (1 - gl**n) / (1 - gl)
        torch.testing.assert_close(out[b, :T], (a[b, 0] * closed).float(), rtol=1e-5, atol=1e-6)
    # A terminal-only advantage gives the critic-free trace (gamma lambda)^(T - t) a.
    term = torch.zeros(mask.shape)
    for b, T in enumerate(lengths):
        term[b, T - 1] = a[b, 0]
    out = obj.discounted_token_advantages(term, mask, gamma, lam)
    for b, T in enumerate(lengths):
        pw = torch.arange(T - 1, -1, -1, dtype=torch.float64)
        torch.testing.assert_close(out[b, :T], (a[b, 0] * gl**pw).float(), rtol=1e-5, atol=1e-7)


def test_discounted_token_advantages_padding_invariance():
    mask = _mask([6, 2, 4])
    a = torch.randn(mask.shape, generator=_gen(71))
    base = obj.discounted_token_advantages(a, mask)
    nan = torch.full((1, 1), float("nan"))
    no = torch.zeros(1, 1, dtype=torch.bool)
    right = obj.discounted_token_advantages(_pad(a, 3, nan), _pad(mask, 3, no))
    assert torch.equal(right[:, :6], base) and torch.all(right[:, 6:] == 0)
    # Left padding: the recursion starts at each row's last real token wherever the run sits.
    left_a = torch.cat([torch.full((3, 2), float("nan")), a], 1)
    left_m = torch.cat([torch.zeros(3, 2, dtype=torch.bool), mask], 1)
    left = obj.discounted_token_advantages(left_a, left_m)
    assert torch.equal(left[:, 2:], base) and torch.all(left[:, :2] == 0)
    holes = mask.clone()
    holes[0, 2] = False
    with pytest.raises(ValueError):
        obj.discounted_token_advantages(a, holes)
    with pytest.raises(ValueError):
        obj.discounted_token_advantages(a, mask, gamma=1.5)


def test_grpo_token_loss_value_and_gradient():
    lengths = [5, 2, 4, 0]
    mask = _mask(lengths, pad=1)
    g = _gen(72)
    lp = (-torch.rand(mask.shape, generator=g) * 3).requires_grad_(True)
    A = torch.randn(mask.shape, generator=g)
    loss = obj.grpo_token_loss(lp, A, mask)
    n_valid = sum(1 for n in lengths if n > 0)
    expected = sum(-(A[b, :n] * lp[b, :n]).sum() / n for b, n in enumerate(lengths) if n) / n_valid
    torch.testing.assert_close(loss, expected)
    (grad,) = torch.autograd.grad(loss, lp)
    length = mask.sum(1, keepdim=True).clamp(min=1).float()
    torch.testing.assert_close(grad, torch.where(mask, -A / (length * n_valid), 0.0))
    # Same gradient as TRL's PPO-clipped form at ratio 1 (num_iterations = 1, beta = 0).
    ratio = torch.exp(lp - lp.detach())
    ppo = -torch.min(ratio * A, ratio.clamp(0.8, 1.2) * A)
    ppo_loss = ((ppo * mask).sum(-1) / mask.sum(-1).clamp(min=1))[:n_valid].mean()
    (grad_ppo,) = torch.autograd.grad(ppo_loss, lp)
    torch.testing.assert_close(grad, grad_ppo)
    # A [B] sequence advantage broadcasts to every token.
    seq = torch.tensor([1.0, -2.0, 0.5, 3.0])
    broadcast = obj.grpo_token_loss(lp, seq[:, None].expand(mask.shape), mask)
    torch.testing.assert_close(obj.grpo_token_loss(lp, seq, mask), broadcast)
    with pytest.raises(ValueError):
        obj.grpo_token_loss(lp, A[:, :2], mask)


def test_grpo_token_loss_padding_invariance():
    mask = _mask([5, 2])
    g = _gen(73)
    lp = (-torch.rand(mask.shape, generator=g) * 3).requires_grad_(True)
    A = torch.randn(mask.shape, generator=g)
    base = obj.grpo_token_loss(lp, A, mask)
    nan = torch.full((1, 1), float("nan"))
    lpp = _pad(lp.detach(), 4, nan).requires_grad_(True)
    padded = obj.grpo_token_loss(lpp, _pad(A, 4, nan),
                                 _pad(mask, 4, torch.zeros(1, 1, dtype=torch.bool)))  # fmt: skip
    torch.testing.assert_close(padded, base)
    (gb,) = torch.autograd.grad(base, lp)
    (gp,) = torch.autograd.grad(padded, lpp)
    assert torch.equal(gp[:, :5], gb) and torch.all(gp[:, 5:] == 0)


def test_hybrid_loss_pipeline():
    """DASH + eta GRPO on one prompt group: the pieces compose and eta weighs the GRPO term."""
    mask = _mask([6, 4, 5, 3])
    g = _gen(74)
    r = torch.randn(mask.shape, generator=g).requires_grad_(True)
    lp = (-torch.rand(mask.shape, generator=g) * 3).requires_grad_(True)
    dash = obj.aggregate("dash", r, mask).loss
    adv = obj.group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]))[0]
    token_adv = obj.discounted_token_advantages(adv[:, None].expand(mask.shape), mask)
    grpo = obj.grpo_token_loss(lp, token_adv, mask)
    total = obj.hybrid_loss(dash, grpo, eta=0.3)
    torch.testing.assert_close(total, dash + 0.3 * grpo)
    g_r, g_lp = torch.autograd.grad(total, [r, lp], retain_graph=True)
    torch.testing.assert_close(g_r, torch.autograd.grad(dash, r, retain_graph=True)[0])
    torch.testing.assert_close(g_lp, 0.3 * torch.autograd.grad(grpo, lp, retain_graph=True)[0])
    torch.testing.assert_close(obj.hybrid_loss(dash, grpo, eta=0.0), dash)
    with pytest.raises(ValueError):
        obj.hybrid_loss(dash, grpo, eta=float("nan"))
