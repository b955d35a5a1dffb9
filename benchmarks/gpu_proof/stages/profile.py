"""Stage ``profile``: one rollout call of HF ``generate`` as the trainer makes it, timed, then a
window under the torch profiler (the share of its time the GPU spends in kernels), with the
adapter and without.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace

from ..common import base_model_dir, device_name, train_settings, training_parquet
from ..runner import record
from ..shapes import PROFILE_STEPS, SHAPES


def stage_profile(args) -> dict:
    """One rollout call of HF ``generate`` as the trainer makes it (the bf16 LoRA student, micro
    batch prompts), timed and then profiled: the share of the wall time the GPU spends in
    kernels says whether the device or the host sets the speed. The same without the adapter."""
    import pandas as pd
    import torch
    from torch.profiler import ProfilerActivity, profile

    from dashrepro.io import load_tokenizer
    from dashrepro.sampling.base import SamplingSettings
    from dashrepro.sampling.hf import sample_responses
    from dashrepro.training.model import load_lora_student

    shape = args.shape
    spec = SHAPES[shape]
    train_cfg, lora, _ = train_settings(args, shape, deepspeed=False)
    folder = base_model_dir(args, shape)
    tokenizer = load_tokenizer(str(folder))
    model = load_lora_student(folder, lora, 0, train_cfg)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    problems = pd.read_parquet(training_parquet(args))["problem"].tolist()
    prompts = problems[: int(train_cfg["micro_batch_size"])]
    tokens = spec["profile_tokens"]
    # A window of PROFILE_STEPS decode steps only: a lease ran out reading back 1.7B's ~1,500
    # kernels a step over a full-length call.
    profiled_tokens = PROFILE_STEPS
    settings = SamplingSettings(temperature=train_cfg["temperature"], top_p=train_cfg["top_p"],
                                top_k=train_cfg.get("top_k"), max_new_tokens=tokens,
                                batch_size=len(prompts))  # fmt: skip

    def synchronize():
        if device == "cuda":
            torch.cuda.synchronize()

    def timed(seed: int, settings=settings) -> tuple[float, int]:
        synchronize()
        t0 = time.perf_counter()
        samples = sample_responses(model, tokenizer, prompts, settings, seed=seed)
        synchronize()
        return time.perf_counter() - t0, sum(len(s.token_ids) for s in samples)

    results = {"device": device_name(), "prompts": len(prompts), "max_new_tokens": tokens,
               "lora_rank": lora["r"]}  # fmt: skip
    for name, adapter_on in (("lora", True), ("base", False)):
        with model.disable_adapter() if not adapter_on else contextlib.nullcontext():
            # The same call once untimed: an H200 lease's first LoRA call after a 4-token
            # warm-up still ran at 244 ms a decode step, against 62.5 in the training steps.
            timed(0)
            seconds, generated = timed(1)
            activities = [ProfilerActivity.CPU] + (
                [ProfilerActivity.CUDA] if device == "cuda" else []
            )
            with profile(activities=activities) as profiler:
                profiled_seconds, _ = timed(1, replace(settings, max_new_tokens=profiled_tokens))
        kernels = [e for e in profiler.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA]  # fmt: skip
        kernel_seconds = sum(e.device_time_total for e in kernels) / 1e6
        steps = profiled_tokens  # one forward per generated position
        results[name] = {
            "seconds": round(seconds, 3), "generated_tokens": generated,
            "tokens_per_second": round(generated / seconds, 1),
            "ms_per_decode_step": round(1e3 * seconds / tokens, 2),
            "profiled_tokens": profiled_tokens,
            "profiled_seconds": round(profiled_seconds, 3),
            "kernels": len(kernels) if device == "cuda" else None,
            "kernels_per_decode_step": round(len(kernels) / steps, 1) if device == "cuda" else None,
            "kernel_seconds": round(kernel_seconds, 3) if device == "cuda" else None,
            "kernel_share": round(kernel_seconds / profiled_seconds, 3) if device == "cuda" else None,
            "top_cpu_ops": [
                (e.key, round(e.self_cpu_time_total / 1e3, 1), e.count)
                for e in sorted(profiler.key_averages(), key=lambda e: -e.self_cpu_time_total)[:8]
            ],
        }  # fmt: skip
        record(args.out, "profile", name, results[name])
    return results
