"""Training with vLLM rollouts (``train.rollout_backend: vllm``) on vLLM's CPU build.

Run inside .venv-vllm (tests/vllm_cpu/test_vllm_cpu.py does). The trainer is the one the
Snakemake rule calls (``DistillationRecipe``), on the tiny Qwen3 (head_dim 32), with its
colocated engine in fp32; vLLM's CPU build has no sleep mode, so the engine stays awake.

- Every step's rollouts come from that step's adapter: with greedy rollouts, the tokens vLLM
  returned at step k are HF ``generate``'s greedy tokens under the adapter the student held when
  step k began, and (k >= 2) differ from the greedy tokens under the adapter of step k - 1 --
  the check would catch an engine that kept serving a stale adapter.
- A run stopped after its kept state of step 2 and restarted (a new process would do the same:
  a new recipe, a new engine) ends with the same adapters, bit for bit, as an uninterrupted run,
  rollouts sampled at temperature 1.1 with per-request seeds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from vllm_support import ENGINE_KWARGS, distillation_recipe, hf_greedy, trainable_base

from dashrepro.sampling.hf import load_policy
from dashrepro.training.recipe import DistillationRecipe

TRAIN = {
    "steps": 4,
    "checkpoint_every": 2,
    "lr": 3e-2,  # large, so that one step changes the greedy tokens of a random model
    "micro_batch_size": 4,
    "grad_accumulation": 1,
    "max_new_tokens": 12,
    "temperature": 1.1,
    "loss_temperature": 1.1,
    "top_p": 0.95,
    "top_k": 20,
    "rollout_backend": "vllm",
    # fp32 as the HF reference; see vllm_support.ENGINE_KWARGS.
    "vllm": dict(ENGINE_KWARGS),
}


class Stop(Exception):
    """Raised inside a run to stop it between two steps, as a killed job would stop."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory, default_config):
    """The tiny base model (head_dim 32, an untied head: see vllm_support), its training
    parquet and the default's config."""
    folder, data, _ = trainable_base(tmp_path_factory.mktemp("base"), default_config["protocol"])
    return {"folder": folder, "data": data, "config": default_config}


def recipe(setup, out_dir: Path, **train) -> DistillationRecipe:
    return distillation_recipe(
        setup["folder"], setup["data"], setup["config"], "opsd", out_dir, {**TRAIN, **train}
    )


def run_and_shut_down(run: DistillationRecipe) -> None:
    """Train to the end (or to a Stop), then stop the run's engine either way."""
    try:
        run.train()
    finally:
        run.rollouts.shutdown()


def adapter_weights(out_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(out_dir / f"checkpoint-{step}" / "adapter_model.safetensors")


def test_each_steps_rollouts_come_from_that_steps_adapter(setup, tmp_path):
    run = recipe(setup, tmp_path / "out", temperature=0.0, loss_temperature=1.0, steps=3)
    assert run.rollouts.backend == "vllm"
    calls = []
    original = run.rollouts.sample

    def recording_sample(model, prompts, settings, seed):
        # The adapter the student holds now, saved apart from the folder vLLM is given.
        held = tmp_path / f"held-{len(calls) + 1}"
        model.save_pretrained(str(held))
        samples = original(model, prompts, settings, seed)
        calls.append({"adapter": held, "prompts": prompts, "samples": samples})
        return samples

    run.rollouts.sample = recording_sample
    run_and_shut_down(run)
    assert len(calls) == 3  # one micro-batch per step
    assert not run.rollouts.sampler.sleep_mode  # no CUDA here

    greedy = {}  # call -> HF greedy token ids under that call's adapter, for its prompts
    for k, call in enumerate(calls, start=1):
        policy = load_policy(setup["folder"], call["adapter"])
        greedy[k] = [s.token_ids for s in hf_greedy(policy, run.tokenizer, call["prompts"], 12)]
        vllm_ids = [s.token_ids for s in call["samples"]]
        assert vllm_ids == greedy[k], f"step {k}: vLLM's rollouts are not its adapter's greedy"
        if k >= 2:
            stale = load_policy(setup["folder"], calls[k - 2]["adapter"])
            stale_ids = [s.token_ids for s in hf_greedy(stale, run.tokenizer, call["prompts"], 12)]
            assert stale_ids != vllm_ids, f"step {k}: the previous adapter gives the same tokens"


def test_a_stopped_and_resumed_run_gives_the_uninterrupted_adapters(setup, tmp_path):
    whole = tmp_path / "whole"
    run_and_shut_down(recipe(setup, whole))

    stopped = tmp_path / "stopped"
    first = recipe(setup, stopped)
    step = first._train_step

    def stop_after_two(k):
        if k == 3:
            raise Stop(k)
        step(k)

    first._train_step = stop_after_two
    with pytest.raises(Stop):
        run_and_shut_down(first)
    assert (stopped / ".resume" / "step-000002").is_dir()
    assert not (stopped / "checkpoint-4").exists()

    second = recipe(setup, stopped)
    assert second.state.step == 2  # resumed from the kept state
    run_and_shut_down(second)
    for k in (2, 4):
        a, b = adapter_weights(whole, k), adapter_weights(stopped, k)
        assert a.keys() == b.keys()
        assert all(torch.equal(a[key], b[key]) for key in a), f"checkpoint-{k} differs"
