"""Snakemake's parse of the workflow stays light: no model library is imported to build the DAG
(on a cluster every job re-parses the Snakefile)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "peft", "vllm", "deepspeed", "accelerate", "matplotlib")

PARSE_AND_REPORT_MODULES = """
import atexit, sys
atexit.register(lambda: print("IMPORTED:", ",".join(m for m in {heavy!r} if m in sys.modules)))
from snakemake.cli import main
sys.argv = ["snakemake", "-s", {snakefile!r}, "--directory", {workdir!r}, "-n", "all"]
main()
"""


def test_dry_run_imports_no_model_library(repo_root, tmp_path):
    code = PARSE_AND_REPORT_MODULES.format(
        heavy=HEAVY, snakefile=str(repo_root / "Snakefile"), workdir=str(tmp_path)
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "This was a dry-run" in done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("IMPORTED:")
    assert last.removeprefix("IMPORTED:").strip() == "", f"parse imported {last}"


def paper_workdir(repo_root, tmp_path):
    """A working directory whose config is the paper overlay merged as Snakemake merges it,
    with empty stand-ins for the benchmark files (a dry run reads none of them)."""
    import yaml

    from dashrepro.experiment.config import merge_configs, read_config_file

    config = merge_configs(
        read_config_file(repo_root / "workflow_config.yaml"),
        read_config_file(repo_root / "config/experiments/paper.yaml"),
    )
    for name, bench in config["benchmarks"].items():
        bench["dataset"]["path"] = str(tmp_path / f"{name}.jsonl")
        (tmp_path / f"{name}.jsonl").touch()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path


def snakemake_in(repo_root, workdir, *args):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo_root / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(workdir / "config.yaml"), *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def job_counts(output: str) -> dict[str, int]:
    """The job-stats table of a dry run: rule -> count."""
    counts = {}
    for line in output.split("Job stats:")[1].splitlines()[3:]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit() or parts[0] == "total":
            break
        counts[parts[0]] = int(parts[1])
    return counts


def families_dry_run(repo_root, tmp_path, overlay: str, *targets: str):
    """A dry run of ``targets`` under the task families' overlay and ``overlay`` (a study's
    command, docs/premise-study.md and docs/factorial-study.md): its output, checked to succeed."""
    overlays = [str(repo_root / "config/experiments" / name)
                for name in ("task_families.yaml", overlay)]  # fmt: skip
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo_root / "Snakefile"),
           "--directory", str(tmp_path), "-n", "--rerun-incomplete", *targets,
           "--configfile", *overlays]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_the_paper_dry_runs_its_whole_run_matrix(repo_root, tmp_path):
    """Every run, checkpoint, base model and table the paper overlay's config declares is a job
    (counted from the config: test_config checks the paper's 149 runs once)."""
    from conftest import expected_jobs

    from dashrepro.experiment.config import load_config

    done = snakemake_in(repo_root, paper_workdir(repo_root, tmp_path), "-n", "all_tables")
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    counts = job_counts(out)
    config = load_config(
        repo_root / "workflow_config.yaml", repo_root / "config/experiments/paper.yaml"
    )
    expected = expected_jobs(config)
    assert {rule: counts.get(rule) for rule in expected} == expected
    # Each model is fetched once, where Snakemake runs, and every GPU job reads the snapshot.
    assert counts["download_model"] == 3
    snapshot = "resources/models/Qwen--Qwen3-8B/main/dashrepro_snapshot.json"
    for rule in ("train_lora_qwen3_8b", "generate_checkpoint_responses", "evaluate_base_model"):
        block = out.split(f"rule {rule}:")[1].split("\n\n")[0]
        assert "resources/models/Qwen--Qwen3-" in block.split("output:")[0], rule
    assert snapshot in out
    # The plan counts the same jobs from the config alone, and prices them.
    import yaml

    from dashrepro.experiment.plan import gpu_hours, target_jobs

    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    from dashrepro.experiment.run_matrix import expand_config

    planned = target_jobs(expand_config(config), ("tables",))
    names = {"train": "train_lora_", "generate": "generate_checkpoint_responses",
             "grade": "grade_checkpoint", "select": "select_best_checkpoint",
             "evaluate_base_model": "evaluate_base_model"}  # fmt: skip
    for rule, name in names.items():
        dag = sum(n for r, n in counts.items() if r.startswith(name))
        assert sum(n for (r, _), n in planned.items() if r == rule) == dag, rule
    hours = gpu_hours(config, planned)
    assert hours[("train", "qwen3_8b")] == 15 * 60.0  # 15 runs x (15 h x 4 GPUs)


def test_the_published_tables_render_from_the_shipped_numbers(repo_root, tmp_path):
    workdir = paper_workdir(repo_root, tmp_path)
    done = snakemake_in(repo_root, workdir, "--cores", "2", "published_tables")
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    main = (workdir / "results/published/tables/main_results.tex").read_text()
    assert r"\firstscore{45.07}" in main and r"GRPO$^{\dagger}$" in main
    from dashrepro.io import read_csv

    held = set(read_csv(repo_root / "config/published/dash_paper.csv")["table"])
    rendered = {p.stem for p in (workdir / "results/published/tables").glob("*.md")}
    # One file per table the published numbers hold (the text's table under the config id).
    assert len(rendered) == len(held) and "grpo_hybrid" in rendered


def test_the_published_tables_are_the_same_whatever_experiment_is_selected(repo_root, tmp_path):
    """Under the embedded default (tables at its tiny scales, no copied rows) published_tables
    draws the paper's tables byte for byte as under the paper overlay: scales, labels and the
    copied rows come from the published numbers, not the experiment."""
    drawn = {}
    for name in ("default", "paper"):
        workdir = tmp_path / name
        workdir.mkdir()
        if name == "paper":
            paper_workdir(repo_root, workdir)
        else:
            shutil.copy(repo_root / "workflow_config.yaml", workdir / "config.yaml")
        done = snakemake_in(repo_root, workdir, "--cores", "2", "published_tables")
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        folder = workdir / "results/published/tables"
        drawn[name] = {
            p.name: p.read_bytes() for p in folder.iterdir() if "provenance" not in p.name
        }
    assert drawn["default"] == drawn["paper"]
    main = drawn["default"]["main_results.md"].decode()
    assert "Qwen3-8B AIME 2024" in main and "| Base† | 51.50 |" in main


TARGET = "results/paper/tables/vocabulary_support.csv"


@pytest.fixture(scope="module")
def up_to_date_paper(repo_root, tmp_path_factory):
    """A paper working directory in which every job of one table's DAG is up to date: its
    outputs exist (empty) and `--touch` has recorded each job's parameters."""
    workdir = paper_workdir(repo_root, tmp_path_factory.mktemp("paper"))
    summary = snakemake_in(repo_root, workdir, "--summary", TARGET)
    assert summary.returncode == 0, summary.stderr[-3000:]
    for line in summary.stdout.splitlines()[1:]:
        path = workdir / line.split("\t")[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    # --forceall: touch every job, so each records its parameters (else only outdated ones).
    touched = snakemake_in(repo_root, workdir, "--touch", "--forceall", "--cores", "1", TARGET)
    assert touched.returncode == 0, touched.stderr[-3000:]
    return workdir


def rerun_scope(repo_root, workdir, mutate) -> dict[str, int]:
    """The jobs a dry run plans after ``mutate`` changed the config: rule -> count."""
    import yaml

    config = yaml.safe_load((workdir / "config.yaml").read_text())
    mutate(config)
    variant = workdir / "variant.yaml"
    variant.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo_root / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(variant), "-n", TARGET]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    return {} if "Nothing to be done" in out else job_counts(out)


@pytest.mark.parametrize(
    ("change", "mutate", "expected"),
    [
        (
            "DASH's kappa: its 4 runs and what depends on them, nothing of OPSD's",
            lambda c: c["methods"]["dash"]["params"].update(kappa=4.0),
            {"train_lora_qwen3_1p7b": 4, "generate_checkpoint_responses": 40,
             "grade_checkpoint": 40, "select_best_checkpoint": 4, "table": 1},
        ),
        (
            "the evaluation temperature: evaluation, selection and the table, no training",
            lambda c: c["evaluation"].update(temperature=0.9),
            {"generate_checkpoint_responses": 160, "grade_checkpoint": 160,
             "select_best_checkpoint": 16, "table": 1},
        ),
        (
            "one table's styling: that table only",
            lambda c: c["tables"]["vocabulary_support"]["options"].update(shading="none"),
            {"table": 1},
        ),
        (
            "a seed for OPSD and DASH: that seed's jobs only",
            lambda c: c["runs"][0].update(seeds=[0, 1, 2, 3, 4]),
            {"train_lora_qwen3_1p7b": 2, "generate_checkpoint_responses": 20,
             "grade_checkpoint": 20, "select_best_checkpoint": 2, "table": 1},
        ),
    ],
)  # fmt: skip
def test_a_change_reruns_only_what_it_touches(
    repo_root, up_to_date_paper, change, mutate, expected
):
    assert rerun_scope(repo_root, up_to_date_paper, lambda c: None) == {}
    assert rerun_scope(repo_root, up_to_date_paper, mutate) == expected, change


def test_a_vllm_backend_without_vllm_stops_before_any_job_and_dry_runs_anyway(repo_root, tmp_path):
    # .venv has no vLLM and no --sdm conda is given: the jobs would run in this interpreter.
    (tmp_path / "config.yaml").write_text("evaluation:\n  backend: vllm\n")
    dry = snakemake_in(repo_root, tmp_path, "-n", "all")
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-3000:]
    done = snakemake_in(repo_root, tmp_path, "--cores", "1", "all")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "evaluation.backend: vllm, but the jobs that need it would run in" in out, out[-3000:]
    assert "--sdm conda" in out and "set evaluation.backend: hf" in out
    assert not (tmp_path / "results").exists(), "a job started"


