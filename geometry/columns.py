"""A scene's creatures as columns of numbers (spaces, reach, elevation, height, centres),
worked out once per snapshot instead of once per reader.

Rule of this module: derived data of frozen snapshots, nothing else. `columns` returns the
same read-only arrays for the same creatures tuple and grid, and builds the arrays of a new
tuple from a recent one when few creatures differ (a token move changes one: its rows are
patched, the other creatures' are copied), so a move costs a few rows, not a pass over
every creature in every reader (the tracer, the rules engine, geometry.incremental).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

import numpy as np

from geometry.caches import changed_positions
from geometry.hex import Footprint, footprint
from geometry.kernel import FloatArray, IntArray
from geometry.model import CreatureGeom, Grid
from geometry.square import creature_centre, space, vertical_side

#: Recent snapshots kept to find one again or patch a new one from (a gm's and a viewer's
#: views of a few scenes).
_KEPT = 8


@dataclass(frozen=True, slots=True)
class Columns:
    """Per creature of `creatures`, in order: its space in pixels (x0, y0, x1, y1: the
    square or hex footprint's bounds), natural reach, elevation and drawn height (feet),
    the side of the cube it occupies for vertical distances (feet), and its centre (on a
    hex grid Foundry's token centre). The arrays are read-only; `index` (id -> position)
    must not be changed either."""

    creatures: tuple[CreatureGeom, ...]
    grid: Grid
    ids: tuple[str, ...]
    index: dict[str, int]
    spaces: FloatArray
    reach: FloatArray
    elev: FloatArray
    tall: FloatArray
    side: FloatArray
    centre: FloatArray


_RECENT: list[Columns] = []

#: The ids of recent creatures tuples (`ids_of`), newest first; replaced in one assignment
#: (the ahead thread reads it too).
_IDS: list[tuple[tuple[CreatureGeom, ...], tuple[str, ...]]] = []
_ID = operator.attrgetter("id")
_MOUNT = operator.attrgetter("mount")


def has_riders(creatures: tuple[CreatureGeom, ...]) -> bool:
    """Whether any of the creatures rides a mount (asked in C: most scenes have none, and a
    loop body per creature of a 1,000-creature scene is not paid for nothing)."""
    return any(map(_MOUNT, creatures))


def ids_of(creatures: tuple[CreatureGeom, ...]) -> tuple[str, ...]:
    """The creatures' ids, in order: the same tuple for the same creatures tuple (a revision
    is asked about by the tables, the subscriptions and the rules; at 1,000 creatures each
    asking with its own loop was a tenth of a millisecond)."""
    global _IDS
    held = _IDS
    for creatures_held, ids in held:
        if creatures_held is creatures:
            return ids
    ids = tuple(map(_ID, creatures))
    _IDS = [(creatures, ids), *held[:_KEPT - 1]]
    return ids


def _rows(cs: tuple[CreatureGeom, ...] | list[CreatureGeom], grid: Grid,
          ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    return (np.array([space(c, grid) for c in cs], dtype=np.float64).reshape(-1, 4),
            np.array([c.reach for c in cs], dtype=np.float64),
            np.array([c.elevation for c in cs], dtype=np.float64),
            np.array([c.tall for c in cs], dtype=np.float64),
            np.array([vertical_side(c) for c in cs], dtype=np.float64),
            np.array([creature_centre(c, grid) for c in cs], dtype=np.float64).reshape(-1, 2))


def columns(creatures: tuple[CreatureGeom, ...], grid: Grid) -> Columns:
    """The creatures' columns (see `Columns`)."""
    for held in _RECENT:
        if held.creatures is creatures and held.grid == grid:
            return held
    n = len(creatures)
    base: Columns | None = None
    moved: list[int] = []
    for held in _RECENT:
        if held.grid != grid:
            continue
        differ = changed_positions(creatures, held.creatures)
        if len(differ) * 4 <= n and (base is None or len(differ) < len(moved)):
            base, moved = held, differ
            if _close(differ, n, len(held.creatures)):
                break
    if base is None:
        arrays = list(_rows(creatures, grid))
    else:
        # The base's rows, cut or padded to n (the padding is in `moved`, filled below).
        arrays = [np.resize(a, (n, *a.shape[1:])) if len(a) != n else a.copy()
                  for a in (base.spaces, base.reach, base.elev, base.tall, base.side,
                            base.centre)]
        if moved:
            for array, fresh in zip(arrays, _rows([creatures[k] for k in moved], grid),
                                    strict=True):
                array[moved] = fresh
    for array in arrays:
        array.setflags(write=False)
    ids = ids_of(creatures)
    index = base.index if base is not None and base.ids == ids else {
        i: k for k, i in enumerate(ids)}
    out = Columns(creatures, grid, ids, index, *arrays)
    _RECENT[:] = [out, *_RECENT[:_KEPT - 1]]
    return out


def _close(differ: list[int], n: int, held: int) -> bool:
    """Whether a base leaves at most one object to build besides the creatures past its
    end: no other recent tuple can do much better, and comparing them all costs more."""
    return len(differ) <= n - min(n, held) + 1


T = TypeVar("T")

#: Per (what, grid): recent creatures tuples and each one's values (`per_creature`).
_PER_CREATURE: dict[tuple[str, Grid], list[tuple[tuple[CreatureGeom, ...], list[Any]]]] = {}


def per_creature(what: str, creatures: tuple[CreatureGeom, ...], grid: Grid,
                 build: Callable[[list[int]], list[T]]) -> list[T]:
    """A value for each creature (what: the name of the kind of value), the same list for
    the same creatures tuple; build(positions) makes the values of the creatures at those
    positions of the tuple, in one call. A new tuple takes a recent one's values for the
    creature objects the two share at the same positions (a move keeps every other
    creature's object; a rules engine may add the moved creatures' old states at the end):
    a move builds one value, not one per creature of the scene
    (a thousand hex footprints cost a millisecond or more in every reader). A value must
    depend on the creature and the grid alone, never on the walls, the options or the
    other creatures. The list must not be changed."""
    recent = _PER_CREATURE.setdefault((what, grid), [])
    for held, values in recent:
        if held is creatures:
            return values
    n = len(creatures)
    # The recent tuple that leaves the fewest values to build, if it leaves few.
    base: list[Any] | None = None
    todo: list[int] = []
    for held, values in recent:
        differ = changed_positions(creatures, held)
        if len(differ) * 4 <= n and (base is None or len(differ) < len(todo)):
            base, todo = values, differ
            if _close(differ, n, len(held)):
                break
    out: list[Any]
    if base is None:
        out = list(build(list(range(n))))
    else:
        out = list(base[:n])
        out.extend([None] * (n - len(out)))
        if todo:
            for k, v in zip(todo, build(todo), strict=True):
                out[k] = v
    recent[:] = [(creatures, out), *recent[:_KEPT - 1]]
    if len(_PER_CREATURE) > 4 * _KEPT:
        # Kinds of values times grids in use: a handful. The oldest entry goes.
        del _PER_CREATURE[next(iter(_PER_CREATURE))]
    return out


def hex_footprints(creatures: tuple[CreatureGeom, ...], grid: Grid) -> list[Footprint]:
    """Each creature's footprint on a hex grid (geometry.hex.footprint), per creatures
    tuple (`per_creature`)."""
    return per_creature("hex footprint", creatures, grid,
                        lambda todo: [footprint(creatures[k], grid) for k in todo])


@lru_cache(maxsize=8)
def upper_pairs(n: int) -> tuple[IntArray, IntArray]:
    """Every unordered pair of n creatures (or corners, or points) once, as (i, j)
    positions with i < j (np.triu_indices, read-only, kept per n)."""
    a, t = np.triu_indices(n, k=1)
    a.setflags(write=False)
    t.setflags(write=False)
    return a, t
