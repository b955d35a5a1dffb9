"""Tests of dashrepro.training.checkpointer: the PEFT export of a state, and the Checkpointer of
a toy LoRA run's TrainingState (no training): writing, checkpointing, restoring, discarding
damaged and stale states, and DeepSpeed's engine folders."""

import hashlib
from pathlib import Path

import pandas as pd
import pytest
import torch
from training_helpers import (
    RUN_CONFIG,
    FakeAccelerator,
    adapter_tensors,
    deepspeed_checkpointer,
    delete,
    flip_one_bit,
    make_run,
    truncate,
    write_deepspeed_states,
)

from dashrepro.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from dashrepro.io import read_parquet
from dashrepro.layout import TEACHER_CONTEXTS, TOKEN_TRACES, TRAIN_METRICS
from dashrepro.training import state_choice, state_integrity
from dashrepro.training.checkpointer import (
    DEEPSPEED_FILES,
    Checkpointer,
    export_adapter,
)
from dashrepro.training.run_state import TrainingState
from dashrepro.training.state_integrity import (
    OPTIMIZER_FILE,
    SCHEDULER_FILE,
    read_state_record,
    state_dir,
)


class DeepSpeedAccelerator(FakeAccelerator):
    """Records save_state calls and writes a stand-in engine partition file."""

    def __init__(self, main: bool = True):
        super().__init__(main)
        self.saved = []

    def save_state(self, folder, **kwargs):
        self.saved.append((folder, kwargs))
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "partition.pt").write_bytes(b"engine")


class Run:
    """A toy run's state and its checkpointer, as the recipe holds them."""

    def __init__(self, out_dir: Path, main: bool = True, deepspeed: bool = False, lora_seed=1):
        self.lines = []
        accelerator = DeepSpeedAccelerator(main) if deepspeed else FakeAccelerator(main)
        self.state = TrainingState(*make_run(lora_seed=lora_seed))
        # 2 micro-batches of 3 rollouts a step
        self.checkpointer = Checkpointer(
            out_dir, accelerator, RUN_CONFIG, seed=3, rollouts_per_step=6, name="opsd seed 3",
            deepspeed=deepspeed, log=self.lines.append,
        )  # fmt: skip
        self.accelerator, self.resume_root = accelerator, self.checkpointer.root

    def record_step(self, step: int) -> None:
        """The records a step adds: a metrics row, a trace row and a context row."""
        records = self.state.records
        records.rows.append({"step": step, "loss": float(step)})
        records.traces.append(pd.DataFrame({"step": [step], "r": [0.5 * step]}))
        records.contexts.append(pd.DataFrame({"step": [step], "context": [f"c{step}"]}))

    def write_state(self, step: int) -> None:
        self.state.step = step
        self.checkpointer.write_state(self.state)

    def save(self, step: int, export: bool = False) -> None:
        self.state.step = step
        self.checkpointer.save(self.state, export=export)


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
    run.write_state(2)
    record = read_state_record(state_dir(run.resume_root, 2))
    assert record["step"] == 2
    assert record["data_state"] == {"rollouts_consumed": 12}  # 2 steps x 2 micro x 3 rollouts
    assert record["extra"] == {}  # no DeepSpeed folder to record
    assert list(read_parquet(run.resume_root / TRAIN_METRICS)["step"]) == [1, 2]
    assert list(read_parquet(run.resume_root / TOKEN_TRACES)["r"]) == [0.5, 1.0]
    assert list(read_parquet(run.resume_root / TEACHER_CONTEXTS)["context"]) == ["c1", "c2"]


def test_a_run_without_traces_writes_no_trace_file(tmp_path):
    run = Run(tmp_path)
    run.state.records.rows.append({"step": 1, "loss": 1.0})
    run.write_state(1)
    assert not (run.resume_root / TOKEN_TRACES).exists()
    assert read_parquet(run.resume_root / TEACHER_CONTEXTS).empty


