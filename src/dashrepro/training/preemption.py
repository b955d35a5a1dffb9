"""Preemption: SIGTERM / SIGUSR1 turned into a flag that the training loop polls between steps.

On a preemption notice the trainer finishes its step, saves a training state and exits with
``PREEMPTED_EXIT_CODE``; Snakemake's ``--retries`` (or SLURM's ``--requeue``) reruns the job,
which resumes from that state.

    with PreemptionGuard() as guard:
        for step in ...:
            ...  # one optimisation step
            if guard.requested:
                save_state(step)
                sys.exit(PREEMPTED_EXIT_CODE)
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

_LOG = logging.getLogger(__name__)

#: Exit code of a trainer that stopped on a preemption notice *after* writing a training state.
#: 75 is ``EX_TEMPFAIL`` (sysexits.h, "temporary failure, retry later"): the job did not fail, it
#: was interrupted and resumes from its newest state when rerun (Snakemake ``--retries``, SLURM
#: ``--requeue``). Distinct from 1 (a crash) and from 128+N (killed by signal N before saving).
PREEMPTED_EXIT_CODE = 75


class PreemptionGuard:
    """Turn SIGTERM / SIGUSR1 into a flag the training loop polls between steps.

    SLURM sends SIGTERM on preemption or at the time limit (then SIGKILL after ``KillWait``,
    30 s by default) and, with ``sbatch --signal=USR1@90``, SIGUSR1 90 s before the end. The
    handlers only record the first signal's name in ``.requested`` (``"SIGTERM"``, ``"SIGUSR1"``
    or None): the loop finishes its step, saves a training state and exits with
    ``PREEMPTED_EXIT_CODE``. Doing the save inside the handler instead could interrupt a
    half-done optimizer step and write an inconsistent state.

    Python lets only the main thread install signal handlers. Entered from another thread, the
    guard does nothing: ``.active`` is False, ``.inactive_reason`` says why, a warning is logged,
    and ``.requested`` stays None. On exit the previous handlers are put back (a handler installed
    outside Python, which ``signal.getsignal`` reports as None, is replaced by ``SIG_DFL``).
    """

    DEFAULT_SIGNALS: tuple[signal.Signals, ...] = tuple(
        getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name)
    )

    def __init__(
        self,
        signals: Iterable[signal.Signals] | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.signals = tuple(self.DEFAULT_SIGNALS if signals is None else signals)
        self.requested: str | None = None
        self.active = False
        self.inactive_reason: str | None = None
        self._log = log or _LOG.warning
        self._previous: dict[signal.Signals, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Keep the handler trivial: it runs between two bytecodes of whatever the main thread is
        # doing, so it must not log, allocate much or take locks.
        if self.requested is None:
            self.requested = signal.Signals(signum).name

    def __enter__(self) -> PreemptionGuard:
        self.requested = None
        if threading.current_thread() is not threading.main_thread():
            self.active = False
            self.inactive_reason = (
                f"not in the main thread ({threading.current_thread().name}); "
                "preemption signals are not caught"
            )
            self._log(f"[resume] PreemptionGuard inactive: {self.inactive_reason}")
            return self
        try:
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        except (ValueError, OSError) as error:  # e.g. an interpreter that forbids it
            self._restore()
            self.active = False
            self.inactive_reason = f"could not install signal handlers: {error}"
            self._log(f"[resume] PreemptionGuard inactive: {self.inactive_reason}")
            return self
        self.active = True
        self.inactive_reason = None
        return self

    def _restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def __exit__(self, *exc_info: object) -> None:
        if self.active:
            self._restore()
            self.active = False
