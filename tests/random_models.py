"""Random-weight Qwen3 models the sampler tests run on (HF in .venv, vLLM in .venv-vllm).

The models are built with ``build_tiny_qwen3`` with an untied output head: a random model with
tied embeddings mostly repeats its input token under greedy decoding, which would compare
little; an untied head (weights N(0, 0.1^2), so logits have a standard deviation near 1) gives
varied tokens and a broad next-token distribution (where top-k and top-p cut something), and its
EOS row scaled up makes some responses stop by themselves and others run to the length cap.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dashrepro.embedded.tiny_model import build_tiny_qwen3

#: workflow_config.yaml's scales.tiny.architecture (head_dim 32: vLLM's CPU attention has no 24).
TINY_ARCH = {"hidden_size": 96, "intermediate_size": 288, "num_hidden_layers": 3,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
             "max_position_embeddings": 512}  # fmt: skip
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def save_model(
    folder: Path,
    tokenizer,
    architecture: dict,
    eos_scale: float,
    vocab_size: int | None = None,
    seed: int = 0,
) -> Path:
    """A random Qwen3 with an untied head (see the module docstring) saved with its tokenizer;
    ``vocab_size`` rows (default: one per token)."""
    model = build_tiny_qwen3(
        architecture,
        vocab_size or len(tokenizer),
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        seed,
    )
    model.config.tie_word_embeddings = False
    generator = torch.Generator().manual_seed(seed + 1)
    head = torch.randn(model.lm_head.weight.shape, generator=generator) * 0.1
    head[tokenizer.eos_token_id] *= eos_scale
    model.lm_head.weight = torch.nn.Parameter(head)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_random_lora(base_dir: Path, out_dir: Path, rank: int, seed: int) -> Path:
    """A peft adapter folder with random non-zero A and B, as the trainer saves one."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=LORA_TARGETS,
                        init_lora_weights=False, task_type="CAUSAL_LM")  # fmt: skip
    get_peft_model(base, config).save_pretrained(str(out_dir))
    return out_dir


def trainable_base(folder: Path, protocol: dict) -> tuple[Path, Path, object]:
    """A tiny base model the trainer can run on: ``conftest.save_tiny_base``'s tokenizer and
    training parquet (the tokenizer knows the teacher protocol's words), with the untied-head
    model of ``save_model`` in place of the tied one. Returns (folder, parquet, tokenizer)."""
    from conftest import save_tiny_base

    _, data, tokenizer = save_tiny_base(folder, TINY_ARCH, protocol)
    save_model(folder, tokenizer, TINY_ARCH, eos_scale=3.0)
    return folder, data, tokenizer
