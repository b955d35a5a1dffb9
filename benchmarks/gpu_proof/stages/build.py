"""Stage ``build``: a Qwen3 of the shape's configuration with random weights and the real Qwen3
tokenizer, saved with ``save_pretrained``.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..common import base_model_dir, qwen3_tokenizer_dir
from ..shapes import SHAPES


def save_random_qwen3(folder: Path, architecture: dict) -> dict:
    """A Qwen3 of ``architecture`` with random weights (bf16, built on the device) and the real
    Qwen3 tokenizer, saved with ``save_pretrained``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config

    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    config = Qwen3Config(
        vocab_size=151936,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **architecture,
    )
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    saved = time.perf_counter() - t0
    parameters = sum(p.numel() for p in model.parameters())
    return {"parameters": parameters, "build_seconds": round(built, 1),
            "save_seconds": round(saved, 1), "folder": str(folder)}  # fmt: skip


def stage_build(args, shape: str | None = None) -> dict:
    shape = shape or args.shape
    folder = base_model_dir(args, shape)
    return save_random_qwen3(folder, SHAPES[shape]["architecture"])
