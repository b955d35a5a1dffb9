"""The rules across a config's keys that its JSON schema cannot say, each naming the key.

That the report names methods and scales that exist, that checkpoints divide the step budget,
that lengths fit their context and vLLM's limits, that each method's ``params`` and
``objective_params`` are exactly the keys its aggregation or objective takes, within the ranges
of ``parameters``, that the experiment's name stays inside ``results/``, that grading has a hard
limit above math-verify's, and that no number is ``.inf`` or ``.nan``. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from dashrepro.analysis.registry import spec_problems
from dashrepro.experiment.run_matrix import (
    GROUPS,
    base_scale,
    matrix_problems,
    run_matrix,
    scale_evaluation,
    spec_scales,
)
from dashrepro.layout import experiment_name_problem, resolve_repo_path
from dashrepro.objectives.registry import AGGREGATION_SPECS, DIVERGENCES, OBJECTIVES, check_params
from dashrepro.settings import (
    GenerationSettings,
    GradingSettings,
    PremiseProbeSettings,
    TrackingSettings,
    TrainSettings,
)

#: The name the validation split (``data.validation``) is evaluated under, beside the benchmarks.
VALIDATION_SPLIT = "validation"
#: Head sizes vLLM 0.32.0's CPU attention accepts (``CPUAttentionBackend.
#: get_supported_head_sizes``; it stops the engine on any other, e.g. 24). FlashAttention on a
#: GPU takes every multiple of 8 up to 256, so an embedded model within this list runs on both.
VLLM_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
#: The values vLLM 0.32.0 accepts as ``max_lora_rank`` (``vllm/config/lora.py``: MaxLoRARanks);
#: the engine refuses an adapter of a larger rank than its ``max_lora_rank``.
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: ``sampling.vllm.VLLMSampler``'s ``max_lora_rank`` when evaluation.vllm does not set one.
VLLM_DEFAULT_MAX_LORA_RANK = 64


def _method_problems(
    name: str, method: Mapping, config: Mapping, trains: Mapping[str, TrainSettings]
) -> list[str]:
    """Every problem of one method entry: its aggregation or objective and their parameters
    (``trains``: each scale's training settings)."""
    where = f"methods.{name}"
    aggregation = method["aggregation"]
    if aggregation not in AGGREGATION_SPECS:
        return [
            f"{where}.aggregation: unknown aggregation {aggregation!r}; "
            f"known: {sorted(AGGREGATION_SPECS)}"
        ]
    if method["divergence"] not in DIVERGENCES:
        return [
            f"{where}.divergence: unknown divergence {method['divergence']!r}; "
            f"known: {list(DIVERGENCES)}"
        ]
    objective = method.get("objective", "distill")
    if objective not in OBJECTIVES:
        return [f"{where}.objective: unknown objective {objective!r}; known: {sorted(OBJECTIVES)}"]
    problems = check_params(
        OBJECTIVES[objective].params,
        method.get("objective_params") or {},
        f"{where}.objective_params",
        owner=f"objective {objective!r}",
    )
    if not OBJECTIVES[objective].uses_aggregation and (aggregation != "opsd" or method["params"]):
        problems.append(
            f"{where}.aggregation: objective {objective!r} has its own per-token "
            "loss; set `aggregation: opsd` and `params: {}`"
        )
    grpo = method.get("grpo")
    if grpo:
        # Only the scales the method is trained at (the run matrix): a grid's K = 8 need not fit
        # a scale that never runs it.
        trained = {scale for (m, scale) in run_matrix(config) if m == name}
        for scale, train in trains.items():
            if scale not in trained:
                continue
            per_process = train.rollouts_per_process
            if per_process % grpo["group_size"]:
                problems.append(
                    f"{where}.grpo.group_size: {grpo['group_size']} does not divide "
                    f"the rollouts per process and step of scale {scale} "
                    f"(micro_batch_size x grad_accumulation = {per_process})"
                )
    problems += check_params(
        AGGREGATION_SPECS[aggregation].params,
        method["params"],
        f"{where}.params",
        owner=f"aggregation {aggregation!r}",
    )
    return problems


def _length_problems(
    scale: str, spec: Mapping, train: TrainSettings, evaluation: Mapping | None
) -> list[str]:
    """Lengths that cannot fit: a rollout in its total budget, sequences in the model's context
    (the evaluation's too, for a scale that is evaluated: ``evaluation`` not None)."""
    problems = []
    total = train.max_total_length
    if total is not None and total <= train.max_new_tokens:
        problems.append(
            f"scales.{scale}.train.max_total_length: {total} leaves no room for a prompt before "
            f"max_new_tokens={train.max_new_tokens} (it must be larger)"
        )
    if spec["source"] == "embedded":
        context = spec["architecture"]["max_position_embeddings"]
        for key, value in (
            ("train.max_total_length", total),
            ("train.max_new_tokens", train.max_new_tokens),
        ):
            if value is not None and value > context:
                problems.append(
                    f"scales.{scale}.{key}: {value} exceeds the model's context "
                    f"(architecture.max_position_embeddings = {context})"
                )
        longest = GenerationSettings.from_config(evaluation).max_new_tokens if evaluation else None
        if longest is not None and longest >= context:
            problems.append(
                f"evaluation.max_new_tokens: {longest} leaves no room for a "
                f"prompt in scale {scale}'s context (max_position_embeddings = {context})"
            )
    return problems


def _lora_rank_problems(
    scale: str, spec: Mapping, train: TrainSettings, evaluation: Mapping | None
) -> list[str]:
    """A LoRA rank a vLLM engine of this scale could not serve (``evaluation`` as in
    ``_length_problems``): vLLM evaluation loads every checkpoint's adapter into an engine
    built with evaluation.vllm.max_lora_rank, and vLLM rollouts build theirs with lora.r."""
    rank = (spec.get("lora") or {}).get("r")
    if rank is None:
        return []
    problems = []
    generation = GenerationSettings.from_config(evaluation) if evaluation is not None else None
    if generation is not None and generation.backend == "vllm":
        limit = generation.vllm.get("max_lora_rank", VLLM_DEFAULT_MAX_LORA_RANK)
        if rank > limit:
            enough = min(r for r in VLLM_MAX_LORA_RANKS if r >= rank) if rank <= 512 else rank
            problems.append(
                f"scales.{scale}.lora.r: rank {rank} is above evaluation.vllm.max_lora_rank="
                f"{limit}, so vLLM would refuse every adapter of this scale at evaluation: set "
                f"evaluation.vllm.max_lora_rank to {enough} (or lower lora.r)"
            )
    if train.rollout_backend == "vllm" and rank not in VLLM_MAX_LORA_RANKS:
        problems.append(
            f"scales.{scale}.lora.r: {rank} is not a rank vLLM accepts as max_lora_rank "
            f"{VLLM_MAX_LORA_RANKS}, which vLLM rollouts (scales.{scale}.train.rollout_backend: "
            "vllm) set to lora.r: use one of those ranks"
        )
    return problems


#: The rules whose jobs sample through ``evaluation.backend``.
EVALUATION_RULES = ("generate_checkpoint_responses", "evaluate_base_model")


def vllm_backend_keys(config: Mapping, rules: set[str]) -> list[str]:
    """The config keys that send a job of ``rules`` (the rule names about to run) to vLLM."""
    keys = []
    generation = GenerationSettings.from_config(config["evaluation"])
    if generation.backend == "vllm" and rules & set(EVALUATION_RULES):
        keys.append("evaluation.backend")
    for scale, spec in config["scales"].items():
        train = TrainSettings.from_config(spec["train"])
        if train.rollout_backend == "vllm" and f"train_lora_{scale}" in rules:
            keys.append(f"scales.{scale}.train.rollout_backend")
    return keys


def vllm_backend_problems(config: Mapping, rules: set[str], python: str) -> list[str]:
    """The ``vllm_backend_keys`` of ``rules`` when their jobs run in ``python``, which cannot
    import vLLM (jobs run in Snakemake's own interpreter unless a deployment method such as
    ``--sdm conda`` gives them ``envs/gpu.yaml``): each problem names the key and the ways out.
    Checked before any job starts, not at parse, so a dry run or a plan of the paper works
    anywhere."""
    return [
        f"{key}: vllm, but the jobs that need it would run in {python}, which cannot import "
        "vllm: run Snakemake from the GPU environment (envs/gpu.yaml), add --sdm conda so that "
        f"those jobs get it, or set {key}: hf"
        for key in vllm_backend_keys(config, rules)
    ]


def check_semantics(config: Mapping) -> list[str]:
    """Every problem across keys that the schema cannot say, one ``key: message`` line each."""
    name_problem = experiment_name_problem(config["experiment"])
    problems = [f"experiment: {name_problem}; choose another name"] if name_problem else []
    problems += _evaluation_problems(config)
    evaluated = {
        scale for group in GROUPS for spec in config[group].values() for scale in spec_scales(spec)
    }
    backend = GenerationSettings.from_config(config["evaluation"]).backend
    # Each scale's training settings, built once for every check below.
    trains = {s: TrainSettings.from_config(spec["train"]) for s, spec in config["scales"].items()}
    for scale, spec in config["scales"].items():
        scale_eval = scale_evaluation(config, scale) if scale in evaluated else None
        problems += _length_problems(scale, spec, trains[scale], scale_eval)
        problems += _lora_rank_problems(scale, spec, trains[scale], scale_eval)
        problems += _schedule_problems(scale, trains[scale])
        if spec["source"] == "embedded":
            problems += _architecture_problems(scale, spec, trains[scale], backend)
    for name, method in config["methods"].items():
        problems += _method_problems(name, method, config, trains)
    problems += _data_problems(config)
    problems += _premise_probe_problems(config)
    for group in GROUPS:
        for name, spec in config[group].items():
            problems += _output_problems(group, name, spec, config)
    problems += _embedded_output_problems(config)
    if config["statistics"]["reference"] not in config["methods"]:
        problems.append(
            f"statistics.reference: unknown method {config['statistics']['reference']!r}"
        )
    # A tracker whose package is missing stops the run here, before any job starts.
    problems += TrackingSettings.from_config(config.get("tracking")).missing_packages()
    return problems + matrix_problems(config)


def _evaluation_problems(config: Mapping) -> list[str]:
    """Grading timeouts in the wrong order; a vLLM context without room for a prompt."""
    problems = []
    grading = GradingSettings.from_config(config["evaluation"])
    if grading.grading_item_timeout_s <= grading.grading_timeout_s:
        problems.append(
            f"evaluation.grading_item_timeout_s: {grading.grading_item_timeout_s} is not "
            f"above evaluation.grading_timeout_s={grading.grading_timeout_s}: math-verify's "
            "own timeout could never fire before the worker is killed"
        )
    generation = GenerationSettings.from_config(config["evaluation"])
    vllm_len = generation.vllm.get("max_model_len")
    if generation.backend == "vllm" and vllm_len is not None:
        if vllm_len <= generation.max_new_tokens:
            problems.append(
                f"evaluation.vllm.max_model_len: {vllm_len} leaves no room for a prompt before "
                f"evaluation.max_new_tokens={generation.max_new_tokens}"
            )
    return problems


def _schedule_problems(scale: str, train: TrainSettings) -> list[str]:
    """Checkpoints that do not divide the schedule; a DeepSpeed config that is not there."""
    problems = []
    if train.steps % train.checkpoint_every:
        problems.append(
            f"scales.{scale}.train.checkpoint_every: {train.checkpoint_every} does not "
            f"divide steps={train.steps}"
        )
    if train.deepspeed_config and not resolve_repo_path(train.deepspeed_config).is_file():
        problems.append(
            f"scales.{scale}.train.deepspeed_config: no such file {train.deepspeed_config!r}"
        )
    return problems


def _architecture_problems(
    scale: str, spec: Mapping, train: TrainSettings, evaluation_backend: str
) -> list[str]:
    """An embedded architecture whose heads do not divide, or whose head size vLLM cannot
    serve when a sampler of this scale uses vLLM."""
    problems = []
    arch = spec["architecture"]
    if "head_dim" not in arch and arch["hidden_size"] % arch["num_attention_heads"]:
        problems.append(
            f"scales.{scale}.architecture.hidden_size: not divisible by num_attention_heads "
            "(or set architecture.head_dim)"
        )
    backends = {
        key: value
        for key, value in (
            ("evaluation.backend", evaluation_backend),
            (f"scales.{scale}.train.rollout_backend", train.rollout_backend),
        )
        if value == "vllm"
    }
    width = arch.get("head_dim") or arch["hidden_size"] // arch["num_attention_heads"]
    if backends and width not in VLLM_HEAD_DIMS:
        problems.append(
            f"scales.{scale}.architecture.head_dim: {width} is not a head size vLLM's "
            f"attention supports {VLLM_HEAD_DIMS} (asked for by {', '.join(backends)}: vllm)"
        )
    if arch["num_attention_heads"] % arch["num_key_value_heads"]:
        problems.append(
            f"scales.{scale}.architecture.num_key_value_heads: must divide num_attention_heads"
        )
    return problems


def _data_problems(config: Mapping) -> list[str]:
    """Benchmarks and the training set whose data cannot be what they are for."""
    problems = []
    if VALIDATION_SPLIT in config["benchmarks"]:
        problems.append(
            f"benchmarks.{VALIDATION_SPLIT}: the name is the validation split's "
            "(data.validation); give the benchmark another"
        )
    for name, bench in config["benchmarks"].items():
        if bench["dataset"] is None and "task" not in bench:
            problems.append(
                f"benchmarks.{name}: needs a `task` (its synthetic stand-in) when `dataset` is null"
            )
        if bench["dataset"] is not None and bench["dataset"]["layout"] == "opsd_train":
            problems.append(
                f"benchmarks.{name}.dataset.layout: 'opsd_train' is the training-set layout"
            )
    training_set = config["data"]["training_set"]
    if training_set is not None and training_set["layout"] != "opsd_train":
        problems.append(
            f"data.training_set.layout: {training_set['layout']!r} is a benchmark layout; "
            "the training set needs problems with reference solutions ('opsd_train')"
        )
    return problems


def _premise_probe_problems(config: Mapping) -> list[str]:
    """A probed method that has no gates to measure, or that the probe cannot score."""
    if config.get("premise_probe") is None:
        return []
    name = PremiseProbeSettings.from_config(config["premise_probe"]).method
    method = config["methods"].get(name)
    if method is None:
        return [f"premise_probe.method: unknown method {name!r}"]
    problems = []
    if method.get("objective", "distill") != "distill" or method.get("grpo"):
        problems.append(
            f"premise_probe.method: {name!r} is not a distillation method without a grpo term"
        )
    aggregation = AGGREGATION_SPECS.get(method["aggregation"])  # an unknown one is named elsewhere
    if aggregation is not None and not aggregation.gated:
        gated = sorted(a for a, spec in AGGREGATION_SPECS.items() if spec.gated)
        problems.append(
            f"premise_probe.method: {name!r} aggregates by {method['aggregation']!r}, which has "
            f"no gates to measure (gated: {', '.join(gated)})"
        )
    return problems


def _output_problems(group: str, name: str, spec: Mapping, config: Mapping) -> list[str]:
    """A table or figure entry: its scale and methods exist, its kind and options are known."""
    where = f"{group}.{name}"
    problems = []
    for scale in spec_scales(spec):
        if scale not in config["scales"]:
            problems.append(f"{where}.scale: unknown scale {scale!r}")
    for method in spec["methods"]:
        if method not in config["methods"]:
            problems.append(f"{where}.methods: unknown method {method!r}")
    return problems + spec_problems(group, name, dict(spec))


def _embedded_output_problems(config: Mapping) -> list[str]:
    """An experiment that builds outputs at released models (e.g. the paper overlay) must say the
    scale of each: a table or figure it leaves at an embedded scale (the default's ``tiny``,
    inherited from workflow_config.yaml) would be a tiny-model result among the paper's."""
    known = config["scales"]

    def embedded(scale: str) -> bool:
        return known[base_scale(config, scale)].get("source") == "embedded"

    outputs = [
        (f"{group}.{name}", spec_scales(spec))
        for group in GROUPS
        for name, spec in config[group].items()
        if all(scale in known for scale in spec_scales(spec))
    ]
    released = sorted({s for _, scales in outputs for s in scales if not embedded(s)})
    if not released:
        return []
    return [
        f"{where}.scale: {scale!r} is an embedded scale, but this experiment builds its other "
        f"outputs at released models ({', '.join(released)}); set this entry's scale in the "
        "overlay (or leave the entry out)"
        for where, scales in outputs
        for scale in scales
        if embedded(scale)
    ]


def non_finite_problems(node: object, path: tuple[str, ...] = ()) -> list[str]:
    """A problem for every float under ``node`` that is ``.inf``, ``-.inf`` or ``.nan``.

    A schema's ``minimum`` cannot catch them (``.inf > 0``; every comparison with NaN is false),
    and training would only die on them later.
    """
    if isinstance(node, float) and not math.isfinite(node):
        return [f"{'.'.join(path) or '<top level>'}: {node} is not a finite number"]
    if isinstance(node, Mapping):
        items = ((str(key), value) for key, value in node.items())
    elif isinstance(node, list | tuple):
        items = ((str(index), value) for index, value in enumerate(node))
    else:
        return []
    return [problem for key, value in items for problem in non_finite_problems(value, (*path, key))]
