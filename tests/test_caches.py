"""The bounded caches' eviction (geometry/caches.py): the Core's thread and the thread that
works ahead both fill the caches of geometry and rulesets, so making room must never fail
because the other thread changed a cache meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from geometry.caches import drop_oldest


class _ChangedMeanwhile(dict[Any, Any]):
    """A cache another thread changes while this one looks for its first entry."""

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("dictionary changed size during iteration")


def test_drops_the_entry_put_first() -> None:
    held = {"a": 1, "b": 2, "c": 3}
    drop_oldest(held)
    assert list(held) == ["b", "c"]


def test_an_empty_cache_is_left_as_it_is() -> None:
    held: dict[str, int] = {}
    drop_oldest(held)
    assert held == {}


def test_a_cache_changed_meanwhile_raises_nothing() -> None:
    held = _ChangedMeanwhile(a=1)
    drop_oldest(held)
    assert dict(held) == {"a": 1}


def test_two_threads_filling_one_cache_never_fail() -> None:
    """Two threads put and make room in one small cache, as the Core's and the ahead
    thread do: no error, and the cache stays bounded."""
    held: dict[int, int] = {}
    errors: list[BaseException] = []

    def fill(start: int) -> None:
        try:
            for k in range(start, start + 20_000):
                if len(held) >= 8:
                    drop_oldest(held)
                held[k] = k
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=fill, args=(s,)) for s in (0, 1_000_000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(held) <= 10
