"""Tests for dashrepro.sampling.vllm: SamplingParams mapping, output conversion, LoRA ids.

vLLM is not installed on the CPU machines, so the engine is replaced by a fake ``vllm`` module
(injected into ``sys.modules``) that records what ``VLLMSampler`` asks of it. The test marked
``gpu`` runs the real engine on a tiny saved Qwen3 model where a CUDA device and vLLM exist.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from sampling_helpers import ARCH, save_random_lora, save_tiny_model

from dashrepro.sampling import Sample, SamplingSettings, make_sampler, request_seed
from dashrepro.sampling.hf import HFSampler
from dashrepro.sampling.vllm import VLLMSampler, sampling_params_kwargs, to_sample

EOS = 2


# --- pure functions ------------------------------------------------------------------------


def test_sampling_params_kwargs_maps_the_settings():
    settings = SamplingSettings(temperature=1.1, top_p=0.95, top_k=None, max_new_tokens=96)
    kwargs = sampling_params_kwargs(settings, seed=123)
    assert kwargs["n"] == 1
    assert kwargs["temperature"] == 1.1
    assert kwargs["top_p"] == 0.95
    assert kwargs["top_k"] == 0  # vLLM's "consider all tokens"
    assert kwargs["max_tokens"] == 96
    assert kwargs["seed"] == 123
    assert kwargs["skip_special_tokens"] is False
    assert kwargs["include_stop_str_in_output"] is False
    assert "stop" not in kwargs and "ignore_eos" not in kwargs  # stop on EOS only
    assert sampling_params_kwargs(SamplingSettings(top_k=0), 0)["top_k"] == 0
    assert sampling_params_kwargs(SamplingSettings(top_k=20), 0)["top_k"] == 20


def completion(token_ids, text, finish_reason, stop_reason=None):
    return SimpleNamespace(
        token_ids=tuple(token_ids), text=text, finish_reason=finish_reason, stop_reason=stop_reason
    )


def test_to_sample_keeps_eos_in_ids_but_not_in_text():
    out = completion([5, 6, EOS], "ab", "stop")  # what vLLM returns for a stop on EOS
    sample = to_sample(3, out, seed=11, eos_token_id=EOS)
    assert sample == Sample(3, [5, 6, EOS], "ab", "stop", 11)
    decoded = []
    sample = to_sample(3, out, 11, EOS, decode=lambda ids: decoded.append(ids) or "X")
    assert decoded == [[5, 6]] and sample.text == "X" and sample.token_ids == [5, 6, EOS]


def test_to_sample_length_keeps_every_token():
    decoded = []
    out = completion([5, 6, 7], "abc", "length")
    sample = to_sample(0, out, 1, EOS, decode=lambda ids: decoded.append(ids) or "abc")
    assert sample == Sample(0, [5, 6, 7], "abc", "length", 1)
    assert decoded == [[5, 6, 7]]
    # A length-capped response may contain EOS-free ids only; nothing is cut.
    assert to_sample(0, completion([EOS, 5], "?5", "length"), 1, EOS).token_ids == [EOS, 5]


def test_to_sample_other_stop_tokens_and_finish_reasons():
    # A stop on an extra generation-config EOS (reported as stop_reason) is cut from the text too.
    decoded = []
    out = completion([5, 9], "a", "stop", stop_reason=9)
    sample = to_sample(0, out, None, EOS, decode=lambda ids: decoded.append(ids) or "a")
    assert decoded == [[5]] and sample.token_ids == [5, 9] and sample.finish_reason == "stop"
    assert to_sample(0, completion([5], "a", "abort"), None, EOS).finish_reason == "abort"


# --- VLLMSampler against a fake vllm ---------------------------------------------------------


class FakeTokenizer:
    """Characters <-> ids (ord), EOS = 2: enough to check encoding and decoding calls."""

    eos_token_id = EOS

    def __call__(self, text, add_special_tokens=True):
        assert add_special_tokens is False  # prompts are already rendered by the chat template
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        assert skip_special_tokens is False
        return "".join("<eos>" if i == EOS else chr(i) for i in ids)


@pytest.fixture
def fake_vllm(monkeypatch):
    """A ``vllm`` module whose LLM answers request i with a fixed response and records calls."""
    record = SimpleNamespace(engines=[])

    class SamplingParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class LoRARequest:
        def __init__(self, lora_name, lora_int_id, lora_path):
            self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path

    class LLM:
        def __init__(self, **kwargs):
            self.kwargs = kwargs
            self.generate_calls = []
            self.sleep_calls = []
            record.engines.append(self)

        def generate(self, prompts, sampling_params=None, *, use_tqdm=True, lora_request=None):
            self.generate_calls.append((prompts, sampling_params, lora_request))
            outputs = []
            for i, prompt in enumerate(prompts):
                first = prompt["prompt_token_ids"][0]
                if i % 2 == 0:  # stopped by itself: vLLM keeps EOS in the ids, not in the text
                    out = completion([first, ord("z"), EOS], chr(first) + "z", "stop")
                else:
                    cap = sampling_params[i].kwargs["max_tokens"]
                    out = completion([ord("y")] * cap, "y" * cap, "length")
                outputs.append(SimpleNamespace(outputs=[out]))
            return outputs

        def sleep(self, level=1):
            self.sleep_calls.append(("sleep", level))

        def wake_up(self, tags=None):
            self.sleep_calls.append(("wake_up", tags))

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams = LLM, SamplingParams
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    vllm.lora, lora.request = lora, request
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request)
    return record


def test_vllm_sampler_builds_one_seeded_request_per_prompt(fake_vllm):
    sampler = VLLMSampler("/models/base", max_lora_rank=8, tokenizer=FakeTokenizer())
    engine = fake_vllm.engines[0]
    assert engine.kwargs["model"] == "/models/base"
    assert engine.kwargs["enable_lora"] is True and engine.kwargs["max_lora_rank"] == 8
    assert engine.kwargs["max_loras"] == 1 and engine.kwargs["dtype"] == "bfloat16"
    assert "max_model_len" not in engine.kwargs  # left to vLLM when not given
    assert "enable_sleep_mode" not in engine.kwargs

    prompts = ["ab", "ab", "cd"]
    settings = SamplingSettings(temperature=0.7, top_p=0.9, max_new_tokens=4)
    samples = sampler.sample(prompts, settings, seed=5)

    (requests, params, lora), = engine.generate_calls  # fmt: skip
    assert lora is None
    assert requests == [{"prompt_token_ids": [ord(c) for c in p]} for p in prompts]
    assert len(params) == len(prompts)
    seeds = [request_seed(5, i) for i in range(3)]
    assert [p.kwargs["seed"] for p in params] == seeds
    assert [p.kwargs for p in params] == [sampling_params_kwargs(settings, s) for s in seeds]

    assert [s.prompt_index for s in samples] == [0, 1, 2]
    assert [s.seed for s in samples] == seeds
    assert samples[0] == Sample(0, [ord("a"), ord("z"), EOS], "az", "stop", seeds[0])
    assert samples[1] == Sample(1, [ord("y")] * 4, "yyyy", "length", seeds[1])
    assert samples[2].token_ids[-1] == EOS and samples[2].text == "cz"


def adapter_folder(folder: Path) -> Path:
    """A minimal readable PEFT adapter folder (the sampler checks its files before vLLM does)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8}')
    save_file({"w": torch.zeros(2)}, str(folder / "adapter_model.safetensors"))
    return folder


