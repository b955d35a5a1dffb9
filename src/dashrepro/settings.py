"""The typed settings a config's blocks become, each field documented beside its default.

``TrainSettings`` and ``LoraSettings`` (a scale's ``train`` and ``lora``), ``GenerationSettings``
and ``GradingSettings`` (the ``evaluation`` block, split by what a job's outputs depend on),
``TrackingSettings``, a method's ``GrpoSettings`` and the ``PremiseProbeSettings``. Each is built once from the validated
config (``from_config``, which names a bad key or value) and read by attribute everywhere else.
A field is the one source of its key's meaning, default and allowed values:
``annotate_schema`` writes them into the config schema (``experiment/config_schema.yaml``, which
holds the keys' types and ranges only), and the configuration reference reads them from there.
Torch-free: the workflow's parse builds them too.

    train = TrainSettings.from_config(config["scales"]["tiny"]["train"])
    train.checkpoint_steps()                          # [2, 4]
    GenerationSettings.from_config(config["evaluation"]).sampling()
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

# The values a choice key allows (the schema's enum comes from these).
# dashrepro.sampling.backends registers each backend.
Backend = Literal["hf", "hf_compiled", "hf_continuous", "vllm"]
Device = Literal["cpu", "cuda"]
SamplingDtype = Literal["float32", "bfloat16"]
Precision = Literal["fp32", "bf16"]
AttentionKernel = Literal["sdpa", "eager", "flash_attention_2", "auto"]
EvaluationPrompt = Literal["problem", "boxed_instruction"]
LoraTarget = Literal["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
Tracker = Literal["tensorboard", "wandb", "mlflow", "trackio"]


def help_field(text: str, **kwargs):
    """A dataclass field whose meaning travels with it (``annotate_schema`` writes it into the
    schema, whence the configuration reference)."""
    return dataclasses.field(metadata={"help": text}, **kwargs)


@functools.cache
def _choices(cls) -> dict[str, tuple[tuple, bool]]:
    """Field name -> (allowed values, whether the field is a tuple of them), for choice fields."""
    found = {}
    for name, hint in typing.get_type_hints(cls).items():
        many = typing.get_origin(hint) is tuple
        inner = typing.get_args(hint)[0] if many else hint
        if typing.get_origin(inner) is Literal:
            found[name] = (typing.get_args(inner), many)
    return found


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
    for name, (allowed, many) in _choices(cls).items():
        if name not in given:
            continue
        for value in given[name] if many else (given[name],):
            if value not in allowed:
                raise ValueError(
                    f"{where}.{name}: {value!r} is not one of {', '.join(map(str, allowed))}"
                )
    return cls(**given)


@dataclass(frozen=True)
class TrainSettings:
    """One scale's ``train`` block: the schedule, batches, rollouts and the training backend."""

    steps: int = help_field("Optimisation steps of a run.")
    checkpoint_every: int = help_field(
        "A checkpoint (the PEFT adapter, evaluated and a candidate for selection) every this "
        "many steps; must divide `steps`."
    )
    lr: float = help_field(
        "Peak learning rate of AdamW; it decays linearly to zero over the run, without warmup."
    )
    micro_batch_size: int = help_field(
        "Rollouts per micro-batch on each process (one per problem, except that a GRPO method "
        "repeats each problem group_size times)."
    )
    grad_accumulation: int = help_field(
        "Micro-batches per optimisation step on each process; global batch = micro_batch_size "
        "x grad_accumulation x num_processes."
    )
    max_new_tokens: int = help_field(
        "Longest student rollout, in tokens (shorter where `max_total_length` leaves less room "
        "after the prompt)."
    )
    temperature: float = help_field("Sampling temperature of the student's rollouts.")
    top_p: float = help_field("Nucleus-sampling mass of the rollouts (1.0 turns it off).")
    top_k: int = help_field("Top-k of the rollouts (0 turns it off).")
    state_every_minutes: float | None = help_field(
        "A resumable training state this often, in minutes, besides the checkpoints. Absent: "
        "states at checkpoints and on a preemption notice only.",
        default=None,
    )
    loss_temperature: float = help_field(
        "Divides the student's and the teacher's logits inside the loss (default 1.0: as "
        "given); the reference trainers use the rollout temperature (1.1).",
        default=1.0,
    )
    max_total_length: int | None = help_field(
        "A prompt plus its rollout never exceeds this many tokens (paper: 20,000); a "
        "micro-batch whose prompt leaves no room is skipped, not truncated. Absent: no cap.",
        default=None,
    )
    rollout_backend: Backend = help_field(
        "hf: HF generate on the live model; hf_compiled: HF generate on a plain copy of the "
        "policy in the training precision (base plus the adapter's delta, rewritten in place "
        "before each micro-batch's rollouts), with a static key/value cache and a compiled decode step; "
        "hf_continuous: the same copy sampled through transformers' continuous batching (a paged "
        "key/value cache; finished rollouts leave at once); "
        "vllm: a colocated vLLM engine, the current adapter synced into it before each "
        "micro-batch's rollouts.",
        default="hf",
    )
    rollout_call_rows: int | None = help_field(
        "Sample a step's rollouts in calls of whole micro-batches holding at most this many "
        "rows (micro_batch_size x grad_accumulation: one call a step), the teacher's analyses "
        "alike, instead of one call per micro-batch: fewer, fuller calls on a GPU. A call's "
        "seed is that of its first micro-batch, so its rollouts depend on how the micro-batches "
        "are grouped (and spread over processes), and its response cap on its longest prompt. "
        "Absent: one call per micro-batch, and not in the run's records.",
        default=None,
    )
    precision: Precision = help_field(
        "fp32, or bf16: the base weights in bfloat16 under bf16 autocast (with DeepSpeed, its "
        "config's bf16 section). A bf16 run's job uses the GPU environment.",
        default="fp32",
    )
    gradient_checkpointing: bool = help_field(
        "Recompute activations in the backward pass (less memory, more time).", default=False
    )
    attn_implementation: AttentionKernel = help_field(
        "The attention kernel the training model is loaded with; auto: FlashAttention-2 when "
        "it is installed and a GPU is present, else PyTorch SDPA.",
        default="sdpa",
    )
    num_processes: int = help_field(
        "Processes (GPUs) of one run, launched by accelerate when above 1; global batch = "
        "micro_batch_size x grad_accumulation x num_processes.",
        default=1,
    )
    deepspeed_config: str | None = help_field(
        'A DeepSpeed JSON config (e.g. config/deepspeed/zero2_offload.json), its "auto" '
        "entries filled in by the trainer; null: DDP without DeepSpeed.",
        default=None,
    )
    vllm: dict = help_field(
        "Engine options of the vLLM rollout backend, passed to vLLM as given. The trainer sets "
        "the engine's context to `max_total_length` (when set) and its largest LoRA rank to "
        "`lora.r`.",
        default_factory=dict,
    )

    @classmethod
    def from_config(cls, train: Mapping, where: str = "train") -> TrainSettings:
        """The settings of a validated ``train`` mapping (or of ``to_dict``'s output)."""
        if isinstance(train, TrainSettings):
            return train
        return settings_from_mapping(cls, train, where)

    def to_dict(self) -> dict:
        """Every field, JSON-ready; ``from_config`` reads it back. ``rollout_call_rows``, added
        later, only where set: the runs without it record what they always did."""
        fields = dataclasses.asdict(self)
        if fields["rollout_call_rows"] is None:
            del fields["rollout_call_rows"]
        return fields

    def checkpoint_steps(self) -> list[int]:
        """The steps at which a run saves a checkpoint: every ``checkpoint_every`` steps."""
        return list(range(self.checkpoint_every, self.steps + 1, self.checkpoint_every))

    @property
    def total_length_cap(self) -> int:
        """``max_total_length``, or no cap in practice (10**9) where it is absent."""
        return self.max_total_length or 10**9

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
    alpha: int | float = help_field("LoRA's scaling numerator; the update is scaled by alpha / r.")
    dropout: float = help_field(
        "Dropout probability on the adapter's input, seeded per micro-batch."
    )
    target_modules: tuple[LoraTarget, ...] = help_field(
        "The projections of each layer that carry an adapter."
    )

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


