"""The trainer's DeepSpeed ZeRO-2 path and bf16 autocast, on CPU (real DeepSpeed, real processes).

DeepSpeed (>= 0.14.1) runs on its CPU accelerator with gloo collectives when oneCCL is absent,
so the paper's config (config/deepspeed/zero2_offload.json: ZeRO-2, AdamW states offloaded to
CPU, bf16) gets the tests the DDP path has in test_trainer_resume.py:

- ``kill -9`` after a training state, rerun: the adapters of an uninterrupted run, bit for bit;
- SIGUSR1 (preemption): a state at the end of the step, exit for a retry, the same adapters; the
  DeepSpeed folder of the state holds the adapter's weights, not the frozen base model, and only
  the newest state's folder is kept;
- 2 processes (``accelerate launch``, as the workflow starts them) with one micro-batch each
  equal 1 process accumulating 2, with offload and bf16, and without offload in fp32;
- the logged learning rate follows the linear schedule, one step of it per optimisation step.

bf16 autocast (DDP) runs on CPU too: one training step checks that LoRA's matmuls run in bf16
while its weights stay fp32. Only vLLM and FlashAttention remain GPU-only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import REPO_ROOT
from test_trainer_resume import (
    TRAIN,
    adapter,
    assert_same_adapters,
    run_to_end,
    start_and_interrupt,
    write_run,
)

from dashrepro.settings import TrainSettings
from dashrepro.training.distributed import deepspeed_config, launch_command, make_accelerator
from dashrepro.training.preemption import PREEMPTED_EXIT_CODE

PAPER_CONFIG = REPO_ROOT / "config" / "deepspeed" / "zero2_offload.json"
#: The paper's DeepSpeed setup: ZeRO-2 with optimizer offload, in bf16.
PAPER = {"deepspeed_config": str(PAPER_CONFIG), "precision": "bf16"}


def assert_lr_follows_the_schedule(metrics: pd.DataFrame, lr: float, steps: int) -> None:
    """Linear decay to zero over the run, no warmup: step s uses lr * (1 - (s - 1) / steps)."""
    expected = [lr * (1 - (s - 1) / steps) for s in metrics["step"]]
    assert list(metrics["lr"]) == pytest.approx(expected, rel=1e-12)


def config_without_offload_in_fp32(folder: Path) -> Path:
    """The paper's config with the optimizer states on the processes and bf16 left to the run."""
    config = json.loads(PAPER_CONFIG.read_text())
    del config["zero_optimization"]["offload_optimizer"]
    config["bf16"] = {"enabled": "auto"}
    path = folder / "zero2.json"
    path.write_text(json.dumps(config))
    return path


# ------------------------------------------------------------------------------------------------
# The config and the accelerator's arguments
# ------------------------------------------------------------------------------------------------


def settings(**train) -> TrainSettings:
    """The resume tests' settings with ``train`` over them."""
    return TrainSettings.from_config({**TRAIN, **train})


def test_the_deepspeed_precision_is_the_runs(tmp_path):
    batch = {"micro_batch_size": 2, "grad_accumulation": 1}
    paper = deepspeed_config(settings(**batch, **PAPER), world_size=1)
    assert paper["bf16"]["enabled"] is True and paper["fp16"]["enabled"] is False
    auto = {**batch, "deepspeed_config": str(config_without_offload_in_fp32(tmp_path))}
    assert deepspeed_config(settings(**auto), world_size=1)["bf16"]["enabled"] is False
    bf16 = deepspeed_config(settings(**auto, precision="bf16"), world_size=1)
    assert bf16["bf16"]["enabled"] is True

    def written(name: str, **sections) -> str:
        (tmp_path / name).write_text(json.dumps(json.loads(PAPER_CONFIG.read_text()) | sections))
        return str(tmp_path / name)

    # A file enabling bf16 would silently train an fp32 run in bf16 (accelerate lets it pass).
    bf16_file = written("bf16.json", bf16={"enabled": True})
    with pytest.raises(ValueError, match=r"bf16.enabled = True contradicts train.precision 'fp32'"):
        deepspeed_config(settings(**batch, deepspeed_config=bf16_file), world_size=1)
    fp16_file = written("fp16.json", bf16={"enabled": "auto"}, fp16={"enabled": True})
    with pytest.raises(ValueError, match=r"fp16.enabled = True contradicts train.precision 'bf16'"):
        deepspeed_config(
            settings(**{**PAPER, **batch, "deepspeed_config": fp16_file}), world_size=1
        )


