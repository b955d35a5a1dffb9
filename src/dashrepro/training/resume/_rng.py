"""Every random number generator a training step touches, saved and restored exactly.

``capture_rng`` returns the states of torch's CPU generator (and every CUDA device's), numpy's
global generator and Python's global ``random``, in a form that ``torch.load(weights_only=True)``
reads back: tensors, numbers and strings only (numpy's key and Python's 625-word state become
int64 tensors). ``restore_rng`` puts them back; a state saved with CUDA generators is restored
only on a machine with as many CUDA devices (a warning names the mismatch otherwise), since
restoring a subset would be silently wrong. The trainer keeps no generator of its own: every
draw of a micro-batch is seeded from (seed, step, micro-batch) (docs/training.md).

    torch.save(capture_rng(), "rng_state.pt")
    restore_rng(torch.load("rng_state.pt", weights_only=True), where=Path("rng_state.pt"))
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

_LOG = logging.getLogger(__name__)


def _python_state(rng: random.Random) -> dict[str, Any]:
    version, internal, gauss_next = rng.getstate()
    # The 625 words are < 2**32, so int64 holds them exactly.
    return {
        "version": version,
        "internal": torch.tensor(internal, dtype=torch.int64),
        "gauss_next": gauss_next,
    }


def _python_setstate(saved: Mapping[str, Any]) -> tuple:
    internal = tuple(int(x) for x in saved["internal"].tolist())
    return (int(saved["version"]), internal, saved["gauss_next"])


def capture_rng() -> dict[str, Any]:
    """The states of torch (CPU, CUDA), numpy and Python's global RNG."""
    name, key, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    state: dict[str, Any] = {
        "torch_cpu": torch.get_rng_state(),
        "numpy": {
            "bit_generator": str(name),
            "key": torch.from_numpy(key.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "python_global": _python_state(random),  # the random module's hidden instance
        "torch_cuda": None,
    }
    if torch.cuda.is_available():
        state["torch_cuda"] = [s.cpu() for s in torch.cuda.get_rng_state_all()]
    return state


def restore_rng(state: Mapping[str, Any], where: Path) -> None:
    """Put back the states of ``capture_rng``; ``where`` names the state in warnings. A
    ``python_rng`` entry (states written when the trainer seeded a generator of its own, always
    to the same value) is ignored."""
    torch.set_rng_state(state["torch_cpu"])
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["bit_generator"],
            np_state["key"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    random.setstate(_python_setstate(state["python_global"]))
    cuda = state.get("torch_cuda")
    if cuda is not None:
        if not torch.cuda.is_available():
            _LOG.warning("%s: saved with CUDA RNG states but CUDA is unavailable now", where)
        elif torch.cuda.device_count() != len(cuda):
            # Restoring a subset would be silently wrong for the devices left out.
            _LOG.warning(
                "%s: CUDA RNG states saved for %d devices, %d visible now; not restored",
                where,
                len(cuda),
                torch.cuda.device_count(),
            )
        else:
            torch.cuda.set_rng_state_all(cuda)
