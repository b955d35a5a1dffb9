"""A saved PEFT adapter folder: its file names, saving it byte-stable, a check that names the
damaged file, loading.

Evaluation and the vLLM sampler read the trainer's ``checkpoint-N`` folders
(``adapter_config.json`` + ``adapter_model.safetensors``). ``check_adapter_files`` opens both
before peft or vLLM do, so a missing, truncated or non-PEFT file fails with an
``AdapterFileError`` naming it instead of deep inside a library with a message naming no file.

    from dashrepro.adapters import load_adapter, save_adapter
    save_adapter(peft_model, "results/.../checkpoint-40")
    policy = load_adapter(base_model, "results/.../checkpoint-40")
"""

from __future__ import annotations

import json
import os
from pathlib import Path

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


class AdapterFileError(ValueError):
    """A PEFT adapter folder whose files are missing or damaged; the message names the file."""


def check_adapter_files(adapter_dir: str | os.PathLike) -> None:
    """Raise :class:`AdapterFileError` naming the file unless ``adapter_dir`` holds a readable
    ``adapter_config.json`` and a complete ``adapter_model.safetensors``.

    Opens the safetensors file, which checks its header against the file's length (a truncated
    file fails here, named, instead of deep inside peft or vLLM with a message naming no file).
    """
    from safetensors import safe_open

    folder = Path(adapter_dir)
    config_path, weights_path = folder / ADAPTER_CONFIG, folder / ADAPTER_WEIGHTS
    for path in (config_path, weights_path):
        if not path.is_file():
            raise AdapterFileError(f"{path}: missing (an adapter folder needs it)")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterFileError(f"{config_path}: not a valid adapter config ({exc})") from None
    if not isinstance(config, dict) or "peft_type" not in config:
        raise AdapterFileError(f"{config_path}: not a PEFT adapter config (no 'peft_type')")
    try:
        with safe_open(str(weights_path), framework="pt", device="cpu") as handle:
            handle.keys()
    except Exception as exc:  # safetensors raises its own error types for damaged files
        raise AdapterFileError(
            f"{weights_path}: damaged or truncated safetensors file ({type(exc).__name__}: {exc})"
        ) from None


def save_adapter(model, folder: str | os.PathLike, **kwargs) -> None:
    """``model.save_pretrained(folder, **kwargs)`` with every adapter config's set-valued
    fields (``target_modules``) written sorted.

    peft writes a set field as ``list(the_set)``, in the order of the process's string hashes
    (``PYTHONHASHSEED``), so the same adapter's ``adapter_config.json`` would differ in bytes
    from one run to the next; sorted, the folder's bytes are fixed by its weights and settings.
    """
    from dashrepro.io import write_text

    model.save_pretrained(str(folder), **kwargs)
    for name in kwargs.get("selected_adapters") or list(model.peft_config):
        fields = [k for k, v in model.peft_config[name].to_dict().items() if isinstance(v, set)]
        # peft writes the "default" adapter at the top of the folder and any other under its name.
        path = Path(folder) / ("" if name == "default" else name) / ADAPTER_CONFIG
        config = json.loads(path.read_text(encoding="utf-8"))
        for field in fields:
            if isinstance(config.get(field), list):
                config[field] = sorted(config[field])
        write_text(path, json.dumps(config, indent=2, sort_keys=True))  # peft's own layout


def load_adapter(model, adapter_dir: str | os.PathLike):
    """``PeftModel.from_pretrained(model, adapter_dir)`` after :func:`check_adapter_files`."""
    from peft import PeftModel

    check_adapter_files(adapter_dir)
    return PeftModel.from_pretrained(model, str(adapter_dir))
