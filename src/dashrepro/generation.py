"""Sampling responses with Hugging Face ``generate`` (the CPU backend).

Prompts are left-padded for generation (a decoder-only model must see each prompt end at the
same position); training batches elsewhere use right padding, as the protocol says. A response
ends at the tokenizer's EOS (``<|im_end|>``, Qwen3's end of turn) or at ``max_new_tokens``, in
which case its ``finish_reason`` is ``"length"``.

    samples = sample_responses(model, tokenizer, prompts, SamplingSettings(temperature=1.0), seed=0)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


def derive_seed(*parts: Any) -> int:
    """A 31-bit non-negative seed fixed by its parts (e.g. run seed, step, micro-batch, purpose).

    A hash rather than a sum, so that neighbouring seeds do not share derived ones; 31 bits and
    non-negative keep it valid for every RNG it reaches (vLLM reads ``seed=-1`` as unseeded).
    """
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    max_new_tokens: int = 128
    batch_size: int = 256


@dataclass
class Sample:
    prompt_index: int
    token_ids: list[int]  # generated ids, EOS included when the model stopped by itself
    text: str  # decoded response, EOS and padding excluded
    finish_reason: str  # "stop" (EOS) or "length" (hit max_new_tokens)
    seed: int | None = None  # the request's own seed where the backend has one (vLLM)


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    return ids, mask


@torch.no_grad()
def sample_responses(
    model,
    tokenizer,
    prompts: Sequence[str],
    settings: SamplingSettings,
    seed: int,
) -> list[Sample]:
    """One sampled response per prompt (repeat a prompt to get several), in prompt order."""
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    was_training = model.training
    model.eval()
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    samples: list[Sample] = []
    try:
        for start in range(0, len(encoded), settings.batch_size):
            chunk = encoded[start : start + settings.batch_size]
            ids, mask = left_pad(chunk, pad_id)
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=settings.temperature,
                top_p=settings.top_p,
                top_k=settings.top_k if settings.top_k else 0,
                max_new_tokens=settings.max_new_tokens,
                eos_token_id=eos_id,
                pad_token_id=pad_id,
            )
            generated = out[:, ids.shape[1] :].tolist()
            for offset, row in enumerate(generated):
                if eos_id in row:
                    cut = row.index(eos_id) + 1
                    token_ids, finish = row[:cut], "stop"
                else:
                    token_ids, finish = row, "length"
                body = token_ids[:-1] if finish == "stop" else token_ids
                text = tokenizer.decode(body, skip_special_tokens=False)
                samples.append(Sample(start + offset, token_ids, text, finish))
    finally:
        torch.random.set_rng_state(generator_state)
        model.train(was_training)
    return samples


class ModelSampler:
    """An already loaded model behind the sampler interface of ``vllm_backend`` (tests, trainer).

    HF ``generate`` draws from one torch generator per call, so every sample records the call's
    seed (vLLM records one seed per request instead).
    """

    def __init__(self, model, tokenizer) -> None:
        self.model = model
        self.tokenizer = tokenizer

    def sample(
        self,
        prompts: Sequence[str],
        settings: SamplingSettings,
        seed: int,
        adapter_dir=None,
        adapter_version: int | None = None,
    ) -> list[Sample]:
        if adapter_dir is not None:
            raise ValueError("ModelSampler samples its loaded model; it takes no adapter_dir")
        samples = sample_responses(self.model, self.tokenizer, prompts, settings, seed=seed)
        for sample in samples:
            sample.seed = seed
        return samples
