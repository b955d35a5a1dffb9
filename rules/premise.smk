# The premise probe: at each base model, before any training, K rollouts per training problem
# scored by the student and its privileged teacher, and the statistics of the paper's premise
# (dashrepro.premise; docs/premise.md). Only where the config has a `premise_probe` block. One
# rule per scale, as training: the probe runs in its scale's training environment and devices.

for _scale in EXPERIMENT.premise_scales:

    rule:
        name:
            f"premise_probe_{_scale}"
        input:
            unpack(get_base_model_inputs_of(_scale)),
            train=LAYOUT.data(TRAIN_DATA),
        output:
            tokens=LAYOUT.premise_file(PREMISE_TOKENS, _scale),
            rollouts=LAYOUT.premise_file(PREMISE_ROLLOUTS, _scale),
            branches=LAYOUT.premise_file(PREMISE_BRANCHES, _scale),
            csv=report(
                LAYOUT.premise_file(f"{PREMISE_STATISTICS}.csv", _scale),
                caption="../report/premise.rst",
                category="Premise",
            ),
            md=LAYOUT.premise_file(f"{PREMISE_STATISTICS}.md", _scale),
            json=LAYOUT.premise_file(f"{PREMISE_STATISTICS}.json", _scale),
            png=LAYOUT.premise_file(f"{PREMISE_FIGURE}.png", _scale),
            pdf=LAYOUT.premise_file(f"{PREMISE_FIGURE}.pdf", _scale),
        log:
            LAYOUT.log("premise_probe", _scale),
        benchmark:
            LAYOUT.job_timing("premise_probe", _scale)
        retries: PREEMPTIBLE_RETRIES
        conda:
            EXPERIMENT.training_env(_scale)
        threads: 2
        resources:
            **gpu_resources(EXPERIMENT.premise_gpus(_scale)),
        params:
            scale=_scale,
            base_model=lambda wc, scale=_scale: EXPERIMENT.base_model_ref(scale),
            probe=EXPERIMENT.premise_probe,
            method=EXPERIMENT.premise_method(),
            train=config["scales"][_scale]["train"],
            lora=config["scales"][_scale]["lora"],
            protocol=config["protocol"],
        script:
            "scripts/premise_probe.py"
