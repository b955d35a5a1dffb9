"""The evaluation settings as typed values: ``GenerationSettings`` and ``GradingSettings``.

The config's ``evaluation`` block holds both: what a checkpoint's responses depend on (the
sampler, k, temperature, ...) and how they are graded (workers, timeouts, memory). Each type
picks its own keys from that block, or from a job's params (``job_params``, what the rules pass
and provenance records). ``tests/evaluation/test_evaluation_settings.py`` fails when the schema and these
types drift. Torch-free: Snakemake's parse builds the job params.

    generation = GenerationSettings.from_config(config["evaluation"])
    generation.sampling()                  # SamplingSettings of the responses
    grade_samples(responses, **GradingSettings.from_config(config["evaluation"]).to_dict())
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from dashrepro.typed_settings import help_field, settings_from_mapping


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
