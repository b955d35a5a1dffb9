"""``gpu_proof.py``'s stage ``fast_generation``: the eager and the compiled HF paths side by side.

At one shape, on one device, in one process:

- rollouts as the trainer makes them (the LoRA student in the training precision, micro-batch
  prompts, the scale's rollout length and settings): ``hf`` (``LivePolicySampler``, eager on
  the PEFT model) against ``hf_compiled`` (``CompiledRolloutSampler``): tokens/s, the share of
  a decode step the GPU spends in kernels (profiled), and the compiled graphs and recorded CUDA
  graphs after its first call and after three adapter updates (in place, as an optimizer
  step writes them);
- evaluation as rule ``generate_checkpoint_responses`` samples (the trainer's adapter saved as
  a checkpoint): ``hf`` in fp32 (``HFSampler``) against ``hf_compiled`` in bf16 with the batch
  planned from ``--kv-budget-gib`` (``CompiledSampler``), at the shape's evaluation length;
- at each long length: the planned batch, then a prefill to that length and a window of decode
  steps after it, timed apart (tokens/s of the window) with the peak memory.

Random weights never emit EOS: every response runs to its cap, the most work a shape can ask.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import replace

#: A generation shard of the paper overlay: 30 problems x 12 samples, the most one call holds.
SHARD_REQUESTS = 360


def stage(args, proof) -> dict:
    """The stage's results (``proof``: the gpu_proof module, for its shapes and helpers)."""
    import pandas as pd
    import torch

    from dashrepro.io import load_tokenizer
    from dashrepro.sampling.base import SamplingSettings
    from dashrepro.training.model import load_lora_student

    spec = proof.SHAPES[args.shape]
    train_cfg, lora, _ = proof.train_settings(args, args.shape, deepspeed=False)
    folder = proof.base_model_dir(args, args.shape)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = load_tokenizer(str(folder))
    policy = load_lora_student(folder, lora, 0, train_cfg).to(device)
    with torch.no_grad():  # a trained-looking adapter: B is zero at the start
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 1e-3)
    problems = pd.read_parquet(proof.training_parquet(args))["problem"].tolist()
    prompts = problems[: int(train_cfg["micro_batch_size"])]
    rollout = SamplingSettings(
        temperature=train_cfg["temperature"], top_p=train_cfg["top_p"],
        top_k=train_cfg.get("top_k"), max_new_tokens=spec["max_new_tokens"],
        batch_size=len(prompts),
    )  # fmt: skip
    results = {"device": proof.device_name(), "prompts": len(prompts), "lora_rank": lora["r"],
               "precision": train_cfg["precision"]}  # fmt: skip
    results["rollouts"] = rollouts(policy, tokenizer, prompts, rollout, folder, train_cfg, device)
    with tempfile.TemporaryDirectory() as checkpoint:
        from dashrepro.adapters import save_adapter

        save_adapter(policy, checkpoint)
        del policy
        proof.reset_peak()
        results["evaluation"] = evaluation(args, spec, folder, tokenizer, problems, checkpoint)
    return results


def timed(call, device: str) -> tuple[float, object]:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = call()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def kernel_share(call, device: str) -> float | None:
    """The share of ``call``'s wall time the GPU spends in kernels (None without CUDA)."""
    if device != "cuda":
        return None
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        seconds, _ = timed(call, device)
    kernels = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return round(sum(e.device_time_total for e in kernels) / 1e6 / seconds, 3)


def speed(seconds: float, samples) -> dict:
    tokens = sum(len(s.token_ids) for s in samples)
    return {"seconds": round(seconds, 3), "tokens": tokens,
            "tokens_per_second": round(tokens / seconds, 1)}  # fmt: skip


def rollouts(policy, tokenizer, prompts, settings, folder, train_cfg, device: str) -> dict:
    """Eager against compiled rollouts of one micro-batch; the compiled path's graph counts
    across three adapter updates."""
    from dashrepro.sampling import make_rollout_sampler

    found = {}
    for name in ("hf", "hf_compiled"):
        sampler = make_rollout_sampler(name, tokenizer, base_model=folder, policy=policy,
                                       precision=train_cfg["precision"])  # fmt: skip
        found[name] = rollout_speed(sampler, name == "hf_compiled", policy, prompts, settings,
                                    device)  # fmt: skip
        del sampler  # the compiled copy's memory back before the next
    found["speedup"] = round(
        found["hf_compiled"]["tokens_per_second"] / found["hf"]["tokens_per_second"], 2
    )
    return found


