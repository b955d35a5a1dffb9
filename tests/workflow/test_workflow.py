"""The whole tiny DAG, end to end, in a temporary directory (marked slow: ~1-3 minutes).

Checks what a researcher relies on: every stage runs; the table has a row per method with numbers
in [0, 100]; each table number equals its recomputation from the per-sample parquet files of the
selected checkpoints; a second run has nothing to do; a config change that only touches the report
reruns only the report; every output can be traced back to its inputs.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from tracking_readers import tensorboard_scalars

from dashrepro.embedded.smoke_config import smoke_config
from dashrepro.experiment.run_matrix import run_matrix

pytestmark = pytest.mark.slow


def snakemake(workdir: Path, repo_root: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable, "-m", "snakemake",
        "-s", str(repo_root / "Snakefile"),
        "--directory", str(workdir),
        "--configfile", str(workdir / "config.yaml"),
        *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=2400)


def dry_run_after_change(workdir: Path, repo_root: Path, change) -> str:
    """Apply ``change`` to the run's config, dry-run ``all``, restore the config; return the output."""
    original = (workdir / "config.yaml").read_text()
    config = yaml.safe_load(original)
    change(config)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    try:
        dry = snakemake(workdir, repo_root, "-n", "all")
    finally:
        (workdir / "config.yaml").write_text(original)
    out = dry.stdout + dry.stderr
    assert dry.returncode == 0, out
    return out


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, repo_root, default_config):
    workdir = tmp_path_factory.mktemp("dag")
    (workdir / "config.yaml").write_text(yaml.safe_dump(smoke_config(default_config)))
    dry = snakemake(workdir, repo_root, "-n", "all_tables")
    assert dry.returncode == 0, dry.stderr
    done = snakemake(workdir, repo_root, "--cores", "2", "all")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return workdir, dry.stdout + dry.stderr


def test_dry_run_lists_every_stage(finished_run):
    _, dry_output = finished_run
    for rule in [
        "make_synthetic_data",
        "train_tokenizer",
        "sft_base_model",
        "evaluate_base_model",
        "train_lora_tiny",
        "generate_checkpoint_responses",
        "grade_checkpoint",
        "select_best_checkpoint",
        "table",
    ]:
        assert f"rule {rule}:" in dry_output


