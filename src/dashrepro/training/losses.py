"""The loss of one micro-batch of rollouts, per training objective, and the GRPO hybrid term.

``OBJECTIVE_LOSSES`` maps each objective of ``objectives.registry.OBJECTIVES`` to its function
``f(method, student_logits, view_logits, tokens, mask) -> MicroLoss`` (``view_logits``: one
teacher-logit tensor per teacher view): ``distill`` (the local signal aggregated by the
method's aggregation), ``eopd``, ``avsd``; a method with a ``grpo`` entry adds eta times a GRPO
term. A new objective: an entry in ``registry.OBJECTIVES``, its function here, its name in
``OBJECTIVE_LOSSES`` (a test checks the two agree). The math is ``dashrepro.objectives``',
reached at call time, so a benchmark that wraps it times what training runs. The equations:
docs/objectives.md.

    result = method_loss(method, student_logits, view_logits, tokens, mask, advantages)
    result.loss.backward()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from dashrepro import objectives
from dashrepro.settings import GrpoSettings
from dashrepro.training.methods import MethodSpec


@dataclass
class MicroLoss:
    loss: torch.Tensor
    metrics: dict[str, float]
    trace: dict[str, torch.Tensor]  # per-token tensors [B, T] for token_traces.parquet
    # Each token's weight [B, T], detached: the multiplier of its term in the objective before
    # the batch normalisation (c_k of the aggregation; 1 per token for EOPD and AVSD), 0 on
    # padding. Recorded (metrics.rollout_weight_table), never used by the loss. None: unknown.
    weights: torch.Tensor | None = None


def sequence_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log p(token) under ``logits`` [B, T, V] for ``tokens`` [B, T] (padding gathers index 0)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens[..., None]).squeeze(-1)


# ----------------------------------------------------------------------------------------------
# Objectives: f(method, student_logits, view_logits, tokens, mask) -> MicroLoss
# ----------------------------------------------------------------------------------------------


def distill_loss(
    method: MethodSpec,
    student_logits: torch.Tensor,
    view_logits: Sequence[torch.Tensor],
    tokens: torch.Tensor,
    mask: torch.Tensor,
) -> MicroLoss:
    """Local signal r_t aggregated over the rollout (OPSD, DASH and their ablations)."""
    teacher_logits = view_logits[0]
    r = objectives.local_signal(
        student_logits,
        teacher_logits,
        mask,
        divergence=method.divergence,
        tau=method.tau,
        top_k=method.top_k,
    )
    entropy = objectives.teacher_entropy(teacher_logits, mask)
    agg = method.aggregate(r, mask, entropy)
    trace = {"r": r.detach(), "teacher_entropy": entropy.detach(), "coefficient": agg.coefficients}
    if agg.gates is not None:
        trace["gate"] = agg.gates
    return MicroLoss(agg.loss, dict(agg.diagnostics), trace, weights=agg.coefficients)


def eopd_loss(
    method: MethodSpec,
    student_logits: torch.Tensor,
    view_logits: Sequence[torch.Tensor],
    tokens: torch.Tensor,
    mask: torch.Tensor,
) -> MicroLoss:
    """EOPD: reverse KL on the sampled token plus forward KL on the teacher's top-k where the
    teacher is uncertain."""
    loss, diagnostics = objectives.eopd_token_loss(
        student_logits, view_logits[0], tokens, mask, **method.objective_params
    )
    # Every real token's loss enters the global token mean with weight 1.
    weights = mask.detach().float()
    return MicroLoss(loss, {k: float(v) for k, v in diagnostics.items()}, {}, weights=weights)


def avsd_loss(
    method: MethodSpec,
    student_logits: torch.Tensor,
    view_logits: Sequence[torch.Tensor],
    tokens: torch.Tensor,
    mask: torch.Tensor,
) -> MicroLoss:
    """AVSD: a sampled-token target mixed from the teacher's views (full, half, answer only)."""
    student_lp = sequence_logprobs(student_logits, tokens)
    views = torch.stack([sequence_logprobs(v, tokens) for v in view_logits])
    target, aux = objectives.avsd_target_logprobs(views, student_lp.detach(), mask)
    loss = objectives.avsd_token_loss(student_lp, target, mask)
    metrics = {"gate_mean": float(objectives.masked_mean(aux["gate"], mask.bool()))}
    # Each view's mean advantage log p_v(y_t) - log pS(y_t) over the sampled tokens: a view
    # whose teacher cannot read its context scores the student's own tokens below the student.
    for name, view_lp in zip(method.teacher_view_names, views, strict=True):
        advantage = (view_lp - student_lp).detach()
        metrics[f"advantage_{name}"] = float(objectives.masked_mean(advantage, mask.bool()))
    # Weight 1 on each token the loss's mean counts (avsd_token_loss leaves non-finite ones out).
    with torch.no_grad():
        weights = (mask.bool() & torch.isfinite(student_lp) & torch.isfinite(target)).float()
    return MicroLoss(loss, metrics, {"gate": aux["gate"]}, weights=weights)


