"""The ``hf_compiled`` backend on CPU: the same distribution as the model's, no recompilation
after adapter updates, and a budget that cannot hold one response refused before any work.

Its draws are not the eager backend's draws (a static cache and compiled kernels round
differently), so the proof is ``sampling.goodness_of_fit`` at every setting the configs use,
with and without an adapter: the grid and false-alarm budget of tests/sampling/
test_goodness_of_fit.py, a family of its own.
"""

from __future__ import annotations

import pytest
import torch
from goodness_of_fit_support import ALPHA, MIN_TOKENS, fit, fit_setup, grid_params
from sampling_helpers import ARCH, TARGETS, save_tiny_model

from dashrepro.sampling import RolloutOptions, SamplingSettings, make_rollout_sampler, make_sampler
from dashrepro.sampling.hf_compiled import CompiledSampler, compile_counts
from dashrepro.settings import LoraSettings


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One thread, as the eager grid: the seeded draws do not depend on what runs beside."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, default_config):
    setup = fit_setup(tmp_path_factory.mktemp("gof-compiled"), default_config["protocol"])
    sampler = make_sampler("hf_compiled", base_model=setup["folder"], device="cpu")
    return {**setup, "sampler": sampler}


@pytest.mark.parametrize("settings, adapter", grid_params())
def test_compiled_sampler_draws_from_the_model_distribution(tiny, settings, adapter):
    result = fit(tiny, tiny["sampler"], settings, adapter)
    print(f"[gof] hf_compiled {settings.temperature}/{settings.top_p}/{settings.top_k} "
          f"{adapter}: {result}")  # fmt: skip
    assert result.n_tokens > MIN_TOKENS
    assert result.accepts(ALPHA), str(result)


def test_the_grid_compiled_one_graph(tiny):
    """Every setting and both adapters through one static cache shape: one compiled graph in
    the module (the settings' warpers run outside it, the adapter is written in place)."""
    fit(tiny, tiny["sampler"], SamplingSettings(1.0, 1.0, None, 16), "a8")
    assert len(tiny["sampler"].caches.caches) == 1
    assert compile_counts()["compiled_graphs"] >= 1


def test_rollouts_recompile_nothing_across_optimizer_steps(tmp_path):
    """The trainer's compiled rollouts: after the first call, optimizer steps, adapter syncs
    and the teacher's adapter-off samples compile no new graph, and the copy follows the live
    policy."""
    from dashrepro.sampling.policy_copy import live_deltas, merged_weight
    from dashrepro.training.model import load_lora_student

    folder, tokenizer, prompts = save_tiny_model(tmp_path / "base", ARCH)
    lora = LoraSettings(r=4, alpha=8, dropout=0.0, target_modules=tuple(TARGETS))
    policy = load_lora_student(folder, lora, seed=0)
    options = RolloutOptions(base_model=str(folder), adapter_dir=tmp_path, precision="fp32")
    sampler = make_rollout_sampler("hf_compiled", tokenizer, policy, options)
    settings = SamplingSettings(1.1, 0.95, 20, max_new_tokens=12)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    counts = []
    for step in range(4):
        samples = sampler.sample(policy, prompts, settings, seed=step)
        assert len(samples) == len(prompts)
        counts.append(compile_counts()["compiled_graphs"])
        for delta in live_deltas(policy):
            assert torch.equal(sampler.copy.weights[delta.name], merged_weight(delta.base, delta))
        sampler.sample_base(policy, prompts, settings, seed=100 + step)
        ids = torch.randint(3, 40, (2, 8), generator=torch.Generator().manual_seed(step))
        policy(input_ids=ids).logits.logsumexp(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    print(f"[compile] compiled graphs after each step's rollouts: {counts}")
    assert counts[0] >= 1 and counts[1:] == [counts[0]] * 3


def test_a_budget_that_cannot_hold_one_response_stops_before_loading(tmp_path, monkeypatch):
    folder, _, _ = save_tiny_model(tmp_path / "base", ARCH)
    from dashrepro.sampling import policy_copy

    monkeypatch.setattr(policy_copy.PolicyCopy, "load", lambda *a: pytest.fail("loaded"))
    with pytest.raises(ValueError, match="evaluation.kv_cache_budget_gib"):
        CompiledSampler(folder, kv_cache_budget_gib=1e-6, response_cap=10_000)


def test_the_batch_is_planned_from_the_budget_at_the_cache_length(tmp_path):
    """Rows of the bucketed cache length (256 positions) within the budget, and one cache
    held at a time (two would hold twice the budget)."""
    folder, _, prompts = save_tiny_model(tmp_path / "base", ARCH)
    # ARCH: 1 layer, 1 key/value head of 16 dims, fp32: 128 bytes a position.
    sampler = CompiledSampler(folder, kv_cache_budget_gib=3 * 128 * 256 / 2**30)
    assert sampler.batch_for(64, requests=10) == sampler.batch_for(256, requests=10) == 3
    assert sampler.batch_for(257, requests=10) == 1  # 512 positions
    with pytest.raises(ValueError, match="one response of 1,024 positions"):
        sampler.batch_for(800, requests=10)
    samples = sampler.sample(prompts * 2, SamplingSettings(max_new_tokens=8), seed=0)
    assert len(samples) == 8 and all(len(s.token_ids) >= 1 for s in samples)
    assert list(sampler.caches.caches) == [(8 % 3, 256)]  # the last call's (3, 3, then 2 rows)
