"""Long work on one thread that leaves the interpreter lock to the others now and then.

Rule of this module: one context manager, `giving_way()`, for a thread's long stretch of
Python and numpy work off the Core thread (a large frame read ahead, server/ahead.py);
nothing else. It changes nothing the work computes, only when the thread lets go of the
lock.

Why: the geometry makes thousands of small numpy calls, and each lets go of the lock and
takes it back at once. A thread waiting for the lock (the event loop with a frame to read,
the Core thread with a light query) is woken, finds it taken again, and waits again:
CPython's lock is not fair, and a thread that lets go this often is never asked to give it
up. Measured here while a 20,000-wall scene was read and warmed ahead: the Core thread
waited 40-190 ms at a time, and a light scene's cover.query as long. Inside
`giving_way()` the thread sleeps YIELD_S after every YIELD_EVERY_S of its own work (a
trace function on its Python calls tells the time), so a waiting thread gets the lock
within a few milliseconds; the work takes longer by the trace function's cost (about a
third more for that read, 1.3 -> 1.8 s). Not used on the Core thread's slices of a table:
there the cost is the whole table's (a realms subscription at 100 tokens / 1,000 walls took
two to three times as long), and what a waiting query meets is mostly the slice itself.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

#: Seconds of this thread's work between two sleeps, and the length of a sleep.
YIELD_EVERY_S = 0.004
YIELD_S = 0.0002


@contextlib.contextmanager
def giving_way() -> Iterator[None]:
    """Run the block letting other threads have the interpreter lock every YIELD_EVERY_S.
    A tracer already set on this thread (a debugger, coverage) is left alone, and then so
    is the lock."""
    if sys.gettrace() is not None:
        yield
        return
    last = time.perf_counter()

    def polite(frame: FrameType, event: str, arg: Any) -> None:
        # Called at each Python call; returning None traces no lines.
        nonlocal last
        if time.perf_counter() - last >= YIELD_EVERY_S:
            time.sleep(YIELD_S)
            last = time.perf_counter()

    sys.settrace(polite)
    try:
        yield
    finally:
        sys.settrace(None)