def rollout_speed(sampler, compiled: bool, policy, prompts, settings, device: str) -> dict:
    """One rollout sampler's tokens/s after adapter updates, its kernel share, its graphs."""
    import torch

    from dashrepro.sampling.hf_compiled import compile_counts

    short = replace(settings, max_new_tokens=min(16, settings.max_new_tokens))
    # The compiled path's first call compiles for its cache shape (the rollout length): the
    # same settings; the eager path needs only a short warm-up.
    warm_s, _ = timed(
        lambda: sampler.sample(policy, prompts, settings if compiled else short, 0), device
    )
    counts_warm = compile_counts()
    updates = []
    for update in range(3 if compiled else 1):
        with torch.no_grad():  # what an optimizer step does to the adapter: in place
            for name, parameter in policy.named_parameters():
                if "lora_B" in name:
                    parameter.mul_(1.01)
        seconds, samples = timed(
            lambda u=update: sampler.sample(policy, prompts, settings, 1 + u), device
        )
        updates.append(speed(seconds, samples))
    counts_after = compile_counts()
    # Profiled: the compiled path at its compiled shape, the eager one at 16 tokens (its
    # thousands of kernels a step take minutes to read back at full length).
    profiled = settings if compiled else short
    return {
        "first_call_seconds": round(warm_s, 1),
        "after_updates": updates,
        "tokens_per_second": updates[-1]["tokens_per_second"],
        "kernel_share": kernel_share(lambda: sampler.sample(policy, prompts, profiled, 9), device),
        "compiled_graphs": {"after_first_call": counts_warm["compiled_graphs"],
                            "after_updates": counts_after["compiled_graphs"]},
        "cuda_graphs": {"after_first_call": counts_warm["cuda_graphs"],
                        "after_updates": counts_after["cuda_graphs"]},
    }  # fmt: skip


def evaluation(args, spec, folder, tokenizer, problems, checkpoint: str) -> dict:
    """Eager fp32 against compiled bf16 sampling of a checkpoint, then the long lengths."""
    import torch

    from dashrepro.data.prompts import render_student_prompt
    from dashrepro.sampling import make_sampler
    from dashrepro.sampling.base import SamplingSettings

    device = "cuda" if torch.cuda.is_available() else "cpu"
    questions = [render_student_prompt(tokenizer, p) for p in problems[: spec["eval_problems"]]]
    requests = [q for q in questions for _ in range(spec["eval_samples"])]
    settings = SamplingSettings(max_new_tokens=spec["eval_max_new_tokens"])
    found = {"responses": len(requests), "max_new_tokens": settings.max_new_tokens,
             "kv_budget_gib": args.kv_budget_gib}  # fmt: skip
    fast = make_sampler("hf_compiled", base_model=folder, device=device, dtype="bfloat16",
                        kv_cache_budget_gib=args.kv_budget_gib, tokenizer=tokenizer)  # fmt: skip
    eager = make_sampler("hf", base_model=folder, device=device, tokenizer=tokenizer)
    for name, sampler in (("hf_fp32", eager), ("hf_compiled_bf16", fast)):
        # A warm-up at the timed call's batch: the compiled path compiles for that shape.
        sampler.sample(requests, replace(settings, max_new_tokens=4), 0, adapter_dir=checkpoint)
        seconds, samples = timed(
            lambda s=sampler: s.sample(requests, settings, 1, adapter_dir=checkpoint), device
        )
        found[name] = speed(seconds, samples)
    del eager
    found["speedup"] = round(
        found["hf_compiled_bf16"]["tokens_per_second"] / found["hf_fp32"]["tokens_per_second"], 2
    )
    found["long"] = [long_window(fast, length, spec, checkpoint, device)
                     for length in spec["fast_long_lengths"]]  # fmt: skip
    return found


def long_window(sampler, length: int, spec, checkpoint: str, device: str) -> dict:
    """At a response cap of ``length``: the planned batch, a prefill of a ``length``-token
    prompt for each row, and ``fast_window`` decode steps after it, timed apart."""
    from dashrepro.sampling.base import SamplingSettings

    window = spec["fast_window"]
    rows = sampler.batch_for(length + window, requests=SHARD_REQUESTS)
    # A prompt of about `length` tokens: a phrase repeated, as many times as its token count
    # over 64 repeats says (tokenizers merge repeats differently); its width is recorded.
    unit = " 7 + 5 = 12,"
    per_unit = len(sampler.tokenizer(unit * 64, add_special_tokens=False)["input_ids"]) / 64
    prompt = unit * max(1, round(length / per_unit))
    prompts = [prompt] * rows
    width = len(sampler.tokenizer(prompt, add_special_tokens=False)["input_ids"])
    result = {"cap": length, "prompt_tokens": width, "planned_batch": rows, "window": window}
    with contextlib.suppress(ImportError):
        import torch

        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
    one, more = SamplingSettings(max_new_tokens=1), SamplingSettings(max_new_tokens=1 + window)
    # Untimed first: the decode step compiles for this cache shape.
    sampler.sample(prompts, more, 0, adapter_dir=checkpoint)
    prefill_s, _ = timed(lambda: sampler.sample(prompts, one, 0, adapter_dir=checkpoint), device)
    seconds, samples = timed(
        lambda: sampler.sample(prompts, more, 1, adapter_dir=checkpoint), device
    )
    decoded = sum(len(s.token_ids) for s in samples) - rows
    result.update(prefill_seconds=round(prefill_s, 3),
                  window_tokens_per_second=round(decoded / max(seconds - prefill_s, 1e-9), 1))  # fmt: skip
    if device == "cuda":
        import torch

        result["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return result
