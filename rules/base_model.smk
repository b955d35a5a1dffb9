# The base model: the tiny Qwen3 network warm-started by SFT, and the record of its student and
# privileged-teacher accuracies (distillation needs a teacher that is better than the student).


rule sft_base_model:
    input:
        train=f"{RESULTS}/data/train.parquet",
        tokenizer=f"{RESULTS}/tokenizer/tokenizer.json",
    output:
        weights=f"{RESULTS}/base_model/{{scale}}/model.safetensors",
        history=f"{RESULTS}/base_model/{{scale}}/sft_history.parquet",
    log:
        f"{RESULTS}/logs/sft_base_model/{{scale}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/sft_base_model/{{scale}}.tsv"
    conda:
        "../envs/cpu.yaml"
    threads: 2
    params:
        architecture=lambda wc: config["scales"][wc.scale]["architecture"],
        sft=lambda wc: config["scales"][wc.scale]["sft"],
        protocol=config["protocol"],
    script:
        "scripts/sft_base_model.py"


rule evaluate_base_model:
    input:
        unpack(base_model_inputs_of),
        benchmarks=list(benchmark_files().values()),
    output:
        accuracy=report(
            f"{RESULTS}/eval/base/{{scale}}/accuracy.json",
            caption="../report/base_accuracy.rst",
            category="Evaluation",
        ),
        student_samples=f"{RESULTS}/eval/base/{{scale}}/student_samples.parquet",
        teacher_samples=f"{RESULTS}/eval/base/{{scale}}/teacher_samples.parquet",
    log:
        f"{RESULTS}/logs/evaluate_base_model/{{scale}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/evaluate_base_model/{{scale}}.tsv"
    retries: 3
    conda:
        GENERATION_ENV
    threads: 2
    resources:
        **gpu_resources(EVALUATION_GPUS),
    params:
        base_model=base_model_of,
        benchmarks=BENCHMARKS,
        generation=GENERATION,
        grading=GRADING,
        protocol=config["protocol"],
    script:
        "scripts/evaluate_base_model.py"
