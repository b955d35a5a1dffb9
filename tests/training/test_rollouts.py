"""The rollout sampler's backends: the vLLM path's engine handling, on a stand-in engine (the
real one: tests/vllm_cpu), and the backend each ``rollout_backend`` makes.

vLLM's CPU build has no sleep mode, so the rollout sampler must run without it there and still
use it on a GPU; either way the student's current adapter is saved and synced before each call.
"""

from __future__ import annotations

from types import SimpleNamespace

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
    sampler = rollouts.RolloutPhase(None, TRAIN, LORA, "base", tmp_path, rank=1)
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

    from dashrepro.sampling.hf import HFRolloutSampler

    train = dataclasses.replace(TRAIN, rollout_backend="hf")
    sampler = rollouts.RolloutPhase("tok", train, LORA, "base", tmp_path, rank=0)
    made = sampler.policy_sampler(FakePolicy())
    assert isinstance(made, HFRolloutSampler) and made.tokenizer == "tok"
    assert sampler.policy_sampler(None) is made  # made once
    sampler.shutdown()  # nothing to stop


def test_call_groups_hold_whole_micro_batches_up_to_the_rows_and_skip_long_prompts():
    short, long = [[1, 2]], [[1] * 10]
    prompts = [short * 2, short * 2, long * 2, short * 2, short * 3]
    assert rollouts.call_groups(prompts, 10, None) == [[0], [1], [3], [4]]
    assert rollouts.call_groups(prompts, 10, 4) == [[0, 1], [3], [4]]
    assert rollouts.call_groups(prompts, 10, 100) == [[0, 1, 3, 4]]
    assert rollouts.call_groups(prompts, 10, 1) == [[0], [1], [3], [4]]  # a larger one alone


class CountingPhase(rollouts.RolloutPhase):
    """A rollout phase whose sampler answers each prompt with its own text, recording calls."""

    def __init__(self, max_total: int = 10**9):
        train = TrainSettings(steps=1, checkpoint_every=1, lr=1e-3, micro_batch_size=2,
                              grad_accumulation=3, max_new_tokens=8, temperature=1.0, top_p=1.0,
                              top_k=0, max_total_length=max_total)  # fmt: skip
        tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens: "request")
        super().__init__(tokenizer, train, LORA, "base", "unused", rank=0)
        self.calls: list[tuple] = []

    def sample(self, model, prompts, settings, seed):
        from dashrepro.sampling import Sample

        self.calls.append(("rollouts", len(prompts), settings.max_new_tokens, seed))
        return [Sample(i, [7], p, "stop") for i, p in enumerate(prompts)]

    def teacher_samples(self, model, prompts, settings, seed):
        from dashrepro.sampling import Sample

        self.calls.append(("analyses", len(prompts), seed))
        return [Sample(i, [8], "analysis", "stop") for i, _ in enumerate(prompts)]


@pytest.fixture
def plain_prompts(monkeypatch):
    """Prompts are the problems, their ids one per character; answers are the problems."""
    import pandas as pd

    monkeypatch.setattr(rollouts, "render_student_prompt", lambda tokenizer, problem: problem)
    monkeypatch.setattr(rollouts, "encode", lambda tokenizer, text: [ord(c) for c in text])
    monkeypatch.setattr(rollouts, "analysis_request_ids", lambda tok, protocol, inp, cap: [1])
    monkeypatch.setattr(rollouts, "reward_exact_match", lambda text, answer: float(text == answer))
    problems = ["a", "bb", "c", "toolongprompt", "d", "e"]
    return pd.DataFrame({"id": range(6), "problem": problems, "reference_solution": problems,
                         "answer": ["a", "x", "c", "x", "d", "x"]})  # fmt: skip


def test_a_steps_rollouts_in_one_call_come_back_in_their_micro_batches(plain_prompts):
    """train.rollout_call_rows groups a step's micro-batches into calls; each micro-batch's
    Share is as a call of its own would make it, with the call's seed, cap and numbering."""
    protocol = SimpleNamespace(analysis_max_tokens=5, transition_text=lambda: "")
    micro_rows, seeds = [[0, 1], [2, 4], [5, 0]], [11, 12, 13]
    one_each = CountingPhase()
    alone = one_each.step_shares(None, plain_prompts, micro_rows, seeds, {"rollout": 0.0,
                                 "teacher": 0.0}, analyses=(protocol, None, [21, 22, 23]))  # fmt: skip
    assert [c for c in one_each.calls if c[0] == "rollouts"] == [
        ("rollouts", 2, 8, 11), ("rollouts", 2, 8, 12), ("rollouts", 2, 8, 13)]  # fmt: skip
    grouped = CountingPhase()
    together = grouped.step_shares(None, plain_prompts, micro_rows, seeds, {"rollout": 0.0,
                                   "teacher": 0.0}, call_rows=6, analyses=(protocol, None, [21, 22, 23]))  # fmt: skip
    assert grouped.calls == [("rollouts", 6, 8, 11), ("analyses", 6, 21)]
    for a, b in zip(alone, together, strict=True):
        assert (a.rows, a.prompts, a.rewards) == (b.rows, b.prompts, b.rewards)
        assert [(s.prompt_index, s.text) for s in a.samples] == [
            (s.prompt_index, s.text) for s in b.samples]  # fmt: skip
        assert [s.prompt_index for s in b.analyses] == [0, 1]
    assert together[1].rewards == [1.0, 1.0] and together[2].rewards == [0.0, 1.0]


def test_a_micro_batch_whose_prompt_is_too_long_is_left_out_of_its_call(plain_prompts):
    phase = CountingPhase(max_total=8)
    timings = {"rollout": 0.0, "teacher": 0.0}
    shares = phase.step_shares(None, plain_prompts, [[0, 1], [3, 4], [2, 5]], [1, 2, 3],
                               timings, call_rows=6)  # fmt: skip
    # The call holds micro-batches 0 and 2; its cap leaves room after its longest prompt (2).
    assert phase.calls == [("rollouts", 4, 6, 1)]
    skipped = shares[1]
    assert skipped.samples == [] and skipped.rewards == [0.0, 0.0] and skipped.analyses is None
    assert skipped.skipped_long_prompts == 2 and shares[2].samples[1].text == "e"
