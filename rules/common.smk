# Shared configuration and the small named input functions of the workflow.
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))


# `configfile:` loaded the YAML, then Snakemake merged any --configfile overlays and --config
# values over it; expand the method grids and defaults into `methods` (in place), then validate
# the result against the JSON schema, the cross-field rules and the parameter ranges, naming
# every bad key and the file that set it. Each file is read again for that, and a key it gives
# twice (which Snakemake's loader lets the last win) stops the run, naming the file and lines.
from dashrepro.analysis.registry import (
    SCORE_KINDS,
    kind_module,
    kind_needs,
)  # noqa: E402
from dashrepro.analysis.tables import (  # noqa: E402
    published_layout,
    published_table_specs,
)
from dashrepro.config import (  # noqa: E402
    VALIDATION_SPLIT,
    snakemake_config_sources,
    validate_config,
    vllm_backend_problems,
)
from dashrepro.hub import SNAPSHOT_RECORD, model_id_of, snapshot_folder  # noqa: E402
from dashrepro.layout import (  # noqa: E402
    Results,
    checkpoint_key,
    resolve_repo_path,
    run_key,
)
from dashrepro.parameters import METHOD_TRAINING_KEYS, teacher_views_of  # noqa: E402
from dashrepro.plan import plan_markdown  # noqa: E402
from dashrepro.run_matrix import (  # noqa: E402
    base_scale,
    checkpoint_steps,
    run_matrix,
    spec_scales,
)
from snakemake_interface_executor_plugins.settings import ExecMode  # noqa: E402

validate_config(
    config,
    *snakemake_config_sources(
        os.path.join(workflow.basedir, "workflow_config.yaml"),
        workflow.config_settings.configfiles,
        workflow.config_settings.config,
    ),
)

# Retries of the preemptible rules (training, generation, base evaluation), in the Snakemake
# that schedules the jobs only. A rule's `retries` applies as well in the Snakemake that runs a
# job inside its SLURM job, and in the one under its srun step, whatever `--retries` they get:
# a job whose step failed (a preemption notice, the trainer's exit 75) would be rerun in place
# instead of failing its SLURM job for a resubmission, and a failure retried 4 x 4 x 4 times.
PREEMPTIBLE_RETRIES = 3 if workflow.exec_mode == ExecMode.DEFAULT else 0

EXP = config["experiment"]
# Every results path (dashrepro.layout): this experiment's, and the published tables'.
LAYOUT = Results(EXP)
PUBLISHED_LAYOUT = Results("published")
BENCHMARKS = list(config["benchmarks"])
# The held-out split checkpoints are also evaluated on (data.validation), or None.
VALIDATION = config["data"].get("validation")
VALIDATION_FILE = LAYOUT.data("validation.parquet") if VALIDATION else None
# The name it is graded and summarised under, or None.
VALIDATION_SET = VALIDATION_SPLIT if VALIDATION else None
# What a checkpoint is sampled on: the benchmarks, then the validation split if there is one.
EVALUATION_SETS = BENCHMARKS + ([VALIDATION_SET] if VALIDATION else [])
# The privileged teacher's layouts the configured methods read: the embedded warm start teaches
# each, and the base model's evaluation measures the teacher in each.
TEACHER_VIEWS = list(teacher_views_of(config["methods"]))
# The published numbers ship with the workflow: found from any working directory.
PUBLISHED = str(resolve_repo_path(config["published_numbers"]))
# The tables published_tables renders: each config table whose published table the numbers
# hold, at the scales they hold it (not the experiment's), so the paper's tables come out the same
# whatever experiment is selected.
PUBLISHED_TABLES = published_table_specs(config["tables"], published_layout(PUBLISHED))
# (method, scale) -> its training seeds: the `runs` groups, and every pair a table or figure
# reports on (with the global `seeds` unless a group names it).
RUNS = run_matrix(config)
# The scales the tables and figures report on: evaluated (base model included) and trained.
REPORT_SCALES = sorted(
    {
        scale
        for group in ("tables", "figures")
        for spec in config[group].values()
        for scale in spec_scales(spec)
    }
)
# Their base models: a derived scale (`derive_from`) trains from its base scale's model.
BASE_SCALES = sorted({base_scale(config, scale) for scale in REPORT_SCALES})
# Evaluation settings split by the stage that uses them, so a grader change reruns grading only.
GENERATION_KEYS = (
    "backend",
    "vllm",
    "samples_per_problem",
    "temperature",
    "top_p",
    "max_new_tokens",
    "seed",
    "shard_size",
)
GRADING_KEYS = ("grading_workers", "grading_timeout_s")
GENERATION = {key: config["evaluation"].get(key) for key in GENERATION_KEYS}
# `prompt` absent: the bare problem, and the params (hence the jobs) stay as they were.
if "prompt" in config["evaluation"]:
    GENERATION["prompt"] = config["evaluation"]["prompt"]
