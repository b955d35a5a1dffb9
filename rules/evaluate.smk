# Avg@k evaluation of one checkpoint on every benchmark (and the validation split, if the config
# has one), in two stages: sampling the responses (the expensive part) and grading them. A grader
# change reruns grading only.


rule generate_checkpoint_responses:
    input:
        unpack(get_base_model_inputs),
        adapter=LAYOUT.adapter(),
        # The adapter's rank and scale (lora_alpha): they change every response as its weights do.
        adapter_config=adapter_config_of(LAYOUT.adapter()),
        benchmarks=EXPERIMENT.evaluation_files(),
    output:
        responses=LAYOUT.checkpoint_file(RESPONSES),
    log:
        LAYOUT.log("generate_checkpoint_responses", checkpoint_key()),
    benchmark:
        LAYOUT.job_timing("generate_checkpoint_responses", checkpoint_key())
    # Kept shards survive a preemption: a retry generates only the missing ones.
    retries: PREEMPTIBLE_RETRIES
    conda:
        EXPERIMENT.generation_env
    threads: 1
    resources:
        **gpu_resources(EXPERIMENT.evaluation_gpus),
    params:
        base_model=get_base_model,
        benchmarks=EXPERIMENT.evaluation_sets,
        generation=get_generation,
    script:
        "scripts/generate_checkpoint_responses.py"


rule grade_checkpoint:
    input:
        responses=LAYOUT.checkpoint_file(RESPONSES),
    output:
        samples=LAYOUT.checkpoint_file(SAMPLES),
        summary=LAYOUT.checkpoint_file(SUMMARY),
    log:
        LAYOUT.log("grade_checkpoint", checkpoint_key()),
    benchmark:
        LAYOUT.job_timing("grade_checkpoint", checkpoint_key())
    # Grading is minutes of CPU: the profile packs many into one SLURM job (group-components).
    group:
        "grading"
    conda:
        "../envs/cpu.yaml"
    threads: 1
    params:
        benchmarks=EXPERIMENT.benchmarks,
        validation=EXPERIMENT.validation_set,
        grading=EXPERIMENT.grading,
    script:
        "scripts/grade_checkpoint.py"