def test_the_premise_target_is_part_of_all_and_its_page_is_written_from_it(
    finished_run, repo_root, tmp_path
):
    """`snakemake premise` has nothing left to do after `all`; `python -m dashrepro.premise.page`
    writes the page's block from that run (into a copy of the page)."""
    workdir, _ = finished_run
    dry = snakemake(workdir, repo_root, "-n", "premise")
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr
    page = tmp_path / "premise.md"
    page.write_text((repo_root / "docs" / "premise.md").read_text())
    done = subprocess.run(
        [sys.executable, "-m", "dashrepro.premise.page", "e2e", "--directory", str(workdir),
         "--page", str(page)],
        capture_output=True, text=True, cwd=repo_root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "### e2e, scale tiny" in text and "rule `premise_probe_tiny`" in text
    assert "| `n_problems` | 6 |" in text
    rollouts = pd.read_parquet(workdir / "results/e2e/premise/tiny/rollouts.parquet")
    assert len(rollouts) == 6 * 4


def test_the_local_runs_jobs_ran_in_the_job_server(finished_run):
    """Once the base model exists the server has its libraries loaded, and every training,
    generation, grading and selection job after it was a fork of the server, one line each in
    its log (dashrepro.job_server); none was declined; the server stopped with Snakemake."""
    workdir, _ = finished_run
    log = (workdir / ".snakemake" / "log" / "job_server.log").read_text()
    forked = [line.split()[-1] for line in log.splitlines() if line.split()[1:2] == ["pid"]]
    timings = workdir / "results" / "e2e" / "job_timings"
    for rule in (
        "train_lora",
        "generate_checkpoint_responses",
        "grade_checkpoint",
        "select_best_checkpoint",
    ):
        jobs = len(list((timings / rule).rglob("*.tsv")))
        assert jobs and sum(script.endswith(f".{rule}.py") for script in forked) == jobs, rule
    assert "declined" not in log
    assert log.rstrip().endswith("stopped")


def test_table_numbers_recompute_from_per_sample_files(finished_run, default_config):
    workdir, _ = finished_run
    results = workdir / "results" / "e2e"
    cells = pd.read_csv(results / "tables" / "main_results.csv")
    methods = default_config["tables"]["main_results"]["methods"]
    benches = list(default_config["benchmarks"])
    assert list(dict.fromkeys(cells["row"])) == methods
    assert set(cells["column"]) == {*benches, "average"} and set(cells["scale"]) == {"tiny"}
    runs = run_matrix(default_config)
    for method in methods:
        per_seed = []
        for seed in runs[(method, "tiny")]:
            selection = json.loads(
                (results / "selection" / method / "tiny" / f"seed{seed}.json").read_text()
            )
            step = selection["selected_step"]
            samples = pd.read_parquet(
                results
                / "eval"
                / method
                / "tiny"
                / f"seed{seed}"
                / f"step{step}"
                / "samples.parquet"
            )
            assert set(samples["checkpoint"]) == {f"{method}/tiny/seed{seed}/step{step}"}
            scores = {
                b: 100.0
                * samples[samples["benchmark"] == b].groupby("problem_id")["correct"].mean().mean()
                for b in benches
            }
            per_seed.append(scores)
        mine = cells[cells["row"] == method].set_index("column")
        for b in benches:
            values = pd.Series([s[b] for s in per_seed])
            assert 0.0 <= mine.loc[b, "value"] <= 100.0
            assert mine.loc[b, "value"] == pytest.approx(values.mean(), abs=1e-9)
            if len(values) > 1:
                assert mine.loc[b, "std"] == pytest.approx(values.std(ddof=1), abs=1e-9)
            else:  # one seed (EOPD, AVSD, PW-OPSD, as in the paper): no std
                assert math.isnan(mine.loc[b, "std"])
        assert mine.loc["average", "value"] == pytest.approx(
            sum(mine.loc[b, "value"] for b in benches) / len(benches)
        )
    markdown = (results / "tables" / "main_results.md").read_text()
    latex = (results / "tables" / "main_results.tex").read_text()
    for label in [default_config["methods"][m]["label"] for m in methods]:
        assert label in markdown and label in latex


def test_selection_uses_best_mean_checkpoint(finished_run, default_config):
    workdir, _ = finished_run
    results = workdir / "results" / "e2e"
    for path in (results / "selection").rglob("seed[0-9].json"):
        selection = json.loads(path.read_text())
        means = {}
        for step_dir in (
            results / "eval" / selection["method"] / selection["scale"] / f"seed{selection['seed']}"
        ).glob("step*"):
            means[int(step_dir.name[4:])] = json.loads((step_dir / "summary.json").read_text())[
                "mean_over_benchmarks"
            ]
        best = max(means.values())
        assert selection["selected_step"] == min(s for s, v in means.items() if v == best)


def test_every_table_and_figure_of_the_registry_is_built(finished_run, default_config):
    """The embedded default draws the paper's whole registry: every table with every row."""
    workdir, _ = finished_run
    results = workdir / "results" / "e2e"
    for table, spec in default_config["tables"].items():
        for ext in ("csv", "md", "tex"):
            assert (results / "tables" / f"{table}.{ext}").stat().st_size > 0, (table, ext)
        cells = pd.read_csv(results / "tables" / f"{table}.csv")
        if spec["kind"] in ("method_scores", "seed_statistics", "grpo_grid"):
            assert set(cells["row"]) == set(spec["methods"]) or spec["kind"] == "grpo_grid", table
            assert cells["value"].notna().all(), table
    for figure in default_config["figures"]:
        for ext in ("png", "pdf", "json"):
            assert (results / "figures" / f"{figure}.{ext}").stat().st_size > 0, (figure, ext)


def test_outputs_exist_with_provenance(finished_run):
    workdir, _ = finished_run
    results = workdir / "results" / "e2e"
    for name in ["checkpoint_curves.png", "checkpoint_curves.pdf"]:
        assert (results / "figures" / name).stat().st_size > 1000
    accuracy = json.loads((results / "eval" / "base" / "tiny" / "accuracy.json").read_text())
    assert {"student", "teacher", "teacher_minus_student"} <= set(accuracy)
    adapter = next((results / "runs").rglob("checkpoint-2"))
    assert (adapter / "adapter_config.json").exists() and (
        adapter / "adapter_model.safetensors"
    ).exists()
    record = json.loads((results / "tables" / "main_results.csv.provenance.json").read_text())
    assert record["stage"] == "table" and record["wildcards"] == {"table": "main_results"}
    assert record["params"]["context"]["method_labels"]["dash"] == "DASH (Ours)"  # labels too
    assert record["host"] and record["started_utc"] <= record["finished_utc"]
    assert all(len(item["sha256"]) == 64 for item in record["inputs"]["selections"])
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from dashrepro.provenance import trace

    chain = "\n".join(trace(results / "tables" / "main_results.csv", root=workdir))
    for stage in [
        "select_best_checkpoint",
        "grade_checkpoint",
        "generate_checkpoint_responses",
        "train_lora",
        "sft_base_model",
        "make_synthetic_data",
    ]:
        assert f"stage={stage}" in chain


def test_a_warm_start_of_another_recipe_is_trained_saying_why(finished_run):
    # The smoke run's SFT is 10 steps, not the shipped warm start's 800: it trains its own.
    workdir, _ = finished_run
    log = (workdir / "results/e2e/logs/sft_base_model/tiny.log").read_text()
    assert "training the warm start: no shipped one was made from this recipe" in log, log
    # The nearest shipped one, named: the default's, 800 steps on other examples.
    assert "default: sft.steps" in log and "default: examples_sha256" in log, log
    record = json.loads((workdir / "results/e2e/base_model/tiny/recipe.json").read_text())
    assert record["recipe"]["sft"]["steps"] == 10 and "torch" in record["made_with"], record


def test_second_run_recomputes_nothing(finished_run, repo_root):
    workdir, _ = finished_run
    again = snakemake(workdir, repo_root, "-n", "all")
    assert again.returncode == 0
    assert "Nothing to be done" in again.stdout + again.stderr


def test_report_only_change_reruns_only_the_report(finished_run, repo_root):
    workdir, _ = finished_run
    out = dry_run_after_change(
        workdir, repo_root, lambda c: c["methods"]["dash"].update(label="DASH (relabelled)")
    )
    assert "rule table:" in out and "rule figure:" in out
    for upstream in [
        "rule train_lora_tiny:",
        "rule generate_checkpoint_responses:",
        "rule grade_checkpoint:",
        "rule sft_base_model:",
    ]:
        assert upstream not in out


def test_a_tracking_change_reruns_no_job(finished_run, repo_root):
    """The trackers are read from the config by the jobs, not passed as params."""
    workdir, _ = finished_run
    out = dry_run_after_change(
        workdir, repo_root, lambda c: c["tracking"].update(report_to=["mlflow"], project="x")
    )
    assert "Nothing to be done" in out


def test_tensorboard_holds_every_runs_steps_and_checkpoint_scores(finished_run, default_config):
    """The default logs to TensorBoard: each run's folder holds every step of its
    train_metrics.parquet and, at each checkpoint's step, the Avg@k its summary.json holds."""
    workdir, _ = finished_run
    results = workdir / "results" / "e2e"
    runs = run_matrix(default_config)
    assert runs
    for (method, scale), seeds in runs.items():
        for seed in seeds:
            held = tensorboard_scalars(
                results / "tracking" / "tensorboard" / "dashrepro" / method / scale / f"seed{seed}"
            )
            run = results / "runs" / method / scale / f"seed{seed}"
            metrics = pd.read_parquet(run / "train_metrics.parquet")
            assert [step for step, _ in held["train/loss"]] == list(metrics["step"])
            assert [v for _, v in held["train/loss"]] == pytest.approx(list(metrics["loss"]))
            for summary_path in (results / "eval" / method / scale / f"seed{seed}").glob(
                "step*/summary.json"
            ):
                step = int(summary_path.parent.name.removeprefix("step"))
                summary = json.loads(summary_path.read_text())
                for bench, scores in summary["benchmarks"].items():
                    points = dict(held[f"checkpoint/{bench}/avg_at_k"])
                    assert points[step] == pytest.approx(scores["avg_at_k"], rel=1e-6)


def test_the_tensorboard_screenshot_script_shows_every_run(finished_run, repo_root, tmp_path):
    """scripts/tensorboard_screenshot.sh as docs/tracking.md gives it (where Chromium is)."""
    import shutil

    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("needs Chromium (apt-get install chromium)")
    workdir, _ = finished_run
    logdir = workdir / "results" / "e2e" / "tracking" / "tensorboard"
    done = subprocess.run(
        ["bash", "scripts/tensorboard_screenshot.sh", str(logdir), str(tmp_path / "tb.png")],
        cwd=repo_root, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = len(list(logdir.glob("dashrepro/*/*/seed*")))
    assert f"({runs} runs in" in done.stdout and runs > 0
    png = (tmp_path / "tb.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 20_000


def test_training_change_keeps_data_and_base_model(finished_run, repo_root):
    workdir, _ = finished_run
    out = dry_run_after_change(
        workdir,
        repo_root,
        lambda c: c["scales"]["tiny"]["train"].update(lr=2 * c["scales"]["tiny"]["train"]["lr"]),
    )
    assert "rule train_lora_tiny:" in out and "rule generate_checkpoint_responses:" in out
    for upstream in [
        "rule make_synthetic_data:",
        "rule train_tokenizer:",
        "rule sft_base_model:",
        "rule evaluate_base_model:",
    ]:
        assert upstream not in out


def test_invalid_config_stops_before_any_job(finished_run, repo_root):
    workdir, _ = finished_run
    bad = workdir / "bad.yaml"
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    config["evaluation"]["temprature"] = 1.0
    bad.write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo_root / "Snakefile"), "--directory", str(workdir),
           "--configfile", str(bad), "-n", "all"]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert (
        "evaluation" in result.stderr + result.stdout
        and "'temprature' was unexpected" in result.stderr + result.stdout
    )


def test_grader_change_regrades_without_generating(finished_run, repo_root):
    workdir, _ = finished_run
    out = dry_run_after_change(
        workdir, repo_root, lambda c: c["evaluation"].update(grading_timeout_s=7.0)
    )
    assert "rule grade_checkpoint:" in out and "rule select_best_checkpoint:" in out
    for upstream in ["rule generate_checkpoint_responses:", "rule train_lora_tiny:"]:
        assert upstream not in out


def run_from_repo(repo_root: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """Snakemake started in the repository root (where `--profile slurm-a800` is found)."""
    cmd = [
        sys.executable, "-m", "snakemake", "--directory", str(workdir),
        "--configfile", str(workdir / "config.yaml"), *args,
    ]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=repo_root)


@pytest.mark.shared_data
def test_paper_config_plans_gpu_jobs_through_the_slurm_profile(
    tmp_path, repo_root, default_config_file
):
    """The paper overlay, merged as Snakemake merges it, dry-runs through the SLURM profile."""
    from conftest import SHARED_BENCHMARKS
    from snakemake.utils import update_config

    if not SHARED_BENCHMARKS.is_dir():
        pytest.skip(f"no {SHARED_BENCHMARKS}")
    config = json.loads(json.dumps(default_config_file))
    update_config(config, yaml.safe_load((repo_root / "config/experiments/paper.yaml").read_text()))
    for name, bench in config["benchmarks"].items():
        bench["dataset"]["path"] = str(SHARED_BENCHMARKS / f"{name}.jsonl")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    dry = run_from_repo(repo_root, tmp_path, "--profile", "slurm-a800", "-n", "all_tables")
    out = dry.stdout + dry.stderr
    assert dry.returncode == 0, out[-3000:]
    # The paper's run matrix and its checkpoints (counted from the config), through the profile.
    from conftest import expected_jobs

    from dashrepro.experiment.run_matrix import expand_config

    expected = expected_jobs(expand_config(config))
    for rule in ("train_lora_qwen3_1p7b", "generate_checkpoint_responses"):
        assert re.search(rf"^{rule}\s+{expected[rule]}$", out, re.MULTILINE), out[-3000:]
    assert "sft_base_model" not in out  # released models are not warm-started here


# ------------------------------------------------------------------ integrity under faults


@pytest.fixture
def run_copy(finished_run, tmp_path):
    """A copy of the finished run (mtimes kept), for tests that damage or interrupt it."""
    import shutil

    workdir, _ = finished_run
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy, symlinks=True)
    return copy


