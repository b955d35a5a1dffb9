"""Tests of dashrepro.training.losses: GRPO advantages and the per-method losses."""

import pytest
import torch

from dashrepro import objectives


def test_grpo_advantages_without_and_with_aggregation():
    from dashrepro.settings import GrpoSettings
    from dashrepro.training.losses import grpo_sequence_advantages, grpo_token_advantages

    advantages = grpo_sequence_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4)
    assert advantages[0] > 0 and torch.allclose(advantages[1:], advantages[1].repeat(3))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float)
    flat = grpo_token_advantages(advantages, mask, GrpoSettings(0.3, 4, aggregate=False))
    top = flat[0, 0]
    assert top > 0 and torch.allclose(flat[0], top.repeat(3))
    assert flat[1, 2] == 0  # padding carries nothing
    spread = grpo_token_advantages(advantages, mask, GrpoSettings(0.3, 4, aggregate=True))
    # The outcome advantage arrives at the last real token and decays by 0.95^2 per step back.
    assert torch.allclose(spread[0], top * torch.tensor([0.9025**2, 0.9025, 1.0]))
    assert torch.allclose(spread[1, :2], flat[1, 0] * torch.tensor([0.9025, 1.0]))


def test_every_objective_has_a_loss_and_every_teacher_view_a_text():
    from dashrepro.data.views import TEACHER_VIEWS
    from dashrepro.objectives.registry import OBJECTIVES
    from dashrepro.training.losses import OBJECTIVE_LOSSES

    assert set(OBJECTIVE_LOSSES) == set(OBJECTIVES)
    assert {view for o in OBJECTIVES.values() for view in o.teacher_views} <= set(TEACHER_VIEWS)


def test_loss_temperature_tempers_both_distributions_before_the_signal():
    """train.loss_temperature: the reference divides student and teacher logits by the rollout
    temperature before the log-softmax; r_t, its clip and the gates follow."""
    from dashrepro.training.losses import method_loss
    from dashrepro.training.methods import MethodSpec

    torch.manual_seed(0)
    student = torch.randn(2, 5, 11, requires_grad=True)
    teacher = torch.randn(2, 5, 11)
    tokens = torch.randint(0, 11, (2, 5))
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.float)
    spec = {
        "aggregation": "dash",
        "divergence": "forward_kl",
        "tau": 0.05,
        "params": {"kappa": 5.0},
    }
    method = MethodSpec.from_config("dash", spec)
    tempered = method_loss(method, student, [teacher], tokens, mask, temperature=1.1)

    # Direct computation: clipped forward-KL summands of the tempered distributions.
    log_s = torch.log_softmax(student / 1.1, dim=-1)
    log_t = torch.log_softmax(teacher / 1.1, dim=-1)
    summands = (log_t.exp() * (log_t - log_s)).clamp(max=0.05)
    r = torch.where(mask.bool(), summands.sum(-1), torch.zeros(()))
    expected = objectives.aggregate("dash", r, mask, kappa=5.0).loss
    assert torch.allclose(tempered.loss, expected, atol=1e-6)
    assert torch.allclose(tempered.trace["r"], r.detach(), atol=1e-6)
    plain = method_loss(method, student, [teacher], tokens, mask)
    assert not torch.allclose(plain.loss, tempered.loss)
    assert torch.equal(
        plain.loss, method_loss(method, student, [teacher], tokens, mask, temperature=1.0).loss
    )


def test_avsd_logs_each_views_mean_advantage():
    from dashrepro.training.losses import avsd_loss
    from dashrepro.training.methods import MethodSpec
    from dashrepro.training.metrics import METRIC_KEYS

    spec = MethodSpec("avsd", "opsd", "forward_kl", None, objective="avsd")
    gen = torch.Generator().manual_seed(0)
    student = torch.randn(2, 5, 11, generator=gen)
    views = [torch.randn(2, 5, 11, generator=gen) for _ in range(3)]
    tokens = torch.randint(0, 11, (2, 5), generator=gen)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    result = avsd_loss(spec, student, views, tokens, mask)

    def chosen(logits):
        return torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]

    for name, view in zip(spec.teacher_view_names, views, strict=True):
        expected = (chosen(view) - chosen(student))[mask.bool()].mean()
        assert result.metrics[f"advantage_{name}"] == pytest.approx(float(expected), abs=1e-5)
        assert f"advantage_{name}" in METRIC_KEYS  # carried into every step's row
