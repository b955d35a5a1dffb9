"""Trainer building blocks: logit alignment, the privileged teacher, and one real training step."""

import pandas as pd
import pytest
import torch
import yaml
from conftest import REPO_ROOT

from dashrepro import objectives
from dashrepro.data.prompts import TeacherProtocol
from dashrepro.settings import TrainSettings
from dashrepro.training.batching import response_logits, right_pad_concat
from dashrepro.training.methods import MethodSpec
from dashrepro.training.model import load_lora_student
from dashrepro.training.trainer import train_run

LORA = {
    "r": 4,
    "alpha": 8,
    "dropout": 0.0,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def test_response_logits_picks_the_positions_that_predict_each_response_token():
    prompts, responses = [[1, 2, 3], [4]], [[7, 8], [9, 10]]
    ids, mask, lengths = right_pad_concat(prompts, responses, pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 7, 8], [4, 9, 10, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    # logits[b, p] = one-hot of the *next* input token, so the gathered rows must equal the response.
    vocab = 16
    logits = torch.zeros(2, ids.shape[1], vocab)
    for b in range(2):
        for p in range(ids.shape[1] - 1):
            logits[b, p, ids[b, p + 1]] = 1.0
    picked = response_logits(logits, lengths, response_width=2).argmax(-1)
    assert picked.tolist() == responses


def test_disabled_adapter_is_the_base_model(tiny_setup):
    folder, _, _ = tiny_setup
    student = load_lora_student(folder, LORA, seed=0)
    # Make the adapter non-trivial (B starts at zero), then compare with the adapter disabled.
    with torch.no_grad():
        for name, param in student.named_parameters():
            if "lora_B" in name:
                param.normal_()
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(folder))
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        with student.disable_adapter():
            teacher = student(input_ids=ids).logits
        adapted = student(input_ids=ids).logits
        reference = base(input_ids=ids).logits
    assert torch.equal(teacher, reference)
    assert not torch.allclose(adapted, reference)


def test_checkpoint_steps(default_config):
    train = {**default_config["scales"]["tiny"]["train"], "steps": 200, "checkpoint_every": 20}
    assert TrainSettings.from_config(train).checkpoint_steps() == list(range(20, 201, 20))


@pytest.mark.parametrize("method", ["opsd", "dash"])
def test_training_writes_peft_checkpoints_and_metrics(tiny_setup, tmp_path, default_config, method):
    folder, data, _ = tiny_setup
    spec = MethodSpec.from_config(method, default_config["methods"][method])
    train = {
        "steps": 2,
        "checkpoint_every": 1,
        "lr": 1e-3,
        "micro_batch_size": 3,
        "grad_accumulation": 2,
        "max_new_tokens": 12,
        "temperature": 1.1,
        "top_p": 0.95,
        "top_k": 20,
    }
    metrics = train_run(
        base_model_dir=folder,
        train_parquet=data,
        out_dir=tmp_path,
        method=spec,
        train=train,
        lora=LORA,
        protocol=TeacherProtocol.from_config(default_config["protocol"]),
        seed=0,
        log=lambda _: None,
    )
    assert list(metrics["step"]) == [1, 2]
    for column in [
        "loss",
        "r_mean",
        "coef_mean",
        "response_length",
        "seconds_rollout",
        "tokens_per_second",
    ]:
        assert metrics[column].notna().all()
    if method == "opsd":
        assert (metrics["coef_mean"] == 1.0).all()
    else:
        assert (metrics["coef_mean"] >= 1.0).all() and "gate_mean" in metrics
    # Linear decay to zero over the step budget, no warmup: step s uses lr * (1 - (s - 1) / steps).
    assert list(metrics["lr"]) == pytest.approx([1e-3, 0.5e-3])
    for step in (1, 2):
        adapter = tmp_path / f"checkpoint-{step}"
        assert (adapter / "adapter_model.safetensors").exists() and (
            adapter / "adapter_config.json"
        ).exists()
    assert pd.read_parquet(tmp_path / "train_metrics.parquet").shape[0] == 2
    # The adapters differ from step to step: training moved them.
    from safetensors.torch import load_file

    first, second = (
        load_file(tmp_path / f"checkpoint-{s}" / "adapter_model.safetensors") for s in (1, 2)
    )
    assert any(not torch.equal(first[k], second[k]) for k in first)


def test_training_refuses_rows_without_reference_solution(tiny_setup, tmp_path, default_config):
    folder, data, _ = tiny_setup
    frame = pd.read_parquet(data)
    frame.loc[3, "reference_solution"] = " "
    bad = tmp_path / "bad.parquet"
    frame.to_parquet(bad)
    spec = MethodSpec.from_config("opsd", default_config["methods"]["opsd"])
    train = {
        "steps": 1,
        "checkpoint_every": 1,
        "lr": 1e-3,
        "micro_batch_size": 2,
        "grad_accumulation": 1,
        "max_new_tokens": 4,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
    }
    with pytest.raises(
        ValueError, match=r"bad.parquet: 1 rows without a reference solution.*train-00003"
    ):
        train_run(
            base_model_dir=folder,
            train_parquet=bad,
            out_dir=tmp_path / "o",
            method=spec,
            train=train,
            lora=LORA,
            protocol=TeacherProtocol.from_config(default_config["protocol"]),
            seed=0,
            log=lambda _: None,
        )


def test_loss_comes_from_the_objectives_module():
    # OPSD through the registry is the per-rollout mean of the local signal, averaged over rollouts.
    student, teacher = torch.randn(2, 5, 11, requires_grad=True), torch.randn(2, 5, 11)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.float)
    r = objectives.local_signal(student, teacher, mask, divergence="forward_kl", tau=0.05)
    loss = objectives.aggregate("opsd", r, mask).loss
    expected = ((r[0].sum() / 5) + (r[1, :3].sum() / 3)) / 2
    assert torch.allclose(loss, expected)