def test_every_output_is_readable_as_a_plain_write_would_be(finished_run):
    """Atomic writes rename owner-only temporary files; the results must still honour the umask."""
    import os
    import stat

    workdir, _ = finished_run
    mask = os.umask(0o022)
    os.umask(mask)
    wrong = []
    for path in (workdir / "results").rglob("*"):
        want = (0o777 if path.is_dir() else 0o666) & ~mask
        if stat.S_IMODE(path.stat().st_mode) != want:
            wrong.append(f"{path.relative_to(workdir)} {oct(stat.S_IMODE(path.stat().st_mode))}")
    assert not wrong, (
        f"{len(wrong)} paths not {oct(0o666 & ~mask)}/{oct(0o777 & ~mask)}: {wrong[:5]}"
    )


def test_edited_samples_stop_the_table_naming_the_file(run_copy, repo_root):
    sys.path.insert(0, str(repo_root / "src"))
    from dashrepro.provenance import orphan_records

    results = run_copy / "results" / "e2e"
    samples_path = results / "eval" / "dash" / "tiny" / "seed1" / "step2" / "samples.parquet"
    samples = pd.read_parquet(samples_path)
    samples.loc[0, "correct"] = not samples.loc[0, "correct"]  # one edited grade
    samples.to_parquet(samples_path, index=False)
    done = snakemake(run_copy, repo_root, "--cores", "2", "all_tables")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    log = (results / "logs" / "select_best_checkpoint" / "dash" / "tiny" / "seed1.log").read_text()
    for text in (out, log):
        # Stopped before its work: the file is not the one rule grade_checkpoint wrote.
        assert "changed since the job that made them" in text
        assert "results/e2e/eval/dash/tiny/seed1/step2/samples.parquet" in text
        assert "rule grade_checkpoint" in text
    assert not (results / "selection" / "dash" / "tiny" / "seed1.json").exists()
    # The failed job's output is gone, and so is its provenance record.
    assert orphan_records(results) == []


