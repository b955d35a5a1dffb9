"""Experiment tracking (``dashrepro.tracking``): what each tracker holds after a job, read back
with its own library; a failing tracker costs a warning and a count, never the job; secrets stay
out of warnings; the run's identity round-trips; a missing package stops the config check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tracking_readers import (
    mlflow_run,
    mlflow_scalars,
    tensorboard_scalars,
    tensorboard_text,
    trackio_run,
    wandb_records,
)

from dashrepro.settings import TrackingSettings
from dashrepro.tracking import (
    RunTracker,
    TrackedRun,
    checkpoint_scores,
    flat_config,
    scalars,
    scrub,
    selection_values,
    send_checkpoint_values,
)

ALL = ["tensorboard", "wandb", "mlflow", "trackio"]
#: The trackers one process can hold runs of in any folder (trackio fixes its folder at its
#: first import, so its jobs run in their own processes here, as a workflow's jobs do).
IN_PROCESS = ["tensorboard", "wandb", "mlflow"]
SUMMARY = {
    "mean_over_benchmarks": 37.5,
    "benchmarks": {
        "aime2024": {"avg_at_k": 50.0, "pass_at_k": 75.0, "stderr": 5.0, "k": 4},
        "aime2025": {"avg_at_k": 25.0, "pass_at_k": 50.0, "stderr": 2.5, "k": 4},
    },
}


def tracked(directory, report_to=ALL, **settings) -> TrackedRun:
    settings = TrackingSettings.from_config({"report_to": report_to, **settings})
    return TrackedRun(settings, str(directory), "tiny", "dash", "tiny", 1)


def test_a_training_job_and_a_grading_job_fill_one_run_in_every_tracker(tmp_path):
    run = tracked(tmp_path, IN_PROCESS)
    rows = [{"step": s, "loss": 1.0 / s, "gate_mean": 0.25 * s, "tokens": 40} for s in (1, 2, 3)]
    tracker = RunTracker(run, "train").start({"run": {"train": {"lr": 1e-3, "steps": 3}}})
    for row in rows:
        assert tracker.log(scalars(row, "train"), row["step"]) == 0
    tracker.finish()
    assert send_checkpoint_values(run, checkpoint_scores(SUMMARY), 2, "grade", print) == 0
    selected = selection_values({"selected_step": 2, "selection_score": 37.5})
    assert send_checkpoint_values(run, selected, 2, "select", print) == 0

    expected = {f"train/{key}": [(r["step"], float(r[key])) for r in rows]
                for key in ("step", "loss", "gate_mean", "tokens")}  # fmt: skip
    scores = {**checkpoint_scores(SUMMARY), **selected}
    expected.update({key: [(2, value)] for key, value in scores.items()})
    board_folder = tmp_path / "tensorboard" / "dashrepro" / run.name
    board = tensorboard_scalars(board_folder)
    assert [p.name for p in board_folder.iterdir() if p.is_dir()] == []  # one run folder
    assert '"lr": 0.001' in tensorboard_text(board_folder, "config")
    assert board.keys() == expected.keys()
    for key, points in expected.items():  # TensorBoard keeps float32
        assert [s for s, _ in board[key]] == [s for s, _ in points], key
        assert [v for _, v in board[key]] == pytest.approx([v for _, v in points], rel=1e-6)
    assert mlflow_scalars(tmp_path / "mlruns", "dashrepro", run.run_id) == expected
    _, mlflow = mlflow_run(tmp_path / "mlruns", "dashrepro", run.run_id)
    assert mlflow.data.params["run.train.lr"] == "0.001"
    assert {k: mlflow.data.tags[k] for k in run.tags} == run.tags

    records = wandb_records(tmp_path / "wandb")
    starts = [items for kind, items in records if kind == "run"]
    # The training job's, the grading job's, the selection job's.
    assert [s["id"] for s in starts] == [run.run_id] * 3
    assert all(s["group"] == "tiny" and "method:dash" in s["tags"] for s in starts)
    history = [items for kind, items in records if kind == "history"]
    assert [(h["_step"], h["train/loss"]) for h in history[:3]] == expected["train/loss"]
    # The checkpoint's scores carry their training step on their own axis (W&B drops a
    # step below one it has seen).
    assert history[3]["checkpoint/step"] == 2
    assert history[3]["checkpoint/aime2025/avg_at_k"] == 25.0


#: A job of the workflow, in its own process: ``train`` (the run's config, then rows) or a
#: grading or selection job (values at a step); it prints its failures and warnings.
TRACKIO_JOB = """
import json, os, sys
from dashrepro.tracking import RunTracker, TrackedRun, scalars, send_checkpoint_values
job, run = sys.argv[1], TrackedRun.from_dict(json.loads(sys.argv[2]))
payload = json.loads(sys.argv[3])
warnings = []
if job == "train":
    tracker = RunTracker(run, job, warnings.append).start(payload["config"])
    for row in payload["rows"]:
        tracker.log(scalars(row, "train"), row["step"])
    tracker.finish()
    failures = tracker.failures
