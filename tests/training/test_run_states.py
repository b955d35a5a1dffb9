"""Tests of dashrepro.training.run_states: the PEFT export of a state, and TrainingStates mixed
into a stand-in recipe (a toy LoRA run, no training): writing, checkpointing, resuming,
discarding stale states and DeepSpeed's engine folders."""

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from training_helpers import RUN_CONFIG, FakeAccelerator, adapter_tensors, make_run

from dashrepro.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from dashrepro.io import read_parquet
from dashrepro.layout import TEACHER_CONTEXTS, TOKEN_TRACES, TRAIN_METRICS
from dashrepro.training.run_states import (
    DEEPSPEED_FILES,
    RESUME_DIR,
    TrainingStates,
    export_adapter,
)
from dashrepro.training.state_integrity import (
    OPTIMIZER_FILE,
    SCHEDULER_FILE,
    read_state_record,
    state_dir,
)
from dashrepro.training.step_tracking import StepTracking


class DeepSpeedAccelerator(FakeAccelerator):
    """Records save_state calls and writes a stand-in engine partition file."""

    def __init__(self, main: bool = True):
        super().__init__(main)
        self.saved = []

    def save_state(self, folder, **kwargs):
        self.saved.append((folder, kwargs))
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "partition.pt").write_bytes(b"engine")


class Run(TrainingStates):
    """What TrainingStates reads of the recipe it is mixed into."""

    def __init__(self, out_dir: Path, main: bool = True, deepspeed: bool = False, lora_seed=1):
        self.out_dir = out_dir
        self.resume_root = out_dir / RESUME_DIR
        self.deepspeed = deepspeed
        self.accelerator = DeepSpeedAccelerator(main) if deepspeed else FakeAccelerator(main)
        self.policy, self.optimizer_state, self.scheduler = make_run(lora_seed=lora_seed)
        self.seed, self.run_config = 3, RUN_CONFIG
        self.layout = SimpleNamespace(micros_per_step=2, micro=3)
        self.method = SimpleNamespace(name="opsd")
        self.save_at = {2, 4}
        self.rows, self.traces, self.contexts = [], [], []
        self.lines = []
        self.log = self.lines.append
        self.tracking = StepTracking(None, self.resume_root, main)  # no tracker

    def _context_records(self) -> pd.DataFrame:
        frames = [f for f in self.contexts if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["step"])

    def record_step(self, step: int) -> None:
        """The records a step adds: a metrics row, a trace row and a context row."""
        self.rows.append({"step": step, "loss": float(step)})
        self.traces.append(pd.DataFrame({"step": [step], "r": [0.5 * step]}))
        self.contexts.append(pd.DataFrame({"step": [step], "context": [f"c{step}"]}))


def test_export_adapter_copies_the_adapter_files_only(tmp_path):
    state = tmp_path / "step-000002"
    state.mkdir()
    (state / ADAPTER_CONFIG).write_text('{"r": 4}')
    (state / ADAPTER_WEIGHTS).write_bytes(b"weights")
    (state / OPTIMIZER_FILE).write_bytes(b"moments")
    checkpoint = tmp_path / "out" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "stale.txt").write_text("from an earlier run")
    export_adapter(state, checkpoint)
    assert sorted(p.name for p in checkpoint.iterdir()) == [ADAPTER_CONFIG, ADAPTER_WEIGHTS]
    assert (checkpoint / ADAPTER_WEIGHTS).read_bytes() == b"weights"
    assert (checkpoint / ADAPTER_CONFIG).read_text() == '{"r": 4}'


def test_export_adapter_of_an_incomplete_state_leaves_no_checkpoint(tmp_path):
    state = tmp_path / "step-000002"
    state.mkdir()
    (state / ADAPTER_CONFIG).write_text("{}")
    with pytest.raises(FileNotFoundError, match=ADAPTER_WEIGHTS):
        export_adapter(state, tmp_path / "out" / "checkpoint-2")
    assert list((tmp_path / "out").iterdir()) == []  # neither the folder nor its temporary


def test_a_written_state_holds_the_step_its_data_position_and_the_records(tmp_path):
    run = Run(tmp_path)
    run.record_step(1)
    run.record_step(2)
    run._write_state(2)
    record = read_state_record(state_dir(run.resume_root, 2))
    assert record["step"] == 2
    assert record["data_state"] == {"rollouts_consumed": 12}  # 2 steps x 2 micro x 3 rollouts
    assert record["extra"] == {}  # no DeepSpeed folder to record
    assert list(read_parquet(run.resume_root / TRAIN_METRICS)["step"]) == [1, 2]
    assert list(read_parquet(run.resume_root / TOKEN_TRACES)["r"]) == [0.5, 1.0]
    assert list(read_parquet(run.resume_root / TEACHER_CONTEXTS)["context"]) == ["c1", "c2"]


def test_a_run_without_traces_writes_no_trace_file(tmp_path):
    run = Run(tmp_path)
    run.rows.append({"step": 1, "loss": 1.0})
    run._write_state(1)
    assert not (run.resume_root / TOKEN_TRACES).exists()
    assert read_parquet(run.resume_root / TEACHER_CONTEXTS).empty


def test_states_older_than_the_two_newest_lose_their_optimizer_and_scheduler(tmp_path):
    run = Run(tmp_path)
    for step in (1, 2, 3):
        run._write_state(step)
    for step, resumable in ((1, False), (2, True), (3, True)):
        folder = state_dir(run.resume_root, step)
        assert (folder / OPTIMIZER_FILE).exists() == resumable, step
        assert (folder / SCHEDULER_FILE).exists() == resumable, step
        assert (folder / ADAPTER_WEIGHTS).exists(), step  # the adapter always stays


