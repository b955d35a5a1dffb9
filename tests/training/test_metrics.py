"""Tests of dashrepro.training.metrics: a micro-batch's counts and metrics, the step tally, the
step row reduced over micro-batches and processes, and the per-token trace frame."""

import math

import pytest
import torch

from dashrepro.sampling.base import Sample
from dashrepro.training.losses import MicroLoss
from dashrepro.training.metrics import (
    AVSD_VIEWS,
    COUNT_KEYS,
    METRIC_KEYS,
    PHASES,
    WEIGHT_KEYS,
    MicroResult,
    StepTally,
    micro_counts,
    micro_result,
    reduce_step_metrics,
    rollout_table,
    trace_frame,
)
from dashrepro.training.rollouts import Share


def _share(finish_reasons, rewards, skipped=0) -> Share:
    n = len(finish_reasons)
    return Share(
        rows=list(range(n)),
        ids=[f"p{i}" for i in range(n)],
        teacher_inputs=[("q", "s", "a")] * n,
        prompt_ids=[[1, 2]] * n,
        samples=[Sample(i, [5], "x", reason) for i, reason in enumerate(finish_reasons)],
        rewards=list(rewards),
        skipped_long_prompts=skipped,
    )


class OneProcess:
    num_processes = 1


class TwoProcesses:
    """Gathers this process's row with a fixed row of the other process."""

    num_processes = 2

    def __init__(self, other: torch.Tensor):
        self.other = other
        self.gathered = []

    def gather(self, values):
        self.gathered.append(values.clone())
        return torch.cat([values, self.other[None]])


def test_the_keys_include_each_avsd_views_advantage():
    assert AVSD_VIEWS == ("full_solution", "partial_solution", "answer_only")
    assert METRIC_KEYS[-3:] == tuple(f"advantage_{view}" for view in AVSD_VIEWS)
    assert len(set(METRIC_KEYS)) == len(METRIC_KEYS)
    assert not set(METRIC_KEYS) & set(COUNT_KEYS)


def test_micro_counts_count_kept_rollouts_empty_ones_and_masked_tokens():
    share = _share(["stop", "stop", "length"], [1.0, 0.0, 1.0], skipped=2)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    assert micro_counts(share, [0, 2], mask) == {
        "skipped_long_prompts": 2.0,
        "empty_rollouts": 1.0,  # 3 samples, 2 kept
        "rollouts": 2.0,
        "tokens": 5.0,
    }
    assert micro_counts(share, [], None)["tokens"] == 0.0
    assert micro_counts(share, [], None)["empty_rollouts"] == 3.0


def test_micro_result_adds_lengths_truncation_and_accuracy_of_the_kept_rollouts():
    # Rollout 1 was empty; of the kept 0, 2, 3: one hit the length cap, two are correct.
    share = _share(["stop", "stop", "length", "stop"], [1.0, 1.0, 0.0, 1.0])
    kept = [0, 2, 3]
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])  # float, as sampled
    tokens = torch.tensor([[7, 8, 0], [9, 9, 9], [4, 0, 0]])
    loss = MicroLoss(
        loss=torch.tensor(0.5),
        metrics={"loss": 0.5, "r_mean": 0.25},
        trace={"r": torch.tensor([[0.1, 0.2, 0.0], [0.3, 0.4, 0.5], [0.6, 0.0, 0.0]])},
    )
    result = micro_result(share, kept, loss, tokens, mask, micro_batch=0)
    assert result.counts == {"skipped_long_prompts": 0.0, "empty_rollouts": 1.0,
                             "rollouts": 3.0, "tokens": 6.0}  # fmt: skip
    assert result.metrics["loss"] == 0.5 and result.metrics["r_mean"] == 0.25
    assert result.metrics["response_length"] == pytest.approx(2.0)  # (2 + 3 + 1) / 3
    assert result.metrics["truncated_fraction"] == pytest.approx(1 / 3)
    assert result.metrics["rollout_accuracy"] == pytest.approx(2 / 3)
    assert result.metrics["reward_mean"] == pytest.approx(2 / 3)
    assert result.trace["problem_ids"] == ["p0", "p2", "p3"]
    assert result.trace["rewards"] == [1.0, 0.0, 1.0]
    assert torch.equal(result.trace["tokens"], tokens) and torch.equal(result.trace["mask"], mask)
    assert torch.equal(result.trace["r"], loss.trace["r"])
    assert "response_length" not in loss.metrics  # the loss's own dict is not changed


def test_the_tally_sums_counts_and_keeps_only_non_empty_metrics():
    tally = StepTally()
    assert tally.timings == dict.fromkeys(PHASES, 0.0)
    assert tally.sums == dict.fromkeys(COUNT_KEYS, 0.0)
    tally.add(MicroResult({"rollouts": 2.0, "tokens": 10.0}, {"loss": 1.0}, None))
    tally.add(MicroResult({"rollouts": 1.0, "empty_rollouts": 3.0}, {}, None))
    assert tally.sums == {"rollouts": 3.0, "tokens": 10.0, "empty_rollouts": 3.0,
                          "skipped_long_prompts": 0.0}  # fmt: skip
    assert tally.micro_metrics == [{"loss": 1.0}]
    assert StepTally().sums is not tally.sums  # each tally its own dicts


