"""Tests for ``dashrepro.objectives``: they pin the paper's identities, not the code.

Paper: ``paper/000_da563d0c50e8b155.txt``; appendix "Aggregation Coefficients and Supervision
Horizons" (``1 <= c_k <= k``, the constant-gate closed form, ``sum_k c_k = sum_t h_t``),
Eqs. ``dash_recursion``/``dash_objective``/``dash_weighted_objective`` (recursion form and
weighted form agree in value and gradient), Eq. ``supp_clipped_signal`` (per-entry clip, may be
negative). Divergences are checked against ``torch.nn.functional.kl_div`` references.

Run: ``.venv/bin/pytest tests/test_objectives.py -q`` (CPU, small V, well under a minute).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from dashrepro import objectives as obj

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True)
DIVS = ("forward_kl", "reverse_kl", "jsd")


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _mask(lengths: list[int], pad: int = 0) -> torch.Tensor:
    T = max(lengths) + pad
    m = torch.zeros(len(lengths), T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        m[b, :n] = True
    return m


def _logits(B, T, V, seed, scale=3.0):
    g = _gen(seed)
    return torch.randn(B, T, V, generator=g) * scale, torch.randn(B, T, V, generator=g) * scale


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """1-based index k of each real token within its rollout."""
    return mask.long().cumsum(1)


def _recursion_loss(r: torch.Tensor, gates: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Literal Eqs. dash_recursion + dash_objective: A_T = r_T, A_t = r_t + lambda_t A_{t+1},
    L_b = (1/T_b) sum_t A_t; mean over rollouts. ``gates`` are detached constants."""
    losses = []
    for b in range(r.shape[0]):
        T = int(mask[b].sum())
        A = [None] * T
        A[T - 1] = r[b, T - 1]
        for t in range(T - 2, -1, -1):
            A[t] = r[b, t] + gates[b, t].detach() * A[t + 1]
        losses.append(torch.stack(A).sum() / T)
    return torch.stack(losses).mean()


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


lengths_st = st.lists(st.integers(1, 12), min_size=1, max_size=3)


# ----------------------------------------------------------------------------------------------
# Coefficients and horizons (appendix "Aggregation Coefficients and Supervision Horizons")
# ----------------------------------------------------------------------------------------------


@SETTINGS
@given(lengths=lengths_st, pad=st.integers(0, 3), seed=st.integers(0, 10_000),
       kappa=st.floats(0.0, 30.0), scale=st.floats(0.01, 5.0))  # fmt: skip
def test_coefficients_lie_between_one_and_position(lengths, pad, seed, kappa, scale):
    mask = _mask(lengths, pad)
    r = torch.randn(mask.shape, generator=_gen(seed)) * scale
    c = obj.dash_coefficients(r, mask, kappa=kappa)
    k = _positions(mask).float()
    assert torch.all(c[mask] >= 1.0 - 1e-6)
    assert torch.all(c[mask] <= k[mask] + 1e-5)
    assert torch.all(c[~mask] == 0)
    assert torch.all(c[:, 0] == 1.0)  # c_1 = 1


