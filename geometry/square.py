"""Square-grid facts about creatures' spaces: footprints, squares, corners, reach distances.

Rule of this module: pure functions of CreatureGeom and Grid returning plain tuples and
arrays in pixels (distances in feet); game rules decide which of these facts matter. On a
hex grid a creature's `space` is the bounding box of its hex footprint and its `squares`
are its cells' bounding boxes (so their centres are the cells' centres); the exact hex
geometry is in geometry/hex.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import shapely

from geometry import hex as hexgrid
from geometry.kernel import FloatArray, within_runs
from geometry.model import FEET_PER_SQUARE, CreatureGeom, Grid

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in pixels


def space(c: CreatureGeom, grid: Grid) -> Box:
    """The creature's whole space (its footprint) in pixels."""
    if grid.kind in hexgrid.HEX_GRIDS:
        return hexgrid.footprint(c, grid).bounds
    return (c.x, c.y, c.x + c.width * grid.size, c.y + c.height * grid.size)


def footprint(c: CreatureGeom, grid: Grid) -> shapely.Polygon:
    return shapely.box(*space(c, grid))


def squares(c: CreatureGeom, grid: Grid) -> list[Box]:
    """Each square the creature occupies; a creature under one square has one 'square', its
    own footprint (a Tiny creature's half square)."""
    if grid.kind in hexgrid.HEX_GRIDS:
        fp = hexgrid.footprint(c, grid)
        layout = hexgrid.HexLayout.of(grid)
        hx, hy = layout.size_x / 2, layout.size_y / 2
        return [(float(x) - hx, float(y) - hy, float(x) + hx, float(y) + hy)
                for x, y in fp.cell_centres]
    if c.width < 1 or c.height < 1:
        return [space(c, grid)]
    cols, rows = round(c.width), round(c.height)
    s = grid.size
    return [(c.x + i * s, c.y + j * s, c.x + (i + 1) * s, c.y + (j + 1) * s)
            for j in range(rows) for i in range(cols)]


def creature_centre(c: CreatureGeom, grid: Grid) -> tuple[float, float]:
    """The centre of the creature's space (on a hex grid, Foundry's token centre)."""
    if grid.kind in hexgrid.HEX_GRIDS:
        return hexgrid.footprint(c, grid).centre
    return centre(space(c, grid))


def corners(box: Box) -> FloatArray:
    """The four corners of a box, clockwise from top-left (y down)."""
    x0, y0, x1, y1 = box
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], dtype=np.float64)


def centre(box: Box) -> tuple[float, float]:
    return ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)


# Sight lines run between points this far inside each space (an exact binary fraction of a
# pixel): a wall flush against a creature's border then blocks exactly when it stands between
# the two spaces, and adjacent creatures' shared corners give real lines, not points. The
# kernel's convention is untouched: a wall still blocks only what touches a line's interior.
INSET_PX = 2.0 ** -6


def inset(points: FloatArray, box: Box) -> FloatArray:
    """Points (corners of `box`) moved INSET_PX towards the box's centre, never past it."""
    return inset_many(points, np.asarray(box, dtype=np.float64))


def inset_many(points: FloatArray, boxes: FloatArray) -> FloatArray:
    """`inset` for many boxes at once: points (..., k, 2) of boxes (..., 4) (x0, y0, x1,
    y1), each moved INSET_PX towards its own box's centre, never past it."""
    c = np.stack([(boxes[..., 0] + boxes[..., 2]) / 2,
                  (boxes[..., 1] + boxes[..., 3]) / 2], axis=-1)[..., None, :]
    d = c - points
    moved: FloatArray = points + np.sign(d) * np.minimum(INSET_PX, np.abs(d))
    return moved


def corners_many(boxes: FloatArray) -> FloatArray:
    """`corners` of many boxes (n, 4) at once: (n, 4, 2)."""
    x0, y0, x1, y1 = boxes.T
    out: FloatArray = np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1),
                                np.stack([x1, y1], 1), np.stack([x0, y1], 1)], axis=1)
    return out


