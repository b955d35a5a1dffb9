"""The training settings of a scale, as typed values: ``TrainSettings`` and ``LoraSettings``.

Built once from a scale's validated ``train`` / ``lora`` mapping (``from_config``); every other
module reads attributes. Each field's default sits beside it with its meaning; the config
schema (``experiment/config_schema.yaml``) declares the same keys and defaults, and
``tests/training/test_settings.py`` fails when the two drift. Torch-free: Snakemake's parse
reads them too.

    train = TrainSettings.from_config(config["scales"]["tiny"]["train"])
    train.checkpoint_steps()        # [2, 4]
    TrainSettings.from_config(train.to_dict()) == train   # round-trips through JSON
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field


def _help(text: str, **kwargs):
    """A field whose meaning travels with it (the configuration reference reads ``help``)."""
    return field(metadata={"help": text}, **kwargs)


def _from_mapping(cls, values: Mapping, where: str):
    """``cls`` built from ``values``; unknown or missing keys raise ``ValueError`` naming them."""
    if not isinstance(values, Mapping):
        raise ValueError(f"{where}: a mapping of settings, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}")
    missing = [
        name
        for name, f in fields.items()
        if name not in values
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
    given = {name: values[name] for name in fields if name in values}
    for name, value in given.items():
        # YAML writes 1 for 1.0: a float field holds a float whichever was written.
        if fields[name].type.startswith("float") and type(value) is int:
            given[name] = float(value)
    return cls(**given)


@dataclass(frozen=True)
class TrainSettings:
    """One scale's ``train`` block: the schedule, batches, rollouts and the training backend."""

    steps: int = _help("Optimisation steps of a run.")
    checkpoint_every: int = _help(
        "A PEFT checkpoint (evaluated and selectable) every this many steps; divides `steps`."
    )
    lr: float = _help("Peak learning rate of AdamW; it decays linearly to zero, no warmup.")
    micro_batch_size: int = _help("Rollouts per forward pass (one per problem).")
    grad_accumulation: int = _help(
        "Micro-batches per step; global batch = micro_batch_size x grad_accumulation x "
        "num_processes."
    )
    max_new_tokens: int = _help("Longest student rollout, in tokens.")
    temperature: float = _help("Rollout sampling temperature.")
    top_p: float = _help("Rollout nucleus-sampling mass (1.0: off).")
    top_k: int = _help("Rollout top-k (0: off).")
    state_every_minutes: float | None = _help(
        "A resumable training state this often (minutes) besides the checkpoints; null: at "
        "checkpoints and on a preemption notice only.",
        default=None,
    )
    loss_temperature: float = _help(
        "Divides student and teacher logits inside the loss (1.0: as given; the reference "
        "trainers use the rollout temperature).",
        default=1.0,
    )
    max_total_length: int | None = _help(
        "A prompt plus its rollout never exceeds this many tokens (paper: 20,000); null: no cap.",
        default=None,
    )
    rollout_backend: str = _help(
        "hf: HF generate on the live model; vllm: a colocated vLLM engine, adapter synced every "
        "step.",
        default="hf",
    )
    precision: str = _help("fp32, or bf16 autocast (the GPU runs').", default="fp32")
    gradient_checkpointing: bool = _help(
        "Recompute activations in the backward pass (less memory, more time).", default=False
    )
    attn_implementation: str = _help(
        "Attention kernel: sdpa, eager, flash_attention_2, or auto (FlashAttention-2 when "
        "installed on a GPU, else sdpa).",
        default="sdpa",
    )
    num_processes: int = _help("Processes (GPUs) of one run, launched by accelerate.", default=1)
    deepspeed_config: str | None = _help(
        "A DeepSpeed JSON config (e.g. config/deepspeed/zero2_offload.json); null: DDP.",
        default=None,
    )
    vllm: dict = _help(
        "Engine options of the vLLM rollout backend (gpu_memory_utilization, "
        "kv_cache_memory_bytes, dtype, enforce_eager), passed to vLLM as given.",
        default_factory=dict,
    )

    @classmethod
    def from_config(cls, train: Mapping, where: str = "train") -> TrainSettings:
        """The settings of a validated ``train`` mapping (or of ``to_dict``'s output)."""
        if isinstance(train, TrainSettings):
            return train
        return _from_mapping(cls, train, where)

    def to_dict(self) -> dict:
        """Every field, JSON-ready; ``from_config`` reads it back."""
        return dataclasses.asdict(self)

    def checkpoint_steps(self) -> list[int]:
        """The steps at which a run saves a checkpoint: every ``checkpoint_every`` steps."""
        return list(range(self.checkpoint_every, self.steps + 1, self.checkpoint_every))

    @property
    def rollouts_per_process(self) -> int:
        """Rollouts one process samples per step (micro_batch_size x grad_accumulation)."""
        return self.micro_batch_size * self.grad_accumulation


@dataclass(frozen=True)
class LoraSettings:
    """One scale's ``lora`` block: the adapter the student trains (paper appendix "Adapters and
    optimization")."""

    r: int = _help("Rank of the LoRA update.")
    alpha: float = _help("LoRA scaling numerator (the update is scaled by alpha / r).")
    dropout: float = _help("Dropout on the adapter's input, seeded per micro-batch.")
    target_modules: tuple[str, ...] = _help("The projections that carry an adapter.")

    @classmethod
    def from_config(cls, lora: Mapping, where: str = "lora") -> LoraSettings:
        """The settings of a validated ``lora`` mapping (or of ``to_dict``'s output)."""
        if isinstance(lora, LoraSettings):
            return lora
        settings = _from_mapping(cls, lora, where)
        return dataclasses.replace(settings, target_modules=tuple(settings.target_modules))

    def to_dict(self) -> dict:
        """Every field, JSON-ready; ``from_config`` reads it back."""
        return {**dataclasses.asdict(self), "target_modules": list(self.target_modules)}
