"""Tests for dashrepro.grading.batch: grade_batch's worker pool (order, threads, signal and
hard timeouts, dead workers, the memory limit)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest
from grading_support import TOWER, TRICKY_PAIRS

from dashrepro.grading import grade_batch


def _strip_seconds(results):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in results]


# --------------------------------------------------------------------------- grade_batch


def test_grade_batch_matches_in_process_and_keeps_order():
    pairs = TRICKY_PAIRS[:40]
    responses = [p[0] for p in pairs] * 3
    golds = [p[1] for p in pairs] * 3
    batch = grade_batch(responses, golds, workers=2, chunk_size=7)
    serial = grade_batch(responses, golds, workers=0)
    assert _strip_seconds(batch) == _strip_seconds(serial)
    assert [r["correct"] for r in batch] == [p[2] for p in pairs] * 3
    assert all(r["seconds"] >= 0 for r in batch)


def test_grade_batch_order_with_distinct_answers():
    n = 500
    responses = [f"step {i}... so $\\boxed{{{i}}}$" for i in range(n)]
    golds = [str(i if i % 3 else i + 1) for i in range(n)]
    res = grade_batch(responses, golds, workers=2)
    assert [r["extracted"] for r in res] == [str(i) for i in range(n)]
    assert [r["correct"] for r in res] == [bool(i % 3) for i in range(n)]


def test_grade_batch_from_thread():
    responses = [r"\boxed{\frac{1}{2}}", r"\boxed{3}", "no box"] * 10
    golds = ["0.5", "4", "1"] * 10
    box = {}
    th = threading.Thread(target=lambda: box.update(res=grade_batch(responses, golds)))
    th.start()
    th.join(timeout=60)
    assert not th.is_alive()
    assert [r["correct"] for r in box["res"]] == [True, False, False] * 10
    assert [r["path"] for r in box["res"]] == ["math_verify", "math_verify", "no_boxed"] * 10


def test_grade_batch_tower_signal_timeout_within_hard_timeout():
    responses = [r"\boxed{1}", TOWER, r"\boxed{2}"]
    t0 = time.perf_counter()
    res = grade_batch(responses, ["1", "1", "2"], workers=2, item_timeout_s=10.0)
    elapsed = time.perf_counter() - t0
    assert [r["path"] for r in res] == ["math_verify", "timeout", "math_verify"]
    assert [r["correct"] for r in res] == [True, False, True]
    assert res[1]["seconds"] < 10.0
    assert elapsed < 10.0 + 8.0  # hard timeout + generous worker start-up


def test_grade_batch_hard_timeout_kills_stuck_worker():
    # The signal timeout is set far beyond the hard timeout, which is the situation of
    # an item the SIGALRM cannot stop: the parent must kill and replace the worker.
    responses = [r"\boxed{1}", TOWER, r"\boxed{2}", r"\boxed{3}", r"\boxed{4}"]
    golds = ["1", "1", "2", "3", "5"]
    t0 = time.perf_counter()
    res = grade_batch(responses, golds, workers=1, item_timeout_s=2.0, timeout_s=60, chunk_size=5)
    elapsed = time.perf_counter() - t0
    assert [r["path"] for r in res] == ["math_verify", "timeout"] + ["math_verify"] * 3
    assert [r["correct"] for r in res] == [True, False, True, True, False]
    assert "hard timeout" in res[1]["error"]
    assert 2.0 <= res[1]["seconds"] < 6.0
    assert elapsed < 2.0 + 10.0


def _grade_with_one_worker_killed(max_crash_retries: int, tower_timeout: int, kill_after: float):
    """Grade 4 towers + 40 integers on 2 workers; SIGKILL one worker `kill_after` s after
    both exist. Start-up takes < 1 s and each worker then spends `tower_timeout` s on each
    of its two towers, so the kill lands in the middle of an item."""
    responses = [TOWER] * 4 + [f"\\boxed{{{i}}}" for i in range(40)]
    golds = ["1"] * 4 + [str(i) for i in range(40)]
    killed = []

    def killer():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            procs = [p for p in mp.active_children() if p.name == "grader" and p.is_alive()]
            if len(procs) == 2:
                time.sleep(kill_after)
                if procs[0].is_alive():
                    os.kill(procs[0].pid, signal.SIGKILL)
                    killed.append(procs[0].pid)
                return
            time.sleep(0.05)

    th = threading.Thread(target=killer)
    th.start()
    res = grade_batch(
        responses,
        golds,
        workers=2,
        timeout_s=tower_timeout,
        chunk_size=2,
        max_crash_retries=max_crash_retries,
    )
    th.join()
    assert killed, "the killer thread never found two workers"
    assert all(r is not None for r in res)
    assert [r["correct"] for r in res[4:]] == [True] * 40
    assert [r["extracted"] for r in res[4:]] == [str(i) for i in range(40)]
    return res


def test_grade_batch_worker_killed_mid_batch_loses_nothing():
    # The interrupted item is retried on a fresh worker (max_crash_retries=1).
    res = _grade_with_one_worker_killed(max_crash_retries=1, tower_timeout=2, kill_after=2.0)
    assert [r["path"] for r in res[:4]] == ["timeout"] * 4


def test_grade_batch_worker_death_without_retry_is_error():
    res = _grade_with_one_worker_killed(max_crash_retries=0, tower_timeout=4, kill_after=3.0)
    paths = [r["path"] for r in res[:4]]
    assert sorted(paths) == ["error", "timeout", "timeout", "timeout"]
    err = res[paths.index("error")]
    assert err["error"] == "worker process died" and err["correct"] is False


def test_grade_batch_edge_cases():
    assert grade_batch([], []) == []
    with pytest.raises(ValueError):
        grade_batch(["a"], [])
    res = grade_batch(["no box", "none"], ["1", "2"])  # nothing to send to workers
    assert [r["path"] for r in res] == ["no_boxed", "no_boxed"]


def test_an_answer_past_the_workers_memory_limit_is_a_grader_error_and_the_worker_goes_on():
    """Parsing the 1 MB box peaks near 255 MB; under a 0.2 GiB address-space limit it raises
    MemoryError in the worker: recorded on path "error" (the exact rule's verdict), and the
    next answer in the same worker is graded as usual. Without a limit it runs to the timeout."""
    from dashrepro.grading.hostile import HOSTILE_ANSWERS

    responses = [HOSTILE_ANSWERS["a 1 MB box"][0], r"\boxed{2}"]
    results = grade_batch(responses, ["1", "2"], workers=1, chunk_size=2, memory_gib=0.2)
    assert results[0]["path"] == "error" and not results[0]["correct"]
    assert results[0]["error"] == "memory limit reached while grading"
    assert results[1]["path"] == "math_verify" and results[1]["correct"]
