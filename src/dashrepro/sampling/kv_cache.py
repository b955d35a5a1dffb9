"""A key/value cache for Hugging Face ``generate`` that is sized once for the whole generation.

transformers' ``DynamicLayer`` concatenates a layer's whole cache with each new token's keys and
values, so every step copies everything cached so far: a fifth of the embedded default's CPU
generation time. ``PreallocatedLayer`` writes each step into buffers of the prompt's width plus
``max_new_tokens`` positions and hands attention the filled part, as views of them: the same
values in the same shape, so the samples are the same, bit for bit
(tests/sampling/test_kv_cache.py).
"""

from __future__ import annotations

from functools import partial

import torch
from transformers.cache_utils import Cache, DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values are the first positions of buffers of
    ``capacity`` positions. It copies them into new buffers only when they would overflow, or
    when a cache operation (a batch selection, say) replaced them with tensors of their own."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity
        self.key_buffer: torch.Tensor | None = None
        self.value_buffer: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        held = self.get_seq_length()
        end = held + key_states.shape[-2]
        if (
            held == 0
            or self.keys.data_ptr() != self.key_buffer.data_ptr()
            or end > self.key_buffer.shape[-2]
        ):
            self._allocate(key_states, value_states, max(end, self.capacity), held)
        self.key_buffer[..., held:end, :] = key_states
        self.value_buffer[..., held:end, :] = value_states
        self.keys = self.key_buffer[..., :end, :]
        self.values = self.value_buffer[..., :end, :]
        return self.keys, self.values

    def _allocate(self, keys: torch.Tensor, values: torch.Tensor, size: int, held: int) -> None:
        """New buffers of ``size`` positions shaped like ``keys`` and ``values``, holding the
        ``held`` positions cached so far."""
        key_buffer = keys.new_empty((*keys.shape[:-2], size, keys.shape[-1]))
        value_buffer = values.new_empty((*values.shape[:-2], size, values.shape[-1]))
        if held:
            key_buffer[..., :held, :] = self.keys
            value_buffer[..., :held, :] = self.values
        self.key_buffer, self.value_buffer = key_buffer, value_buffer


def preallocated_cache(capacity: int) -> Cache:
    """A cache for one ``generate`` call of sequences up to ``capacity`` tokens (prompt width
    plus ``max_new_tokens``); its layers are made as the model first updates them."""
    return Cache(layer_class_to_replicate=partial(PreallocatedLayer, capacity))
