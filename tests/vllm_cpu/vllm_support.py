"""Adapters, engines and HF references for the vLLM cases (imported inside .venv-vllm only).

The models come from ``tests/random_models.py`` (random weights, an untied head), shared with the
HF sampler's tests in .venv.
"""

from __future__ import annotations

from pathlib import Path

import torch
from random_models import LORA_TARGETS, TINY_ARCH, save_model, save_random_lora, trainable_base

from dashrepro.sampling.base import Sample

__all__ = ["TINY_ARCH", "save_model", "save_random_lora", "trainable_base"]

#: The trainer's LoRA settings in these cases (rank 8: vLLM serves ranks 8, 16, 32, ...).
LORA = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": LORA_TARGETS}

#: What every engine of these cases shares. fp32, as the HF reference. enforce_eager: no
#: torch.compile (an engine starts in ~20 s instead of ~70 s on 2 cores; the model code is the
#: same). An explicit KV cache size: on the CPU backend gpu_memory_utilization is a share of
#: the machine's memory that must also cover what the process already uses (0.9 fails, small
#: shares fail on a busy machine); a fixed 256 MiB holds these tiny models' caches anywhere.
ENGINE_KWARGS = {"dtype": "float32", "enforce_eager": True, "kv_cache_memory_bytes": 256 << 20}


@torch.no_grad()
def hf_greedy(model, tokenizer, prompts: list[str], max_new_tokens: int) -> list[Sample]:
    """HF ``generate`` greedy, one prompt at a time (no padding, so no padded numerics), as
    ``Sample`` records built by ``sampling.hf.sample_responses``'s rules: cut after the first
    EOS (kept in token_ids, left out of the text)."""
    eos = tokenizer.eos_token_id
    samples = []
    for index, prompt in enumerate(prompts):
        ids = torch.tensor([tokenizer(prompt, add_special_tokens=False)["input_ids"]])
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos,
            pad_token_id=tokenizer.pad_token_id,
        )
        row = out[0, ids.shape[1] :].tolist()
        if eos in row:
            token_ids, finish = row[: row.index(eos) + 1], "stop"
        else:
            token_ids, finish = row, "length"
        body = token_ids[:-1] if finish == "stop" else token_ids
        text = tokenizer.decode(body, skip_special_tokens=False)
        samples.append(Sample(index, token_ids, text, finish))
    return samples


@torch.no_grad()
def hf_token_logprobs(model, prompt_ids: list[int], response_ids: list[int]) -> list[float]:
    """log p(response token | prompt, earlier tokens) under ``model``, by one forward pass."""
    ids = torch.tensor([prompt_ids + response_ids])
    logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    return logprobs.gather(1, torch.tensor(response_ids)[:, None])[:, 0].tolist()


def distillation_recipe(folder: Path, data: Path, config: dict, method: str, out_dir: Path,
                        train: dict, seed: int = 5):  # fmt: skip
    """The trainer the Snakemake rule runs (``DistillationRecipe``), set up for one run of
    ``method`` (a name in ``config["methods"]``) on the tiny base model."""
    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.training.methods import MethodSpec
    from dashrepro.training.recipe import DistillationRecipe
    from dashrepro.training.run_spec import RunSpec

    entry = {k: v for k, v in config["methods"][method].items() if k != "label"}
    spec = RunSpec(
        base_model_dir=folder,
        train_parquet=data,
        out_dir=out_dir,
        method=MethodSpec.from_config(method, entry),
        train=train,
        lora=LORA,
        protocol=TeacherProtocol.from_config(config["protocol"]),
        seed=seed,
    )
    recipe = DistillationRecipe(spec, log=print)
    recipe.setup()
    return recipe
