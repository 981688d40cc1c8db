"""Bounded caches shared by two threads.

Rule of this module: helpers for the module-level caches of geometry and rulesets (kept per
set of walls, per footprint), nothing else. Those caches are read and written by the Core's
thread and by the thread that works ahead on large frames (server/ahead.py warms the scene
it builds), so a step that reads a cache and then changes it must not fail when the other
thread changes it in between.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import MutableMapping, Sequence
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


def changed_positions(values: Sequence[Any], held: Sequence[Any]) -> list[int]:
    """The positions of `values` whose object is not `held`'s at the same position, and
    those past held's end: what a list of derived values built from `held`'s has to build
    afresh (a move changes one creature object; a rules engine adds the moved creatures'
    old states at the end). By identity: an equal value in another object counts as
    changed, never wrongly kept."""
    m = min(len(values), len(held))
    # (compress and map run in C: a generator's loop was 0.1 ms per call at 1,000.)
    return [*itertools.compress(range(m), map(operator.is_not, values[:m], held[:m])),
            *range(m, len(values))]