def _every_method(config):
    return sorted(config["methods"])


@pytest.mark.parametrize(
    "method",
    _every_method(yaml.safe_load((REPO_ROOT / "workflow_config.yaml").read_text())),
)
def test_every_configured_method_trains_through_the_trainer(
    tiny_setup, tmp_path, default_config, method
):
    folder, data, _ = tiny_setup
    spec = {k: v for k, v in default_config["methods"][method].items() if k != "label"}
    train = {
        "steps": 1,
        "checkpoint_every": 1,
        "lr": 1e-2,
        "micro_batch_size": 8,
        "grad_accumulation": 1,
        "max_new_tokens": 8,
        "temperature": 1.1,
        "top_p": 0.95,
        "top_k": 20,
    }
    metrics = train_run(
        base_model_dir=folder,
        train_parquet=data,
        out_dir=tmp_path,
        method=MethodSpec.from_config(method, spec),
        train=train,
        lora=LORA,
        protocol=TeacherProtocol.from_config(default_config["protocol"]),
        seed=0,
        log=lambda _: None,
    )
    row = metrics.iloc[0]
    assert row["rollouts"] == 8 and row["tokens"] > 0
    assert torch.isfinite(torch.tensor(row["loss"])) and row["grad_norm"] > 0
    if spec.get("grpo"):
        assert torch.isfinite(torch.tensor(row["grpo_loss"]))
    from safetensors.torch import load_file

    trained = load_file(tmp_path / "checkpoint-1" / "adapter_model.safetensors")
    assert any(bool(t.abs().sum() > 0) for k, t in trained.items() if "lora_B" in k)


def _reference_partial_solution(solution: str, keep_ratio: float = 0.5) -> str:
    """duykhuongnguyen/AVSD src/avsd/math/privileged_views.py ``build_partial_solution`` on a
    solution whose paragraphs are its segments (a literal port of that path)."""
    import math
    import re

    base = solution[: solution.rindex("\\boxed{")].strip()  # the last box cut
    segments = [s.strip() for s in re.split(r"\n\s*\n+", base) if s.strip()]
    keep = min(max(1, math.ceil(keep_ratio * len(segments))), len(segments) - 1)
    notice = "[The reference above is incomplete and may omit later steps or the final answer.]"
    return "\n\n".join(segments[:keep]).strip() + "\n\n" + notice