def test_the_paper_stops_before_any_job_naming_every_unpinned_revision(repo_root, tmp_path):
    """`main` can move under a run: a real run stops before its first job (not at the download
    job, with others already started), every key named; pinned, the revisions pass."""
    import yaml

    workdir = paper_workdir(repo_root, tmp_path)
    done = snakemake_in(repo_root, workdir, "--cores", "1", "all_tables")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    keys = ["data.training_set.revision", *(f"scales.{s}.revision" for s in
            ("qwen3_1p7b", "qwen3_4b", "qwen3_8b"))]  # fmt: skip
    for key in keys:
        assert key in out, out[-3000:]
    assert not (workdir / "results").exists() and not (workdir / "resources").exists()
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["data"]["training_set"]["revision"] = "0123456789abcdef0123456789abcdef01234567"
    for scale in ("qwen3_1p7b", "qwen3_4b", "qwen3_8b"):
        config["scales"][scale]["revision"] = "89abcdef0123456789abcdef0123456789abcdef"
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    pinned = snakemake_in(repo_root, workdir, "--cores", "1", "all_tables")
    out = pinned.stdout + pinned.stderr
    # The next check before any job (this interpreter has no vLLM) is what stops it now.
    assert pinned.returncode != 0 and "cannot import vllm" in out, out[-3000:]
    assert not any(key in out for key in keys), out[-3000:]
    assert not (workdir / "resources").exists()


