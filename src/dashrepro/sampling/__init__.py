"""Sampling responses: two roles, each one name in every backend (``sampling.backends``).

Evaluation's ``Sampler`` (``make_sampler``: a checkpoint's responses from its folder) and the
trainer's ``RolloutSampler`` (``make_rollout_sampler(name, tokenizer, policy, options)``: the
live policy's rollouts, built from one ``RolloutOptions``).

from dashrepro.sampling import SamplingSettings, make_sampler
"""

from __future__ import annotations

import importlib
from typing import Any

from dashrepro.sampling.backends import BACKENDS, backend
from dashrepro.sampling.base import (
    RolloutOptions,
    RolloutSampler,
    Sample,
    Sampler,
    SamplingSettings,
    adapter_key,
    derive_seed,
    request_seed,
)

__all__ = [
    "BACKENDS",
    "RolloutOptions",
    "RolloutSampler",
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


def make_rollout_sampler(name: str, tokenizer, policy, options: RolloutOptions) -> RolloutSampler:
    """The trainer's rollout sampler of backend ``name``, one constructor for every backend:
    the tokenizer, the live PEFT policy and the run's ``RolloutOptions``."""
    if not isinstance(options, RolloutOptions):
        raise TypeError(f"rollout options must be a RolloutOptions, not {type(options).__name__}")
    return _class(name, "rollout_sampler")(tokenizer, policy, options)
