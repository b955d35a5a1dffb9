"""What every sampling backend shares: settings, the sample record, the interface, the seeds.

Evaluation (``dashrepro.evaluation``) and the trainer's rollouts (``dashrepro.training``) sample
through one interface, ``Sampler.sample(prompts, settings, seed, adapter_dir=...)`` (the
trainer's: ``RolloutSampler``), with the backends of ``sampling.backends`` behind it: Hugging Face
``generate`` eager (``sampling.hf``) or compiled on a plain copy (``sampling.hf_compiled``), and
vLLM (``sampling.vllm``, GPU). ``make_sampler(backend, base_model=...)`` picks one.

Seeds: every seed a backend or the trainer derives comes from ``derive_seed(*parts)``.

    from dashrepro.sampling import SamplingSettings, make_sampler
    sampler = make_sampler("hf", base_model="results/tiny/base_model/tiny")
    samples = sampler.sample(["<prompt>"] * 4, SamplingSettings(max_new_tokens=32), seed=0)
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


def derive_seed(*parts: Any) -> int:
    """A 31-bit non-negative seed fixed by its parts (e.g. run seed, step, micro-batch, purpose).

    A hash rather than a sum, so that neighbouring seeds do not share derived ones; 31 bits and
    non-negative keep it valid for every RNG it reaches (vLLM reads ``seed=-1`` as unseeded).
    """
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def request_seed(base_seed: int, index: int) -> int:
    """The seed of request ``index`` of a call seeded ``base_seed`` (vLLM: one per request)."""
    return derive_seed(base_seed, index)


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


class Sampler(Protocol):
    """What rollout and evaluation code needs from a backend."""

    tokenizer: Any

    def sample(
        self,
        prompts: Sequence[str],
        settings: SamplingSettings,
        seed: int,
        adapter_dir: str | Path | None = None,
        adapter_version: int | None = None,
    ) -> list[Sample]: ...


@dataclass(frozen=True)
class RolloutOptions:
    """What a backend's rollout sampler is built from: the run's typed settings as one value
    (``training.rollouts.RolloutPhase`` makes it), each backend reading the fields it needs. A
    misspelt field is an error here, not an option some backend silently ignores."""

    base_model: str  # the base model's folder
    adapter_dir: Path  # where a backend with its own engine saves the live adapter (vllm)
    rank: int = 0  # the process's rank (one adapter folder each)
    lora_rank: int = 8  # the adapter's r (vLLM sizes its LoRA slots from it)
    precision: str = "fp32"  # the training precision: a policy copy's dtype
    max_model_len: int | None = None  # prompt + response positions at most (vLLM's engine)
    engine_options: Mapping[str, Any] = field(default_factory=dict)  # train.vllm


class RolloutSampler(Protocol):
    """The rollout role: what the trainer's rollouts need from a backend, built by
    ``make_rollout_sampler(name, tokenizer, policy, options)``: samples of the live PEFT policy
    as it is now (a backend that samples its own copy syncs the adapter into it first) and of
    its base model, adapter off (the privileged teacher's analyses)."""

    tokenizer: Any

    def sample(
        self, policy, prompts: Sequence[str], settings: SamplingSettings, seed: int
    ) -> list[Sample]: ...

    def sample_base(
        self, policy, prompts: Sequence[str], settings: SamplingSettings, seed: int
    ) -> list[Sample]: ...


def stamped(samples: list[Sample], seed: int) -> list[Sample]:
    """``samples`` with the call's seed on each: HF generation draws from one generator per
    call (vLLM records one seed per request instead)."""
    for sample in samples:
        sample.seed = seed
    return samples


def adapter_key(adapter_dir: str | Path) -> str:
    """One adapter, one key, however the caller spells its folder."""
    return str(Path(adapter_dir).expanduser().resolve())
