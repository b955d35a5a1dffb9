"""A rule's log holds everything its job writes: Python's output and logging, and what child
processes (accelerate's workers, vLLM, DeepSpeed, CUDA) write to their inherited stdout/stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = """
import subprocess, sys, warnings
from types import SimpleNamespace
sys.path.insert(0, {scripts!r})
from _bootstrap import setup
snakemake = SimpleNamespace(log=[{log!r}], input={{}}, output=[], rule="demo", wildcards={{}}, threads=1)
log = setup(snakemake)
log.info("from the logger")
print("from print", flush=True)
warnings.warn("from warnings")
subprocess.run([sys.executable, "-c", "import sys; print('child stdout'); sys.stderr.write('child stderr')"])
raise RuntimeError("the reason it failed")
"""


def test_the_rule_log_holds_the_jobs_and_its_childrens_output(repo_root, tmp_path):
    log = tmp_path / "logs" / "demo.log"
    log.parent.mkdir()
    log.write_text("a previous attempt's log\n")
    code = SCRIPT.format(scripts=str(repo_root / "rules" / "scripts"), log=str(log))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    text = log.read_text()
    for line in ("from the logger", "from print", "from warnings", "child stdout", "child stderr"):
        assert line in text, line
    assert "a previous attempt" not in text  # each attempt starts its own log
    assert "from print" not in done.stdout and "child stderr" not in done.stderr
    # A failure's reason is in the log and on the console.
    assert "RuntimeError: the reason it failed" in text
    assert "RuntimeError: the reason it failed" in done.stderr and str(log) in done.stderr


THREADS_SCRIPT = """
import sys
from types import SimpleNamespace
sys.path.insert(0, {scripts!r})
from _bootstrap import setup
snakemake = SimpleNamespace(log=[{log!r}], input={{}}, output=[], rule="demo", wildcards={{}}, threads={cores})
setup(snakemake, threads={threads})
loaded_by_setup = "torch" in sys.modules
import torch
open({result!r}, "w").write(f"{{loaded_by_setup}} {{torch.get_num_threads()}}")
"""


def test_setup_pins_the_jobs_threads_without_loading_torch(repo_root, tmp_path):
    # A grading or table job never imports torch; one that does gets the job's thread count.
    # (torch caps a count read from the environment at the machine's cores)
    cores = min(2, os.cpu_count() or 1)
    for threads, expected in (("1", 1), ("None", cores)):
        code = THREADS_SCRIPT.format(
            scripts=str(repo_root / "rules" / "scripts"),
            log=str(tmp_path / "demo.log"),
            threads=threads,
            cores=cores,
            result=str(tmp_path / "result.txt"),
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        # (setup sends stdout to the log, so the answer comes back in a file)
        assert (tmp_path / "result.txt").read_text().split() == ["False", str(expected)]


KERNELS_SCRIPT = """
import json, os, sys
from types import SimpleNamespace
sys.path.insert(0, {scripts!r})
from _bootstrap import setup
snakemake = SimpleNamespace(log=[{log!r}], input={{}}, output=[], rule="demo", wildcards={{}}, threads=1,
                            config={{"cpu_kernels": {kernels!r}}})
setup(snakemake)
import torch
from dashrepro.numerics import kernel_record
open({result!r}, "w").write(json.dumps(kernel_record()))
"""


def test_setup_pins_the_configured_cpu_kernels_before_torch_loads(repo_root, tmp_path):
    # ATen reads ATEN_CPU_CAPABILITY once, when torch loads: "default" is its scalar kernels,
    # which no x86 CPU chooses by itself, so the capability torch reports proves the pin.
    kernels = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
    result = tmp_path / "record.json"
    code = KERNELS_SCRIPT.format(
        scripts=str(repo_root / "rules" / "scripts"),
        log=str(tmp_path / "demo.log"),
        kernels=kernels,
        result=str(result),
    )
    env = {k: v for k, v in os.environ.items() if k not in kernels}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(result.read_text())
    assert record["aten_cpu_capability"] == "DEFAULT"
    assert record["ATEN_CPU_CAPABILITY"] == "default" and record["MKL_CBWR"] == "COMPATIBLE"
    assert record["OMP_NUM_THREADS"] == "1" and record["torch_threads"] == 1
    # No library may drop threads when the machine is busy (a sum over fewer threads rounds
    # differently): the job's threading is fixed.
    assert record["MKL_DYNAMIC"] == "FALSE" and record["OMP_DYNAMIC"] == "FALSE"
    assert record["cpu"]
