# LoRA on-policy self-distillation: one job per (method, scale, seed), a PEFT adapter folder
# per checkpoint. One rule per scale, because each scale has its own checkpoint steps and
# Snakemake's outputs cannot depend on a wildcard's value.

from dashrepro.training.methods import training_entry

for _scale in config["scales"]:

    rule:
        name:
            f"train_lora_{_scale}"
        input:
            unpack(get_base_model_inputs_of(_scale)),
            train=LAYOUT.data(TRAIN_DATA),
        output:
            checkpoints=[
                LAYOUT.adapter(scale=_scale, step=step)
                for step in EXPERIMENT.steps(_scale)
            ],
            adapter_configs=[
                adapter_config_of(LAYOUT.adapter(scale=_scale, step=step))
                for step in EXPERIMENT.steps(_scale)
            ],
            metrics=LAYOUT.run_file(TRAIN_METRICS, scale=_scale),
            rollout_weights=LAYOUT.run_file(ROLLOUT_WEIGHTS, scale=_scale),
            traces=LAYOUT.run_file(TOKEN_TRACES, scale=_scale),
            contexts=LAYOUT.run_file(TEACHER_CONTEXTS, scale=_scale),
        log:
            LAYOUT.log("train_lora", run_key(scale=_scale)),
        benchmark:
            LAYOUT.job_timing("train_lora", run_key(scale=_scale))
        # Preemption (SIGTERM/SIGUSR1) saves a state and exits 75: a retry resumes it.
        retries: PREEMPTIBLE_RETRIES
        conda:
            EXPERIMENT.training_env(_scale)
        threads: EXPERIMENT.train_settings(_scale).num_processes
        resources:
            **gpu_resources(EXPERIMENT.training_gpus(_scale)),
        params:
            base_model=lambda wc, scale=_scale: EXPERIMENT.base_model_ref(scale),
            method=lambda wc: training_entry(config["methods"][wc.method]),
            train=config["scales"][_scale]["train"],
            lora=config["scales"][_scale]["lora"],
            protocol=config["protocol"],
        script:
            "scripts/train_lora.py"