def test_a_damaged_adapter_is_named_before_vllm_reads_it(fake_vllm, tmp_path):
    from dashrepro.adapters import AdapterFileError

    sampler = VLLMSampler("base", tokenizer=FakeTokenizer(), max_model_len=512)
    weights = adapter_folder(tmp_path / "step20") / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-3])
    with pytest.raises(AdapterFileError, match=f"{weights}: damaged or truncated"):
        sampler.sample(
            ["a"], SamplingSettings(max_new_tokens=2), seed=0, adapter_dir=weights.parent
        )
    assert fake_vllm.engines[0].generate_calls == []


def test_lora_ids_are_stable_per_folder_and_change_with_the_version(fake_vllm, tmp_path):
    sampler = VLLMSampler("base", tokenizer=FakeTokenizer(), max_model_len=512)
    engine = fake_vllm.engines[0]
    assert engine.kwargs["max_model_len"] == 512
    step20, step40 = adapter_folder(tmp_path / "step20"), adapter_folder(tmp_path / "step40")
    settings = SamplingSettings(max_new_tokens=2)

    def lora_of_call(**kwargs):
        sampler.sample(["a"], settings, seed=0, **kwargs)
        return engine.generate_calls[-1][2]

    first = lora_of_call(adapter_dir=step20)
    assert first.lora_path == str(step20.resolve()) and first.lora_int_id >= 1
    # Same folder (however spelled): same id, so vLLM reuses the loaded adapter.
    assert lora_of_call(adapter_dir=str(step20)).lora_int_id == first.lora_int_id
    assert (
        lora_of_call(adapter_dir=tmp_path / "x" / ".." / "step20").lora_int_id == first.lora_int_id
    )
    # Another checkpoint folder: another id, served by the same engine.
    other = lora_of_call(adapter_dir=step40)
    assert other.lora_int_id != first.lora_int_id and len(fake_vllm.engines) == 1
    # The trainer rewrote step20's folder: a new id makes vLLM load the new weights.
    synced = sampler.sync_adapter(step20)
    assert synced.lora_int_id not in {first.lora_int_id, other.lora_int_id}
    assert lora_of_call(adapter_dir=step20).lora_int_id == synced.lora_int_id
    assert sampler.sync_adapter(step20).lora_int_id != synced.lora_int_id
    # Explicit versions: a new version is a new id, a repeated version the same id.
    v7 = lora_of_call(adapter_dir=step40, adapter_version=7)
    assert v7.lora_int_id != other.lora_int_id
    assert lora_of_call(adapter_dir=step40, adapter_version=7).lora_int_id == v7.lora_int_id
    assert lora_of_call(adapter_dir=step40, adapter_version=0).lora_int_id == other.lora_int_id
    names = {c[2].lora_name for c in engine.generate_calls}
    ids = {c[2].lora_int_id for c in engine.generate_calls}
    assert len(names) == len(ids)  # one name per id