if GENERATION["backend"] != "vllm":
    GENERATION.pop("vllm")  # vLLM settings do not change what HF generate samples
GRADING = {key: config["evaluation"][key] for key in GRADING_KEYS}


def generation_of(wildcards):
    """A checkpoint's generation settings: GENERATION with its scale's own `evaluation` keys."""
    own = config["scales"][wildcards.scale].get("evaluation") or {}
    return {**GENERATION, **own}


# The conda environment of the generating rules: vLLM needs the GPU stack.
GENERATION_ENV = (
    "../envs/gpu.yaml" if GENERATION["backend"] == "vllm" else "../envs/cpu.yaml"
)


def training_env(scale):
    """envs/gpu.yaml for a GPU run (vLLM rollouts, bf16 or DeepSpeed), else envs/cpu.yaml."""
    train = config["scales"][scale]["train"]
    gpu = (
        train.get("rollout_backend") == "vllm"
        or train.get("precision") == "bf16"
        or train.get("deepspeed_config")
    )
    return "../envs/gpu.yaml" if gpu else "../envs/cpu.yaml"


def stop_unless_jobs_can_import_vllm():
    """Before any job (onstart: not in a dry run): a job about to run with a vllm backend
    needs an interpreter with vLLM. Without a deployment method, jobs run in Snakemake's own.
    `--touch` runs no job.
    """
    from importlib.util import find_spec

    from snakemake.exceptions import WorkflowError
    from snakemake.settings.types import DeploymentMethod

    deployed = workflow.deployment_settings.deployment_method & {
        DeploymentMethod.CONDA,
        DeploymentMethod.APPTAINER,
    }
    if workflow.touch or deployed or find_spec("vllm"):
        return
    rules = {job.rule.name for job in workflow.dag.needrun_jobs()}
    problems = vllm_backend_problems(config, rules, sys.executable)
    if problems:
        raise WorkflowError("\n".join(problems))


def gpu_resources(gpus):
    """A job's GPU request for the SLURM executor: `gpu` GPUs on one node, nothing on CPU."""
    return {"gpu": gpus, "nodes": 1} if gpus else {}


def training_gpus(scale):
    """GPUs of a scale's training job: its `num_processes`, so config and profile agree."""
    if training_env(scale) != "../envs/gpu.yaml":
        return 0
    return int(config["scales"][scale]["train"].get("num_processes", 1))


# One GPU for a vLLM evaluation job (generation, the base model's evaluation), none on HF/CPU.
EVALUATION_GPUS = 1 if GENERATION["backend"] == "vllm" else 0


wildcard_constraints:
    method="[A-Za-z0-9_]+",
    table="|".join(config["tables"]),
    figure="|".join(config["figures"]),
    scale="[A-Za-z0-9_]+",
    repo="[A-Za-z0-9._-]+",
    revision="[A-Za-z0-9._-]+",
    seed=r"\d+",
    step=r"\d+",
    bench="[A-Za-z0-9_]+",


def method_training_spec(wildcards):
    """The method's config without its display label, so a relabel does not retrain."""
    spec = config["methods"][wildcards.method]
    return {key: spec[key] for key in METHOD_TRAINING_KEYS if key in spec}


def steps_for_scale(scale):
    return checkpoint_steps(config["scales"][scale]["train"])


SYNTHETIC_BENCHMARKS = [
    b for b in BENCHMARKS if config["benchmarks"][b]["dataset"] is None
]


def synthetic_data_params():
    """What the synthetic data depends on (not the labels or the real datasets' specs)."""
    params = {key: config["data"][key] for key in ("seed", "n_train")}
    if VALIDATION:  # absent otherwise: the job and its outputs stay as they were
        params["validation"] = VALIDATION
    return params


