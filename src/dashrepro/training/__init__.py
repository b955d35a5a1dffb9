"""LoRA on-policy self-distillation of a student against its privileged self-teacher.

Entry point: ``trainer.train_run(...)`` or ``python -m dashrepro.training.trainer --spec
run.json`` (``accelerate launch`` for several processes). Modules, one idea each:

- ``trainer``: the entry (``train_run``, ``run_from_json``, ``main``) and the names outside code
  imports;
- ``recipe``: ``DistillationRecipe`` -- setup, the step loop, checkpoints;
- ``methods``: ``MethodSpec`` and the privileged teacher's views;
- ``losses``: the per-micro-batch loss of each objective, and the GRPO hybrid term;
- ``rollouts``: student rollouts through the HF or vLLM sampler backend;
- ``batching``: which rows a micro-batch reads; token layout of student and teacher inputs;
- ``model``: the base network with a fresh LoRA adapter; AdamW and its schedule;
- ``distributed``: the accelerator, the DeepSpeed config, cross-process agreement;
- ``metrics``: per-step metrics and per-token traces;
- ``checkpointing``: save and load a resumable training state (with ``fingerprint``, ``rng``,
  ``adapters``, ``preemption``); ``state_integrity``: what a state's folder holds and whether it
  is intact; ``state_choice``: which state a run resumes from, and pruning.
"""