ObjectiveLoss = Callable[
    [MethodSpec, torch.Tensor, Sequence[torch.Tensor], torch.Tensor, torch.Tensor], MicroLoss
]

#: The per-micro-batch loss of each objective of ``registry.OBJECTIVES``.
OBJECTIVE_LOSSES: dict[str, ObjectiveLoss] = {
    "distill": distill_loss,
    "eopd": eopd_loss,
    "avsd": avsd_loss,
}


# ----------------------------------------------------------------------------------------------
# GRPO hybrid
# ----------------------------------------------------------------------------------------------


def grpo_sequence_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Group-normalised GRPO advantages of rollouts listed ``group_size`` per problem, in order."""
    return objectives.group_advantages(rewards.view(-1, group_size)).view(-1)


def grpo_token_advantages(
    advantages: torch.Tensor, mask: torch.Tensor, grpo: GrpoSettings
) -> torch.Tensor:
    """Per-token GRPO advantages [B, T] from the rollouts' sequence advantages [B].

    Without aggregation each token carries its rollout's advantage (GRPO). With ``aggregate``
    the advantage is an outcome reward arriving at the last token and the gamma/lambda backward
    recursion (``objectives.discounted_token_advantages``) spreads it: a_t = A_hat at t = T and
    0 before, so A_t = (gamma lambda)^(T - t) A_hat -- GAE with gamma = lambda = 0.95 (paper
    appendix ``sec:outcome_optimization``) and no critic. The paper gives no formula; this
    choice is ours and is documented in docs/methods.md ("Where the paper is silent").
    """
    mask = mask.bool()
    if not grpo.aggregate:
        return advantages[:, None].float() * mask.float()
    lengths = mask.sum(1)
    last = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    rows = torch.nonzero(lengths > 0).squeeze(-1)
    last[rows, lengths[rows] - 1] = advantages[rows].float()
    return objectives.discounted_token_advantages(last, mask, gamma=grpo.gamma, lam=grpo.lam)


# ----------------------------------------------------------------------------------------------
# The loss of one micro-batch
# ----------------------------------------------------------------------------------------------


def method_loss(
    method: MethodSpec,
    student_logits: torch.Tensor,
    view_logits: Sequence[torch.Tensor],
    tokens: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor | None = None,
    *,
    temperature: float = 1.0,
) -> MicroLoss:
    """The objective of ``method`` on one micro-batch of rollouts (all tensors [B, T(, V)]),
    plus the GRPO term when the method has one (``advantages``: one per rollout).

    ``temperature`` (``train.loss_temperature``) divides the student's and every teacher
    view's logits before any log-softmax, as the reference trainers do with the rollout
    temperature (siyan-zhao/OPSD ``opsd_trainer.py``: ``student_logits / temperature`` before
    ``F.log_softmax``): the local signal, its clip, the teacher entropy, the gates and the GRPO
    log-probabilities all see the tempered distributions. At 1.0 the logits are used as given.
    """
    if temperature <= 0:
        raise ValueError(f"loss temperature must be positive, got {temperature!r}")
    if temperature != 1.0:
        student_logits = student_logits / temperature
        view_logits = [logits / temperature for logits in view_logits]
    if method.objective not in OBJECTIVE_LOSSES:
        raise ValueError(
            f"objective {method.objective!r} has no loss in training.losses.OBJECTIVE_LOSSES "
            f"(registered: {sorted(OBJECTIVE_LOSSES)})"
        )
    result = OBJECTIVE_LOSSES[method.objective](method, student_logits, view_logits, tokens, mask)
    loss, metrics = result.loss, result.metrics
    metrics["distill_loss"] = float(loss.detach())
    if method.grpo:
        token_advantages = grpo_token_advantages(advantages, mask, method.grpo)
        grpo_loss = objectives.grpo_token_loss(
            sequence_logprobs(student_logits, tokens), token_advantages, mask
        )
        loss = objectives.hybrid_loss(loss, grpo_loss, method.grpo.eta)
        metrics["grpo_loss"] = float(grpo_loss.detach())
    metrics["loss"] = float(loss.detach())
    # The weights are the objective's: the GRPO term is added beside it, not folded into them.
    return MicroLoss(loss, metrics, result.trace, weights=result.weights)