def synthetic_benchmark_specs():
    return {
        b: {
            "task": config["benchmarks"][b]["task"],
            "n_problems": config["benchmarks"][b]["n_problems"],
        }
        for b in SYNTHETIC_BENCHMARKS
    }


def local_dataset_file(spec):
    """A real dataset's local file as a rule input (so Snakemake tracks it), or none for the hub."""
    return {"source": spec["path"]} if "path" in spec else {}


def training_set_source(wildcards):
    spec = config["data"]["training_set"]
    if spec is None:
        return {
            "source": LAYOUT.synthetic("train.parquet"),
            **{
                f"{name}_source": path
                for name, path in validation_outputs(LAYOUT.synthetic).items()
            },
        }
    return local_dataset_file(spec)


def benchmark_source(wildcards):
    spec = config["benchmarks"][wildcards.bench]["dataset"]
    if spec is None:
        return {"source": LAYOUT.synthetic(f"benchmarks/{wildcards.bench}.parquet")}
    return local_dataset_file(spec)


def benchmark_files():
    return {b: LAYOUT.benchmark(b) for b in BENCHMARKS}


def evaluation_files():
    """The files of EVALUATION_SETS, in its order."""
    files = list(benchmark_files().values())
    return files + ([VALIDATION_FILE] if VALIDATION else [])


def validation_outputs(folder):
    """The validation split among a data rule's outputs, when the config asks for one;
    ``folder``: ``LAYOUT.data`` or ``LAYOUT.synthetic``."""
    return {"validation": folder("validation.parquet")} if VALIDATION else {}


def base_model_dir(scale):
    """The embedded base model's folder; a derived scale shares its base scale's."""
    return LAYOUT.base_model(base_scale(config, scale))


def hub_model_dir(scale):
    """A Hugging Face model's local snapshot (rule download_model), by id and commit; None for
    the embedded model or a local folder."""
    spec = config["scales"][scale]
    if spec["source"] == "embedded" or os.path.isdir(spec["model"]):
        return None
    return snapshot_folder(spec["model"], spec.get("revision"))


def model_revision_key(wildcards):
    """The config key that pins a downloaded model (named by download_model's error)."""
    folder = snapshot_folder(model_id_of(wildcards.repo), wildcards.revision)
    for scale in config["scales"]:
        if hub_model_dir(scale) == folder:
            return f"scales.{scale}.revision"
    return "scales.<scale>.revision"


def base_model_ref(scale):
    """What from_pretrained loads: the embedded model's folder, a hub model's downloaded
    snapshot, or the scale's local folder."""
    spec = config["scales"][scale]
    if spec["source"] == "embedded":
        return base_model_dir(scale)
    return hub_model_dir(scale) or spec["model"]


def base_model_inputs(scale):
    """Base model files that rules take as inputs: the embedded model's weights, a hub
    model's snapshot record (so its download runs first), or a local folder."""
    spec = config["scales"][scale]
    if spec["source"] == "embedded":
        return {"base_model": f"{base_model_dir(scale)}/model.safetensors"}
    if hub_model_dir(scale):
        return {"base_model": f"{hub_model_dir(scale)}/{SNAPSHOT_RECORD}"}
    return {"base_model": spec["model"]}


def base_model_inputs_of(wildcards):
    return base_model_inputs(wildcards.scale)


def base_model_of(wildcards):
    return base_model_ref(wildcards.scale)


def train_all_runs_files():
    """Every run of the matrix: each (method, scale) pair with each of its seeds."""
    return [
        f"{LAYOUT.run(method, scale, seed)}/train_metrics.parquet"
        for (method, scale), seeds in RUNS.items()
        for seed in seeds
    ]


def checkpoint_files(wildcards):
    """The adapter files of every checkpoint of one run (the train rule's outputs)."""
    return [
        LAYOUT.adapter(wildcards.method, wildcards.scale, wildcards.seed, step)
        for step in steps_for_scale(wildcards.scale)
    ]


def checkpoint_eval_files(method, scale, seed, name):
    """One evaluation file (summary.json, samples.parquet) of every checkpoint of one run."""
    return [
        f"{LAYOUT.checkpoint_eval(method, scale, seed, step)}/{name}"
        for step in steps_for_scale(scale)
    ]


def run_summaries(wildcards):
    """Evaluation summaries of every checkpoint of one run (input of selection)."""
    return checkpoint_eval_files(
        wildcards.method, wildcards.scale, wildcards.seed, "summary.json"
    )