else:
    failures = send_checkpoint_values(run, payload["values"], payload["step"], job, warnings.append)
for folder in payload.get("then_elsewhere", []):  # a second run, in another folder
    other = TrackedRun.from_dict({**run.to_dict(), "directory": folder})
    failures += RunTracker(other, job, warnings.append).start().failures
print(json.dumps({"failures": failures, "warnings": warnings,
                  "leaked": "TRACKIO_DIR" in os.environ}))
"""


def trackio_job(job: str, run: TrackedRun, **payload) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", TRACKIO_JOB, job, json.dumps(run.to_dict()), json.dumps(payload)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Trackio" not in done.stdout, done.stdout  # its banners stay out of the job's log
    return json.loads(done.stdout.splitlines()[-1])


def test_trackio_holds_a_runs_training_grading_and_selection_jobs_in_one_run(tmp_path):
    """Each job in its own process, as in the workflow: one trackio run, every value at its
    step, and the run's settings kept though the later jobs have none to give."""
    run = tracked(tmp_path, ["trackio"])
    rows = [{"step": s, "loss": 1.0 / s, "gate_mean": 0.25 * s, "tokens": 40} for s in (1, 2, 3)]
    config = {"run": {"train": {"lr": 1e-3, "steps": 3}}}
    jobs = [
        trackio_job("train", run, config=config, rows=rows),
        trackio_job("grade", run, values=checkpoint_scores(SUMMARY), step=2),
        trackio_job("select", run, step=2,
                    values=selection_values({"selected_step": 2, "selection_score": 37.5})),
    ]  # fmt: skip
    assert all(job == {"failures": 0, "warnings": [], "leaked": False} for job in jobs)

    held, settings, runs = trackio_run(tmp_path / "trackio", "dashrepro", run.name)
    assert runs == [run.name]
    expected = {f"train/{key}": [(r["step"], float(r[key])) for r in rows]
                for key in ("step", "loss", "gate_mean", "tokens")}  # fmt: skip
    scores = {**checkpoint_scores(SUMMARY), "checkpoint/selected_step": 2.0,
              "checkpoint/selection_score": 37.5}  # fmt: skip
    expected.update({key: [(2, value)] for key, value in scores.items()})
    assert held == expected
    assert settings["run.train.lr"] == 0.001 and settings["run.train.steps"] == 3
    assert settings["_Group"] == "tiny"
    # docs/tracking.md's listing command, on this store.
    listed = subprocess.run(
        [str(Path(sys.executable).parent / "trackio"), "list", "runs", "--project", "dashrepro"],
        env={**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert f"- {run.name}" in listed.stdout


def test_trackio_kept_in_another_folder_by_its_process_costs_a_warning(tmp_path):
    """trackio's folder is fixed in a process at its first import: a second run elsewhere in
    the same process (never a workflow job's case) is refused with a warning, not written there."""
    run = tracked(tmp_path / "first", ["trackio"])
    job = trackio_job("grade", run, values={"checkpoint/mean_avg_at_k": 1.0}, step=1,
                      then_elsewhere=[str(tmp_path / "second")])  # fmt: skip
    assert job["failures"] == 1 and len(job["warnings"]) == 1
    assert "trackio start failed" in job["warnings"][0]
    assert "fixed at its first import" in job["warnings"][0]
    assert not (tmp_path / "second" / "trackio").exists()


def test_the_file_store_is_not_handed_to_processes_started_later(tmp_path, monkeypatch):
    """MLflow's set_tracking_uri exports MLFLOW_TRACKING_URI; a trainer started after an
    in-process job would then write to that job's store instead of its own."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    RunTracker(tracked(tmp_path, ["mlflow"]), "train").start().finish()
    assert "MLFLOW_TRACKING_URI" not in os.environ
    other = tracked(tmp_path / "other", ["mlflow"])
    tracker = RunTracker(other, "train").start()
    assert tracker.log({"train/loss": 1.0}, 1) == 0
    tracker.finish()
    assert mlflow_scalars(tmp_path / "other" / "mlruns", "dashrepro", other.run_id)


def test_a_failing_tracker_costs_a_warning_and_a_count_not_the_job(tmp_path):
    """TensorBoard cannot make its folder (a file is in the way, as a full or read-only disk
    would refuse it): the job's other tracker still gets every value."""
    (tmp_path / "tensorboard").write_text("not a folder")
    warnings = []
    tracker = RunTracker(tracked(tmp_path, ["tensorboard", "mlflow"]), "train", warnings.append)
    tracker.start({"run": {"seed": 1}})
    assert tracker.failures == 1 and len(warnings) == 1
    assert warnings[0].startswith("[tracking] warning: tensorboard start failed for run")
    assert tracker.log({"train/loss": 0.5}, 1) == 0
    tracker.finish()
    assert mlflow_scalars(tmp_path / "mlruns", "dashrepro", tracker.run.run_id) == {
        "train/loss": [(1, 0.5)]
    }


def test_a_tracker_that_raises_while_logging_is_counted_each_time(tmp_path):
    warnings = []
    tracker = RunTracker(tracked(tmp_path, ["mlflow"]), "train", warnings.append).start()
    # MLflow refuses a key with '@'; the job goes on and the next step's values get through.
    assert tracker.log({"train/avg@k": 1.0}, 1) == 1
    assert tracker.log({"train/loss": 2.0}, 2) == 0
    tracker.finish()
    assert tracker.failures == 1 and "mlflow log failed" in warnings[0]


def test_warnings_never_hold_a_secret(monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "abcdef0123456789")
    assert scrub("401: key abcdef0123456789 rejected") == "401: key *** rejected"


def test_the_run_identity_round_trips_and_names_one_run(tmp_path):
    run = tracked(tmp_path, ["wandb"], project="opsd", offline=False)
    assert TrackedRun.from_dict(json.loads(json.dumps(run.to_dict()))) == run
    assert run.name == "dash/tiny/seed1" and run.run_id == "tiny.dash.tiny.seed1"
    assert run.tags == {"experiment": "tiny", "method": "dash", "scale": "tiny", "seed": "1"}


def test_the_config_block_picks_trackers_and_the_folder(default_config):
    assert TrackedRun.from_config({**default_config, "tracking": {}}, "dash", "tiny", 0) is None
    run = TrackedRun.from_config(default_config, "dash", "tiny", 0)
    assert run.settings.report_to == ("tensorboard",)
    assert run.directory == f"results/{default_config['experiment']}/tracking"
    moved = {**default_config, "tracking": {"report_to": ["mlflow"], "directory": "/scratch/t"}}
    assert TrackedRun.from_config(moved, "dash", "tiny", 0).directory == "/scratch/t"


def test_flat_config_and_scalars():
    assert flat_config({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {
        "a.b": 1, "a.c": "[1, 2]", "d": None
    }  # fmt: skip
    assert scalars({"step": 3, "ok": True, "name": "x", "nan": float("nan")}, "t").keys() == {
        "t/step", "t/ok", "t/nan"
    }  # fmt: skip


def test_a_tracker_whose_package_is_missing_stops_the_config_check(monkeypatch, default_config):
    """Before any job: the key and the package to install are named."""
    import importlib.util

    from dashrepro.experiment.semantics import check_semantics

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    config = {**default_config, "tracking": {"report_to": ["tensorboard", "wandb"]}}
    problems = check_semantics(config)
    assert [p for p in problems if p.startswith("tracking")] == [
        "tracking.report_to: 'wandb' needs the package 'wandb' "
        "(pip install wandb, or pip install -e '.[tracking]')"
    ]


def test_the_overhead_benchmark_prints_a_row_per_tracker(repo_root):
    """benchmarks/tracking_overhead.py as docs/tracking.md gives it, on a few steps."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "benchmarks/tracking_overhead.py", "--steps", "4", "--steps-per-state", "2"],
        cwd=repo_root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [r[0].strip() for r in rows[1:]] == ALL
    assert all(r[-1].strip() == "0" for r in rows[1:])  # no tracker call failed
