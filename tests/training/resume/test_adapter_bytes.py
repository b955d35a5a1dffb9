"""A saved adapter's bytes do not depend on the process's string hashing.

peft writes ``target_modules`` (a set) in the order of ``PYTHONHASHSEED``'s hashes, so the same
training state used to differ in ``adapter_config.json`` from one run to the next. The state is
saved here in fresh interpreters under several hash seeds; every file must come out the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

SAVE_STATE = r"""
import sys
import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen3Config, Qwen3ForCausalLM
from dashrepro.training.resume._folder import write_state_folder

torch.manual_seed(0)
config = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=1, head_dim=16)
modules = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
model = get_peft_model(Qwen3ForCausalLM(config), LoraConfig(r=4, target_modules=modules))
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
write_state_folder(sys.argv[1], model=model, optimizer=optimizer, scheduler=scheduler, step=1,
                   run_config={"seed": 0})
"""


def saved_state(folder: Path, hash_seed: int) -> dict[str, str]:
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    subprocess.run([sys.executable, "-c", SAVE_STATE, str(folder)], check=True, env=env)
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.iterdir())
        if path.name in ("adapter_config.json", "adapter_model.safetensors")
    }


def test_a_saved_adapter_is_the_same_bytes_under_any_hash_seed(tmp_path):
    digests = [saved_state(tmp_path / f"seed{seed}", seed) for seed in range(4)]
    assert set(digests[0]) == {"adapter_config.json", "adapter_model.safetensors"}
    assert all(digest == digests[0] for digest in digests), digests
    config = json.loads((tmp_path / "seed0" / "adapter_config.json").read_text())
    assert config["target_modules"] == sorted(config["target_modules"])
    assert len(config["target_modules"]) == 7
