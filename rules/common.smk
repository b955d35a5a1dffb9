# The experiment the config describes, and the small named input functions of the rules. What
# a config means (its runs, files, settings and report contexts) lives in dashrepro.experiment;
# each function here passes a job's wildcards to it.
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "src"))

from dashrepro.experiment.config import (  # noqa: E402
    snakemake_config_sources,
    validate_config,
)
from dashrepro.experiment.semantics import (  # noqa: E402
    vllm_backend_keys,
    vllm_backend_problems,
)
from dashrepro.experiment.pins import unpinned_revisions  # noqa: E402
from dashrepro.experiment.plan import plan_markdown  # noqa: E402
from dashrepro.experiment.workflow import Experiment  # noqa: E402
from dashrepro.hub import SNAPSHOT_RECORD, model_id_of  # noqa: E402
from dashrepro.layout import (  # noqa: E402
    AUDIT_REPORT,
    BASE_ACCURACY,
    BASE_LIFT,
    CELL_STATISTICS,
    HELDOUT_SELECTION,
    MODEL_WEIGHTS,
    PAIRED_DIFFERENCES,
    PREMISE_BRANCHES,
    PREMISE_FIGURE,
    PREMISE_ROLLOUTS,
    PREMISE_STATISTICS,
    PREMISE_TOKENS,
    REPRODUCTION_GAP,
    RESPONSES,
    ROLLOUT_WEIGHTS,
    SAMPLE_CHANGES,
    SAMPLES,
    SFT_HISTORY,
    STATISTICS_REPORT,
    STUDENT_SAMPLES,
    SUMMARY,
    TEACHER_CONTEXTS,
    TEACHER_SAMPLES,
    TOKEN_TRACES,
    TRAIN_DATA,
    TRAIN_METRICS,
    checkpoint_key,
    run_key,
)
from snakemake_interface_executor_plugins.settings import ExecMode  # noqa: E402

# `configfile:` loaded the YAML, then Snakemake merged any --configfile overlays and --config
# values over it; expand the method grids and defaults into `methods` (in place), then validate
# the result against the JSON schema, the cross-field rules and the parameter ranges, naming
# every bad key and the file that set it. Each file is read again for that, and a key it gives
# twice (which Snakemake's loader lets the last win) stops the run, naming the file and lines.
validate_config(
    config,
    *snakemake_config_sources(
        os.path.join(workflow.basedir, "workflow_config.yaml"),
        workflow.config_settings.configfiles,
        workflow.config_settings.config,
    ),
)

EXPERIMENT = Experiment(config)
# Every results path (dashrepro.layout): this experiment's, and the published tables'.
LAYOUT = EXPERIMENT.layout
PUBLISHED_LAYOUT = EXPERIMENT.published_layout

# Retries of the preemptible rules (training, generation, base evaluation), in the Snakemake
# that schedules the jobs only. A rule's `retries` applies as well in the Snakemake that runs a
# job inside its SLURM job, and in the one under its srun step, whatever `--retries` they get:
# a job whose step failed (a preemption notice, the trainer's exit 75) would be rerun in place
# instead of failing its SLURM job for a resubmission, and a failure retried 4 x 4 x 4 times.
PREEMPTIBLE_RETRIES = 3 if workflow.exec_mode == ExecMode.DEFAULT else 0


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


def gpu_resources(gpus):
    """A job's GPU request for the SLURM executor: `gpu` GPUs on one node, nothing on CPU."""
    return {"gpu": gpus, "nodes": 1} if gpus else {}


# Input and params functions: a job's wildcards in, what the experiment says out.
def get_training_set_source(wildcards):
    return EXPERIMENT.training_set_source()


def get_benchmark_source(wildcards):
    return EXPERIMENT.benchmark_source(wildcards.bench)


def get_model_revision_key(wildcards):
    return EXPERIMENT.model_revision_key(wildcards.repo, wildcards.revision)


def get_base_model_inputs(wildcards):
    return EXPERIMENT.base_model_inputs(wildcards.scale)


def get_base_model_inputs_of(scale):
    """The base model's inputs of a rule made per scale (its scale a value, not a wildcard)."""
    return lambda wildcards: EXPERIMENT.base_model_inputs(scale)


def get_base_model(wildcards):
    return EXPERIMENT.base_model_ref(wildcards.scale)


def adapter_config_of(adapter):
    """The PEFT config beside a checkpoint's weights (a path or pattern of LAYOUT.adapter): its
    rank and scale shape every sampled response, so training declares it and generation reads
    it as an input."""
    return str(Path(adapter).with_name("adapter_config.json"))


def get_generation(wildcards):
    return EXPERIMENT.generation_of(wildcards.scale)


def get_run_summaries(wildcards):
    """Evaluation summaries of every checkpoint of one run (input of selection)."""
    return EXPERIMENT.checkpoint_eval_files(
        SUMMARY, wildcards.method, wildcards.scale, wildcards.seed
    )


def get_run_samples(wildcards):
    """Graded samples of every checkpoint of one run: selection recomputes each summary."""
    return EXPERIMENT.checkpoint_eval_files(
        SAMPLES, wildcards.method, wildcards.scale, wildcards.seed
    )


def get_report_inputs(group):
    """Input function of the `table` / `figure` rule: the sets its entry's kind needs."""
    wildcard = group[:-1]
    return lambda wildcards: EXPERIMENT.report_inputs(
        group, getattr(wildcards, wildcard)
    )


def get_statistics_inputs(wildcards):
    return EXPERIMENT.statistics_inputs()


def get_audit_inputs(wildcards):
    return EXPERIMENT.audit_inputs()
