"""Resume and multi-process semantics of the trainer, through its command line (real processes).

- ``kill -9`` in the middle of a run, rerun: the run continues from the last complete state and
  ends with an adapter identical to an uninterrupted run's;
- SIGUSR1 (SLURM's preemption notice): a state is saved at the end of the step and the trainer
  exits with ``PREEMPTED_EXIT_CODE``; the rerun finishes identically;
- a rerun under a changed config, base model or training set discards the kept states with a
  log line naming what changed, and trains afresh (as an uninterrupted run would);
- 2 gloo processes with one micro-batch each give the adapter of 1 process accumulating 2.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tracking_readers import mlflow_scalars, tensorboard_scalars, trackio_scalars, wandb_scalars
from training_helpers import LORA

from dashrepro.settings import TrackingSettings
from dashrepro.tracking import TrackedRun
from dashrepro.training.preemption import PREEMPTED_EXIT_CODE

TRAIN = {
    "steps": 6,
    "checkpoint_every": 2,
    "lr": 3e-3,
    "micro_batch_size": 3,
    "grad_accumulation": 1,
    "max_new_tokens": 10,
    "temperature": 1.1,
    "top_p": 0.95,
    "top_k": 20,
}


def write_run(
    path: Path, tiny_setup, default_config, out_dir: Path, protocol=None, tracked=None, **train
) -> Path:
    folder, data, _ = tiny_setup
    spec = {
        "base_model_dir": str(folder),
        "train_parquet": str(data),
        "out_dir": str(out_dir),
        "method_name": "dash",
        "method": {**default_config["methods"]["dash"], "label": None},
        "train": {**TRAIN, **train},
        "lora": {**LORA, "dropout": 0.1},  # dropout on: its masks must be reproduced too
        "protocol": protocol or default_config["protocol"],
        "seed": 3,
        "tracked": tracked.to_dict() if tracked else None,
    }
    spec["method"].pop("label")
    path.write_text(json.dumps(spec))
    return path


def trainer_command(run: Path) -> list[str]:
    return [sys.executable, "-m", "dashrepro.training.trainer", "--spec", str(run)]


def run_to_end(run: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(trainer_command(run), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def adapter(out_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(out_dir / f"checkpoint-{step}" / "adapter_model.safetensors")


def start_and_interrupt(run: Path, out_dir: Path, after_state: int, how) -> int:
    """Start the trainer, wait for the state of step ``after_state``, interrupt it; return rc."""
    marker = out_dir / ".resume" / f"step-{after_state:06d}" / "trainer_state.json"
    process = subprocess.Popen(
        trainer_command(run), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 300
    while not marker.exists():
        assert process.poll() is None, process.stderr.read()[-3000:]
        assert time.time() < deadline, "no training state appeared"
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be interrupted"
    how(process)
    return process.wait(timeout=300)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_setup, default_config):
    work = tmp_path_factory.mktemp("uninterrupted")
    run_to_end(write_run(work / "run.json", tiny_setup, default_config, work / "out"))
    return work / "out"


def assert_same_adapters(a: Path, b: Path, steps=(2, 4, 6)) -> None:
    for step in steps:
        first, second = adapter(a, step), adapter(b, step)
        assert first.keys() == second.keys()
        for key in first:
            assert torch.equal(first[key], second[key]), f"step {step}: {key} differs"


def test_uninterrupted_run_leaves_checkpoints_metrics_and_traces(uninterrupted):
    import pandas as pd

    metrics = pd.read_parquet(uninterrupted / "train_metrics.parquet")
    assert list(metrics["step"]) == [1, 2, 3, 4, 5, 6]
    for column in ("loss", "r_mean", "gate_mean", "coef_max", "horizon_mean", "tokens_per_second"):
        assert metrics[column].notna().all(), column
    traces = pd.read_parquet(uninterrupted / "token_traces.parquet")
    assert set(traces["step"]) == {1, 2, 4, 6}
    assert {"r", "teacher_entropy", "gate", "coefficient", "token_id"} <= set(traces.columns)
    assert (traces["coefficient"] >= 1.0 - 1e-6).all()
    assert not (uninterrupted / ".resume").exists()  # training states are removed at the end


def test_kill_9_then_rerun_gives_the_uninterrupted_adapter(
    uninterrupted, tmp_path, tiny_setup, default_config
):
    """Tracked by every tracker, which changes no adapter; each holds every step once, the
    values of train_metrics.parquet, in one run (issue: tracking resumes with the job)."""
    import pandas as pd

    settings = TrackingSettings.from_config(
        {"report_to": ["tensorboard", "wandb", "mlflow", "trackio"]}
    )
    tracked = TrackedRun(settings, str(tmp_path / "tracking"), "tiny", "dash", "tiny", 3)
    run = write_run(tmp_path / "run.json", tiny_setup, default_config, tmp_path / "out",
                    tracked=tracked)  # fmt: skip
    rc = start_and_interrupt(run, tmp_path / "out", 2, lambda p: p.send_signal(signal.SIGKILL))
    assert rc == -signal.SIGKILL
    assert not (tmp_path / "out" / "checkpoint-6").exists()
    done = run_to_end(run)
    # The log says what the resume reused: the state's folder and step, the files it verified.
    [resumed] = [line for line in done.stdout.splitlines() if "resuming dash seed 3" in line]
    assert re.fullmatch(
        rf"\[train\] resuming dash seed 3 after step (\d+) from "
        rf"{re.escape(str(tmp_path / 'out' / '.resume'))}/step-0*\1 "
        r"\(5 files verified by sha256; \1 metrics rows kept\)",
        resumed,
    ), resumed
    assert_same_adapters(uninterrupted, tmp_path / "out")
    # The kill came as soon as the state of step 2 existed: no step's records may be lost.
    assert list(pd.read_parquet(tmp_path / "out" / "train_metrics.parquet")["step"]) == [
        *range(1, 7)
    ]
    assert set(pd.read_parquet(tmp_path / "out" / "token_traces.parquet")["step"]) == {1, 2, 4, 6}
    assert_tracked_once(tracked, pd.read_parquet(tmp_path / "out" / "train_metrics.parquet"))


def assert_tracked_once(tracked: TrackedRun, metrics) -> None:
    """Every tracker holds each column of ``metrics`` at each step once, with its value (the
    timing columns aside: a repeated step is timed anew), but ``tracker_failures``, which counts
    the failures of that sending."""
    folder = Path(tracked.directory)
    held = {
        "tensorboard": tensorboard_scalars(folder / "tensorboard" / "dashrepro" / tracked.name),
        "wandb": wandb_scalars(folder / "wandb"),
        "mlflow": mlflow_scalars(folder / "mlruns", "dashrepro", tracked.run_id),
        "trackio": trackio_scalars(folder / "trackio", "dashrepro", tracked.name),
    }
    assert (metrics["tracker_failures"] == 0).all()
    timed = {"tokens_per_second", *(c for c in metrics.columns if c.startswith("seconds_"))}
    for name, scalars in held.items():
        for column in metrics.columns.drop("tracker_failures"):
            points = scalars[f"train/{column}"]
            assert [step for step, _ in points] == list(metrics["step"]), (name, column)
            if column not in timed:
                assert [v for _, v in points] == pytest.approx(
                    list(metrics[column].astype(float)), rel=1e-6, nan_ok=True
                ), (name, column)


def test_a_reason_first_run_resumes_to_the_same_adapters_and_teacher_contexts(
    tmp_path, tiny_setup, default_config
):
    import pandas as pd

    protocol = {
        **default_config["protocol"], "teacher_context": "reason_first", "analysis_max_tokens": 4
    }  # fmt: skip
    whole = write_run(tmp_path / "whole.json", tiny_setup, default_config, tmp_path / "whole",
                      protocol=protocol)  # fmt: skip
    run_to_end(whole)
    run = write_run(tmp_path / "run.json", tiny_setup, default_config, tmp_path / "out",
                    protocol=protocol)  # fmt: skip
    rc = start_and_interrupt(run, tmp_path / "out", 2, lambda p: p.send_signal(signal.SIGKILL))
    assert rc == -signal.SIGKILL
    run_to_end(run)
    assert_same_adapters(tmp_path / "whole", tmp_path / "out")
    contexts = pd.read_parquet(tmp_path / "whole" / "teacher_contexts.parquet")
    assert set(contexts["step"]) == {1, 2, 4, 6} and contexts["analysis"].notna().all()
    pd.testing.assert_frame_equal(
        contexts, pd.read_parquet(tmp_path / "out" / "teacher_contexts.parquet")
    )


@pytest.mark.parametrize("notice", [signal.SIGTERM, signal.SIGUSR1])
def test_preemption_signal_saves_a_state_and_exits_for_a_retry(
    uninterrupted, tmp_path, tiny_setup, default_config, notice
):
    """SIGTERM is what SLURM sends every process on preemption and at the time limit."""
    run = write_run(tmp_path / "run.json", tiny_setup, default_config, tmp_path / "out")
    rc = start_and_interrupt(run, tmp_path / "out", 2, lambda p: p.send_signal(notice))
    assert rc == PREEMPTED_EXIT_CODE
    states = sorted(p.name for p in (tmp_path / "out" / ".resume").glob("step-*"))
    assert states and states[-1] >= "step-000002"
    run_to_end(run)
    assert_same_adapters(uninterrupted, tmp_path / "out")


def test_resume_with_a_changed_config_discards_the_state(tmp_path, tiny_setup, default_config):
    run = write_run(tmp_path / "run.json", tiny_setup, default_config, tmp_path / "out")
    start_and_interrupt(run, tmp_path / "out", 2, lambda p: p.send_signal(signal.SIGKILL))
    changed = write_run(
        tmp_path / "run.json", tiny_setup, default_config, tmp_path / "out", lr=1e-3
    )
    done = run_to_end(changed)
    log = done.stdout + done.stderr
    assert "discarding the training states" in log and "train.lr" in log
    assert "resuming" not in log
    fresh = write_run(
        tmp_path / "fresh.json", tiny_setup, default_config, tmp_path / "fresh", lr=1e-3
    )
    run_to_end(fresh)
    assert_same_adapters(tmp_path / "fresh", tmp_path / "out")


def test_resume_after_the_training_set_changed_discards_the_state(
    uninterrupted, tmp_path, tiny_setup, default_config
):
    """The training set is an input the config does not show: a state made from another one
    must not be resumed (the job reruns because its input changed; the kept state stays)."""
    import shutil

    import pandas as pd

    folder, data, tokenizer = tiny_setup
    own_data = shutil.copy(data, tmp_path / "train.parquet")
    setup = (folder, own_data, tokenizer)
    run = write_run(tmp_path / "run.json", setup, default_config, tmp_path / "out")
    start_and_interrupt(run, tmp_path / "out", 2, lambda p: p.send_signal(signal.SIGKILL))
    frame = pd.read_parquet(own_data)
    frame.loc[0, "reference_solution"] = frame.loc[0, "reference_solution"] + " "
    frame.to_parquet(own_data)
    done = run_to_end(run)
    log = done.stdout + done.stderr
    assert "discarding the training states" in log and "inputs.train_data" in log
    assert "resuming" not in log


def test_two_gloo_processes_equal_one_process_with_accumulation(
    tmp_path, tiny_setup, default_config
):
    one = write_run(
        tmp_path / "one.json", tiny_setup, default_config, tmp_path / "one",
        steps=2, checkpoint_every=2, micro_batch_size=2, grad_accumulation=2,
    )  # fmt: skip
    two = write_run(
        tmp_path / "two.json", tiny_setup, default_config, tmp_path / "two",
        steps=2, checkpoint_every=2, micro_batch_size=2, grad_accumulation=1,
    )  # fmt: skip
    run_to_end(one)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
        "--master_port", "29517", "-m", "dashrepro.training.trainer", "--spec", str(two),
    ]  # fmt: skip
    done = subprocess.run(torchrun, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    first, second = adapter(tmp_path / "one", 2), adapter(tmp_path / "two", 2)
    moved = 0
    for key in first:
        # Same examples, rollouts and dropout masks; only the order of the gradient sum differs
        # (all-reduce mean vs accumulated halves).
        torch.testing.assert_close(first[key], second[key], rtol=1e-5, atol=1e-7)
        moved += int("lora_B" in key and bool(first[key].abs().sum() > 0))
    assert moved > 0  # the adapters trained (B starts at zero)


def test_a_state_on_a_time_budget_lets_a_kill_between_checkpoints_resume(
    tmp_path, tiny_setup, default_config
):
    """With `state_every_minutes`, a state exists after steps that are no checkpoint: a run
    killed there resumes from it and ends with the adapters of an uninterrupted run."""
    budget = {"steps": 4, "checkpoint_every": 4, "state_every_minutes": 1e-6}
    whole = write_run(tmp_path / "whole.json", tiny_setup, default_config, tmp_path / "whole",
                      **budget)  # fmt: skip
    run_to_end(whole)
    run = write_run(tmp_path / "run.json", tiny_setup, default_config, tmp_path / "out", **budget)
    rc = start_and_interrupt(run, tmp_path / "out", 2, lambda p: p.send_signal(signal.SIGKILL))
    assert rc == -signal.SIGKILL
    done = run_to_end(run)
    assert "resuming dash seed 3 after step" in done.stdout + done.stderr
    assert_same_adapters(tmp_path / "whole", tmp_path / "out", steps=(4,))
