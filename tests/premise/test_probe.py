"""premise.probe: K rollouts per problem from the base student, scored by the trainer's parts;
the method's gates and weights per rollout, D_t the unclipped forward KL, the same whatever the
micro-batch, the same on a second run."""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import torch

from dashrepro.data.prompts import TeacherProtocol
from dashrepro.objectives.aggregations import coefficients_from_gates, gates_from_gap
from dashrepro.premise.probe import ROLLOUT_COLUMNS, TOKEN_COLUMNS, probe_rows, run_probe
from dashrepro.settings import PremiseProbeSettings
from dashrepro.training.methods import MethodSpec


def test_the_problems_are_each_tasks_first_in_a_seeded_shuffle_and_too_many_are_named():
    tasks = ["a", "b"] * 20
    probe = PremiseProbeSettings(problems=5, seed=3)
    rows = probe_rows(tasks, probe)
    assert rows == probe_rows(tasks, probe) and len(set(rows)) == 10
    assert [tasks[row] for row in rows] == ["a"] * 5 + ["b"] * 5
    assert rows != probe_rows(tasks, PremiseProbeSettings(problems=5, seed=4))
    with pytest.raises(ValueError, match=r"premise_probe\.problems: 21 .* 20 problems of task 'a'"):
        probe_rows(tasks, PremiseProbeSettings(problems=21))


@pytest.fixture(scope="module")
def probe_inputs(tiny_setup, default_config):
    folder, data, _ = tiny_setup
    train = copy.deepcopy(default_config["scales"]["tiny"]["train"])
    train["max_new_tokens"] = 12
    return {
        "base_model": folder, "train_parquet": data, "train": train,
        "lora": default_config["scales"]["tiny"]["lora"],
        "method": MethodSpec.from_config("dash", default_config["methods"]["dash"]),
        "protocol": TeacherProtocol.from_config(default_config["protocol"]),
    }  # fmt: skip


def probe(inputs, **settings):
    settings = {"problems": 3, "rollouts_per_problem": 3, "micro_batch_size": 4, **settings}
    # tiny_setup's training set has the three column-addition tasks: 9 problems, 27 rollouts.
    return run_probe(probe=settings, log=lambda _: None, **inputs)


@pytest.fixture(scope="module")
def probed(probe_inputs):
    return probe(probe_inputs)


def test_each_rollouts_tokens_carry_dash_on_its_own_signal(probed, probe_inputs):
    tokens, rollouts = probed
    assert list(tokens.columns) == list(TOKEN_COLUMNS)
    assert list(rollouts.columns) == list(ROLLOUT_COLUMNS)
    assert len(rollouts) == 27 and rollouts["sample"].tolist() == [0, 1, 2] * 9
    assert rollouts["task"].tolist() == [t for t in ("add2", "add3", "sum3") for _ in range(9)]
    assert (tokens["task"] == tokens["rollout"].map(rollouts["task"])).all()
    assert (
        tokens.groupby("rollout").size().tolist()
        == rollouts.loc[rollouts["n_tokens"] > 0, "n_tokens"].tolist()
    )
    # tau null and forward KL: the method's signal is the motivation figure's D_t.
    assert torch.allclose(torch.tensor(tokens["r"].values), torch.tensor(tokens["D"].values))
    kappa = probe_inputs["method"].params["kappa"]
    for _, rollout in tokens.groupby("rollout"):
        r = torch.tensor([rollout["r"].tolist()])
        mask = torch.ones_like(r)
        gates = gates_from_gap(r, mask, kappa)
        assert torch.allclose(torch.tensor([rollout["gate"].tolist()]), gates, atol=1e-6)
        weights = coefficients_from_gates(gates, mask)
        assert torch.allclose(torch.tensor([rollout["coefficient"].tolist()]), weights, atol=1e-5)
    assert set(tokens["reward"]) <= {0.0, 1.0} and (tokens["D"] >= -1e-6).all()


def test_the_micro_batch_changes_no_value_beyond_floating_point_and_a_rerun_none(
    probed, probe_inputs
):
    tokens, rollouts = probed
    one_by_one, again = probe(probe_inputs, micro_batch_size=1)
    pd.testing.assert_frame_equal(again, rollouts)
    pd.testing.assert_frame_equal(
        one_by_one.drop(columns=["D", "r", "gate", "coefficient"]),
        tokens.drop(columns=["D", "r", "gate", "coefficient"]),
    )
    for column in ("D", "gate", "coefficient"):
        assert (one_by_one[column] - tokens[column]).abs().max() < 1e-4, column
    rerun, _ = probe(probe_inputs)
    pd.testing.assert_frame_equal(rerun, tokens)


def test_a_method_that_is_not_plain_distillation_is_refused(probe_inputs, default_config):
    eopd = MethodSpec.from_config("eopd", default_config["methods"]["eopd"])
    with pytest.raises(ValueError, match="premise_probe.method: 'eopd' is not a distillation"):
        probe({**probe_inputs, "method": eopd})
