"""The ``hf_continuous`` backend on CPU: transformers' continuous batching draws from the model's
distribution, the same call gives the same bytes, and its cache is sized from the config.

Its draws are neither the eager backend's nor the compiled one's (a paged cache, requests
scheduled into shared forward passes, the warpers of ``ContinuousBatchingLogitsProcessorList``),
so the proof is ``sampling.goodness_of_fit`` at every setting the configs use, with and without
an adapter: the grid and false-alarm budget of tests/sampling/test_goodness_of_fit.py, a family
of its own.
"""

from __future__ import annotations

import pytest
import torch
from goodness_of_fit_support import ALPHA, MIN_TOKENS, fit, fit_setup, grid_params
from sampling_helpers import ARCH, TARGETS, save_random_lora, save_tiny_model

from dashrepro.sampling import RolloutOptions, SamplingSettings, make_rollout_sampler, make_sampler
from dashrepro.sampling.hf_continuous import (
    PAGE_SIZE,
    ContinuousSampler,
    blocks_for,
    budget_blocks,
)
from dashrepro.sampling.memory_plan import CacheShape
from dashrepro.settings import GenerationSettings, LoraSettings


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One thread, as the eager grid: the seeded draws do not depend on what runs beside."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, default_config):
    setup = fit_setup(tmp_path_factory.mktemp("gof-continuous"), default_config["protocol"])
    sampler = make_sampler("hf_continuous", base_model=setup["folder"], device="cpu")
    return {**setup, "sampler": sampler}


@pytest.mark.parametrize("settings, adapter", grid_params())
def test_continuous_sampler_draws_from_the_model_distribution(tiny, settings, adapter):
    result = fit(tiny, tiny["sampler"], settings, adapter)
    print(f"[gof] hf_continuous {settings.temperature}/{settings.top_p}/{settings.top_k} "
          f"{adapter}: {result}")  # fmt: skip
    assert result.n_tokens > MIN_TOKENS
    assert result.accepts(ALPHA), str(result)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    folder, tokenizer, prompts = save_tiny_model(tmp_path_factory.mktemp("cb") / "base", ARCH)
    adapter = folder.parent / "a4"
    save_random_lora(folder, adapter, 4, seed=2)
    return {"folder": folder, "tokenizer": tokenizer, "prompts": prompts, "adapter": adapter}


def test_the_same_call_gives_the_same_bytes_and_another_seed_other_draws(small):
    """What is reproducible (sampling.hf_continuous): the same requests, settings and seed give
    the same tokens; each sample records the call's seed; a response ends at EOS (kept) or at
    the cap."""
    sampler = ContinuousSampler(small["folder"], tokenizer=small["tokenizer"])
    requests = [p for p in small["prompts"] for _ in range(6)]
    settings = SamplingSettings(1.1, 0.95, 20, max_new_tokens=12)
    first = sampler.sample(requests, settings, seed=7, adapter_dir=small["adapter"])
    again = sampler.sample(requests, settings, seed=7, adapter_dir=small["adapter"])
    other = sampler.sample(requests, settings, seed=8, adapter_dir=small["adapter"])
    assert [s.token_ids for s in first] == [s.token_ids for s in again]
    assert [s.text for s in first] == [s.text for s in again]
    assert [s.token_ids for s in first] != [s.token_ids for s in other]
    assert [s.prompt_index for s in first] == list(range(len(requests)))
    eos = small["tokenizer"].eos_token_id
    for sample in first:
        assert sample.seed == 7 and 1 <= len(sample.token_ids) <= 12
        if sample.finish_reason == "stop":
            assert sample.token_ids[-1] == eos and eos not in sample.token_ids[:-1]
        else:
            assert sample.finish_reason == "length" and len(sample.token_ids) == 12
            assert eos not in sample.token_ids


def test_each_checkpoint_is_merged_into_the_copy_once(small, monkeypatch):
    sampler = ContinuousSampler(small["folder"], tokenizer=small["tokenizer"])
    refreshes = []
    refresh = sampler.copy.refresh
    monkeypatch.setattr(sampler.copy, "refresh", lambda d: refreshes.append(len(d)) or refresh(d))
    settings = SamplingSettings(max_new_tokens=4)
    for _ in range(2):
        sampler.sample(small["prompts"], settings, 0, adapter_dir=small["adapter"])
    sampler.sample(small["prompts"], settings, 0)  # the base model: the delta taken out
    assert refreshes == [len(TARGETS), 0]
    assert sampler.copy.adapted == set()