def grid_steps_many(a: FloatArray, b: FloatArray,
                    size: float) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Squares between row-paired spaces (R, 4) along x and y (1 means adjacent, 0
    overlapping)."""
    def steps(a0: FloatArray, a1: FloatArray, b0: FloatArray,
              b1: FloatArray) -> npt.NDArray[np.int64]:
        gap = np.maximum(b0 - a1, a0 - b1)
        out = np.floor(gap / size + 1e-9).astype(np.int64) + 1
        return np.where(gap < 0, 0, out)

    return (steps(a[:, 0], a[:, 2], b[:, 0], b[:, 2]),
            steps(a[:, 1], a[:, 3], b[:, 1], b[:, 3]))


def grid_steps(a: Box, b: Box, size: float) -> tuple[int, int]:
    """grid_steps_many for one pair of spaces."""
    sx, sy = grid_steps_many(np.array([a], dtype=np.float64), np.array([b], dtype=np.float64),
                             size)
    return int(sx[0]), int(sy[0])


def vertical_side(c: CreatureGeom) -> float:
    """The height in feet of the cube a creature occupies for distances (its space's side:
    5 ft for Medium, 10 ft for Large; a Tiny creature's 2.5 ft), whatever its drawn height."""
    return max(c.width, c.height) * FEET_PER_SQUARE


def vertical_steps_many(a_elev: FloatArray, a_side: FloatArray, b_elev: FloatArray,
                        b_side: FloatArray) -> npt.NDArray[np.int64]:
    """Squares between row-paired vertical extents [elevation, elevation + side] in feet,
    counted as grid_steps_many counts across the map (1: touching, 0: overlapping)."""
    gap = np.maximum(b_elev - (a_elev + a_side), a_elev - (b_elev + b_side))
    out = np.floor(gap / FEET_PER_SQUARE + 1e-9).astype(np.int64) + 1
    steps: npt.NDArray[np.int64] = np.where(gap < 0, 0, out)
    return steps


def feet_many(sx: npt.NDArray[np.int64], sy: npt.NDArray[np.int64],
              sz: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.int64]:
    """Feet to cover these grid steps, diagonals alternating 5/10 ft (D&D 3.5 and Pathfinder
    counting), in three dimensions when `sz` (vertical steps) is given.

    With the steps sorted a >= b >= c, the shortest path takes a moves of which b are
    diagonal (a diagonal may change two or three coordinates at once), and every second
    diagonal costs 10 ft: 5 * (a + b // 2). With sz = 0 this is the flat count."""
    if sz is None:
        diag, straight = np.minimum(sx, sy), np.abs(sx - sy)
        feet: npt.NDArray[np.int64] = FEET_PER_SQUARE * (straight + diag + diag // 2)
        return feet
    # The middle of three without sorting (a sort along the short axis is far slower).
    most = np.maximum(np.maximum(sx, sy), sz)
    middle = sx + sy + sz - most - np.minimum(np.minimum(sx, sy), sz)
    feet3: npt.NDArray[np.int64] = FEET_PER_SQUARE * (most + middle // 2)
    return feet3


def segment_grid_feet(boxes: FloatArray, segments: FloatArray, size: float,
                      max_steps: int) -> FloatArray:
    """Feet from each space (R, 4: x0, y0, x1, y1) to its row-paired segment (R, 4: ax, ay,
    bx, by), counted in squares on the grid as every distance on a 3.5 or Pathfinder grid
    is: the squares across and down from the space to the nearest square the segment
    touches (a segment on a square's border touches it), diagonals alternating 5/10 ft
    (`feet_many`). Exact up to `max_steps` squares along each axis; beyond, a bound from
    below that is itself beyond `max_steps` squares.

    Per axis the count from a point is ceil(gap / size): 0 on the space's border, 1 up to
    the far border of the next square. Along the segment the count changes only where it
    crosses a grid line at a whole number of squares from the space, and there it takes
    the smaller of the two sides: the minimum is at an end or at one of those crossings,
    all tried at once."""
    r = len(boxes)
    if r == 0:
        return np.zeros(0, dtype=np.float64)
    a, d = segments[:, 0:2], segments[:, 2:4] - segments[:, 0:2]
    k = np.arange(max_steps + 1, dtype=np.float64) * size
    ts = [np.zeros((r, 1)), np.ones((r, 1))]
    with np.errstate(divide="ignore", invalid="ignore"):
        for axis in (0, 1):
            lines = np.concatenate([boxes[:, axis, None] - k, boxes[:, axis + 2, None] + k],
                                   axis=1)
            ts.append((lines - a[:, axis, None]) / d[:, axis, None])
    t = np.concatenate(ts, axis=1)
    # Crossings off the segment (or of a segment along the line) fall back to its start.
    t = np.where(np.isfinite(t) & (t >= 0.0) & (t <= 1.0), t, 0.0)
    pts = a[:, None, :] + t[:, :, None] * d[:, None, :]

    def count(axis: int) -> npt.NDArray[np.int64]:
        p = pts[:, :, axis]
        gap = np.maximum(0.0, np.maximum(boxes[:, axis, None] - p, p - boxes[:, axis + 2, None]))
        # A crossing computed a rounding error past its grid line is on it.
        out: npt.NDArray[np.int64] = np.ceil(gap / size - 1e-6).astype(np.int64)
        return np.maximum(out, 0)

    feet: FloatArray = feet_many(count(0), count(1)).min(axis=1).astype(np.float64)
    return feet


def within_reach_many(sx: npt.NDArray[np.int64], sy: npt.NDArray[np.int64],
                      reach_ft: FloatArray,
                      sz: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.bool_]:
    """Whether creatures with these reaches threaten spaces these grid steps away (`sz`:
    vertical steps, none when omitted).

    A creature with 0 reach threatens only the space it shares. 10-ft reach reaches the second
    diagonal square as well, the 3.5 and Pathfinder exception to diagonal counting (in the
    air too: two squares along every axis).
    """
    zs = np.zeros_like(sx) if sz is None else sz
    shared = (sx == 0) & (sy == 0) & (zs == 0)
    ten = (reach_ft == 10) & (sx <= 2) & (sy <= 2) & (zs <= 2)
    ok: npt.NDArray[np.bool_] = shared | (
        (reach_ft > 0) & (ten | (feet_many(sx, sy, sz) <= reach_ft)))
    return ok


def steps_3d(a: CreatureGeom, b: CreatureGeom, grid: Grid) -> tuple[int, int, int]:
    """Grid steps between two creatures' spaces along x, y and the vertical (on a hex grid:
    hexes between their footprints, as (n, 0, vertical))."""
    if grid.kind in hexgrid.HEX_GRIDS:
        layout = hexgrid.HexLayout.of(grid)
        sx = hexgrid.cells_distance(layout, hexgrid.footprint(a, grid).cells,
                                    hexgrid.footprint(b, grid).cells)
        sy = 0
    else:
        sx, sy = grid_steps(space(a, grid), space(b, grid), grid.size)
    sz = vertical_steps_many(np.array([a.elevation]), np.array([vertical_side(a)]),
                             np.array([b.elevation]), np.array([vertical_side(b)]))
    return sx, sy, int(sz[0])


def distance_feet_3d(a: CreatureGeom, b: CreatureGeom, grid: Grid) -> int:
    """Distance between the nearest cubes of two creatures, vertical included."""
    sx, sy, sz = steps_3d(a, b, grid)
    return int(feet_many(np.array([sx]), np.array([sy]), np.array([sz]))[0])


def distance_feet(a: Box, b: Box, grid: Grid) -> float:
    """Grid distance between the nearest squares of two spaces."""
    sx, sy = grid_steps(a, b, grid.size)
    return float(feet_many(np.array([sx]), np.array([sy]))[0])


def within_reach(a: Box, b: Box, reach_ft: float, grid: Grid) -> bool:
    """within_reach_many for one creature's space and another."""
    sx, sy = grid_steps(a, b, grid.size)
    return bool(within_reach_many(np.array([sx]), np.array([sy]),
                                  np.array([reach_ft]))[0])


def adjacent_pairs(a: Sequence[Box], b: Sequence[Box],
                   grid: Grid) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Every (i, j) with a[i] and b[j] `adjacent`, in order of i then j: only the boxes
    of `a` near each box of `b` along x are tested (two 20 x 20 creatures side by side were
    160,000 tests one at a time, 3.4 s of the worker; the pairs are about 60)."""
    if not len(a) or not len(b):
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty
    aa, bb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    size = grid.size
    order = np.argsort(aa[:, 0], kind="stable")
    x0 = aa[order, 0]
    # Adjacent along x is a gap under one square: a box starts before b's end plus a
    # square, and ends after b's start less a square (widest box of `a`, with room).
    room = size * (1 + 1e-6) + 1e-9
    widest = float((aa[:, 2] - aa[:, 0]).max())
    lo = np.searchsorted(x0, bb[:, 0] - room - widest, side="left")
    hi = np.searchsorted(x0, bb[:, 2] + room, side="right")
    counts = hi - lo
    jj = np.repeat(np.arange(len(bb)), counts)
    ii = order[np.repeat(lo, counts) + within_runs(counts)]
    sx, sy = grid_steps_many(aa[ii], bb[jj], size)
    keep = (sx <= 1) & (sy <= 1)
    ii, jj = ii[keep], jj[keep]
    by = np.lexsort((jj, ii))
    return ii[by].astype(np.intp), jj[by].astype(np.intp)


def adjacent(a: Box, b: Box, grid: Grid) -> bool:
    """Spaces that touch along an edge or at a corner (or overlap, as a Tiny creature in
    another's square)."""
    sx, sy = grid_steps(a, b, grid.size)
    return sx <= 1 and sy <= 1
