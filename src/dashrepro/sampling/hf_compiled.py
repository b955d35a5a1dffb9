"""The ``hf_compiled`` backend: HF ``generate`` on a plain policy copy, static cache, compiled.

Eager HF generation launches thousands of small kernels a decode step and leaves a GPU idle
most of the time (benchmarks/measured/gpu_proof_h200_2026-11-27). Here the model is a
``PolicyCopy`` (no PEFT wrappers; the adapter's delta written into the weights in place), its
key/value cache a ``StaticCache`` per (rows, positions) shape, reset and reused call after call,
and the decode step compiled by transformers' generation (``CompileConfig``: CUDA graphs on a
GPU, inductor on a CPU). In place means no recompilation after an adapter update:
``compile_counts`` says how many graphs were compiled and recorded. The samples follow the
same distribution as the eager backend's (tests/sampling/test_hf_compiled.py), not the same
draws. Evaluation's batch is planned from a key/value budget (``sampling.memory_plan``).

    sampler = CompiledSampler("results/tiny/base_model/tiny", device="cpu", dtype="float32")
    samples = sampler.sample(prompts, SamplingSettings(max_new_tokens=32), seed=0,
                             adapter_dir="…/checkpoint-4")
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from dashrepro.sampling.base import RolloutOptions, Sample, SamplingSettings, stamped
from dashrepro.sampling.hf import sample_responses
from dashrepro.sampling.memory_plan import CacheShape, planned_batch
from dashrepro.sampling.policy_copy import PolicyCopy, live_deltas
from dashrepro.sampling.stop_check import RESET_BEFORE_REUSE

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
#: Cache lengths are rounded up to a multiple of this, so prompts of near widths share a graph.
POSITION_BUCKET = 256


def compile_decoding(model) -> None:
    """Have ``generate`` compile ``model``'s decode step: CUDA graphs (``reduce-overhead``) on
    a GPU, inductor's default mode elsewhere (transformers compiles on GPUs only unless told)."""
    from transformers import CompileConfig

    cuda = model.device.type == "cuda"
    config = CompileConfig(fullgraph=False, dynamic=False)
    config.mode = "reduce-overhead" if cuda else "default"
    config._compile_all_devices = True  # transformers' switch for compiling on a CPU
    model.generation_config.compile_config = config


