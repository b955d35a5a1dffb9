# The DASH reproduction workflow: data -> base model -> LoRA self-distillation -> Avg@k
# evaluation of every checkpoint -> best-checkpoint selection -> tables and figures.
#
#   snakemake --cores 2 all           # the embedded default, CPU only, minutes
#   snakemake -n all_tables           # what would run
#
# Every rule is a thin call into src/dashrepro; the science lives there.
import os

from snakemake.utils import min_version

min_version("9.0")


configfile: os.path.join(workflow.basedir, "workflow_config.yaml")


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/onstart.smk"
include: "rules/data.smk"
include: "rules/base_model.smk"
include: "rules/premise.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/select.smk"
include: "rules/report.smk"


onstart:
    stop_unless_downloads_are_pinned()
    stop_unless_jobs_can_import_vllm()
    stop_unless_local_jobs_have_their_device()
    start_job_server()


onsuccess:
    stop_job_server()


onerror:
    stop_job_server()


# Run where Snakemake runs (a cluster's login node): the targets, the cheap CPU steps that read
# other jobs' outputs, and the data preparation and model download, which need the internet that
# compute nodes often lack.
localrules:
    all,
    all_tables,
    all_figures,
    premise,
    published_tables,
    train_all_runs,
    evaluate_all_runs,
    select_best_checkpoint,
    table,
    figure,
    published_table,
    statistics,
    audit,
    prepare_training_set,
    prepare_benchmark,
    download_model,


rule all:
    input:
        EXPERIMENT.table_files(),
        EXPERIMENT.base_accuracy_files(),
        EXPERIMENT.figure_files(),
        EXPERIMENT.analysis_report_files(),
        EXPERIMENT.premise_files(),


# The premise probe at every base model (rules/premise.smk), where the config has one.
rule premise:
    input:
        EXPERIMENT.premise_files(),


rule all_tables:
    input:
        EXPERIMENT.table_files(),
        EXPERIMENT.base_accuracy_files(),


rule all_figures:
    input:
        EXPERIMENT.figure_files(),


rule published_tables:
    input:
        EXPERIMENT.published_table_files(),


rule train_all_runs:
    input:
        EXPERIMENT.train_all_runs_files(),


rule evaluate_all_runs:
    input:
        EXPERIMENT.evaluate_all_runs_files(),
