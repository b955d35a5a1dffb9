"""Sampling responses with Hugging Face ``generate`` (the CPU backend).

Prompts are left-padded for generation (a decoder-only model must see each prompt end at the
same position); training batches elsewhere use right padding, as the protocol says. A response
ends at the tokenizer's EOS (``<|im_end|>``, Qwen3's end of turn) or at ``max_new_tokens``, in
which case its ``finish_reason`` is ``"length"``.

    samples = sample_responses(model, tokenizer, prompts, SamplingSettings(temperature=1.0), seed=0)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from dashrepro.sampling.base import (
    RolloutOptions,
    Sample,
    SamplingSettings,
    adapter_key,
    stamped,
)
from dashrepro.sampling.kv_cache import preallocated_cache
from dashrepro.sampling.stop_check import deferred_stop_check


def left_pad(sequences: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    return ids, mask


# inference_mode, not no_grad: the same values with less bookkeeping per operation (a tenth off
# the trainer's rollouts of 8). Only token ids leave the call, so no inference tensor reaches
# a later backward.
@torch.inference_mode()
def sample_responses(
    model,
    tokenizer,
    prompts: Sequence[str],
    settings: SamplingSettings,
    seed: int,
    make_cache: Callable[[int, int], object] | None = None,
    defer_stop_check: bool = False,
) -> list[Sample]:
    """One sampled response per prompt (repeat a prompt to get several), in prompt order.

    ``make_cache(rows, positions)``: the key/value cache of one ``generate`` call (None: a
    preallocated one, made for the call). ``defer_stop_check``: on a GPU, no host wait for the
    stop flag at every step (``sampling.stop_check``)."""
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
            with deferred_stop_check() if defer_stop_check else nullcontext():
                out = model.generate(
                    # On the model's device: a policy on a GPU (the trainer's, or load_policy's)
                    # takes no CPU tensors.
                    input_ids=ids.to(model.device),
                    attention_mask=mask.to(model.device),
                    do_sample=True,
                    temperature=settings.temperature,
                    top_p=settings.top_p,
                    top_k=settings.top_k if settings.top_k else 0,
                    max_new_tokens=settings.max_new_tokens,
                    eos_token_id=eos_id,
                    pad_token_id=pad_id,
                    past_key_values=(make_cache or _call_cache)(
                        len(chunk), ids.shape[1] + settings.max_new_tokens
                    ),
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


def _call_cache(rows: int, positions: int):
    # Sized once for the call: the same samples, without copying the whole cache at every step
    # (sampling.kv_cache).
    return preallocated_cache(positions)


def load_policy(base_model_dir: str | Path, adapter_dir: str | Path | None, device: str = "cpu"):
    """The base model (fp32, eval mode, on ``device``), with the LoRA adapter in
    ``adapter_dir`` if given."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base_model_dir), dtype=torch.float32)
    if adapter_dir is not None:
        from dashrepro.adapters import load_adapter

        model = load_adapter(model, adapter_dir)
    model.to(device).eval()
    return model


class HFSampler:
    """``sample_responses`` behind the ``Sampler`` interface (the ``hf`` backend).

    Policies (base model, or base + adapter) are loaded with ``load_policy`` and kept
    in a small LRU cache keyed by (adapter folder, version); ``sync_adapter`` drops a folder's
    cached policies after the adapter in it was rewritten. HF generation has one seed per call,
    so every Sample records the call's seed.
    """

    def __init__(
        self,
        base_model: str | Path,
        *,
        tokenizer=None,
        max_cached_policies: int = 2,
        device: str = "cpu",
    ) -> None:
        self.base_model = str(base_model)
        self.device = device
        if tokenizer is None:
            from dashrepro.io import load_tokenizer

            tokenizer = load_tokenizer(self.base_model)
        self.tokenizer = tokenizer
        self.max_cached_policies = max(1, max_cached_policies)
        self._policies: OrderedDict[tuple[str | None, int | None], Any] = OrderedDict()

    def policy(self, adapter_dir: str | Path | None = None, adapter_version: int | None = None):
        key = (None if adapter_dir is None else adapter_key(adapter_dir), adapter_version)
        if key in self._policies:
            self._policies.move_to_end(key)
            return self._policies[key]
        model = load_policy(self.base_model, key[0], self.device)
        self._policies[key] = model
        while len(self._policies) > self.max_cached_policies:
            self._policies.popitem(last=False)
        return model

    def sync_adapter(self, adapter_dir: str | Path) -> None:
        path = adapter_key(adapter_dir)
        for key in [k for k in self._policies if k[0] == path]:
            del self._policies[key]

    def sample(
        self,
        prompts: Sequence[str],
        settings: SamplingSettings,
        seed: int,
        adapter_dir: str | Path | None = None,
        adapter_version: int | None = None,
    ) -> list[Sample]:
        model = self.policy(adapter_dir, adapter_version)
        return stamped(sample_responses(model, self.tokenizer, prompts, settings, seed=seed), seed)


class HFRolloutSampler:
    """The trainer's ``hf`` rollouts: ``sample_responses`` on the live PEFT policy itself (the
    teacher's analyses with its adapter disabled); there is nothing to sync."""

    def __init__(self, tokenizer, policy, options: RolloutOptions) -> None:
        self.tokenizer = tokenizer

    def sample(self, policy, prompts, settings: SamplingSettings, seed: int) -> list[Sample]:
        return sample_responses(policy, self.tokenizer, prompts, settings, seed=seed)

    def sample_base(self, policy, prompts, settings: SamplingSettings, seed: int) -> list[Sample]:
        with policy.disable_adapter():
            return sample_responses(policy, self.tokenizer, prompts, settings, seed=seed)
