"""Tests of dashrepro.training.resume._checkpointer: the PEFT export of a state, and the
Checkpointer of a toy LoRA run's TrainingState (no training): writing, checkpointing, restoring
(each file hashed once, the config checked once, the resume named in the log), discarding damaged
and stale states, DeepSpeed's engine folders, and the trainer resuming past a damaged state."""

import hashlib
import signal
from pathlib import Path

import pandas as pd
import pytest
import torch

from dashrepro.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from dashrepro.io import read_parquet
from dashrepro.layout import TEACHER_CONTEXTS, TOKEN_TRACES, TRAIN_METRICS
from dashrepro.training.resume import Checkpointer, TrainingState, _folder
from dashrepro.training.resume._checkpointer import DEEPSPEED_FILES, export_adapter
from dashrepro.training.resume._folder import (
    OPTIMIZER_FILE,
    SCHEDULER_FILE,
    read_record,
    state_dir,
)
from dashrepro.training.resume._retention import resume_points

from .resume_helpers import (
    RUN_CONFIG,
    SAVED,
    FakeAccelerator,
    adapter_tensors,
    bare_checkpointer,
    deepspeed_checkpointer,
    delete,
    flip_one_bit,
    make_run,
    truncate,
    write_deepspeed_states,
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
        self.checkpointer = Checkpointer(
            out_dir, accelerator, RUN_CONFIG, name="opsd seed 3", deepspeed=deepspeed,
            log=self.lines.append,
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


def test_a_written_state_holds_the_step_and_the_records(tmp_path):
    run = Run(tmp_path)
    run.record_step(1)
    run.record_step(2)
    run.write_state(2)
    record = read_record(state_dir(run.resume_root, 2))
    assert record["step"] == 2
    assert "data_state" not in record  # the data position is a function of (seed, step)
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
    extra = read_record(state_dir(run.resume_root, 3))["extra"]
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
    check = _folder.check_state_folder(state_dir(run.resume_root, 1))
    assert run.checkpointer.deepspeed_state_problems(1, check) == []
    engine = run.checkpointer.deepspeed_state(1)
    (engine / "partition.pt").unlink()
    assert run.checkpointer.deepspeed_state_problems(1, check) == [
        f"{engine / 'partition.pt'}: missing"
    ]
    engine.rmdir()
    assert run.checkpointer.deepspeed_state_problems(1, check) == [
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
    assert fresh.lines[-1] == (
        f"[train] resuming opsd seed 3 after step 2 from {latest} "
        "(5 files verified by sha256; 2 metrics rows kept)"
    )


def test_no_kept_state_means_no_resume_point_and_nothing_logged(tmp_path):
    run = Run(tmp_path)
    assert run.checkpointer.restore(run.state) is None and run.state.step == 0
    assert run.lines == [] and run.accelerator.barriers == 0


def test_states_of_another_config_are_discarded_by_the_main_process(tmp_path):
    run = Run(tmp_path)
    run.write_state(1)
    latest = state_dir(run.resume_root, 1)
    check = _folder.check_state_folder(latest)
    assert run.checkpointer.discard_if_stale(check) is False
    assert latest.is_dir() and run.lines == []
    changed = {**RUN_CONFIG, "train": {**RUN_CONFIG["train"], "lr": 1e-3}}
    other = Run(tmp_path, main=False)
    other.checkpointer.run_config = changed
    assert other.checkpointer.discard_if_stale(check) is True
    assert latest.is_dir()  # not the main process: it only waits
    main = Run(tmp_path)
    main.checkpointer.run_config = changed
    assert main.checkpointer.restore(main.state) is None  # stale: discarded, step 0
    assert not run.resume_root.exists()
    # The differing key is named (its wording is _folder.config_differences's).
    [line] = main.lines
    assert line == (
        f"[train] discarding the training states in {run.resume_root}: step-000001 was written "
        "under other values: train.lr: 0.002 (checkpoint) != 0.001 (now)"
    )
    assert main.accelerator.barriers == 2


def test_the_end_of_a_run_removes_the_states_and_what_killed_writes_left(tmp_path):
    run = Run(tmp_path)
    run.save(2, export=True)
    # A kill during an earlier attempt's export of checkpoint-2 and its write of the metrics.
    (tmp_path / ".checkpoint-2.k2j3h4.tmp").mkdir()
    (tmp_path / ".checkpoint-2.k2j3h4.tmp" / ADAPTER_WEIGHTS).write_bytes(b"half")
    (tmp_path / f".{TRAIN_METRICS}.a1b2c3.tmp").write_bytes(b"half")
    (tmp_path / ".notes.tmp").write_text("not the run's")
    run.checkpointer.remove_states()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".notes.tmp", "checkpoint-2"]


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
    assert resume_points(root) == [3, 4]
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
    assert checkpointer.resumable_state().folder == state_dir(root, 2)
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
    assert checkpointer.resumable_state().folder == state_dir(checkpointer.root, 3)
    assert checkpointer.lines == []
    # A record without the key (written before DeepSpeed folders were hashed): presence only.
    record = read_record(state_dir(checkpointer.root, 3))
    del record["extra"][DEEPSPEED_FILES]
    check = _folder.StateCheck(state_dir(checkpointer.root, 3), record, ())
    assert checkpointer.deepspeed_state_problems(3, check) == []


# ------------------------------------------------------------------------------------------------
# Resuming: each file hashed once, the config checked once, the fallback, the processes
# ------------------------------------------------------------------------------------------------


def test_a_resume_hashes_each_file_once_and_checks_the_config_once(tmp_path, monkeypatch):
    run = Run(tmp_path)
    for step in (1, 2):
        run.record_step(step)
        run.write_state(step)
    hashed, fingerprints = [], []
    real_hash, real_fingerprint = _folder.sha256_file, _folder.config_fingerprint
    monkeypatch.setattr(_folder, "sha256_file", lambda p: hashed.append(p) or real_hash(p))
    monkeypatch.setattr(
        _folder, "config_fingerprint", lambda c: fingerprints.append(c) or real_fingerprint(c)
    )
    fresh = Run(tmp_path, lora_seed=2)
    assert fresh.checkpointer.restore(fresh.state) == state_dir(run.resume_root, 2)
    assert sorted(p.name for p in hashed) == sorted(
        read_record(state_dir(run.resume_root, 2))["files"]
    )  # the newest state's five files, once each; the older one is never read
    assert len(fingerprints) == 1


@pytest.mark.parametrize("deepspeed", [False, True], ids=["ddp", "deepspeed"])
def test_the_checkpointer_falls_back_to_the_previous_state_and_logs_it(states, deepspeed):
    root, _ = states
    if deepspeed:
        for step in SAVED:
            (root / f"deepspeed-step-{step:06d}").mkdir()
    newest = state_dir(root, 3)
    truncate(newest / "optimizer.pt")
    checkpointer = bare_checkpointer(root, deepspeed)
    assert checkpointer.resumable_state().folder == state_dir(root, 2)
    [line] = checkpointer.lines
    assert line.startswith(
        f"[train] discarding damaged training state {newest}: {newest / 'optimizer.pt'}: "
    )
    assert " bytes, its record says " in line
    assert not newest.exists()
    assert checkpointer.accelerator.barriers == 2
    assert (root / "deepspeed-step-000003").exists() is False
    assert (root / "deepspeed-step-000002").exists() is deepspeed


def test_only_the_main_process_removes_a_damaged_state(states):
    root, _ = states
    truncate(state_dir(root, 3) / "optimizer.pt")
    checkpointer = bare_checkpointer(root, deepspeed=False, main=False)
    assert checkpointer.resumable_state().folder == state_dir(root, 2)
    assert state_dir(root, 3).exists()  # rank 0 removes it
    assert checkpointer.accelerator.barriers == 2
    assert len(checkpointer.lines) == 1


def test_a_deepspeed_state_without_its_engine_folder_is_passed_over(states):
    root, _ = states
    (root / "deepspeed-step-000002").mkdir()  # the one of step 3 is missing
    checkpointer = bare_checkpointer(root, deepspeed=True)
    assert checkpointer.resumable_state().folder == state_dir(root, 2)
    assert checkpointer.lines == [
        f"[train] discarding damaged training state {state_dir(root, 3)}: "
        f"{root / 'deepspeed-step-000003'}: missing (the DeepSpeed engine's state of step-000003)"
    ]
    checkpointer = bare_checkpointer(root, deepspeed=True)
    (root / "deepspeed-step-000002").rmdir()
    assert checkpointer.resumable_state() is None
    assert (
        checkpointer.lines[-1]
        == f"[train] no kept training state under {root} verifies; starting at step 0"
    )


def test_a_file_added_to_a_deepspeed_folder_is_named(tmp_path, monkeypatch):
    checkpointer = write_deepspeed_states(tmp_path, monkeypatch)
    stray = checkpointer.root / "deepspeed-step-000003/pytorch_model/extra.pt"
    stray.write_bytes(b"x")
    checkpointer.lines.clear()
    assert checkpointer.resumable_state().folder == state_dir(checkpointer.root, 2)
    assert checkpointer.lines == [
        f"[train] discarding damaged training state {state_dir(checkpointer.root, 3)}: "
        f"{stray}: not in the state's record"
    ]


def test_a_deepspeed_resume_names_the_engine_files_it_verified(tmp_path, monkeypatch):
    checkpointer = write_deepspeed_states(tmp_path, monkeypatch)
    loaded = []
    checkpointer.accelerator.load_state = lambda folder, **kw: loaded.append((folder, kw))
    checkpointer.lines.clear()
    state = TrainingState(*make_run(lora_seed=2))
    assert checkpointer.restore(state) == state_dir(checkpointer.root, 3)
    assert loaded == [(str(checkpointer.deepspeed_state(3)), {"load_module_strict": False})]
    assert checkpointer.lines == [
        f"[train] resuming opsd seed 3 after step 3 from {state_dir(checkpointer.root, 3)} "
        "(5 files verified by sha256, and 1 of its DeepSpeed folder; 0 metrics rows kept)"
    ]


# ------------------------------------------------------------------------------------------------
# End to end: the trainer, killed, its newest state damaged, rerun
# ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_trainer_resumes_from_the_state_before_a_damaged_one(
    tmp_path, tiny_setup, default_config
):
    from test_trainer_resume import (
        assert_same_adapters,
        run_to_end,
        start_and_interrupt,
        write_run,
    )

    budget = {"steps": 4, "checkpoint_every": 2, "state_every_minutes": 1e-6}  # a state a step
    whole = tmp_path / "whole"
    run_to_end(write_run(tmp_path / "whole.json", tiny_setup, default_config, whole, **budget))
    out = tmp_path / "out"
    run = write_run(tmp_path / "run.json", tiny_setup, default_config, out, **budget)
    rc = start_and_interrupt(run, out, 2, lambda p: p.send_signal(signal.SIGKILL))
    assert rc == -signal.SIGKILL
    newest = state_dir(out / ".resume", resume_points(out / ".resume")[-1])
    previous = int(newest.name.split("-")[1]) - 1
    assert previous >= 1 and (state_dir(out / ".resume", previous) / "optimizer.pt").is_file()
    flip_one_bit(newest / "adapter_model.safetensors")
    done = run_to_end(run)
    log = done.stdout + done.stderr
    assert f"discarding damaged training state {newest}: " in log
    assert (
        f"resuming dash seed 3 after step {previous} from {state_dir(out / '.resume', previous)} "
        f"(5 files verified by sha256; {previous} metrics rows kept)"
    ) in log
    assert_same_adapters(whole, out, steps=(2, 4))
