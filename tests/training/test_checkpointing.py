"""Resumable training state: bit-exact resume, config refusal, weights_only files, discovery,
pruning and the preemption guard. Everything runs on a one-layer Qwen3 with a rank-4 LoRA."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from peft import LoraConfig, get_peft_model, get_peft_model_state_dict
from transformers import Qwen3Config, Qwen3ForCausalLM

from dashrepro.training.checkpointing import (
    ResumeConfigMismatch,
    load_training_state,
    save_training_state,
)
from dashrepro.training.fingerprint import config_fingerprint
from dashrepro.training.preemption import PREEMPTED_EXIT_CODE, PreemptionGuard
from dashrepro.training.state_choice import (
    newest_complete_steps,
    prune_states,
)
from dashrepro.training.state_integrity import STATE_FILE, state_dir

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


def rng_draws(rng: random.Random) -> tuple:
    return (torch.rand(4).tolist(), np.random.rand(3).tolist(), random.random(), rng.random())


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


def scrambled_fresh_run():
    """A different LoRA init, different global RNGs and a different data RNG: a restore that
    misses anything cannot match run A by accident."""
    model, optimizer, scheduler = make_run(lora_seed=2)
    torch.manual_seed(999)
    np.random.seed(999)
    random.seed(999)
    return model, optimizer, scheduler, random.Random(12345)


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


def test_config_fingerprint_is_canonical():
    a = {"train": {"lr": 1e-3, "steps": 4}, "methods": ("opsd", "dash")}
    b = {"methods": ["opsd", "dash"], "train": {"steps": 4, "lr": 1e-3}}
    assert config_fingerprint(a) == config_fingerprint(b)
    assert config_fingerprint(a) != config_fingerprint({**b, "train": {"steps": 4, "lr": 2e-3}})
    assert config_fingerprint({"x": 1}) != config_fingerprint({"x": 1.0})
    assert len(config_fingerprint(a)) == 64
    with pytest.raises(TypeError):
        config_fingerprint({"x": object()})


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


def test_preemption_guard_sets_a_flag_and_restores_handlers():
    calls = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: calls.append(signum))
    previous_term = signal.getsignal(signal.SIGTERM)
    try:
        with PreemptionGuard() as guard:
            assert guard.active and guard.requested is None
            os.kill(os.getpid(), signal.SIGUSR1)
            assert guard.requested == "SIGUSR1"
            os.kill(os.getpid(), signal.SIGTERM)  # caught too; the first signal is kept
            assert guard.requested == "SIGUSR1"
            assert calls == []  # the earlier handler did not run meanwhile
        assert not guard.active
        assert signal.getsignal(signal.SIGTERM) == previous_term
        os.kill(os.getpid(), signal.SIGUSR1)
        assert calls == [signal.SIGUSR1]  # the earlier handler is back
    finally:
        signal.signal(signal.SIGUSR1, previous)

    with PreemptionGuard() as guard:
        os.kill(os.getpid(), signal.SIGTERM)
        assert guard.requested == "SIGTERM"
    assert PREEMPTED_EXIT_CODE == 75


def test_preemption_guard_outside_the_main_thread_is_inactive():
    messages, seen = [], {}
    before = signal.getsignal(signal.SIGUSR1)

    def worker():
        with PreemptionGuard(log=messages.append) as guard:
            seen["active"], seen["reason"] = guard.active, guard.inactive_reason
            seen["handler"] = signal.getsignal(signal.SIGUSR1)

    thread = threading.Thread(target=worker, name="loader")
    thread.start()
    thread.join()
    assert seen["active"] is False
    assert "main thread" in seen["reason"]
    assert seen["handler"] == before
    assert messages and "inactive" in messages[0]