def bucketed(positions: int) -> int:
    """The cache length of a call needing ``positions``: rounded up to ``POSITION_BUCKET``."""
    return -(-positions // POSITION_BUCKET) * POSITION_BUCKET


class StaticCaches:
    """A ``StaticCache`` per (rows, positions) shape, reset and reused: its tensors keep their
    addresses, so the compiled step is neither recompiled nor re-recorded. At most ``keep`` are
    held (the oldest dropped first): evaluation keeps one, whose size the budget plans. Each is
    marked ``RESET_BEFORE_REUSE``: on a GPU the stop check is deferred (``sampling.stop_check``).

    Not transformers' ``cache_implementation="static"``: in transformers 5.23 that makes a new
    ``StaticCache`` at every ``generate`` call (``_prepare_static_cache``), keeping only the
    longest length seen, so each call's cache has new addresses (CUDA graphs re-recorded or fed
    by copies) and a second one is allocated beside the first until it is freed."""

    def __init__(self, config, keep: int) -> None:
        self.config = config
        self.keep = keep
        self.caches: dict[tuple[int, int], Any] = {}

    def __call__(self, rows: int, positions: int):
        from transformers import StaticCache

        key = (rows, bucketed(positions))
        cache = self.caches.pop(key, None)
        if cache is None:
            while len(self.caches) >= self.keep:
                self.caches.pop(next(iter(self.caches)))
            cache = StaticCache(config=self.config, max_cache_len=key[1])
            setattr(cache, RESET_BEFORE_REUSE, True)  # reset below before each reuse
        else:
            cache.reset()
        self.caches[key] = cache  # the newest last
        return cache


def compile_counts() -> dict[str, int]:
    """Graphs dynamo compiled in this process, and CUDA graphs recorded (0 without CUDA)."""
    from torch._dynamo.utils import counters

    recorded = 0
    if torch.cuda.is_available():
        from torch._inductor import cudagraph_trees

        manager = cudagraph_trees.get_manager(torch.cuda.current_device(), False)
        if manager is not None:
            # The manager numbers each recorded graph from an itertools.count and keeps no
            # total; its repr is the next number, without consuming it.
            recorded = int(re.search(r"\d+", repr(manager.graph_counter)).group())
    return {"compiled_graphs": int(counters["stats"]["unique_graphs"]), "cuda_graphs": recorded}


class CompiledSampler:
    """Evaluation's ``hf_compiled`` sampler: one policy copy, each checkpoint's adapter written
    into it once (``adapter_dir``), batches planned from ``kv_cache_budget_gib`` when stated
    (else ``settings.batch_size``); ``response_cap`` is checked against the budget at once."""

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
        if tokenizer is None:
            from dashrepro.io import load_tokenizer

            tokenizer = load_tokenizer(str(base_model))
        self.tokenizer = tokenizer
        self.dtype_bytes = torch.empty((), dtype=DTYPES[dtype]).element_size()
        config = json.loads((Path(base_model) / "config.json").read_text(encoding="utf-8"))
        self.shape = CacheShape.of_config(config)
        self.budget_gib = kv_cache_budget_gib
        if kv_cache_budget_gib is not None and response_cap is not None:
            self.batch_for(1 + response_cap, 1)  # a clear error before the model is loaded
        self.copy = PolicyCopy.load(base_model, DTYPES[dtype], device)
        compile_decoding(self.copy.model)
        self.caches = StaticCaches(self.copy.model.config, keep=1)

    def batch_for(self, row_tokens: int, requests: int) -> int | None:
        """The planned rows of a call needing ``row_tokens`` positions a row, at the cache length
        it gets (``bucketed``); None: no budget stated."""
        if self.budget_gib is None:
            return None
        return planned_batch(
            budget_gib=self.budget_gib,
            shape=self.shape,
            dtype_bytes=self.dtype_bytes,
            row_tokens=bucketed(row_tokens),
            requests=requests,
        )

    def sample(
        self,
        prompts: Sequence[str],
        settings: SamplingSettings,
        seed: int,
        adapter_dir: str | Path | None = None,
        adapter_version: int | None = None,
    ) -> list[Sample]:
        self.copy.use_folder(adapter_dir, adapter_version)
        widest = max(len(self.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts)
        rows = self.batch_for(widest + settings.max_new_tokens, len(prompts))
        if rows is not None:
            settings = dataclasses.replace(settings, batch_size=rows)
        samples = sample_responses(self.copy.model, self.tokenizer, prompts, settings, seed,
                                   make_cache=self.caches, defer_stop_check=True)  # fmt: skip
        return stamped(samples, seed)


class CompiledRolloutSampler:
    """The trainer's ``hf_compiled`` rollouts: a copy of the policy in the training precision on
    its device, refreshed from the live adapter before each sampling. Always, not only when a
    tensor's version counter moved: DeepSpeed writes its updated weights through ``.data``,
    which bumps no counter, and a refresh is one ``B @ A`` per adapted projection."""

    def __init__(self, tokenizer, policy, options: RolloutOptions) -> None:
        self.tokenizer = tokenizer
        dtype = torch.bfloat16 if options.precision == "bf16" else torch.float32
        self.copy = PolicyCopy.load(options.base_model, dtype, str(policy.device))
        compile_decoding(self.copy.model)
        # A few prompt widths' caches (a micro-batch's are small), so that none is remade.
        self.caches = StaticCaches(self.copy.model.config, keep=4)

    def sample(self, policy, prompts, settings: SamplingSettings, seed: int) -> list[Sample]:
        self.copy.refresh(live_deltas(policy))
        return self.sampled(prompts, settings, seed)

    def sample_base(self, policy, prompts, settings: SamplingSettings, seed: int) -> list[Sample]:
        self.copy.refresh([])
        return self.sampled(prompts, settings, seed)

    def sampled(self, prompts, settings: SamplingSettings, seed: int, defer: bool = True):
        """The copy's samples as it stands (``defer``: the stop check deferred on a GPU)."""
        return sample_responses(self.copy.model, self.tokenizer, prompts, settings, seed,
                                make_cache=self.caches, defer_stop_check=defer)  # fmt: skip
