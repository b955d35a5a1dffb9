"""LoRA on-policy self-distillation: the trainer (``trainer``) and its resumable training
states (``checkpointing``)."""
