"""Tests of dashrepro.training.preemption: the preemption guard's signal handling."""

from __future__ import annotations

import os
import signal
import threading

from dashrepro.training.preemption import PREEMPTED_EXIT_CODE, PreemptionGuard


def test_preemption_guard_sets_a_flag_and_restores_handlers():
    calls = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: calls.append(signum))
    previous_term = signal.getsignal(signal.SIGTERM)
    try:
        with PreemptionGuard() as guard:
            assert guard.active and guard.requested is None
            os.kill(os.getpid(), signal.SIGUSR1)
            assert guard.requested == "SIGUSR1"
            os.kill(os.getpid(), signal.SIGTERM)  # caught too; the first signal is kept
            assert guard.requested == "SIGUSR1"
            assert calls == []  # the earlier handler did not run meanwhile
        assert not guard.active
        assert signal.getsignal(signal.SIGTERM) == previous_term
        os.kill(os.getpid(), signal.SIGUSR1)
        assert calls == [signal.SIGUSR1]  # the earlier handler is back
    finally:
        signal.signal(signal.SIGUSR1, previous)

    with PreemptionGuard() as guard:
        os.kill(os.getpid(), signal.SIGTERM)
        assert guard.requested == "SIGTERM"
    assert PREEMPTED_EXIT_CODE == 75


def test_preemption_guard_outside_the_main_thread_is_inactive():
    messages, seen = [], {}
    before = signal.getsignal(signal.SIGUSR1)

    def worker():
        with PreemptionGuard(log=messages.append) as guard:
            seen["active"], seen["reason"] = guard.active, guard.inactive_reason
            seen["handler"] = signal.getsignal(signal.SIGUSR1)

    thread = threading.Thread(target=worker, name="loader")
    thread.start()
    thread.join()
    assert seen["active"] is False
    assert "main thread" in seen["reason"]
    assert seen["handler"] == before
    assert messages and "inactive" in messages[0]
