"""A heartbeat for long blocking calls: a log line every few minutes while the call runs.

A generation shard on a cluster (vLLM, 30 problems x 12 samples of up to 38,912 tokens) is one
blocking call that may take an hour; without a line in between, its rule log looks like a hung
job. ``heartbeat`` logs from a daemon thread while the block runs and stops when it returns.

    with heartbeat(log.info, "shard 3/9 (aime2025, 360 requests)", every_s=120):
        samples = sampler.sample(requests, ...)
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

#: Seconds between two lines (the issue's "at least every few minutes").
EVERY_S = 120.0


@contextlib.contextmanager
def heartbeat(log: Callable[[str], object], what: str, every_s: float = EVERY_S) -> Iterator[None]:
    """While the block runs, ``log("<what>: still running after N s")`` every ``every_s``."""
    stop = threading.Event()
    started = time.monotonic()

    def beat() -> None:
        while not stop.wait(every_s):
            log(f"{what}: still running after {time.monotonic() - started:.0f} s")

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
