"""Helpers shared by the tests in tests/training: the tiny runs' LoRA and one-step budget, a toy
run whose training states are saved and loaded, fault injectors, and bare checkpointers."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from transformers import Qwen3Config, Qwen3ForCausalLM

from dashrepro.training.checkpointer import Checkpointer
from dashrepro.training.checkpointing import load_training_state, save_training_state
from dashrepro.training.run_state import TrainingState

LORA = {
    "r": 4,
    "alpha": 8,
    "dropout": 0.0,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


ONE_STEP = {"steps": 1, "checkpoint_every": 1, "lr": 1e-3, "micro_batch_size": 3,
            "grad_accumulation": 1, "max_new_tokens": 8, "temperature": 1.1, "top_p": 0.95,
            "top_k": 20}  # fmt: skip

STEPS = 12
RUN_CONFIG = {"train": {"lr": 2e-3, "steps": STEPS, "micro_batch_size": 2}, "seed": 3}
# A fixed "dataset" of 10 token sequences; which rows a step sees comes from the data RNG.
DATA = torch.randint(0, 64, (10, 6), generator=torch.Generator().manual_seed(0))


def make_run(lora_seed: int):
    """Base weights are always the same (in real runs they come from the same pretrained folder,
    and a state does not store them); only the LoRA init depends on ``lora_seed``."""
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    base = Qwen3ForCausalLM(config)
    torch.manual_seed(lora_seed)
    # Dropout > 0 makes every step draw from the torch RNG, so a resume that failed to restore it
    # would diverge; lora_A's random init makes a wrong or partial adapter load visible.
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.2, target_modules=["q_proj", "v_proj"])
    model = get_peft_model(base, lora)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=RUN_CONFIG["train"]["lr"], weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / STEPS))
    return model, optimizer, scheduler


def train_steps(model, optimizer, scheduler, rng: random.Random, data_state: dict, n: int):
    """Mimic trainer.train_run: a shuffled order refilled from ``rng``, dropout (torch RNG), and a
    numpy draw in the loss so that every generator the state restores is exercised."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    for _ in range(n):
        if len(data_state["order"]) < 2:
            fresh = list(range(len(DATA)))
            rng.shuffle(fresh)
            data_state["order"] += fresh
            data_state["epoch"] += 1
        ids = DATA[data_state["order"][:2]]
        data_state["order"] = data_state["order"][2:]
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss * float(np.random.uniform(0.5, 1.5))
        loss = loss * (1.0 + 0.1 * random.random())  # the global Python RNG too
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        scheduler.step()


def adapter_tensors(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}


def save(folder: Path, model, optimizer, scheduler, rng, step, data_state, run_config=RUN_CONFIG):
    return save_training_state(
        folder,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        step=step,
        data_state=data_state,
        python_rng=rng,
        run_config=run_config,
        extra={"note": "test"},
    )


def load(folder: Path, model, optimizer, scheduler, rng, run_config=RUN_CONFIG):
    return load_training_state(
        folder,
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        python_rng=rng,
        run_config=run_config,
    )


def scrambled_fresh_run():
    """A different LoRA init, different global RNGs and a different data RNG: a restore that
    misses anything cannot match run A by accident."""
    model, optimizer, scheduler = make_run(lora_seed=2)
    torch.manual_seed(999)
    np.random.seed(999)
    random.seed(999)
    return model, optimizer, scheduler, random.Random(12345)


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
        root.parent, FakeAccelerator(main), RUN_CONFIG, seed=3, rollouts_per_step=2,
        name="opsd seed 3", deepspeed=deepspeed, log=lines.append,
    )  # fmt: skip
    checkpointer.root = root  # where the test's states are, whatever the folder's name
    checkpointer.lines = lines
    return checkpointer


def deepspeed_checkpointer(tmp_path, monkeypatch) -> tuple[Checkpointer, TrainingState]:
    """A DeepSpeed run's checkpointer of a toy run's state under ``tmp_path/.resume`` (the
    records' parquet files not written)."""
    model, optimizer, scheduler = make_run(lora_seed=1)
    monkeypatch.setattr("dashrepro.training.checkpointer.write_parquet", lambda *a, **kw: None)
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