def run_samples(wildcards):
    """Graded samples of every checkpoint of one run: selection recomputes each summary."""
    return checkpoint_eval_files(
        wildcards.method, wildcards.scale, wildcards.seed, "samples.parquet"
    )


def result_keys(name, scales, methods):
    """What each file of an input set of `dashrepro.analysis.registry.INPUT_SETS` is, over the
    (method, scale) pairs of a table or figure and each pair's seeds: a run's [method, scale,
    seed], a checkpoint's [method, scale, seed, step], a scale (its base model's accuracy).
    """
    runs = [
        [m, scale, s] for scale in scales for m in methods for s in RUNS[(m, scale)]
    ]
    if name in ("selections", "traces", "metrics"):
        return runs
    if name in ("summaries", "samples"):
        return [[*run, t] for run in runs for t in steps_for_scale(run[1])]
    if name == "base_accuracy":
        return list(scales)
    if name == "published":
        return [None]
    raise ValueError(f"unknown input set {name!r}")


# The file of each key of an input set (result_keys): files and keys come from one list, so
# a table or figure module can zip them.
RESULT_FILES = {
    "selections": lambda m, c, s: LAYOUT.selection(m, c, s),
    "summaries": lambda m, c, s, t: f"{LAYOUT.checkpoint_eval(m, c, s, t)}/summary.json",
    "samples": lambda m, c, s, t: f"{LAYOUT.checkpoint_eval(m, c, s, t)}/samples.parquet",
    "traces": lambda m, c, s: f"{LAYOUT.run(m, c, s)}/token_traces.parquet",
    "metrics": lambda m, c, s: f"{LAYOUT.run(m, c, s)}/train_metrics.parquet",
    "base_accuracy": lambda c: f"{LAYOUT.base_eval(base_scale(config, c))}/accuracy.json",
    "published": lambda _: PUBLISHED,
}


def result_set(name, scales, methods):
    """The files of one input set, in the order of ``result_keys(name, scales, methods)``."""
    keys = result_keys(name, scales, methods)
    return [
        RESULT_FILES[name](*(key if isinstance(key, list) else [key])) for key in keys
    ]


def report_inputs(group):
    """Input function of the `table` / `figure` rule: the sets its entry's kind needs."""
    wildcard = group[:-1]

    def inputs(wildcards):
        spec = config[group][getattr(wildcards, wildcard)]
        needs = kind_needs(group, spec)
        return {
            name: result_set(name, spec_scales(spec), spec["methods"]) for name in needs
        }

    return inputs


def batch_layout(scale):
    """A scale's batch decomposition (what the batch_runtime table shows)."""
    train = config["scales"][scale]["train"]
    return {
        "micro_batch_size": train["micro_batch_size"],
        "grad_accumulation": train["grad_accumulation"],
        "num_processes": train.get("num_processes", 1),
    }


def report_context(group, name):
    """What a table or figure module may need besides its inputs: labels, order, seeds, and
    what each input file is (``input_keys``: per input set, ``result_keys``)."""
    spec = config[group][name]
    scales = spec_scales(spec)
    return {
        "input_keys": {
            need: result_keys(need, scales, spec["methods"])
            for need in kind_needs(group, spec)
        },
        "id": name,
        "experiment": EXP,
        "scale": scales[0],
        "scales": scales,
        "scale_labels": {s: config["scales"][s].get("label", s) for s in scales},
        "benchmarks": BENCHMARKS,
        "benchmark_labels": {b: config["benchmarks"][b]["label"] for b in BENCHMARKS},
        "method_labels": {m: config["methods"][m]["label"] for m in spec["methods"]},
        "seeds": sorted({s for m in spec["methods"] for s in RUNS[(m, scales[0])]}),
        "runs": {f"{m}/{c}": RUNS[(m, c)] for c in scales for m in spec["methods"]},
        "steps": steps_for_scale(scales[0]),
        "train": {s: batch_layout(s) for s in scales},
    }


def kind_caption(group, name):
    return kind_module(group, config[group][name]["kind"]).CAPTION


def table_files():
    return expand(
        LAYOUT.table(),
        table=config["tables"],
        ext=["csv", "md", "tex"],
    )


