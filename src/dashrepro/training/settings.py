"""The training settings of a scale, as typed values: ``TrainSettings`` and ``LoraSettings``.

Built once from a scale's validated ``train`` / ``lora`` mapping (``from_config``); every other
module reads attributes. Each field's default sits beside it with its meaning; the config
schema (``experiment/config_schema.yaml``) declares the same keys and defaults, and
``tests/training/test_training_settings.py`` fails when the two drift. Torch-free: Snakemake's parse
reads them too.

    train = TrainSettings.from_config(config["scales"]["tiny"]["train"])
    train.checkpoint_steps()        # [2, 4]
    TrainSettings.from_config(train.to_dict()) == train   # round-trips through JSON
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from dashrepro.typed_settings import help_field, settings_from_mapping


@dataclass(frozen=True)
class TrainSettings:
    """One scale's ``train`` block: the schedule, batches, rollouts and the training backend."""

    steps: int = help_field("Optimisation steps of a run.")
    checkpoint_every: int = help_field(
        "A PEFT checkpoint (evaluated and selectable) every this many steps; divides `steps`."
    )
    lr: float = help_field("Peak learning rate of AdamW; it decays linearly to zero, no warmup.")
    micro_batch_size: int = help_field("Rollouts per forward pass (one per problem).")
    grad_accumulation: int = help_field(
        "Micro-batches per step; global batch = micro_batch_size x grad_accumulation x "
        "num_processes."
    )
    max_new_tokens: int = help_field("Longest student rollout, in tokens.")
    temperature: float = help_field("Rollout sampling temperature.")
    top_p: float = help_field("Rollout nucleus-sampling mass (1.0: off).")
    top_k: int = help_field("Rollout top-k (0: off).")
    state_every_minutes: float | None = help_field(
        "A resumable training state this often (minutes) besides the checkpoints; null: at "
        "checkpoints and on a preemption notice only.",
        default=None,
    )
    loss_temperature: float = help_field(
        "Divides student and teacher logits inside the loss (1.0: as given; the reference "
        "trainers use the rollout temperature).",
        default=1.0,
    )
    max_total_length: int | None = help_field(
        "A prompt plus its rollout never exceeds this many tokens (paper: 20,000); null: no cap.",
        default=None,
    )
    rollout_backend: str = help_field(
        "hf: HF generate on the live model; vllm: a colocated vLLM engine, adapter synced every "
        "step.",
        default="hf",
    )
    precision: str = help_field("fp32, or bf16 autocast (the GPU runs').", default="fp32")
    gradient_checkpointing: bool = help_field(
        "Recompute activations in the backward pass (less memory, more time).", default=False
    )
    attn_implementation: str = help_field(
        "Attention kernel: sdpa, eager, flash_attention_2, or auto (FlashAttention-2 when "
        "installed on a GPU, else sdpa).",
        default="sdpa",
    )
    num_processes: int = help_field(
        "Processes (GPUs) of one run, launched by accelerate.", default=1
    )
    deepspeed_config: str | None = help_field(
        "A DeepSpeed JSON config (e.g. config/deepspeed/zero2_offload.json); null: DDP.",
        default=None,
    )
    vllm: dict = help_field(
        "Engine options of the vLLM rollout backend (gpu_memory_utilization, "
        "kv_cache_memory_bytes, dtype, enforce_eager), passed to vLLM as given.",
        default_factory=dict,
    )

    @classmethod
    def from_config(cls, train: Mapping, where: str = "train") -> TrainSettings:
        """The settings of a validated ``train`` mapping (or of ``to_dict``'s output)."""
        if isinstance(train, TrainSettings):
            return train
        return settings_from_mapping(cls, train, where)

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

    r: int = help_field("Rank of the LoRA update.")
    alpha: float = help_field("LoRA scaling numerator (the update is scaled by alpha / r).")
    dropout: float = help_field("Dropout on the adapter's input, seeded per micro-batch.")
    target_modules: tuple[str, ...] = help_field("The projections that carry an adapter.")

    @classmethod
    def from_config(cls, lora: Mapping, where: str = "lora") -> LoraSettings:
        """The settings of a validated ``lora`` mapping (or of ``to_dict``'s output)."""
        if isinstance(lora, LoraSettings):
            return lora
        settings = settings_from_mapping(cls, lora, where)
        return dataclasses.replace(settings, target_modules=tuple(settings.target_modules))

    def to_dict(self) -> dict:
        """Every field, JSON-ready; ``from_config`` reads it back."""
        return {**dataclasses.asdict(self), "target_modules": list(self.target_modules)}
