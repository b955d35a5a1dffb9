"""What decides a CPU job's floating-point kernels, pinned from the config and recorded.

PyTorch and the math libraries under it pick their kernels by the CPU's instruction set when
they load: ATen's vectorised ops by ``ATEN_CPU_CAPABILITY`` (default: the best the CPU has),
MKL's BLAS by ``MKL_CBWR`` (its "conditional numerical reproducibility" branch), oneDNN by
``ONEDNN_MAX_CPU_ISA``. Two machines of one kind can therefore round differently, and a small
model trained near a threshold turns rounding into different science. ``pin_kernels`` sets the
configured values (``cpu_kernels`` in workflow_config.yaml) in a job's environment before torch
loads, so every process the job starts sees them; ``kernel_record`` says, in the job's
provenance, what was pinned, the thread counts, the CPU, and the capability ATen chose.

    pin_kernels({"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"})   # before importing torch
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path

#: The variables ``cpu_kernels`` may set (read by ATen, MKL and oneDNN when they load).
KERNEL_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA")
#: The thread counts (``_bootstrap.pin_threads`` sets them to the job's threads).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: No thread count adjusted at run time (set with the counts). Left on, MKL and OpenMP may run a
#: kernel on fewer threads than asked when the machine is busy, and a sum split over fewer
#: threads rounds differently: two runs of one job on one machine then differ in the last bits
#: (the SLURM test's base models did, beside a local run). Intel's reproducibility conditions for
#: MKL ask for both to be FALSE.
FIXED_THREADING = {"MKL_DYNAMIC": "FALSE", "OMP_DYNAMIC": "FALSE"}


def pin_kernels(settings: Mapping[str, str] | None) -> None:
    """Set each configured variable in this process's environment (children inherit it).

    Must run before torch is imported: the libraries read the variables once, when they load.
    """
    for name, value in (settings or {}).items():
        if name not in KERNEL_VARIABLES:
            raise ValueError(f"cpu_kernels.{name}: not one of {KERNEL_VARIABLES}")
        if "torch" in sys.modules and os.environ.get(name) != str(value):
            raise RuntimeError(
                f"cpu_kernels.{name}: torch is already loaded, so setting it now has no effect"
            )
        os.environ[name] = str(value)


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def kernel_record() -> dict:
    """The job's numerics for its provenance: the pinned and thread variables as set (None:
    unset), the CPU, and, where the job loaded torch, the capability ATen dispatches to."""
    names = (*KERNEL_VARIABLES, *THREAD_VARIABLES, *FIXED_THREADING)
    record = {name: os.environ.get(name) for name in names}
    record["cpu"] = cpu_model()
    torch = sys.modules.get("torch")
    if torch is not None:
        record["aten_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
        record["torch_threads"] = torch.get_num_threads()
    return record
