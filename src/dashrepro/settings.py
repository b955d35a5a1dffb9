"""The typed settings a config's blocks become, each field documented beside its default.

``TrainSettings`` and ``LoraSettings`` (a scale's ``train`` and ``lora``), ``GenerationSettings``
and ``GradingSettings`` (the ``evaluation`` block, split by what a job's outputs depend on).
Each is built once from the validated config (``from_config``, which names a bad key) and read
by attribute everywhere else; the schema (``experiment/config_schema.yaml``) declares the same
keys and defaults, and ``tests/test_settings.py`` fails when the two drift. Torch-free: the
workflow's parse builds them too.

    train = TrainSettings.from_config(config["scales"]["tiny"]["train"])
    train.checkpoint_steps()                          # [2, 4]
    GenerationSettings.from_config(config["evaluation"]).sampling()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass


def help_field(text: str, **kwargs):
    """A dataclass field whose meaning travels with it (the configuration reference reads it)."""
    return dataclasses.field(metadata={"help": text}, **kwargs)


def settings_from_mapping(cls, values: Mapping, where: str, pick: bool = False):
    """``cls`` built from ``values``. Unknown keys raise ``ValueError`` naming them, unless
    ``pick`` (``values`` is a larger block whose other keys belong elsewhere); missing required
    keys always do. An integer given for a float field becomes a float (YAML writes 1 for 1.0)."""
    if not isinstance(values, Mapping):
        raise ValueError(f"{where}: a mapping of settings, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown and not pick:
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
        if fields[name].type.startswith("float") and type(value) is int:
            given[name] = float(value)
    return cls(**given)


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
    # As written (no float coercion): peft records it in each checkpoint's adapter_config.json.
    alpha: int | float = help_field("LoRA scaling numerator (the update is scaled by alpha / r).")
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


@dataclass(frozen=True, kw_only=True)
class GenerationSettings:
    """How a checkpoint's responses are sampled (field order: the job params' key order)."""

    backend: str = help_field(
        "hf: Hugging Face generate (CPU, the embedded default); vllm: a vLLM engine with the "
        "checkpoint as a LoRA request."
    )
    vllm: dict = help_field(
        "Engine options of the vLLM backend (dtype, gpu_memory_utilization, "
        "kv_cache_memory_bytes, max_model_len, max_lora_rank, tensor_parallel_size, "
        "enable_prefix_caching, enforce_eager), passed to vLLM as given.",
        default_factory=dict,
    )
    samples_per_problem: int = help_field("Responses sampled per problem (the k of Avg@k).")
    temperature: float = help_field("Sampling temperature.")
    top_p: float = help_field("Nucleus-sampling mass (1.0: off).")
    max_new_tokens: int = help_field("Longest response, in tokens.")
    seed: int = help_field("Seed of the sampling (each response's seed derives from it).")
    shard_size: int = help_field(
        "Problems per shard: a killed job keeps its finished shards and resumes after them."
    )
    prompt: str = help_field(
        "The student's evaluation prompt: the bare problem, or the OPSD evaluation script's "
        "boxed instruction (boxed_instruction).",
        default="problem",
    )

    @classmethod
    def from_config(cls, evaluation: Mapping) -> GenerationSettings:
        """The generation settings among an ``evaluation`` mapping's keys (or a job's params)."""
        if isinstance(evaluation, GenerationSettings):
            return evaluation
        if isinstance(evaluation, Mapping) and evaluation.get("vllm", {}) is None:
            # A vllm job's params hold `vllm: null` when the config sets no engine options.
            evaluation = {k: v for k, v in evaluation.items() if k != "vllm"}
        return settings_from_mapping(cls, evaluation, "evaluation", pick=True)

    @classmethod
    def job_params(cls, evaluation: Mapping) -> dict:
        """The params of a generating job, as written in the config: every key but ``prompt``
        (which only an explicit setting adds, so that older jobs stay as they were), and
        ``vllm`` only for the vllm backend (its options do not change what HF samples)."""
        params = {f.name: evaluation.get(f.name) for f in dataclasses.fields(cls)}
        if "prompt" not in evaluation:
            params.pop("prompt")
        if params["backend"] != "vllm":
            params.pop("vllm")
        return params

    def engine_options(self) -> dict:
        """Keyword arguments of the backend's sampler (vLLM's engine options, or none)."""
        return dict(self.vllm) if self.backend == "vllm" else {}

    def sampling(self):
        """The ``SamplingSettings`` of the responses (no top-k)."""
        from dashrepro.sampling import SamplingSettings

        return SamplingSettings(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=None,
            max_new_tokens=self.max_new_tokens,
        )


@dataclass(frozen=True)
class GradingSettings:
    """How responses are graded; the names are ``grade_samples``'s keyword arguments."""

    grading_workers: int = help_field(
        "Processes that grade (at least 1: the hard per-item timeout kills a worker, and the "
        "grader in the job's own process has none)."
    )
    grading_timeout_s: float = help_field("math-verify's own timeout per answer, in seconds.")
    grading_item_timeout_s: float = help_field(
        "The hard limit on one answer's grading: the worker is killed and replaced, the answer "
        'graded by the exact rule alone (path "timeout"); above grading_timeout_s.'
    )
    grading_memory_gib: float = help_field(
        "Each grading worker's address space (GiB): an answer whose grading allocates past it "
        'gets the exact rule\'s verdict on path "error", and the job goes on.'
    )

    @classmethod
    def from_config(cls, evaluation: Mapping) -> GradingSettings:
        """The grading settings among an ``evaluation`` mapping's keys (or a job's params)."""
        if isinstance(evaluation, GradingSettings):
            return evaluation
        return settings_from_mapping(cls, evaluation, "evaluation", pick=True)

    @classmethod
    def job_params(cls, evaluation: Mapping) -> dict:
        """The params of a grading job, as written in the config."""
        return {f.name: evaluation[f.name] for f in dataclasses.fields(cls)}

    def to_dict(self) -> dict:
        """Every field: ``grade_samples``'s keyword arguments."""
        return dataclasses.asdict(self)


