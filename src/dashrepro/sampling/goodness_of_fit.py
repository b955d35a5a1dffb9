"""Does a sampler draw from the model's own distribution? A goodness-of-fit test with power.

Every drawn token is scored against the distribution it should come from (the policy's
next-token probabilities, tempered and cut by top-k / top-p as HF and vLLM cut them) by its
randomized probability integral transform, which is exactly U(0, 1), independently per token,
when the sampler is right (Brockwell 2007); a Kolmogorov-Smirnov test gives the p-value, and a
token outside the support fails on its own. The construction: docs/sampling.md.

    fit = sampler_fit(sampler, policy, prompts, settings, seed=0, repeats=256)
    assert fit.p_value > alpha and fit.out_of_support == 0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dashrepro.sampling.base import SamplingSettings


def warped_probabilities(logits: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """The sampling distribution over the last axis of ``logits`` (float64): temperature, then
    top-k, then top-p, in the order and with the boundary rules of HF ``generate``."""
    scores = logits.double() / settings.temperature
    if settings.top_k:
        kth = torch.topk(scores, min(settings.top_k, scores.shape[-1]), dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, -math.inf)
    if settings.top_p < 1.0:
        # HF's TopPLogitsWarper: sorted ascending, drop the tokens whose cumulative probability
        # is at most 1 - top_p; the most likely token always stays.
        ascending, order = torch.sort(scores, dim=-1)
        cumulative = ascending.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= 1 - settings.top_p
        drop_sorted[..., -1] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, -math.inf)
    return scores.softmax(dim=-1)


def randomized_pit(
    probabilities: torch.Tensor, tokens: torch.Tensor, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``(u, p)``: each drawn token's randomized PIT over the vocabulary sorted by falling
    probability (ties by token id), and its probability (0: outside the support)."""
    order = torch.sort(-probabilities, dim=-1, stable=True).indices
    ranked = probabilities.gather(-1, order)
    rank = torch.argsort(order, dim=-1).gather(-1, tokens[:, None])[:, 0]
    p = probabilities.gather(-1, tokens[:, None])[:, 0]
    before = ranked.cumsum(dim=-1).gather(-1, rank[:, None])[:, 0] - p
    jitter = torch.from_numpy(rng.random(len(tokens)))
    u = (before + jitter * p).clamp(0.0, 1.0)
    return u.numpy(), p.numpy()


@dataclass(frozen=True)
class Fit:
    """One sampler at one setting: how many tokens were scored and what the test says."""

    n_tokens: int
    out_of_support: int  # drawn tokens the setting gives probability 0
    ks_statistic: float
    p_value: float
    mean_u: float  # 0.5 when right; above: too hot, below: too cold

    def accepts(self, alpha: float) -> bool:
        return self.out_of_support == 0 and self.p_value > alpha

    def __str__(self) -> str:
        return (
            f"{self.n_tokens} tokens, KS {self.ks_statistic:.4f}, p {self.p_value:.3g}, "
            f"mean u {self.mean_u:.4f}, out of support {self.out_of_support}"
        )


@torch.no_grad()
def token_pits(
    policy,
    prompt_ids: Sequence[int],
    responses: Sequence[Sequence[int]],
    settings: SamplingSettings,
    rng: np.random.Generator,
    pad_id: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The PITs and probabilities of every token of ``responses`` to one prompt, scored by one
    batched forward pass of ``policy`` (right-padded: a causal model's real positions do not
    see the padding)."""
    responses = [list(r) for r in responses if len(r)]
    if not responses:
        return np.zeros(0), np.zeros(0)
    width = max(len(r) for r in responses)
    ids = torch.full((len(responses), len(prompt_ids) + width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, response in enumerate(responses):
        sequence = list(prompt_ids) + response
        ids[row, : len(sequence)] = torch.tensor(sequence)
        mask[row, : len(sequence)] = 1
    device = getattr(policy, "device", torch.device("cpu"))
    logits = policy(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    start = len(prompt_ids) - 1
    logits = logits[:, start : start + width].float().cpu()
    valid = mask[:, start + 1 : start + 1 + width].bool()
    drawn = ids[:, start + 1 : start + 1 + width][valid]
    return randomized_pit(warped_probabilities(logits[valid], settings), drawn, rng)


def draw_responses(
    sampler,
    prompts: Sequence[str],
    settings: SamplingSettings,
    *,
    seed: int,
    repeats: int,
    adapter_dir=None,
) -> list[list[int]]:
    """The token ids of ``repeats`` responses to each prompt, in prompt order, drawn through
    ``sampler.sample`` as the pipeline seeds it: one call, one ``seed``."""
    requests = [prompt for prompt in prompts for _ in range(repeats)]
    samples = sampler.sample(requests, settings, seed, adapter_dir=adapter_dir)
    return [list(s.token_ids) for s in samples]


def responses_fit(
    tokenizer,
    policy,
    prompts: Sequence[str],
    responses: Sequence[Sequence[int]],
    settings: SamplingSettings,
    *,
    pit_seed: int = 0,
) -> Fit:
    """Score drawn ``responses`` (the same number to each prompt, in prompt order) against
    ``policy`` at ``settings`` and test the PITs against U(0, 1). One draw can be scored at
    several settings: that is how the power tests reuse a sampler test's draw."""
    from scipy import stats

    repeats, rest = divmod(len(responses), len(prompts))
    if rest:
        raise ValueError(f"{len(responses)} responses do not split over {len(prompts)} prompts")
    rng = np.random.default_rng(pit_seed)
    pad_id = tokenizer.pad_token_id or 0
    pits, probabilities = [], []
    for index, prompt in enumerate(prompts):
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        drawn = responses[index * repeats : (index + 1) * repeats]
        u, p = token_pits(policy, prompt_ids, drawn, settings, rng, pad_id)
        pits.append(u)
        probabilities.append(p)
    u, p = np.concatenate(pits), np.concatenate(probabilities)
    test = stats.kstest(u, "uniform")
    return Fit(
        n_tokens=len(u),
        out_of_support=int((p <= 0).sum()),
        ks_statistic=float(test.statistic),
        p_value=float(test.pvalue),
        mean_u=float(u.mean()) if len(u) else math.nan,
    )
