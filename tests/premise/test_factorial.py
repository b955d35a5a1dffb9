"""premise.factorial, factorial_pilot and factorial_page: the factorial study's registered rules
and tests, on hand-made numbers and on synthetic files in the results layout."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from dashrepro import layout
from dashrepro.experiment.config import load_config, read_config_file
from dashrepro.experiment.run_matrix import expand_config, run_matrix
from dashrepro.io import write_parquet
from dashrepro.premise import factorial
from dashrepro.premise.factorial_pilot import PILOT_SCALES, STUDY_SCALE, overlay_text
from dashrepro.premise.factorial_pilot import main as pilot_main

CELLS = ("a", "b", "floor")
RESULTS = layout.Results("fam")


def test_acceptance_rejects_a_cell_at_chance_one_at_the_ceiling_and_a_weak_teacher():
    base = {"student": {"benchmarks": {"a": {"avg_at_k": 50}, "floor": {"avg_at_k": 13.5},
                                       "top": {"avg_at_k": 90}, "weak": {"avg_at_k": 50}}},
            "teacher": {"benchmarks": {"a": {"avg_at_k": 95}, "floor": {"avg_at_k": 98},
                                       "top": {"avg_at_k": 99}, "weak": {"avg_at_k": 55}}}}  # fmt: skip
    verdicts = factorial.accepted_cells(base)
    assert verdicts["a"] is None
    assert verdicts["floor"].startswith("student 13.5 below chance + 20")
    assert "ceiling" in verdicts["top"] and verdicts["weak"].startswith("teacher 55.0 not 10")


def probe(scales: dict[str, float], rollouts: int = 20, length: int = 60) -> pd.DataFrame:
    """A probe's tokens: per family, r exponential with the family's mean (nats)."""
    rng = np.random.default_rng(3)
    rows, rollout = [], 0
    for task, scale in scales.items():
        for _ in range(rollouts):
            rows += [{"task": task, "rollout": rollout, "position": t,
                      "r": scale * rng.exponential()} for t in range(length)]  # fmt: skip
            rollout += 1
    return pd.DataFrame(rows)


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


def pilot_scores(rng, decay=10.0) -> pd.DataFrame:
    """OPSD's pilot: lr 2e-3 peaks at step 20 and decays; 1e-3 climbs and holds; 5e-4 is slow."""
    means = {5.0e-4: (42, 45), 1.0e-3: (48, 55), 2.0e-3: (60, 60 - decay)}
    rows = [{"lr": lr, "seed": seed, "step": step, "cell": cell, "method": "opsd",
             "score": means[lr][i] + rng.normal(0, 1.5)}
            for lr in means for seed in range(4) for i, step in enumerate((20, 40))
            for cell in CELLS]  # fmt: skip
    return pd.DataFrame(rows)


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


def write_experiment(directory, lr_decay=10.0):
    """The families' base evaluation, probe and OPSD pilot runs (with their job timings)."""
    base = {"student": {"benchmarks": {"a": {"avg_at_k": 40.0}, "b": {"avg_at_k": 42.0},
                                       "floor": {"avg_at_k": 12.0}}},
            "teacher": {"benchmarks": {"a": {"avg_at_k": 95.0}, "b": {"avg_at_k": 96.0},
                                       "floor": {"avg_at_k": 97.0}}}}  # fmt: skip
    path = directory / RESULTS.base_eval_file(layout.BASE_ACCURACY, "tiny")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(base))
    tokens = directory / RESULTS.premise_file(layout.PREMISE_TOKENS, "tiny")
    tokens.parent.mkdir(parents=True)
    write_parquet(tokens, probe({"a": 0.4, "b": 0.05, "floor": 3.0}))
    scores = pilot_scores(np.random.default_rng(1), lr_decay)
    lr_scale = {lr: scale for scale, lr in PILOT_SCALES.items()}
    for (lr, seed, step), block in scores.groupby(["lr", "seed", "step"]):
        scale = lr_scale[lr]
        summary = {"seed": int(seed), "step": int(step), "benchmarks": {
            row.cell: {"avg_at_k": row.score} for row in block.itertuples()}}  # fmt: skip
        write_summary(directory, "opsd", scale, seed, step, summary)
        key = f"opsd/{scale}/seed{seed}"
        for rule, name, seconds in (("train_lora", f"{key}.tsv", 60.0),
                                    ("generate_checkpoint_responses", f"{key}/step{step}.tsv", 50.0)):  # fmt: skip
            timing = directory / RESULTS.root / "job_timings" / rule / name
            timing.parent.mkdir(parents=True, exist_ok=True)
            timing.write_text(f"s\th:m:s\n{seconds}\t0:01:00\n")


def write_summary(directory, method, scale, seed, step, summary):
    path = directory / RESULTS.checkpoint_file(layout.SUMMARY, method, scale, seed, step)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary))


