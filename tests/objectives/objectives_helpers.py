"""Shared helpers of the ``tests/objectives`` test files (not a test module itself).

Importable as ``objectives_helpers`` because pytest puts each test file's folder on
``sys.path`` (the default ``prepend`` import mode, as the test folders have no ``__init__``).
"""

from __future__ import annotations

import torch
from hypothesis import settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True)
DIVS = ("forward_kl", "reverse_kl", "jsd")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _mask(lengths: list[int], pad: int = 0) -> torch.Tensor:
    T = max(lengths) + pad
    m = torch.zeros(len(lengths), T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        m[b, :n] = True
    return m


def _logits(B, T, V, seed, scale=3.0):
    g = _gen(seed)
    return torch.randn(B, T, V, generator=g) * scale, torch.randn(B, T, V, generator=g) * scale


lengths_st = st.lists(st.integers(1, 12), min_size=1, max_size=3)


def _pad(x: torch.Tensor, P: int, fill: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, fill.expand(x.shape[0], P, *x.shape[2:]).to(x.dtype)], dim=1)
