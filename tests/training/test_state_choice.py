"""Tests of dashrepro.training.state_choice: finding the newest complete training states and
pruning the others."""

from __future__ import annotations

import random

import pytest
from training_helpers import load, make_run, save

from dashrepro.training.state_choice import newest_complete_steps, prune_states
from dashrepro.training.state_integrity import STATE_FILE, state_dir


def test_the_newest_complete_state_skips_temp_pruned_and_junk(tmp_path):
    model, optimizer, scheduler = make_run(lora_seed=1)
    rng = random.Random(0)
    for step in (2, 5, 40):
        save(state_dir(tmp_path, step), model, optimizer, scheduler, rng, step, {"order": []})
    assert state_dir(tmp_path, 5).name == "step-000005"
    assert newest_complete_steps(tmp_path, 1) == [40]

    # Step 40 gets pruned by hand (no optimizer); a crash left a temp folder for step 50; a
    # folder with an unparsable record at 60; a record naming the wrong step at 70; junk names.
    (state_dir(tmp_path, 40) / "optimizer.pt").unlink()
    temp = tmp_path / ".step-000050.k2j3h4.tmp"
    temp.mkdir()
    (temp / "optimizer.pt").write_bytes(b"partial")
    (state_dir(tmp_path, 60)).mkdir()
    (state_dir(tmp_path, 60) / STATE_FILE).write_text('{"step": 6')
    wrong = state_dir(tmp_path, 70)
    save(wrong, model, optimizer, scheduler, rng, 7, {"order": []})
    (tmp_path / "step-abc").mkdir()
    (tmp_path / "step-000080").write_text("a file, not a folder")
    assert newest_complete_steps(tmp_path, 1) == [5]
    assert newest_complete_steps(tmp_path / "missing") == []
    assert newest_complete_steps(temp.parent / "step-abc") == []


def test_prune_keeps_adapters_and_the_two_newest_states(tmp_path):
    model, optimizer, scheduler = make_run(lora_seed=1)
    rng = random.Random(0)
    for step in (1, 2, 3, 4):
        save(state_dir(tmp_path, step), model, optimizer, scheduler, rng, step, {"order": []})
    stale = tmp_path / ".step-000005.abc123.tmp"
    stale.mkdir()
    removed = prune_states(tmp_path, keep_steps={1})
    assert stale in removed and not stale.exists()
    assert not (state_dir(tmp_path, 2) / "optimizer.pt").exists()
    assert not (state_dir(tmp_path, 2) / "scheduler.pt").exists()
    for step in (1, 2, 3, 4):
        assert (state_dir(tmp_path, step) / "adapter_model.safetensors").is_file()
    for step in (1, 3, 4):  # kept explicitly / the fallback / the newest
        assert (state_dir(tmp_path, step) / "optimizer.pt").is_file()
        assert (state_dir(tmp_path, step) / "scheduler.pt").is_file()
    assert newest_complete_steps(tmp_path, 1) == [4]
    assert newest_complete_steps(tmp_path) == [3, 4]

    # The two newest survive even an empty keep set: the resume point and its fallback.
    prune_states(tmp_path, keep_steps=set())
    assert newest_complete_steps(tmp_path, 1) == [4]
    assert (state_dir(tmp_path, 3) / "optimizer.pt").is_file()
    assert not (state_dir(tmp_path, 1) / "optimizer.pt").exists()
    assert newest_complete_steps(tmp_path) == [3, 4]
    assert newest_complete_steps(tmp_path, count=1) == [4]
    with pytest.raises(FileNotFoundError, match="optimizer.pt"):
        load(state_dir(tmp_path, 1), *make_run(lora_seed=1), random.Random(0))
