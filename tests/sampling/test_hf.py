"""Tests for dashrepro.sampling.hf: HFSampler and sample_responses on a tiny saved Qwen3."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from sampling_helpers import ARCH, save_random_lora, save_tiny_model

from dashrepro.sampling import SamplingSettings, make_sampler
from dashrepro.sampling.hf import sample_responses


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-base"), ARCH)


def test_hf_sampler_matches_sample_responses_and_caches_policies(
    tiny_model_dir, tmp_path, monkeypatch
):
    from dashrepro.sampling import hf

    folder, tokenizer, prompts = tiny_model_dir
    adapter = tmp_path / "adapter"
    save_random_lora(folder, adapter, rank=4, seed=1)
    settings = SamplingSettings(temperature=1.0, max_new_tokens=6)

    loads = []
    real = hf.load_policy
    monkeypatch.setattr(hf, "load_policy", lambda *a, **kw: loads.append(a[1]) or real(*a, **kw))
    sampler = make_sampler("hf", base_model=folder)
    base = sampler.sample(prompts, settings, seed=3)
    expected = sample_responses(real(folder, None), tokenizer, prompts, settings, seed=3)
    assert [s.token_ids for s in base] == [s.token_ids for s in expected]
    assert [s.text for s in base] == [s.text for s in expected]
    assert all(s.seed == 3 for s in base)  # one seed per HF call

    tuned = sampler.sample(prompts, settings, seed=3, adapter_dir=adapter)
    expected = sample_responses(real(folder, adapter), tokenizer, prompts, settings, seed=3)
    assert [s.token_ids for s in tuned] == [s.token_ids for s in expected]

    sampler.sample(prompts, settings, seed=4)
    sampler.sample(prompts, settings, seed=4, adapter_dir=adapter)
    assert len(loads) == 2  # base and adapter policies stay cached
    sampler.sync_adapter(adapter)  # the adapter folder was rewritten
    sampler.sample(prompts, settings, seed=4, adapter_dir=adapter)
    assert len(loads) == 3 and Path(loads[-1]) == adapter.resolve()


def test_sample_responses_sends_the_prompts_to_the_models_device(tiny_model_dir):
    """A policy on a GPU takes no CPU tensors (the trainer's HF rollouts and load_policy's
    policy sit on the GPU there). A stand-in model reports another device and records where
    the prompts arrive; the CPU has no second device to run on."""
    _, tokenizer, prompts = tiny_model_dir

    class ElsewhereModel(torch.nn.Module):
        device = torch.device("meta")
        training = False

        def generate(self, input_ids, attention_mask, **kwargs):
            self.seen = (input_ids.device, attention_mask.device)
            rows = torch.full((input_ids.shape[0], 2), tokenizer.eos_token_id)
            return torch.cat([torch.zeros_like(input_ids, device="cpu"), rows], dim=1)

    model = ElsewhereModel()
    samples = sample_responses(model, tokenizer, prompts[:2], SamplingSettings(), seed=0)
    assert model.seen == (torch.device("meta"), torch.device("meta"))
    assert [s.finish_reason for s in samples] == ["stop", "stop"]
