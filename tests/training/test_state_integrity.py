"""Integrity of kept training states (issue 24): fault injection into saved states.

A state records the size and sha256 of every file a resume reads; ``state_problems`` names each
file that no longer matches, ``load_training_state`` refuses such a state, and the resume (the
checkpointer's ``resumable_state`` through ``choose_state``) removes a
damaged newest state with a log line and falls back to the one before it, which ``prune_states``
keeps whole for that purpose. The faults: one flipped bit in the adapter weights (a file that
still loads: only the hash tells), a truncated optimizer.pt, a missing rng_state.pt, a zero-byte
scheduler.pt, an edited record.
"""

from __future__ import annotations

import json
import random
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from training_helpers import (
    RUN_CONFIG,
    adapter_tensors,
    bare_checkpointer,
    delete,
    flip_one_bit,
    load,
    make_run,
    save,
    scrambled_fresh_run,
    train_steps,
    truncate,
    write_deepspeed_states,
    zero_bytes,
)

from dashrepro.training import state_choice, state_integrity
from dashrepro.training.checkpointing import StateFileError
from dashrepro.training.state_choice import choose_state, prune_states
from dashrepro.training.state_integrity import (
    STATE_FILE,
    has_file_hashes,
    state_dir,
    state_problems,
)

SAVED = (1, 2, 3)  # states after these steps; the trainer's pruning keeps 2 and 3 whole
END = 5  # the uninterrupted run goes on to this step


def resumable_state(root, log, extra_problems=None):
    """What one process does with ``choose_state``: log, remove the damaged, take the state."""
    choice = choose_state(root, extra_problems)
    for line in choice.messages():
        log(line)
    choice.discard_damaged()
    return choice.state


@pytest.fixture
def states(tmp_path):
    """A run that saves and prunes like the trainer after steps 1, 2, 3, then goes on to END;
    returns the state root and the adapter after END steps (what a correct resume reproduces)."""
    model, optimizer, scheduler = make_run(lora_seed=1)
    torch.manual_seed(11)
    np.random.seed(11)
    random.seed(11)
    rng = random.Random(RUN_CONFIG["seed"])
    data_state = {"order": [], "epoch": 0}
    root = tmp_path / "states"
    for step in range(1, END + 1):
        train_steps(model, optimizer, scheduler, rng, data_state, 1)
        if step in SAVED:
            save(state_dir(root, step), model, optimizer, scheduler, rng, step, data_state)
            prune_states(root, keep_steps=set())
    return root, adapter_tensors(model)


# (file, fault, what the problem line says after the path: a regular expression)
FAULTS = [
    pytest.param(
        "adapter_model.safetensors",
        flip_one_bit,
        r": sha256 [0-9a-f]{16}\.\.\., its record says [0-9a-f]{16}\.\.\.$",
        id="flipped-adapter-bit",
    ),
    pytest.param(
        "optimizer.pt", truncate, r": \d+ bytes, its record says \d+$", id="truncated-optimizer"
    ),
    pytest.param("rng_state.pt", delete, r": missing$", id="deleted-rng"),
    pytest.param(
        "scheduler.pt", zero_bytes, r": 0 bytes, its record says \d+$", id="empty-scheduler"
    ),
]


def resume_and_finish(root: Path, folder: Path) -> dict[str, torch.Tensor]:
    """Load ``folder`` into a scrambled fresh run and train to END; the adapter at the end."""
    model, optimizer, scheduler, rng = scrambled_fresh_run()
    resumed = load(folder, model, optimizer, scheduler, rng)
    train_steps(model, optimizer, scheduler, rng, resumed["data_state"], END - resumed["step"])
    return adapter_tensors(model)


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_intact_states_verify_and_the_newest_is_resumed(states):
    root, end = states
    for step in (2, 3):
        assert state_problems(state_dir(root, step)) == []
        assert has_file_hashes(state_dir(root, step))
    # Step 1 is pruned: the optimizer moments are gone, which is no damage but no resume point.
    assert not (state_dir(root, 1) / "optimizer.pt").exists()
    lines = []
    assert resumable_state(root, lines.append) == state_dir(root, 3)
    assert lines == []
    assert_same(resume_and_finish(root, state_dir(root, 3)), end)