#: Generation keys added after jobs were first run: in a job's params only when set.
ADDED_GENERATION_KEYS = ("prompt", "device", "dtype", "kv_cache_budget_gib")


@dataclass(frozen=True, kw_only=True)
class GenerationSettings:
    """How a checkpoint's responses are sampled (field order: the job params' key order)."""

    backend: Backend = help_field(
        "hf: Hugging Face generate (the embedded default); hf_compiled: HF generate on a plain "
        "copy of the model, each checkpoint's adapter merged into it once, with a static "
        "key/value cache and a compiled decode step; hf_continuous: the same copy through "
        "transformers' continuous batching (a paged key/value cache, finished responses leaving "
        "at once); vllm: a vLLM engine with each checkpoint "
        "as a LoRA request. A job on cuda (vllm always) uses the GPU environment (envs/gpu.yaml) "
        "and one GPU."
    )
    vllm: dict = help_field(
        "Engine options of the vllm backend, passed to vLLM as given; unused by hf.",
        default_factory=dict,
    )
    samples_per_problem: int = help_field("Responses sampled per problem (the k of Avg@k).")
    temperature: float = help_field("Sampling temperature of the evaluation's responses.")
    top_p: float = help_field(
        "Nucleus-sampling mass of the evaluation's responses (1.0 turns it off)."
    )
    max_new_tokens: int = help_field("Longest response, in tokens.")
    seed: int = help_field(
        "Seed of the sampling: each shard's seed derives from it, the benchmark and the "
        "shard's problem ids."
    )
    shard_size: int = help_field(
        "Problems per generation shard, within one benchmark: a killed job keeps its finished "
        "shards and resumes after them."
    )
    prompt: EvaluationPrompt = help_field(
        "The student's evaluation prompt (dashrepro.data.prompts.EVALUATION_INSTRUCTIONS): "
        "problem, the bare problem as in training (absent: this), or boxed_instruction, the "
        "problem followed by the OPSD evaluation script's boxed-answer instruction.",
        default="problem",
    )
    device: Device = help_field(
        "Where the hf, hf_compiled and hf_continuous backends generate (vllm: always cuda); "
        "a job on cuda gets one GPU and the GPU environment. Absent: cpu, and not in the jobs' params.",
        default="cpu",
    )
    dtype: SamplingDtype = help_field(
        "The weights' and cache's dtype of the hf_compiled and hf_continuous backends (the "
        "paper's GPU runs: "
        "bfloat16). Absent: float32, and not in the jobs' params.",
        default="float32",
    )
    kv_cache_budget_gib: float | None = help_field(
        "hf_compiled: the key/value cache memory one generate call may use; each call's batch "
        "is the most responses of (longest prompt + max_new_tokens) positions that fit, and a "
        "job whose single response cannot fit stops before any work. Absent: batches of 256, "
        "and not in the jobs' params. hf_continuous: the paged cache's size (absent: one forward "
        "pass's requests at once); one response must fit.",
        default=None,
    )

    def __post_init__(self) -> None:
        self.job_device  # noqa: B018 (a backend on a device it cannot run on is an error)
        if self.backend not in ("hf_compiled", "hf_continuous"):
            for name, unset in (("dtype", "float32"), ("kv_cache_budget_gib", None)):
                if getattr(self, name) != unset:
                    raise ValueError(
                        f"evaluation.{name}: only the hf_compiled and hf_continuous backends "
                        "read it, and the "
                        f"backend is {self.backend}"
                    )

    @property
    def job_device(self) -> str:
        """Where a generating job runs (sampling.backends): ``device`` for the HF backends;
        vllm's own device whatever ``device`` says (the key is the HF backends')."""
        from dashrepro.sampling.backends import job_device

        return job_device(self.backend, None if self.backend == "vllm" else self.device)

    @property
    def needs_gpu(self) -> bool:
        """Whether a job generating with these settings needs a GPU."""
        return self.job_device == "cuda"

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
        """The params of a generating job, as written in the config: every key but those added
        later (``prompt``, ``device``, ``dtype``, ``kv_cache_budget_gib``), which only a setting
        other than their default adds, so that older jobs stay as they were; and ``vllm`` only
        for the vllm backend (its options do not change what HF samples), ``{}`` as null. A key
        set to its default is the key absent: the same params, so the same jobs, not a rerun."""
        fields = dataclasses.fields(cls)
        params = {f.name: evaluation.get(f.name) for f in fields}
        defaults = {f.name: f.default for f in fields if f.name in ADDED_GENERATION_KEYS}
        for name in ADDED_GENERATION_KEYS:
            if name not in evaluation or evaluation[name] == defaults[name]:
                params.pop(name)
        if params["backend"] != "vllm":
            params.pop("vllm")
        elif not params["vllm"]:
            params["vllm"] = None  # no engine options, written `vllm: {}` or not at all
        return params

    def engine_options(self) -> dict:
        """Keyword arguments of the backend's sampler besides ``base_model``: vLLM's engine
        options; hf's device; hf_compiled's device, dtype, budget and response cap."""
        if self.backend == "vllm":
            return dict(self.vllm)
        if self.backend in ("hf_compiled", "hf_continuous"):
            return {
                "device": self.device,
                "dtype": self.dtype,
                "kv_cache_budget_gib": self.kv_cache_budget_gib,
                "response_cap": self.max_new_tokens,
            }
        return {"device": self.device}

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
        "Processes that grade (at least 1: the hard per-answer timeout kills a worker, and the "
        "grader in the job's own process has none)."
    )
    grading_timeout_s: float = help_field("math-verify's own timeout on one answer, in seconds.")
    grading_item_timeout_s: float = help_field(
        "The hard limit on one answer's grading, in seconds: the worker is killed and replaced, "
        'and the answer is graded by the exact rule alone (path "timeout"). Must be above '
        "grading_timeout_s, so that math-verify's own timeout can fire first."
    )
    grading_memory_gib: float = help_field(
        "Each grading worker's address space, in GiB: an answer whose grading allocates past "
        'it gets the exact rule\'s verdict on path "error", and the job goes on.'
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

    report_to: tuple[Tracker, ...] = help_field(
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


@dataclass(frozen=True)
class GrpoSettings:
    """A method's ``grpo`` block: the GRPO hybrid, the distillation loss plus eta x a GRPO loss
    over group_size rollouts per problem (paper appendix ``sec:outcome_optimization``)."""

    eta: float = help_field("Weight of the GRPO loss added to the distillation loss.")
    group_size: int = help_field(
        "Rollouts per problem (K), whose rewards are normalised together; must divide "
        "micro_batch_size x grad_accumulation at every scale the method is trained at."
    )
    aggregate: bool = help_field(
        "true: a rollout's advantage arrives at its last token and the gamma-lambda recursion "
        "spreads it back (paper: gamma = lambda = 0.95); false: every token carries its "
        "rollout's advantage."
    )
    gamma: float = help_field(
        "Discount of the gamma-lambda recursion, used when `aggregate` is true; only the "
        "product gamma x lam matters.",
        default=0.95,
    )
    lam: float = help_field(
        "Lambda of the gamma-lambda recursion, used when `aggregate` is true.", default=0.95
    )

    @classmethod
    def from_config(cls, grpo: Mapping, where: str = "grpo") -> GrpoSettings:
        """The settings of a ``grpo`` mapping (or of ``to_dict``'s output)."""
        if isinstance(grpo, GrpoSettings):
            return grpo
        return settings_from_mapping(cls, grpo, where)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PremiseProbeSettings:
    """The ``premise_probe`` block: the base student's rollouts on training problems, before
    any training, scored by the student and its privileged teacher, and the method whose
    gates are measured on them (``dashrepro.premise``, docs/premise.md)."""

    method: str = help_field(
        "The method whose local signal, gates and weights c_k are measured: a `methods` entry "
        "of the distill objective with a gated aggregation and no grpo term.",
        default="dash",
    )
    problems: int = help_field(
        "Training problems probed per task: the first of each task's rows in a seeded shuffle "
        "of the training set (a training set without tasks is one task).",
        default=16,
    )
    rollouts_per_problem: int = help_field(
        "Rollouts sampled per problem (K), with the scale's rollout settings; their prefix "
        "tree gives the branch statistics, so K is at least 2.",
        default=8,
    )
    seed: int = help_field("Seed of the shuffle and of the sampling.", default=0)
    micro_batch_size: int = help_field(
        "Rollouts scored per forward pass: memory only, though another size may move values "
        "in their last digits (the padding differs).",
        default=16,
    )

    @classmethod
    def from_config(cls, probe: Mapping) -> PremiseProbeSettings:
        """The settings of a ``premise_probe`` mapping (or of ``to_dict``'s output)."""
        if isinstance(probe, PremiseProbeSettings):
            return probe
        return settings_from_mapping(cls, probe, "premise_probe")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


#: Where each settings type's block sits in the config schema (``*``: a mapping's free-named
#: entries), in the order the types' fields fill it.
SCHEMA_BLOCKS: dict[tuple[str, ...], tuple[type, ...]] = {
    ("scales", "*", "train"): (TrainSettings,),
    ("scales", "*", "lora"): (LoraSettings,),
    ("evaluation",): (GenerationSettings, GradingSettings),
    ("tracking",): (TrackingSettings,),
    ("methods", "*", "grpo"): (GrpoSettings,),
    ("premise_probe",): (PremiseProbeSettings,),
}
#: What a field sets in its schema property; the schema file leaves these out of the blocks.
FIELD_KEYWORDS = ("description", "default", "enum")


def schema_block(schema: dict, path: tuple[str, ...]) -> dict:
    """The sub-schema at ``path`` (``SCHEMA_BLOCKS``' keys) of a config schema."""
    node = schema
    for part in path:
        node = node["additionalProperties"] if part == "*" else node["properties"][part]
    return node


def _json_default(f: dataclasses.Field):
    value = f.default if f.default is not dataclasses.MISSING else f.default_factory()
    return list(value) if isinstance(value, tuple) else value


def annotate_schema(schema: dict) -> dict:
    """``schema`` with each settings field's description, default, allowed values, and each
    block's required keys, written from the settings types (in place; also returned). A field
    the schema lacks, or a schema key no field has, is an error naming both."""
    for path, types in SCHEMA_BLOCKS.items():
        block = schema_block(schema, path)
        where = ".".join(path)
        properties, required = block["properties"], []
        fields = [(cls, f) for cls in types for f in dataclasses.fields(cls)]
        extra = set(properties) - {f.name for _, f in fields}
        if extra:
            raise ValueError(f"config schema {where}: keys without a settings field: {extra}")
        for cls, f in fields:
            if f.name not in properties:
                raise ValueError(f"config schema {where}: no property for {cls.__name__}.{f.name}")
            prop = properties[f.name]
            prop["description"] = f.metadata["help"]
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
            else:
                prop["default"] = _json_default(f)
            if f.name in _choices(cls):
                allowed, many = _choices(cls)[f.name]
                (prop.setdefault("items", {}) if many else prop)["enum"] = list(allowed)
        if required:
            block["required"] = required
    return schema
