# Avg@k evaluation of one checkpoint on every benchmark (and the validation split, if the config
# has one), in two stages: sampling the responses (the expensive part) and grading them. A grader
# change reruns grading only.


rule generate_checkpoint_responses:
    input:
        unpack(base_model_inputs_of),
        adapter=f"{RESULTS}/runs/{{method}}/{{scale}}/seed{{seed}}/checkpoint-{{step}}/adapter_model.safetensors",
        benchmarks=evaluation_files(),
    output:
        responses=f"{RESULTS}/eval/{{method}}/{{scale}}/seed{{seed}}/step{{step}}/responses.parquet",
    log:
        f"{RESULTS}/logs/generate_checkpoint_responses/{{method}}/{{scale}}/seed{{seed}}/step{{step}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/generate_checkpoint_responses/{{method}}/{{scale}}/seed{{seed}}/step{{step}}.tsv"
    # Kept shards survive a preemption: a retry generates only the missing ones.
    retries: PREEMPTIBLE_RETRIES
    conda:
        GENERATION_ENV
    threads: 1
    resources:
        **gpu_resources(EVALUATION_GPUS),
    params:
        base_model=base_model_of,
        benchmarks=EVALUATION_SETS,
        generation=generation_of,
    script:
        "scripts/generate_checkpoint_responses.py"


rule grade_checkpoint:
    input:
        responses=f"{RESULTS}/eval/{{method}}/{{scale}}/seed{{seed}}/step{{step}}/responses.parquet",
    output:
        samples=f"{RESULTS}/eval/{{method}}/{{scale}}/seed{{seed}}/step{{step}}/samples.parquet",
        summary=f"{RESULTS}/eval/{{method}}/{{scale}}/seed{{seed}}/step{{step}}/summary.json",
    log:
        f"{RESULTS}/logs/grade_checkpoint/{{method}}/{{scale}}/seed{{seed}}/step{{step}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/grade_checkpoint/{{method}}/{{scale}}/seed{{seed}}/step{{step}}.tsv"
    # Grading is minutes of CPU: the profile packs many into one SLURM job (group-components).
    group:
        "grading"
    conda:
        "../envs/cpu.yaml"
    threads: 1
    params:
        benchmarks=BENCHMARKS,
        validation=VALIDATION_SET,
        grading=GRADING,
    script:
        "scripts/grade_checkpoint.py"
