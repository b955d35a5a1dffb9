"""LoRA on-policy self-distillation of a student against its privileged self-teacher.

Entry point: ``trainer.train_run(...)`` or ``python -m dashrepro.training.trainer --spec
run.json`` (``accelerate launch`` for several processes). One idea per module: ``trainer``
(the entry), ``recipe`` (setup and the step loop), ``run_spec`` (a run's arguments),
``run_states`` (its resumable states), ``settings`` (the typed train and LoRA settings),
``methods``, ``losses``, ``rollouts``, ``teacher``, ``batching``, ``model``, ``distributed``,
``metrics``, ``checkpointing``, ``state_integrity``, ``state_choice`` (docs/architecture.md).
"""
