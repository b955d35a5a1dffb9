"""Tests of the weight and gate records of dashrepro.training.metrics (issue 65): each token's
weight from the losses, the per-rollout table, the step's summaries, the gather over processes,
the parameter update's norm, and a tiny training run that writes them."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from training_helpers import LORA

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.layout import ROLLOUT_WEIGHTS
from dashrepro.training.losses import MicroLoss, method_loss
from dashrepro.training.methods import MethodSpec
from dashrepro.training.metrics import (
    ROLLOUT_COLUMNS,
    WEIGHT_KEYS,
    StepTally,
    micro_result,
    parameter_change_norm,
    reduce_step_metrics,
    rollout_frame,
    rollout_table,
    rollout_weight_table,
    weight_summary,
)
from dashrepro.training.resume import RunRecords
from dashrepro.training.rollouts import Share
from dashrepro.training.trainer import train_run


class OneProcess:
    num_processes = 1


class TwoProcesses:
    """A second process holding ``other`` (a rollout table): gathers this one's tensor with it,
    padded as ``rollout_table`` pads its own."""

    num_processes = 2

    def __init__(self, other: torch.Tensor):
        self.other = other

    def gather(self, values):
        if values.dim() == 1:  # the counts
            return torch.cat([values, torch.tensor([self.other.shape[0]])])
        width = values.shape[1]
        padded = torch.full((1, width, values.shape[2]), math.nan, dtype=torch.float64)
        padded[0, : self.other.shape[0]] = self.other
        return torch.cat([values, padded])


def _spec(aggregation, params=None, **extra):
    return MethodSpec.from_config(
        aggregation,
        {"aggregation": aggregation, "divergence": "forward_kl", "tau": None,
         "params": params or {}, **extra},
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The weights the losses return
# ---------------------------------------------------------------------------------------------

MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.float)


def _logits(views=1):
    torch.manual_seed(0)
    student = torch.randn(2, 5, 11, requires_grad=True)
    teachers = [torch.randn(2, 5, 11) for _ in range(views)]
    tokens = torch.randint(0, 11, (2, 5))
    return student, teachers, tokens


@pytest.mark.parametrize(
    "method",
    [
        _spec("opsd"),
        _spec("dash", {"kappa": 5.0}),
        _spec("fixed_lambda", {"lam": 0.7}),
        _spec("normalized_dash", {"kappa": 5.0}),
        _spec("scale_matched_opsd", {"kappa": 5.0}),
        _spec("pw_opsd"),
    ],
    ids=lambda m: m.name,
)
def test_a_distill_losses_weights_are_the_multipliers_of_its_per_token_signal(method):
    student, teachers, tokens = _logits()
    result = method_loss(method, student, teachers, tokens, MASK)
    r, w = result.trace["r"], result.weights
    assert not w.requires_grad and torch.all(w[~MASK.bool()] == 0)
    # The loss is the mean over rollouts of (1/T_b) sum_t w_t r_t: w is what multiplies r_t.
    expected = ((w[0] * r[0]).sum() / 5 + (w[1] * r[1]).sum() / 3) / 2
    assert float(result.loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-6)
    if method.aggregation == "opsd":
        assert torch.equal(w, MASK)
    if method.aggregation == "fixed_lambda":  # c_k = 1 + 0.7 c_{k-1}
        assert w[1, :3].tolist() == pytest.approx([1.0, 1.7, 2.19])


def test_eopd_and_avsd_weigh_every_real_token_one():
    student, teachers, tokens = _logits()
    eopd = _spec("opsd", objective="eopd", objective_params={"entropy_threshold": 0.8, "top_k": 4})
    assert torch.equal(method_loss(eopd, student, teachers, tokens, MASK).weights, MASK)
    student, teachers, tokens = _logits(views=3)
    avsd = _spec("opsd", objective="avsd")
    result = method_loss(avsd, student, teachers, tokens, MASK)
    assert torch.equal(result.weights, MASK)
    assert "gate" in result.trace  # AVSD's view gate: the one its gate_mean averages


def test_the_grpo_hybrid_keeps_the_distillation_terms_weights():
    student, teachers, tokens = _logits()
    dash = _spec("dash", {"kappa": 5.0})
    hybrid = _spec("dash", {"kappa": 5.0}, grpo={"eta": 0.3, "group_size": 2, "aggregate": False})
    plain = method_loss(dash, student, teachers, tokens, MASK)
    mixed = method_loss(hybrid, student, teachers, tokens, MASK, torch.tensor([1.0, -1.0]))
    assert torch.equal(mixed.weights, plain.weights)
    assert torch.equal(plain.weights, plain.trace["coefficient"])


# ---------------------------------------------------------------------------------------------
# The per-rollout table and the step's summaries, on hand-made weights
# ---------------------------------------------------------------------------------------------


def _table(weights, mask, gates=None, micro=0, rollouts=None, rewards=None):
    n = len(weights)
    weights, mask = torch.tensor(weights, dtype=torch.float), torch.tensor(mask)
    gates = None if gates is None else torch.tensor(gates, dtype=torch.float)
    return rollout_weight_table(weights, mask, gates, micro, rollouts or list(range(n)),
                                rewards or [0.0] * n)  # fmt: skip


def test_a_rollouts_row_holds_its_length_weights_thirds_and_gates():
    table = _table(
        weights=[[1, 2, 3, 0, 0, 0], [1, 1, 2, 2, 4, 4]],
        mask=[[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]],
        gates=[[0.95, 0.5, 0.05, 0.0, 0.0, 0.0], [0.9, 0.9, 0.2, 0.1, 0.99, 0.3]],
        micro=3,
        rollouts=[0, 2],
        rewards=[1.0, 0.0],
    )
    frame = rollout_frame(table, step=7)
    assert list(frame.columns) == list(ROLLOUT_COLUMNS)
    assert frame["step"].tolist() == [7, 7] and frame["micro_batch"].tolist() == [3, 3]
    assert frame["rollout"].tolist() == [0, 2] and frame["reward"].tolist() == [1.0, 0.0]
    assert frame["response_length"].tolist() == [3, 6]
    assert frame["weight_total"].tolist() == [6.0, 14.0]  # padding's weight never counts
    assert frame["weight_mean"].tolist() == pytest.approx([2.0, 14 / 6])
    # Length 3: one token per third; length 6: two.
    assert frame.loc[0, ["weight_third_1", "weight_third_2", "weight_third_3"]].tolist() == (
        pytest.approx([1 / 6, 2 / 6, 3 / 6])
    )
    assert frame.loc[1, ["weight_third_1", "weight_third_2", "weight_third_3"]].tolist() == (
        pytest.approx([2 / 14, 4 / 14, 8 / 14])
    )
    assert frame["gate_median"].tolist() == pytest.approx([0.5, (0.3 + 0.9) / 2])
    assert frame["gate_high_share"].tolist() == pytest.approx([1 / 3, 3 / 6])  # >= 0.9
    assert frame["gate_low_share"].tolist() == pytest.approx([1 / 3, 1 / 6])  # <= 0.1


@pytest.mark.parametrize(
    ("length", "thirds"),
    [(1, [0, 1, 0]), (2, [1, 0, 1]), (4, [1, 2, 1]), (5, [2, 1, 2]), (7, [2, 3, 2])],
)
def test_a_tokens_third_is_the_one_its_centre_falls_in(length, thirds):
    table = _table(weights=[[1] * length], mask=[[1] * length])
    frame = rollout_frame(table, step=1)
    shares = frame.loc[0, ["weight_third_1", "weight_third_2", "weight_third_3"]].tolist()
    assert shares == pytest.approx([n / length for n in thirds])


def test_left_padding_counts_positions_from_the_first_real_token():
    right = rollout_frame(_table([[1, 2, 3, 0]], [[1, 1, 1, 0]]), 1)
    left = rollout_frame(_table([[0, 1, 2, 3]], [[0, 1, 1, 1]]), 1)
    pd.testing.assert_frame_equal(right, left)


def test_the_step_summary_pools_the_rollouts_total_weights():
    # Four rollouts with total weights 1, 2, 3, 4 (lengths 1..4, weight 1 per token).
    mask = [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    gates = [[0.95, 0, 0, 0], [0.05, 0.5, 0, 0], [0.5, 0.5, 0.5, 0], [0.9, 0.1, 0.92, 0.2]]
    summary = weight_summary(_table(weights=mask, mask=mask, gates=gates))
    assert list(summary) == list(WEIGHT_KEYS)
    assert summary["weight_top3_share"] == pytest.approx(9 / 10)
    assert summary["effective_rollouts"] == pytest.approx(100 / 30)  # (sum w)^2 / sum w^2
    assert summary["rollout_weight_mean"] == pytest.approx(2.5)
    assert summary["gate_high_share"] == pytest.approx(3 / 10)  # 0.95, 0.9, 0.92
    assert summary["gate_low_share"] == pytest.approx(2 / 10)  # 0.05, 0.1
    # Token thirds: L1 (mid), L2 (first, last), L3 (one each), L4 (1, 2, 1).
    assert [summary[f"weight_third_{j}"] for j in (1, 2, 3)] == pytest.approx([0.3, 0.4, 0.3])


def test_equal_rollouts_count_fully_and_one_heavy_rollout_counts_once():
    equal = weight_summary(_table(weights=[[2, 2]] * 5, mask=[[1, 1]] * 5))
    assert equal["effective_rollouts"] == pytest.approx(5.0)
    assert equal["weight_top3_share"] == pytest.approx(3 / 5)
    heavy = weight_summary(_table(weights=[[100, 100]] + [[0, 0]] * 4, mask=[[1, 1]] * 5))
    assert heavy["effective_rollouts"] == pytest.approx(1.0)
    assert heavy["weight_top3_share"] == pytest.approx(1.0)


def test_without_gates_or_rollouts_the_undefined_summaries_are_nan():
    no_gates = weight_summary(_table(weights=[[1, 1]], mask=[[1, 1]]))
    assert math.isnan(no_gates["gate_high_share"]) and math.isnan(no_gates["gate_low_share"])
    assert no_gates["effective_rollouts"] == 1.0 and no_gates["weight_top3_share"] == 1.0
    frame = rollout_frame(_table(weights=[[1, 1]], mask=[[1, 1]]), 1)
    assert frame[["gate_median", "gate_high_share", "gate_low_share"]].isna().all(axis=None)
    nothing = weight_summary(rollout_table(OneProcess(), StepTally(), "cpu"))
    assert all(math.isnan(v) for v in nothing.values())
    assert rollout_frame(rollout_table(OneProcess(), StepTally(), "cpu"), 1).empty


def test_a_fixed_gate_of_0_9_counts_as_high_in_its_own_precision():
    summary = weight_summary(_table(weights=[[1, 1]], mask=[[1, 1]], gates=[[0.9, 0.1]]))
    assert summary["gate_high_share"] == 0.5 and summary["gate_low_share"] == 0.5


def test_unknown_weights_are_nan_not_zero():
    mask = torch.ones(1, 2)
    table = rollout_weight_table(None, mask, None, 0, [0], [1.0])
    summary = weight_summary(table)
    assert math.isnan(summary["rollout_weight_mean"]) and math.isnan(summary["weight_top3_share"])


def test_weights_of_the_wrong_shape_are_refused():
    with pytest.raises(ValueError, match=r"token weights have shape \(1, 3\), expected \(1, 2\)"):
        rollout_weight_table(torch.ones(1, 3), torch.ones(1, 2), None, 0, [0], [1.0])
    with pytest.raises(ValueError, match="2 rollouts in the mask, but 1 rollout indices"):
        rollout_weight_table(torch.ones(2, 2), torch.ones(2, 2), None, 0, [0], [1.0, 0.0])


# ---------------------------------------------------------------------------------------------
# A step's micro-batches and processes
# ---------------------------------------------------------------------------------------------


def _micro(micro_batch, weights, mask, gates=None):
    n = len(weights)
    share = Share(rows=list(range(n)), ids=[f"p{i}" for i in range(n)],
                  teacher_inputs=[("q", "s", "a")] * n, prompt_ids=[[1]] * n,
                  samples=[_sample(i) for i in range(n)], rewards=[1.0] * n,
                  skipped_long_prompts=0)  # fmt: skip
    mask = torch.tensor(mask, dtype=torch.float)
    trace = {} if gates is None else {"gate": torch.tensor(gates, dtype=torch.float)}
    loss = MicroLoss(torch.tensor(0.0), {"loss": 0.0}, trace, torch.tensor(weights).float())
    tokens = torch.zeros(mask.shape, dtype=torch.long)
    return micro_result(share, list(range(n)), loss, tokens, mask, micro_batch=micro_batch)


def _sample(i):
    from dashrepro.sampling.base import Sample

    return Sample(i, [5], "x", "stop")


def test_a_step_pools_its_micro_batches_in_order():
    tally = StepTally()
    tally.add(_micro(1, [[3, 3]], [[1, 1]]))
    tally.add(_micro(0, [[1, 0], [2, 2]], [[1, 0], [1, 1]]))
    table = rollout_table(OneProcess(), tally, "cpu")
    frame = rollout_frame(table, 2)
    assert frame[["micro_batch", "rollout"]].values.tolist() == [[0, 0], [0, 1], [1, 0]]
    assert frame["weight_total"].tolist() == [1.0, 4.0, 6.0]
    row = reduce_step_metrics(OneProcess(), tally, "cpu")
    assert row["rollout_weight_mean"] == pytest.approx(11 / 3)
    assert row["effective_rollouts"] == pytest.approx(121 / (1 + 16 + 36))


def test_two_processes_give_the_table_one_process_gives():
    # Micro-batches 0 and 2 on this process, 1 on the other (global index a * world + rank).
    first, other = StepTally(), StepTally()
    first.add(_micro(0, [[1, 1], [2, 0]], [[1, 1], [1, 0]], gates=[[0.95, 0.5], [0.05, 0]]))
    first.add(_micro(2, [[5, 5]], [[1, 1]], gates=[[0.92, 0.92]]))
    other.add(_micro(1, [[4, 0]], [[1, 0]], gates=[[0.5, 0]]))  # one rollout fewer
    alone = StepTally()
    for t in (first, other):
        alone.rollout_tables += t.rollout_tables
    one = rollout_table(OneProcess(), alone, "cpu")
    two = rollout_table(TwoProcesses(rollout_table(OneProcess(), other, "cpu")), first, "cpu")
    assert torch.equal(one, two)
    assert two[:, 0].tolist() == [0.0, 0.0, 1.0, 2.0]
    summary = weight_summary(two)
    assert summary["gate_high_share"] == pytest.approx(3 / 6)
    assert summary["rollout_weight_mean"] == pytest.approx(18 / 4)  # 2, 2, 10 and 4


def test_the_update_norm_is_the_norm_of_every_parameters_change():
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.ones(1, 1))
    before = [p.detach().clone() for p in (a, b)]
    with torch.no_grad():
        a += torch.tensor([3.0, 0.0])
        b += 4.0
    assert parameter_change_norm([a, b], before) == pytest.approx(5.0)
    assert parameter_change_norm([a, b], [a.detach().clone(), b.detach().clone()]) == 0.0


def test_the_update_norm_of_an_adamw_step_changes_nothing_of_the_step():
    def step(measure):
        torch.manual_seed(0)
        layer = torch.nn.Linear(4, 3)
        optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-2, weight_decay=0.0)
        layer(torch.randn(5, 4)).pow(2).sum().backward()
        params = list(layer.parameters())
        before = [p.detach().clone() for p in params] if measure else None
        optimizer.step()
        norm = parameter_change_norm(params, before) if measure else None
        return [p.detach().clone() for p in params], norm, torch.rand(1)

    plain, _, draw = step(False)
    measured, norm, measured_draw = step(True)
    assert all(torch.equal(x, y) for x, y in zip(plain, measured, strict=True))
    assert torch.equal(draw, measured_draw)  # no random draw taken
    # AdamW's first step moves each of the 12 weights and 3 biases by lr (its gradient's sign).
    assert norm == pytest.approx(1e-2 * math.sqrt(15), rel=1e-4)


def test_the_records_keep_the_rollout_weights_of_the_steps_kept():
    records = RunRecords()
    assert list(records.rollout_weights().columns) == list(ROLLOUT_COLUMNS)
    frame = rollout_frame(_table([[1, 1]], [[1, 1]]), 1)
    records.weights += [frame, frame.assign(step=2), frame.assign(step=3)]
    saved = records.rollout_weights()
    assert saved["step"].tolist() == [1, 2, 3]
    resumed = RunRecords.up_to(2, None, None, None, saved)
    assert resumed.rollout_weights()["step"].tolist() == [1, 2]
    assert RunRecords.up_to(2, None, None, None).rollout_weights().empty  # an older state


# ---------------------------------------------------------------------------------------------
# A tiny training run
# ---------------------------------------------------------------------------------------------


def test_a_tiny_dash_run_records_the_weights_of_every_rollout(tiny_setup, tmp_path, default_config):
    folder, data, _ = tiny_setup
    spec = MethodSpec.from_config("dash", default_config["methods"]["dash"])
    train = {"steps": 1, "checkpoint_every": 1, "lr": 1e-3, "micro_batch_size": 3,
             "grad_accumulation": 2, "max_new_tokens": 8, "temperature": 1.1, "top_p": 0.95,
             "top_k": 20}  # fmt: skip
    metrics = train_run(base_model_dir=folder, train_parquet=data, out_dir=tmp_path, method=spec,
                        train=train, lora=LORA, seed=0, log=lambda _: None,
                        protocol=TeacherProtocol.from_config(default_config["protocol"]))  # fmt: skip
    row = metrics.iloc[0]
    for key in (*WEIGHT_KEYS, "update_norm"):
        assert np.isfinite(row[key]), key
    assert row["update_norm"] > 0
    assert 0 <= row["gate_low_share"] <= 1 - row["gate_high_share"]
    assert sum(row[f"weight_third_{j}"] for j in (1, 2, 3)) == pytest.approx(1.0)
    assert 1.0 <= row["effective_rollouts"] <= row["rollouts"]

    weights = pd.read_parquet(tmp_path / ROLLOUT_WEIGHTS)
    assert list(weights.columns) == list(ROLLOUT_COLUMNS)
    assert len(weights) == row["rollouts"] and set(weights["micro_batch"]) <= {0, 1}
    assert weights["response_length"].sum() == row["tokens"]
    assert weights["weight_total"].mean() == pytest.approx(row["rollout_weight_mean"])
    assert (weights["weight_mean"] >= 1.0).all()  # c_k >= 1
    # The traced rollouts (micro-batch 0's first ones) carry the same c_k in the token traces.
    traces = pd.read_parquet(tmp_path / "token_traces.parquet")
    traced = traces.groupby("rollout")["coefficient"].sum()
    first = weights[weights["micro_batch"] == 0]["weight_total"].iloc[: len(traced)]
    assert traced.tolist() == pytest.approx(first.tolist(), rel=1e-5)
