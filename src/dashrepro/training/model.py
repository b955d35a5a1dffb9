"""The student: the base network with a fresh LoRA adapter, and the privileged teacher it hides.

The teacher is the same network with the adapter *disabled* (``policy.disable_adapter()``), so
no second copy of the base weights is loaded. The adapter follows the paper's appendix
"Adapters and optimization" (*DASH: divergence-adaptive supervision horizons*): rank, alpha,
dropout and target modules come from the scale's ``lora`` config; B starts at zero and A is
Kaiming-initialised from the run seed, so the seed fixes the initial adapter.

    student = load_lora_student(base_model_dir, lora, seed, train)
    with student.disable_adapter():
        teacher_logits = student(input_ids=ids).logits
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from dashrepro.settings import LoraSettings, TrainSettings


def resolve_attn_implementation(requested: str) -> str:
    """``auto``: FlashAttention-2 when installed and a GPU is present, else PyTorch SDPA."""
    if requested != "auto":
        return requested
    if torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def load_lora_student(
    base_model: str | Path,
    lora: LoraSettings | Mapping,
    seed: int,
    train: TrainSettings | Mapping | None = None,
):
    """The base network with a fresh LoRA adapter (B = 0, A seeded), ready to train; ``train``
    gives the precision, attention kernel and checkpointing (None: their defaults)."""
    lora = LoraSettings.from_config(lora)
    # The class's attributes are the fields' defaults: one home for them.
    train = TrainSettings if train is None else TrainSettings.from_config(train)
    dtype = torch.bfloat16 if train.precision == "bf16" else torch.float32
    base = AutoModelForCausalLM.from_pretrained(
        str(base_model),
        dtype=dtype,
        attn_implementation=resolve_attn_implementation(train.attn_implementation),
    )
    if train.gradient_checkpointing:
        # Non-reentrant checkpointing works with frozen embeddings (LoRA) without the
        # enable_input_require_grads hook that the reentrant variant needs.
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    torch.manual_seed(seed)  # LoRA A is Kaiming-initialised (B = 0): the seed fixes it
    config = LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(base, config)


def build_optimizer(trainable: list[torch.nn.Parameter], lr: float, steps: int):
    """AdamW (0.9, 0.999, 1e-8, no weight decay) and a learning rate decaying linearly to zero
    over ``steps`` without warmup (paper appendix "Adapters and optimization").

    The scheduler is stepped once per optimisation step by hand (an accelerate-prepared
    scheduler would step once per process).
    """
    optimizer = torch.optim.AdamW(trainable, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / steps))
    return optimizer, scheduler
