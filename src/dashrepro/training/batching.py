"""Which training rows a micro-batch reads, and how its tokens are laid out.

The rows of a micro-batch are a pure function of (seed, step, global micro-batch index): a
seeded permutation per epoch, consumed in order, so 2 processes with one micro-batch each read
what 1 process reads with 2 accumulated (``BatchLayout``, ``rollout_rows``; GRPO repeats each
problem ``group`` times). Inputs are ``[prompt | response | pad]`` rows (``right_pad_concat``);
``response_logits`` lines student and teacher distributions up token by token although their
prompts differ in length (docs/training.md).

    layout = BatchLayout(micro=3, accum=2, world=1)
    rollout_rows(n_rows=40, seed=0, step=1, layout=layout, accumulation_index=1)  # 3 row ids
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd
import torch


@dataclass(frozen=True)
class BatchLayout:
    """A step's rollouts: ``micro`` per micro-batch, ``accum`` micro-batches per process,
    ``world`` processes, this one ``rank``; ``group`` rollouts per problem (GRPO, else 1)."""

    micro: int
    accum: int
    world: int = 1
    rank: int = 0
    group: int = 1

    @property
    def micros_per_step(self) -> int:
        return self.accum * self.world

    def global_micro(self, accumulation_index: int) -> int:
        """The step-wide index of this process's micro-batch ``accumulation_index``."""
        return accumulation_index * self.world + self.rank


def check_training_data(data: pd.DataFrame, where: str) -> None:
    """Refuse a training set with rows whose reference solution is missing or blank."""
    missing = data["reference_solution"].isna() | (
        data["reference_solution"].astype(str).str.strip() == ""
    )
    if missing.any():
        raise ValueError(
            f"{where}: {int(missing.sum())} rows without a reference solution, e.g. "
            f"ids {list(data.loc[missing, 'id'][:5])}"
        )


@lru_cache(maxsize=4)
def epoch_order(n_rows: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The seeded permutation of epoch ``epoch``. Cached: every row of a micro-batch asks for
    it, and shuffling a 10,000-row set takes 2 ms."""
    order = list(range(n_rows))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return tuple(order)


def micro_batch_rows(
    n_rows: int, seed: int, step: int, micro: int, problems_per_micro: int, micros_per_step: int
) -> list[int]:
    """Row indices of global micro-batch ``micro`` of ``step`` (1-based): a pure function.

    The data is read in a fresh seeded permutation per epoch; step ``s`` consumes examples
    ``(s - 1) * problems_per_step ...`` of that endless stream, so the position is never state.
    """
    start = ((step - 1) * micros_per_step + micro) * problems_per_micro
    rows = []
    for position in range(start, start + problems_per_micro):
        epoch, offset = divmod(position, n_rows)
        rows.append(epoch_order(n_rows, seed, epoch)[offset])
    return rows


def rollout_rows(
    n_rows: int, seed: int, step: int, layout: BatchLayout, accumulation_index: int
) -> list[int]:
    """The data row of each rollout of one micro-batch (``layout.micro`` rollouts) of ``step``.

    Without groups, global micro-batch ``layout.global_micro(accumulation_index)`` reads its own
    ``micro`` problems. With GRPO groups, a process reads ``micro * accum / group`` problems per
    step, repeats each ``group`` times, and its micro-batches take consecutive slices, so a
    group may span micro-batches of the same process (its rewards are normalised together).
    """
    micro, accum, group = layout.micro, layout.accum, layout.group
    if group == 1:
        return micro_batch_rows(
            n_rows, seed, step, layout.global_micro(accumulation_index), micro, accum * layout.world
        )
    if (micro * accum) % group:
        raise ValueError(
            f"GRPO group_size {group} must divide micro_batch_size x grad_accumulation "
            f"({micro} x {accum})"
        )
    problems = micro_batch_rows(
        n_rows, seed, step, layout.rank, micro * accum // group, layout.world
    )
    flat = [row for row in problems for _ in range(group)]
    return flat[accumulation_index * micro : (accumulation_index + 1) * micro]


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of an already rendered prompt (the chat template added every special token)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def right_pad_concat(
    prompts: list[list[int]], responses: list[list[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """[prompt | response | pad] rows; returns ids, attention mask and prompt lengths."""
    width = max(len(p) + len(r) for p, r in zip(prompts, responses, strict=True))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        seq = p + r
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return ids, mask, torch.tensor([len(p) for p in prompts])


def response_batch(
    responses: list[list[int]], pad_id: int, device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampled tokens [B, T] (right-padded with ``pad_id``) and their float mask [B, T]."""
    width = max(len(r) for r in responses)
    mask = torch.zeros((len(responses), width), device=device)
    tokens = torch.full((len(responses), width), pad_id, dtype=torch.long, device=device)
    for row, r in enumerate(responses):
        mask[row, : len(r)] = 1.0
        tokens[row, : len(r)] = torch.tensor(r, device=device)
    return tokens, mask


def response_logits(
    logits: torch.Tensor, prompt_lengths: torch.Tensor, response_width: int
) -> torch.Tensor:
    """Logits that predict response token j of row b: position prompt_len_b + j - 1 -> [B, T, V]."""
    offsets = torch.arange(response_width, device=logits.device)
    prompt_lengths = prompt_lengths.to(logits.device)
    positions = (prompt_lengths[:, None] - 1 + offsets[None, :]).clamp(max=logits.shape[1] - 1)
    index = positions[:, :, None].expand(-1, -1, logits.shape[-1])
    return torch.gather(logits, 1, index)


def student_response_logits(
    model, prompts: list[list[int]], responses: list[list[int]], pad_id: int, device
) -> torch.Tensor:
    """The student's logits over ``responses`` after ``prompts`` [B, T, V] (in the model's
    dtype, with grad where enabled)."""
    ids, attention, lengths = right_pad_concat(prompts, responses, pad_id)
    logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
    return response_logits(logits, lengths, max(len(r) for r in responses))


def teacher_response_logits(
    policy, contexts: list[list[list[int]]], responses: list[list[int]], pad_id: int, device
) -> list[torch.Tensor]:
    """The self-teacher's logits over ``responses`` [B, T, V] (fp32, detached), one tensor per
    view, after ``contexts[rollout][view]``: the policy with its adapter off."""
    width = max(len(r) for r in responses)
    view_logits = []
    for prompts in zip(*contexts, strict=True):
        ids, attention, lengths = right_pad_concat(list(prompts), responses, pad_id)
        with torch.no_grad(), policy.disable_adapter():
            logits = policy(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
            view_logits.append(response_logits(logits, lengths, width).float())
    return view_logits
