"""How many responses one ``generate`` call may hold: the batch planned from a key/value budget.

A response's cache holds, per position, a key and a value of every layer's key/value heads:
``2 x layers x kv_heads x head_dim x bytes`` (Qwen3-1.7B in bf16: 112 KiB a position, so a
38,912-token response about 4.2 GiB). The batch is the most rows of (longest prompt + response
cap) positions that fit the stated budget, never more than there are requests: planned from the
config and the model's shape, never from the memory free at run time (HF draws from one
generator per call, so the batch changes the samples). A budget that cannot hold one row is an
error before any work. Torch-free.

    shape = CacheShape.of_config(json.load(open("config.json")))
    planned_batch(budget_gib=100, shape=shape, dtype_bytes=2, row_tokens=39_000, requests=360)  # 24
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class CacheShape:
    """What a cached position costs: its layers and each layer's key/value heads."""

    layers: int
    kv_heads: int
    head_dim: int

    @classmethod
    def of_config(cls, config: Mapping) -> CacheShape:
        """The shape of a model's ``config.json`` (``head_dim``, else hidden size / heads)."""
        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        kv_heads = config.get("num_key_value_heads") or config["num_attention_heads"]
        return cls(config["num_hidden_layers"], kv_heads, head_dim)

    def bytes_per_position(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def planned_batch(
    *, budget_gib: float, shape: CacheShape, dtype_bytes: int, row_tokens: int, requests: int
) -> int:
    """The most rows of ``row_tokens`` cached positions within ``budget_gib``, at most
    ``requests``; ``ValueError`` saying what one row needs when not even one fits."""
    row_bytes = row_tokens * shape.bytes_per_position(dtype_bytes)
    rows = int(budget_gib * GIB // row_bytes)
    if rows < 1:
        raise ValueError(
            f"one response of {row_tokens:,} positions (prompt + response cap) needs "
            f"{row_bytes / GIB:.2f} GiB of key/value cache, more than the budget of "
            f"{budget_gib} GiB (evaluation.kv_cache_budget_gib): raise the budget or lower "
            "max_new_tokens"
        )
    return max(1, min(rows, requests))
