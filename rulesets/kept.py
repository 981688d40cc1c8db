"""What a ruleset works out about a pair of creatures under a scene's walls, kept for the
scene's later snapshots.

Rule of this module: a table per scene's walls, terrain, grid, ruleset and options, of
values that depend on two creatures and those alone (line of effect: creatures never stop
it). A token's move keeps the wall tuple and every other creature's object, so after a
move only the pairs of the creature that moved are worked out again, and not even those
when it stands as it stood before (a token moved back): creatures are numbered by state.
A creature object numbered before is found by its identity, without hashing its fields;
the table holds each object it numbers, so an identity is never a dead object's reused
by a new one. The tables are shared by the Core's
thread and the one that works ahead (server/ahead.py): numbers are given under a lock; a
lookup or a store is one dict operation.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from geometry.caches import changed_positions, drop_oldest
from geometry.kernel import BoolArray, IntArray
from geometry.model import CreatureGeom, SceneGeom


@dataclass(slots=True)
class _Table:
    walls: tuple[Any, ...]
    regions: tuple[Any, ...]
    grid: Any
    rules: Any
    options: Any
    #: Per creature object (by identity): the object, held, and its number.
    numbers: dict[int, tuple[CreatureGeom, int]]
    #: Per creature state: its number (objects of one state share it).
    states: dict[CreatureGeom, int]
    #: Per pair of numbers (a << 32 | t): the value.
    values: dict[int, Any]
    #: The last snapshot's creatures and their numbers, with the numbers' dict they are
    #: of (one assignment: either thread reads a whole triple), for the next snapshot to
    #: patch by position.
    last: tuple[dict[int, tuple[CreatureGeom, int]], Sequence[CreatureGeom],
                npt.NDArray[np.int64]] = field(
        default_factory=lambda: ({}, (), np.zeros(0, dtype=np.int64)))


#: Per wall tuple (by identity), the tables of the scenes that have it; a few scenes at once
#: (a gm's and a viewer's snapshots of each).
_TABLES: dict[int, list[_Table]] = {}
_SCENES = 8
#: Pairs a table holds at most, and creature objects it numbers, before it starts again (a
#: token dragged to and fro makes a new object at every step).
PAIRS = 200_000
OBJECTS = 20_000
_LOCK = threading.Lock()


class Kept:
    """One snapshot's view of its table: its creatures' numbers."""

    def __init__(self, table: _Table, cs: Sequence[CreatureGeom]) -> None:
        # The numbers and the values they key are read together: a table that starts
        # again gets new dicts, and a snapshot numbered before stores into the old ones.
        numbers, self._values = table.numbers, table.values
        # Only the creatures that are not the last snapshot's objects at the same
        # positions are looked up (found in C: a loop over a 1,000-creature scene was a
        # fortieth of a walking step).
        held_numbers, held_cs, held = table.last
        if held_numbers is numbers and len(held_cs) == len(cs) and len(cs):
            todo = changed_positions(cs, held_cs)
            number = held.copy()
        else:
            todo = list(range(len(cs)))
            number = np.zeros(len(cs), dtype=np.int64)
        got = [numbers.get(id(cs[k])) for k in todo]
        if any(g is None or g[0] is not cs[k] for g, k in zip(got, todo, strict=True)):
            with _LOCK:
                if len(table.numbers) + len(cs) > OBJECTS:
                    table.numbers, table.states, table.values = {}, {}, {}
                if table.numbers is not numbers:
                    # Started again (here or by the other thread): every creature anew.
                    todo, got = list(range(len(cs))), [None] * len(cs)
                numbers, self._values = table.numbers, table.values
                states = table.states
                for j, k in enumerate(todo):
                    c = cs[k]
                    g = numbers.get(id(c))
                    if g is None or g[0] is not c:
                        g = numbers[id(c)] = (c, states.setdefault(c, len(states)))
                    got[j] = g
        number[todo] = [g[1] for g in got if g is not None]
        table.last = (numbers, cs, number)
        self._number = number

    def _keys(self, a: IntArray, t: IntArray) -> list[int]:
        out: list[int] = ((self._number[a] << 32) | self._number[t]).tolist()
        return out

    def known(self, a: IntArray, t: IntArray) -> tuple[BoolArray, list[Any]]:
        """Per pair (a[k], t[k]) of the snapshot's creatures: whether the table holds it,
        and its value (None where it does not)."""
        values = self._values
        if not values:
            # (A first subscription's table is empty: nothing to look up.)
            return np.zeros(len(a), dtype=bool), [None] * len(a)
        got = list(map(values.get, self._keys(a, t)))
        found = np.fromiter((v is not None for v in got), dtype=bool, count=len(got))
        return found, got

    def remember(self, a: IntArray, t: IntArray, values: Sequence[Any]) -> None:
        """Note the pairs' values (never None) for later snapshots."""
        table = self._values
        if len(table) + len(a) > PAIRS:
            table.clear()
        table.update(zip(self._keys(a, t), values, strict=True))


def table(scene: SceneGeom, rules: Any, options: Any) -> Kept:
    """The snapshot's view of the table for its walls, terrain and grid, this ruleset and
    options (a new table when any differs)."""
    held = _TABLES.get(id(scene.walls))
    if held is not None and held[0].walls is scene.walls:
        for t in held:
            if (t.rules is rules and t.regions == scene.regions and t.grid == scene.grid
                    and t.options == options):
                return Kept(t, scene.creatures)
    else:
        held = None
    if held is None:
        if len(_TABLES) >= _SCENES:
            drop_oldest(_TABLES)
        held = _TABLES[id(scene.walls)] = []
    if len(held) >= _SCENES:
        del held[0]
    made = _Table(scene.walls, scene.regions, scene.grid, rules, options, {}, {}, {})
    held.append(made)
    return Kept(made, scene.creatures)


def forget() -> None:
    """Forget every table (a first subscription's evaluation follows)."""
    _TABLES.clear()
