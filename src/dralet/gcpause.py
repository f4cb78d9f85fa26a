"""Cyclic garbage collection paused around bulk work that makes objects without cycles.

Decoding thousands of claim records (recovery at start, a stale-claim pass, a
snapshot) creates hundreds of thousands of small dicts, lists and dataclasses that stay
alive together. Each allocation burst triggers collections that scan every object
alive, so the collector's share grows with the number of claims: with 10,000 records
it doubled the time recovery took (``benchmarks/bench_recovery.py``). Nothing those
paths make is cyclic, so reference counting alone frees all of it; pausing the collector
for their duration loses nothing. A NodePrepareResources or NodeUnprepareResources call
of many claims pauses it too: the cycles its tasks and futures leave are collected once
the call is answered.

The pause is process-wide and nests across threads and tasks: the collector is enabled
again when the last pause ends, and only if it was enabled when the first one began.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["paused"]

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection while the block runs (other pauses may overlap it)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
