"""The embedded default's base model: a tiny ``transformers`` Qwen3 network.

Same architecture class as Qwen/Qwen3-* (``Qwen3ForCausalLM``: RoPE, GQA, q/k norms, SwiGLU MLP
with ``gate_proj``/``up_proj``/``down_proj``), so the LoRA target modules, the peft adapter folders
and every code path the real scales use are exercised unchanged; only the sizes differ.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM


def head_dim(architecture: Mapping) -> int:
    """The per-head width: ``head_dim`` if set (Qwen3 decouples it from the hidden size, as
    Qwen3-0.6B's 1,024 / 16 heads of 128 do), else hidden size / heads."""
    return int(
        architecture.get("head_dim")
        or architecture["hidden_size"] // architecture["num_attention_heads"]
    )


def build_tiny_qwen3(
    architecture: Mapping, vocab_size: int, pad_token_id: int, eos_token_id: int, seed: int
) -> Qwen3ForCausalLM:
    """A randomly initialised Qwen3 model with the sizes in ``architecture`` (config keys)."""
    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=architecture["hidden_size"],
        intermediate_size=architecture["intermediate_size"],
        num_hidden_layers=architecture["num_hidden_layers"],
        num_attention_heads=architecture["num_attention_heads"],
        num_key_value_heads=architecture["num_key_value_heads"],
        head_dim=head_dim(architecture),
        max_position_embeddings=architecture["max_position_embeddings"],
        tie_word_embeddings=True,
        pad_token_id=pad_token_id,
        eos_token_id=eos_token_id,
        bos_token_id=None,
        rope_theta=10000.0,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = pad_token_id
    model.generation_config.eos_token_id = eos_token_id
    return model


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
