"""A configured device this machine does not have, named at a job's start, before any model loads.

The workflow's parse and its dry run cannot check it: Snakemake plans on a login node without
a GPU the jobs it sends to GPU nodes. So the job that would load the model checks, first
(``check_device``): a backend that runs where the config's ``device`` says (``hf``,
``hf_compiled``) on ``cuda`` where torch finds no CUDA device is an error naming the key, the
file that set it (``dashrepro.config_sources``) and what this machine has. A backend with one
device of its own (vLLM, whose CPU build serves the vllm_cpu tests) is left to its engine.

    check_device("hf_compiled", "cuda")   # MissingDeviceError on a CPU-only machine
"""

from __future__ import annotations

import os

from dashrepro.config_sources import set_in
from dashrepro.sampling.backends import backend


class MissingDeviceError(RuntimeError):
    """The configured device is not on this machine; the message says which key, where it was
    set, and what this machine has."""


def cuda_absence() -> str | None:
    """Why this machine cannot run on CUDA, in words (None: it can)."""
    import torch

    if torch.cuda.is_available():
        return None
    cpus = f"{os.cpu_count()} CPU cores"
    if torch.version.cuda is None:
        return f"this machine's torch {torch.__version__} is built without CUDA (it has {cpus})"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else ""
    return (
        f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no CUDA device on this "
        f"machine (it has {cpus}{shown})"
    )


def check_device(name: str, device: str, key: str = "evaluation.device") -> None:
    """Raise ``MissingDeviceError`` where backend ``name`` would run on ``device`` (the value
    of config ``key``) and this machine lacks it."""
    if len(backend(name).devices) < 2 or device != "cuda":
        return  # one device of its own, or the CPU every machine has
    absence = cuda_absence()
    if absence is not None:
        raise MissingDeviceError(
            f"{key}: cuda ({set_in(key)}), but {absence}. Run this job where a GPU is (a "
            f"cluster profile such as slurm-a800 gives it one), or set {key}: cpu."
        )
