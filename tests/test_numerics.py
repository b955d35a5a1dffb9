"""Tests for dashrepro.numerics: pinning the configured kernel variables (refused once torch is
loaded), the CPU's model name, and the numerics record of a job."""

from __future__ import annotations

import os
import platform
import sys
from types import SimpleNamespace

import pytest

from dashrepro import numerics
from dashrepro.numerics import (
    FIXED_THREADING,
    KERNEL_VARIABLES,
    THREAD_VARIABLES,
    cpu_model,
    kernel_record,
    pin_kernels,
)


@pytest.fixture
def clean_env(monkeypatch):
    """Every kernel and thread variable unset, and each restored afterwards (also those that
    ``pin_kernels`` sets, which writes ``os.environ`` itself)."""
    for name in (*KERNEL_VARIABLES, *THREAD_VARIABLES, *FIXED_THREADING):
        monkeypatch.setenv(name, "placeholder")  # records the original value (or absence)
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.fixture
def without_torch(clean_env):
    clean_env.delitem(sys.modules, "torch", raising=False)
    return clean_env


def _fake_torch(capability: str = "AVX512", threads: int = 3):
    return SimpleNamespace(
        backends=SimpleNamespace(cpu=SimpleNamespace(get_cpu_capability=lambda: capability)),
        get_num_threads=lambda: threads,
    )


def test_pin_kernels_sets_each_configured_variable_as_a_string(without_torch):
    pin_kernels({"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": 1})
    assert os.environ["ATEN_CPU_CAPABILITY"] == "avx2"
    assert os.environ["MKL_CBWR"] == "AVX2"
    assert os.environ["ONEDNN_MAX_CPU_ISA"] == "1"


@pytest.mark.parametrize("settings", [None, {}])
def test_pin_kernels_without_settings_changes_nothing(without_torch, settings):
    before = dict(os.environ)
    pin_kernels(settings)
    assert dict(os.environ) == before


def test_pin_kernels_refuses_an_unknown_variable_naming_it(without_torch):
    with pytest.raises(ValueError, match=r"cpu_kernels.OMP_NUM_THREADS: not one of \("):
        pin_kernels({"OMP_NUM_THREADS": "4"})  # a thread count is no kernel variable
    assert "OMP_NUM_THREADS" not in os.environ


def test_pin_kernels_refuses_a_change_once_torch_is_loaded(clean_env):
    clean_env.setitem(sys.modules, "torch", _fake_torch())
    with pytest.raises(RuntimeError, match="cpu_kernels.MKL_CBWR: torch is already loaded"):
        pin_kernels({"MKL_CBWR": "AVX2"})
    assert "MKL_CBWR" not in os.environ
    # The value already in force is no change: accepted.
    clean_env.setenv("MKL_CBWR", "AVX2")
    pin_kernels({"MKL_CBWR": "AVX2"})
    assert os.environ["MKL_CBWR"] == "AVX2"


def test_cpu_model_reads_the_model_name_from_cpuinfo(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: X\nmodel name\t: Fancy CPU 9000 @ 3GHz \n")
    monkeypatch.setattr(numerics, "Path", lambda _: cpuinfo)
    assert cpu_model() == "Fancy CPU 9000 @ 3GHz"


@pytest.mark.parametrize("cpuinfo", ["missing", "no model name"])
def test_cpu_model_falls_back_to_platform(monkeypatch, tmp_path, cpuinfo):
    path = tmp_path / "cpuinfo"
    if cpuinfo == "no model name":
        path.write_text("processor\t: 0\nHardware\t: board\n")
    monkeypatch.setattr(numerics, "Path", lambda _: path)
    monkeypatch.setattr(platform, "processor", lambda: "")
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    assert cpu_model() == "riscv64"  # processor() says nothing: the machine
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    assert cpu_model() == "arm"


def test_kernel_record_without_torch_lists_every_variable_and_the_cpu(without_torch):
    without_torch.setattr(numerics, "cpu_model", lambda: "Fancy CPU")
    without_torch.setenv("MKL_CBWR", "AVX2")
    without_torch.setenv("OMP_NUM_THREADS", "2")
    record = kernel_record()
    assert record == {
        "ATEN_CPU_CAPABILITY": None, "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": None,
        "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": None, "OPENBLAS_NUM_THREADS": None,
        "MKL_DYNAMIC": None, "OMP_DYNAMIC": None, "cpu": "Fancy CPU",
    }  # fmt: skip


def test_kernel_record_with_torch_loaded_adds_its_capability_and_threads(clean_env):
    clean_env.setitem(sys.modules, "torch", _fake_torch("AVX2", 5))
    clean_env.setattr(numerics, "cpu_model", lambda: "Fancy CPU")
    record = kernel_record()
    assert record["aten_cpu_capability"] == "AVX2" and record["torch_threads"] == 5
    assert set(record) == {*KERNEL_VARIABLES, *THREAD_VARIABLES, *FIXED_THREADING, "cpu",
                           "aten_cpu_capability", "torch_threads"}  # fmt: skip


def test_kernel_record_of_the_real_torch_names_a_capability(clean_env):
    torch = pytest.importorskip("torch")  # now in sys.modules, as in a job that loaded it
    record = kernel_record()
    assert record["aten_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert record["torch_threads"] == torch.get_num_threads() >= 1
    assert isinstance(record["cpu"], str) and record["cpu"]