@pytest.mark.parametrize(("name", "fault", "says"), FAULTS)
def test_a_damaged_file_is_named(states, name, fault, says):
    root, _ = states
    newest = state_dir(root, 3)
    fault(newest / name)
    [problem] = state_problems(newest)
    assert re.fullmatch(re.escape(str(newest / name)) + says, problem)
    assert state_problems(state_dir(root, 2)) == []
    # load_training_state refuses it before touching the model, naming the file.
    model, optimizer, scheduler, rng = scrambled_fresh_run()
    before = adapter_tensors(model)
    error = FileNotFoundError if fault is delete else StateFileError
    with pytest.raises(error, match=name):
        load(newest, model, optimizer, scheduler, rng)
    assert_same(adapter_tensors(model), before)
    assert not optimizer.state


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
    assert_same(resume_and_finish(root, chosen), end)


def test_a_flipped_adapter_bit_still_loads_so_only_the_hash_tells(states):
    """The silent-wrong case of issue 24: the damaged file is a valid safetensors file with one
    different value, so a resume without the hash check would train on from wrong weights."""
    root, end = states
    newest = state_dir(root, 3)
    weights = newest / "adapter_model.safetensors"
    intact = {k: v.clone() for k, v in load_file(weights).items()}  # not views of the file
    flip_one_bit(weights)
    flipped = load_file(weights)  # loads without complaint
    assert intact.keys() == flipped.keys()
    assert sum(not torch.equal(intact[k], flipped[k]) for k in intact) == 1
    # Bypassing the check (what the code did before) resumes and ends somewhere else.
    record = json.loads((newest / STATE_FILE).read_text())
    record.pop("files")
    record.pop("record_sha256")
    (newest / STATE_FILE).write_text(json.dumps(record))
    assert state_problems(newest) == []
    assert not has_file_hashes(newest)
    wrong = resume_and_finish(root, newest)
    assert any(not torch.equal(wrong[k], end[k]) for k in end)


def test_an_edited_record_is_detected(states):
    root, _ = states
    newest = state_dir(root, 3)
    record = json.loads((newest / STATE_FILE).read_text())
    record["data_state"]["epoch"] += 1  # still valid JSON, still the same config
    (newest / STATE_FILE).write_text(json.dumps(record))
    assert state_problems(newest) == [
        f"{newest / STATE_FILE}: does not match its own record_sha256 (damaged or edited)"
    ]
    (newest / STATE_FILE).write_text('{"step": 3, "data_st')
    [problem] = state_problems(newest)
    assert problem.startswith(f"{newest / STATE_FILE}: cannot be read (JSONDecodeError")
    assert choose_state(root).state == state_dir(root, 2)


def test_no_state_verifies_then_the_run_starts_at_step_0(states):
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


def test_a_state_without_file_hashes_is_resumed_unverified(states):
    """States written before the record had hashes stay usable, with a log line."""
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
    assert_same(resume_and_finish(root, state_dir(root, 3)), end)
    # A missing file is still found without hashes.
    delete(state_dir(root, 3) / "rng_state.pt")
    assert state_problems(state_dir(root, 3)) == [f"{state_dir(root, 3) / 'rng_state.pt'}: missing"]
    assert choose_state(root).state == state_dir(root, 2)


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pt"])
@pytest.mark.parametrize("fault", [truncate, zero_bytes], ids=["truncated", "empty"])
def test_a_file_that_does_not_load_raises_naming_it(states, name, fault):
    """Without hashes to catch it first (an older state), torch.load's failure names the file."""
    root, _ = states
    newest = state_dir(root, 3)
    path = newest / STATE_FILE
    record = json.loads(path.read_text())
    del record["files"], record["record_sha256"]
    path.write_text(json.dumps(record))
    fault(newest / name)
    with pytest.raises(StateFileError, match="cannot load") as caught:
        load(newest, *scrambled_fresh_run())
    assert str(caught.value).startswith(f"{newest / name}: cannot load (")