def figure_files():
    return expand(
        LAYOUT.figure(),
        figure=config["figures"],
        ext=["png", "pdf", "json"],
    )


def published_table_files():
    """The tables the paper's published numbers hold, drawn from those numbers."""
    return expand(
        PUBLISHED_LAYOUT.table(),
        table=PUBLISHED_TABLES,
        ext=["csv", "md", "tex"],
    )


def published_context(name):
    """What a table kind reads to draw ``name`` from the published numbers: labels and scales
    only, none of them the experiment's (``published_scale_labels`` head the scales)."""
    spec = PUBLISHED_TABLES[name]
    scales = spec_scales(spec)
    labels = config.get("published_scale_labels") or {}
    return {
        "id": name,
        "experiment": "published",
        "scales": scales,
        "scale_labels": {s: labels.get(s, s) for s in scales},
        "benchmarks": BENCHMARKS,
        "benchmark_labels": {b: config["benchmarks"][b]["label"] for b in BENCHMARKS},
        "method_labels": {m: config["methods"][m]["label"] for m in spec["methods"]},
    }


def base_accuracy_files():
    return [f"{LAYOUT.base_eval(scale)}/accuracy.json" for scale in BASE_SCALES]


# Statistics and audit: every cell of the scores tables (rows are methods, cells means over
# seeds of selected checkpoints), followed down to its graded samples.
SCORE_TABLES = {
    name: spec for name, spec in config["tables"].items() if spec["kind"] in SCORE_KINDS
}
SCORE_PAIRS = sorted(
    {
        (method, scale)
        for spec in SCORE_TABLES.values()
        for scale in spec_scales(spec)
        for method in spec["methods"]
    }
)


def score_checkpoints():
    """(method, scale, seed, step) of every candidate checkpoint of every scores-table run."""
    return [
        (m, c, s, t)
        for m, c in SCORE_PAIRS
        for s in RUNS[(m, c)]
        for t in steps_for_scale(c)
    ]


def score_files(name):
    """One file of every candidate checkpoint of every scores-table run (samples, responses),
    in the order of ``score_checkpoints()``."""
    return [f"{LAYOUT.checkpoint_eval(*key)}/{name}" for key in score_checkpoints()]


def statistics_inputs(wildcards):
    return {
        "tables": [LAYOUT.table(t, "csv") for t in SCORE_TABLES],
        "samples": score_files("samples.parquet"),
        "base_samples": [
            f"{LAYOUT.base_eval(base)}/student_samples.parquet" for base in SCORE_BASES
        ],
        "published": PUBLISHED,
    }


def statistics_keys():
    """What each input file of the statistics rule is, beside it in the same order (the script
    never parses a path): each samples file's (method, scale, seed, step), each base-samples
    file's scale, each table's id."""
    return {
        "samples": [list(key) for key in score_checkpoints()],
        "base_samples": SCORE_BASES,
        "tables": list(SCORE_TABLES),
    }


# The base model each scores-table scale trains from (a derived scale shares its base's).
SCORE_BASE_SCALES = {scale: base_scale(config, scale) for _, scale in SCORE_PAIRS}
SCORE_BASES = sorted(set(SCORE_BASE_SCALES.values()))


def audit_inputs(wildcards):
    """What the audit checks: the tables (every format), their selections, every candidate's
    graded samples, summaries and generations, and the adapters they came from."""
    runs = [(m, c, s) for m, c in SCORE_PAIRS for s in RUNS[(m, c)]]
    return {
        "tables": [LAYOUT.table(t, "csv") for t in SCORE_TABLES],
        # Their other formats too: an edited Markdown or LaTeX table stops the audit job.
        "rendered": [
            LAYOUT.table(t, ext) for t in SCORE_TABLES for ext in ("md", "tex")
        ],
        "selections": [LAYOUT.selection(m, c, s) for m, c, s in runs],
        "samples": score_files("samples.parquet"),
        "summaries": score_files("summary.json"),
        "responses": score_files("responses.parquet"),
        "adapters": [
            LAYOUT.adapter(m, c, s, t) for m, c, s in runs for t in steps_for_scale(c)
        ],
    }


def analysis_report_files():
    """The statistics report, the reproduction gap and the audit report (target `all`)."""
    return [
        LAYOUT.statistics("report.md"),
        LAYOUT.statistics("reproduction_gap.csv"),
        LAYOUT.audit("report.md"),
    ]
