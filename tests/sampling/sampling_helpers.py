"""Tiny saved models for the tests in tests/sampling: a Qwen3, its tokenizer, LoRA adapters."""

from __future__ import annotations

from pathlib import Path

import torch

ARCH = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "max_position_embeddings": 256}  # fmt: skip


TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def save_tiny_model(folder: Path, arch: dict) -> tuple[Path, object, list[str]]:
    """A tiny Qwen3 + tokenizer saved as a model folder; returns it, the tokenizer and prompts."""
    from dashrepro.data.prompts import render_student_prompt
    from dashrepro.embedded.synthetic_data import make_dataset
    from dashrepro.embedded.tiny_model import build_tiny_qwen3
    from dashrepro.embedded.tiny_tokenizer import train_tokenizer

    train, _ = make_dataset(20, {"b": {"task": "add2", "n": 2}}, 0)
    tokenizer = train_tokenizer([*train["problem"], *train["reference_solution"]], 400)
    model = build_tiny_qwen3(
        arch, len(tokenizer), tokenizer.pad_token_id, tokenizer.eos_token_id, 0
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    prompts = [render_student_prompt(tokenizer, p) for p in train["problem"][:4]]
    return folder, tokenizer, prompts


def save_random_lora(base_dir: Path, out_dir: Path, rank: int, seed: int) -> None:
    """A peft adapter folder with non-zero B (so it changes the model), as the trainer saves."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(str(base_dir))
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS,
                        init_lora_weights=False, task_type="CAUSAL_LM")  # fmt: skip
    get_peft_model(base, config).save_pretrained(str(out_dir))