def test_a_checkpoint_step_exports_its_peft_folder(tmp_path):
    run = Run(tmp_path)
    run.save_checkpoint(1)  # not in save_at: a state only
    run.save_checkpoint(2)
    assert state_dir(run.resume_root, 1).is_dir()
    assert not (tmp_path / "checkpoint-1").exists()
    checkpoint = tmp_path / "checkpoint-2"
    assert sorted(p.name for p in checkpoint.iterdir()) == [ADAPTER_CONFIG, ADAPTER_WEIGHTS]
    state = state_dir(run.resume_root, 2)
    assert (checkpoint / ADAPTER_WEIGHTS).read_bytes() == (state / ADAPTER_WEIGHTS).read_bytes()


def test_only_the_main_process_writes_and_every_process_waits(tmp_path):
    run = Run(tmp_path, main=False)
    run.save_checkpoint(2)
    assert not run.resume_root.exists() and not (tmp_path / "checkpoint-2").exists()
    assert run.accelerator.barriers == 2  # before the write and after it


def test_a_deepspeed_state_records_its_engine_folder_and_only_recent_folders_stay(tmp_path):
    run = Run(tmp_path, deepspeed=True)
    assert run._deepspeed_state(12) == run.resume_root / "deepspeed-step-000012"
    stray = run._deepspeed_state(0)
    stray.mkdir(parents=True)  # left by a kill between the two saves of an older step
    for step in (1, 2, 3):
        run.save_checkpoint(step)
    folder, kwargs = run.accelerator.saved[0]
    assert folder == str(run._deepspeed_state(1))
    assert kwargs == {"exclude_frozen_parameters": True}  # the base weights stay out
    assert run.accelerator.barriers == 9  # three per save: the engine's parts, then the state
    extra = read_state_record(state_dir(run.resume_root, 3))["extra"]
    assert extra == {
        DEEPSPEED_FILES: {
            "partition.pt": {"bytes": 6, "sha256": hashlib.sha256(b"engine").hexdigest()}
        }
    }
    # The two newest complete states keep their engine folders; the others are removed.
    kept = sorted(p.name for p in run.resume_root.glob("deepspeed-step-*"))
    assert kept == ["deepspeed-step-000002", "deepspeed-step-000003"]


def test_a_deepspeed_state_without_its_engine_folder_is_named(tmp_path):
    run = Run(tmp_path, deepspeed=True)
    run.save_checkpoint(1)
    folder = state_dir(run.resume_root, 1)
    assert run._deepspeed_state_problems(1, folder) == []
    engine = run._deepspeed_state(1)
    (engine / "partition.pt").unlink()
    assert run._deepspeed_state_problems(1, folder) == [f"{engine / 'partition.pt'}: missing"]
    engine.rmdir()
    assert run._deepspeed_state_problems(1, folder) == [
        f"{engine}: missing (the DeepSpeed engine's state of step-000001)"
    ]


def test_the_newest_state_is_resumed_with_its_records_cut_to_its_step(tmp_path):
    run = Run(tmp_path)
    for step in (1, 2):
        run.record_step(step)
    run._write_state(2)
    saved = adapter_tensors(run.policy)
    with torch.no_grad():  # the adapter moves on; the state keeps step 2's
        for p in run.policy.parameters():
            if p.requires_grad:
                p.add_(1.0)
    for step in (3, 4):
        run.record_step(step)
    run._write_state(4)
    # Step 4's state is damaged: the resume falls back to step 2's and removes step 4's.
    (state_dir(run.resume_root, 4) / OPTIMIZER_FILE).write_bytes(b"")
    fresh = Run(tmp_path, lora_seed=2)
    latest = fresh._resumable_state()
    assert latest == state_dir(run.resume_root, 2)
    assert not state_dir(run.resume_root, 4).exists()
    assert fresh.lines[0].startswith(f"[train] discarding damaged training state {tmp_path}")
    fresh._resume(latest)
    assert fresh.step == 2
    assert [row["step"] for row in fresh.rows] == [1, 2]  # the records went up to step 4
    assert list(pd.concat(fresh.traces)["step"]) == [1, 2]
    assert list(pd.concat(fresh.contexts)["context"]) == ["c1", "c2"]
    resumed = adapter_tensors(fresh.policy)
    assert all(torch.allclose(resumed[k], saved[k], atol=0.0, rtol=0.0) for k in saved)
    assert fresh.lines[-1] == f"[train] resuming opsd seed 3 after step 2 from {latest}"


def test_no_kept_state_means_no_resume_point_and_nothing_logged(tmp_path):
    run = Run(tmp_path)
    assert run._resumable_state() is None
    assert run.lines == [] and run.accelerator.barriers == 0


def test_states_of_another_config_are_discarded_by_the_main_process(tmp_path):
    run = Run(tmp_path)
    run._write_state(1)
    latest = state_dir(run.resume_root, 1)
    assert run._discard_if_stale(latest) is False
    assert latest.is_dir() and run.lines == []
    changed = {**RUN_CONFIG, "train": {**RUN_CONFIG["train"], "lr": 1e-3}}
    other = Run(tmp_path, main=False)
    other.run_config = changed
    assert other._discard_if_stale(latest) is True
    assert latest.is_dir()  # not the main process: it only waits
    main = Run(tmp_path)
    main.run_config = changed
    assert main._discard_if_stale(latest) is True
    assert not run.resume_root.exists()
    # The differing key is named (its wording is checkpointing.state_config_differences's).
    [line] = main.lines
    assert line.startswith(
        f"[train] discarding the training states in {run.resume_root}: step-000001 was written "
        "under other values: train.lr: "
    )
    assert main.accelerator.barriers == 2
