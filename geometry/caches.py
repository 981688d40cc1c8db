"""Bounded caches shared by two threads.

Rule of this module: helpers for the module-level caches of geometry and rulesets (kept per
set of walls, per footprint), nothing else. Those caches are read and written by the Core's
thread and by the thread that works ahead on large frames (server/ahead.py warms the scene
it builds), so a step that reads a cache and then changes it must not fail when the other
thread changes it in between.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any


def drop_oldest(held: MutableMapping[Any, Any]) -> None:
    """Drop the entry put into `held` first (a full cache making room), if any. When the
    other thread changes the cache between finding that entry and dropping it (a dict's
    iteration then fails), another entry goes next time instead: nothing is raised."""
    try:
        first = next(iter(held))
    except (StopIteration, RuntimeError):
        return
    held.pop(first, None)
