"""What a ruleset works out about a pair of creatures under a scene's walls, kept for the
scene's later snapshots.

Rule of this module: a table per scene's walls, terrain, grid, ruleset and options, of
values that depend on two creatures and those alone (line of effect: creatures never stop
it), keyed by the two creature objects' identities. A token's move keeps the wall tuple
and every other creature's object, so after a move only the pairs of the creature that
moved are worked out again. Each entry holds the two objects its key names: an identity
in the table is never a dead object's, reused by a new one. The tables are shared by the
Core's thread and the one that works ahead (server/ahead.py): a lookup or a store is one
dict operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from geometry.caches import drop_oldest
from geometry.kernel import BoolArray, IntArray
from geometry.model import CreatureGeom, SceneGeom

#: An entry: the two creature objects and the value.
Entry = tuple[CreatureGeom, CreatureGeom, Any]


@dataclass(slots=True)
class _Table:
    walls: tuple[Any, ...]
    regions: tuple[Any, ...]
    grid: Any
    rules: Any
    options: Any
    pairs: dict[tuple[int, int], Entry]


#: Per wall tuple (by identity), the tables of the scenes that have it; a few scenes at once
#: (a gm's and a viewer's snapshots of each).
_TABLES: dict[int, list[_Table]] = {}
_SCENES = 8
#: Pairs a table holds at most before it starts again (each holds two creature objects).
PAIRS = 200_000


def table(scene: SceneGeom, rules: Any, options: Any) -> dict[tuple[int, int], Entry]:
    """The table for this scene's walls, terrain and grid, this ruleset and options (a new
    one when any differs)."""
    held = _TABLES.get(id(scene.walls))
    if held is not None and held[0].walls is scene.walls:
        for t in held:
            if (t.rules is rules and t.regions == scene.regions and t.grid == scene.grid
                    and t.options == options):
                return t.pairs
    else:
        held = None
    if held is None:
        if len(_TABLES) >= _SCENES:
            drop_oldest(_TABLES)
        held = _TABLES[id(scene.walls)] = []
    if len(held) >= _SCENES:
        del held[0]
    made = _Table(scene.walls, scene.regions, scene.grid, rules, options, {})
    held.append(made)
    return made.pairs


def forget() -> None:
    """Forget every table (a first subscription's evaluation follows)."""
    _TABLES.clear()


def known(pairs: dict[tuple[int, int], Entry], cs: Sequence[CreatureGeom], ids: Sequence[int],
          a: IntArray, t: IntArray) -> tuple[BoolArray, list[Any]]:
    """Per pair (a[k], t[k]) of creatures cs (ids: their identities): whether the table
    holds it for these two objects, and its value (None where it does not)."""
    got = [pairs.get((ids[i], ids[j])) for i, j in zip(a.tolist(), t.tolist(), strict=True)]
    values = [g[2] if g is not None and g[0] is cs[i] and g[1] is cs[j] else None
              for g, i, j in zip(got, a.tolist(), t.tolist(), strict=True)]
    found = np.array([v is not None for v in values], dtype=bool).reshape(-1)
    return found, values


def remember(pairs: dict[tuple[int, int], Entry], cs: Sequence[CreatureGeom],
             ids: Sequence[int], a: IntArray, t: IntArray, values: Sequence[Any]) -> None:
    """Note the pairs' values (never None) for later snapshots."""
    if len(pairs) + len(a) > PAIRS:
        pairs.clear()
    for i, j, v in zip(a.tolist(), t.tolist(), values, strict=True):
        pairs[(ids[i], ids[j])] = (cs[i], cs[j], v)
