"""premise.factorial: the factorial study's registered rules and tests on hand-made numbers, and
the trainer's optimizer against a constant scale of the loss (the first study's withdrawn
reading)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dashrepro.premise import factorial
from dashrepro.premise.factorial_pilot import PILOT_SCALES

from .factorial_fixtures import pilot_scores, probe


def test_acceptance_rejects_a_cell_at_chance_one_at_the_ceiling_and_a_weak_teacher():
    base = {"student": {"benchmarks": {"a": {"avg_at_k": 50}, "floor": {"avg_at_k": 13.5},
                                       "top": {"avg_at_k": 90}, "weak": {"avg_at_k": 50}}},
            "teacher": {"benchmarks": {"a": {"avg_at_k": 95}, "floor": {"avg_at_k": 98},
                                       "top": {"avg_at_k": 99}, "weak": {"avg_at_k": 55}}}}  # fmt: skip
    verdicts = factorial.accepted_cells(base)
    assert verdicts["a"] is None
    assert verdicts["floor"].startswith("student 13.5 below chance + 20")
    assert "ceiling" in verdicts["top"] and verdicts["weak"].startswith("teacher 55.0 not 10")


def test_kappa_is_the_largest_of_the_papers_grid_that_leaves_few_rollouts_saturated():
    # The median gate of a rollout is about sigmoid(kappa * mean r * (1 - ln 2)) (r exponential):
    # with a mean r of 0.4 nats, kappa 20 saturates (0.92), kappa 10 does not (0.77).
    tokens = probe({"a": 0.4, "b": 0.05})
    choice = factorial.kappa_from_probe(tokens, ["a", "b"])
    assert choice["kappa"] == 10.0 and choice["qualified"]
    assert choice["saturated_share"]["20"]["a"] > factorial.MOST_SATURATED
    assert choice["saturated_share"]["10"]["a"] <= factorial.MOST_SATURATED
    # The heaviest family decides: at 8 nats even kappa 1 saturates (0.92), flagged.
    loud = factorial.kappa_from_probe(probe({"a": 0.4, "c": 8.0}), ["a", "c"])
    assert loud["kappa"] == 1.0 and not loud["qualified"]
    with pytest.raises(ValueError, match=r"no rollout of cells \['zzz'\]"):
        factorial.kappa_from_probe(tokens, ["a", "zzz"])


def test_the_schedule_is_the_best_learning_rate_that_has_not_decayed_by_its_last_step():
    scores = pilot_scores(np.random.default_rng(0))
    chosen = factorial.pilot_schedule(scores, ["a", "b"])
    assert (chosen["lr"], chosen["step"], chosen["stable"]) == (1.0e-3, 40, True)
    assert chosen["n_seeds"] == 4 and 0 < chosen["endpoint_sd"] < 3
    assert set(chosen["curves"]) == set(PILOT_SCALES.values())
    # Every rate decays: the smallest, at its best step, flagged.
    decaying = scores.assign(score=scores["score"] - 20 * (scores["step"] == 40))
    fallback = factorial.pilot_schedule(decaying, ["a", "b"])
    assert (fallback["lr"], fallback["step"], fallback["stable"]) == (5.0e-4, 20, False)


def test_the_seeds_reach_the_power_by_simulation_and_the_allocation_contrast_needs_fewer():
    need = factorial.seeds_for_endpoint(2.0)
    n, sd = need["seeds_needed"], need["contrast_sd"]
    assert sd == pytest.approx(2 * math.sqrt(2))
    rng = np.random.default_rng(11)
    level = factorial.ALPHA / 2

    def power(k):
        d = rng.normal(factorial.EFFECT, sd, size=(20000, k))
        t = d.mean(1) / (d.std(1, ddof=1) / math.sqrt(k))
        from scipy import stats

        return float((t > stats.t.ppf(1 - level, k - 1)).mean())

    analytic = [factorial.one_sided_power(sd, factorial.EFFECT, k, level) for k in (n - 1, n)]
    assert analytic[0] < factorial.POWER <= analytic[1]
    for k, value in zip((n - 1, n), analytic, strict=True):
        assert power(k) == pytest.approx(value, abs=0.01)  # the noncentral t, by simulation
    assert factorial.detectable(sd, n) <= factorial.EFFECT < factorial.detectable(sd, n - 1)
    assert factorial.one_sided_power(sd / math.sqrt(2), factorial.EFFECT, n, level) > 0.95


def test_the_evaluation_noise_of_an_endpoint_is_binomial_over_problems():
    samples = pd.DataFrame([{"cell": c, "problem_id": p, "correct": s < 6}
                            for c in ("a", "b") for p in range(50) for s in range(12)])  # fmt: skip
    # Every problem at p = 1/2 with 12 samples: each cell sd 100 * sqrt(0.25 / 12 / 50).
    assert factorial.evaluation_sd(samples) == pytest.approx(100 * math.sqrt(0.25 / 600) / math.sqrt(2))


ARMS = {"opsd": "opsd", "scale_matched": "sm", "normalized": "nd", "dash": "dash"}


def test_the_coprimary_contrasts_holm_and_the_scale_equivalence_by_hand():
    rng = np.random.default_rng(4)
    seeds = 10
    noise = rng.normal(0, 0.5, size=(seeds, 4))
    # Allocation +3, scale 0: OPSD 50, SM 50, ND 53, DASH 53.
    wide = pd.DataFrame(np.array([50, 50, 53, 53]) + noise, columns=["opsd", "sm", "nd", "dash"])
    per_seed = factorial.contrasts(wide, ARMS)
    assert per_seed["allocation"].mean() == pytest.approx(
        ((wide["dash"] - wide["sm"]) + (wide["nd"] - wide["opsd"])).mean() / 2
    )
    rows = factorial.coprimary_tests(wide, ARMS)
    assert [r["contrast"] for r in rows] == ["dash - opsd", "allocation"]
    assert all(r["verdict"] == "supported" for r in rows)
    assert rows[0]["low"] < rows[0]["difference"] < rows[0]["high"]
    assert sorted(r["p_holm"] for r in rows)[0] == pytest.approx(2 * min(r["p"] for r in rows))
    assert factorial.scale_equivalence(wide, ARMS)["verdict"] == "equivalent"
    # DASH below OPSD: not supported, whatever the size.
    worse = wide.assign(dash=wide["opsd"] - 5, nd=wide["opsd"] - 5)
    assert {r["verdict"] for r in factorial.coprimary_tests(worse, ARMS)} == {"not supported"}


def _updates(scale, steps=20, clip=True, seed=0):
    """The parameter change over ``steps`` of the trainer's optimizer (``build_optimizer``),
    each step's gradient a fixed draw times ``scale`` (a number or one per step), clipped at 1
    as the recipe clips it."""
    import torch

    from dashrepro.training.model import build_optimizer

    generator = torch.Generator().manual_seed(seed)
    grads = [torch.randn(64, generator=generator) * 0.1 for _ in range(steps)]
    weight = torch.nn.Parameter(torch.zeros(64))
    optimizer, scheduler = build_optimizer([weight], lr=2e-3, steps=steps)
    scales = scale if isinstance(scale, list) else [scale] * steps
    for g, s in zip(grads, scales, strict=True):
        weight.grad = g * s
        if clip:
            torch.nn.utils.clip_grad_norm_([weight], 1.0)
        optimizer.step()
        scheduler.step()
    return weight.detach().clone()


def test_the_trainers_adam_ignores_a_constant_scale_of_the_loss_and_clipping_moves_it_little():
    """The first study's exploratory reading (DASH's larger weights make a larger step) is
    withdrawn on this: a loss multiplied by a constant moves the parameters the same way."""
    import torch

    def cosine(a, b):
        return float(torch.nn.functional.cosine_similarity(a, b, dim=0))

    unclipped = _updates(1.0, clip=False)
    for scale in (3.1, 10.0):  # DASH's mean weight on the families, and more
        scaled = _updates(scale, clip=False)
        assert cosine(unclipped, scaled) > 0.99999
        assert float(scaled.norm() / unclipped.norm()) == pytest.approx(1.0, abs=1e-4)
    # Clipped at every step (every scaled gradient's norm is above 1), any scale is the same.
    assert torch.allclose(_updates(3.1), _updates(10.0), atol=1e-7)
    # Clipped at every step against never: each step divided by its own norm, which here varies
    # from step to step, moves the update a little, and no more than that.
    assert 0.99 < cosine(_updates(1.0), _updates(3.1)) < 0.9999
