"""The embedded default cut to a run of a few minutes on 2 cores: the workflow tests' run and the
fault probe's (``benchmarks/faults.py``). Same DAG, every stage, far less of each.

    config = smoke_config(load_config("workflow_config.yaml"))   # experiment "e2e"
"""

from __future__ import annotations

import json

from dashrepro.experiment.run_matrix import BASE_MODEL_KEYS


def smoke_config(default: dict, experiment: str = "e2e") -> dict:
    """A copy of ``default`` (the embedded default config) with 200 training rows, 6 problems
    per stand-in, a 10-step SFT, 4 training steps (checkpoints at 2 and 4), 2 samples per
    problem of at most 40 tokens, 200 bootstrap resamples, and a premise probe of 2 problems per
    task x 4 rollouts."""
    config = json.loads(json.dumps(default))
    config["experiment"] = experiment
    config["data"]["n_train"] = 200
    for bench in config["benchmarks"].values():
        bench["n_problems"] = 6
    scale = config["scales"]["tiny"]
    scale["sft"]["steps"] = 10
    scale["train"].update(steps=4, checkpoint_every=2, micro_batch_size=4, max_new_tokens=40)
    config["evaluation"].update(samples_per_problem=2, max_new_tokens=40)
    scale.pop("evaluation", None)  # the main schedule's own sample count: the smoke run's above
    # The ablation schedule: its base model is tiny's (an expanded copy of tiny's base-model keys
    # would contradict the smaller SFT above), two steps on micro-batches that hold the GRPO
    # grid's largest group (K = 8), one sample per problem.
    ablation = config["scales"]["tiny_ablation"]
    for key in BASE_MODEL_KEYS:
        ablation.pop(key, None)
    ablation["train"].update(steps=2, checkpoint_every=2, micro_batch_size=8, max_new_tokens=40)
    ablation["evaluation"] = {"samples_per_problem": 1}
    config["statistics"]["n_resamples"] = 200
    if config.get("premise_probe") is not None:
        config["premise_probe"].update(problems=2, rollouts_per_problem=4)
    return config