def test_the_task_families_overlay_plans_its_probe_and_base_evaluation(repo_root, tmp_path):
    """The command docs/premise.md and the overlay give, dry: the families' data, a benchmark
    each, their own warm start, its evaluation and its probe."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo_root / "Snakefile"),
           "--directory", str(tmp_path), "-n",
           f"--configfile={repo_root / 'config/experiments/task_families.yaml'}",
           "premise", "results/task_families/eval/base/tiny/accuracy.json"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = job_counts(done.stdout)
    assert counts["prepare_benchmark"] == 5 and counts["premise_probe_tiny"] == 1
    assert counts["sft_base_model"] == 1 and counts["evaluate_base_model"] == 1


def test_the_pilot_overlay_trains_opsd_alone_with_six_seeds(repo_root, tmp_path):
    """The premise study's pilot (docs/premise-study.md), dry: OPSD's six runs, both checkpoints
    evaluated, no other method trained."""
    overlays = [str(repo_root / "config/experiments" / name)
                for name in ("task_families.yaml", "premise_pilot.yaml")]  # fmt: skip
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo_root / "Snakefile"),
           "--directory", str(tmp_path), "-n", "all_tables", "--configfile", *overlays]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = job_counts(done.stdout)
    assert counts["train_lora_tiny"] == 6 and counts["generate_checkpoint_responses"] == 12
    assert "runs/opsd/tiny/seed5" in done.stdout and "runs/dash/" not in done.stdout


def test_the_factorial_pilot_plans_opsd_alone_at_three_rates_and_the_registrations_inputs(
    repo_root, tmp_path
):
    """The factorial study's pilot command (docs/factorial-study.md), dry: OPSD at each pilot
    rate with four seeds, both checkpoints evaluated, the probe and the base evaluation; no other
    method trained."""
    done = families_dry_run(repo_root, tmp_path, "factorial_pilot.yaml", "evaluate_all_runs",
                            "premise", "results/task_families/eval/base/tiny/accuracy.json")  # fmt: skip
    counts = job_counts(done.stdout)
    for rate in ("5e4", "1e3", "2e3"):
        assert counts[f"train_lora_families_lr{rate}"] == 4
    assert counts["generate_checkpoint_responses"] == 3 * 4 * 2
    assert counts["premise_probe_tiny"] == 1 and counts["evaluate_base_model"] == 1
    assert "runs/opsd/families_lr1e3/seed3" in done.stdout and "runs/dash" not in done.stdout


def test_the_study_overlay_trains_the_registered_methods_and_seeds(repo_root, tmp_path):
    """The premise study's command (docs/premise-study.md), dry: every registered method at
    every registered seed, and nothing else."""
    import json

    import yaml

    registration = json.loads((repo_root / "docs/premise-pilot.json").read_text())
    overlay = yaml.safe_load((repo_root / "config/experiments/premise_study.yaml").read_text())
    assert overlay["seeds"] == registration["study_seeds"]
    done = families_dry_run(repo_root, tmp_path, "premise_study.yaml", "all_tables")
    seeds, methods = len(overlay["seeds"]), overlay["tables"]["main_results"]["methods"]
    counts = job_counts(done.stdout)
    assert counts["train_lora_tiny"] == seeds * len(methods) == 3 * seeds
    assert f"fixed_lambda_{registration['fixed_lambda']}".replace(".", "p") in methods
    assert f"runs/dash/tiny/seed{seeds - 1}" in done.stdout and "runs/dash_k" not in done.stdout


def test_the_factorial_study_overlay_trains_every_registered_arm_and_seed(repo_root, tmp_path):
    """The factorial study's command (docs/factorial-study.md), dry: each registered arm at each
    registered seed on the study's scale, both checkpoints evaluated, and nothing else trained."""
    import json

    import yaml

    registration = json.loads((repo_root / "docs/factorial-pilot.json").read_text())
    overlay = yaml.safe_load((repo_root / "config/experiments/factorial_study.yaml").read_text())
    assert overlay["seeds"] == registration["study_seeds"]
    arms = list(dict.fromkeys(registration["arms"].values()))
    assert overlay["tables"]["main_results"]["methods"] == arms
    done = families_dry_run(repo_root, tmp_path, "factorial_study.yaml", "evaluate_all_runs")
    counts = job_counts(done.stdout)
    runs = len(arms) * len(overlay["seeds"])
    assert counts["train_lora_factorial"] == runs
    assert counts["generate_checkpoint_responses"] == 2 * runs
    assert not [job for job in counts if job.startswith("train_lora_") and job != "train_lora_factorial"]
    for arm in arms:
        assert f"runs/{arm}/factorial/seed{len(overlay['seeds']) - 1}" in done.stdout, arm
