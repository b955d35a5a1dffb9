"""Tests of dashrepro.experiment.plan: job counts per (rule, scale) from a hand-made config,
their GPU-hours from ``costs``, and the Markdown plan (also through ``main``)."""

import sys
from collections import Counter

import pytest

from dashrepro.experiment import plan
from dashrepro.experiment.plan import gpu_hours, plan_markdown, target_jobs
from dashrepro.experiment.run_matrix import GROUPS


def _train(steps: int, checkpoint_every: int) -> dict:
    return {"steps": steps, "checkpoint_every": checkpoint_every, "lr": 1e-3,
            "micro_batch_size": 2, "grad_accumulation": 1, "max_new_tokens": 8,
            "temperature": 1.0, "top_p": 1.0, "top_k": 0}  # fmt: skip


@pytest.fixture
def config() -> dict:
    """Scale ``s`` (2 checkpoints) and ``d`` derived from it (3 checkpoints); seeds 0 and 1.

    The table scores methods a, b at s (selections: trained and evaluated); the figure draws a's
    training metrics at s and d (trained only)."""
    return {
        "experiment": "x",
        "seeds": [0, 1],
        "scales": {
            "s": {"train": _train(4, 2)},
            "d": {"derive_from": "s", "train": _train(6, 2)},
        },
        "tables": {"t": {"kind": "method_scores", "scale": "s", "methods": ["a", "b"]}},
        "figures": {"f": {"kind": "training_dynamics", "scale": ["s", "d"], "methods": ["a"]}},
        "costs": {"s": {"train": 2.0, "generation": 0.5}},
    }


def test_a_table_of_selections_trains_evaluates_and_selects_every_run(config):
    # 2 methods x 2 seeds at s, each with 2 checkpoints; the base model once at s (the tables
    # add it at every reported scale: s, and d's base scale s); one table job.
    assert target_jobs(config, ("tables",)) == Counter(
        {
            ("train", "s"): 4,
            ("generate", "s"): 8,
            ("grade", "s"): 8,
            ("select", "s"): 4,
            ("evaluate_base_model", "s"): 1,
            ("table", "-"): 1,
        }
    )


def test_a_figure_of_training_metrics_trains_only(config):
    assert target_jobs(config, ("figures",)) == Counter(
        {("train", "s"): 2, ("train", "d"): 2, ("figure", "-"): 1}
    )


def test_a_run_several_entries_need_counts_once(config):
    # (a, s, seed) is needed by the table and the figure: trained once.
    assert target_jobs(config, ("tables", "figures")) == Counter(
        {
            ("train", "s"): 4,
            ("train", "d"): 2,
            ("generate", "s"): 8,
            ("grade", "s"): 8,
            ("select", "s"): 4,
            ("evaluate_base_model", "s"): 1,
            ("table", "-"): 1,
            ("figure", "-"): 1,
        }
    )
    config["tables"]["t2"] = dict(config["tables"]["t"], methods=["b"])
    jobs = target_jobs(config, ("tables",))
    assert jobs[("train", "s")] == 4 and jobs[("select", "s")] == 4
    assert jobs[("table", "-")] == 2


def test_runs_groups_set_the_seeds_and_checkpoints_follow_each_scales_schedule(config):
    # Three seeds of (a, d) declared; a figure with the base accuracy at d evaluates d's
    # checkpoints (6 steps / 2 = 3 each) and the base model of d's base scale, s.
    config["runs"] = [{"methods": ["a"], "scales": ["d"], "seeds": [0, 1, 2]}]
    config["figures"] = {
        "c": {"kind": "checkpoint_curves", "scale": "d", "methods": ["a"]},
    }
    assert target_jobs(config, ("figures",)) == Counter(
        {
            ("train", "d"): 3,
            ("generate", "d"): 9,
            ("grade", "d"): 9,
            ("select", "d"): 3,
            ("evaluate_base_model", "s"): 1,
            ("figure", "-"): 1,
        }
    )


def test_gpu_hours_price_the_gpu_rules_that_have_a_cost():
    config = {"costs": {"s": {"train": 2.0, "generation": 0.5}, "d": {"base_evaluation": 0.25}}}
    jobs = Counter(
        {("train", "s"): 4, ("generate", "s"): 8, ("grade", "s"): 8,
         ("evaluate_base_model", "s"): 1, ("evaluate_base_model", "d"): 2, ("train", "d"): 3,
         ("table", "-"): 1}
    )  # fmt: skip
    # grade and table hold no GPU; s has no base_evaluation cost, d no train cost.
    assert gpu_hours(config, jobs) == {
        ("train", "s"): 8.0,
        ("generate", "s"): 4.0,
        ("evaluate_base_model", "d"): 0.5,
    }
    assert gpu_hours({}, jobs) == {}
    assert gpu_hours({"costs": {"s": None}}, jobs) == {}


