"""A fork server that starts local rule jobs with torch, transformers and peft already imported.

On a laptop most of a small job's time is imports: torch, transformers and peft take about
7 s on a 2-core machine, and the default DAG runs about 190 jobs. Snakemake's ``onstart``
starts one server per local run (``start``); it imports those libraries once and listens on
a Unix socket in a private folder. A rule script's ``_bootstrap`` hands its job to the server
(``delegate``): the server forks, the child takes the script's stdin, stdout, stderr, working
folder, environment and arguments, and runs the script exactly as ``python script.py`` would,
then reports its exit status. Where the server is absent or declines (another interpreter, other
CPU kernels), the script runs in its own process as before. The stdlib's own forkserver serves
only the process that started it, which Snakemake's job processes are not.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

from dashrepro.numerics import FIXED_THREADING, KERNEL_VARIABLES, THREAD_VARIABLES

#: Where a job finds the server (its socket path); set by ``start``, inherited by jobs.
ADDRESS_VARIABLE = "DASHREPRO_JOB_SERVER"
#: Set (to anything but empty) in Snakemake's environment: no server, every job its own process.
OFF_VARIABLE = "DASHREPRO_NO_JOB_SERVER"
#: A run of fewer jobs than this starts no server: its imports would cost more than they save.
MIN_JOBS = 3
#: Imported once by the server: what most jobs spend their start-up on.
PRELOAD = (
    "numpy",
    "pandas",
    "pyarrow.parquet",
    "torch",
    "transformers",
    "peft",
    "math_verify",
    "snakemake.script",
)
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _send(connection: socket.socket, message: dict) -> None:
    connection.sendall(json.dumps(message).encode() + b"\n")


def _receive(stream) -> dict | None:
    line = stream.readline()
    return json.loads(line) if line else None


# --- the job's side ----------------------------------------------------------------------


def delegate(script: str) -> int | None:
    """Run ``script`` (this process's own ``sys.argv[0]``) in a child of the server and return
    its exit status; None where no server takes it, and the caller runs it itself."""
    address = os.environ.get(ADDRESS_VARIABLE)
    if not address:
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(address)
        socket.send_fds(connection, [b"J"], [0, 1, 2])
        _send(
            connection,
            {
                "argv": [os.path.abspath(script), *sys.argv[1:]],
                "cwd": os.getcwd(),
                "env": dict(os.environ),
                "executable": os.path.realpath(sys.executable),
            },
        )
        stream = connection.makefile("rb")
        reply = _receive(stream)
    except OSError:
        connection.close()
        return None
    if reply is None or "pid" not in reply:
        connection.close()
        return None  # declined (or the server went away): run here
    child = reply["pid"]
    for number in FORWARDED_SIGNALS:
        # Snakemake stops a job by signalling its process: the work is the child's.
        signal.signal(number, lambda received, _frame: os.kill(child, received))
    try:
        status = _receive(stream)
    except OSError:
        status = None
    if status is None:
        os.write(2, f"job process {child} ended without an exit status\n".encode())
        return 1
    return int(status["exit"])


# --- the server's side -------------------------------------------------------------------


def _loaded_values() -> dict[str, str | None]:
    # Read by the CPU libraries when they load: a job is forked only where its values are the
    # server's (dashrepro.numerics); the thread counts are set again in each job.
    return {name: os.environ.get(name) for name in KERNEL_VARIABLES}


def _refusal(request: dict, loaded: dict[str, str | None]) -> str | None:
    if request["executable"] != os.path.realpath(sys.executable):
        return f"another interpreter ({request['executable']})"
    for name, value in loaded.items():
        if request["env"].get(name) != value:
            return f"{name} is {request['env'].get(name)!r}, the server loaded {value!r}"
    return None


def _watch_for_the_job_process(connection: socket.socket) -> None:
    """Die with the job's own process: if it is killed (kill -9 included), so is its work."""
    import threading

    def watch() -> None:
        try:
            connection.recv(1)
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def _run_script(argv: list[str]) -> int:
    """What ``python argv[0] argv[1:]`` does after start-up: run it as ``__main__``, with an
    uncaught exception reported by ``sys.excepthook`` (the script's own, if it set one)."""
    import runpy

    sys.argv = list(argv)
    try:
        runpy.run_path(argv[0], run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, int | None):
            print(stop.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the interpreter's own handling of an uncaught one
        kind, error, trace = sys.exc_info()
        while trace is not None and trace.tb_frame.f_code.co_filename != argv[0]:
            trace = trace.tb_next  # runpy's frames: a script run by python has none above it
        if trace is not None:
            error.__traceback__ = trace
        sys.excepthook(kind, error, error.__traceback__)
        code = 1
    return code


def _serve_one(connection: socket.socket, loaded: dict, base_path: list[str], log) -> None:
    """In the forked child: become the job described on ``connection``, run it, report, exit."""
    _, fds, _, _ = socket.recv_fds(connection, 1, 3)
    stream = connection.makefile("rb")
    request = _receive(stream)
    refusal = _refusal(request, loaded)
    if refusal or len(fds) != 3:
        log(f"declined {request['argv'][0]}: {refusal or 'no standard streams'}")
        _send(connection, {"declined": refusal})
        os._exit(0)
    log(f"pid {os.getpid()}: {os.path.basename(request['argv'][0])}")
    _send(connection, {"pid": os.getpid()})
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    for number in (signal.SIGCHLD, *FORWARDED_SIGNALS):
        signal.signal(number, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.pop(ADDRESS_VARIABLE, None)  # the job's own children start as usual
    sys.path[:] = [os.path.dirname(request["argv"][0]), *base_path]
    threads = request["env"].get("OMP_NUM_THREADS", "")
    if threads.isdigit() and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(threads))  # what torch reads when it loads
    import random

    random.seed()  # a fresh process draws its own seed; a fork would share the server's
    _watch_for_the_job_process(connection)
    code = _run_script(request["argv"])
    import atexit
    import threading

    threading._shutdown()  # what the interpreter does at exit: join the job's threads,
    atexit._run_exitfuncs()  # then run its exit handlers
    sys.stdout.flush()
    sys.stderr.flush()
    _send(connection, {"exit": code})
    os._exit(code)


def serve(address: str, parent: int, log_path: str) -> None:
    """Import ``PRELOAD``, then fork a child per connection until ``parent`` (Snakemake) ends;
    one line per job in ``log_path``."""
    import importlib

    log_file = open(log_path, "a", buffering=1)  # noqa: SIM115 - open for the server's life

    def log(text: str) -> None:
        log_file.write(f"{time.strftime('%H:%M:%S')} {text}\n")

    started = time.monotonic()
    log(f"started for Snakemake process {parent} ({sys.executable})")
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError as error:
            log(f"not preloaded: {name} ({error})")
    log(f"preloaded in {time.monotonic() - started:.1f} s")
    loaded = _loaded_values()
    base_path = [entry for entry in sys.path[1:] if entry]
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # ``stop``: clean up, below
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address + ".part")
    os.rename(address + ".part", address)  # a job connects to a server that is ready, or none
    listener.listen(64)
    listener.settimeout(1.0)
    try:
        while os.getppid() == parent:
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connection.settimeout(None)
            if os.fork() == 0:
                listener.close()
                try:
                    _serve_one(connection, loaded, base_path, log)
                finally:
                    os._exit(1)
            connection.close()
    finally:
        listener.close()
        for leftover in (address, os.path.dirname(address)):  # the socket, then its folder
            try:
                (os.rmdir if leftover != address else os.unlink)(leftover)
            except OSError:
                pass
        log("stopped")


# --- Snakemake's side --------------------------------------------------------------------


def start(kernels: dict | None, log_path: str) -> tuple[object, str]:
    """Start a server for this Snakemake process; returns (its process, its socket path).

    The jobs find it through ``ADDRESS_VARIABLE`` in this process's environment. It loads the
    libraries with the config's ``cpu_kernels`` and one thread (each job sets its own count)."""
    import subprocess
    import tempfile

    folder = tempfile.mkdtemp(prefix="dashrepro-jobs-")  # mode 0700: this user's jobs only
    address = os.path.join(folder, "server.sock")
    # The jobs set the same kernels themselves (before torch loads, where it is not loaded).
    os.environ.update({name: str(value) for name, value in (kernels or {}).items()})
    env = dict(os.environ)
    env.update({name: "1" for name in THREAD_VARIABLES})
    env.update(FIXED_THREADING)  # read when the libraries load, here, before any job forks
    env["TOKENIZERS_PARALLELISM"] = "false"
    env.pop(ADDRESS_VARIABLE, None)
    src = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    with open(log_path, "ab") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "dashrepro.job_server", address, str(os.getpid()), log_path],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errors,
            start_new_session=True,  # a Ctrl-C reaches the jobs, which stop their own work
        )
    os.environ[ADDRESS_VARIABLE] = address
    return process, address


def stop(process, address: str) -> None:
    """Stop the server ``start`` started (its running jobs are their own processes' work)."""
    import shutil

    os.environ.pop(ADDRESS_VARIABLE, None)
    process.terminate()
    try:
        process.wait(timeout=10)
    except Exception:  # noqa: BLE001 - a server that does not stop is killed
        process.kill()
    shutil.rmtree(os.path.dirname(address), ignore_errors=True)


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), sys.argv[3])