def test_a_missing_deepspeed_config_or_an_unknown_precision_is_refused(tmp_path):
    missing = str(tmp_path / "zero9.json")
    with pytest.raises(FileNotFoundError, match="zero9.json"):
        deepspeed_config(settings(deepspeed_config=missing))
    with pytest.raises(ValueError, match=r"train.precision: 'fp16' is not one of fp32, bf16"):
        settings(precision="fp16")
    unchecked = dataclasses.replace(settings(), precision="fp16")  # not through from_config
    with pytest.raises(ValueError, match=r"train.precision must be one of fp32, bf16; got 'fp16'"):
        make_accelerator(unchecked)


# ------------------------------------------------------------------------------------------------
# Kill, preemption and resume under ZeRO-2 with offload (the paper's config)
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deepspeed_uninterrupted(tmp_path_factory, tiny_setup, default_config):
    work = tmp_path_factory.mktemp("deepspeed-uninterrupted")
    run_to_end(write_run(work / "run.json", tiny_setup, default_config, work / "out", **PAPER))
    return work / "out"


@pytest.mark.slow
def test_a_deepspeed_run_logs_the_scheduled_learning_rate(deepspeed_uninterrupted):
    metrics = pd.read_parquet(deepspeed_uninterrupted / "train_metrics.parquet")
    assert list(metrics["step"]) == [*range(1, TRAIN["steps"] + 1)]
    assert_lr_follows_the_schedule(metrics, TRAIN["lr"], TRAIN["steps"])
    # DeepSpeed's engine clips and reports the global gradient norm (DDP's comes from accelerate).
    assert metrics["grad_norm"].notna().all() and (metrics["grad_norm"] > 0).all()
    # DeepSpeed's bf16 holds the module in bf16 (AdamW's fp32 master copy lives in ZeRO's
    # partitions): the exported adapter is bf16, as it would be on the GPUs.
    weights = adapter(deepspeed_uninterrupted, TRAIN["steps"])
    assert {w.dtype for w in weights.values()} == {torch.bfloat16}
    assert not (deepspeed_uninterrupted / ".resume").exists()