@SETTINGS
@given(lam=st.floats(0.0, 0.99), T=st.integers(1, 40))
def test_constant_gate_closed_forms(lam, T):
    mask = torch.ones(1, T, dtype=torch.bool)
    gates = torch.full((1, T), lam)
    c = obj.coefficients_from_gates(gates, mask)[0].double()
    h = obj.horizons_from_gates(gates, mask)[0].double()
    k = torch.arange(1, T + 1, dtype=torch.float64)
    torch.testing.assert_close(c, (1 - lam**k) / (1 - lam), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(h, (1 - lam ** (T - k + 1)) / (1 - lam), rtol=1e-5, atol=1e-5)
    agg = obj.aggregate("fixed_lambda", torch.zeros(1, T), mask, lam=lam)
    torch.testing.assert_close(
        agg.coefficients[0].double(), (1 - lam**k) / (1 - lam), rtol=1e-5, atol=1e-5
    )


@SETTINGS
@given(lengths=lengths_st, pad=st.integers(0, 3), seed=st.integers(0, 10_000))
def test_coefficients_and_horizons_match_gate_product_sums(lengths, pad, seed):
    """c_k = sum_{t<=k} prod_{j=t}^{k-1} lambda_j (Eq. supp_coefficient_closed_form),
    h_t = sum_{k>=t} prod_{j=t}^{k-1} lambda_j (Eq. supp_effective_horizon), and
    sum_k c_k = sum_t h_t."""
    mask = _mask(lengths, pad)
    gates = torch.rand(mask.shape, generator=_gen(seed)) * mask
    c = obj.coefficients_from_gates(gates, mask).double()
    h = obj.horizons_from_gates(gates, mask).double()
    for b, T in enumerate(lengths):
        lam = gates[b, :T].double()

        def prod(t, k, lam=lam):  # prod_{j=t}^{k-1} lambda_j, empty product = 1
            return torch.prod(lam[t:k]) if k > t else torch.tensor(1.0, dtype=torch.float64)

        c_ref = torch.stack([sum(prod(t, k) for t in range(k + 1)) for k in range(T)])
        h_ref = torch.stack([sum(prod(t, k) for k in range(t, T)) for t in range(T)])
        torch.testing.assert_close(c[b, :T], c_ref, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(h[b, :T], h_ref, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(c[b].sum(), h[b].sum(), rtol=1e-6, atol=1e-6)
        assert h[b, T - 1] == 1.0  # h_T = 1
    assert torch.all(h[~mask] == 0)


@SETTINGS
@given(lengths=lengths_st, seed=st.integers(0, 10_000))
def test_zero_gate_gives_opsd(lengths, seed):
    mask = _mask(lengths, pad=2)
    r = torch.randn(mask.shape, generator=_gen(seed)).requires_grad_(True)
    fixed = obj.aggregate("fixed_lambda", r, mask, lam=0.0)
    opsd = obj.aggregate("opsd", r, mask)
    # Eq. opsd_loss: (1/T) sum_t r_t per rollout, mean over rollouts.
    expected = torch.stack([r[b, :T].mean() for b, T in enumerate(lengths)]).mean()
    torch.testing.assert_close(fixed.loss, expected)
    torch.testing.assert_close(opsd.loss, expected)
    assert torch.all(fixed.coefficients == mask.float())
    (g_fixed,) = torch.autograd.grad(fixed.loss, r)
    (g_opsd,) = torch.autograd.grad(opsd.loss, r)
    torch.testing.assert_close(g_fixed, g_opsd)


@SETTINGS
@given(lengths=lengths_st, pad=st.integers(0, 3), seed=st.integers(0, 10_000),
       kappa=st.sampled_from([0.5, 1.0, 5.0, 20.0]))  # fmt: skip
def test_recursion_form_equals_weighted_form_in_value_and_gradient(lengths, pad, seed, kappa):
    """Eqs. dash_recursion/dash_objective vs Eq. dash_weighted_objective, gradient only
    through r (Eq. supp_dash_gradient)."""
    mask = _mask(lengths, pad)
    r = torch.randn(mask.shape, generator=_gen(seed), dtype=torch.float32).requires_grad_(True)
    agg = obj.aggregate("dash", r, mask, kappa=kappa)
    lam = obj.gates_from_gap(r, mask, kappa)
    literal = _recursion_loss(r, lam, mask)
    torch.testing.assert_close(agg.loss, literal, rtol=1e-5, atol=1e-6)
    (g_weighted,) = torch.autograd.grad(agg.loss, r)
    (g_literal,) = torch.autograd.grad(literal, r)
    torch.testing.assert_close(g_weighted, g_literal, rtol=1e-5, atol=1e-6)
    # The gradient of each r_k is c_k / (T_b * B): the gates carry no gradient.
    expected = agg.coefficients / mask.sum(1, keepdim=True) / len(lengths)
    torch.testing.assert_close(g_weighted, expected, rtol=1e-5, atol=1e-7)


def test_recursion_gradient_through_student_logits():
    """Same identity end to end: gradient w.r.t. the student logits through r_t."""
    mask = _mask([6, 3], pad=1)
    s, t = _logits(2, 7, 13, seed=3)
    s.requires_grad_(True)
    r = obj.local_signal(s, t, mask)
    agg = obj.aggregate("dash", r, mask, kappa=5.0)
    (g_weighted,) = torch.autograd.grad(agg.loss, s)
    r2 = obj.local_signal(s, t, mask)
    literal = _recursion_loss(r2, obj.gates_from_gap(r2, mask, 5.0), mask)
    (g_literal,) = torch.autograd.grad(literal, s)
    torch.testing.assert_close(g_weighted, g_literal, rtol=1e-5, atol=1e-7)
    assert g_weighted.abs().sum() > 0
    assert torch.all(g_weighted[~mask] == 0)


def test_dash_gate_direction_and_inverse_gap():
    """Eq. inverse_gap_control: below-average r opens the gate (> 1/2) under DASH;
    the inverse-gap gate is its mirror image sigma(+x) = 1 - sigma(-x)."""
    mask = _mask([5])
    r = torch.tensor([[0.1, 0.5, 0.2, 0.9, 0.3]])
    dash = obj.aggregate("dash", r, mask, kappa=5.0).gates
    inv = obj.aggregate("inverse_gap", r, mask, kappa=5.0).gates
    below = r < r.mean()
    assert torch.all(dash[below] > 0.5) and torch.all(dash[~below] < 0.5)
    torch.testing.assert_close(inv, 1.0 - dash)
    torch.testing.assert_close(dash, torch.sigmoid(-5.0 * (r - r.mean())))


def test_gate_mean_uses_only_real_tokens():
    r = torch.tensor([[1.0, 3.0, 100.0, -50.0]])
    mask = torch.tensor([[1, 1, 0, 0]])
    gates = obj.gates_from_gap(r, mask, kappa=1.0)
    # mean over real tokens is 2: gaps -1 and +1.
    torch.testing.assert_close(gates[0, :2], torch.sigmoid(torch.tensor([1.0, -1.0])))
    assert torch.all(gates[0, 2:] == 0)


# ----------------------------------------------------------------------------------------------
# Aggregation variants
# ----------------------------------------------------------------------------------------------


def test_normalized_dash_and_scale_matched_opsd():
    mask = _mask([7, 4], pad=1)
    r = torch.randn(mask.shape, generator=_gen(1))
    dash = obj.aggregate("dash", r, mask, kappa=5.0)
    norm = obj.aggregate("normalized_dash", r, mask, kappa=5.0)
    scaled = obj.aggregate("scale_matched_opsd", r, mask, kappa=5.0)
    for b, T in enumerate([7, 4]):
        c = dash.coefficients[b, :T]
        # Normalized DASH: DASH's profile at the OPSD scale (mean 1).
        torch.testing.assert_close(norm.coefficients[b, :T].mean(), torch.tensor(1.0))
        torch.testing.assert_close(norm.coefficients[b, :T], c / c.mean())
        # Scale-matched OPSD: uniform coefficients at DASH's mean.
        torch.testing.assert_close(scaled.coefficients[b, :T], c.mean().expand(T))
        torch.testing.assert_close(scaled.per_rollout[b], c.mean() * r[b, :T].mean())
    assert torch.all(norm.coefficients[~mask] == 0) and torch.all(scaled.coefficients[~mask] == 0)


def test_entropy_gate_and_soft_or():
    mask = _mask([6, 3], pad=1)
    g = _gen(2)
    r = torch.randn(mask.shape, generator=g)
    H = torch.rand(mask.shape, generator=g) * 3 * mask
    ent = obj.aggregate("entropy_gate", r, mask, teacher_entropy=H, kappa=2.0)
    for b, T in enumerate([6, 3]):
        h = H[b, :T]
        torch.testing.assert_close(ent.gates[b, :T], torch.sigmoid(-2.0 * (h - h.mean())))
    soft = obj.aggregate("soft_or", r, mask, teacher_entropy=H, kappa=5.0)
    g_h = obj.gates_from_gap(H, mask, 5.0)
    g_r = obj.gates_from_gap(r, mask, 5.0)
    torch.testing.assert_close(soft.gates, (1 - (1 - g_h) * (1 - g_r)) * mask)
    assert torch.all(soft.gates[mask] >= torch.maximum(g_h, g_r)[mask] - 1e-7)
    torch.testing.assert_close(soft.coefficients, obj.coefficients_from_gates(soft.gates, mask))


def test_pw_opsd_position_weights():
    mask = _mask([4, 1], pad=2)
    r = torch.randn(mask.shape, generator=_gen(4))
    agg = obj.aggregate("pw_opsd", r, mask)
    f = torch.tensor([0.125, 0.375, 0.625, 0.875])  # (t - 0.5) / T_b on the rollout's length
    w = 0.25 + 0.75 * torch.sigmoid((f - 0.30) / 0.10)
    torch.testing.assert_close(agg.coefficients[0, :4], w)
    torch.testing.assert_close(
        agg.coefficients[1, 0], 0.25 + 0.75 * torch.sigmoid(torch.tensor(2.0))
    )
    assert torch.all(agg.coefficients[~mask] == 0)
    expected = ((w * r[0, :4]).mean() + agg.coefficients[1, 0] * r[1, 0]) / 2
    torch.testing.assert_close(agg.loss, expected)


def test_empty_rollouts_are_left_out_of_the_batch_mean():
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    r = torch.tensor([[1.0, 2.0, 3.0, 9.0], [5.0, 5.0, 5.0, 5.0]], requires_grad=True)
    agg = obj.aggregate("opsd", r, mask)
    torch.testing.assert_close(agg.loss, torch.tensor(2.0))
    assert agg.per_rollout[1] == 0
    none = obj.aggregate("dash", r, torch.zeros_like(mask))
    assert none.loss.item() == 0.0
    none.loss.backward()
    assert torch.all(r.grad == 0)


def test_mask_with_holes_is_rejected():
    with pytest.raises(ValueError, match="contiguous"):
        obj.aggregate("dash", torch.zeros(1, 4), torch.tensor([[1, 0, 1, 0]]))


def test_diagnostics_are_means_over_real_tokens():
    mask = _mask([5, 3], pad=2)
    r = torch.randn(mask.shape, generator=_gen(6))
    agg = obj.aggregate("dash", r, mask, kappa=5.0)
    d = agg.diagnostics
    assert set(d) == {"r_mean", "r_std", "coef_mean", "coef_max", "gate_mean", "horizon_mean"}
    assert all(isinstance(v, float) for v in d.values())
    assert d["r_mean"] == pytest.approx(r[mask].mean().item(), rel=1e-5)
    assert d["r_std"] == pytest.approx(r[mask].std(unbiased=False).item(), rel=1e-5)
    assert d["coef_mean"] == pytest.approx(agg.coefficients[mask].mean().item(), rel=1e-5)
    assert d["coef_max"] == pytest.approx(agg.coefficients[mask].max().item(), rel=1e-6)
    assert d["gate_mean"] == pytest.approx(agg.gates[mask].mean().item(), rel=1e-5)
    h = obj.horizons_from_gates(agg.gates, mask)
    assert d["horizon_mean"] == pytest.approx(h[mask].mean().item(), rel=1e-5)
    # sum_k c_k = sum_t h_t, so the means over the same tokens agree.
    assert d["horizon_mean"] == pytest.approx(d["coef_mean"], rel=1e-5)
    assert set(obj.aggregate("opsd", r, mask).diagnostics) == {
        "r_mean", "r_std", "coef_mean", "coef_max",
    }  # fmt: skip


def test_registry_rejects_unknown_names_and_params():
    r, mask = torch.zeros(1, 3), torch.ones(1, 3)
    assert set(obj.AGGREGATIONS) == {
        "opsd", "dash", "fixed_lambda", "inverse_gap", "normalized_dash",
        "scale_matched_opsd", "entropy_gate", "soft_or", "pw_opsd",
    }  # fmt: skip
    with pytest.raises(ValueError, match="no_such_method"):
        obj.aggregate("no_such_method", r, mask)
    with pytest.raises(ValueError, match="'dash'.*'lam'"):
        obj.aggregate("dash", r, mask, lam=0.5)
    with pytest.raises(ValueError, match="'opsd'.*'kappa'"):
        obj.aggregate("opsd", r, mask, kappa=5.0)
    with pytest.raises(ValueError, match="'fixed_lambda'.*'lam'"):
        obj.aggregate("fixed_lambda", r, mask)
    with pytest.raises(ValueError, match="entropy_gate.*teacher_entropy"):
        obj.aggregate("entropy_gate", r, mask, kappa=1.0)
    with pytest.raises(ValueError, match="soft_or.*teacher_entropy"):
        obj.aggregate("soft_or", r, mask)
    with pytest.raises(ValueError, match="no_such_method"):
        obj.aggregation_param_names("no_such_method")
    assert obj.aggregation_param_names("opsd") == set()
    assert obj.aggregation_param_names("dash") == {"kappa"}
    assert obj.aggregation_param_names("fixed_lambda") == {"lam"}
    assert obj.aggregation_param_names("soft_or") == {"kappa"}
    assert "kappa" not in obj.aggregation_param_names("pw_opsd")


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


@SETTINGS
@given(seed=st.integers(0, 10_000), V=st.integers(3, 30), data=st.data())
def test_topk_tail_distributions_sum_to_one(seed, V, data):
    k = data.draw(st.integers(1, V - 1))
    s, t = _logits(2, 3, V, seed)
    ls, lt = obj.topk_tail_logprobs(s, t, k)
    assert ls.shape == (2, 3, k + 1) and lt.shape == (2, 3, k + 1)
    torch.testing.assert_close(ls.exp().sum(-1), torch.ones(2, 3), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lt.exp().sum(-1), torch.ones(2, 3), rtol=1e-5, atol=1e-5)
    idx = t.topk(k, -1).indices  # the teacher's top-k tokens head the support
    torch.testing.assert_close(ls[..., :k], F.log_softmax(s, -1).gather(-1, idx), atol=1e-5, rtol=0)
    torch.testing.assert_close(lt[..., :k], F.log_softmax(t, -1).gather(-1, idx), atol=1e-5, rtol=0)
    assert torch.all(lt[..., :k].min(-1).values >= lt[..., k] - math.log(V))


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


# ----------------------------------------------------------------------------------------------
# Right padding is invisible
# ----------------------------------------------------------------------------------------------


def _pad(x: torch.Tensor, P: int, fill: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, fill.expand(x.shape[0], P, *x.shape[2:]).to(x.dtype)], dim=1)


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


@pytest.mark.parametrize("method", sorted(obj.AGGREGATIONS))
def test_right_padding_is_invisible_to_aggregations(method):
    lengths, P = [6, 2, 4], 3
    mask = _mask(lengths)
    g = _gen(23)
    r = torch.randn(mask.shape, generator=g).requires_grad_(True)
    H = torch.rand(mask.shape, generator=g) * 2
    params = {"lam": 0.5} if method == "fixed_lambda" else {}
    base = obj.aggregate(method, r, mask, teacher_entropy=H, **params)
    nan = torch.full((1, 1), float("nan"))
    rp = _pad(r.detach(), P, nan).requires_grad_(True)
    padded = obj.aggregate(method, rp, _pad(mask, P, torch.zeros(1, 1, dtype=torch.bool)),
                           teacher_entropy=_pad(H, P, nan), **params)  # fmt: skip
    # Equal up to fp32 summation order over the longer rows (no NaN leaks from the padding).
    torch.testing.assert_close(padded.loss, base.loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(padded.per_rollout, base.per_rollout, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(padded.coefficients[:, : mask.shape[1]], base.coefficients,
                               rtol=1e-6, atol=1e-7)  # fmt: skip
    assert torch.all(padded.coefficients[:, mask.shape[1] :] == 0)
    assert padded.diagnostics == pytest.approx(base.diagnostics, rel=1e-6)
    (g_base,) = torch.autograd.grad(base.loss, r)
    (g_pad,) = torch.autograd.grad(padded.loss, rp)
    torch.testing.assert_close(g_pad[:, : mask.shape[1]], g_base, rtol=1e-6, atol=1e-8)
    assert torch.all(g_pad[:, mask.shape[1] :] == 0)


# ----------------------------------------------------------------------------------------------
# EOPD (METHODS.md "Baselines"; SaFo-Lab/PW-OPSD ea_opsd_trainer.py)
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
    import json

    peaks = json.loads(out.stdout.strip().splitlines()[-1])
    grad_kib = 512 * 32768 * 4 / 1024  # the gradient w.r.t. the logits, needed by any path
    assert peaks["naive"] > 3 * grad_kib  # sanity: the naive path materialises [T, V] tensors
    assert peaks["chunked"] * 4 <= peaks["naive"], peaks


# ----------------------------------------------------------------------------------------------
# AVSD (METHODS.md "Baselines"; duykhuongnguyen/AVSD src/avsd/common/multiview_distill.py)
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