#: The trackers ``tracking.report_to`` may name, each with the module it needs and the package
#: that installs it (the ``tracking`` extra of pyproject.toml holds all of them).
TRACKER_PACKAGES = {
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow-skinny"),
    "trackio": ("trackio", "trackio"),
}


@dataclass(frozen=True)
class TrackingSettings:
    """The ``tracking`` block: which experiment trackers a run's steps and scores go to, and
    where the local ones write. Never part of what a job's outputs depend on."""

    report_to: tuple[str, ...] = help_field(
        "Trackers every training run and checkpoint grading logs to: tensorboard, wandb, "
        "mlflow, trackio (each needs its package: pip install -e '.[tracking]'); empty: none.",
        default=(),
    )
    project: str = help_field(
        "The tracker project (W&B project, MLflow experiment, trackio project, TensorBoard's "
        "run-name prefix).",
        default="dashrepro",
    )
    directory: str | None = help_field(
        "Where the local trackers write (TensorBoard event files, W&B offline runs, MLflow's "
        "file store, trackio's SQLite store); null: results/<experiment>/tracking.",
        default=None,
    )
    offline: bool = help_field(
        "W&B writes offline run files (synced later with `wandb sync`); false: online, for a "
        "node that reaches the W&B server. MLflow goes to MLFLOW_TRACKING_URI when it is set, "
        "else to the file store under `directory`; trackio to TRACKIO_SERVER_URL or "
        "TRACKIO_SPACE_ID when one is set, else to its SQLite store under `directory`.",
        default=True,
    )

    @classmethod
    def from_config(cls, tracking: Mapping | None) -> TrackingSettings:
        """The settings of a ``tracking`` mapping (absent: no tracker)."""
        if isinstance(tracking, TrackingSettings):
            return tracking
        settings = settings_from_mapping(cls, tracking or {}, "tracking")
        return dataclasses.replace(settings, report_to=tuple(settings.report_to))

    def missing_packages(self) -> list[str]:
        """``tracking.report_to`` entries whose module is not importable, each with the package
        to install; found without importing it (the workflow's parse stays light)."""
        from importlib.util import find_spec

        return [
            f"tracking.report_to: {name!r} needs the package {TRACKER_PACKAGES[name][1]!r} "
            f"(pip install {TRACKER_PACKAGES[name][1]}, or pip install -e '.[tracking]')"
            for name in self.report_to
            if find_spec(TRACKER_PACKAGES[name][0]) is None
        ]

    def to_dict(self) -> dict:
        values = dataclasses.asdict(self)
        values["report_to"] = list(self.report_to)
        return values
