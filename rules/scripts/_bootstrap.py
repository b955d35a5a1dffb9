"""Shared start-up for rule scripts: make ``src/`` importable and send all output to the rule's log.

This checkout's ``src`` goes first on ``sys.path``, so a rule never runs another checkout's
code. ``setup`` stops a job whose input is not the file its maker wrote and removes the
provenance records of the job's outputs (again if it fails); ``run`` writes every output's
record once ``main`` has returned (docs/extending.md shows a script)::

    from _bootstrap import run, setup

    def main(snakemake):
        log = setup(snakemake)   # then the rule's work: a thin call into src/dashrepro

    if __name__ == "__main__":
        run(main, snakemake)
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
sys.path[:] = [str(SRC), *(entry for entry in sys.path if entry != str(SRC))]

if os.environ.get("DASHREPRO_JOB_SERVER"):
    # A local run's fork server has the libraries loaded: the job runs there, in a child that
    # takes this process's streams (dashrepro.job_server); this process waits for its status.
    from dashrepro.job_server import delegate

    status = delegate(sys.argv[0])
    if status is not None:
        os._exit(status)


def redirect_output(log_path: Path) -> int:
    """Point this process's stdout and stderr *file descriptors* at the rule's log (emptied
    first), so that everything lands there: Python's own output, warnings, tracebacks, and
    whatever child processes (accelerate's workers, vLLM, DeepSpeed, CUDA) write; on a cluster
    the SLURM log then holds only the executor's lines. Returns a descriptor of the original
    stderr, where a failure is reported too."""
    sys.stdout.flush()
    sys.stderr.flush()
    console = os.dup(2)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o666)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return console


#: The original stderr once ``setup`` has sent all output to the log (see ``to_console``).
CONSOLE = 2
#: The job's inputs with their sha256, as ``setup`` checked them (``run`` records them).
CHECKED_INPUTS = None


def to_console(text: str) -> None:
    """Write ``text`` where the user runs Snakemake (a target whose point is what it prints)."""
    os.write(CONSOLE, (text.rstrip("\n") + "\n").encode())


def pin_threads(n_threads: int) -> None:
    """Give torch (and numpy's BLAS) ``n_threads`` threads, never fewer when the machine is
    busy (``numerics.FIXED_THREADING``), without importing torch here.

    The variables are read when those libraries load, so a job that imports torch later (and
    every process it starts) gets the job's count (torch caps it at the machine's cores); only a
    torch already loaded needs the call.
    Importing torch costs about 3 s, a large share of a grading, selection or table job, which
    never use it.
    """
    from dashrepro.numerics import FIXED_THREADING, THREAD_VARIABLES

    for name in THREAD_VARIABLES:
        os.environ[name] = str(n_threads)
    os.environ.update(FIXED_THREADING)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n_threads)


def setup(snakemake, threads: int | None = None) -> logging.Logger:
    """Send all output to the rule's ``log:`` file, pin the floating-point kernels to the
    config's ``cpu_kernels`` and the thread count to the job's."""
    log_path = Path(str(snakemake.log[0]))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    global CONSOLE
    console = CONSOLE = redirect_output(log_path)
    logger = logging.getLogger(snakemake.rule)
    logger.setLevel(logging.INFO)
    logger.handlers.clear()
    handler = logging.StreamHandler(sys.stderr)  # the log file, through file descriptor 2
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    logger.addHandler(handler)

    from dashrepro.provenance import discard_records

    outputs = [str(path) for path in snakemake.output]
    discard_records(outputs)  # records of a previous, killed attempt

    def log_uncaught(exc_type, exc, tb):
        # A failing rule leaves its reason in its own log file, not only in Snakemake's output.
        message = "".join(traceback.format_exception(exc_type, exc, tb)).rstrip()
        logger.error("rule %s failed:\n%s", snakemake.rule, message)
        # ... and on the console, so that the reason is where the user looks first.
        os.write(console, f"rule {snakemake.rule} failed ({log_path}):\n{message}\n".encode())
        # Snakemake deletes the outputs of a failed job; their records must go with them.
        discard_records(outputs)

    sys.excepthook = log_uncaught
    # Before any work: an input that is not the file its maker wrote stops the job, named.
    from dashrepro.provenance.job import check_inputs

    global CHECKED_INPUTS
    CHECKED_INPUTS = check_inputs(snakemake)
    n_threads = max(1, int(threads or snakemake.threads))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from dashrepro.numerics import pin_kernels

    # Before torch loads: the kernels it and MKL pick are fixed then (dashrepro.numerics).
    pin_kernels((getattr(snakemake, "config", None) or {}).get("cpu_kernels"))
    pin_threads(n_threads)
    logger.info(
        "rule %s wildcards %s threads %s", snakemake.rule, dict(snakemake.wildcards), n_threads
    )
    return logger


def named_files(namedlist) -> dict[str, list[str]]:
    """A Snakemake input/output list as ``{name: [paths]}`` (``provenance.job.named_files``)."""
    from dashrepro.provenance.job import named_files as named

    return named(namedlist)


def run(main, snakemake) -> None:
    """Run a rule script's ``main(snakemake)``, then record provenance for each of its outputs."""
    from dashrepro.provenance.job import record_job, utc_now

    started = utc_now()
    extra = main(snakemake)
    record_job(snakemake, started_utc=started, extra=extra, inputs=CHECKED_INPUTS)
