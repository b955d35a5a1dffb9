"""LoRA on-policy self-distillation of a student against its privileged self-teacher.

Entry point: ``trainer.train_run(...)`` or ``python -m dashrepro.training.trainer --spec
run.json`` (``accelerate launch`` for several processes). Modules, one idea each: ``trainer``
(the entry); ``recipe`` (setup and the step loop); ``run_spec`` (a run's arguments);
``run_state`` (the resumable ``TrainingState`` the recipe owns); ``checkpointer`` (saves,
verifies and restores it, exports each checkpoint), over ``checkpointing`` (a state's files,
with ``fingerprint`` and ``rng``), ``state_integrity`` and ``state_choice``; ``tracing`` (the
traced rollouts, apart from learning); ``methods``, ``losses``, ``rollouts``, ``teacher``,
``batching``, ``model``, ``distributed``, ``metrics``, ``step_tracking``, ``preemption``. The
typed train and LoRA settings are ``dashrepro.settings``'.
"""
