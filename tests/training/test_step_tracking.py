"""``training.step_tracking``: each step reaches the trackers once, across a resume that repeats
steps an earlier job already sent (TensorBoard live, W&B at states); only the main process
sends."""

from __future__ import annotations

from tracking_readers import tensorboard_scalars, wandb_scalars

from dashrepro.settings import TrackingSettings
from dashrepro.tracking import TrackedRun
from dashrepro.training.step_tracking import SENT_STEP_FILE, StepTracking


def tracked(directory, report_to=("tensorboard",)) -> TrackedRun:
    settings = TrackingSettings.from_config({"report_to": list(report_to)})
    return TrackedRun(settings, str(directory), "tiny", "opsd", "tiny", 0)


def rows(steps):
    return [
        {"step": s, "loss": float(s), "tokens_per_second": 10.0 * s, "tracker_failures": 0}
        for s in steps
    ]


def test_a_resumed_job_sends_only_the_steps_no_job_sent(tmp_path):
    run, resume = tracked(tmp_path), tmp_path / ".resume"
    first = StepTracking(run, resume, main_process=True)
    first.start({"seed": 0}, resumed_step=0, log=print)
    assert [first.send(row) for row in rows([1, 2, 3])] == [0, 0, 0]
    assert (resume / SENT_STEP_FILE).exists()
    # Killed after step 3 with the last state at step 2: the resumed job redoes step 3.
    second = StepTracking(run, resume, main_process=True)
    second.start({"seed": 0}, resumed_step=2, log=print)
    for row in rows([3, 4]):
        second.send(row)
    second.finish(rows([4]))
    board = tensorboard_scalars(tmp_path / "tensorboard" / "dashrepro" / run.name)
    assert board["train/loss"] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
    assert [s for s, _ in board["train/tokens_per_second"]] == [1, 2, 3, 4]


def test_other_processes_and_untracked_runs_send_nothing(tmp_path):
    for tracking in (
        StepTracking(tracked(tmp_path), tmp_path / ".resume", main_process=False),
        StepTracking(None, tmp_path / ".resume", main_process=True),
    ):
        tracking.start({}, resumed_step=0, log=print)
        assert tracking.send(rows([1])[0]) == 0
        tracking.finish(rows([1]))
    assert not (tmp_path / "tensorboard").exists()
    assert not (tmp_path / ".resume").exists()


def test_w_and_b_gets_the_steps_of_each_state_and_a_resume_sends_the_lost_ones(tmp_path):
    """Steps kept for W&B and not yet sent when the job dies are lost with it; the resumed
    job (from the state of step 2) sends steps 3 and 4, and W&B holds 1-4 once each."""
    run, resume = tracked(tmp_path, ["tensorboard", "wandb"]), tmp_path / ".resume"
    first = StepTracking(run, resume, main_process=True)
    first.start({"seed": 0}, resumed_step=0, log=print)
    done = rows([1, 2, 3])
    for row in done[:2]:
        first.send(row)
    first.flush(done[:2])  # the state of step 2
    first.send(done[2])  # then killed: step 3 is in TensorBoard, not in W&B
    second = StepTracking(run, resume, main_process=True)
    second.start({"seed": 0}, resumed_step=2, log=print)
    again = rows([3, 4])
    for row in again:
        second.send(row)
    second.finish(again)
    assert wandb_scalars(tmp_path / "wandb")["train/loss"] == [(s, float(s)) for s in range(1, 5)]
    board = tensorboard_scalars(tmp_path / "tensorboard" / "dashrepro" / run.name)
    assert board["train/loss"] == [(s, float(s)) for s in range(1, 5)]


def test_a_tracker_that_cannot_start_is_counted_in_the_first_row(tmp_path):
    """TensorBoard's folder is blocked by a file: one warning, 1 in step 1's count, and the
    job's steps go on being recorded."""
    (tmp_path / "tensorboard").write_text("not a folder")
    warnings = []
    tracking = StepTracking(tracked(tmp_path), tmp_path / ".resume", main_process=True)
    tracking.start({"seed": 0}, resumed_step=0, log=warnings.append)
    assert [tracking.send(row) for row in rows([1, 2])] == [1, 0]
    tracking.finish(rows([2]))
    assert len(warnings) == 1 and "tensorboard start failed" in warnings[0]
