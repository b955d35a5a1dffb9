"""The backends registry: one answer to where a backend runs and what its jobs need, asked by
the settings, the samplers and the workflow's resources."""

from __future__ import annotations

import importlib

import pytest

from dashrepro.sampling.backends import (
    BACKENDS,
    CPU_ENVIRONMENT,
    GPU_ENVIRONMENT,
    environment,
    job_device,
    needs_gpu,
)


def test_each_backend_names_classes_that_exist():
    for spec in BACKENDS.values():
        if spec.name == "vllm":
            continue  # vllm's module imports without vllm, but its engine needs .venv-vllm
        module = importlib.import_module(spec.module)
        assert hasattr(module, spec.sampler) and hasattr(module, spec.rollout_sampler)
    vllm = importlib.import_module(BACKENDS["vllm"].module)
    assert hasattr(vllm, "VLLMSampler") and hasattr(vllm, "VLLMRolloutSampler")


def test_every_rollout_sampler_has_the_one_constructor_and_options_are_checked(tmp_path):
    """The rollout role is one name (``RolloutSampler``) built one way: (tokenizer, policy,
    RolloutOptions), so a misspelt option fails where it is written, naming it."""
    import inspect

    from dashrepro.sampling import RolloutOptions, make_rollout_sampler

    for spec in BACKENDS.values():
        assert spec.rollout_sampler.endswith("RolloutSampler"), spec
        cls = getattr(importlib.import_module(spec.module), spec.rollout_sampler)
        parameters = list(inspect.signature(cls.__init__).parameters)
        assert parameters == ["self", "tokenizer", "policy", "options"], (spec.name, parameters)
    with pytest.raises(TypeError, match="precison"):
        RolloutOptions(base_model="base", adapter_dir=tmp_path, precison="bf16")
    with pytest.raises(TypeError, match="must be a RolloutOptions, not dict"):
        make_rollout_sampler("hf", None, None, {"base_model": "base"})
    made = make_rollout_sampler("hf", "tok", None, RolloutOptions("base", tmp_path))
    assert type(made).__name__ == BACKENDS["hf"].rollout_sampler and made.tokenizer == "tok"


def test_hf_runs_where_told_and_vllm_only_on_cuda():
    assert job_device("hf") == "cpu" and not needs_gpu("hf")
    assert needs_gpu("hf", "cuda") and needs_gpu("hf_compiled", "cuda")
    assert job_device("vllm") == "cuda" and needs_gpu("vllm")
    with pytest.raises(ValueError, match="'vllm' runs on \\('cuda',\\), not on 'cpu'"):
        job_device("vllm", "cpu")
    with pytest.raises(ValueError, match="unknown sampling backend 'sglang'"):
        needs_gpu("sglang")
    assert environment(True) == GPU_ENVIRONMENT and environment(False) == CPU_ENVIRONMENT