def test_an_edited_table_or_a_swapped_adapter_stops_all_naming_the_file(run_copy, repo_root):
    """Found by the reliability probe: an edited Markdown table went unnoticed, and another
    run's adapter copied over a checkpoint was washed into the tables by the next `all` (exit
    0). Now the jobs that read them stop, naming the file and the rule that wrote it, and the
    audit names an output that is not what its job wrote."""
    results = run_copy / "results" / "e2e"
    table = results / "tables/main_results.md"
    original, stat = table.read_bytes(), table.stat()
    table.write_text(table.read_text().replace("|", "| ", 1))
    done = audit(run_copy, "main_results", "dash", "tiny", "aime2025", "--verify")
    assert done.returncode == 1
    assert "[changed_output] results/e2e/tables/main_results.md" in done.stdout
    done = snakemake(run_copy, repo_root, "--cores", "2", "all")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "changed since the job that made them" in out and "tables/main_results.md" in out
    table.write_bytes(original)
    os.utime(table, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    adapter = results / "runs/dash/tiny/seed0/checkpoint-2/adapter_model.safetensors"
    adapter.write_bytes((results / "runs/opsd/tiny/seed0/checkpoint-2" / adapter.name).read_bytes())
    done = snakemake(run_copy, repo_root, "--cores", "2", "all")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "changed since the job that made them" in out
    assert "results/e2e/runs/dash/tiny/seed0/checkpoint-2/adapter_model.safetensors" in out
    assert "rule train_lora_tiny" in out


def test_killed_snakemake_resumes_with_unlock_then_rerun_incomplete(run_copy, repo_root):
    """docs/troubleshooting.md's resume steps, after `kill -9` of Snakemake itself in a job."""
    import os
    import signal
    import time

    config = yaml.safe_load((run_copy / "config.yaml").read_text())
    config["methods"]["dash"]["label"] = "DASH (relabelled)"  # reruns the report jobs only
    (run_copy / "config.yaml").write_text(yaml.safe_dump(config))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo_root / "Snakefile"),
           "--directory", str(run_copy), "--configfile", str(run_copy / "config.yaml"),
           "--cores", "1", "all"]  # fmt: skip
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)  # fmt: skip
    locks = run_copy / ".snakemake" / "locks"
    deadline = time.time() + 120
    while not (locks.is_dir() and any(locks.iterdir())):
        assert process.poll() is None and time.time() < deadline, "Snakemake never locked"
        time.sleep(0.05)
    time.sleep(1.0)  # inside the first job
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()

    locked = snakemake(run_copy, repo_root, "--cores", "1", "all")
    said = locked.stdout + locked.stderr
    # What Snakemake names first depends on whether the killed run had started its job: the
    # stale lock, or that job's incomplete outputs (checked before the lock). The page's two
    # steps, --unlock then --rerun-incomplete, clear either.
    assert locked.returncode != 0 and ("--unlock" in said or "--rerun-incomplete" in said)
    assert snakemake(run_copy, repo_root, "--unlock").returncode == 0
    done = snakemake(run_copy, repo_root, "--cores", "2", "--rerun-incomplete", "all")
    assert done.returncode == 0, done.stderr[-3000:]
    table = (run_copy / "results" / "e2e" / "tables" / "main_results.md").read_text()
    assert "DASH (relabelled)" in table