def test_states_older_than_the_two_newest_lose_their_optimizer_and_scheduler(tmp_path):
    run = Run(tmp_path)
    for step in (1, 2, 3):
        run.write_state(step)
    for step, resumable in ((1, False), (2, True), (3, True)):
        folder = state_dir(run.resume_root, step)
        assert (folder / OPTIMIZER_FILE).exists() == resumable, step
        assert (folder / SCHEDULER_FILE).exists() == resumable, step
        assert (folder / ADAPTER_WEIGHTS).exists(), step  # the adapter always stays


def test_a_checkpoint_step_exports_its_peft_folder(tmp_path):
    run = Run(tmp_path)
    run.save(1)  # not a checkpoint step: a state only
    run.save(2, export=True)
    assert state_dir(run.resume_root, 1).is_dir()
    assert not (tmp_path / "checkpoint-1").exists()
    checkpoint = tmp_path / "checkpoint-2"
    assert sorted(p.name for p in checkpoint.iterdir()) == [ADAPTER_CONFIG, ADAPTER_WEIGHTS]
    state = state_dir(run.resume_root, 2)
    assert (checkpoint / ADAPTER_WEIGHTS).read_bytes() == (state / ADAPTER_WEIGHTS).read_bytes()


def test_only_the_main_process_writes_and_every_process_waits(tmp_path):
    run = Run(tmp_path, main=False)
    run.save(2, export=True)
    assert not run.resume_root.exists() and not (tmp_path / "checkpoint-2").exists()
    assert run.accelerator.barriers == 2  # before the write and after it


def test_a_deepspeed_state_records_its_engine_folder_and_only_recent_folders_stay(tmp_path):
    run = Run(tmp_path, deepspeed=True)
    assert run.checkpointer.deepspeed_state(12) == run.resume_root / "deepspeed-step-000012"
    stray = run.checkpointer.deepspeed_state(0)
    stray.mkdir(parents=True)  # left by a kill between the two saves of an older step
    for step in (1, 2, 3):
        run.save(step)
    folder, kwargs = run.accelerator.saved[0]
    assert folder == str(run.checkpointer.deepspeed_state(1))
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
    run.save(1)
    folder = state_dir(run.resume_root, 1)
    assert run.checkpointer.deepspeed_state_problems(1, folder) == []
    engine = run.checkpointer.deepspeed_state(1)
    (engine / "partition.pt").unlink()
    assert run.checkpointer.deepspeed_state_problems(1, folder) == [
        f"{engine / 'partition.pt'}: missing"
    ]
    engine.rmdir()
    assert run.checkpointer.deepspeed_state_problems(1, folder) == [
        f"{engine}: missing (the DeepSpeed engine's state of step-000001)"
    ]


def test_the_newest_state_is_resumed_with_its_records_cut_to_its_step(tmp_path):
    run = Run(tmp_path)
    for step in (1, 2):
        run.record_step(step)
    run.write_state(2)
    saved = adapter_tensors(run.state.policy)
    with torch.no_grad():  # the adapter moves on; the state keeps step 2's
        for p in run.state.policy.parameters():
            if p.requires_grad:
                p.add_(1.0)
    for step in (3, 4):
        run.record_step(step)
    run.write_state(4)
    # Step 4's state is damaged: the resume falls back to step 2's and removes step 4's.
    (state_dir(run.resume_root, 4) / OPTIMIZER_FILE).write_bytes(b"")
    fresh = Run(tmp_path, lora_seed=2)
    latest = fresh.checkpointer.restore(fresh.state)
    assert latest == state_dir(run.resume_root, 2)
    assert not state_dir(run.resume_root, 4).exists()
    assert fresh.lines[0].startswith(f"[train] discarding damaged training state {tmp_path}")
    assert fresh.state.step == 2
    records = fresh.state.records
    assert [row["step"] for row in records.rows] == [1, 2]  # the records went up to step 4
    assert list(pd.concat(records.traces)["step"]) == [1, 2]
    assert list(pd.concat(records.contexts)["context"]) == ["c1", "c2"]
    resumed = adapter_tensors(fresh.state.policy)
    assert all(torch.allclose(resumed[k], saved[k], atol=0.0, rtol=0.0) for k in saved)
    assert fresh.lines[-1] == f"[train] resuming opsd seed 3 after step 2 from {latest}"


