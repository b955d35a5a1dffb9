"""Tests of dashrepro.training.resume._folder, one training state's folder: bit-exact resume,
weights_only files, the record's file hashes and what a check names (issue 24's faults: a
flipped bit in the adapter weights, a truncated optimizer.pt, a missing rng_state.pt, a zero-byte
scheduler.pt, an edited record), each file hashed once, and the one config check."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from dashrepro.training.resume import StateFileError, _folder
from dashrepro.training.resume._fingerprint import config_fingerprint
from dashrepro.training.resume._folder import (
    FORMAT_VERSION,
    STATE_FILE,
    check_state_folder,
    companion_problems,
    config_differences,
    folder_file_record,
    is_resume_point,
    load_state_folder,
    read_record,
    state_dir,
)

from .resume_helpers import (
    FAULTS,
    RUN_CONFIG,
    adapter_tensors,
    assert_same,
    delete,
    flip_one_bit,
    load,
    make_run,
    resume_and_finish,
    save,
    scrambled_fresh_run,
    seed_everything,
    train_steps,
    truncate,
    zero_bytes,
)


def rng_draws() -> tuple:
    return (torch.rand(4).tolist(), np.random.rand(3).tolist(), random.random())


@pytest.fixture
def saved_run(tmp_path):
    """Run A: 3 steps, save at step 3, then 4 more steps; returns what B must reproduce."""
    model, optimizer, scheduler = make_run(lora_seed=1)
    seed_everything(11)
    train_steps(model, optimizer, scheduler, 3)
    folder = save(state_dir(tmp_path, 3), model, optimizer, scheduler, 3)
    train_steps(model, optimizer, scheduler, 4)
    return {
        "folder": folder,
        "adapter": adapter_tensors(model),
        "lr": scheduler.get_last_lr(),
        "optimizer": optimizer.state_dict(),
        "draws": rng_draws(),
    }


def test_resume_continues_bit_for_bit(saved_run):
    model, optimizer, scheduler = scrambled_fresh_run()
    fresh = adapter_tensors(model)
    assert set(fresh) == set(saved_run["adapter"])
    assert any(not torch.equal(fresh[k], saved_run["adapter"][k]) for k in fresh)

    params_before = [id(p) for p in optimizer.param_groups[0]["params"]]
    check = load(saved_run["folder"], model, optimizer, scheduler)
    assert check.step == 3 and check.record["extra"] == {"note": "test"}
    # The adapter was loaded in place: the optimizer still drives the model's own parameters.
    assert [id(p) for p in optimizer.param_groups[0]["params"]] == params_before

    train_steps(model, optimizer, scheduler, 4)
    after = adapter_tensors(model)
    for key, tensor in saved_run["adapter"].items():
        assert torch.equal(after[key], tensor), key
    assert any(t.abs().sum() > 0 for k, t in after.items() if "lora_B" in k)  # really trained
    assert scheduler.get_last_lr() == saved_run["lr"]
    for index, state in saved_run["optimizer"]["state"].items():
        for name, value in state.items():
            assert torch.equal(optimizer.state_dict()["state"][index][name], value)
    # torch, numpy and Python's global generator all continue where run A's did.
    assert rng_draws() == saved_run["draws"]


def test_rng_restore_is_what_makes_the_resume_exact(saved_run):
    """Control: same load, but the torch RNG is disturbed afterwards -> dropout masks differ."""
    model, optimizer, scheduler = scrambled_fresh_run()
    load(saved_run["folder"], model, optimizer, scheduler)
    torch.manual_seed(0)
    train_steps(model, optimizer, scheduler, 4)
    after = adapter_tensors(model)
    assert any(not torch.equal(after[k], v) for k, v in saved_run["adapter"].items())


def _only_safe_types(obj) -> bool:
    if isinstance(obj, torch.Tensor | str | int | float | bool | type(None)):
        return True
    if isinstance(obj, list | tuple):
        return all(_only_safe_types(x) for x in obj)
    if isinstance(obj, dict):
        return all(_only_safe_types(k) and _only_safe_types(v) for k, v in obj.items())
    return False


def test_every_file_loads_with_weights_only_and_the_record_hashes_each(saved_run):
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
    assert set(rng_state) == {"torch_cpu", "torch_cuda", "numpy", "python_global"}
    assert rng_state["numpy"]["key"].shape == (624,)
    record = json.loads((folder / STATE_FILE).read_text())
    assert sorted(record) == [
        "adapter_name", "extra", "files", "fingerprint", "format_version", "record_sha256",
        "run_config", "step", "versions",
    ]  # fmt: skip
    assert record["step"] == 3 and record["format_version"] == FORMAT_VERSION
    # Size and sha256 of every file a resume reads, for check_state_folder to check.
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
    with pytest.raises(TypeError, match="weights_only"):
        save(state_dir(tmp_path, 1), model, optimizer, scheduler, 1)
    assert list(tmp_path.iterdir()) == []  # neither the final folder nor a temporary one


# ------------------------------------------------------------------------------------------------
# The config check
# ------------------------------------------------------------------------------------------------


def test_config_differences_name_every_differing_key(saved_run):
    record = read_record(saved_run["folder"])
    assert config_differences(record, RUN_CONFIG) == []
    changed = {"train": {**RUN_CONFIG["train"], "lr": 1e-3, "warmup": 5}, "seed": 3}
    assert config_differences(record, changed) == [
        "train.lr: 0.002 (checkpoint) != 0.001 (now)",
        "train.warmup: <absent> (checkpoint) != 5 (now)",
    ]
    assert config_differences({**record, "format_version": 0}, RUN_CONFIG) == [
        f"format_version: 0 -> {FORMAT_VERSION}"
    ]
    assert config_differences({**record, "fingerprint": "0" * 64}, RUN_CONFIG) == [
        "fingerprint: differs although no key does (edited by hand?)"
    ]


# ------------------------------------------------------------------------------------------------
# The check: each file against the record, once
# ------------------------------------------------------------------------------------------------


def test_an_intact_state_checks_out_with_every_file_verified(states):
    root, end = states
    for step in (2, 3):
        check = check_state_folder(state_dir(root, step))
        assert check.ok and check.hashed and check.files_verified == 5
    assert_same(resume_and_finish(state_dir(root, 3)), end)


def test_a_check_hashes_each_file_once_and_a_load_hashes_none(states, monkeypatch):
    root, _ = states
    hashed = []
    real = _folder.sha256_file
    monkeypatch.setattr(_folder, "sha256_file", lambda path: hashed.append(path) or real(path))
    check = check_state_folder(state_dir(root, 3))
    assert sorted(p.name for p in hashed) == sorted(read_record(state_dir(root, 3))["files"])
    hashed.clear()
    model, optimizer, scheduler = scrambled_fresh_run()
    load_state_folder(check, model=model, optimizer=optimizer, scheduler=scheduler)
    assert hashed == []


@pytest.mark.parametrize(("name", "fault", "says"), FAULTS)
def test_a_damaged_file_is_named_and_the_state_is_not_loaded(states, name, fault, says):
    root, _ = states
    newest = state_dir(root, 3)
    fault(newest / name)
    check = check_state_folder(newest)
    [problem] = check.problems
    assert re.fullmatch(re.escape(str(newest / name)) + says, problem)
    assert check_state_folder(state_dir(root, 2)).ok
    # load_state_folder refuses it before touching the model, naming the file.
    model, optimizer, scheduler = scrambled_fresh_run()
    before = adapter_tensors(model)
    with pytest.raises(StateFileError, match=name):
        load_state_folder(check, model=model, optimizer=optimizer, scheduler=scheduler)
    assert_same(adapter_tensors(model), before)
    assert not optimizer.state


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
    # Bypassing the check (a record without hashes) resumes and ends somewhere else.
    record = json.loads((newest / STATE_FILE).read_text())
    record.pop("files")
    record.pop("record_sha256")
    (newest / STATE_FILE).write_text(json.dumps(record))
    check = check_state_folder(newest)
    assert check.ok and not check.hashed and check.files_verified == 0
    wrong = resume_and_finish(newest)
    assert any(not torch.equal(wrong[k], end[k]) for k in end)


def test_an_edited_record_is_detected(states):
    root, _ = states
    newest = state_dir(root, 3)
    record = json.loads((newest / STATE_FILE).read_text())
    record["extra"]["note"] = "edited"  # still valid JSON, still the same config
    (newest / STATE_FILE).write_text(json.dumps(record))
    assert check_state_folder(newest).problems == (
        f"{newest / STATE_FILE}: does not match its own record_sha256 (damaged or edited)",
    )
    (newest / STATE_FILE).write_text('{"step": 3, "extr')
    check = check_state_folder(newest)
    [problem] = check.problems
    assert problem.startswith(f"{newest / STATE_FILE}: cannot be read (JSONDecodeError")
    assert check.record is None
    # A record of another step than its folder's.
    save(state_dir(root, 7), *make_run(lora_seed=1), step=6)
    assert check_state_folder(state_dir(root, 7)).problems == (
        f"{state_dir(root, 7) / STATE_FILE}: records step 6, the folder's is 000007",
    )


def test_a_state_without_file_hashes_is_checked_for_missing_files_only(states):
    """States written before the record had hashes stay usable (the resume logs it)."""
    root, end = states
    path = state_dir(root, 3) / STATE_FILE
    record = json.loads(path.read_text())
    del record["files"], record["record_sha256"]
    path.write_text(json.dumps(record))
    assert check_state_folder(state_dir(root, 3)).ok
    assert_same(resume_and_finish(state_dir(root, 3)), end)
    delete(state_dir(root, 3) / "rng_state.pt")
    assert check_state_folder(state_dir(root, 3)).problems == (
        f"{state_dir(root, 3) / 'rng_state.pt'}: missing",
    )


def _drop_hashes(folder: Path) -> None:
    path = folder / STATE_FILE
    record = json.loads(path.read_text())
    del record["files"], record["record_sha256"]
    path.write_text(json.dumps(record))


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pt"])
@pytest.mark.parametrize("fault", [truncate, zero_bytes], ids=["truncated", "empty"])
def test_a_file_that_does_not_load_raises_naming_it(states, name, fault):
    """Without hashes to catch it first (an older state), torch.load's failure names the file."""
    root, _ = states
    newest = state_dir(root, 3)
    _drop_hashes(newest)
    fault(newest / name)
    with pytest.raises(StateFileError, match="cannot load") as caught:
        load(newest, *scrambled_fresh_run())
    assert str(caught.value).startswith(f"{newest / name}: cannot load (")


