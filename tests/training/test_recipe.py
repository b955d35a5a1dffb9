"""Tests of dashrepro.training.recipe: DistillationRecipe's ``_write_state`` and
``_resumable_state`` with DeepSpeed engine folders, on a toy run without a model run."""

from __future__ import annotations

import pytest
from training_helpers import (
    deepspeed_recipe,
    delete,
    flip_one_bit,
    truncate,
    write_deepspeed_states,
)

from dashrepro.training import state_choice, state_integrity
from dashrepro.training.state_integrity import state_dir


def test_the_recipe_keeps_the_deepspeed_folders_of_the_two_newest_states(tmp_path, monkeypatch):
    recipe = deepspeed_recipe(tmp_path, monkeypatch)
    root = recipe.resume_root
    root.mkdir()
    (root / "deepspeed-step-000009").mkdir()  # a kill between DeepSpeed's save and the state's
    for step in (1, 2, 3, 4):
        (root / f"deepspeed-step-{step:06d}").mkdir()  # accelerator.save_state comes first
        recipe._write_state(step)
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
    recipe = write_deepspeed_states(tmp_path, monkeypatch)
    root = recipe.resume_root
    partition = root / "deepspeed-step-000003/pytorch_model/zero_pp_rank_0_optim_states.pt"
    fault(partition)
    recipe.lines.clear()
    assert recipe._resumable_state() == state_dir(root, 2)
    [line] = recipe.lines
    assert line.startswith(
        f"[train] discarding damaged training state {state_dir(root, 3)}: {partition}: "
    )
    assert not (root / "deepspeed-step-000003").exists()
    assert (root / "deepspeed-step-000002").is_dir()


def test_intact_deepspeed_states_verify_and_older_records_are_checked_for_presence(
    tmp_path, monkeypatch
):
    recipe = write_deepspeed_states(tmp_path, monkeypatch)
    recipe.lines.clear()
    assert recipe._resumable_state() == state_dir(recipe.resume_root, 3)
    assert recipe.lines == []
    # A record without the key (written before DeepSpeed folders were hashed): nothing to compare.
    assert (
        state_integrity.companion_folder_problems(
            state_dir(recipe.resume_root, 3), "other", tmp_path
        )
        == []
    )
