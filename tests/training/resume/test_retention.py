"""Tests of dashrepro.training.resume._retention, a run's kept states: which one a resume takes
(the newest that checks out; a damaged newer one is discarded with a line naming its file), and
the one retention policy (the two newest resume points whole, with their DeepSpeed folders)."""

from __future__ import annotations

import json
import re

import pytest

from dashrepro.training.resume._folder import STATE_FILE, state_dir
from dashrepro.training.resume._retention import (
    choose,
    engine_dir,
    prune,
    resume_points,
    step_folders,
)

from .resume_helpers import (
    FAULTS,
    assert_same,
    flip_one_bit,
    make_run,
    resume_and_finish,
    save,
    truncate,
)


def resumable_state(root, log, extra_problems=None):
    """What one process does with ``choose``: log, remove the damaged, take the state."""
    choice = choose(root, extra_problems)
    for line in choice.messages():
        log(line)
    choice.discard_damaged()
    return None if choice.state is None else choice.state.folder


def test_intact_states_the_newest_is_taken_and_nothing_is_said(states):
    root, end = states
    lines = []
    assert resumable_state(root, lines.append) == state_dir(root, 3)
    assert lines == []
    assert_same(resume_and_finish(state_dir(root, 3)), end)


@pytest.mark.parametrize(("name", "fault", "says"), FAULTS)
def test_a_damaged_newest_state_is_discarded_and_the_previous_one_resumed(
    states, name, fault, says
):
    root, end = states
    newest = state_dir(root, 3)
    fault(newest / name)
    lines = []
    chosen = resumable_state(root, lines.append)
    assert chosen == state_dir(root, 2)
    assert len(lines) == 1
    prefix = f"discarding damaged training state {newest}: {newest / name}"
    assert re.fullmatch(re.escape(prefix) + says, lines[0])
    assert not newest.exists()
    # Resumed from step 2, the run reaches the uninterrupted run's adapter at END.
    assert_same(resume_and_finish(chosen), end)


def test_no_state_checks_out_then_the_run_starts_at_step_0(states):
    root, _ = states
    truncate(state_dir(root, 3) / "optimizer.pt")
    flip_one_bit(state_dir(root, 2) / "adapter_model.safetensors")
    lines = []
    assert resumable_state(root, lines.append) is None
    assert [line.split(":")[0] for line in lines[:2]] == [
        f"discarding damaged training state {state_dir(root, 3)}",
        f"discarding damaged training state {state_dir(root, 2)}",
    ]
    assert lines[2] == f"no kept training state under {root} verifies; starting at step 0"
    assert not state_dir(root, 3).exists() and not state_dir(root, 2).exists()
    # The pruned step 1 is passed over, not discarded: its adapter is still a checkpoint.
    assert (state_dir(root, 1) / "adapter_model.safetensors").is_file()
    # Nothing kept at all: nothing to say.
    assert resumable_state(root / "missing", lines.append) is None
    assert len(lines) == 3


def test_a_state_without_file_hashes_is_taken_unverified_and_said_so(states):
    root, end = states
    for step in (2, 3):
        path = state_dir(root, step) / STATE_FILE
        record = json.loads(path.read_text())
        del record["files"], record["record_sha256"]
        path.write_text(json.dumps(record))
    lines = []
    assert resumable_state(root, lines.append) == state_dir(root, 3)
    assert lines == [
        f"{state_dir(root, 3)}: written without file hashes (older code); resuming it unverified"
    ]
    (state_dir(root, 3) / "rng_state.pt").unlink()  # a missing file is still found
    assert choose(root).state.folder == state_dir(root, 2)


