"""Models, adapters and HF references for the vLLM cases (imported inside .venv-vllm only).

The models are random-weight Qwen3 networks built with ``build_tiny_qwen3``, with an untied
output head: a random model with tied embeddings mostly repeats its input token under greedy
decoding, which would compare little; an untied head (weights N(0, 0.1^2), so logits have a
standard deviation near 1) gives varied tokens, and its EOS row scaled up makes some responses
stop by themselves and others run to the length cap.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dashrepro.embedded.tiny_model import build_tiny_qwen3
from dashrepro.sampling.base import Sample

#: workflow_config.yaml's scales.tiny.architecture (head_dim 32: vLLM's CPU attention has no 24).
TINY_ARCH = {"hidden_size": 96, "intermediate_size": 288, "num_hidden_layers": 3,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
             "max_position_embeddings": 512}  # fmt: skip
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
#: The trainer's LoRA settings in these cases (rank 8: vLLM serves ranks 8, 16, 32, ...).
LORA = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": LORA_TARGETS}

#: What every engine of these cases shares. fp32, as the HF reference. enforce_eager: no
#: torch.compile (an engine starts in ~20 s instead of ~70 s on 2 cores; the model code is the
#: same). An explicit KV cache size: on the CPU backend gpu_memory_utilization is a share of
#: the machine's memory that must also cover what the process already uses (0.9 fails, small
#: shares fail on a busy machine); a fixed 256 MiB holds these tiny models' caches anywhere.
ENGINE_KWARGS = {"dtype": "float32", "enforce_eager": True, "kv_cache_memory_bytes": 256 << 20}


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


def trainable_base(folder: Path, protocol: dict) -> tuple[Path, Path, object]:
    """A tiny base model the trainer can run on: ``conftest.save_tiny_base``'s tokenizer and
    training parquet (the tokenizer knows the teacher protocol's words), with the untied-head
    model of ``save_model`` in place of the tied one. Returns (folder, parquet, tokenizer)."""
    from conftest import save_tiny_base

    _, data, tokenizer = save_tiny_base(folder, TINY_ARCH, protocol)
    save_model(folder, tokenizer, TINY_ARCH, eos_scale=3.0)
    return folder, data, tokenizer


def distillation_recipe(folder: Path, data: Path, config: dict, method: str, out_dir: Path,
                        train: dict, seed: int = 5):  # fmt: skip
    """The trainer the Snakemake rule runs (``DistillationRecipe``), set up for one run of
    ``method`` (a name in ``config["methods"]``) on the tiny base model."""
    from dashrepro.data.prompts import TeacherProtocol
    from dashrepro.training.methods import MethodSpec
    from dashrepro.training.recipe import DistillationRecipe, RunSpec

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
