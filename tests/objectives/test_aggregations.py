"""Tests for ``dashrepro.objectives.aggregations``: they pin the paper's identities, not the code.

Paper "DASH: divergence-adaptive supervision horizons", appendix "Aggregation Coefficients and
Supervision Horizons" (``1 <= c_k <= k``, the constant-gate closed form,
``sum_k c_k = sum_t h_t``), Eqs. ``dash_recursion``/``dash_objective``/
``dash_weighted_objective`` (recursion form and weighted form agree in value and gradient).

Run: ``.venv/bin/pytest tests/objectives -q`` (CPU, small V, well under a minute).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from objectives_helpers import SETTINGS, _gen, _logits, _mask, _pad, lengths_st

from dashrepro import objectives as obj
from dashrepro.objectives.aggregations import _agg_dash


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


# ----------------------------------------------------------------------------------------------
# Coefficients and horizons (appendix "Aggregation Coefficients and Supervision Horizons")
# ----------------------------------------------------------------------------------------------


@SETTINGS
@given(lengths=lengths_st, pad=st.integers(0, 3), seed=st.integers(0, 10_000),
       kappa=st.floats(0.0, 30.0), scale=st.floats(0.01, 5.0))  # fmt: skip
def test_coefficients_lie_between_one_and_position(lengths, pad, seed, kappa, scale):
    mask = _mask(lengths, pad)
    r = torch.randn(mask.shape, generator=_gen(seed)) * scale
    c, _ = _agg_dash(r, mask, kappa=kappa)
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


# ----------------------------------------------------------------------------------------------
# Right padding is invisible
# ----------------------------------------------------------------------------------------------


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
