"""Student rollouts of one micro-batch, through the rollout backend's ``PolicySampler``.

One rollout per problem from the problem alone, with the run's sampling settings and a seed
derived from (run seed, step, global micro-batch), so a rollout does not depend on how the
micro-batches are spread over processes. ``train.rollout_backend``: ``hf`` samples the live
PEFT model; ``hf_compiled`` a plain copy refreshed from it after each optimizer step; ``vllm`` a
colocated engine, the current adapter synced into it before each micro-batch. A prompt with no room for one response token
is never truncated: its micro-batch is skipped. Rewards: the exact-match grade of the final
answer. The details: docs/training.md.

    sampler = RolloutSampler(tokenizer, train, lora, base_model, adapter_dir, rank=0)
    share = sampler.share(policy, data, rows=[4, 17, 9], seed=123, timings=timings)
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from dashrepro.data.prompts import render_student_prompt
from dashrepro.grading import reward_exact_match
from dashrepro.sampling import PolicySampler, Sample, SamplingSettings, make_rollout_sampler
from dashrepro.settings import LoraSettings, TrainSettings
from dashrepro.training.batching import encode
from dashrepro.training.teacher import analysis_budget, analysis_request_ids


@dataclass
class Share:
    """One micro-batch's rollouts: which rows, their prompts, samples and rewards."""

    rows: list[int]  # data row of each rollout (a problem repeats group_size times)
    ids: list[str]
    teacher_inputs: list[tuple[str, str, str]]  # (problem, reference solution, answer)
    prompt_ids: list[list[int]]
    samples: list  # sampling.Sample per rollout, or [] when the prompts were too long
    rewards: list[float]
    skipped_long_prompts: int = 0
    analyses: list | None = None  # reason_first: the teacher's analysis Sample per rollout


def sampling_settings(train: TrainSettings) -> SamplingSettings:
    """The rollout sampling settings of a run's training settings."""
    return SamplingSettings(
        temperature=train.temperature,
        top_p=train.top_p,
        top_k=train.top_k,
        max_new_tokens=train.max_new_tokens,
    )


class RolloutSampler:
    """Student rollouts (and the teacher's analyses) through the ``train.rollout_backend``'s
    ``PolicySampler`` (``sampling.make_rollout_sampler``), made at the first sampling."""

    def __init__(
        self,
        tokenizer,
        train: TrainSettings,
        lora: LoraSettings,
        base_model,
        adapter_dir,
        rank: int,
    ):
        self.tokenizer = tokenizer
        self.backend = train.rollout_backend
        self.settings = sampling_settings(train)
        self.max_total = train.total_length_cap
        # What each backend may need; each takes its own (sampling.backends).
        self.options = {
            "base_model": str(base_model),
            "adapter_dir": Path(adapter_dir),
            "rank": rank,
            "lora_rank": lora.r,
            "precision": train.precision,
            "max_model_len": train.max_total_length,
            "engine_options": dict(train.vllm),
        }
        self.sampler: PolicySampler | None = None

    def policy_sampler(self, policy) -> PolicySampler:
        """The backend's sampler (made for ``policy`` the first time)."""
        if self.sampler is None:
            self.sampler = make_rollout_sampler(
                self.backend, self.tokenizer, policy=policy, **self.options
            )
        return self.sampler

    def shutdown(self) -> None:
        """Stop the backend's engine, if it made one (vLLM's gives its memory back)."""
        stop = getattr(self.sampler, "shutdown", None)
        if stop is not None:
            stop()

    def sample(self, model, prompts: list[str], settings: SamplingSettings, seed: int) -> list:
        """One sample per prompt from the current adapter of ``model``."""
        return self.policy_sampler(model).sample(model, prompts, settings, seed)

    def teacher_samples(
        self, model, prompts: list[str], settings: SamplingSettings, seed: int
    ) -> list:
        """One sample per prompt from the base model, adapter off: the privileged teacher's
        analyses in ``reason_first`` mode. (siyan-zhao/OPSD generates them with its vLLM engine,
        which holds the student's merged adapter; the paper's teacher is the adapter-off model,
        which is what this samples on every backend.)"""
        return self.policy_sampler(model).sample_base(model, prompts, settings, seed)

    def analyses(
        self, policy, share: Share, protocol, max_positions: int | None, seed: int, timings: dict
    ) -> list:
        """``reason_first``: the teacher's analysis of each rollout's reference, one per rollout
        and step (as siyan-zhao/OPSD ``opsd_trainer.py`` lines 1303-1321 generate them), sampled
        adapter off with the rollout settings; the time goes to ``timings["teacher"]``."""
        requests = [
            analysis_request_ids(self.tokenizer, protocol, teacher_input, self.max_total)
            for teacher_input in share.teacher_inputs
        ]
        budget = analysis_budget(
            protocol.analysis_max_tokens,
            requests,
            encode(self.tokenizer, protocol.transition_text()),
            [s.token_ids for s in share.samples],
            max_positions,
        )
        if budget < 1:
            return [Sample(i, [], "", "length") for i in range(len(requests))]
        settings = dataclasses.replace(self.settings, max_new_tokens=budget)
        prompts = [self.tokenizer.decode(q, skip_special_tokens=False) for q in requests]
        t0 = time.perf_counter()
        analyses = self.teacher_samples(policy, prompts, settings, seed)
        timings["teacher"] += time.perf_counter() - t0
        return analyses

    def share(self, policy, data, rows: list[int], seed: int, timings: dict) -> Share:
        """The rollouts of data ``rows`` (one each), graded; sampling time goes to
        ``timings["rollout"]``."""
        problems = [data["problem"].iloc[i] for i in rows]
        ids = [str(data["id"].iloc[i]) for i in rows]
        teacher_inputs = [
            (
                data["problem"].iloc[i],
                data["reference_solution"].iloc[i],
                str(data["answer"].iloc[i]),
            )
            for i in rows
        ]
        prompts = [render_student_prompt(self.tokenizer, p) for p in problems]
        prompt_ids = [encode(self.tokenizer, p) for p in prompts]
        longest = max(len(p) for p in prompt_ids)
        if longest + 1 > self.max_total:
            # A rollout must fit max_total_length together with its prompt; never truncate one.
            return Share(rows, ids, teacher_inputs, prompt_ids, [], [0.0] * len(rows), len(rows))
        settings = dataclasses.replace(
            self.settings,
            max_new_tokens=min(self.settings.max_new_tokens, self.max_total - longest),
        )
        t0 = time.perf_counter()
        samples = self.sample(policy, prompts, settings, seed)
        timings["rollout"] += time.perf_counter() - t0
        rewards = [
            reward_exact_match(s.text, str(data["answer"].iloc[i]))
            for s, i in zip(samples, rows, strict=True)
        ]
        return Share(rows, ids, teacher_inputs, prompt_ids, samples, rewards)
