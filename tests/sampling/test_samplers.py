"""The vLLM sampling backend: request seeds, SamplingParams mapping, output conversion, LoRA ids.

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

from dashrepro.sampling import Sample, SamplingSettings, make_sampler, request_seed
from dashrepro.sampling.hf import HFSampler, sample_responses
from dashrepro.sampling.vllm import VLLMSampler, sampling_params_kwargs, to_sample

EOS = 2

# --- pure functions ------------------------------------------------------------------------


def test_request_seed_is_deterministic_distinct_and_31_bit():
    seeds = [request_seed(7, i) for i in range(1000)]
    assert seeds == [request_seed(7, i) for i in range(1000)]
    assert len(set(seeds)) == 1000
    assert all(0 <= s < 2**31 for s in seeds)
    # Neighbouring base seeds do not share request seeds (no base + index collisions).
    assert set(seeds).isdisjoint(request_seed(8, i) for i in range(1000))
    assert request_seed(0, 1) != request_seed(1, 0)


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
    with pytest.raises(ValueError, match=r"'hf', 'vllm'"):
        make_sampler("sglang", base_model="b")


# --- HFSampler on the tiny model --------------------------------------------------------------

ARCH = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "max_position_embeddings": 256}  # fmt: skip
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def save_tiny_model(folder: Path, arch: dict) -> tuple[Path, object, list[str]]:
    """A tiny Qwen3 + tokenizer saved as a model folder; returns it, the tokenizer and prompts."""
    from dashrepro.data.prompts import render_student_prompt
    from dashrepro.embedded.synthetic_data import make_dataset
    from dashrepro.embedded.tiny_model import build_tiny_qwen3
    from dashrepro.embedded.tiny_tokenizer import train_tokenizer

    train, _ = make_dataset(20, {"b": {"task": "add2", "n": 2}}, 0)
    tokenizer = train_tokenizer([*train["problem"], *train["reference_solution"]], 400)
    model = build_tiny_qwen3(
        arch, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, 0
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    prompts = [render_student_prompt(tokenizer, p) for p in train["problem"][:4]]
    return folder, tokenizer, prompts


def save_random_lora(base_dir: Path, out_dir: Path, rank: int, seed: int) -> None:
    """A peft adapter folder with non-zero B (so it changes the model), as the trainer saves."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(str(base_dir))
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS,
                        init_lora_weights=False, task_type="CAUSAL_LM")  # fmt: skip
    get_peft_model(base, config).save_pretrained(str(out_dir))


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
