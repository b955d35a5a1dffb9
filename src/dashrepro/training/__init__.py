"""LoRA on-policy self-distillation of a student against its privileged self-teacher.

Entry point: ``trainer.train_run(...)`` or ``python -m dashrepro.training.trainer --spec
run.json`` (``accelerate launch`` for several processes). Modules, one idea each: ``trainer``
(the entry); ``recipe`` (setup and the step loop); ``run_spec`` (a run's arguments);
``resume`` (the resumable ``TrainingState`` the recipe owns and the ``Checkpointer`` that
saves, checks and restores it: one subpackage); ``token_traces`` (the traced rollouts, apart
from learning); ``rollouts`` (the rollout phase, ``RolloutPhase``, sampling through the
backend's ``RolloutSampler``); ``methods``, ``losses``, ``teacher``, ``batching``, ``model``, ``distributed``, ``metrics``, ``step_tracking``, ``preemption``. The
typed train and LoRA settings are ``dashrepro.settings``'.
"""