def test_one_process_row_averages_micro_batches_skipping_missing_keys():
    tally = StepTally()
    tally.add(MicroResult({"rollouts": 2.0, "tokens": 7.0}, {"loss": 1.0, "gate_mean": 0.2}, None))
    tally.add(MicroResult({"rollouts": 3.0, "tokens": 5.0}, {"loss": 3.0}, None))
    tally.timings.update(rollout=1.5, optimizer=0.25)
    row = reduce_step_metrics(OneProcess(), tally, "cpu")
    assert row["loss"] == pytest.approx(2.0)
    assert row["gate_mean"] == pytest.approx(0.2)  # the one micro-batch that has it
    assert math.isnan(row["grpo_loss"])  # no micro-batch has it
    assert (row["rollouts"], row["tokens"]) == (5.0, 12.0)
    assert row["seconds_rollout"] == 1.5 and row["seconds_optimizer"] == 0.25
    assert list(row) == [
        *METRIC_KEYS, *COUNT_KEYS, *WEIGHT_KEYS, *(f"seconds_{p}" for p in PHASES)
    ]  # fmt: skip


def test_a_step_without_metrics_has_nan_means_but_its_counts():
    tally = StepTally()
    tally.add(MicroResult({"empty_rollouts": 4.0}, {}, None))
    row = reduce_step_metrics(OneProcess(), tally, "cpu")
    assert all(math.isnan(row[k]) for k in METRIC_KEYS)
    assert row["empty_rollouts"] == 4.0


def test_several_processes_average_means_ignoring_nan_and_sum_counts():
    n = len(METRIC_KEYS)
    other = torch.full((n + len(COUNT_KEYS),), math.nan, dtype=torch.float64)
    other[METRIC_KEYS.index("loss")] = 3.0
    other[METRIC_KEYS.index("gate_mean")] = 0.6
    other[n:] = torch.tensor([1.0, 10.0, 2.0, 0.0], dtype=torch.float64)
    tally = StepTally()
    tally.add(MicroResult({"rollouts": 2.0, "tokens": 6.0}, {"loss": 1.0}, None))
    accelerator = TwoProcesses(other)
    # The rollout table is gathered apart (test_metrics_weights); here the metrics' gather only.
    no_rollouts = rollout_table(OneProcess(), StepTally(), "cpu")
    row = reduce_step_metrics(accelerator, tally, "cpu", no_rollouts)
    assert accelerator.gathered[0].shape == (1, n + len(COUNT_KEYS))
    assert row["loss"] == pytest.approx(2.0)  # (1 + 3) / 2
    assert row["gate_mean"] == pytest.approx(0.6)  # NaN on this process
    assert math.isnan(row["r_std"])  # NaN on both
    assert (row["rollouts"], row["tokens"], row["empty_rollouts"]) == (3.0, 16.0, 2.0)


def test_the_trace_frame_has_one_row_per_real_token_of_the_first_rollouts():
    trace = {
        "mask": torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1]]),
        "tokens": torch.tensor([[11, 12, 0], [21, 0, 0], [31, 32, 33]]),
        "problem_ids": ["a", "b", "c"],
        "rewards": [1.0, 0.0, 1.0],
        "r": torch.tensor([[0.5, 0.25, 0.0], [0.75, 0.0, 0.0], [0.0, 0.0, 0.0]]),
        "gate": torch.ones(3, 3),
    }
    frame = trace_frame(trace, step=4, n_rollouts=2)
    assert list(frame["rollout"]) == [0, 0, 1]
    assert list(frame["position"]) == [0, 1, 0]
    assert list(frame["token_id"]) == [11, 12, 21]
    assert list(frame["problem_id"]) == ["a", "a", "b"]
    assert list(frame["reward"]) == [1.0, 1.0, 0.0]
    assert set(frame["step"]) == {4}
    assert list(frame["r"]) == pytest.approx([0.5, 0.25, 0.75])
    assert list(frame["gate"]) == [1.0, 1.0, 1.0]
    assert "divergence" not in frame and "coefficient" not in frame  # not in the trace


def test_the_trace_frame_fills_nan_rewards_and_skips_short_signals():
    trace = {
        "mask": torch.tensor([[1], [1]]),
        "tokens": torch.tensor([[3], [4]]),
        "problem_ids": ["a", "b"],
        "divergence": torch.tensor([[0.5]]),  # one rollout only (e.g. a view's subset)
    }
    frame = trace_frame(trace, step=1, n_rollouts=5)  # more than the trace holds
    assert len(frame) == 2
    assert frame["reward"].isna().all()
    assert frame.loc[0, "divergence"] == pytest.approx(0.5)
    assert math.isnan(frame.loc[1, "divergence"])
    assert trace_frame({**trace, "mask": torch.zeros(2, 1)}, 1, 2).empty
