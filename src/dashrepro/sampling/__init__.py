"""Sampling responses: one interface, its backends registered in ``sampling.backends``.

from dashrepro.sampling import SamplingSettings, make_sampler
"""

from __future__ import annotations

import importlib
from typing import Any

from dashrepro.sampling.backends import BACKENDS, backend
from dashrepro.sampling.base import (
    PolicySampler,
    Sample,
    Sampler,
    SamplingSettings,
    adapter_key,
    derive_seed,
    request_seed,
)

__all__ = [
    "BACKENDS",
    "PolicySampler",
    "Sample",
    "Sampler",
    "SamplingSettings",
    "adapter_key",
    "derive_seed",
    "make_rollout_sampler",
    "make_sampler",
    "request_seed",
]


def _class(name: str, attribute: str):
    spec = backend(name)
    return getattr(importlib.import_module(spec.module), getattr(spec, attribute))


def make_sampler(name: str, **kwargs: Any) -> Sampler:
    """The evaluation sampler of backend ``name``, built with ``kwargs`` (``base_model=...``).

    The backend's module is imported here, so importing this package pulls in neither torch
    nor vLLM.
    """
    return _class(name, "sampler")(**kwargs)


def make_rollout_sampler(name: str, tokenizer, **kwargs: Any) -> PolicySampler:
    """The trainer's rollout sampler of backend ``name``; each takes the keyword arguments it
    needs (``base_model``, ``policy``, ``precision``, ``adapter_dir``, ``rank``, ...)."""
    return _class(name, "rollout_sampler")(tokenizer, **kwargs)
