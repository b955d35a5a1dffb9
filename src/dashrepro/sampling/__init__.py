"""Sampling responses: one interface, two backends (see ``sampling.base``).

from dashrepro.sampling import SamplingSettings, make_sampler
"""

from __future__ import annotations

from typing import Any

from dashrepro.sampling.base import (
    Sample,
    Sampler,
    SamplingSettings,
    adapter_key,
    derive_seed,
    request_seed,
)

BACKENDS = ("hf", "vllm")

__all__ = [
    "BACKENDS",
    "Sample",
    "Sampler",
    "SamplingSettings",
    "adapter_key",
    "derive_seed",
    "make_sampler",
    "request_seed",
]


def make_sampler(backend: str, **kwargs: Any) -> Sampler:
    """The sampler of ``backend`` ("vllm" or "hf"), built with ``kwargs`` (``base_model=...``).

    The backend modules are imported here, so importing this package pulls in neither torch
    nor vLLM.
    """
    if backend == "vllm":
        from dashrepro.sampling.vllm import VLLMSampler

        return VLLMSampler(**kwargs)
    if backend == "hf":
        from dashrepro.sampling.hf import HFSampler

        return HFSampler(**kwargs)
    raise ValueError(f"unknown sampling backend {backend!r}; expected one of {BACKENDS}")
