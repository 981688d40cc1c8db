"""The memory settings of a Covercast process: the C allocator's, and the garbage
collector's young generation.

Rule of this module: process-wide memory settings, applied once at start; nothing else.

The geometry works in whole-array passes that allocate and free numpy temporaries of a few
hundred kilobytes to tens of megabytes many times per computation. With glibc's defaults each
of those above the (dynamic) mmap threshold is mapped and unmapped, and the top of the heap is
trimmed back to the system as soon as 128 KiB are free there, so the same memory is faulted
in again page by page on every pass. Measured on the benchmark scenes (bench/RESULTS.md): a
100-token / 100-wall full matrix 135 -> 100 ms CPU, 200 tokens / 5,000 walls 780 -> 700 ms,
one move at 100 tokens / 1,000 walls 9.6 -> 9.0 ms. The price: up to TRIM_THRESHOLD bytes
freed at the top of the heap stay with the process instead of going back to the system.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import os

log = logging.getLogger("covercast.memory")

#: Blocks at least this large are still mapped on their own (a whole-scene snapshot).
MMAP_THRESHOLD = 256 * 1024 * 1024
#: Free memory at the top of the heap is given back to the system beyond this.
TRIM_THRESHOLD = 1024 * 1024 * 1024
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
#: Set to 0 to keep the C library's defaults.
ENV = "COVERCAST_TUNE_MALLOC"

_applied: bool | None = None


def tune_allocator() -> bool:
    """Apply the settings above once per process (glibc only; elsewhere, or with
    COVERCAST_TUNE_MALLOC=0, nothing changes). Returns whether they are in force."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get(ENV, "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # not glibc: its defaults are not the ones measured above
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _applied = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                    and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    if not _applied:
        log.warning("mallopt refused the allocator settings; keeping the defaults")
    return _applied


#: Net allocations of tracked objects before a collection of the youngest generation
#: (Python's default: 700). A move allocates a few thousand short-lived ones (pair tuples,
#: lists of annotations), so with the default a young collection ran every move or two, and
#: in about 2 moves of 100 one of ~1 ms fell inside the move (100 tokens, 1,000 walls, 50
#: subscribers) and set the p99. With this threshold none fell in 100 moves; over four paired
#: end-to-end runs the p99 was 9.2-11.3 ms against 9.7-12.6 with the default, the p50 the
#: same. Long-lived objects are frozen after heavy calls (server/app.py, `settle_heap`), so
#: what a young collection walks is what a few moves left alive; cyclic garbage among them
#: waits a little longer to be freed.
GC_GEN0 = 20_000
#: Another gen-0 threshold, or 0 to keep Python's.
GC_ENV = "COVERCAST_GC_GEN0"

_collector: int | None = None


def tune_collector() -> int:
    """Set the young generation's threshold once per process (GC_GEN0, or COVERCAST_GC_GEN0;
    0 keeps Python's, as does a value that is not a whole number). Returns the threshold in
    force."""
    global _collector
    if _collector is not None:
        return _collector
    wanted = os.environ.get(GC_ENV, str(GC_GEN0))
    try:
        gen0 = int(wanted)
        if gen0 < 0:
            raise ValueError(wanted)
    except ValueError:
        log.warning("%s=%r is not a whole number of objects; keeping Python's threshold",
                    GC_ENV, wanted)
        gen0 = 0
    if gen0:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(gen0, gen1, gen2)
    _collector = gc.get_threshold()[0]
    return _collector


def tune_process() -> tuple[bool, int]:
    """Both settings of this module: whether the allocator's are in force, and the
    collector's young-generation threshold."""
    return tune_allocator(), tune_collector()