def test_the_plan_lists_each_target_with_its_jobs_and_gpu_hours(config):
    config["costs"]["s"]["train"] = 250.0  # 4 runs x 250 h = 1,000 h: thousands separated
    text = plan_markdown(config)
    assert text.startswith("# Plan of experiment x\n")
    sections = text.split("## ")[1:]
    assert [s.split("\n", 1)[0] for s in sections] == ["all_tables", "all_figures", "all"]
    tables = sections[0]
    assert "| rule | scale | jobs | GPU-hours |" in tables
    assert "| train | s | 4 | 1,000.0 |" in tables
    assert "| generate | s | 8 | 4.0 |" in tables
    assert "| grade | s | 8 |  |" in tables  # no GPU cost: empty cell
    # 4 + 8 + 8 + 4 + 1 + 1 jobs; 1,000 + 4 GPU-hours, all at s.
    assert "Total: 26 jobs, 1,004.0 GPU-hours (s 1,004.0)." in tables
    figures = sections[1]
    assert "| train | d | 2 |  |" in figures
    assert "Total: 5 jobs, 500.0 GPU-hours (s 500.0)." in figures
    # The rows are sorted by (rule, scale).
    rows = [
        line for line in sections[2].splitlines() if line.startswith("| ") and "---" not in line
    ]
    keys = [tuple(cell.strip() for cell in row.split("|")[1:3]) for row in rows[1:]]
    assert keys == sorted(keys)


def test_target_all_probes_each_base_model_once_where_the_config_asks(config):
    assert not any(rule == "premise_probe" for rule, _ in target_jobs(config, GROUPS))
    config["premise_probe"] = {"method": "a"}
    config["costs"]["s"]["premise_probe"] = 0.25
    jobs = target_jobs(config, GROUPS)
    # s and d (derived from s) share one base model: one probe.
    assert [key for key in jobs if key[0] == "premise_probe"] == [("premise_probe", "s")]
    assert gpu_hours(config, jobs)[("premise_probe", "s")] == 0.25
    assert not any(rule == "premise_probe" for rule, _ in target_jobs(config, ("tables",)))


def test_main_prints_the_plan_of_the_config_files_named(config, monkeypatch, capsys):
    loaded = []

    def load_config(path, *overlays):
        loaded.append((path, *overlays))
        return config

    monkeypatch.setattr("dashrepro.experiment.config.load_config", load_config)
    monkeypatch.setattr(sys, "argv", ["plan", "base.yaml", "over.yaml"])
    plan.main()
    assert loaded == [("base.yaml", "over.yaml")]
    assert capsys.readouterr().out == plan_markdown(config) + "\n"
    monkeypatch.setattr(sys, "argv", ["plan"])
    plan.main()
    assert loaded[-1] == ("workflow_config.yaml",)


def _proof_summary(kernel_share: float) -> dict:
    """A GPU proof's summary at the 1.7B shape: one OPSD stage, the profile, the evaluation."""
    train = {"ok": True, "mean_s_teacher": 2.0, "mean_s_student": 2.0, "rollouts_per_step": 4,
             "mean_s_rollout": 10.0, "max_new_tokens": 100, "mean_s_optimizer": 1.0}  # fmt: skip
    return {"train_opsd": train, "profile": {"lora": {"kernel_share": kernel_share}},
            "evaluate": {"ok": True, "tokens_per_second": 1000.0}}  # fmt: skip


def test_measured_costs_price_a_run_and_a_checkpoint_from_the_proofs_speeds():
    train = {"steps": 10, "micro_batch_size": 2, "grad_accumulation": 3, "max_new_tokens": 200}
    config = {
        "scales": {"qwen3_1p7b": {"train": train}, "qwen3_8b": {"train": train}},
        "benchmarks": {"b": {"n_problems": 60}},
        "evaluation": {"samples_per_problem": 12, "max_new_tokens": 1000},
        "costs": {"qwen3_1p7b": {"train": 1.0, "generation": 0.5}},
    }
    device_bound = plan.measured_costs(_proof_summary(0.9), config, mean_response_tokens=500)
    small = device_bound["scales"]["qwen3_1p7b"]
    # A step: 3 x (rollout 10 s x 200/100 + (2+2)/4 s x 2 rows) + 1 s = 67 s; 10 steps.
    assert small["train_opsd"] == round(10 * 67 / 3600, 1) and "train_dash" not in small
    # 60 x 12 responses of 500 tokens at 1,000 tokens/s: 0.1 h.
    assert small["generation"] == round(60 * 12 * 500 / 1000 / 3600, 1) == 0.1
    assert small["assumed"] == {"train": 1.0, "generation": 0.5}
    assert set(device_bound["scales"]) == {"qwen3_1p7b", "qwen3_8b"}  # no 4B scale here
    # Device-bound: the 8B's rollouts scale by parameters; host-bound, by layers (36 / 28).
    assert device_bound["scales"]["qwen3_8b"]["rollout_ratio"] == round(8.2 / 1.7, 3)
    host_bound = plan.measured_costs(_proof_summary(0.2), config, None)
    assert host_bound["host_bound"] and host_bound["mean_response_tokens"] == 1000.0
    assert host_bound["scales"]["qwen3_8b"]["rollout_ratio"] == round(36 / 28, 3)
    markdown = plan.costs_markdown(device_bound, {"all_tables": (10.0, 12.0)})
    assert "| qwen3_1p7b | 1.0 | 0.2 | None | 0.5 | 0.1 |" in markdown
    assert "| all_tables | 10 | 12 |" in markdown and "device-bound" in markdown