def test_the_registration_fixes_every_value_from_opsd_the_probe_and_the_base_alone(tmp_path):
    write_experiment(tmp_path)
    record_path, overlay = tmp_path / "docs" / "pilot.json", tmp_path / "study.yaml"
    argv = ["fam", "--directory", str(tmp_path), "--out", str(record_path),
            "--overlay", str(overlay)]  # fmt: skip
    assert pilot_main(argv) == 0
    record = json.loads(record_path.read_text())
    assert record["cells"] == ["a", "b"] and record["acceptance"]["floor"].startswith("student")
    assert (record["schedule"]["lr"], record["schedule"]["step"]) == (1.0e-3, 40)
    assert record["kappa"]["kappa"] == 10.0
    assert record["arms"]["dash"] == "dash_k10" and record["arms"]["repeat"] == "dash"
    # 60 s of training and 2 x 50 s of generation a run, two jobs at once: 80 s a run.
    assert record["power"]["run_seconds"] == pytest.approx(80.0)
    fit = record["power"]["seeds_fitting_budget"]
    assert fit == math.floor(85 * 60 / 80 / 7)
    assert len(record["study_seeds"]) == min(record["power"]["seeds_needed"], fit)
    assert all(name.startswith("results/fam/") for name in record["inputs"])
    assert pilot_main([*argv, "--check"]) == 0
    # The overlay is a valid config over the families' and trains each arm at the study's scale.
    config = expand_config(load_config("workflow_config.yaml",
                                       "config/experiments/task_families.yaml", overlay))  # fmt: skip
    matrix = run_matrix(config)
    arms = set(record["arms"].values())
    assert {m for m, s in matrix if s == STUDY_SCALE} == arms and len(matrix) == len(arms)
    assert config["methods"]["dash_tau0p05"]["tau"] == 0.05
    assert config["scales"][STUDY_SCALE]["train"]["lr"] == 1.0e-3
    assert read_config_file(overlay) == read_config_file(overlay)  # no duplicate keys
    assert overlay.read_text() == overlay_text(record)


def test_the_pilot_overlay_trains_opsd_alone_at_each_pilot_rate():
    config = expand_config(load_config("workflow_config.yaml",
                                       "config/experiments/task_families.yaml",
                                       "config/experiments/factorial_pilot.yaml"))  # fmt: skip
    matrix = run_matrix(config)
    assert set(matrix) == {("opsd", scale) for scale in PILOT_SCALES}
    assert all(seeds == [0, 1, 2, 3] for seeds in matrix.values())
    for scale, lr in PILOT_SCALES.items():
        assert config["scales"][scale]["train"]["lr"] == lr


def test_the_page_applies_the_registered_tests_and_check_holds_it_to_its_files(tmp_path, capsys):
    from dashrepro.premise.factorial_page import main as page_main

    write_experiment(tmp_path)
    registration = tmp_path / "docs" / "pilot.json"
    assert pilot_main(["fam", "--directory", str(tmp_path), "--out", str(registration),
                       "--overlay", str(tmp_path / "study.yaml")]) == 0  # fmt: skip
    record = json.loads(registration.read_text())
    rng = np.random.default_rng(7)
    lift = {"opsd": 0, record["arms"]["scale_matched"]: 0, record["arms"]["normalized"]: 4,
            record["arms"]["dash"]: 4, "dash": -20, "opsd_tau0p05": -19, "dash_tau0p05": -15}  # fmt: skip
    for method, up in lift.items():
        for seed in record["study_seeds"]:
            for step in (20, 40):
                write_summary(tmp_path, method, STUDY_SCALE, seed, step, {
                    "seed": seed, "step": step, "benchmarks": {
                        c: {"avg_at_k": 60 + up + rng.normal(0, 1)} for c in CELLS}})  # fmt: skip
            metrics = tmp_path / RESULTS.run_file(layout.TRAIN_METRICS, method, STUDY_SCALE, seed)
            metrics.parent.mkdir(parents=True, exist_ok=True)
            write_parquet(metrics, pd.DataFrame({"step": [1, 2], "update_norm": [0.1, 0.2]}))
    argv = ["fam", "--directory", str(tmp_path), "--registration", str(registration),
            "--record", str(tmp_path / "docs" / "results.json"),
            "--page", str(tmp_path / "docs" / "results.md")]  # fmt: skip
    assert page_main(argv) == 0
    result = json.loads((tmp_path / "docs" / "results.json").read_text())
    assert [r["verdict"] for r in result["coprimary"]] == ["supported", "supported"]
    assert result["secondary"]["repeat - opsd"]["difference"] < -15
    # OPSD at tau 0.05 stays at the base student's 41: DASH at tau 0.05 is not compared.
    assert result["clip_learns"] is False
    assert "clipped_dash - clipped_opsd" not in result["secondary"]
    text = (tmp_path / "docs" / "results.md").read_text()
    assert "so DASH at τ = 0.05 is not compared" in text
    assert "## Co-primary" in text and "assets/results-forest.png" in text
    assert (tmp_path / "docs" / "assets" / "results-arms.png").is_file()
    assert page_main([*argv, "--check"]) == 0
    write_summary(tmp_path, "opsd", STUDY_SCALE, 0, 40, {"seed": 0, "step": 40, "benchmarks": {
        c: {"avg_at_k": 99.0} for c in CELLS}})  # fmt: skip
    capsys.readouterr()
    assert page_main([*argv, "--check"]) == 1
    assert "eval/opsd/factorial/seed0/step40/summary.json: sha256" in capsys.readouterr().out


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
