"""Stage ``env``: versions, the device, and whether vLLM, DeepSpeed and FlashAttention-2 import."""

from __future__ import annotations

import sys

from ..common import device_name, rollout_backend


def stage_env(args) -> dict:
    import torch

    result = {"python": sys.version.split()[0], "torch": torch.__version__,
              "cuda": torch.version.cuda, "device": device_name()}  # fmt: skip
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        result["device_memory_gib"] = round(total / 2**30, 1)
    from importlib.metadata import PackageNotFoundError, version

    for name in ("transformers", "peft", "accelerate", "deepspeed", "vllm", "flash_attn",
                 "math_verify", "jsonschema"):  # fmt: skip
        try:
            __import__(name)
            try:
                result[name] = version(name.replace("_", "-"))
            except PackageNotFoundError:
                result[name] = "imports (version unknown)"
        except Exception as error:  # an import that fails is the finding
            result[name] = f"not importable: {type(error).__name__}: {str(error)[:160]}"
    from dashrepro.training.model import resolve_attn_implementation

    result["attn_implementation_auto"] = resolve_attn_implementation("auto")
    result["rollout_backend_auto"] = rollout_backend("auto")
    return result