def test_avsd_teacher_views_are_avsds_own(default_config):
    from dashrepro.data.views import avsd_message, partial_solution
    from dashrepro.training.methods import teacher_messages

    protocol = TeacherProtocol.from_config(default_config["protocol"])
    solution = "First, 2 + 3 = 5.\n\nThen check: 5 - 3 = 2.\n\nSo the answer is \\boxed{5}."
    spec = MethodSpec("avsd", "opsd", "forward_kl", None, objective="avsd")
    full, partial, answer = teacher_messages(spec, "What is 2+3?", solution, "5", protocol)
    assert full == avsd_message("What is 2+3?", "full_solution", solution)
    assert partial_solution(solution) == _reference_partial_solution(solution)
    assert "Begin ===\nFirst, 2 + 3 = 5.\n\nThen check: 5 - 3 = 2.\n\n[The" in partial
    assert "\\boxed{5}" not in partial.split("Begin ===")[1].split("End ===")[0]
    assert "Verified final answer: 5\n=== Privileged Reference (answer_only) End ===" in answer
    assert all(
        m.endswith("put your final answer within \\boxed{}.") for m in (full, partial, answer)
    )
    plain = MethodSpec("dash", "dash", "forward_kl", None)
    assert teacher_messages(plain, "P", "sol", "1", protocol) == [protocol.user_message("P", "sol")]


def test_avsd_partial_view_falls_back_to_sentences_and_characters():
    from dashrepro.data.views import PARTIAL_NOTICE, partial_solution

    assert partial_solution("One. Two. Three. Four.") == f"One. Two.\n\n{PARTIAL_NOTICE}"
    assert partial_solution("abcdef") == f"abc\n\n{PARTIAL_NOTICE}"
    assert partial_solution("\\boxed{7}") == PARTIAL_NOTICE


def test_grpo_advantages_without_and_with_aggregation():
    from dashrepro.training.losses import grpo_sequence_advantages, grpo_token_advantages

    advantages = grpo_sequence_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4)
    assert advantages[0] > 0 and torch.allclose(advantages[1:], advantages[1].repeat(3))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float)
    flat = grpo_token_advantages(advantages, mask, {"aggregate": False})
    top = flat[0, 0]
    assert top > 0 and torch.allclose(flat[0], top.repeat(3))
    assert flat[1, 2] == 0  # padding carries nothing
    spread = grpo_token_advantages(
        advantages, mask, {"aggregate": True, "gamma": 0.95, "lam": 0.95}
    )
    # The outcome advantage arrives at the last real token and decays by 0.95^2 per step back.
    assert torch.allclose(spread[0], top * torch.tensor([0.9025**2, 0.9025, 1.0]))
    assert torch.allclose(spread[1, :2], flat[1, 0] * torch.tensor([0.9025, 1.0]))


def test_grpo_groups_may_span_micro_batches_of_one_process():
    from dashrepro.training.batching import BatchLayout, rollout_rows

    # 8 rollouts per problem, 2 per micro-batch, 8 micro-batches: 2 problems per process-step,
    # each spread over 4 consecutive micro-batches.
    grouped = BatchLayout(micro=2, accum=8, world=1, rank=0, group=8)
    shares = [rollout_rows(50, 0, 1, grouped, a) for a in range(8)]
    first, second = shares[0][0], shares[4][0]
    assert first != second
    assert shares[:4] == [[first, first]] * 4 and shares[4:] == [[second, second]] * 4
    # Without groups each micro-batch reads its own problems, disjoint within the step.
    plain = [rollout_rows(50, 0, 1, BatchLayout(micro=2, accum=4), a) for a in range(4)]
    assert len({row for share in plain for row in share}) == 8


