"""A configured device this machine lacks is named at the job's start, before any model loads."""

from __future__ import annotations

import pytest
import torch

from dashrepro import config_sources
from dashrepro.sampling.devices import MissingDeviceError, check_device, cuda_absence


@pytest.fixture
def no_cuda(monkeypatch):
    """This machine as a CPU-only one, whatever it is: torch built without CUDA."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """What Snakemake's parse records: the overlay set evaluation.device."""
    monkeypatch.setenv(config_sources.VARIABLE, "")
    overlay = str(tmp_path / "exp.yaml")
    config_sources.record(f"workflow_config.yaml + {overlay}", {"evaluation.device": overlay})
    return overlay


def test_cuda_on_a_machine_without_it_names_the_key_the_file_and_what_the_machine_has(
    no_cuda, recorded
):
    with pytest.raises(MissingDeviceError) as info:
        check_device("hf_compiled", "cuda")
    message = str(info.value)
    assert message.startswith(f"evaluation.device: cuda (set in {recorded}), but this machine's ")
    assert f"torch {torch.__version__} is built without CUDA (it has " in message
    assert message.endswith("or set evaluation.device: cpu.")


def test_a_cuda_build_without_a_visible_gpu_says_so(monkeypatch, recorded):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "(CUDA 12.4) finds no CUDA device on this machine" in cuda_absence()
    assert "CUDA_VISIBLE_DEVICES=''" in cuda_absence()


def test_the_cpu_a_gpu_that_is_there_and_vllms_own_device_pass(no_cuda, monkeypatch):
    check_device("hf", "cpu")
    check_device("hf_compiled", "cpu")
    check_device("vllm", "cpu")  # its engine picks its platform (its CPU build: tests/vllm_cpu)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert cuda_absence() is None
    check_device("hf_compiled", "cuda")


def test_the_job_stops_before_any_model_loads(no_cuda, recorded, tmp_path, default_config):
    """``make_generation_sampler`` (both evaluation rules): the check comes first, so a base
    model folder that is not there is never reached."""
    from dashrepro.evaluation.responses import make_generation_sampler

    evaluation = {**default_config["evaluation"], "backend": "hf_compiled", "device": "cuda"}
    with pytest.raises(MissingDeviceError, match=r"evaluation.device: cuda \(set in "):
        make_generation_sampler(tmp_path / "no-model-here", evaluation)