def _job_processes(workdir: Path, rule: str) -> list[int]:
    """PIDs of the processes running ``rule``'s script in ``workdir`` (Snakemake runs a copy of
    it from .snakemake/scripts/), whoever their parent is."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            continue
        if ".snakemake/scripts/" in command and f".{rule}.py" in command and cwd == workdir:
            found.append(int(proc.name))
    return found


def _kill_snakemake_alone_in_generation(workdir: Path, repo_root: Path, target: str, log: Path):
    """Start Snakemake on ``target`` (one generation job), kill -9 Snakemake's own process once
    the job has a finished shard; return the orphaned job's PIDs (they live on)."""
    import signal
    import time

    log.unlink(missing_ok=True)  # the finished run's: the new job writes its own
    cmd = [sys.executable, "-m", "snakemake", "-s", str(repo_root / "Snakefile"),
           "--directory", str(workdir), "--configfile", str(workdir / "config.yaml"),
           "--cores", "1", "--force", target]  # fmt: skip
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)  # fmt: skip
    deadline = time.time() + 300
    while not (log.is_file() and " generated" in log.read_text()):
        assert process.poll() is None and time.time() < deadline, "no shard was generated"
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)  # Snakemake alone, not its process group
    process.wait()
    orphans = _job_processes(workdir, "generate_checkpoint_responses")
    assert orphans, "the job died with Snakemake"
    return orphans


