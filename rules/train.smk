# LoRA on-policy self-distillation: one job per (method, scale, seed), a PEFT adapter folder
# per checkpoint. One rule per scale, because each scale has its own checkpoint steps and
# Snakemake's outputs cannot depend on a wildcard's value.

for _scale in config["scales"]:

    rule:
        name:
            f"train_lora_{_scale}"
        input:
            **base_model_inputs(_scale),
            train=f"{RESULTS}/data/train.parquet",
        output:
            checkpoints=[
                f"{RESULTS}/runs/{{method}}/{_scale}/seed{{seed}}/checkpoint-{step}/adapter_model.safetensors"
                for step in steps_for_scale(_scale)
            ],
            metrics=f"{RESULTS}/runs/{{method}}/{_scale}/seed{{seed}}/train_metrics.parquet",
            traces=f"{RESULTS}/runs/{{method}}/{_scale}/seed{{seed}}/token_traces.parquet",
            contexts=f"{RESULTS}/runs/{{method}}/{_scale}/seed{{seed}}/teacher_contexts.parquet",
        log:
            f"{RESULTS}/logs/train_lora/{{method}}/{_scale}/seed{{seed}}.log",
        benchmark:
            f"{RESULTS}/benchmarks/train_lora/{{method}}/{_scale}/seed{{seed}}.tsv"
        # Preemption (SIGTERM/SIGUSR1) saves a state and exits 75: a retry resumes it.
        retries: PREEMPTIBLE_RETRIES
        conda:
            training_env(_scale)
        threads: config["scales"][_scale]["train"].get("num_processes", 1)
        resources:
            **gpu_resources(training_gpus(_scale)),
        params:
            base_model=lambda wc, scale=_scale: base_model_ref(scale),
            method=method_training_spec,
            train=config["scales"][_scale]["train"],
            lora=config["scales"][_scale]["lora"],
            protocol=config["protocol"],
        script:
            "scripts/train_lora.py"
