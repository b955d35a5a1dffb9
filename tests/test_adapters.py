"""Tests for dashrepro.adapters: the adapter-folder check names the missing or damaged file,
``save_adapter`` writes set fields sorted, ``load_adapter`` checks before peft loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dashrepro.adapters import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    AdapterFileError,
    check_adapter_files,
    load_adapter,
    save_adapter,
)

ARCH = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 64}  # fmt: skip
TARGETS = ["v_proj", "q_proj", "o_proj", "k_proj"]  # not in sorted order


def _adapter_folder(folder):
    """A minimal valid adapter folder: a PEFT config and a complete safetensors file."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / ADAPTER_CONFIG).write_text(json.dumps({"peft_type": "LORA", "r": 2}))
    save_file({"w": torch.arange(6, dtype=torch.float32)}, str(folder / ADAPTER_WEIGHTS))
    return folder


def _base():
    from dashrepro.embedded.tiny_model import build_tiny_qwen3

    return build_tiny_qwen3(ARCH, vocab_size=40, pad_token_id=0, eos_token_id=1, seed=0)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Qwen3 with two random LoRA adapters ("default" and "other"), saved by
    ``save_adapter``; returns (peft model, folder)."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    config = LoraConfig(r=2, lora_alpha=4, target_modules=TARGETS, init_lora_weights=False)
    model = get_peft_model(_base(), config)
    model.add_adapter("other", LoraConfig(r=2, target_modules=["up_proj", "down_proj"]))
    folder = tmp_path_factory.mktemp("adapter") / "checkpoint-2"
    save_adapter(model, folder)
    return model, folder


def test_a_complete_folder_passes_the_check(tmp_path):
    assert check_adapter_files(_adapter_folder(tmp_path / "a")) is None
    assert issubclass(AdapterFileError, ValueError)


@pytest.mark.parametrize("name", [ADAPTER_CONFIG, ADAPTER_WEIGHTS])
def test_a_missing_file_is_named(tmp_path, name):
    folder = _adapter_folder(tmp_path / "a")
    (folder / name).unlink()
    with pytest.raises(AdapterFileError) as info:
        check_adapter_files(folder)
    assert str(info.value) == f"{folder / name}: missing (an adapter folder needs it)"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "not a valid adapter config"),
        (b"\xff\xfe\x00garbage", "not a valid adapter config"),
        (b'{"r": 2}', "not a PEFT adapter config (no 'peft_type')"),
        (b'["peft_type"]', "not a PEFT adapter config (no 'peft_type')"),
    ],
)
def test_a_config_that_is_no_peft_config_is_named(tmp_path, content, message):
    folder = _adapter_folder(tmp_path / "a")
    (folder / ADAPTER_CONFIG).write_bytes(content)
    with pytest.raises(AdapterFileError) as info:
        check_adapter_files(folder)
    assert str(info.value).startswith(f"{folder / ADAPTER_CONFIG}: {message}")


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_damaged_weights_are_named(tmp_path, damage):
    folder = _adapter_folder(tmp_path / "a")
    weights = folder / ADAPTER_WEIGHTS
    data = weights.read_bytes()
    weights.write_bytes(data[:-8] if damage == "truncate" else b"not a safetensors file")
    with pytest.raises(AdapterFileError) as info:
        check_adapter_files(folder)
    assert str(info.value).startswith(f"{weights}: damaged or truncated safetensors file (")


def test_save_adapter_writes_set_fields_sorted_for_every_adapter(saved):
    _, folder = saved
    top = folder / ADAPTER_CONFIG
    config = json.loads(top.read_text())
    assert config["target_modules"] == sorted(TARGETS)
    assert list(config) == sorted(config)  # keys sorted: the bytes depend on the values only
    assert top.read_text().startswith('{\n  "')  # indented by two, as peft writes it
    other = json.loads((folder / "other" / ADAPTER_CONFIG).read_text())
    assert other["target_modules"] == ["down_proj", "up_proj"]
    check_adapter_files(folder)
    check_adapter_files(folder / "other")


class _FakeConfig:
    def to_dict(self):
        return {"target_modules": {"q", "k", "v"}, "layers": ["z", "y"], "r": 2}


class _FakePeftModel:
    """Writes its configs as peft does: a set field as a list in arbitrary order."""

    peft_config = {"default": _FakeConfig(), "second": _FakeConfig()}

    def save_pretrained(self, folder, **kwargs):
        for name in kwargs.get("selected_adapters") or self.peft_config:
            path = Path(folder) / ("" if name == "default" else name)
            path.mkdir(parents=True, exist_ok=True)
            config = {"target_modules": ["v", "q", "k"], "layers": ["z", "y"], "r": 2}
            (path / ADAPTER_CONFIG).write_text(json.dumps(config))


def test_save_adapter_sorts_the_set_fields_only(tmp_path):
    save_adapter(_FakePeftModel(), tmp_path)
    for path in (tmp_path / ADAPTER_CONFIG, tmp_path / "second" / ADAPTER_CONFIG):
        config = json.loads(path.read_text())
        assert config == {"layers": ["z", "y"], "r": 2, "target_modules": ["k", "q", "v"]}


def test_save_adapter_rewrites_only_the_selected_adapters(saved, tmp_path):
    model, _ = saved
    save_adapter(model, tmp_path / "only", selected_adapters=["other"])
    assert not (tmp_path / "only" / ADAPTER_CONFIG).exists()
    config = json.loads((tmp_path / "only" / "other" / ADAPTER_CONFIG).read_text())
    assert config["target_modules"] == ["down_proj", "up_proj"]


def test_load_adapter_restores_the_saved_weights(saved):
    import torch

    model, folder = saved
    loaded = load_adapter(_base(), folder)
    saved_lora = {k: v for k, v in model.state_dict().items() if "lora_" in k and "other" not in k}
    loaded_lora = {k: v for k, v in loaded.state_dict().items() if "lora_" in k}
    assert saved_lora and set(loaded_lora) == set(saved_lora)
    assert all(torch.equal(loaded_lora[k], saved_lora[k]) for k in saved_lora)  # copied, exact


def test_load_adapter_checks_the_files_before_peft_sees_them(tmp_path):
    folder = _adapter_folder(tmp_path / "a")
    (folder / ADAPTER_WEIGHTS).write_bytes(b"")
    # The model is never used: the check fails first, naming the file.
    with pytest.raises(AdapterFileError, match=ADAPTER_WEIGHTS):
        load_adapter(None, folder)
