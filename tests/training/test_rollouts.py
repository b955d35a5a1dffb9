"""The rollout sampler's backends: the vLLM path's engine handling, on a stand-in engine (the
real one: tests/vllm_cpu), and the backend each ``rollout_backend`` makes.

vLLM's CPU build has no sleep mode, so the rollout sampler must run without it there and still
use it on a GPU; either way the student's current adapter is saved and synced before each call.
"""

from __future__ import annotations

import pytest

from dashrepro.sampling import SamplingSettings
from dashrepro.settings import LoraSettings, TrainSettings
from dashrepro.training import rollouts


class FakeEngine:
    """Records what the rollout sampler asks of a VLLMSampler."""

    def __init__(self, base_model, **kwargs):
        self.kwargs = kwargs
        self.calls: list[tuple] = []

    def wake_up(self):
        self.calls.append(("wake_up",))

    def sleep(self, level=1):
        self.calls.append(("sleep", level))

    def sync_adapter(self, folder):
        self.calls.append(("sync", folder.name, (folder / "adapter.txt").read_text()))

    def sample(self, prompts, settings, seed, adapter_dir=None):
        self.calls.append(("sample", None if adapter_dir is None else adapter_dir.name))
        return [f"sample of {p}" for p in prompts]

    def shutdown(self):
        self.calls.append(("shutdown",))


class FakePolicy:
    """A model whose ``save_pretrained`` writes its current version (no adapter config)."""

    version = 0
    peft_config: dict = {}

    def save_pretrained(self, folder):
        from pathlib import Path

        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "adapter.txt").write_text(f"v{self.version}")


TRAIN = TrainSettings(
    steps=1, checkpoint_every=1, lr=1e-3, micro_batch_size=1, grad_accumulation=1,
    max_new_tokens=8, temperature=1.0, top_p=1.0, top_k=0, rollout_backend="vllm",
    vllm={"dtype": "float32"},
)  # fmt: skip
LORA = LoraSettings(r=8, alpha=16, dropout=0.0, target_modules=("q_proj",))


@pytest.mark.parametrize("cuda", [False, True])
def test_rollouts_sync_the_current_adapter_and_sleep_only_on_a_gpu(monkeypatch, tmp_path, cuda):
    import dashrepro.sampling.vllm as vllm_module

    monkeypatch.setattr(vllm_module, "VLLMSampler", FakeEngine)
    monkeypatch.setattr(vllm_module, "sleep_mode_available", lambda: cuda)
    sampler = rollouts.RolloutSampler(None, TRAIN, LORA, "base", tmp_path, rank=1)
    policy = FakePolicy()
    settings = SamplingSettings(max_new_tokens=8)
    for step in (1, 2):
        policy.version = step
        assert sampler.sample(policy, ["p"], settings, seed=step) == ["sample of p"]
    engine = sampler.sampler.engine
    assert isinstance(sampler.sampler, vllm_module.VLLMRolloutSampler)
    assert engine.kwargs["enable_sleep_mode"] is cuda
    assert engine.kwargs["dtype"] == "float32"  # train.vllm reaches the engine
    assert engine.kwargs["max_lora_rank"] == LORA.r
    sampler.teacher_samples(policy, ["q"], settings, seed=3)
    rollout_calls = [("sync", "rank1", "v1"), ("sample", "rank1"), ("sync", "rank1", "v2"),
                     ("sample", "rank1"), ("sample", None)]  # fmt: skip
    if cuda:
        expected = [
            ("wake_up",), rollout_calls[0], rollout_calls[1], ("sleep", 1),
            ("wake_up",), rollout_calls[2], rollout_calls[3], ("sleep", 1),
            ("wake_up",), rollout_calls[4], ("sleep", 1),
        ]  # fmt: skip
    else:
        expected = rollout_calls
    assert engine.calls == expected
    sampler.shutdown()
    assert engine.calls[-1] == ("shutdown",)


def test_each_rollout_backend_makes_its_registered_sampler(tmp_path):
    """hf samples the live policy itself: nothing is made or loaded for it."""
    import dataclasses

    from dashrepro.sampling.hf import LivePolicySampler

    train = dataclasses.replace(TRAIN, rollout_backend="hf")
    sampler = rollouts.RolloutSampler("tok", train, LORA, "base", tmp_path, rank=0)
    made = sampler.policy_sampler(FakePolicy())
    assert isinstance(made, LivePolicySampler) and made.tokenizer == "tok"
    assert sampler.policy_sampler(None) is made  # made once
    sampler.shutdown()  # nothing to stop
