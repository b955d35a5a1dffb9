"""Helpers shared by the tests in tests/training: the tiny runs' LoRA and one-step budget, and a
toy LoRA run (its saved and resumed states: tests/training/resume/resume_helpers.py)."""

from __future__ import annotations

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen3Config, Qwen3ForCausalLM

LORA = {
    "r": 4,
    "alpha": 8,
    "dropout": 0.0,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


ONE_STEP = {"steps": 1, "checkpoint_every": 1, "lr": 1e-3, "micro_batch_size": 3,
            "grad_accumulation": 1, "max_new_tokens": 8, "temperature": 1.1, "top_p": 0.95,
            "top_k": 20}  # fmt: skip

STEPS = 12
RUN_CONFIG = {"train": {"lr": 2e-3, "steps": STEPS, "micro_batch_size": 2}, "seed": 3}


def make_run(lora_seed: int):
    """Base weights are always the same (in real runs they come from the same pretrained folder,
    and a state does not store them); only the LoRA init depends on ``lora_seed``."""
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    base = Qwen3ForCausalLM(config)
    torch.manual_seed(lora_seed)
    # Dropout > 0 makes every step draw from the torch RNG, so a resume that failed to restore it
    # would diverge; lora_A's random init makes a wrong or partial adapter load visible.
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.2, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(base, lora)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=RUN_CONFIG["train"]["lr"], weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / STEPS))
    return model, optimizer, scheduler