def test_a_file_that_loads_but_does_not_fit_raises_naming_it(states, tmp_path):
    """A (hash-consistent) optimizer.pt of another parameter layout: load_state_dict fails."""
    root, _ = states
    newest = state_dir(root, 3)
    other = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    torch.save(other.state_dict(), newest / "optimizer.pt")
    path = newest / STATE_FILE
    record = json.loads(path.read_text())
    del record["files"], record["record_sha256"]
    path.write_text(json.dumps(record))
    with pytest.raises(StateFileError, match="loads, but cannot be restored") as caught:
        load(newest, *scrambled_fresh_run())
    assert str(caught.value).startswith(f"{newest / 'optimizer.pt'}: ")


def test_pruned_and_partial_folders_are_passed_over_not_discarded(states):
    root, _ = states
    # A copy in progress (no record yet) and a newer pruned state: no resume points, kept.
    partial = state_dir(root, 9)
    partial.mkdir()
    (partial / "optimizer.pt").write_bytes(b"partial")
    pruned = state_dir(root, 8)
    pruned.mkdir()
    (pruned / STATE_FILE).write_text("{}")
    choice = choose_state(root)
    assert choice.state == state_dir(root, 3) and choice.damaged == ()
    assert choice.messages() == []
    assert partial.exists() and pruned.exists()
    # A caller's own requirement (the trainer's DeepSpeed folder) makes a state damaged.
    choice = choose_state(root, lambda step, folder: [f"{folder}: no engine"] if step == 3 else [])
    assert choice.state == state_dir(root, 2)
    assert choice.damaged == ((3, state_dir(root, 3), (f"{state_dir(root, 3)}: no engine",)),)


# ------------------------------------------------------------------------------------------------
# The trainer's side: Checkpointer.resumable_state and write_state, without a model run
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("deepspeed", [False, True], ids=["ddp", "deepspeed"])
def test_the_checkpointer_falls_back_to_the_previous_state_and_logs_it(states, deepspeed):
    root, _ = states
    if deepspeed:
        for step in SAVED:
            (root / f"deepspeed-step-{step:06d}").mkdir()
    newest = state_dir(root, 3)
    truncate(newest / "optimizer.pt")
    checkpointer = bare_checkpointer(root, deepspeed)
    assert checkpointer.resumable_state() == state_dir(root, 2)
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
    assert checkpointer.resumable_state() == state_dir(root, 2)
    assert state_dir(root, 3).exists()  # rank 0 removes it
    assert checkpointer.accelerator.barriers == 2
    assert len(checkpointer.lines) == 1


def test_a_deepspeed_state_without_its_engine_folder_is_passed_over(states):
    root, _ = states
    (root / "deepspeed-step-000002").mkdir()  # the one of step 3 is missing
    checkpointer = bare_checkpointer(root, deepspeed=True)
    assert checkpointer.resumable_state() == state_dir(root, 2)
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
    problems = state_integrity.companion_folder_problems(
        state_dir(checkpointer.root, 3), "deepspeed_files", stray.parents[1]
    )
    assert problems == [f"{stray}: not in the state's record"]


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
    newest = state_dir(out / ".resume", state_choice.newest_complete_steps(out / ".resume", 1)[0])
    previous = int(newest.name.split("-")[1]) - 1
    assert previous >= 1 and (state_dir(out / ".resume", previous) / "optimizer.pt").is_file()
    flip_one_bit(newest / "adapter_model.safetensors")
    done = run_to_end(run)
    log = done.stdout + done.stderr
    assert f"discarding damaged training state {newest}: " in log
    assert f"resuming dash seed 3 after step {previous} " in log
    assert_same_adapters(whole, out, steps=(2, 4))
