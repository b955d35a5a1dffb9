"""Fixtures of the resume tests: a toy run's kept states, saved and pruned like the trainer's."""

from __future__ import annotations

import pytest

from dashrepro.training.resume._folder import state_dir
from dashrepro.training.resume._retention import prune

from .resume_helpers import (
    END,
    SAVED,
    adapter_tensors,
    make_run,
    save,
    seed_everything,
    train_steps,
)


@pytest.fixture
def states(tmp_path):
    """A run that saves and prunes like the trainer after steps 1, 2, 3, then goes on to END;
    returns the state root and the adapter after END steps (what a correct resume reproduces)."""
    model, optimizer, scheduler = make_run(lora_seed=1)
    seed_everything(11)
    root = tmp_path / "states"
    for step in range(1, END + 1):
        train_steps(model, optimizer, scheduler, 1)
        if step in SAVED:
            save(state_dir(root, step), model, optimizer, scheduler, step)
            prune(root)
    return root, adapter_tensors(model)
