"""Helpers of the resume tests: a toy LoRA run that trains, saves and loads its states like the
trainer, fault injectors, and bare checkpointers."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from peft import get_peft_model_state_dict
from training_helpers import RUN_CONFIG, make_run

from dashrepro.training.resume import Checkpointer, RunRecords, TrainingState
from dashrepro.training.resume._folder import (
    StateCheck,
    check_state_folder,
    load_state_folder,
    write_state_folder,
)

# A fixed "dataset" of 10 token sequences; which rows a step sees comes from the global RNG.
DATA = torch.randint(0, 64, (10, 6), generator=torch.Generator().manual_seed(0))
SAVED = (1, 2, 3)  # the fixture ``states`` saves after these steps; pruning keeps 2 and 3 whole
END = 5  # and trains on to this step


def train_steps(model, optimizer, scheduler, n: int) -> None:
    """Mimic the trainer's steps with every generator a state restores drawn from: the rows
    (Python's global RNG), dropout (torch's), and a numpy and a Python draw in the loss."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    for _ in range(n):
        ids = DATA[random.sample(range(len(DATA)), 2)]
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss * float(np.random.uniform(0.5, 1.5))
        loss = loss * (1.0 + 0.1 * random.random())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        scheduler.step()


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def adapter_tensors(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}


def save(folder: Path, model, optimizer, scheduler, step, run_config=RUN_CONFIG) -> Path:
    return write_state_folder(
        folder,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        step=step,
        run_config=run_config,
        extra={"note": "test"},
    )


def load(folder: Path, model, optimizer, scheduler) -> StateCheck:
    """Check the state in ``folder`` and load it, as a resume does; the check."""
    check = check_state_folder(folder)
    load_state_folder(check, model=model, optimizer=optimizer, scheduler=scheduler)
    return check


def scrambled_fresh_run():
    """A different LoRA init and different global RNGs: a restore that misses anything cannot
    match run A by accident."""
    model, optimizer, scheduler = make_run(lora_seed=2)
    seed_everything(999)
    return model, optimizer, scheduler


def flip_one_bit(path: Path) -> None:
    """Flip the lowest bit of the file's last byte: a tensor's value, past the header."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def zero_bytes(path: Path) -> None:
    path.write_bytes(b"")


def delete(path: Path) -> None:
    path.unlink()


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


def resume_and_finish(folder: Path) -> dict[str, torch.Tensor]:
    """Load ``folder`` into a scrambled fresh run and train to END; the adapter at the end."""
    model, optimizer, scheduler = scrambled_fresh_run()
    check = load(folder, model, optimizer, scheduler)
    train_steps(model, optimizer, scheduler, END - check.step)
    return adapter_tensors(model)


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


class FakeAccelerator:
    def __init__(self, main: bool = True):
        self.is_main_process = main
        self.barriers = 0

    def wait_for_everyone(self):
        self.barriers += 1


def bare_checkpointer(root: Path, deepspeed: bool, main: bool = True) -> Checkpointer:
    """A run's checkpointer whose kept states are under ``root`` (``<out_dir>/.resume``)."""
    lines: list[str] = []
    checkpointer = Checkpointer(
        root.parent, FakeAccelerator(main), RUN_CONFIG, name="opsd seed 3", deepspeed=deepspeed,
        log=lines.append,
    )  # fmt: skip
    checkpointer.root = root  # where the test's states are, whatever the folder's name
    checkpointer.lines = lines
    return checkpointer


def deepspeed_checkpointer(tmp_path, monkeypatch) -> tuple[Checkpointer, TrainingState]:
    """A DeepSpeed run's checkpointer of a toy run's state under ``tmp_path/.resume`` (the
    records' parquet files not written)."""
    model, optimizer, scheduler = make_run(lora_seed=1)
    monkeypatch.setattr(RunRecords, "write", lambda self, folder: None)
    return bare_checkpointer(tmp_path / ".resume", deepspeed=True), TrainingState(
        model, optimizer, scheduler
    )


def write_deepspeed_states(tmp_path, monkeypatch, steps=(1, 2, 3)) -> Checkpointer:
    """States written by the checkpointer of a DeepSpeed run, each beside a stand-in engine
    folder with a partition file of its own bytes (accelerator.save_state comes first)."""
    checkpointer, state = deepspeed_checkpointer(tmp_path, monkeypatch)
    root = checkpointer.root
    for step in steps:
        engine = root / f"deepspeed-step-{step:06d}" / "pytorch_model"
        engine.mkdir(parents=True)
        (engine / "zero_pp_rank_0_optim_states.pt").write_bytes(bytes([step]) * 64)
        state.step = step
        checkpointer.write_state(state)
    return checkpointer
