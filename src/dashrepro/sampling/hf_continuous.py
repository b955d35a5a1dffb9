"""The ``hf_continuous`` backend: transformers' continuous batching on a plain policy copy.

A paged key/value cache (``init_continuous_batching``): requests join each forward pass as blocks
free up and a finished one leaves at once, sampled on the device with transformers' warpers;
SDPA on a CPU, FlashAttention where it imports on a GPU. The model is a ``PolicyCopy`` (each
checkpoint's adapter merged once; the trainer's refreshed before each call). Seeds: one torch
generator per call, seeded before the loop starts, draws every row of a pass, so a request's
tokens depend on its batch companions (no per-request seeds); the same call (requests in order,
settings, seed, cache size, device, threads, versions) gives the same bytes. All requests are
queued before the loop starts and the cache is sized from the config, never from free memory
(docs/sampling.md, tests/sampling/test_hf_continuous.py).

    sampler = ContinuousSampler("results/tiny/base_model/tiny", device="cpu")
    samples = sampler.sample(prompts, SamplingSettings(max_new_tokens=32), seed=0)
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from dashrepro.sampling.base import RolloutOptions, Sample, SamplingSettings
from dashrepro.sampling.memory_plan import GIB, CacheShape, planned_batch
from dashrepro.sampling.policy_copy import PolicyCopy, live_deltas

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
#: Positions a cache block holds per layer (transformers' default ``page_size``).
PAGE_SIZE = 256
#: Requests in one forward pass on a CPU. SDPA's paged attention there builds a mask of (the
#: pass's tokens x the cached positions it reads), which grows with the square of the rows; on a
#: GPU transformers' own bound (the call's requests, at most 1,024) holds.
CPU_REQUESTS_PER_BATCH = 64
#: Seconds the loop may go without finishing a request before the call is declared stuck.
STALL_SECONDS = 600.0


def requests_per_batch(device_type: str, requests: int) -> int:
    """The most requests one forward pass holds (fixed by the device and the call)."""
    return min(requests, CPU_REQUESTS_PER_BATCH if device_type == "cpu" else 1024)


def blocks_for(prompt_lengths: Sequence[int], max_new_tokens: int, rows: int) -> int:
    """Cache blocks for ``rows`` requests at once, each as long as the longest prompt plus the
    cap (whole blocks): the cache of a call without a budget, fixed by the call alone."""
    per_request = -(-(max(prompt_lengths) + max_new_tokens) // PAGE_SIZE)
    return per_request * min(rows, len(prompt_lengths))


def budget_blocks(budget_gib: float, shape: CacheShape, dtype_bytes: int) -> int:
    """Cache blocks within ``budget_gib`` (a block: ``PAGE_SIZE`` positions of every layer)."""
    return int(budget_gib * GIB // (PAGE_SIZE * shape.bytes_per_position(dtype_bytes)))


def generation_config(settings: SamplingSettings, tokenizer):
    """The paper's sampling settings as a ``GenerationConfig``: sampled, tempered, top-p, and
    top-k only where set (0 turns transformers' top-k off)."""
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=True,
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k if settings.top_k else 0,
        max_new_tokens=settings.max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


# no_grad, not inference_mode: the loop's thread writes in place into tensors made here (the
# warm-up makes them), and a tensor made under inference mode refuses that outside it.
@torch.no_grad()
def continuous_responses(
    model,
    tokenizer,
    prompts: Sequence[str],
    settings: SamplingSettings,
    seed: int,
    *,
    num_blocks: int | None = None,
) -> list[Sample]:
    """One sampled response per prompt (repeat a prompt to get several), in prompt order, from
    one continuous-batching loop. ``num_blocks``: the paged cache's size (None: a forward
    pass's requests at once, ``blocks_for``). The caller's torch random state is left as it
    was."""
    from transformers import ContinuousBatchingConfig
    from transformers.generation.continuous_batching.utils import WorkloadHints

    if not prompts:
        return []
    eos_id = tokenizer.eos_token_id
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    lengths = [len(ids) for ids in encoded]
    rows = requests_per_batch(model.device.type, len(encoded))
    if num_blocks is None:
        num_blocks = blocks_for(lengths, settings.max_new_tokens, rows)
    config = ContinuousBatchingConfig(
        page_size=PAGE_SIZE,
        num_blocks=num_blocks,
        max_requests_per_batch=rows,
        seed=seed,
        # The GPU's own kernels where it has them; a CPU keeps SDPA.
        auto_switch_to_flash=model.device.type == "cuda",
    )
    hints = WorkloadHints(max_prompt_length=max(lengths),
                          max_generated_length=settings.max_new_tokens,
                          num_requests=len(encoded))  # fmt: skip
    cuda = [model.device.index or 0] if model.device.type == "cuda" else []
    was_training = model.training
    outputs: dict = {}
    with torch.random.fork_rng(devices=cuda, device_type="cuda"):
        manager = model.init_continuous_batching(
            generation_config=generation_config(settings, tokenizer),
            continuous_batching_config=config,
            workload_hints=hints,
        )
        try:
            # Every request queued before the loop starts: its first forward pass, and so every
            # schedule after it, does not depend on how fast this thread queues them.
            ids = manager.add_requests(inputs=encoded, max_new_tokens=settings.max_new_tokens)
            manager.warmup()  # CUDA graphs captured before the loop (nothing to do on a CPU)
            torch.manual_seed(seed)  # after the warm-up's dummy batches: the draws start here
            manager.start()
            outputs = _collect(manager, ids)
        finally:
            manager.stop(block=True)
            manager.destroy()
            model.train(was_training)
    samples = []
    for index, request_id in enumerate(ids):
        token_ids = list(outputs[request_id].generated_tokens)
        finish = "stop" if token_ids and token_ids[-1] == eos_id else "length"
        body = token_ids[:-1] if finish == "stop" else token_ids
        text = tokenizer.decode(body, skip_special_tokens=False)
        samples.append(Sample(index, token_ids, text, finish, seed))
    return samples


def _collect(manager, ids: list[str]) -> dict:
    """Every request's finished output; a clear error naming the first that failed, or the
    requests left when the loop died or stalled."""
    wanted, outputs = set(ids), {}
    last = time.monotonic()
    while len(outputs) < len(wanted):
        result = manager.get_result(timeout=1)
        if result is not None and result.is_finished() and result.request_id in wanted:
            if result.error is not None:
                raise RuntimeError(
                    f"continuous batching: request {result.request_id} failed: {result.error}"
                )
            outputs[result.request_id] = result
            last = time.monotonic()
        elif result is None and (
            not manager.is_running() or time.monotonic() - last > STALL_SECONDS
        ):
            left = sorted(wanted - set(outputs), key=ids.index)
            raise RuntimeError(
                f"continuous batching stopped with {len(left)} of {len(ids)} requests "
                f"unfinished (first: {left[0]}); see the transformers log above"
            )
    return outputs


def _dtype_bytes(dtype: str) -> int:
    if dtype not in DTYPES:
        raise ValueError(f"evaluation.dtype: {dtype!r} is not one of {tuple(DTYPES)}")
    return torch.empty((), dtype=DTYPES[dtype]).element_size()


class ContinuousSampler:
    """Evaluation's ``hf_continuous`` sampler: one policy copy, each checkpoint's adapter
    written into it once (``adapter_dir``); the paged cache sized from ``kv_cache_budget_gib``
    when stated (else to hold a forward pass's requests at once). A budget that cannot hold one
    response of ``response_cap`` is an error before the model is loaded."""

    def __init__(
        self,
        base_model: str | Path,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        kv_cache_budget_gib: float | None = None,
        response_cap: int | None = None,
        tokenizer=None,
    ) -> None:
        config_file = Path(base_model) / "config.json"
        self.shape = CacheShape.of_config(json.loads(config_file.read_text(encoding="utf-8")))
        self.dtype_bytes = _dtype_bytes(dtype)
        self.num_blocks = None
        if kv_cache_budget_gib is not None:
            if response_cap is not None:
                # One response of the cap (and a block of prompt) must fit: the budget's error.
                planned_batch(budget_gib=kv_cache_budget_gib, shape=self.shape,
                              dtype_bytes=self.dtype_bytes, row_tokens=PAGE_SIZE + response_cap,
                              requests=1)  # fmt: skip
            self.num_blocks = budget_blocks(kv_cache_budget_gib, self.shape, self.dtype_bytes)
        if tokenizer is None:
            from dashrepro.io import load_tokenizer

            tokenizer = load_tokenizer(str(base_model))
        self.tokenizer = tokenizer
        self.copy = PolicyCopy.load(base_model, DTYPES[dtype], device)

    def sample(
        self,
        prompts: Sequence[str],
        settings: SamplingSettings,
        seed: int,
        adapter_dir: str | Path | None = None,
        adapter_version: int | None = None,
    ) -> list[Sample]:
        self.copy.use_folder(adapter_dir, adapter_version)
        return continuous_responses(
            self.copy.model, self.tokenizer, prompts, settings, seed, num_blocks=self.num_blocks
        )


class ContinuousRolloutSampler:
    """The trainer's ``hf_continuous`` rollouts: a copy of the policy in the training precision
    on its device, refreshed from the live adapter before each call (always: see
    ``CompiledRolloutSampler``), every prompt of the call in one loop."""

    def __init__(self, tokenizer, policy, options: RolloutOptions) -> None:
        self.tokenizer = tokenizer
        dtype = torch.bfloat16 if options.precision == "bf16" else torch.float32
        self.copy = PolicyCopy.load(options.base_model, dtype, str(policy.device))

    def sample(self, policy, prompts, settings: SamplingSettings, seed: int) -> list[Sample]:
        self.copy.refresh(live_deltas(policy))
        return continuous_responses(self.copy.model, self.tokenizer, prompts, settings, seed)

    def sample_base(self, policy, prompts, settings: SamplingSettings, seed: int) -> list[Sample]:
        self.copy.refresh([])
        return continuous_responses(self.copy.model, self.tokenizer, prompts, settings, seed)


def cache_gib(num_blocks: int, shape: CacheShape, dtype_bytes: int) -> float:
    """The key/value memory of ``num_blocks`` blocks (what a report states beside a speed)."""
    return num_blocks * PAGE_SIZE * shape.bytes_per_position(dtype_bytes) / GIB
