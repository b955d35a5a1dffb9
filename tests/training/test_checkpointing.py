"""Tests of dashrepro.training.checkpointing, the resumable training state: bit-exact resume,
config refusal, weights_only files. Everything runs on a one-layer Qwen3 with a rank-4 LoRA."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from training_helpers import (
    RUN_CONFIG,
    STEPS,
    adapter_tensors,
    load,
    make_run,
    save,
    scrambled_fresh_run,
    train_steps,
)

from dashrepro.training.checkpointing import ResumeConfigMismatch
from dashrepro.training.fingerprint import config_fingerprint
from dashrepro.training.state_integrity import STATE_FILE, state_dir


def rng_draws(rng: random.Random) -> tuple:
    return (torch.rand(4).tolist(), np.random.rand(3).tolist(), random.random(), rng.random())


@pytest.fixture
def saved_run(tmp_path):
    """Run A: 3 steps, save at step 3, then 4 more steps; returns what B must reproduce."""
    model, optimizer, scheduler = make_run(lora_seed=1)
    torch.manual_seed(11)
    np.random.seed(11)
    random.seed(11)
    rng = random.Random(RUN_CONFIG["seed"])
    data_state = {"order": [], "epoch": 0}
    train_steps(model, optimizer, scheduler, rng, data_state, 3)
    folder = save(state_dir(tmp_path, 3), model, optimizer, scheduler, rng, 3, data_state)
    saved_data_state = json.loads(json.dumps(data_state))
    train_steps(model, optimizer, scheduler, rng, data_state, 4)
    return {
        "folder": folder,
        "data_state_at_save": saved_data_state,
        "adapter": adapter_tensors(model),
        "lr": scheduler.get_last_lr(),
        "optimizer": optimizer.state_dict(),
        "draws": rng_draws(rng),
        "data_state_end": data_state,
    }


def test_resume_continues_bit_for_bit(saved_run):
    model, optimizer, scheduler, rng = scrambled_fresh_run()
    fresh = adapter_tensors(model)
    assert set(fresh) == set(saved_run["adapter"])
    assert any(not torch.equal(fresh[k], saved_run["adapter"][k]) for k in fresh)

    params_before = [id(p) for p in optimizer.param_groups[0]["params"]]
    resumed = load(saved_run["folder"], model, optimizer, scheduler, rng)
    assert resumed["step"] == 3
    assert resumed["data_state"] == saved_run["data_state_at_save"]
    assert resumed["extra"] == {"note": "test"}
    # The adapter was loaded in place: the optimizer still drives the model's own parameters.
    assert [id(p) for p in optimizer.param_groups[0]["params"]] == params_before

    data_state = resumed["data_state"]
    train_steps(model, optimizer, scheduler, rng, data_state, 4)
    after = adapter_tensors(model)
    for key, tensor in saved_run["adapter"].items():
        assert torch.equal(after[key], tensor), key
    assert any(t.abs().sum() > 0 for k, t in after.items() if "lora_B" in k)  # really trained
    assert scheduler.get_last_lr() == saved_run["lr"]
    assert data_state == saved_run["data_state_end"]
    for index, state in saved_run["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(optimizer.state_dict()["state"][index][name], value)
    # torch, numpy, global Python and the data RNG all continue where run A's did.
    assert rng_draws(rng) == saved_run["draws"]


def test_rng_restore_is_what_makes_the_resume_exact(saved_run):
    """Control: same load, but the torch RNG is disturbed afterwards -> dropout masks differ."""
    model, optimizer, scheduler, rng = scrambled_fresh_run()
    resumed = load(saved_run["folder"], model, optimizer, scheduler, rng)
    torch.manual_seed(0)
    train_steps(model, optimizer, scheduler, rng, resumed["data_state"], 4)
    after = adapter_tensors(model)
    assert any(not torch.equal(after[k], v) for k, v in saved_run["adapter"].items())


def test_config_mismatch_is_refused_with_every_differing_key(saved_run):
    model, optimizer, scheduler, rng = scrambled_fresh_run()
    before = adapter_tensors(model)
    changed = {
        "train": {"lr": 1e-3, "steps": STEPS, "micro_batch_size": 2, "warmup": 5},
        "seed": 3,
    }
    with pytest.raises(ResumeConfigMismatch) as caught:
        load(saved_run["folder"], model, optimizer, scheduler, rng, run_config=changed)
    message = str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert str(saved_run["folder"]) in message
    assert "train.lr: 0.002 (checkpoint) != 0.001 (now)" in message
    assert "train.warmup: <absent> (checkpoint) != 5 (now)" in message
    assert "seed" not in message.replace(str(saved_run["folder"]), "")
    assert "Delete" in message and "restore the config" in message
    # Refused before anything was touched.
    after = adapter_tensors(model)
    assert all(torch.equal(after[k], v) for k, v in before.items())
    assert not optimizer.state


def _only_safe_types(obj) -> bool:
    if isinstance(obj, torch.Tensor | str | int | float | bool | type(None)):
        return True
    if isinstance(obj, list | tuple):
        return all(_only_safe_types(x) for x in obj)
    if isinstance(obj, dict):
        return all(_only_safe_types(k) and _only_safe_types(v) for k, v in obj.items())
    return False


def test_every_file_loads_with_weights_only(saved_run):
    folder = saved_run["folder"]
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
        "optimizer.pt",
        "rng_state.pt",
        "scheduler.pt",
        "trainer_state.json",
    ]
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pt"):
        obj = torch.load(folder / name, weights_only=True)
        assert _only_safe_types(obj), name
    rng_state = torch.load(folder / "rng_state.pt", weights_only=True)
    assert set(rng_state) == {"torch_cpu", "torch_cuda", "numpy", "python_global", "python_rng"}
    assert rng_state["numpy"]["key"].shape == (624,)
    assert rng_state["python_rng"]["internal"].shape == (625,)
    record = json.loads((folder / STATE_FILE).read_text())
    assert record["step"] == 3
    # Size and sha256 of every file a resume reads, for state_problems to check.
    assert sorted(record["files"]) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "optimizer.pt",
        "rng_state.pt",
        "scheduler.pt",
    ]
    for name, entry in record["files"].items():
        assert entry["bytes"] == (folder / name).stat().st_size
        assert len(entry["sha256"]) == 64
    assert len(record["record_sha256"]) == 64
    assert record["fingerprint"] == config_fingerprint(RUN_CONFIG)
    assert record["run_config"] == RUN_CONFIG
    assert {"torch", "transformers", "peft", "numpy", "python"} <= set(record["versions"])


class _Schedule:
    """An arbitrary Python object: loading it needs the full unpickler."""


class _CallableLambda:
    """An lr_lambda object: LambdaLR puts its __dict__ into the state dict."""

    def __init__(self):
        self.payload = _Schedule()

    def __call__(self, step):
        return 1.0


def test_a_state_that_would_need_pickle_is_never_committed(tmp_path):
    model, optimizer, _ = make_run(lora_seed=1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _CallableLambda())
    folder = state_dir(tmp_path, 1)
    with pytest.raises(TypeError, match="weights_only"):
        save(folder, model, optimizer, scheduler, random.Random(0), 1, {"order": [], "epoch": 0})
    assert list(tmp_path.iterdir()) == []  # neither the final folder nor a temporary one
