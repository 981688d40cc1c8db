"""Rooms: the faces the plain walls cut the map into, and which one each space lies in.

Rule of this module: pure geometry over a Tracer's walls, built once per set of walls (kept
for the last few, like geometry.openings' blockers); rulesets ask it which pairs of spaces
are walled off from each other before they plan or trace a line between them.

A plain wall (solid, both ways, not limited, no height band) stops every line that crosses
it, from either end, at any height. The plain walls, noded where they meet or cross
(shapely.union_all), cut the plane into faces (shapely.polygonize): the rooms. Two spaces
wholly inside two different rooms, or one wholly inside a room and the other wholly outside
every room, are walled off: any straight line from one to the other leaves the first's
room across its border, which is made of plain walls, and the wall it leaves across touches
the line's interior without running along it (a line running along a border wall meets the
next wall of the border where it turns away: the room's corner). So no line of effect
passes, and every line a ruleset draws between the two is stopped by a plain wall: its
answer is total cover, without tracing (docs/geometry.md, "Rooms").

A space that meets a room's border (a creature standing in a doorway drawn as a wall gap's
end, or across a wall) is in no room here, and its pairs are traced as before. So are all
pairs when the walls are too many or too tangled for the faces to be worth building
(ROOMS_MAX_WALLS, ROOMS_MAX_WALLS_AHEAD, _NEAR_PER_WALL): the faces of a lattice of long
walls crossing one another number in the hundreds of thousands, and nothing is walled off
there that a trace would not find anyway."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import numpy as np
import shapely

from geometry.caches import drop_oldest
from geometry.kernel import BoolArray, FloatArray, IntArray
from geometry.trace import Tracer

#: Plain walls past which the rooms are not built on the caller's thread: the rooms of
#: 2,500 walls cost up to ~30 ms (5-11 us a wall: a map of a few dozen rooms, a grid of tiny
#: ones), about what a slice of a table may hold the server's worker (server/tables.py).
ROOMS_MAX_WALLS = 2500
#: ...and past which they are not built at all. Between the two, they are built only where
#: nothing waits on them: the edge reads a large scene or wall change on a thread of its own
#: (server/ahead.py) and builds its rooms there (Shapely lets go of the interpreter lock in
#: GEOS: 2,916 rooms of 5,940 walls took 81 ms there, and held the other thread 11 ms at
#: most).
ROOMS_MAX_WALLS_AHEAD = 6000
#: Walls whose boxes meet, per plain wall, past which the walls are too tangled for rooms:
#: a map's walls meet two to four others each (the benchmark's 890 plain walls, 3,000
#: neighbours in all); a lattice of long walls crossing one another meets hundreds each,
#: and its faces cost seconds.
_NEAR_PER_WALL = 8
#: Pairs a caller looks at from which the rooms are built if they are not yet (`rooms_of`).
BUILD_PAIRS = 2000
#: Walls whose neighbours one STRtree query counts (`_build`).
_NEAR_CHUNK = 256
#: A space in no room: it meets a room's border (or there are no rooms).
NO_ROOM = -1
#: Pixels: how clear of a room's border a space must be to be in it or outside it. The
#: kernel tests crossings in floating point; a wall passing a hair from a line's start
#: (7e-15 px outside a space's corner, on a slanted wall) can round to touching it, and
#: touching a line's end is not crossing it. Far above such rounding, far below a map's
#: scale (and below the exact search's EPSILON_PX).
CLEARANCE_PX = 1e-6


@dataclass(frozen=True, slots=True)
class Rooms:
    """The rooms of one set of walls: `faces`, indexed by an STRtree, and OUTSIDE, the room
    number of the space outside every face (one more than the last face). `_of`: each
    space's room, kept per ring (a token moving asks for one new ring)."""

    faces: np.ndarray  # shapely Polygons
    tree: shapely.STRtree
    #: Each face shrunk by CLEARANCE_PX (empty where it is thinner than that).
    inner: np.ndarray
    _of: dict[bytes, int] = field(default_factory=dict)

    @property
    def outside(self) -> int:
        return len(self.faces)


_ROOMS: dict[int, tuple[FloatArray, BoolArray, Rooms | None]] = {}
_ROOMS_KEPT = 8
#: Rings whose rooms a Rooms keeps (`rooms_of`); past it the oldest half is dropped.
_RINGS_KEPT = 1 << 16


