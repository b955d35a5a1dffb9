"""The fork server: a rule script's job runs in a child of it, as the script would run alone.

Each test starts a script the way Snakemake does (``python script.py``); the script imports the
rules' real ``_bootstrap``, which hands the job to the server when one is announced.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dashrepro import job_server

REPO_ROOT = Path(__file__).resolve().parents[1]
KERNELS = {"ATEN_CPU_CAPABILITY": "avx2"}

HEADER = f"""\
import os, sys
PRELOADED = "torch" in sys.modules  # before anything here imports it
sys.path.insert(0, {str(REPO_ROOT / "rules" / "scripts")!r})
import _bootstrap  # hands the job to the server, if there is one
"""


def wait_for(condition, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def alive(pid) -> bool:
    """Whether process ``pid`` runs (a zombie that no one has reaped yet does not)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server started as Snakemake's onstart starts it, this test process as its parent."""
    saved = dict(os.environ)
    log = tmp_path_factory.mktemp("server") / "job_server.log"
    process, address = job_server.start(KERNELS, str(log))
    env = dict(os.environ)
    os.environ.clear()
    os.environ.update(saved)  # the announcement and the kernels are for the jobs below only
    assert wait_for(lambda: os.path.exists(address)), log.read_text()
    yield env, log
    job_server.stop(process, address)


def run_script(tmp_path: Path, body: str, env: dict, *args: str, **kwargs):
    script = tmp_path / "job.py"
    script.write_text(HEADER + textwrap.dedent(body))
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_a_job_runs_in_a_forked_child_with_the_callers_streams_folder_and_environment(
    server, tmp_path
):
    env, log = server
    body = """
        import torch
        print("preloaded", PRELOADED, "pid", os.getpid(), "cwd", os.getcwd(), "argv", sys.argv[1:])
        print("mark", os.environ["MARK"], "threads", torch.get_num_threads())
        print("announced", "DASHREPRO_JOB_SERVER" in os.environ)
        print("on stderr", file=sys.stderr)
        sys.exit(3)
    """
    job = run_script(tmp_path, body, dict(env, MARK="m1", OMP_NUM_THREADS="2"), "a", "b")
    out, err = job.communicate(timeout=120)
    assert job.returncode == 3, err
    assert "preloaded True" in out  # the libraries were imported before the script ran
    assert f"cwd {tmp_path}" in out and "argv ['a', 'b']" in out
    assert "mark m1 threads 2" in out  # the caller's environment, its thread count
    assert "announced False" in out  # the job's own children start as usual
    assert f"pid {job.pid}" not in out  # the work ran in another process ...
    child = int(out.split("pid ")[1].split()[0])
    assert f"pid {child}: job.py" in log.read_text()  # ... the server's child
    assert err.strip() == "on stderr"


def test_an_uncaught_exception_is_reported_as_python_reports_it(server, tmp_path):
    env, _ = server
    job = run_script(tmp_path, 'raise ValueError("boom")\n', env)
    _, err = job.communicate(timeout=120)
    assert job.returncode == 1
    assert err.splitlines()[-1] == "ValueError: boom"
    assert "job.py" in err and "runpy" not in err


def test_a_job_whose_kernels_differ_from_the_servers_runs_in_its_own_process(server, tmp_path):
    env, log = server
    body = 'print("preloaded", PRELOADED, "pid", os.getpid())\n'
    job = run_script(tmp_path, body, dict(env, ATEN_CPU_CAPABILITY="default"))
    out, _ = job.communicate(timeout=120)
    assert job.returncode == 0
    assert out.split() == ["preloaded", "False", "pid", str(job.pid)]
    assert "declined" in log.read_text() and "ATEN_CPU_CAPABILITY is 'default'" in log.read_text()


def test_a_signal_to_the_job_process_reaches_the_work(server, tmp_path):
    env, _ = server
    body = """
        import signal, time
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
        print("ready", flush=True)
        time.sleep(60)
    """
    job = run_script(tmp_path, body, env)
    assert job.stdout.readline().strip() == "ready"
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=30) == 7


def test_killing_the_job_process_kills_its_work(server, tmp_path):
    env, _ = server
    body = """
        import time
        print(os.getpid(), flush=True)
        time.sleep(60)
        open("survived", "w").close()
    """
    job = run_script(tmp_path, body, env)
    child = int(job.stdout.readline())
    assert child != job.pid
    job.kill()  # kill -9: nothing can be forwarded
    job.wait(timeout=30)
    assert wait_for(lambda: not alive(child), 30)
    assert not (tmp_path / "survived").exists()


def test_the_server_stops_when_snakemake_ends_without_stopping_it(tmp_path):
    program = f"""
        import os, sys, time
        sys.path.insert(0, {str(REPO_ROOT / "src")!r})
        from dashrepro import job_server
        process, address = job_server.start(None, {str(tmp_path / "log")!r})
        print(process.pid, address, flush=True)
        os._exit(0)  # killed: no onsuccess, no onerror
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)], capture_output=True, text=True, check=True
    ).stdout
    pid, address = out.split()
    assert wait_for(lambda: not alive(pid), 90)
    assert not Path(address).parent.exists()  # the socket and its folder


def test_without_an_announced_server_a_job_runs_in_its_own_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != job_server.ADDRESS_VARIABLE}
    job = run_script(tmp_path, 'print("pid", os.getpid())\n', env)
    out, _ = job.communicate(timeout=120)
    assert out.split() == ["pid", str(job.pid)]