def test_the_cache_is_sized_from_the_budget_and_a_response_must_fit(small, monkeypatch):
    # ARCH: 1 layer, 1 key/value head of 16 dims, fp32: 128 bytes a position, 32 KiB a block.
    shape = CacheShape.of_config({"num_hidden_layers": 1, "num_key_value_heads": 1,
                                  "head_dim": 16, "hidden_size": 32, "num_attention_heads": 2})  # fmt: skip
    assert budget_blocks(3 * 128 * PAGE_SIZE / 2**30, shape, 4) == 3
    assert blocks_for([10, 300], max_new_tokens=16, rows=64) == 2 * 2  # 316 positions: 2 blocks
    assert blocks_for([10] * 100, max_new_tokens=16, rows=64) == 64
    sampler = ContinuousSampler(small["folder"], tokenizer=small["tokenizer"],
                                kv_cache_budget_gib=4 * 128 * PAGE_SIZE / 2**30, response_cap=32)  # fmt: skip
    assert sampler.num_blocks == 4
    # Fewer blocks than the call's requests need at once: they wait their turn, all finish.
    samples = sampler.sample(small["prompts"] * 3, SamplingSettings(max_new_tokens=8), seed=0)
    assert len(samples) == 12 and all(1 <= len(s.token_ids) <= 8 for s in samples)
    from dashrepro.sampling import policy_copy

    monkeypatch.setattr(policy_copy.PolicyCopy, "load", lambda *a: pytest.fail("loaded"))
    with pytest.raises(ValueError, match="evaluation.kv_cache_budget_gib"):
        ContinuousSampler(small["folder"], kv_cache_budget_gib=1e-6, response_cap=10_000)


def test_the_evaluation_settings_reach_the_continuous_sampler(default_config, small):
    evaluation = {**default_config["evaluation"], "backend": "hf_continuous",
                  "dtype": "float32", "kv_cache_budget_gib": 0.5}  # fmt: skip
    generation = GenerationSettings.from_config(evaluation)
    assert not generation.needs_gpu
    assert generation.engine_options() == {"device": "cpu", "dtype": "float32",
                                           "kv_cache_budget_gib": 0.5,
                                           "response_cap": generation.max_new_tokens}  # fmt: skip
    sampler = make_sampler("hf_continuous", base_model=small["folder"],
                           **generation.engine_options())  # fmt: skip
    assert isinstance(sampler, ContinuousSampler) and sampler.num_blocks > 0


def test_rollouts_follow_the_live_policy_and_the_teacher_samples_the_base(tmp_path):
    """The trainer's continuous rollouts: the copy holds base + delta of the live adapter after
    each optimizer step, the teacher's call takes it out, and a step's prompts come back in one
    call, in order."""
    from dashrepro.sampling.policy_copy import live_deltas, merged_weight
    from dashrepro.training.model import load_lora_student

    folder, tokenizer, prompts = save_tiny_model(tmp_path / "base", ARCH)
    lora = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=tuple(TARGETS))
    policy = load_lora_student(folder, lora, seed=0)
    options = RolloutOptions(base_model=str(folder), adapter_dir=tmp_path, precision="fp32")
    sampler = make_rollout_sampler("hf_continuous", tokenizer, policy, options)
    settings = SamplingSettings(1.1, 0.95, 20, max_new_tokens=6)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    for step in range(2):
        samples = sampler.sample(policy, prompts * 2, settings, seed=step)
        assert [s.prompt_index for s in samples] == list(range(2 * len(prompts)))
        for delta in live_deltas(policy):
            assert torch.equal(sampler.copy.weights[delta.name], merged_weight(delta.base, delta))
        assert len(sampler.sample_base(policy, prompts, settings, seed=100 + step)) == len(prompts)
        assert sampler.copy.adapted == set()
        ids = torch.randint(3, 40, (2, 8), generator=torch.Generator().manual_seed(step))
        policy(input_ids=ids).logits.logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()


def test_the_benchmark_prints_each_path_beside_eager(tmp_path):
    """benchmarks/generation_paths.py (docs/sampling.md), on two of its paths at a small size:
    its table and ratio lines."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks/generation_paths.py"
    done = subprocess.run(
        [sys.executable, str(script), "--base-model", str(tmp_path / "none"), "--k", "1",
         "--max-new-tokens", "4", "--paths", "hf,hf_continuous", "--threads", "1"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "| hf | " in done.stdout and "| hf_continuous | " in done.stdout
    assert "- hf_continuous / hf tokens per second: " in done.stdout
