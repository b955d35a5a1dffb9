"""The rollout phase: student rollouts of one micro-batch through the backend's ``RolloutSampler``.

One rollout per problem from the problem alone, with the run's sampling settings and a seed
derived from (run seed, step, global micro-batch), so a rollout does not depend on how the
micro-batches are spread over processes (unless ``train.rollout_call_rows`` groups them: a call
takes its first micro-batch's seed). ``train.rollout_backend``: ``hf`` samples the live
PEFT model; ``hf_compiled`` a plain copy refreshed from it after each optimizer step; ``vllm`` a
colocated engine, the current adapter synced into it before each micro-batch. A prompt with no room for one response token
is never truncated: its micro-batch is skipped. Rewards: the exact-match grade of the final
answer. The details: docs/training.md.

    phase = RolloutPhase(tokenizer, train, lora, base_model, adapter_dir, rank=0)
    share = phase.share(policy, data, rows=[4, 17, 9], seed=123, timings=timings)
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from dashrepro.data.prompts import render_student_prompt
from dashrepro.grading import reward_exact_match
from dashrepro.sampling import (
    RolloutOptions,
    RolloutSampler,
    Sample,
    SamplingSettings,
    make_rollout_sampler,
)
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
    prompts: list[str] = field(default_factory=list)  # the rendered student prompts


def sampling_settings(train: TrainSettings) -> SamplingSettings:
    """The rollout sampling settings of a run's training settings."""
    return SamplingSettings(
        temperature=train.temperature,
        top_p=train.top_p,
        top_k=train.top_k,
        max_new_tokens=train.max_new_tokens,
    )


class RolloutPhase:
    """Student rollouts (and the teacher's analyses) through the ``train.rollout_backend``'s
    ``RolloutSampler`` (``sampling.make_rollout_sampler``), made at the first sampling."""

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
        # What each backend may need; each reads its own (sampling.backends).
        self.options = RolloutOptions(
            base_model=str(base_model),
            adapter_dir=Path(adapter_dir),
            rank=rank,
            lora_rank=lora.r,
            precision=train.precision,
            max_model_len=train.max_total_length,
            engine_options=dict(train.vllm),
        )
        self.sampler: RolloutSampler | None = None

    def policy_sampler(self, policy) -> RolloutSampler:
        """The backend's sampler (made for ``policy`` the first time)."""
        if self.sampler is None:
            self.sampler = make_rollout_sampler(self.backend, self.tokenizer, policy, self.options)
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
        return self._call_analyses(policy, [share], protocol, max_positions, seed, timings)[0]

    def _call_analyses(
        self, policy, shares: list[Share], protocol, max_positions, seed: int, timings: dict
    ) -> list[list]:
        """The analyses of one call's micro-batches, in one call (their budget: the call's)."""
        requests = [
            analysis_request_ids(self.tokenizer, protocol, teacher_input, self.max_total)
            for share in shares
            for teacher_input in share.teacher_inputs
        ]
        budget = analysis_budget(
            protocol.analysis_max_tokens,
            requests,
            encode(self.tokenizer, protocol.transition_text()),
            [s.token_ids for share in shares for s in share.samples],
            max_positions,
        )
        if budget < 1:
            return [[Sample(i, [], "", "length") for i in range(len(sh.rows))] for sh in shares]
        settings = dataclasses.replace(self.settings, max_new_tokens=budget)
        prompts = [self.tokenizer.decode(q, skip_special_tokens=False) for q in requests]
        t0 = time.perf_counter()
        analyses = self.teacher_samples(policy, prompts, settings, seed)
        timings["teacher"] += time.perf_counter() - t0
        return split_samples(analyses, [len(share.rows) for share in shares])

    def share(self, policy, data, rows: list[int], seed: int, timings: dict) -> Share:
        """The rollouts of data ``rows`` (one each), graded; sampling time goes to
        ``timings["rollout"]``."""
        return self.step_shares(policy, data, [rows], [seed], timings)[0]

    def step_shares(
        self,
        policy,
        data,
        micro_rows: list[list[int]],
        seeds: list[int],
        timings: dict,
        *,
        call_rows: int | None = None,
        analyses: tuple | None = None,
    ) -> list[Share]:
        """A step's Shares, one per micro-batch of data rows ``micro_rows``, sampled in calls
        of whole micro-batches of at most ``call_rows`` rows (``None``: a call each), each call
        with its first micro-batch's seed and its response cap from its longest prompt; then,
        where ``analyses`` is ``(protocol, max_positions, seeds)``, the call's analyses."""
        prepared = [self._prepare(data, rows) for rows in micro_rows]
        for call in call_groups([share.prompt_ids for share in prepared], self.max_total, call_rows):
            shares = [prepared[i] for i in call]
            longest = max(len(p) for share in shares for p in share.prompt_ids)
            settings = dataclasses.replace(
                self.settings,
                max_new_tokens=min(self.settings.max_new_tokens, self.max_total - longest),
            )
            prompts = [prompt for share in shares for prompt in share.prompts]
            t0 = time.perf_counter()
            samples = self.sample(policy, prompts, settings, seeds[call[0]])
            timings["rollout"] += time.perf_counter() - t0
            parts = split_samples(samples, [len(share.rows) for share in shares])
            for share, part in zip(shares, parts, strict=True):
                share.samples = part
                share.rewards = [
                    reward_exact_match(s.text, str(data["answer"].iloc[i]))
                    for s, i in zip(part, share.rows, strict=True)
                ]
            if analyses is not None:
                protocol, max_positions, analysis_seeds = analyses
                made = self._call_analyses(
                    policy, shares, protocol, max_positions, analysis_seeds[call[0]], timings
                )
                for share, part in zip(shares, made, strict=True):
                    share.analyses = part
        return prepared

    def _prepare(self, data, rows: list[int]) -> Share:
        """The Share of data ``rows`` before sampling: a prompt too long for one response
        token leaves it skipped (no samples, zero rewards)."""
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
        share = Share(rows, ids, teacher_inputs, prompt_ids, [], [0.0] * len(rows), prompts=prompts)
        if max(len(p) for p in prompt_ids) + 1 > self.max_total:
            # A rollout must fit max_total_length together with its prompt; never truncate one.
            share.skipped_long_prompts = len(rows)
        return share


def call_groups(
    prompt_ids: list[list[list[int]]], max_total: int, call_rows: int | None
) -> list[list[int]]:
    """The sampling calls of a step's micro-batches (their prompts' ids): consecutive ones
    whose prompts leave room for a response token, at most ``call_rows`` rows a call (a larger
    micro-batch alone); ``None``: one call each."""
    calls: list[list[int]] = []
    held = 0
    for index, prompts in enumerate(prompt_ids):
        if max(len(p) for p in prompts) + 1 > max_total:
            continue
        rows = len(prompts)
        if calls and call_rows is not None and held + rows <= call_rows:
            calls[-1].append(index)
            held += rows
        else:
            calls.append([index])
            held = rows
    return calls


def split_samples(samples: list[Sample], sizes: list[int]) -> list[list[Sample]]:
    """One call's samples back in its micro-batches, each numbered from 0 as a call of its own."""
    parts, start = [], 0
    for size in sizes:
        part = samples[start : start + size]
        parts.append([dataclasses.replace(s, prompt_index=s.prompt_index - start) for s in part])
        start += size
    return parts