def test_no_kept_state_means_no_resume_point_and_nothing_logged(tmp_path):
    run = Run(tmp_path)
    assert run.checkpointer.restore(run.state) is None and run.state.step == 0
    assert run.lines == [] and run.accelerator.barriers == 0


def test_states_of_another_config_are_discarded_by_the_main_process(tmp_path):
    run = Run(tmp_path)
    run.write_state(1)
    latest = state_dir(run.resume_root, 1)
    assert run.checkpointer.discard_if_stale(latest) is False
    assert latest.is_dir() and run.lines == []
    changed = {**RUN_CONFIG, "train": {**RUN_CONFIG["train"], "lr": 1e-3}}
    other = Run(tmp_path, main=False)
    other.checkpointer.run_config = changed
    assert other.checkpointer.discard_if_stale(latest) is True
    assert latest.is_dir()  # not the main process: it only waits
    main = Run(tmp_path)
    main.checkpointer.run_config = changed
    assert main.checkpointer.restore(main.state) is None  # stale: discarded, step 0
    assert not run.resume_root.exists()
    # The differing key is named (its wording is checkpointing.state_config_differences's).
    [line] = main.lines
    assert line.startswith(
        f"[train] discarding the training states in {run.resume_root}: step-000001 was written "
        "under other values: train.lr: "
    )
    assert main.accelerator.barriers == 2


# ------------------------------------------------------------------------------------------------
# DeepSpeed engine folders beside the states
# ------------------------------------------------------------------------------------------------


def test_the_deepspeed_folders_of_the_two_newest_states_are_kept(tmp_path, monkeypatch):
    checkpointer, state = deepspeed_checkpointer(tmp_path, monkeypatch)
    root = checkpointer.root
    root.mkdir()
    (root / "deepspeed-step-000009").mkdir()  # a kill between DeepSpeed's save and the state's
    for step in (1, 2, 3, 4):
        (root / f"deepspeed-step-{step:06d}").mkdir()  # accelerator.save_state comes first
        state.step = step
        checkpointer.write_state(state)
        kept = sorted(p.name for p in root.glob("deepspeed-step-*"))
        assert kept == [f"deepspeed-step-{s:06d}" for s in (step - 1, step) if s >= 1]
    assert state_choice.newest_complete_steps(root) == [3, 4]
    assert all((state_dir(root, s) / "optimizer.pt").is_file() for s in (3, 4))
    assert not any((state_dir(root, s) / "optimizer.pt").exists() for s in (1, 2))


@pytest.mark.parametrize(
    "fault", [flip_one_bit, truncate, delete], ids=["flipped", "truncated", "deleted"]
)
def test_a_damaged_deepspeed_partition_is_named_and_its_state_passed_over(
    tmp_path, monkeypatch, fault
):
    checkpointer = write_deepspeed_states(tmp_path, monkeypatch)
    root = checkpointer.root
    partition = root / "deepspeed-step-000003/pytorch_model/zero_pp_rank_0_optim_states.pt"
    fault(partition)
    checkpointer.lines.clear()
    assert checkpointer.resumable_state() == state_dir(root, 2)
    [line] = checkpointer.lines
    assert line.startswith(
        f"[train] discarding damaged training state {state_dir(root, 3)}: {partition}: "
    )
    assert not (root / "deepspeed-step-000003").exists()
    assert (root / "deepspeed-step-000002").is_dir()


def test_intact_deepspeed_states_verify_and_older_records_are_checked_for_presence(
    tmp_path, monkeypatch
):
    checkpointer = write_deepspeed_states(tmp_path, monkeypatch)
    checkpointer.lines.clear()
    assert checkpointer.resumable_state() == state_dir(checkpointer.root, 3)
    assert checkpointer.lines == []
    # A record without the key (written before DeepSpeed folders were hashed): nothing to compare.
    assert (
        state_integrity.companion_folder_problems(
            state_dir(checkpointer.root, 3), "other", tmp_path
        )
        == []
    )
