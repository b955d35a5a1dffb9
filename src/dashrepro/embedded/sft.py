"""Warm-start SFT of the embedded default's tiny base model.

A randomly initialised tiny Qwen3 cannot do arithmetic, and an on-policy distillation demo needs
a student that is right sometimes (sampled accuracy well inside 10-80 %) and a privileged teacher
that is measurably better. So the base model is first trained, by plain next-token SFT on the
response tokens only, on two prompt layouts of the same training rows:

- the student layout (problem only), which teaches it to solve the problems; and
- the privileged teacher's layouts (problem + reference solution + the protocol's instructions,
  and every other view a configured method's teacher reads, e.g. AVSD's partial solution or
  final answer alone), which teach it to use the reference when it is in context.

The student's and the teacher's sampled accuracies on the benchmarks are then measured and
recorded next to the model (``evaluate_base_model``), so a reader can check both conditions.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence

import pandas as pd
import torch

from dashrepro.data.prompts import TeacherProtocol, render_student_prompt
from dashrepro.data.views import render_teacher_view


def sft_target(reference_solution: str, answer: str) -> str:
    """A response in Qwen3's thinking layout: the worked steps in a think block, then the answer."""
    steps = reference_solution.split(" The answer is ", 1)[0]
    return f"<think>\n{steps}\n</think>\n\nThe answer is $\\boxed{{{answer}}}$."


def no_thinking_target(answer: str) -> str:
    """A response in Qwen3's non-thinking layout: an empty think block, then the answer at once
    (what Qwen3 writes with ``enable_thinking=False``)."""
    return f"<think>\n\n</think>\n\nThe answer is $\\boxed{{{answer}}}$."


def build_sft_examples(
    frame: pd.DataFrame,
    tokenizer,
    protocol: TeacherProtocol,
    teacher_fraction: float,
    seed: int,
    teacher_views: Sequence[str] = ("full",),
    no_thinking_fraction: float = 0.0,
) -> list[tuple[list[int], int]]:
    """(token ids, prompt length) pairs; a ``teacher_fraction`` of rows use a teacher layout,
    each drawn uniformly from ``teacher_views`` (``data.views.TEACHER_VIEWS``: the layouts
    the configured methods' teachers read, so that each of them is a teacher that can read its
    context -- AVSD's three views as well as the protocol's message).

    A ``no_thinking_fraction`` of the student-layout rows answer at once without the worked
    steps (``no_thinking_target``), so the base student often skips its reasoning and guesses,
    while the teacher always reasons from its reference: the gap self-distillation closes.
    """
    rng = random.Random(seed)
    # Its own stream, so the layouts drawn (which rows are the teacher's, in which view) do not
    # depend on the no-thinking share.
    skip_rng = random.Random(f"{seed}:no_thinking")
    examples = []
    for row in frame.itertuples(index=False):
        if rng.random() < teacher_fraction:
            view = teacher_views[rng.randrange(len(teacher_views))]
            prompt = render_teacher_view(
                tokenizer, view, row.problem, row.reference_solution, str(row.answer), protocol
            )
            target = sft_target(row.reference_solution, row.answer)
        else:
            prompt = render_student_prompt(tokenizer, row.problem)
            if skip_rng.random() < no_thinking_fraction:
                target = no_thinking_target(str(row.answer))
            else:
                target = sft_target(row.reference_solution, row.answer)
        target += tokenizer.eos_token
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        target_ids = tokenizer(target, add_special_tokens=False)["input_ids"]
        examples.append((prompt_ids + target_ids, len(prompt_ids)))
    return examples


def collate_right_padded(batch, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for row, (ids, prompt_len) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention[row, : len(ids)] = 1
        labels[row, prompt_len : len(ids)] = torch.tensor(ids[prompt_len:])
    return input_ids, attention, labels


def accumulate_batch_gradient(model, batch, pad_id: int, length_groups: int) -> torch.Tensor:
    """Backpropagate the batch's mean next-token loss over its response tokens; return it.

    The rows go through the model in ``length_groups`` groups of similar length (sorted), each
    padded only to its own longest row: the student layout's prompts are a tenth as long as the
    teacher's, so one padded batch would spend most of its compute on padding. Each group's
    summed loss is divided by the whole batch's token count, so the gradient is the batch
    mean's, whatever the grouping (up to rounding).
    """
    ordered = sorted(batch, key=lambda example: len(example[0]))
    size = math.ceil(len(ordered) / max(1, length_groups))
    n_targets = sum(len(ids) - prompt_len for ids, prompt_len in ordered)
    total = torch.zeros(())
    for start in range(0, len(ordered), size):
        input_ids, attention, labels = collate_right_padded(ordered[start : start + size], pad_id)
        logits = model(input_ids=input_ids, attention_mask=attention).logits
        summed = torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(),
            labels[:, 1:].flatten(),
            ignore_index=-100,
            reduction="sum",
        )
        (summed / n_targets).backward()
        total += summed.detach() / n_targets
    return total


def run_sft(model, examples, settings: Mapping, seed: int, log=print, callback=None) -> list[dict]:
    """AdamW with linear warmup and cosine decay over ``settings['steps']`` steps, each on
    ``settings['batch_size']`` examples (in ``settings['length_groups']`` forward passes)."""
    torch.manual_seed(seed)
    rng = random.Random(seed)
    steps, batch_size = settings["steps"], settings["batch_size"]
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=settings["lr"], weight_decay=settings.get("weight_decay", 0.0)
    )
    warmup = max(1, steps // 20)

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    pad_id = model.config.pad_token_id
    model.train()
    history = []
    started = time.time()
    # Student- and teacher-layout rows are mixed in every batch: measured on the tiny model, this
    # learns several times faster per step than batches of one layout at a time, at a higher
    # padding cost per step (both layouts teach the same digit look-ups).
    order: list[int] = []
    for step in range(steps):
        if len(order) < batch_size:
            fresh = list(range(len(examples)))
            rng.shuffle(fresh)
            order += fresh
        batch = [examples[i] for i in order[:batch_size]]
        order = order[batch_size:]
        optimizer.zero_grad(set_to_none=True)
        loss = accumulate_batch_gradient(model, batch, pad_id, settings.get("length_groups", 1))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        history.append(
            {"step": step + 1, "loss": float(loss.detach()), "lr": scheduler.get_last_lr()[0]}
        )
        if callback is not None:
            callback(step + 1)
        if (step + 1) % max(1, steps // 10) == 0:
            log(
                f"[sft] step {step + 1}/{steps} loss {float(loss):.4f} ({time.time() - started:.0f}s)"
            )
    return history
