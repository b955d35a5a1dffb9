# The base model: the tiny Qwen3 network warm-started by SFT, or a released model fetched once at
# its pinned commit; and the record of its student and privileged-teacher accuracies
# (distillation needs a teacher that is better than the student).


# A localrule (Snakefile): it runs where Snakemake runs, which has the internet that compute
# nodes often lack. Keyed by model and commit, so experiments share a download and a new commit
# is a new folder. An unpinned revision stops here, before any GPU job, saying how to pin it.
rule download_model:
    output:
        snapshot=f"resources/models/{{repo}}/{{revision}}/{SNAPSHOT_RECORD}",
    log:
        "resources/logs/download_model/{repo}/{revision}.log",
    benchmark:
        "resources/job_timings/download_model/{repo}/{revision}.tsv"
    conda:
        "../envs/cpu.yaml"
    params:
        model=lambda wc: model_id_of(wc.repo),
        revision=lambda wc: wc.revision,
        where=get_model_revision_key,
    script:
        "scripts/download_model.py"


# Or copies the warm start shipped with the package, where its recipe is this run's
# (dashrepro.embedded.warm_start; the log says which, and why not). The shipped files are not
# inputs: their paths from the working directory change when a run's folder moves, and their
# sha256 are in the model folder's recipe.json instead.
rule sft_base_model:
    input:
        train=LAYOUT.data(TRAIN_DATA),
        tokenizer=LAYOUT.tokenizer(),
    output:
        weights=f"{LAYOUT.base_model()}/{MODEL_WEIGHTS}",
        history=f"{LAYOUT.base_model()}/{SFT_HISTORY}",
    log:
        LAYOUT.log("sft_base_model", "{scale}"),
    benchmark:
        LAYOUT.job_timing("sft_base_model", "{scale}")
    conda:
        "../envs/cpu.yaml"
    threads: 2
    params:
        architecture=lambda wc: config["scales"][wc.scale]["architecture"],
        sft=lambda wc: config["scales"][wc.scale]["sft"],
        protocol=config["protocol"],
        teacher_views=EXPERIMENT.teacher_views,
    script:
        "scripts/sft_base_model.py"


rule evaluate_base_model:
    input:
        unpack(get_base_model_inputs),
        benchmarks=EXPERIMENT.benchmark_files(),
    output:
        accuracy=report(
            LAYOUT.base_eval_file(BASE_ACCURACY),
            caption="../report/base_accuracy.rst",
            category="Evaluation",
        ),
        student_samples=LAYOUT.base_eval_file(STUDENT_SAMPLES),
        teacher_samples=LAYOUT.base_eval_file(TEACHER_SAMPLES),
    log:
        LAYOUT.log("evaluate_base_model", "{scale}"),
    benchmark:
        LAYOUT.job_timing("evaluate_base_model", "{scale}")
    # First when the base model is ready: it needs both cores, and would otherwise wait for
    # every single-core job of the DAG to finish (about 2 minutes at the end of the default).
    priority: 10
    retries: PREEMPTIBLE_RETRIES
    conda:
        EXPERIMENT.generation_env
    threads: 2
    resources:
        **gpu_resources(EXPERIMENT.evaluation_gpus),
    params:
        base_model=get_base_model,
        benchmarks=EXPERIMENT.benchmarks,
        generation=EXPERIMENT.generation,
        grading=EXPERIMENT.grading,
        protocol=config["protocol"],
        teacher_views=EXPERIMENT.teacher_views,
    script:
        "scripts/evaluate_base_model.py"
