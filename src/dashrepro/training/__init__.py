"""LoRA on-policy self-distillation of a student against its privileged self-teacher.

Entry point: ``trainer.train_run(...)`` or ``python -m dashrepro.training.trainer --spec
run.json`` (``accelerate launch`` for several processes). Modules, one idea each:

- ``trainer``: the entry (``train_run``, ``run_from_json``, ``main``);
- ``recipe``: ``DistillationRecipe``, setup and the step loop;
- ``run_spec``: a run's arguments as a value, and the config a state must match;
- ``run_state``: the resumable ``TrainingState`` (learner, step, records) the recipe owns;
- ``checkpointer``: the ``Checkpointer`` that saves, verifies and restores that state, and
  exports each checkpoint's PEFT folder; beneath it ``checkpointing`` (a state's files, with
  ``fingerprint`` and ``rng``), ``state_integrity`` (whether a state's folder is intact) and
  ``state_choice`` (which state a run resumes from, and pruning);
- ``tracing``: the ``RolloutTracer``, which records the traced rollouts apart from learning;
- ``methods``: ``MethodSpec`` and the privileged teacher's views;
- ``losses``: the per-micro-batch loss of each objective, and the GRPO hybrid term;
- ``rollouts``: student rollouts through the HF or vLLM sampler backend;
- ``teacher``: the privileged teacher's contexts;
- ``batching``: which rows a micro-batch reads; token layout of student and teacher inputs;
- ``model``: the base network with a fresh LoRA adapter; AdamW and its schedule;
- ``distributed``: the accelerator, the DeepSpeed config, cross-process agreement;
- ``metrics``: per-step metrics and per-token traces;
- ``step_tracking``: a run's steps in its experiment trackers;
- ``preemption``: SIGTERM / SIGUSR1 as a flag the loop polls.

The typed train and LoRA settings are ``dashrepro.settings``'.
"""