def test_sleep_and_wake_up_pass_through(fake_vllm):
    sampler = VLLMSampler("base", tokenizer=FakeTokenizer(), enable_sleep_mode=True)
    engine = fake_vllm.engines[0]
    assert engine.kwargs["enable_sleep_mode"] is True
    sampler.sleep()
    sampler.wake_up(tags=["weights"])
    sampler.wake_up()
    assert engine.sleep_calls == [("sleep", 1), ("wake_up", ["weights"]), ("wake_up", None)]
    plain = VLLMSampler("base", tokenizer=FakeTokenizer())
    with pytest.raises(RuntimeError, match="enable_sleep_mode"):
        plain.sleep()


def test_no_lora_engine_refuses_adapters(fake_vllm):
    sampler = VLLMSampler("base", tokenizer=FakeTokenizer(), enable_lora=False)
    assert "enable_lora" not in fake_vllm.engines[0].kwargs
    with pytest.raises(ValueError, match="enable_lora"):
        sampler.sample(["a"], SamplingSettings(), seed=0, adapter_dir="somewhere")


def test_make_sampler_picks_the_backend(fake_vllm):
    assert isinstance(make_sampler("vllm", base_model="b", tokenizer=FakeTokenizer()), VLLMSampler)
    assert isinstance(make_sampler("hf", base_model="b", tokenizer=FakeTokenizer()), HFSampler)
    with pytest.raises(ValueError, match=r"'hf', 'hf_compiled', 'hf_continuous', 'vllm'"):
        make_sampler("sglang", base_model="b")


# --- the real engine (GPU) ---------------------------------------------------------------------


def _cuda_and_vllm() -> bool:
    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_and_vllm(), reason="needs a CUDA device and vllm")
def test_vllm_sampler_on_a_tiny_qwen3(tmp_path):
    # head_dim 64 and rank 8: sizes every vLLM attention backend and LoRA kernel accepts.
    arch = {**ARCH, "hidden_size": 128, "intermediate_size": 256}
    folder, tokenizer, prompts = save_tiny_model(tmp_path / "base", arch)
    prompts = [p for p in prompts for _ in range(4)]  # 4 samples per problem
    sampler = VLLMSampler(
        folder,
        max_lora_rank=8,
        gpu_memory_utilization=0.3,
        max_model_len=256,
        enforce_eager=True,
        # Without prefix caching a repeated call recomputes every prompt the same way, so the
        # per-request seeds must reproduce it token for token.
        enable_prefix_caching=False,
    )
    settings = SamplingSettings(temperature=1.0, max_new_tokens=16)
    eos = tokenizer.eos_token_id

    first = sampler.sample(prompts, settings, seed=3)
    assert [s.token_ids for s in sampler.sample(prompts, settings, seed=3)] == [
        s.token_ids for s in first
    ]
    assert [s.seed for s in first] == [request_seed(3, i) for i in range(len(prompts))]
    assert len({tuple(s.token_ids) for s in first}) > 1  # per-request seeds: samples differ
    for sample in first:
        assert sample.finish_reason in {"stop", "length"}
        if sample.finish_reason == "stop":
            assert sample.token_ids[-1] == eos and eos not in sample.token_ids[:-1]
        else:
            assert len(sample.token_ids) == settings.max_new_tokens
        body = sample.token_ids[:-1] if sample.finish_reason == "stop" else sample.token_ids
        assert sample.text == tokenizer.decode(body, skip_special_tokens=False)

    adapter = tmp_path / "adapter"
    save_random_lora(folder, adapter, rank=8, seed=1)
    tuned = sampler.sample(prompts, settings, seed=3, adapter_dir=adapter)
    assert [s.token_ids for s in tuned] != [s.token_ids for s in first]
    save_random_lora(folder, adapter, rank=8, seed=2)  # the trainer's next step, same folder
    sampler.sync_adapter(adapter)
    retuned = sampler.sample(prompts, settings, seed=3, adapter_dir=adapter)
    assert [s.token_ids for s in retuned] != [s.token_ids for s in tuned]