def test_pruned_and_partial_folders_are_passed_over_not_discarded(states):
    root, _ = states
    # A copy in progress (no record yet) and a newer pruned state: no resume points, kept.
    partial = state_dir(root, 9)
    partial.mkdir()
    (partial / "optimizer.pt").write_bytes(b"partial")
    pruned = state_dir(root, 8)
    pruned.mkdir()
    (pruned / STATE_FILE).write_text("{}")
    choice = choose(root)
    assert choice.state.folder == state_dir(root, 3) and choice.damaged == ()
    assert choice.messages() == []
    assert partial.exists() and pruned.exists()
    # A caller's own requirement (the trainer's DeepSpeed folder) makes a state damaged.
    choice = choose(root, lambda step, check: [f"{check.folder}: no engine"] if step == 3 else [])
    assert choice.state.folder == state_dir(root, 2)
    [(step, check)] = choice.damaged
    assert step == 3 and check.problems == (f"{state_dir(root, 3)}: no engine",)


def test_discarding_a_damaged_state_removes_its_engine_folder_too(states):
    root, _ = states
    for step in (2, 3):
        engine_dir(root, step).mkdir()
    truncate(state_dir(root, 3) / "optimizer.pt")
    choice = choose(root)
    assert choice.discard_damaged() == [state_dir(root, 3)]
    assert not engine_dir(root, 3).exists() and engine_dir(root, 2).is_dir()


def test_the_resume_points_skip_temporaries_pruned_states_and_junk(tmp_path):
    model, optimizer, scheduler = make_run(lora_seed=1)
    for step in (2, 5, 40):
        save(state_dir(tmp_path, step), model, optimizer, scheduler, step)
    assert state_dir(tmp_path, 5).name == "step-000005"
    assert resume_points(tmp_path) == [2, 5, 40]
    # Step 40 gets pruned by hand (no optimizer, no scheduler); a crash left a temporary folder
    # for step 50; a folder with only an unparsable record at 60; junk names.
    for name in ("optimizer.pt", "scheduler.pt"):
        (state_dir(tmp_path, 40) / name).unlink()
    temp = tmp_path / ".step-000050.k2j3h4.tmp"
    temp.mkdir()
    (temp / "optimizer.pt").write_bytes(b"partial")
    state_dir(tmp_path, 60).mkdir()
    (state_dir(tmp_path, 60) / STATE_FILE).write_text('{"step": 6')
    (tmp_path / "step-abc").mkdir()
    (tmp_path / "step-000080").write_text("a file, not a folder")
    assert [step for step, _ in step_folders(tmp_path)] == [2, 5, 40, 60]
    assert resume_points(tmp_path) == [2, 5]
    assert resume_points(tmp_path / "missing") == []


def test_prune_keeps_adapters_the_two_newest_states_and_their_engine_folders(tmp_path):
    model, optimizer, scheduler = make_run(lora_seed=1)
    for step in (1, 2, 3, 4):
        save(state_dir(tmp_path, step), model, optimizer, scheduler, step)
        engine_dir(tmp_path, step).mkdir()
    engine_dir(tmp_path, 9).mkdir()  # a kill between DeepSpeed's save and the state's
    stale = tmp_path / ".step-000005.abc123.tmp"
    stale.mkdir()
    removed = prune(tmp_path)
    assert stale in removed and not stale.exists()
    for step in (1, 2, 3, 4):
        assert (state_dir(tmp_path, step) / "adapter_model.safetensors").is_file()
        assert (state_dir(tmp_path, step) / STATE_FILE).is_file()
        assert (state_dir(tmp_path, step) / "rng_state.pt").is_file()
    for step, whole in ((1, False), (2, False), (3, True), (4, True)):
        assert (state_dir(tmp_path, step) / "optimizer.pt").is_file() == whole, step
        assert (state_dir(tmp_path, step) / "scheduler.pt").is_file() == whole, step
        assert engine_dir(tmp_path, step).is_dir() == whole, step
    assert not engine_dir(tmp_path, 9).exists()
    assert resume_points(tmp_path) == [3, 4]
    assert prune(tmp_path) == []  # nothing more to remove
