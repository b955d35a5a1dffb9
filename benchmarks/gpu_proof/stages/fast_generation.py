"""Stage ``fast_generation``: the HF sampling paths side by side, section by section.

At one shape, on one device, in one process, in order of value (``SECTIONS``); each section is
guarded (an exception is recorded and the next one runs) and every measurement is appended to
``<out>/measurements.jsonl`` the moment it is made (``runner.record``), so that a stage cut
off at its limit keeps what it measured:

1. ``compiled_rollouts``: rollouts as the trainer makes them (the LoRA student, micro-batch
   prompts, the scale's rollout length and settings) through ``hf_compiled``
   (``CompiledRolloutSampler``): the first call (it compiles), then three calls after adapter
   updates written in place (no new graph), one with transformers' synchronous stop check (the
   backend defers it on a GPU), a 32-step profiled window at the compiled shape;
2. ``eager_rollouts``: the same through ``hf`` (``HFRolloutSampler``, eager on the PEFT model)
   at 128 tokens, warmed up at that shape, with a 32-step profiled window;
3. ``eager_merged``: eager ``generate`` on the merged plain copy, in bf16 and in fp32, at the
   eager rollouts' shape: with 1 and 2, compile (compiled / merged bf16), merge (merged bf16 /
   PEFT eager) and dtype (merged bf16 / merged fp32) each get their own ratio;
4. ``evaluation``: a checkpoint's responses as rule ``generate_checkpoint_responses`` samples
   them, at the shape's evaluation length: ``hf`` in fp32 and ``hf_compiled`` in bf16 (the batch
   planned from ``--kv-budget-gib``), each warmed up at the timed call's shape;
5. ``continuous_evaluation``: ``hf_continuous`` in bf16 on a mix of response lengths up to the
   paper's cap (``LENGTH_MIX``), its cache sized from the budget, for at most
   ``continuous_seconds``: useful tokens/s (every token of every request, finished or not);
6. ``long_context``: the compiled step cost at 4,096, 16,384 and 38,912 cached positions: a
   short prompt, a static cache of that length (read in full at every step), the rows the
   budget plans, a warm-up at that shape, then ``long_steps`` decode steps timed. No long prefill.

After every new shape: the peak memory (GPU: allocated; CPU: the process's resident peak), and
the compile counters (graphs, graph breaks, CUDA-graph skips); ``TORCH_LOGS`` (set by the runner)
logs recompiles, graph breaks and CUDA-graph skips into the stage's log. Random weights never
emit EOS: every response runs to its cap, the most work a shape can ask.
"""

from __future__ import annotations

import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

from .. import runner
from ..common import (
    base_model_dir,
    cpu_peak_gib,
    device_name,
    peak_gib,
    reset_peak,
    train_settings,
    training_parquet,
)
from ..shapes import PROFILE_STEPS, SHAPES

#: A generation shard of the paper overlay: 30 problems x 12 samples, the most one call holds.
SHARD_REQUESTS = 360
#: The continuous evaluation's response lengths: (share of the requests, length as a share of
#: the cap). A stand-in for reasoning responses (most end in a few thousand tokens, a few run to
#: the cap); random weights never stop, so each request's own cap is its length.
LENGTH_MIX = ((0.50, 1 / 32), (0.30, 1 / 8), (0.15, 1 / 2), (0.05, 1.0))
SECTIONS = ("compiled_rollouts", "eager_rollouts", "eager_merged", "evaluation",
            "continuous_evaluation", "long_context")  # fmt: skip