def test_two_processes_read_what_one_process_accumulating_reads():
    from dashrepro.training.batching import BatchLayout, rollout_rows

    one = [rollout_rows(50, 0, 3, BatchLayout(micro=2, accum=2), a) for a in range(2)]
    two = [
        rollout_rows(50, 0, 3, BatchLayout(micro=2, accum=1, world=2, rank=r), 0) for r in (0, 1)
    ]
    assert one == two


def test_every_objective_has_a_loss_and_every_teacher_view_a_text():
    from dashrepro.data.views import TEACHER_VIEWS
    from dashrepro.objectives.registry import OBJECTIVES
    from dashrepro.training.losses import OBJECTIVE_LOSSES

    assert set(OBJECTIVE_LOSSES) == set(OBJECTIVES)
    assert {view for o in OBJECTIVES.values() for view in o.teacher_views} <= set(TEACHER_VIEWS)


def test_method_spec_is_checked_against_the_objective_registry(default_config):
    entry = {k: v for k, v in default_config["methods"]["eopd"].items() if k != "label"}
    with pytest.raises(ValueError, match=r"methods.x.objective: 'nope' is not one of"):
        MethodSpec.from_config("x", {**entry, "objective": "nope"})
    with pytest.raises(ValueError, match=r"methods.x.objective_params.top_k: 0 is out of range"):
        MethodSpec.from_config("x", {**entry, "objective_params": {"top_k": 0}})
    with pytest.raises(ValueError, match=r"objective_params.kappa: does not apply"):
        MethodSpec.from_config(
            "x", {**entry, "objective": "avsd", "objective_params": {"kappa": 1}}
        )