def test_a_file_that_loads_but_does_not_fit_raises_naming_it(states):
    """A (hash-consistent) optimizer.pt of another parameter layout: load_state_dict fails."""
    root, _ = states
    newest = state_dir(root, 3)
    other = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])
    torch.save(other.state_dict(), newest / "optimizer.pt")
    _drop_hashes(newest)
    with pytest.raises(StateFileError, match="loads, but cannot be restored") as caught:
        load(newest, *scrambled_fresh_run())
    assert str(caught.value).startswith(f"{newest / 'optimizer.pt'}: ")


# ------------------------------------------------------------------------------------------------
# What counts as a resume point, and folders saved beside a state
# ------------------------------------------------------------------------------------------------


def test_a_resume_point_has_its_record_and_was_not_pruned(states):
    root, _ = states
    assert is_resume_point(state_dir(root, 3)) and is_resume_point(state_dir(root, 2))
    assert not is_resume_point(state_dir(root, 1))  # pruned: no optimizer.pt, no scheduler.pt
    partial = state_dir(root, 9)  # a copy in progress: no record yet
    partial.mkdir()
    (partial / "optimizer.pt").write_bytes(b"partial")
    assert not is_resume_point(partial)
    assert not is_resume_point(root / "missing")


def test_a_companion_folder_is_checked_file_by_file(tmp_path):
    folder = tmp_path / "engine"
    (folder / "part").mkdir(parents=True)
    (folder / "part" / "a.pt").write_bytes(b"a" * 8)
    (folder / "b.pt").write_bytes(b"b" * 8)
    expected = folder_file_record(folder)
    assert sorted(expected) == ["b.pt", "part/a.pt"]
    assert companion_problems(expected, folder) == []
    (folder / "b.pt").write_bytes(b"b" * 7)
    (folder / "part" / "a.pt").unlink()
    (folder / "c.pt").write_bytes(b"c")
    assert companion_problems(expected, folder) == [
        f"{folder / 'b.pt'}: 7 bytes, its record says 8",
        f"{folder / 'part/a.pt'}: missing",
        f"{folder / 'c.pt'}: not in the state's record",
    ]
    assert companion_problems(None, folder) == []  # a state recorded before these records