def test_snakemake_killed_alone_then_the_documented_recovery(run_copy, repo_root):
    """docs/troubleshooting.md, "Snakemake killed, its job still running": after kill -9 of
    Snakemake alone its job finishes; the next run stops on the incomplete outputs; the page's
    commands keep the orphan's work (not rerun) or, with the orphan ended, redo the job from
    its finished shards."""
    import signal
    import time

    workdir = run_copy.resolve()
    target = "results/e2e/eval/dash/tiny/seed0/step2/responses.parquet"
    log = workdir / "results/e2e/logs/generate_checkpoint_responses/dash/tiny/seed0/step2.log"
    before = (workdir / target).read_bytes()
    orphans = _kill_snakemake_alone_in_generation(workdir, repo_root, target, log)
    try:
        deadline = time.time() + 300
        while _job_processes(workdir, "generate_checkpoint_responses"):
            assert time.time() < deadline, "the orphaned job never finished"
            time.sleep(0.1)
    finally:
        for pid in _job_processes(workdir, "generate_checkpoint_responses"):
            os.kill(pid, signal.SIGKILL)
    assert orphans and (workdir / target).read_bytes() == before  # finished: the same bytes

    stopped = snakemake(workdir, repo_root, "--cores", "1", "all")
    said = stopped.stdout + stopped.stderr
    assert stopped.returncode != 0 and ("IncompleteFilesException" in said or "--unlock" in said)
    # Keep its work: the page's commands, in its order.
    assert snakemake(workdir, repo_root, "--unlock").returncode == 0
    written = subprocess.run([sys.executable, "-m", "dashrepro.provenance", "--written", target],
                             cwd=workdir, capture_output=True, text=True)  # fmt: skip
    assert written.returncode == 0 and "written whole by rule generate_checkpoint_responses" in (
        written.stdout
    ), written.stdout + written.stderr
    kept = snakemake(workdir, repo_root, "--cores", "1", "--touch", "--rerun-incomplete", target)
    assert kept.returncode == 0, (kept.stdout + kept.stderr)[-3000:]
    dry = snakemake(workdir, repo_root, "-n", "all")
    assert dry.returncode == 0 and "rule generate_checkpoint_responses:" not in (
        dry.stdout + dry.stderr
    ), (dry.stdout + dry.stderr)[-3000:]

    # Redo it: the orphan ended after its first shard; the rerun reuses that shard.
    orphans = _kill_snakemake_alone_in_generation(workdir, repo_root, target, log)
    for pid in orphans:
        os.kill(pid, signal.SIGKILL)
    assert snakemake(workdir, repo_root, "--unlock").returncode == 0
    redone = snakemake(workdir, repo_root, "--cores", "1", "--rerun-incomplete", target)
    assert redone.returncode == 0, (redone.stdout + redone.stderr)[-3000:]
    text = log.read_text()
    assert re.search(r"resuming: [1-9]\d* of \d+ shards finished, reused", text), text
    assert (workdir / target).read_bytes() == before  # resumed: the bytes of an unbroken run


def test_one_figure_regenerates_alone_and_the_report_is_captioned(run_copy, repo_root):
    figure = run_copy / "results" / "e2e" / "figures" / "checkpoint_curves.pdf"
    drawn = figure.read_bytes()
    figure.unlink()
    done = snakemake(run_copy, repo_root, "--cores", "1", str(figure.relative_to(run_copy)))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert figure.stat().st_size > 1000
    assert figure.read_bytes() == drawn  # no creation date: drawn again, the same bytes
    assert "rule figure:" in out
    for other in ("rule table:", "rule select_best_checkpoint:", "rule grade_checkpoint:"):
        assert other not in out

    report = run_copy / "report.html"
    made = snakemake(run_copy, repo_root, "--report", str(report))
    assert made.returncode == 0, (made.stdout + made.stderr)[-3000:]
    html = report.read_text()
    for text in ("main_results", "checkpoint_curves", "motivation_spearman",
                 "best mean over the benchmarks", "Tables", "Figures", "Reproduction gap"):  # fmt: skip
        assert text in html, text
    # docutils' own warnings (a category named like the report's Statistics panel gave
    # "Duplicate explicit target name") are rendered into the page: there must be none.
    assert "System Message" not in html and "Duplicate explicit target" not in html


# ------------------------------------------------------------------ audit and statistics


