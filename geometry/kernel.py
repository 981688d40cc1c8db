"""Vectorised crossing tests: many sight lines against many walls, squares and regions.

Rule of this module: numpy arrays in, sparse index pairs out; no Python loop over walls or
lines. This is the hot path of every cover computation, so it is chunked to bound memory
(never more than CHUNK_CELLS booleans alive at once) and works on exact orientation signs.

Crossing convention (measured on real scenes, drawn in docs/geometry.md): a wall blocks a
line when it touches the line's *interior* and does not run along it.
- a token corner lying on a wall is an endpoint of the line, not its interior: no block;
- a line running along a wall (collinear) is never blocked by it: a corridor gives no cover;
- a line through the joint of two wall segments touches both in its interior: blocked, so
  walls drawn as several segments do not leak at their joints;
- grazing the end of a wall with the line's interior therefore blocks too.
For squares (creatures, terrain) the test is the open square: grazing a corner or running
along an edge does not enter it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import shapely

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

# Booleans alive at once per chunk; 4M keeps a chunk's temporaries around 100 MB.
CHUNK_CELLS = 4_000_000
# Minimum parameter length (fraction of the line) a line must spend inside an open square.
_INSIDE_EPS = 1e-9


def _orient(px: FloatArray, py: FloatArray, qx: FloatArray, qy: FloatArray,
            xx: FloatArray, xy: FloatArray) -> FloatArray:
    """Twice the signed area of (P, Q, X); broadcasts."""
    return (qx - px) * (xy - py) - (qy - py) * (xx - px)


def segments_cross_walls(starts: FloatArray, ends: FloatArray,
                         walls: FloatArray) -> tuple[IntArray, IntArray]:
    """Which walls block which lines, by the crossing convention above.

    starts, ends: (N, 2) line endpoints; walls: (M, 4) as x0, y0, x1, y1.
    Returns (line_index, wall_index) for every blocking pair.
    """
    n, m = len(starts), len(walls)
    if n == 0 or m == 0:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty.copy()
    ax, ay, bx, by = (walls[:, k][None, :] for k in range(4))
    step = max(1, CHUNK_CELLS // m)
    line_parts: list[IntArray] = []
    wall_parts: list[IntArray] = []
    for lo in range(0, n, step):
        px = starts[lo:lo + step, 0:1]
        py = starts[lo:lo + step, 1:2]
        qx = ends[lo:lo + step, 0:1]
        qy = ends[lo:lo + step, 1:2]
        # Cheap bounding-box reject first: most wall/line pairs are far apart.
        near = ((np.minimum(px, qx) <= np.maximum(ax, bx))
                & (np.maximum(px, qx) >= np.minimum(ax, bx))
                & (np.minimum(py, qy) <= np.maximum(ay, by))
                & (np.maximum(py, qy) >= np.minimum(ay, by)))
        li, wi = np.nonzero(near)
        if li.size == 0:
            continue
        spx, spy, sqx, sqy = px[li, 0], py[li, 0], qx[li, 0], qy[li, 0]
        sax, say, sbx, sby = ax[0, wi], ay[0, wi], bx[0, wi], by[0, wi]
        o1 = np.sign(_orient(spx, spy, sqx, sqy, sax, say))
        o2 = np.sign(_orient(spx, spy, sqx, sqy, sbx, sby))
        o3 = np.sign(_orient(sax, say, sbx, sby, spx, spy))
        o4 = np.sign(_orient(sax, say, sbx, sby, sqx, sqy))
        # Wall endpoints on or across the line, and the line's endpoints strictly on both
        # sides of the wall's line: the touch point is inside the line, never at its ends;
        # collinear pairs have o3 == o4 == 0 and fall out.
        hit = (o1 * o2 <= 0) & (o3 * o4 < 0)
        line_parts.append(li[hit] + lo)
        wall_parts.append(wi[hit])
    if not line_parts:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty.copy()
    return np.concatenate(line_parts), np.concatenate(wall_parts)


def foundry_side(walls: FloatArray, points: FloatArray) -> npt.NDArray[np.int8]:
    """Foundry's Wall#orientPoint for row-paired walls and points: 0 both, 1 left, 2 right."""
    ax, ay, bx, by = walls[:, 0], walls[:, 1], walls[:, 2], walls[:, 3]
    px, py = points[:, 0], points[:, 1]
    o = (ay - py) * (bx - px) - (ax - px) * (by - py)
    side = np.zeros(len(o), dtype=np.int8)
    side[o < 0] = 1
    side[o > 0] = 2
    return side


def segments_enter_boxes(starts: FloatArray, ends: FloatArray,
                         boxes: FloatArray) -> tuple[IntArray, IntArray]:
    """Which lines pass through the open interior of which axis-aligned boxes.

    boxes: (T, 4) as x0, y0, x1, y1 with x0 < x1, y0 < y1. Grazing a corner or running along
    an edge is not entering. Returns (line_index, box_index) pairs.
    """
    n, t = len(starts), len(boxes)
    if n == 0 or t == 0:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty.copy()
    step = max(1, CHUNK_CELLS // t)
    bx0, by0, bx1, by1 = (boxes[:, k][None, :] for k in range(4))
    line_parts: list[IntArray] = []
    box_parts: list[IntArray] = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for lo in range(0, n, step):
            px = starts[lo:lo + step, 0:1]
            py = starts[lo:lo + step, 1:2]
            dx = ends[lo:lo + step, 0:1] - px
            dy = ends[lo:lo + step, 1:2] - py
            tlo = np.zeros((len(px), t))
            thi = np.ones((len(px), t))
            for p, d, b0, b1 in ((px, dx, bx0, bx1), (py, dy, by0, by1)):
                ta = (b0 - p) / d
                tb = (b1 - p) / d
                still = d == 0
                inside = (p > b0) & (p < b1)
                a_lo = np.where(still, np.where(inside, -np.inf, np.inf), np.minimum(ta, tb))
                a_hi = np.where(still, np.where(inside, np.inf, -np.inf), np.maximum(ta, tb))
                tlo = np.maximum(tlo, a_lo)
                thi = np.minimum(thi, a_hi)
            li, bi = np.nonzero(thi - tlo > _INSIDE_EPS)
            line_parts.append(li + lo)
            box_parts.append(bi)
    return np.concatenate(line_parts), np.concatenate(box_parts)


def segments_enter_polygons(starts: FloatArray, ends: FloatArray,
                            polygons: Sequence[shapely.Polygon]) -> tuple[IntArray, IntArray]:
    """Which lines pass through the interior of which polygons (Shapely, vectorised per
    polygon; maps have few regions and many lines)."""
    if len(starts) == 0 or not polygons:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty.copy()
    coords = np.stack([starts, ends], axis=1)
    lines = shapely.linestrings(coords)
    line_parts: list[IntArray] = []
    poly_parts: list[IntArray] = []
    for k, poly in enumerate(polygons):
        shapely.prepare(poly)
        # Interior of the line meets interior of the polygon: the DE-9IM 'T' in first cell.
        mask = shapely.relate_pattern(lines, poly, "T********")
        idx = np.nonzero(mask)[0]
        line_parts.append(idx)
        poly_parts.append(np.full(len(idx), k, dtype=np.intp))
    return np.concatenate(line_parts), np.concatenate(poly_parts)
