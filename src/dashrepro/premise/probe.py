"""The premise probe's samples and scores: K rollouts per training problem from the base student,
each token scored by the student and its privileged teacher, before any training.

The probe is step 0 of a run of the probed method, by the trainer's own parts: a fresh LoRA
student (B = 0, so its outputs are the base model's) samples through the trainer's
``RolloutPhase`` with the scale's rollout settings; the teacher is that model with the adapter
disabled, after its context in each of the method's views (``teacher.view_prompt_ids``; in
``reason_first`` mode after its own analysis); the method's loss gives r_t, the gates and c_k
(``losses.method_loss``, at the loss temperature), beside the unclipped forward KL D_t of the
motivation figure. The problems are the first of a seeded shuffle of the training set.

    tokens, rollouts = run_probe(base_model, train_parquet, probe, train, lora, method, protocol)
"""

from __future__ import annotations

import dataclasses
import random
import tempfile
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
import torch

from dashrepro import objectives
from dashrepro.data.prompts import TeacherProtocol
from dashrepro.io import load_tokenizer, read_parquet
from dashrepro.sampling import derive_seed
from dashrepro.settings import LoraSettings, PremiseProbeSettings, TrainSettings
from dashrepro.training.batching import (
    check_training_data,
    response_batch,
    student_response_logits,
    teacher_response_logits,
)
from dashrepro.training.distributed import make_accelerator
from dashrepro.training.losses import method_loss
from dashrepro.training.methods import MethodSpec
from dashrepro.training.model import load_lora_student
from dashrepro.training.rollouts import RolloutPhase, Share
from dashrepro.training.teacher import generates_analysis, view_prompt_ids

#: The columns of ``tokens.parquet``: one row per scored response token.
TOKEN_COLUMNS = (
    "problem_id", "task", "sample", "rollout", "position", "token_id", "D", "r", "gate", "coefficient",
    "reward",
)  # fmt: skip
#: The columns of ``rollouts.parquet``: one row per sampled rollout, scored or not.
ROLLOUT_COLUMNS = (
    "problem_id",
    "task",
    "sample",
    "rollout",
    "reward",
    "n_tokens",
    "finish_reason",
    "text",
)


def probe_rows(tasks: Sequence[str], probe: PremiseProbeSettings) -> list[int]:
    """The training rows probed (``tasks``: each row's task): the first ``probe.problems`` rows
    of each task in a seeded shuffle, the tasks in their order of first appearance."""
    order = list(range(len(tasks)))
    random.Random(f"premise:{probe.seed}").shuffle(order)
    rows = []
    for task in dict.fromkeys(tasks):
        of_task = [row for row in order if tasks[row] == task]
        if probe.problems > len(of_task):
            raise ValueError(
                f"premise_probe.problems: {probe.problems} is more than the training set's "
                f"{len(of_task)} problems of task {task!r}"
            )
        rows += of_task[: probe.problems]
    return rows