def test_deepspeed_config_gets_the_run_batch_sizes(repo_root):
    from dashrepro.training.distributed import deepspeed_config

    train = TrainSettings.from_config(
        {
            **ONE_STEP,
            "deepspeed_config": str(repo_root / "config/deepspeed/zero2_offload.json"),
            "micro_batch_size": 4,
            "grad_accumulation": 2,
        }
    )
    config = deepspeed_config(train, world_size=8)
    assert config["zero_optimization"]["stage"] == 2
    assert config["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    # Paper, 1.7B: 4 per GPU x 2 accumulation x 8 GPUs = global batch 64.
    assert config["train_batch_size"] == 64
    assert config["gradient_accumulation_steps"] == 2 and config["gradient_clipping"] == 1.0


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


ONE_STEP = {"steps": 1, "checkpoint_every": 1, "lr": 1e-3, "micro_batch_size": 3,
            "grad_accumulation": 1, "max_new_tokens": 8, "temperature": 1.1, "top_p": 0.95,
            "top_k": 20}  # fmt: skip


def train_one_step(tiny_setup, out_dir, method: dict, name="dash", protocol=None, **train):
    """One training step of the tiny model with ``method`` (a config entry) into ``out_dir``."""
    folder, data, _ = tiny_setup
    return train_run(
        base_model_dir=folder, train_parquet=data, out_dir=out_dir,
        method=MethodSpec.from_config(name, method), train={**ONE_STEP, **train}, lora=LORA,
        protocol=TeacherProtocol.from_config(protocol), seed=0, log=lambda _: None,
    )  # fmt: skip


def test_a_training_step_under_the_loss_temperature(tiny_setup, tmp_path, default_config):
    metrics = train_one_step(
        tiny_setup, tmp_path, default_config["methods"]["dash"],
        protocol=default_config["protocol"], loss_temperature=1.1,
    )  # fmt: skip
    assert metrics["loss"].notna().all() and (tmp_path / "checkpoint-1").is_dir()


def test_a_training_step_with_the_transition_only_teacher(tiny_setup, tmp_path, default_config):
    protocol = {**default_config["protocol"], "teacher_context": "transition_only"}
    metrics = train_one_step(
        tiny_setup, tmp_path, default_config["methods"]["opsd"], name="opsd", protocol=protocol
    )
    assert metrics["loss"].notna().all() and (tmp_path / "checkpoint-1").is_dir()


def test_reason_first_teacher_scores_after_its_own_adapter_off_analysis(
    tiny_setup, tmp_path, default_config
):
    """Two steps with ``reason_first``: the traced contexts are [request][analysis][transition],
    and the step-2 analyses (after an update) are the base model's samples, adapter off, from
    the micro-batch's seed."""
    from transformers import AutoModelForCausalLM

    from dashrepro.sampling import SamplingSettings, derive_seed
    from dashrepro.sampling.hf import sample_responses
    from dashrepro.training.batching import BatchLayout, rollout_rows
    from dashrepro.training.teacher import analysis_request_ids

    folder, data, tokenizer = tiny_setup
    config = {**default_config["protocol"], "teacher_context": "reason_first"}
    metrics = train_one_step(
        tiny_setup, tmp_path, default_config["methods"]["opsd"], name="opsd",
        protocol={**config, "analysis_max_tokens": 6}, steps=2, lr=0.5,
    )  # fmt: skip
    assert metrics["loss"].notna().all() and len(metrics) == 2
    contexts = pd.read_parquet(tmp_path / "teacher_contexts.parquet")
    assert set(contexts["step"]) == {1, 2} and (contexts["view"] == "full").all()
    assert contexts["analysis_tokens"].between(1, 6).all()
    protocol = TeacherProtocol.from_config(config)
    for row in contexts.itertuples():
        assert row.context.endswith(protocol.transition_text())
        assert row.analysis in row.context and "Reference Reasoning Start" in row.context

    frame = pd.read_parquet(data)
    rows = rollout_rows(len(frame), 0, 2, BatchLayout(micro=3, accum=1), 0)
    requests = [
        analysis_request_ids(
            tokenizer, protocol, (frame["problem"][i], frame["reference_solution"][i], ""), 10**9
        )
        for i in rows
    ]
    base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    expected = sample_responses(
        base, tokenizer, [tokenizer.decode(q) for q in requests],
        SamplingSettings(temperature=1.1, top_p=0.95, top_k=20, max_new_tokens=6),
        seed=derive_seed(0, 2, 0, "analysis"),
    )  # fmt: skip
    step2 = contexts[contexts["step"] == 2].sort_values("rollout")
    assert list(step2["problem_id"]) == [str(frame["id"][i]) for i in rows][: len(step2)]
    assert list(step2["analysis"]) == [s.text for s in expected][: len(step2)]


def test_every_run_records_its_traced_teacher_contexts(tiny_setup, tmp_path, default_config):
    train_one_step(tiny_setup, tmp_path, default_config["methods"]["avsd"], name="avsd",
                   protocol=default_config["protocol"])  # fmt: skip
    contexts = pd.read_parquet(tmp_path / "teacher_contexts.parquet")
    assert list(contexts["view"].unique()) == ["full_solution", "partial_solution", "answer_only"]
    assert contexts["analysis"].isna().all() and (contexts["analysis_tokens"] == 0).all()
    assert contexts["context"].str.contains("Privileged Reference").all()


@pytest.mark.parametrize("tau", [None, 1e-5])
def test_traces_hold_the_unclipped_forward_kl_beside_the_signal(
    tiny_setup, tmp_path, default_config, tau
):
    method = {**default_config["methods"]["dash"], "tau": tau}
    train_one_step(tiny_setup, tmp_path, method, protocol=default_config["protocol"])
    traces = pd.read_parquet(tmp_path / "token_traces.parquet")
    assert traces["divergence"].notna().all() and (traces["divergence"] >= -1e-6).all()
    if tau is None:  # the method's signal is the unclipped forward KL itself
        assert (traces["divergence"] - traces["r"]).abs().max() < 1e-6
    else:  # per-entry clipping only lowers it
        assert (traces["divergence"] >= traces["r"] - 1e-6).all()
        assert (traces["divergence"] > traces["r"] + 1e-6).any()


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