@pytest.mark.slow
def test_deepspeed_kill_9_then_rerun_gives_the_uninterrupted_adapter(
    deepspeed_uninterrupted, tmp_path, tiny_setup, default_config
):
    out = tmp_path / "out"
    run = write_run(tmp_path / "run.json", tiny_setup, default_config, out, **PAPER)
    rc = start_and_interrupt(run, out, 2, lambda p: p.send_signal(signal.SIGKILL))
    assert rc == -signal.SIGKILL
    # The state is DeepSpeed's: ZeRO's partition of the optimizer (bf16 run, rank 0 of 1).
    engine = out / ".resume" / "deepspeed-step-000002" / "pytorch_model"
    assert (engine / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt").is_file()
    done = run_to_end(run)
    assert "resuming dash seed 3 after step" in done.stdout + done.stderr
    assert_same_adapters(deepspeed_uninterrupted, out)
    resumed = pd.read_parquet(out / "train_metrics.parquet")
    assert list(resumed["step"]) == [*range(1, TRAIN["steps"] + 1)]
    assert_lr_follows_the_schedule(resumed, TRAIN["lr"], TRAIN["steps"])
    whole = pd.read_parquet(deepspeed_uninterrupted / "train_metrics.parquet")
    pd.testing.assert_series_equal(resumed["loss"], whole["loss"])


@pytest.mark.slow
def test_a_preempted_deepspeed_run_keeps_two_lean_states_and_resumes(
    deepspeed_uninterrupted, tmp_path, tiny_setup, default_config
):
    out = tmp_path / "out"
    run = write_run(tmp_path / "run.json", tiny_setup, default_config, out, **PAPER)
    rc = start_and_interrupt(run, out, 2, lambda p: p.send_signal(signal.SIGUSR1))
    assert rc == PREEMPTED_EXIT_CODE
    states = sorted(p.name for p in (out / ".resume").glob("step-*"))
    newest = states[-1]
    assert newest > "step-000002"  # the notice came after step 2: a state of a later step
    # The two newest states' DeepSpeed folders are kept (a damaged newest one falls back to the
    # one before it), and they leave the frozen base model out (an input, not part of the
    # state). DeepSpeed drops frozen parameters by name, so a tied lm_head (the tiny Qwen3 and
    # Qwen3-1.7B tie it to the embeddings) is the one left.
    kept = sorted(p.name for p in (out / ".resume").glob("deepspeed-step-*"))
    assert kept == [f"deepspeed-{state}" for state in states[-2:]]
    engine = out / ".resume" / f"deepspeed-{newest}" / "pytorch_model"
    module = torch.load(engine / "mp_rank_00_model_states.pt", weights_only=False)["module"]
    assert sum("lora_" in key for key in module) == 14  # A and B of 7 projections, 1 layer
    assert {key for key in module if "lora_" not in key} <= {"base_model.model.lm_head.weight"}
    run_to_end(run)
    assert_same_adapters(deepspeed_uninterrupted, out)


# ------------------------------------------------------------------------------------------------
# 2 processes equal 1 process with accumulation
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("setup", ["paper: offload, bf16", "no offload, fp32"])
def test_two_deepspeed_processes_equal_one_process_with_accumulation(
    tmp_path, tiny_setup, default_config, setup
):
    if setup.startswith("paper"):
        backend = PAPER
        # bf16 module weights: the two sums of the same gradients may round apart by an ulp.
        tolerance = {"rtol": 1.6e-2, "atol": 1e-5}
    else:
        backend = {"deepspeed_config": str(config_without_offload_in_fp32(tmp_path))}
        tolerance = {"rtol": 1e-5, "atol": 1e-7}  # as the DDP test: only the summation order
    steps = {"steps": 2, "checkpoint_every": 2, "micro_batch_size": 2, **backend}
    one = write_run(tmp_path / "one.json", tiny_setup, default_config, tmp_path / "one",
                    grad_accumulation=2, **steps)  # fmt: skip
    two = write_run(tmp_path / "two.json", tiny_setup, default_config, tmp_path / "two",
                    grad_accumulation=1, **steps)  # fmt: skip
    run_to_end(one)
    # The workflow's command (rules/scripts/train_lora.py); --multi_gpu on a CPU-only machine
    # starts the processes all the same, and DeepSpeed's CPU accelerator joins them over gloo.
    launch = launch_command(two, 2)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(launch, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    first, second = adapter(tmp_path / "one", 2), adapter(tmp_path / "two", 2)
    assert first.keys() == second.keys()
    for key in first:
        torch.testing.assert_close(first[key], second[key], **tolerance)
    assert any("lora_B" in key and bool(first[key].abs().sum() > 0) for key in first)
    for folder in ("one", "two"):
        metrics = pd.read_parquet(tmp_path / folder / "train_metrics.parquet")
        assert_lr_follows_the_schedule(metrics, TRAIN["lr"], 2)


# ------------------------------------------------------------------------------------------------
# bf16 autocast on CPU
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def own_accelerate_state():
    """accelerate keeps one precision per process (an Accelerator asking for another raises):
    this test's bf16 state is set up afresh and removed after it, for the tests around it."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def test_a_bf16_training_step_autocasts_on_cpu(
    tmp_path, tiny_setup, default_config, own_accelerate_state
):
    from dashrepro.training.recipe import DistillationRecipe
    from dashrepro.training.run_spec import RunSpec

    out = tmp_path / "out"
    run = write_run(tmp_path / "run.json", tiny_setup, default_config, out,
                    steps=1, checkpoint_every=1, precision="bf16")  # fmt: skip
    recipe = DistillationRecipe(RunSpec.from_json(run), log=lambda _: None)
    recipe.setup()
    assert recipe.accelerator.mixed_precision == "bf16"
    # LoRA's A matrices are fp32 and peft casts their input to fp32: their outputs are bf16
    # only under autocast. Recorded in the student's trained forward (the one with grad; HF
    # generate's rollouts call the base model past accelerate's autocast wrapper).
    dtypes: set[torch.dtype] = set()

    def record(_module, _inputs, output):
        if torch.is_grad_enabled():
            dtypes.add(output.dtype)

    lora_a = [m for name, m in recipe.policy.named_modules() if name.endswith("lora_A.default")]
    assert lora_a
    for module in lora_a:
        module.register_forward_hook(record)
    metrics = recipe.train()
    assert dtypes == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in recipe.trainable)  # the weights AdamW updates
    assert metrics["loss"].notna().all() and metrics["grad_norm"].notna().all()
    assert_lr_follows_the_schedule(metrics, TRAIN["lr"], 1)
    weights = adapter(out, 1)
    assert {w.dtype for w in weights.values()} == {torch.float32}
    assert any("lora_B" in key and bool(w.abs().sum() > 0) for key, w in weights.items())