class Context:
    """What the sections share: the shape, the policy, the prompts, the measurement log."""

    def __init__(self, args) -> None:
        import pandas as pd
        import torch

        from dashrepro.io import load_tokenizer
        from dashrepro.sampling.base import SamplingSettings
        from dashrepro.training.model import load_lora_student

        self.args = args
        self.spec = SHAPES[args.shape]
        self.train_cfg, lora, _ = train_settings(args, args.shape, deepspeed=False)
        self.folder = base_model_dir(args, args.shape)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.tokenizer = load_tokenizer(str(self.folder))
        self.policy = load_lora_student(self.folder, lora, 0, self.train_cfg).to(self.device)
        with torch.no_grad():  # a trained-looking adapter: B is zero at the start
            for name, parameter in self.policy.named_parameters():
                if "lora_B" in name:
                    parameter.normal_(0.0, 1e-3)
        self.problems = pd.read_parquet(training_parquet(args))["problem"].tolist()
        self.prompts = self.problems[: int(self.train_cfg["micro_batch_size"])]
        self.rollout = SamplingSettings(
            temperature=self.train_cfg["temperature"], top_p=self.train_cfg["top_p"],
            top_k=self.train_cfg.get("top_k"), max_new_tokens=self.spec["max_new_tokens"],
            batch_size=len(self.prompts),
        )  # fmt: skip
        self.lora_rank = lora["r"]
        self.checkpoint = None  # the adapter saved as a checkpoint (evaluation's sections)

    def record(self, section: str, **values) -> dict:
        """One measurement, appended to the run's JSON lines at once; returned as given."""
        runner.record(self.args.out, "fast_generation", section, values)
        return values


def stage(args) -> dict:
    """The stage's results, section by section, and the ratios between them."""
    context = Context(args)
    results = {"device": device_name(), "prompts": len(context.prompts),
               "lora_rank": context.lora_rank, "precision": context.train_cfg["precision"],
               "sections": list(SECTIONS)}  # fmt: skip
    with tempfile.TemporaryDirectory() as checkpoint:
        context.checkpoint = checkpoint
        for name in SECTIONS:
            results[name] = guarded(context, name, SECTION_RUNNERS[name])
    results["ratios"] = ratios(results)
    context.record("ratios", **results["ratios"])
    return results


