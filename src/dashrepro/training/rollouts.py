"""Student rollouts of one micro-batch, through a sampler backend: HF ``generate`` or vLLM.

One rollout per problem from the problem alone, with the run's sampling settings and a seed
derived from (run seed, step, global micro-batch), so a rollout does not depend on how the
micro-batches are spread over processes. ``train.rollout_backend``: ``hf`` samples the live
PEFT model; ``vllm`` a colocated engine, the current adapter synced into it before each
micro-batch (asleep between samplings on a GPU). A prompt with no room for one response token
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

from dashrepro.adapters import save_adapter
from dashrepro.data.prompts import render_student_prompt
from dashrepro.grading import reward_exact_match
from dashrepro.sampling import Sample, SamplingSettings
from dashrepro.sampling.hf import sample_responses
from dashrepro.settings import LoraSettings, TrainSettings
from dashrepro.training.batching import encode
from dashrepro.training.teacher import analysis_budget, analysis_request_ids


def cuda_available() -> bool:
    """Whether a CUDA device is here (vLLM's sleep mode needs one)."""
    import torch

    return torch.cuda.is_available()


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
    """Student rollouts by HF ``generate`` or a colocated vLLM engine with a synced adapter."""

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
        self.rank = rank
        self.backend = train.rollout_backend
        self.settings = sampling_settings(train)
        self.max_total = train.total_length_cap
        self.sampler = None
        self.sleep_mode = False
        if self.backend == "vllm":
            from dashrepro.sampling.vllm import VLLMSampler

            options = dict(train.vllm)
            self.sleep_mode = cuda_available()
            self.sampler = VLLMSampler(
                str(base_model),
                max_lora_rank=lora.r,
                enable_sleep_mode=self.sleep_mode,
                max_model_len=train.max_total_length,
                **options,
            )
            self.adapter_dir = Path(adapter_dir)

    def sample(self, model, prompts: list[str], settings: SamplingSettings, seed: int) -> list:
        """One sample per prompt from the current adapter of ``model``."""
        if self.backend == "hf":
            return sample_responses(model, self.tokenizer, prompts, settings, seed=seed)
        # vLLM serves the adapter from disk: write the current one, sync, sample, then sleep so
        # that training gets the GPU memory back (level 1 keeps the weights in CPU memory).
        folder = self.adapter_dir / f"rank{self.rank}"
        save_adapter(model, folder)
        self._wake_up()
        self.sampler.sync_adapter(folder)
        samples = self.sampler.sample(prompts, settings, seed, adapter_dir=folder)
        self._sleep()
        return samples

    def _wake_up(self) -> None:
        if self.sleep_mode:
            self.sampler.wake_up()

    def _sleep(self) -> None:
        if self.sleep_mode:
            self.sampler.sleep(level=1)

    def teacher_samples(
        self, model, prompts: list[str], settings: SamplingSettings, seed: int
    ) -> list:
        """One sample per prompt from the base model, adapter off: the privileged teacher's
        analyses in ``reason_first`` mode. (siyan-zhao/OPSD generates them with its vLLM engine,
        which holds the student's merged adapter; the paper's teacher is the adapter-off model,
        which is what this samples on both backends.)"""
        if self.backend == "hf":
            with model.disable_adapter():
                return sample_responses(model, self.tokenizer, prompts, settings, seed=seed)
        self._wake_up()
        samples = self.sampler.sample(prompts, settings, seed, adapter_dir=None)
        self._sleep()
        return samples

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