def audit(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """``dashrepro audit`` as a user runs it (the console command is ``dashrepro.cli:main``)."""
    cmd = [sys.executable, "-m", "dashrepro.cli", "audit", "--root", str(workdir),
           "--results", "results/e2e", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def test_an_audited_cell_reaches_the_raw_responses_and_the_training_run(finished_run):
    workdir, _ = finished_run
    done = audit(workdir, "main_results", "dash", "tiny", "aime2025", "--verify", "--regrade",
                 "--config", str(workdir / "config.yaml"))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for seed in (0, 1):
        assert f"results/e2e/selection/dash/tiny/seed{seed}.json" in out
        assert re.search(rf"eval/dash/tiny/seed{seed}/step\d+/responses.parquet", out)
        assert re.search(rf"runs/dash/tiny/seed{seed}/checkpoint-\d+/adapter_model", out)
    assert "every candidate's mean Avg@k: 2: " in out and "training data: results/e2e/data/" in out
    assert "base model: results/e2e/base_model/tiny/model.safetensors sha256" in out
    assert "every hash and number agrees" in out


def test_the_audit_and_statistics_reports_cover_every_cell(finished_run, default_config):
    workdir, _ = finished_run
    results = workdir / "results" / "e2e"
    audit_md = (results / "audit" / "report.md").read_text()
    assert "0 flagged" in audit_md and (results / "audit" / "report.html").stat().st_size > 0
    scores = [t for t, spec in default_config["tables"].items()
              if spec["kind"] in ("method_scores", "seed_statistics")]  # fmt: skip
    cells = pd.concat(
        [pd.read_csv(results / "tables" / f"{t}.csv").assign(table=t) for t in scores]
    )
    stats = pd.read_csv(results / "statistics" / "cell_statistics.csv")
    key = ["table", "row", "scale", "column"]
    assert sorted(map(tuple, stats[key].values)) == sorted(map(tuple, cells[key].values))
    merged = stats.merge(cells, on=key, suffixes=("", "_table"))
    assert (merged["value"] - merged["value_table"]).abs().max() < 1e-9  # the same numbers
    assert (stats["optimism"] >= -1e-9).all() and stats["clustered_se"].notna().all()
    paired = pd.read_csv(results / "statistics" / "paired_differences.csv")
    assert set(paired["reference"]) == {"opsd"} and "opsd" not in set(paired["row"])
    # The embedded run's scales are not the paper's: every published cell of these tables is
    # listed as missing here, every cell of ours as missing from the paper; none is dropped.
    gap = pd.read_csv(results / "statistics" / "reproduction_gap.csv")
    published = pd.read_csv(repo_published(default_config))
    names = {t: (default_config["tables"][t].get("options") or {}).get("published_table", t)
             for t in scores}  # fmt: skip
    expected_paper = published[published["table"].isin(set(names.values()))]
    assert (gap["status"] == "missing_ours").sum() == len(expected_paper)
    assert (gap["status"] == "missing_published").sum() == len(cells)
    assert "Reproduction gap" in (results / "statistics" / "report.md").read_text()
    # Held-out selection beside the paper's rule, for every cell: the validation split's choice
    # can only lose test score against the choice made on the test set itself.
    heldout = pd.read_csv(results / "statistics" / "heldout_selection.csv")
    assert sorted(map(tuple, heldout[key].values)) == sorted(map(tuple, cells[key].values))
    best = heldout.merge(cells, on=key)
    assert (best["best_on_test"] - best["value"]).abs().max() < 1e-9  # the tables' numbers
    average = heldout[heldout["column"] == "average"]
    assert (average["difference"] <= 1e-9).all()
    assert "Held-out selection" in (results / "statistics" / "report.md").read_text()


def repo_published(config) -> Path:
    return Path(__file__).resolve().parents[2] / config["published_numbers"]


def test_each_tampered_file_on_a_chain_is_caught_and_named(run_copy):
    """A changed grade, a swapped adapter, an edited summary, selection or table cell, an
    adapter's lora_alpha, the base model's chat template."""
    from dashrepro.io import read_parquet, write_parquet

    results = run_copy / "results" / "e2e"
    selection = json.loads((results / "selection/dash/tiny/seed0.json").read_text())
    step = selection["selected_step"]
    evals = results / f"eval/dash/tiny/seed0/step{step}"
    other = 4 if step == 2 else 2

    def grade(path):
        samples = read_parquet(path)
        samples.loc[0, "correct"] = not samples.loc[0, "correct"]
        write_parquet(path, samples)

    def summary(path):
        data = json.loads(path.read_text())
        data["mean_over_benchmarks"] += 1.0
        path.write_text(json.dumps(data))

    def swap(path):
        path.write_bytes((path.parents[1] / f"checkpoint-{other}" / path.name).read_bytes())

    def pick(path):
        data = json.loads(path.read_text())
        data["selected_step"] = other
        path.write_text(json.dumps(data))

    def cell(path):
        frame = pd.read_csv(path)
        frame.loc[(frame["row"] == "dash") & (frame["column"] == "aime2025"), "value"] += 0.5
        frame.to_csv(path, index=False)

    def alpha(path):  # the reliability probe's `sed -i 's/"lora_alpha": [0-9]*/"lora_alpha": 999/'`
        path.write_text(re.sub(r'"lora_alpha": [0-9]*', '"lora_alpha": 999', path.read_text()))

    def template(path):  # the chat template, in the base model's tokenizer files
        path.write_text(path.read_text().replace("<|im_start|>", "<|im_start|> ", 1))

    # transformers writes the template to its own file, or (older versions) into the config.
    template_file = results / "base_model/tiny/chat_template.jinja"
    if not template_file.is_file():
        template_file = results / "base_model/tiny/tokenizer_config.json"

    cases = [
        (evals / "samples.parquet", grade, "changed_input"),
        (evals / "summary.json", summary, "changed_input"),
        (results / f"runs/dash/tiny/seed0/checkpoint-{step}/adapter_model.safetensors", swap,
         "changed_input"),
        (results / "selection/dash/tiny/seed0.json", pick, "changed_input"),
        (results / "tables/main_results.csv", cell, "mismatch"),
        # Each candidate's adapter config, not only the selected one's (issue 66).
        (results / f"runs/dash/tiny/seed0/checkpoint-{other}/adapter_config.json", alpha,
         "changed_input"),
        (template_file, template, "changed_input"),
    ]  # fmt: skip
    for path, tamper, kind in cases:
        original, stat = path.read_bytes(), path.stat()
        tamper(path)
        done = audit(run_copy, "main_results", "dash", "tiny", "aime2025", "--verify")
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as it was: not stale either
        relative = str(path.relative_to(run_copy))
        assert done.returncode == 1, (relative, done.stdout)
        assert f"[{kind}] {relative}" in done.stdout, (relative, done.stdout)


def test_the_fault_probe_names_every_fault_snakemake_lets_through(finished_run, tmp_path):
    """benchmarks/faults.py (the reliability probe the next round re-runs) on this run: every
    damaged result, bad overlay value and damaged base model is named, and a touched but unchanged
    base model reruns nothing (profiles/default: checksums up to 8 MB). An empty or non-UTF-8
    overlay is refused by Snakemake's own loader before the workflow's code runs, without the
    file's name (docs/getting-started.md: `python -m dashrepro.experiment.config` names it)."""
    import importlib.util

    workdir, _ = finished_run
    spec = importlib.util.spec_from_file_location(
        "faults", Path(__file__).resolve().parents[2] / "benchmarks/faults.py"
    )
    faults = importlib.util.module_from_spec(spec)
    sys.modules["faults"] = faults  # its dataclass looks its module up there
    spec.loader.exec_module(faults)
    rows = tmp_path / "rows.json"
    faults.main(["--workdir", str(workdir), "--json", str(rows)])
    verdicts = {row["fault"]: row["verdict"] for row in json.loads(rows.read_text())}
    upstream = {"overlay is empty", "overlay is not UTF-8"}
    assert set(verdicts) == {fault.name for fault in faults.FAULTS}
    expected = {
        fault.name: "nothing rerun" if fault.harmless else "clear error"
        for fault in faults.FAULTS
        if fault.name not in upstream
    }
    assert {k: v for k, v in verdicts.items() if k not in upstream} == expected
    # The finished run itself is untouched: each fault was injected into a copy.
    from dashrepro.io import read_json, sha256_path
    from dashrepro.provenance import record_path

    for name in (
        "tables/main_results.md",
        "runs/dash/tiny/seed0/checkpoint-2/adapter_model.safetensors",
    ):
        path = workdir / "results/e2e" / name
        assert read_json(record_path(path))["output_sha256"] == sha256_path(path)


def test_job_seconds_counts_the_current_dag_only(finished_run, repo_root):
    """benchmarks/job_seconds.py: one row per rule of the DAG, every job timed, and a stale
    timing file (a job the DAG no longer has) left out of the sums."""
    workdir, _ = finished_run
    timings = workdir / "results" / "e2e" / "job_timings"
    stale = timings / "train_lora" / "no_such_method" / "tiny" / "seed0.tsv"
    stale.parent.mkdir(parents=True)
    stale.write_text("s\th:m:s\n100000.0\t27:46:40\n")
    command = [sys.executable, str(repo_root / "benchmarks/job_seconds.py"),
               "--directory", str(workdir), "--configfile", str(workdir / "config.yaml")]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    finally:
        stale.unlink()
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {
        line.split(" | ")[0].strip("| "): line.strip("|").split("|")
        for line in done.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| rule")
    }
    total = rows.pop("total")
    # Every job of the DAG was timed; the folder may hold more (the stale file was one).
    assert 0 < int(total[1]) <= len(list(timings.rglob("*.tsv"))), done.stdout
    assert int(total[4]) == 0, done.stdout
    assert {"grade_checkpoint", "table"} <= set(rows), done.stdout
    assert any(rule.startswith("train_lora") for rule in rows), done.stdout
    sums = sum(float(r[2]) for r in rows.values())
    assert abs(sums - float(total[2])) <= len(rows) and float(total[2]) < 100000, done.stdout
