"""The GPU proof's stages, one module per stage or group (``RUNNERS``: the function each stage's
subprocess calls, ``--stage NAME``). Each imports its heavy packages (torch, transformers,
dashrepro's training) inside its functions, so that the command line starts without them:

- ``env``        versions, the device, and whether vLLM, DeepSpeed and FlashAttention-2 import;
- ``smoke``      the same code at a small shape (2 training steps, a checkpoint, its evaluation),
                 so that a device-placement bug costs seconds, not a 1.7B model load;
- ``build``      a Qwen3-1.7B-shaped network with random weights (its published configuration:
                 hidden 2,048, 28 layers, 16 heads, 8 key-value heads, intermediate 6,144,
                 head_dim 128, vocabulary 151,936, tied embeddings) and the real Qwen3
                 tokenizer, saved with ``save_pretrained``;
- ``objectives`` ``benchmarks/objectives.py`` at T = 1,024 and 4,096, V = 151,936, bf16;
- ``train_opsd``, ``train_dash``  ``train_run`` (what rule ``train_lora`` calls) for a few steps
                 at the paper's per-device shape of scales.qwen3_1p7b (micro batch 4,
                 1,024-token rollouts, LoRA r 64, bf16, gradient checkpointing; accumulation 1
                 where the paper has 2, see ``SHAPES``),
                 without DeepSpeed: the step time by phase and the peak memory;
- ``profile``    one rollout call of HF ``generate`` as the trainer makes it (the bf16 LoRA
                 student, one micro-batch), timed, then a 32-step window under the torch
                 profiler: the share of its time the GPU spends in kernels, with the adapter
                 and without;
- ``fast_generation``  the HF sampling paths side by side in sections run in order of value
                 and each guarded: compiled rollouts, eager rollouts, eager on the merged copy
                 (bf16 and fp32), evaluation eager and compiled, continuous batching on a mix
                 of lengths up to the paper's cap, the step cost at long cached lengths
                 (``fast_generation.py``);
- ``deepspeed``  OPSD under the scale's ZeRO-2 config (optimizer offloaded to the CPU) through
                 the trainer's command line: an uninterrupted run, and one SIGKILLed after the
                 state of its second-last step and run again, which must end at the same adapter;
- ``evaluate``   ``generate_policy_responses`` (what rule ``generate_checkpoint_responses``
                 calls) with a rank-64 checkpoint ``train_opsd`` saved, 12 samples per problem,
                 then ``grade_and_summarize``: tokens/s, and the records and grades as on CPU.
"""

from __future__ import annotations

from . import build, deepspeed, env, evaluate, fast_generation, objectives, profile, train

RUNNERS = {
    "env": env.stage_env, "smoke": train.stage_smoke, "build": build.stage_build,
    "objectives": objectives.stage_objectives,
    "train_opsd": lambda a: train.stage_train(a, "opsd"),
    "train_dash": lambda a: train.stage_train(a, "dash"),
    "deepspeed": deepspeed.stage_deepspeed, "evaluate": evaluate.stage_evaluate,
    "profile": profile.stage_profile, "fast_generation": fast_generation.stage,
}  # fmt: skip
