"""Tests of dashrepro.training.trainer: real training steps of the tiny model through ``train_run``
(per method and teacher context) and what they write, beside a few building-block checks."""

import pandas as pd
import pytest
import torch
import yaml
from conftest import REPO_ROOT
from training_helpers import LORA, ONE_STEP

from dashrepro import objectives
from dashrepro.data.prompts import TeacherProtocol
from dashrepro.settings import TrainSettings
from dashrepro.training.methods import MethodSpec
from dashrepro.training.trainer import train_run


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


def test_avsd_partial_view_falls_back_to_sentences_and_characters():
    from dashrepro.data.views import PARTIAL_NOTICE, partial_solution

    assert partial_solution("One. Two. Three. Four.") == f"One. Two.\n\n{PARTIAL_NOTICE}"
    assert partial_solution("abcdef") == f"abc\n\n{PARTIAL_NOTICE}"
    assert partial_solution("\\boxed{7}") == PARTIAL_NOTICE


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


ONE_PROCESS_RUN = r"""
import json, sys
from dashrepro.data.prompts import TeacherProtocol
from dashrepro.training.methods import MethodSpec
from dashrepro.training.trainer import train_run

args = json.loads(sys.argv[1])
train_run(base_model_dir=args["folder"], train_parquet=args["data"], out_dir=args["out"],
          method=MethodSpec.from_config("dash", args["method"]), train=args["train"],
          lora=args["lora"], protocol=TeacherProtocol.from_config(args["protocol"]), seed=0,
          log=lambda _: None)
print(json.dumps(sorted(name for name in ("deepspeed", "mlflow") if name in sys.modules)))
"""


def test_a_one_process_run_without_deepspeed_never_imports_it(tiny_setup, tmp_path, default_config):
    # accelerate's unwrap_model imports DeepSpeed (and MLflow with it) to look for its engine:
    # about a second of every embedded training job, for a model nothing wrapped.
    import json
    import subprocess
    import sys

    folder, data, _ = tiny_setup
    args = {"folder": str(folder), "data": str(data), "out": str(tmp_path),
            "method": default_config["methods"]["dash"], "train": ONE_STEP, "lora": LORA,
            "protocol": default_config["protocol"]}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", ONE_PROCESS_RUN, json.dumps(args)],
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert (tmp_path / "checkpoint-1" / "adapter_model.safetensors").is_file()
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_training_with_compiled_rollouts_runs_every_phase(tiny_setup, tmp_path, default_config):
    """``rollout_backend: hf_compiled``: two steps, the teacher's adapter-off analyses and the
    student's rollouts both drawn from the compiled copy, which follows the adapter's update."""
    config = {**default_config["protocol"], "teacher_context": "reason_first"}
    metrics = train_one_step(
        tiny_setup, tmp_path, default_config["methods"]["dash"],
        protocol={**config, "analysis_max_tokens": 6}, steps=2, lr=0.5,
        rollout_backend="hf_compiled",
    )  # fmt: skip
    assert metrics["loss"].notna().all() and len(metrics) == 2
    contexts = pd.read_parquet(tmp_path / "teacher_contexts.parquet")
    assert set(contexts["step"]) == {1, 2} and contexts["analysis_tokens"].between(1, 6).all()
    assert (tmp_path / "checkpoint-2" / "adapter_model.safetensors").is_file()


def test_rollouts_in_calls_of_one_micro_batch_are_the_default_and_one_call_a_step_trains(
    tiny_setup, tmp_path, default_config, monkeypatch
):
    """``train.rollout_call_rows``: at one micro-batch a call, the default run's adapter bit for
    bit (a call's seed is its first micro-batch's); at the step's rows, one rollout call and one
    analysis call a step (reason_first), and the run trains."""
    from dashrepro.training.rollouts import RolloutPhase

    protocol = {**default_config["protocol"], "teacher_context": "reason_first",
                "analysis_max_tokens": 4}  # fmt: skip
    method = default_config["methods"]["dash"]
    run = dict(protocol=protocol, steps=2, micro_batch_size=2, grad_accumulation=3)
    train_one_step(tiny_setup, tmp_path / "default", method, **run)
    train_one_step(tiny_setup, tmp_path / "micro", method, rollout_call_rows=2, **run)
    adapter = "checkpoint-2/adapter_model.safetensors"
    assert (tmp_path / "default" / adapter).read_bytes() == (tmp_path / "micro" / adapter).read_bytes()

    calls = []
    for name in ("sample", "teacher_samples"):
        real = getattr(RolloutPhase, name)
        monkeypatch.setattr(RolloutPhase, name, lambda self, *a, _real=real, _name=name, **k: (
            calls.append((_name, len(a[1]))) or _real(self, *a, **k)))  # fmt: skip
    metrics = train_one_step(tiny_setup, tmp_path / "step", method, rollout_call_rows=6, **run)
    assert calls == [("sample", 6), ("teacher_samples", 6)] * 2
    assert metrics["loss"].notna().all() and len(metrics) == 2
