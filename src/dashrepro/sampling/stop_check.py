"""``generate``'s stop check deferred by one step on a GPU: transformers' own, opened to CUDA.

After every decode step HF ``generate`` reads ``unfinished_sequences.max() == 0`` on the host,
which waits for the device to finish the step before the next can be queued: an idle gap per
token. transformers (5.19 to 5.23) ships ``DeferredStopCheck``, which copies the flag without
waiting and reads it a step later (one extra forward, undone before ``generate`` returns), but
turns it on for Apple's MPS only ("we should enable it for cuda if we observe perf gains").
Inside ``deferred_stop_check()`` it runs on CUDA too: the ``hf_compiled`` backend's GPU path.
CPU tensors have no events, so there the check stays synchronous and nothing changes. A static
cache cannot be cropped; ours are reset before reuse (``RESET_BEFORE_REUSE``), so the extra
step's entry, past every row's end, is never read.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

#: Set on a cache that is reset before its next use: a deferred check need not crop it.
RESET_BEFORE_REUSE = "_dashrepro_reset_before_reuse"


def can_defer(device_type: str, cache, cache_is_returned: bool, devices: tuple[str, ...]) -> bool:
    """Whether a ``generate`` call on ``device_type`` with ``cache`` may defer its stop check:
    transformers' own rule (a returned cache must be croppable) on ``devices``, a cache reset
    before reuse counted as not returned."""
    if device_type not in devices:
        return False
    if cache is None or not cache_is_returned or getattr(cache, RESET_BEFORE_REUSE, False):
        return True
    return bool(cache.is_croppable)


@contextmanager
def deferred_stop_check(devices: tuple[str, ...] = ("cuda",)) -> Iterator[bool]:
    """``generate`` calls inside defer their stop check on ``devices``; yields whether this
    transformers has the deferred check at all (without it, the synchronous one runs)."""
    from transformers.generation import utils

    shipped = getattr(utils, "DeferredStopCheck", None)
    if shipped is None:
        yield False
        return

    class Deferred(shipped):
        @staticmethod
        def is_supported(device, cache, cache_is_returned, is_assistant=False) -> bool:
            return not is_assistant and can_defer(device.type, cache, cache_is_returned, devices)

        def __init__(self, input_ids, max_length, cache, cache_is_returned, streamer=None):
            # A cache reset before reuse needs no rollback: transformers then leaves it alone.
            returned = cache_is_returned and not getattr(cache, RESET_BEFORE_REUSE, False)
            super().__init__(input_ids, max_length, cache, returned, streamer)

    utils.DeferredStopCheck = Deferred
    try:
        yield True
    finally:
        utils.DeferredStopCheck = shipped
