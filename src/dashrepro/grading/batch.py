"""Batch grading in killable worker processes: :func:`grade_batch`.

Extraction runs in the calling process; each boxed answer is graded by
``symbolic._grade_extracted`` (math-verify under its own SIGALRM timeout) in the main thread of a
worker process (``forkserver`` where available, else ``spawn``), and the parent enforces a hard
per-item timeout by killing and replacing a stuck worker. Works from any thread. A calling
*script* needs the ``if __name__ == "__main__":`` guard (the children import the parent's main
module).

    results = grade_batch(responses, golds, workers=2, timeout_s=5.0)
"""

from __future__ import annotations

import math
import multiprocessing as mp
import signal
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import wait as _mp_wait
from typing import Any

from dashrepro.grading.answer_forms import normalise_box
from dashrepro.grading.symbolic import (
    _grade_extracted,
    _result,
    exact_fallback_match,
    extract_last_boxed,
    grade_response,
)

__all__ = ["grade_batch"]


# ---------------------------------------------------------------------------------------
# Batch grading in killable worker processes
# ---------------------------------------------------------------------------------------


def limit_address_space(limit_bytes: int | None) -> None:
    """Cap this process's address space (RLIMIT_AS): an allocation past it raises MemoryError
    here instead of growing until the OOM killer picks a process of the job. Never above the
    hard limit the process was given."""
    if not limit_bytes:
        return
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = int(limit_bytes) if hard == resource.RLIM_INFINITY else min(int(limit_bytes), hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _worker_main(conn, timeout_s: float, memory_bytes: int | None = None) -> None:
    """Worker loop: receive chunks of (index, extracted, gold), send one result per item."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and cleanup
    _grade_extracted("1", "1", timeout_s)  # import math-verify and warm its caches
    limit_address_space(memory_bytes)  # after the imports: they are not an answer's cost
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        for idx, extracted, gold in msg:
            t0 = time.perf_counter()
            try:
                res = _grade_extracted(extracted, gold, timeout_s)
            except Exception as e:  # pragma: no cover - _grade_extracted catches its own
                res = _result(exact_fallback_match(extracted, gold), extracted, "error", 0, repr(e))
            # A flat tuple is cheaper to pickle than the dict; the parent already knows
            # the extracted string.
            conn.send(
                (
                    idx,
                    res["correct"],
                    res["path"],
                    time.perf_counter() - t0,
                    res["error"],
                    res["normalisation"],
                )
            )


class _Slot:
    """One worker process and what it is doing."""

    def __init__(self, ctx, timeout_s: float, memory_bytes: int | None = None):
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=_worker_main,
            args=(child_conn, timeout_s, memory_bytes),
            daemon=True,
            name="grader",
        )
        self.proc.start()
        child_conn.close()
        self.conn = parent_conn
        self.started = time.monotonic()
        self.ready = False
        self.chunk: list[tuple[int, str, str]] | None = None
        self.pos = 0  # results received for the current chunk
        self.item_t0 = 0.0  # when the current item started (parent clock)

    def stop(self, hard: bool) -> None:
        if self.proc.is_alive():
            if hard:
                self.proc.kill()
            else:
                try:
                    self.conn.send(None)
                except (OSError, ValueError):
                    self.proc.kill()
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def _mp_context():
    methods = mp.get_all_start_methods()
    if "forkserver" not in methods:
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    # The fork server imports math-verify once and every worker forks with it loaded, instead
    # of each worker importing it (the default preloads only the main module). It applies to a
    # fork server not yet started.
    context.set_forkserver_preload(["__main__", "math_verify"])
    return context


def grade_batch(
    responses: Sequence[str],
    golds: Sequence[str],
    workers: int = 2,
    item_timeout_s: float = 10.0,
    *,
    timeout_s: float = 5.0,
    chunk_size: int | None = None,
    max_crash_retries: int = 1,
    startup_timeout_s: float = 120.0,
    memory_gib: float | None = None,
) -> list[dict[str, Any]]:
    """Grade ``responses[i]`` against ``golds[i]`` for all i; results in input order.

    ``workers >= 1``: extraction runs in the calling process (cheap, linear); grading runs
    in ``workers`` processes, each item under math-verify's own ``timeout_s`` (SIGALRM, in
    the worker's main thread) and a HARD ``item_timeout_s`` enforced by the parent: a
    worker still on one item after ``item_timeout_s`` (signals cannot interrupt a long
    C-level computation) is SIGKILLed and replaced, the item is recorded with
    ``path="timeout"`` (``correct`` from the exact fallback, ``error="hard timeout"``)
    and the rest of its chunk is re-queued. A worker that dies for another reason (e.g.
    killed from outside, OOM) loses no finished items; its current item is retried up to
    ``max_crash_retries`` times, then recorded with ``path="error"``. Safe to call from
    any thread. ``chunk_size`` items are sent per task (default: up to 64, chosen so each
    worker gets several chunks). ``memory_gib`` caps each worker's address space: an answer
    whose grading allocates past it is recorded with ``path="error"`` (the exact rule's
    verdict), and the worker goes on.

    ``workers == 0`` grades in-process with :func:`grade_response` semantics (main thread
    only, no hard timeout) -- for debugging.
    """
    n = len(responses)
    if len(golds) != n:
        raise ValueError(f"{n} responses but {len(golds)} golds")
    if workers < 0:
        raise ValueError("workers must be >= 0")
    if workers == 0:
        return [grade_response(r, g, timeout_s) for r, g in zip(responses, golds, strict=True)]
    if n == 0:
        return []

    results: list[dict[str, Any] | None] = [None] * n
    todo: list[tuple[int, str, str]] = []
    extracted_of: list[str | None] = [extract_last_boxed(r) for r in responses]
    for i, (ext, gold) in enumerate(zip(extracted_of, golds, strict=True)):
        if ext is None:
            results[i] = _result(False, None, "no_boxed")
        else:
            todo.append((i, ext, str(gold)))
    if not todo:
        return results  # type: ignore[return-value]

    n_workers = min(workers, len(todo))
    if chunk_size is None:
        chunk_size = max(1, min(64, math.ceil(len(todo) / (n_workers * 4))))
    memory_bytes = None if memory_gib is None else int(memory_gib * 2**30)
    limits = _Limits(timeout_s, item_timeout_s, max_crash_retries, startup_timeout_s, memory_bytes)
    pool = _GradingPool(results, extracted_of, limits)
    pool.run(todo, n_workers, chunk_size)
    return results  # type: ignore[return-value]


@dataclass(frozen=True)
class _Limits:
    timeout_s: float  # math-verify's own (SIGALRM) timeout, in the worker
    item_timeout_s: float  # the hard per-item timeout the parent enforces
    max_crash_retries: int
    startup_timeout_s: float
    memory_bytes: int | None = None  # each worker's address-space limit (RLIMIT_AS)


class _GradingPool:
    """The worker processes of one ``grade_batch`` call and the scheduling loop over them.

    ``results`` (shared with the caller) fills in as workers report; a worker over the hard
    timeout is killed and replaced, a crashed worker's item is retried, and the rest of either
    one's chunk goes back to the queue.
    """

    def __init__(self, results: list, extracted_of: list, limits: _Limits) -> None:
        self.results = results
        self.extracted_of = extracted_of
        self.limits = limits
        self.ctx = _mp_context()
        self.slots: list[_Slot] = []
        self.pending: deque[list[tuple[int, str, str]]] = deque()
        self.remaining = 0
        self.crashes: dict[int, int] = {}
        self.startup_failures = 0

    def run(self, todo: list[tuple[int, str, str]], n_workers: int, chunk_size: int) -> None:
        self.pending.extend(todo[k : k + chunk_size] for k in range(0, len(todo), chunk_size))
        self.remaining = len(todo)
        try:
            self.slots.extend(self._new_slot() for _ in range(n_workers))
            while self.remaining > 0:
                deadlines = self._tend_slots()
                if self.remaining <= 0:
                    break
                self._wait(deadlines)
        finally:
            for slot in self.slots:
                slot.stop(hard=self.remaining > 0)

    def _new_slot(self) -> _Slot:
        return _Slot(self.ctx, self.limits.timeout_s, self.limits.memory_bytes)

    def _tend_slots(self) -> list[float]:
        """Replace dead or overdue workers, hand out work; return the pending hard deadlines."""
        now = time.monotonic()
        item_timeout_s = self.limits.item_timeout_s
        deadlines = []
        for k, slot in enumerate(self.slots):
            if not slot.proc.is_alive():
                self._drain(slot)  # keep what it finished before dying
                self._replace(k, hard_timeout=False)
                continue
            if slot.chunk is not None:
                if now - slot.item_t0 > item_timeout_s:
                    self._drain(slot)  # the item may have finished just now
                    if slot.chunk is not None and (
                        time.monotonic() - slot.item_t0 > item_timeout_s
                    ):
                        self._replace(k, hard_timeout=True)
                        continue
                if slot.chunk is not None:
                    deadlines.append(slot.item_t0 + item_timeout_s)
            elif not slot.ready and now - slot.started > self.limits.startup_timeout_s:
                self._replace(k, hard_timeout=False)
                continue
            self._dispatch(slot)
        return deadlines

    def _wait(self, deadlines: list[float]) -> None:
        """Sleep until a worker reports, dies, or the nearest hard deadline (at most 1 s)."""
        wait_s = 1.0
        if deadlines:
            wait_s = min(wait_s, max(0.0, min(deadlines) - time.monotonic()) + 0.005)
        handles = [s.conn for s in self.slots] + [s.proc.sentinel for s in self.slots]
        ready = _mp_wait(handles, timeout=wait_s)
        for slot in self.slots:
            if slot.conn in ready:
                self._drain(slot)
                self._dispatch(slot)

    def _record(self, idx: int, res: dict[str, Any]) -> None:
        if self.results[idx] is None:
            self.remaining -= 1
        self.results[idx] = res

    def _drain(self, slot: _Slot) -> None:
        """Receive everything the worker has sent so far."""
        while True:
            try:
                if not slot.conn.poll():
                    return
                msg = slot.conn.recv()
            except (EOFError, OSError):
                return
            if msg[0] == "ready":
                slot.ready = True
                continue
            idx, correct, path, seconds, error, normalisation = msg
            self._record(
                idx, _result(correct, self.extracted_of[idx], path, seconds, error, normalisation)
            )
            slot.pos += 1
            slot.item_t0 = time.monotonic()
            if slot.chunk is not None and slot.pos >= len(slot.chunk):
                slot.chunk = None

    def _dispatch(self, slot: _Slot) -> None:
        if slot.ready and slot.chunk is None and self.pending:
            chunk = self.pending.popleft()
            slot.chunk, slot.pos = chunk, 0
            slot.item_t0 = time.monotonic()
            slot.conn.send(chunk)

    def _replace(self, k: int, *, hard_timeout: bool) -> None:
        """Kill slot k, settle its current item, re-queue the rest, start a new worker."""
        slot = self.slots[k]
        slot.stop(hard=True)
        if slot.chunk is not None and slot.pos < len(slot.chunk):
            self._settle_current_item(slot, hard_timeout)
        elif not slot.ready:
            self.startup_failures += 1
            if self.startup_failures >= 3:
                raise RuntimeError("grading workers failed to start three times")
        slot.chunk = None
        if self.remaining > 0:
            self.slots[k] = self._new_slot()

    def _settle_current_item(self, slot: _Slot, hard_timeout: bool) -> None:
        idx, ext, gold = slot.chunk[slot.pos]
        rest = slot.chunk[slot.pos + 1 :]
        elapsed = time.monotonic() - slot.item_t0
        ok = exact_fallback_match(normalise_box(ext), normalise_box(gold))
        if hard_timeout:
            self._record(idx, _result(ok, ext, "timeout", elapsed, "hard timeout: worker killed"))
        else:
            self.crashes[idx] = self.crashes.get(idx, 0) + 1
            if self.crashes[idx] > self.limits.max_crash_retries:
                self._record(idx, _result(ok, ext, "error", elapsed, "worker process died"))
            else:
                rest = [slot.chunk[slot.pos], *rest]
        if rest:
            self.pending.appendleft(rest)