def guarded(context: Context, name: str, section) -> dict:
    """``section(context)``, or the error it raised (recorded; the next section runs)."""
    reset_peak()
    t0 = time.perf_counter()
    try:
        found = section(context)
        found["seconds"] = round(time.perf_counter() - t0, 1)
        return found
    except Exception as error:  # the finding is the error: the next section still runs
        tail = traceback.format_exc()[-1500:]
        context.record(name, error=f"{type(error).__name__}: {error}"[:500], traceback=tail)
        free_device_memory()
        return {"error": f"{type(error).__name__}: {error}"[:500],
                "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip


def free_device_memory() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def timed(call, device: str) -> tuple[float, object]:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = call()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def speed(seconds: float, samples) -> dict:
    tokens = sum(len(s.token_ids) for s in samples)
    return {"seconds": round(seconds, 3), "tokens": tokens,
            "tokens_per_second": round(tokens / seconds, 1)}  # fmt: skip


def shape_state(context: Context) -> dict:
    """The peak memory so far and the compile counters: recorded after every new shape."""
    from torch._dynamo.utils import counters

    from dashrepro.sampling.hf_compiled import compile_counts

    peak = peak_gib()
    return {
        "peak_gib": None if peak is None else round(peak, 2),
        "cpu_peak_gib": cpu_peak_gib(),
        **compile_counts(),
        "graph_breaks": int(sum(counters["graph_break"].values())),
        "cudagraph_skips": int(counters["inductor"]["cudagraph_skips"]),
    }


def kernel_share(call, device: str) -> dict:
    """``call`` (a ``PROFILE_STEPS``-step window) under the profiler: its seconds and the share
    of them the GPU spends in kernels (None without CUDA)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as profiler:
        seconds, _ = timed(call, device)
    found = {"profiled_steps": PROFILE_STEPS, "profiled_seconds": round(seconds, 3),
             "kernel_share": None}  # fmt: skip
    if device == "cuda":
        kernels = [e for e in profiler.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        found["kernel_share"] = round(sum(e.device_time_total for e in kernels) / 1e6 / seconds, 3)
        found["kernels_per_step"] = round(len(kernels) / PROFILE_STEPS, 1)
    return found


def updated_adapter(policy) -> None:
    """What an optimizer step does to the adapter: its weights changed in place."""
    import torch

    with torch.no_grad():
        for name, parameter in policy.named_parameters():
            if "lora_B" in name:
                parameter.mul_(1.01)


# ----------------------------------------------------------------------------------------------
# The sections, in order of value
# ----------------------------------------------------------------------------------------------


def rollout_options(context: Context):
    """The trainer's rollout options at the shape (its folder, its training precision)."""
    from dashrepro.sampling import RolloutOptions

    return RolloutOptions(base_model=str(context.folder), adapter_dir=Path(context.args.out),
                          precision=context.train_cfg["precision"], lora_rank=context.lora_rank)  # fmt: skip


def compiled_rollouts(context: Context) -> dict:
    """``hf_compiled`` rollouts at the rollout length: compiled once, not again after three
    in-place adapter updates; a profiled window of ``PROFILE_STEPS`` steps at the same cache."""
    from dashrepro.sampling import make_rollout_sampler
    from dashrepro.sampling.hf import sample_responses

    c, settings = context, context.rollout
    sampler = make_rollout_sampler("hf_compiled", c.tokenizer, c.policy, rollout_options(c))
    first_s, _ = timed(lambda: sampler.sample(c.policy, c.prompts, settings, 0), c.device)
    after_first = c.record("compiled_rollouts", call="first", seconds=round(first_s, 1),
                           **shape_state(c))  # fmt: skip
    updates = []
    for update in range(3):
        updated_adapter(c.policy)
        seconds, samples = timed(
            lambda u=update: sampler.sample(c.policy, c.prompts, settings, 1 + u), c.device
        )
        updates.append(c.record("compiled_rollouts", call=f"after_update_{update + 1}",
                                **speed(seconds, samples), **shape_state(c)))  # fmt: skip
    # The backend defers generate's stop check on a GPU (sampling.stop_check): the same call
    # with transformers' synchronous check gives that its own ratio.
    seconds, samples = timed(lambda: sampler.sampled(c.prompts, settings, 4, defer=False), c.device)
    synchronous = c.record("compiled_rollouts", call="synchronous_stop_check",
                           **speed(seconds, samples), **shape_state(c))  # fmt: skip
    # The window: the same cache (the rollout length's), PROFILE_STEPS new tokens.
    widest = max(len(c.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in c.prompts)
    full = widest + settings.max_new_tokens
    window = replace(settings, max_new_tokens=PROFILE_STEPS)
    profiled = kernel_share(
        lambda: sample_responses(sampler.copy.model, c.tokenizer, c.prompts, window, 9,
                                 make_cache=lambda rows, _: sampler.caches(rows, full)),
        c.device,
    )  # fmt: skip
    profiled.update(shape_state(c))
    c.record("compiled_rollouts", call="profiled_window", **profiled)
    return {
        "max_new_tokens": settings.max_new_tokens,
        "first_call_seconds": after_first["seconds"],
        "after_updates": updates,
        "tokens_per_second": updates[-1]["tokens_per_second"],
        "stop_check_deferred": c.device == "cuda",  # no events on a CPU: synchronous there
        "synchronous_stop_check": synchronous,
        "profile": profiled,
        "compiled_graphs": {"after_first_call": after_first["compiled_graphs"],
                            "after_updates": updates[-1]["compiled_graphs"]},
        "cuda_graphs": {"after_first_call": after_first["cuda_graphs"],
                        "after_updates": updates[-1]["cuda_graphs"]},
    }  # fmt: skip


def eager_settings(context: Context):
    """The eager sections' rollouts: the rollout settings at (at most) 128 new tokens."""
    return replace(context.rollout, max_new_tokens=min(128, context.rollout.max_new_tokens))


def eager_rollouts(context: Context) -> dict:
    """``hf`` rollouts (eager, the PEFT model) at 128 tokens, warmed up at that shape."""
    from dashrepro.sampling import make_rollout_sampler

    c, settings = context, eager_settings(context)
    sampler = make_rollout_sampler("hf", c.tokenizer, c.policy, rollout_options(c))
    timed(lambda: sampler.sample(c.policy, c.prompts, settings, 0), c.device)
    seconds, samples = timed(lambda: sampler.sample(c.policy, c.prompts, settings, 1), c.device)
    found = c.record("eager_rollouts", call="timed", max_new_tokens=settings.max_new_tokens,
                     **speed(seconds, samples), **shape_state(c))  # fmt: skip
    window = replace(settings, max_new_tokens=PROFILE_STEPS)
    found["profile"] = kernel_share(lambda: sampler.sample(c.policy, c.prompts, window, 2),
                                    c.device)  # fmt: skip
    c.record("eager_rollouts", call="profiled_window", **found["profile"])
    return found


def eager_merged(context: Context) -> dict:
    """Eager ``generate`` on the merged plain copy (no PEFT wrappers), bf16 then fp32, at the
    eager rollouts' shape, each warmed up at it."""
    import torch

    from dashrepro.sampling.hf import sample_responses
    from dashrepro.sampling.policy_copy import PolicyCopy, live_deltas

    c, settings = context, eager_settings(context)
    found = {"max_new_tokens": settings.max_new_tokens}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        copy = PolicyCopy.load(c.folder, dtype, c.device)
        copy.refresh(live_deltas(c.policy))

        def call(seed, model=copy.model):
            return sample_responses(model, c.tokenizer, c.prompts, settings, seed)

        timed(lambda: call(0), c.device)
        seconds, samples = timed(lambda: call(1), c.device)
        found[name] = c.record("eager_merged", dtype=name, **speed(seconds, samples),
                               **shape_state(c))  # fmt: skip
        copy = None  # its memory back before the next dtype's
        free_device_memory()
    return found


def evaluation_requests(context: Context) -> list[str]:
    from dashrepro.data.prompts import render_student_prompt

    spec = context.spec
    questions = [render_student_prompt(context.tokenizer, p)
                 for p in context.problems[: spec["eval_problems"]]]  # fmt: skip
    return [q for q in questions for _ in range(spec["eval_samples"])]


def saved_checkpoint(context: Context) -> str:
    """The trainer's adapter saved as a checkpoint (once; the evaluation sections read it)."""
    from pathlib import Path

    if not (Path(context.checkpoint) / "adapter_config.json").exists():
        from dashrepro.adapters import save_adapter

        save_adapter(context.policy, context.checkpoint)
    return context.checkpoint


def evaluation(context: Context) -> dict:
    """Eager fp32 and compiled bf16 sampling of a checkpoint at the evaluation length, each
    warmed up at the timed call's shape (the compiled path compiles for it there)."""
    from dashrepro.sampling import make_sampler
    from dashrepro.sampling.base import SamplingSettings

    c = context
    checkpoint = saved_checkpoint(c)
    requests = evaluation_requests(c)
    settings = SamplingSettings(max_new_tokens=c.spec["eval_max_new_tokens"])
    found = {"responses": len(requests), "max_new_tokens": settings.max_new_tokens,
             "kv_budget_gib": c.args.kv_budget_gib}  # fmt: skip
    samplers = (
        ("hf_fp32", lambda: make_sampler("hf", base_model=c.folder, device=c.device,
                                         tokenizer=c.tokenizer)),
        ("hf_compiled_bf16", lambda: make_sampler(
            "hf_compiled", base_model=c.folder, device=c.device, dtype="bfloat16",
            kv_cache_budget_gib=c.args.kv_budget_gib, tokenizer=c.tokenizer)),
    )  # fmt: skip
    for name, make in samplers:
        sampler = make()
        warm_s, _ = timed(lambda s=sampler: s.sample(requests, settings, 0, adapter_dir=checkpoint),
                          c.device)  # fmt: skip
        seconds, samples = timed(
            lambda s=sampler: s.sample(requests, settings, 1, adapter_dir=checkpoint), c.device
        )
        found[name] = c.record("evaluation", sampler=name, warm_up_seconds=round(warm_s, 1),
                               **speed(seconds, samples), **shape_state(c))  # fmt: skip
        sampler = None  # its memory back before the next
        free_device_memory()
    found["speedup"] = round(
        found["hf_compiled_bf16"]["tokens_per_second"] / found["hf_fp32"]["tokens_per_second"], 2
    )
    return found


def length_mix(cap: int, requests: int) -> list[int]:
    """Each request's response length under ``LENGTH_MIX`` (the longest first in each group,
    groups interleaved so that every forward pass holds a mix)."""
    counts = [max(1, round(share * requests)) for share, _ in LENGTH_MIX]
    while sum(counts) > requests:  # rounding up: the commonest length gives way, the cap stays
        counts[counts.index(max(counts))] -= 1
    lengths = []
    for count, (_, fraction) in zip(counts, LENGTH_MIX, strict=True):
        lengths += [max(1, round(cap * fraction))] * count
    return [lengths[i] for i in sorted(range(len(lengths)), key=lambda i: (i % 8, i))]


def continuous_evaluation(context: Context) -> dict:
    """``hf_continuous`` (bf16, cache from the budget) on ``LENGTH_MIX`` up to the paper's cap,
    stopped after ``continuous_seconds``: useful tokens/s over every request's tokens."""
    import torch
    from transformers import ContinuousBatchingConfig

    from dashrepro.sampling.base import SamplingSettings
    from dashrepro.sampling.hf_continuous import PAGE_SIZE, ContinuousSampler, generation_config

    c = context
    cap, requests = c.spec["continuous_cap"], c.spec["continuous_requests"]
    sampler = ContinuousSampler(c.folder, device=c.device, dtype="bfloat16",
                                kv_cache_budget_gib=c.args.kv_budget_gib, response_cap=cap,
                                tokenizer=c.tokenizer)  # fmt: skip
    sampler.sample(evaluation_requests(c)[:1], SamplingSettings(max_new_tokens=4), 0,
                   adapter_dir=saved_checkpoint(c))  # the checkpoint merged, untimed  # fmt: skip
    prompts = evaluation_requests(c)
    lengths = length_mix(cap, requests)
    encoded = [c.tokenizer(prompts[i % len(prompts)], add_special_tokens=False)["input_ids"]
               for i in range(len(lengths))]  # fmt: skip
    model = sampler.copy.model
    settings = SamplingSettings(max_new_tokens=cap)
    config = ContinuousBatchingConfig(page_size=PAGE_SIZE, num_blocks=sampler.num_blocks, seed=0,
                                      auto_switch_to_flash=c.device == "cuda")  # fmt: skip
    manager = model.init_continuous_batching(generation_config=generation_config(settings,
                                             c.tokenizer), continuous_batching_config=config)  # fmt: skip
    ids = [
        manager.add_request(input_ids=e, max_new_tokens=n)
        for e, n in zip(encoded, lengths, strict=True)
    ]
    outputs, limit = {}, c.spec["continuous_seconds"]
    with torch.no_grad():  # not inference_mode: the loop's thread writes into these tensors
        manager.warmup()
        t0 = time.perf_counter()
        manager.start()
        attention = model.config._attn_implementation  # the loop's (restored when it stops)
        while len(outputs) < len(ids) and time.perf_counter() - t0 < limit:
            result = manager.get_result(timeout=0.5)
            if result is not None and result.is_finished():
                outputs[result.request_id] = result
        cut = len(outputs) < len(ids)
        manager.stop(block=True, hard_stop=cut, timeout=60)
        seconds = time.perf_counter() - t0  # the loop's last tokens included
        while (result := manager.get_result(timeout=0.2)) is not None:
            outputs.setdefault(result.request_id, result)  # the cut requests' tokens so far
    manager.destroy()
    finished = sum(1 for r in outputs.values() if r.error is None)
    tokens = sum(len(r.generated_tokens) for r in outputs.values())
    found = c.record(
        "continuous_evaluation", requests=len(ids), cap=cap, length_mix=[list(m) for m in LENGTH_MIX],
        asked_tokens=sum(lengths), num_blocks=sampler.num_blocks,
        attention=attention, finished=finished, tokens=tokens,
        seconds=round(seconds, 2), stopped_at_limit=cut,
        useful_tokens_per_second=round(tokens / seconds, 1), **shape_state(c),
    )  # fmt: skip
    return found


def long_context(context: Context) -> dict:
    """The compiled decode step at each long cache length: a short prompt, a static cache of
    that many positions (each step reads all of it), the rows the budget plans (at most a
    shard), warmed up at that shape, then ``long_steps`` steps timed."""
    from dashrepro.sampling import make_sampler
    from dashrepro.sampling.base import SamplingSettings
    from dashrepro.sampling.hf import sample_responses

    c = context
    steps = c.spec["long_steps"]
    sampler = make_sampler("hf_compiled", base_model=c.folder, device=c.device, dtype="bfloat16",
                           kv_cache_budget_gib=c.args.kv_budget_gib, tokenizer=c.tokenizer)  # fmt: skip
    sampler.sample(evaluation_requests(c)[:1], SamplingSettings(max_new_tokens=1), 0,
                   adapter_dir=saved_checkpoint(c))  # the checkpoint merged  # fmt: skip
    prompt = evaluation_requests(c)[0]
    found = []
    for length in c.spec["fast_long_lengths"]:
        rows = sampler.batch_for(length, requests=SHARD_REQUESTS)
        sampler.caches.caches.clear()  # one cache held: the budget's
        free_device_memory()

        def call(seed, rows=rows, length=length):
            return sample_responses(sampler.copy.model, c.tokenizer, [prompt] * rows,
                                    SamplingSettings(max_new_tokens=steps), seed,
                                    make_cache=lambda r, _: sampler.caches(r, length))  # fmt: skip

        warm_s, _ = timed(lambda: call(0), c.device)
        seconds, samples = timed(lambda: call(1), c.device)
        decoded = sum(len(s.token_ids) for s in samples)
        found.append(c.record(
            "long_context", cached_positions=length, rows=rows, steps=steps,
            warm_up_seconds=round(warm_s, 1), seconds=round(seconds, 3),
            ms_per_step=round(1e3 * seconds / steps, 2),
            tokens_per_second=round(decoded / seconds, 1), **shape_state(c),
        ))  # fmt: skip
    return {"steps": steps, "lengths": found}


SECTION_RUNNERS = {
    "compiled_rollouts": compiled_rollouts, "eager_rollouts": eager_rollouts,
    "eager_merged": eager_merged, "evaluation": evaluation,
    "continuous_evaluation": continuous_evaluation, "long_context": long_context,
}  # fmt: skip


def ratios(results: dict) -> dict:
    """Compile, merge and dtype each on their own (tokens/s over tokens/s), where measured."""

    def rate(*keys):
        value = results
        for key in keys:
            if not isinstance(value, dict) or key not in value:
                return None
            value = value[key]
        return value

    pairs = {
        "compile": (("compiled_rollouts", "tokens_per_second"), ("eager_merged", "bf16",
                                                                  "tokens_per_second")),
        "deferred_stop_check": (("compiled_rollouts", "tokens_per_second"),
                                ("compiled_rollouts", "synchronous_stop_check", "tokens_per_second")),
        "merge": (("eager_merged", "bf16", "tokens_per_second"),
                  ("eager_rollouts", "tokens_per_second")),
        "dtype": (("eager_merged", "bf16", "tokens_per_second"),
                  ("eager_merged", "fp32", "tokens_per_second")),
        "evaluation_compiled_bf16_over_eager_fp32": (
            ("evaluation", "hf_compiled_bf16", "tokens_per_second"),
            ("evaluation", "hf_fp32", "tokens_per_second")),
    }  # fmt: skip
    found = {}
    for name, (top, bottom) in pairs.items():
        a, b = rate(*top), rate(*bottom)
        found[name] = round(a / b, 2) if a and b else None
    return found