def rooms(tracer: Tracer, build: bool = True,
          max_walls: int | None = None) -> Rooms | None:
    """The rooms of the tracer's plain walls (None: too many or too tangled walls, or none
    that close a room), built once per set of walls and kept for the last few. Without
    `build`, only rooms already built are returned (None otherwise). `max_walls`: plain
    walls past which they are not built here (ROOMS_MAX_WALLS; ROOMS_MAX_WALLS_AHEAD off
    the worker's thread)."""
    xy, plain = tracer.wall_xy, tracer.wall_plain
    held = _ROOMS.get(id(xy))
    if held is not None and held[0] is xy and held[1] is plain:
        return held[2]
    if not build or int(plain.sum()) > (ROOMS_MAX_WALLS if max_walls is None else max_walls):
        return None
    out = _build(xy[plain])
    if len(_ROOMS) >= _ROOMS_KEPT:
        drop_oldest(_ROOMS)
    _ROOMS[id(xy)] = (xy, plain, out)
    return out


def _build(walls: FloatArray) -> Rooms | None:
    """`rooms` of these walls (M, 4)."""
    # Three walls at least close a room.
    if len(walls) < 3:
        return None
    segs = shapely.linestrings(walls.reshape(-1, 2, 2))
    # Walls of no length have no line to node (they stop nothing a room border needs).
    segs = segs[shapely.length(segs) > 0]
    # Walls whose boxes meet, counted a chunk at a time, so that a tangle is given up on
    # before its list is built.
    boxes = shapely.envelope(segs)
    tree = shapely.STRtree(boxes)
    cap, found = _NEAR_PER_WALL * len(segs), 0
    for c0 in range(0, len(boxes), _NEAR_CHUNK):
        near, _ = tree.query(boxes[c0:c0 + _NEAR_CHUNK], predicate="intersects")
        found += len(near) - len(boxes[c0:c0 + _NEAR_CHUNK])
        if found > cap:
            return None
    noded = shapely.union_all(segs)
    faces = shapely.get_parts(shapely.polygonize(shapely.get_parts(noded)))
    faces = faces[shapely.area(faces) > 0]
    if len(faces) == 0:
        return None
    inner = shapely.buffer(faces, -CLEARANCE_PX, join_style="mitre")
    shapely.prepare(inner)
    return Rooms(faces, shapely.STRtree(faces), inner)


def rooms_of(tracer: Tracer, rings: FloatArray, pairs: int) -> IntArray:
    """Per convex ring (N, V, 2; a space as the lines between spaces start from it): the
    room it lies wholly inside (its face number, or `Rooms.outside` when it meets no room),
    NO_ROOM when it meets a room's border (or the walls have no rooms). `pairs`: how many
    pairs the caller is about to look at; the rooms are built for BUILD_PAIRS or more (a
    first subscription's whole table), and only used if already built for fewer (a move's
    pairs: a door opened or closed is not made to wait for the rooms of the new walls)."""
    out = np.full(len(rings), NO_ROOM, dtype=np.intp)
    found = rooms(tracer, pairs >= BUILD_PAIRS)
    if found is None or len(rings) == 0:
        return out
    keys = np.ascontiguousarray(rings, dtype=np.float64).reshape(len(rings), -1)
    raw = cast("list[bytes]", keys.view(
        np.dtype((np.void, keys.shape[1] * keys.itemsize))).ravel().tolist())
    known = found._of
    todo = []
    for k, key in enumerate(raw):
        held = known.get(key)
        if held is None:
            todo.append(k)
        else:
            out[k] = held
    if todo:
        shapes = shapely.convex_hull(shapely.multipoints(rings[todo]))
        # Outside: no face within CLEARANCE_PX; in a face: inside it shrunk by as much.
        si, fi = found.tree.query(shapes, predicate="dwithin", distance=CLEARANCE_PX)
        room = np.full(len(todo), found.outside, dtype=np.intp)
        room[si] = NO_ROOM
        inside = shapely.contains_properly(found.inner[fi], shapes[si])
        # A ring inside one face only (faces do not overlap; counted to be sure).
        once = np.bincount(si[inside], minlength=len(todo)) == 1
        keep = inside & once[si]
        room[si[keep]] = fi[keep]
        if len(known) + len(todo) > _RINGS_KEPT:
            for key in list(known)[:len(known) // 2]:
                del known[key]
        for k, r in zip(todo, room.tolist(), strict=True):
            known[raw[k]] = r
            out[k] = r
    return out


def walled_off(room_a: IntArray, room_b: IntArray) -> BoolArray:
    """Per pair of spaces (their rooms, `rooms_of`): whether plain walls stop every line
    between them (each in a room of its own, or outside every room)."""
    out: BoolArray = (room_a != NO_ROOM) & (room_b != NO_ROOM) & (room_a != room_b)
    return out
