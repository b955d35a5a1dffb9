"""Tests of dashrepro.training.token_traces: which rollouts are traced, and D_t as the motivation
figure reads it."""

import torch

from dashrepro import objectives
from dashrepro.training.resume import RunRecords
from dashrepro.training.token_traces import RolloutTracer


def test_micro_batch_zero_of_the_traced_steps_is_traced():
    tracer = RolloutTracer({1, 20, 40}, rollouts=4, temperature=1.0)
    assert tracer.traces(1, 0) and tracer.traces(40, 0)
    assert not tracer.traces(1, 1) and not tracer.traces(2, 0)


def test_d_t_is_the_unclipped_forward_kl_of_the_first_rollouts_at_the_loss_temperature():
    torch.manual_seed(0)
    student, teacher = torch.randn(6, 5, 11), torch.randn(6, 5, 11)
    mask = torch.ones(6, 5)
    tracer = RolloutTracer({1}, rollouts=4, temperature=1.1)
    d_t = tracer.divergence(student.requires_grad_(), [teacher], mask)
    wanted = objectives.local_signal(
        student[:4].detach() / 1.1, teacher[:4] / 1.1, mask[:4], divergence="forward_kl", tau=None
    )
    assert d_t.shape == (4, 5) and not d_t.requires_grad
    assert torch.equal(d_t, wanted)


def test_a_trace_becomes_one_row_per_real_token_of_the_traced_rollouts():
    records = RunRecords()
    trace = {"mask": torch.tensor([[1, 1, 0], [1, 0, 0]]), "tokens": torch.tensor([[5, 6, 0], [7, 0, 0]]),
             "problem_ids": ["p0", "p1"], "r": torch.tensor([[0.5, 0.25, 0.0], [1.0, 0.0, 0.0]])}  # fmt: skip
    RolloutTracer({1}, rollouts=1, temperature=1.0).add_trace(records, trace, step=1)
    [frame] = records.traces
    assert list(frame["token_id"]) == [5, 6] and list(frame["r"]) == [0.5, 0.25]
    assert set(frame["problem_id"]) == {"p0"} and set(frame["step"]) == {1}