class PremiseProbe:
    """The base student and its teacher on one scale's settings, as the trainer sets them up."""

    def __init__(self, base_model, train: TrainSettings, lora: LoraSettings, method: MethodSpec,
                 protocol: TeacherProtocol, probe: PremiseProbeSettings):  # fmt: skip
        if method.objective != "distill" or method.grpo:
            raise ValueError(
                f"premise_probe.method: {method.name!r} is not a distillation method without a "
                "grpo term"
            )
        self.train, self.method, self.protocol, self.probe = train, method, protocol, probe
        # Device and precision as the trainer's, on one process and without DeepSpeed (nothing
        # is trained here).
        self.accelerator = make_accelerator(
            dataclasses.replace(train, deepspeed_config=None, grad_accumulation=1)
        )
        self.tokenizer = load_tokenizer(base_model)
        self.tokenizer.padding_side = "right"
        self.pad_id = self.tokenizer.pad_token_id
        policy = load_lora_student(base_model, lora, probe.seed, train)
        self.policy = self.accelerator.prepare_model(policy)
        self.policy.eval()
        self.device = self.accelerator.device
        self.max_positions = getattr(self.policy.config, "max_position_embeddings", None)
        self.base_model = str(base_model)
        self.lora = lora

    def sample(self, data: pd.DataFrame, rows: list[int]) -> Share:
        """K rollouts of each of ``rows`` (each row repeated K times, in order), one sampler
        call; in ``reason_first`` mode the teacher's analyses too."""
        k = self.probe.rollouts_per_problem
        repeated = [row for row in rows for _ in range(k)]
        timings = {"rollout": 0.0, "teacher": 0.0}
        with tempfile.TemporaryDirectory() as adapter_dir:  # vLLM reads the adapter from disk
            sampler = RolloutPhase(
                self.tokenizer, self.train, self.lora, self.base_model, adapter_dir, rank=0
            )
            seed = derive_seed(self.probe.seed, "premise", "rollout")
            share = sampler.share(self.policy, data, repeated, seed, timings)
            if share.samples and generates_analysis(self.method, self.protocol):
                seed = derive_seed(self.probe.seed, "premise", "analysis")
                share.analyses = sampler.analyses(
                    self.policy, share, self.protocol, self.max_positions, seed, timings
                )
            sampler.shutdown()  # a vLLM engine gives its memory back before the scoring
        return share

    @torch.no_grad()
    def score(self, share: Share, indices: list[int]) -> dict[str, torch.Tensor]:
        """Per-token D_t, r_t, gates and c_k of rollouts ``indices`` of ``share`` ([B, T] each,
        with the mask)."""
        responses = [share.samples[i].token_ids for i in indices]
        tokens, mask = response_batch(responses, self.pad_id, self.device)
        contexts = [
            view_prompt_ids(
                self.tokenizer, self.method, self.protocol, share.teacher_inputs[i],
                None if share.analyses is None else share.analyses[i].token_ids,
                self.train.total_length_cap,
            )
            for i in indices
        ]  # fmt: skip
        view_logits = teacher_response_logits(
            self.policy, contexts, responses, self.pad_id, self.device
        )
        prompts = [share.prompt_ids[i] for i in indices]
        student = student_response_logits(
            self.policy, prompts, responses, self.pad_id, self.device
        ).float()
        temperature = self.train.loss_temperature
        trace = method_loss(
            self.method, student, view_logits, tokens, mask, temperature=temperature
        ).trace
        # The motivation figure's D_t: the unclipped forward KL, whatever the method's signal.
        divergence = objectives.local_signal(
            student / temperature, view_logits[0] / temperature, mask,
            divergence="forward_kl", tau=None,
        )  # fmt: skip
        return {"mask": mask, "tokens": tokens, "D": divergence, **trace}

    def token_frame(self, share: Share, task_of: Mapping[str, str]) -> pd.DataFrame:
        """``tokens.parquet``: every token of every non-empty rollout, scored in micro-batches."""
        k = self.probe.rollouts_per_problem
        kept = [i for i, s in enumerate(share.samples) if s.token_ids]
        parts = []
        size = self.probe.micro_batch_size
        for start in range(0, len(kept), size):
            indices = kept[start : start + size]
            scored = {name: value.cpu() for name, value in self.score(share, indices).items()}
            for b, i in enumerate(indices):
                n = int(scored["mask"][b].sum())
                parts.append(
                    pd.DataFrame(
                        {
                            "problem_id": share.ids[i],
                            "task": task_of[share.ids[i]],
                            "sample": i % k,
                            "rollout": i,
                            "position": range(n),
                            "token_id": scored["tokens"][b, :n].numpy(),
                            "D": scored["D"][b, :n].numpy(),
                            "r": scored["r"][b, :n].numpy(),
                            "gate": scored["gate"][b, :n].numpy(),
                            "coefficient": scored["coefficient"][b, :n].numpy(),
                            "reward": float(share.rewards[i]),
                        }
                    )
                )
        columns = list(TOKEN_COLUMNS)
        return (
            pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)
        )


def rollout_frame(share: Share, k: int, task_of: Mapping[str, str]) -> pd.DataFrame:
    """``rollouts.parquet``: each rollout's task, reward, length, finish and text."""
    return pd.DataFrame(
        [
            {
                "problem_id": share.ids[i],
                "task": task_of[share.ids[i]],
                "sample": i % k,
                "rollout": i,
                "reward": float(share.rewards[i]),
                "n_tokens": len(sample.token_ids),
                "finish_reason": sample.finish_reason,
                "text": sample.text,
            }
            for i, sample in enumerate(share.samples)
        ],
        columns=list(ROLLOUT_COLUMNS),
    )


def run_probe(base_model, train_parquet, probe, train, lora, method: MethodSpec,
              protocol: TeacherProtocol, log: Callable[[str], None] = print):  # fmt: skip
    """(tokens, rollouts) of the probe of ``method`` at one base model."""
    probe = PremiseProbeSettings.from_config(probe)
    train = TrainSettings.from_config(train)
    lora = LoraSettings.from_config(lora)
    data = read_parquet(train_parquet)
    check_training_data(data, str(train_parquet))
    # A training set without tasks (a real one) is one task.
    tasks = data["task"].astype(str).tolist() if "task" in data else ["all"] * len(data)
    rows = probe_rows(tasks, probe)
    probing = PremiseProbe(base_model, train, lora, method, protocol, probe)
    share = probing.sample(data, rows)
    if not share.samples:
        raise ValueError(
            f"premise probe: the prompts of {train_parquet} leave no room for a rollout within "
            f"max_total_length={train.max_total_length}"
        )
    log(f"premise probe: {len(share.samples)} rollouts of {len(rows)} problems sampled")
    task_of = dict(zip(data["id"].astype(str), tasks, strict=True))
    tokens = probing.token_frame(share, task_of)
    rollouts = rollout_frame(share, probe.rollouts_per_problem, task_of)
    log(f"premise probe: {len(tokens)} tokens scored")
    return tokens, rollouts
