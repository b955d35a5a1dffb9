"""A plain copy of the policy for fast sampling: base weights plus the adapter's delta, in place.

The copy is the model without PEFT's wrappers (one matmul per projection, not three), in the
sampling dtype. ``PolicyCopy.refresh(deltas)`` writes ``base + scaling * B @ A`` into each
adapted projection, computed in fp32 and rounded once, with ``copy_``: the tensors keep their
addresses, so a compiled decode step and its CUDA graphs stay valid, and since every refresh
starts from the base, rounding never accumulates (no merge/unmerge round trips). Deltas come
from the live PEFT model (``live_deltas``, the trainer's rollouts) or from an adapter folder
(``folder_deltas``, evaluation); no deltas is the base model (the teacher).

    copy = PolicyCopy.load(base_model_dir, torch.bfloat16, "cuda")
    copy.refresh(live_deltas(peft_model))     # after each optimizer step
    copy.refresh(folder_deltas(checkpoint))   # once per evaluated checkpoint
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from dashrepro.sampling.base import adapter_key

#: peft's prefix of a wrapped model's module names (``PeftModel.base_model.model``).
PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class LoraDelta:
    """One adapted projection: ``scaling * B @ A`` added to the weight named ``name``."""

    name: str  # the projection's module name in the plain model
    lora_a: torch.Tensor  # (r, in)
    lora_b: torch.Tensor  # (out, r)
    scaling: float
    base: torch.Tensor | None = None  # the live base weight; None: the copy's own base


def live_deltas(peft_model, adapter: str = "default") -> list[LoraDelta]:
    """The deltas of ``peft_model``'s adapter as it is now (its base weights included)."""
    from peft.tuners.lora import LoraLayer

    deltas = []
    for name, module in peft_model.named_modules():
        if not isinstance(module, LoraLayer) or adapter not in module.lora_A:
            continue
        if module.use_dora.get(adapter) or getattr(module, "fan_in_fan_out", False):
            raise ValueError(f"{name}: DoRA and fan-in-fan-out adapters cannot be copied")
        deltas.append(
            LoraDelta(
                name.removeprefix(PEFT_PREFIX),
                module.lora_A[adapter].weight.detach(),
                module.lora_B[adapter].weight.detach(),
                float(module.scaling[adapter]),
                module.get_base_layer().weight.detach(),
            )
        )
    return deltas


def folder_deltas(adapter_dir: str | Path) -> list[LoraDelta]:
    """The deltas of a saved adapter folder, read as the trainer writes it (one adapter, no
    per-module rank or alpha patterns)."""
    from safetensors.torch import load_file

    from dashrepro.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS, check_adapter_files

    check_adapter_files(adapter_dir)
    folder = Path(adapter_dir)
    config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    if config.get("rank_pattern") or config.get("alpha_pattern") or config.get("use_dora"):
        raise ValueError(f"{folder / ADAPTER_CONFIG}: rank/alpha patterns and DoRA not supported")
    rank = config["r"]
    scaling = config["lora_alpha"] / (math.sqrt(rank) if config.get("use_rslora") else rank)
    tensors = load_file(str(folder / ADAPTER_WEIGHTS))
    deltas = []
    for key in sorted(tensors):
        if not key.endswith(".lora_A.weight"):
            continue
        name = key.removeprefix(PEFT_PREFIX).removesuffix(".lora_A.weight")
        b_key = key.replace(".lora_A.", ".lora_B.")
        if b_key not in tensors:
            raise ValueError(f"{folder / ADAPTER_WEIGHTS}: {key} has no {b_key}")
        deltas.append(LoraDelta(name, tensors[key], tensors[b_key], scaling))
    return deltas


def merged_weight(base: torch.Tensor, delta: LoraDelta) -> torch.Tensor:
    """``base + scaling * B @ A`` in fp32 (the value a copy's weight is rounded from)."""
    device = base.device
    update = delta.lora_b.to(device, torch.float32) @ delta.lora_a.to(device, torch.float32)
    return base.to(torch.float32) + delta.scaling * update


class PolicyCopy:
    """A plain model whose adapted projections are rewritten in place from base + delta."""

    def __init__(self, model) -> None:
        self.model = model.eval().requires_grad_(False)
        self.weights = {
            name: module.weight
            for name, module in model.named_modules()
            if hasattr(module, "weight")
        }
        self.base: dict[str, torch.Tensor] = {}  # each adapted weight's base (kept once seen)
        self.adapted: set[str] = set()  # the weights that hold a delta now
        self.folder: tuple[str | None, int | None] = (None, None)  # the adapter folder held

    @classmethod
    def load(cls, base_model_dir: str | Path, dtype: torch.dtype, device: str) -> PolicyCopy:
        """The base model in ``dtype`` on ``device``, as a copy with no delta yet."""
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(base_model_dir), dtype=dtype)
        return cls(model.to(device))

    def use_folder(self, adapter_dir: str | Path | None, adapter_version: int | None) -> None:
        """Hold the adapter saved in ``adapter_dir`` (``None``: the base model), rewritten only
        when the (folder, version) differs from the one held: an evaluation's checkpoint is
        written into the copy once."""
        wanted = (None if adapter_dir is None else adapter_key(adapter_dir), adapter_version)
        if wanted != self.folder:
            self.refresh([] if adapter_dir is None else folder_deltas(adapter_dir))
            self.folder = wanted

    def refresh(self, deltas: list[LoraDelta]) -> None:
        """Each delta's weight set to ``base + delta`` (rounded once to the copy's dtype), and
        every weight adapted before but not now back to its base."""
        wanted = {}
        for delta in deltas:
            if delta.name not in self.weights:
                raise KeyError(f"the copied model has no weight {delta.name!r} to adapt")
            weight = self.weights[delta.name]
            if delta.base is not None:
                self.base[delta.name] = delta.base  # the live base: frozen, read each time
            elif delta.name not in self.base:
                self.base[delta.name] = weight.detach().clone()  # the copy's own, before any
            wanted[delta.name] = delta
        with torch.no_grad():
            for name, delta in wanted.items():
                self.weights[name].copy_(merged_weight(self.base[name], delta))
            for name in self.adapted - set(wanted):
                self.weights[name].copy_(self.base[name])
        self.adapted = set(wanted)
