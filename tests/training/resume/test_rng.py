"""Tests of dashrepro.training.resume._rng: every generator's state captured in torch.load-safe
form and restored exactly, and the warnings when CUDA states cannot be restored."""

import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from dashrepro.training.resume._rng import capture_rng, restore_rng

WHERE = Path("run/step-000002/rng_state.pt")
LOGGER = "dashrepro.training.resume._rng"


def _draws() -> dict:
    """One draw of each generator the state holds (gaussians exercise the cached second value)."""
    return {
        "torch": torch.rand(3).tolist(),
        "numpy": np.random.standard_normal(3).tolist(),
        "python_global": [random.random(), random.gauss(0.0, 1.0)],
    }


def test_restore_replays_every_generator_after_a_save_and_weights_only_load(tmp_path):
    torch.manual_seed(1)
    np.random.seed(1)
    random.seed(1)
    # An odd number of gaussians leaves a cached value in numpy's and in Python's states.
    np.random.standard_normal()
    random.gauss(0.0, 1.0)
    saved = capture_rng()
    assert saved["numpy"]["has_gauss"] == 1
    assert saved["python_global"]["gauss_next"] is not None
    torch.save(saved, tmp_path / "rng_state.pt")
    expected = _draws()
    # Scramble everything, then restore.
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    state = torch.load(tmp_path / "rng_state.pt", weights_only=True)
    restore_rng(state, where=tmp_path / "rng_state.pt")
    assert _draws() == expected


def test_the_state_holds_tensors_numbers_and_strings_only():
    state = capture_rng()
    assert set(state) == {"torch_cpu", "torch_cuda", "numpy", "python_global"}
    assert state["torch_cpu"].dtype == torch.uint8
    numpy = state["numpy"]
    assert numpy["bit_generator"] == "MT19937"
    assert numpy["key"].dtype == torch.int64 and numpy["key"].shape == (624,)
    assert isinstance(numpy["pos"], int) and isinstance(numpy["has_gauss"], int)
    assert isinstance(numpy["cached_gaussian"], float)
    python = state["python_global"]
    assert python["version"] == 3
    assert python["internal"].dtype == torch.int64
    assert python["internal"].shape == (625,)  # 624 words and the index
    expected_cuda = torch.cuda.is_available()
    assert (state["torch_cuda"] is not None) == expected_cuda


def test_the_python_state_is_exact_including_the_high_bit_words():
    random.seed(3)
    version, internal, gauss_next = random.getstate()
    state = capture_rng()["python_global"]
    assert tuple(state["internal"].tolist()) == internal
    assert max(internal) >= 2**31  # words past int32's range survive int64
    assert gauss_next is None and state["gauss_next"] is None


def test_an_older_states_own_generator_entry_is_ignored():
    """States written while the trainer kept a generator of its own (always seeded alike) hold a
    ``python_rng`` entry; restoring them restores the global generators as before."""
    random.seed(5)
    state = {**capture_rng(), "python_rng": capture_rng()["python_global"]}
    first = random.random()
    restore_rng(state, WHERE)
    assert random.random() == first


def _state_with_cuda(n_devices: int) -> dict:
    state = capture_rng()
    state["torch_cuda"] = [torch.zeros(16, dtype=torch.uint8)] * n_devices
    return state


def test_cuda_states_without_cuda_are_not_restored_and_the_warning_names_the_file(
    monkeypatch, caplog
):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", pytest.fail)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        restore_rng(_state_with_cuda(2), WHERE)
    assert f"{WHERE}: saved with CUDA RNG states but CUDA is unavailable now" in caplog.text


def test_cuda_states_of_another_device_count_are_not_restored(monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", pytest.fail)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        restore_rng(_state_with_cuda(2), WHERE)
    assert f"{WHERE}: CUDA RNG states saved for 2 devices, 1 visible now; not restored" in (
        caplog.text
    )


def test_cuda_states_of_as_many_devices_are_restored_without_warning(monkeypatch, caplog):
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
    state = _state_with_cuda(2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        restore_rng(state, WHERE)
    assert restored == [state["torch_cuda"]]
    assert caplog.text == ""
