"""The GPU proof's shapes (the network, a training step's and the evaluation's work at each), the
stages in their order and each one's time limit: what the runner and every stage read.
"""

from __future__ import annotations

from pathlib import Path

#: The repository (benchmarks/gpu_proof/ is two folders down).
ROOT = Path(__file__).resolve().parents[2]

#: Shapes: the network, and what a training step and the evaluation do at it.
SHAPES = {
    "qwen3_1p7b": {
        "architecture": {
            "hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16,
            "num_key_value_heads": 8, "intermediate_size": 6144, "head_dim": 128,
            "max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
        "steps": 3, "max_new_tokens": 1024, "lora_rank": None,
        # ZeRO-2's kill and resume is about the optimizer's state, not the rollouts: short ones
        # let its three runs (uninterrupted, killed after step 2, resumed) fit beside the rest.
        "deepspeed_steps": 3, "deepspeed_max_new_tokens": 128, "profile_tokens": 64,
        # The paper's 2 runs the rollout, teacher and student phases twice per step (one HF
        # generate call per micro-batch): 1 keeps the stages inside a 15-minute device lease.
        "grad_accumulation": 1,
        # 512 tokens: the evaluation shares the lease with the training stages beside it.
        "eval_problems": 4, "eval_samples": 12, "eval_max_new_tokens": 512,
        "objective_lengths": [1024, 4096], "objective_hidden": 2048,
        # fast_generation: the cached positions whose step cost is timed (a short prompt, a
        # static cache of that length, long_steps steps); the continuous evaluation's cap (the
        # paper's), its requests and its time limit. The stage fits 400 s (STAGE_LIMITS).
        "fast_long_lengths": [4096, 16384, 38912], "long_steps": 64,
        "continuous_cap": 38912, "continuous_requests": 96, "continuous_seconds": 60,
    },
    "tiny": {
        "architecture": {
            "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1, "intermediate_size": 128, "head_dim": 32,
            "max_position_embeddings": 4096, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
        "steps": 2, "max_new_tokens": 16, "lora_rank": 8,
        "deepspeed_steps": 2, "deepspeed_max_new_tokens": 16, "profile_tokens": 8,
        "grad_accumulation": 2,
        # 2 x 2 responses: the rollouts' 4 rows, so that the CPU twin's compiled sections share
        # one shape (with the twin's budget of 4 rows at 256 positions) and compile it once.
        "eval_problems": 2, "eval_samples": 2, "eval_max_new_tokens": 16,
        "objective_lengths": [128], "objective_hidden": 64,
        # One long length, at the same cache shape: each new shape is a compile of its own.
        "fast_long_lengths": [256], "long_steps": 4,
        "continuous_cap": 64, "continuous_requests": 12, "continuous_seconds": 30,
    },
}  # fmt: skip
#: The smoke stage's shape: ``tiny`` on the device under test.
SMOKE_SHAPE = "tiny"

#: Decode steps of a profiled window (stage profile; fast_generation's own windows likewise).
PROFILE_STEPS = 32

STAGES = ("env", "smoke", "build", "objectives", "profile", "fast_generation", "train_opsd",
          "train_dash", "deepspeed", "evaluate")  # fmt: skip
#: Seconds each stage may take on the GPU shape (the CPU twin's are far shorter).
#: Measured on an H200 (HF rollouts): objectives 148 s (a subprocess per path and length), 3
#: OPSD steps 228 s (a step 58 s, of it 56.5 s HF ``generate``).
STAGE_LIMITS = {"env": 60, "smoke": 120, "build": 120, "objectives": 200, "profile": 120,
                "fast_generation": 400, "train_opsd": 400, "train_dash": 400, "deepspeed": 400, "evaluate": 400}  # fmt: skip
