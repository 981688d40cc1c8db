"""Vectorised crossing tests: many sight lines against many walls, squares and regions.

Rule of this module: numpy arrays in, sparse index pairs out; no Python loop over walls or
lines. This is the hot path of every cover computation, so it is chunked to bound memory
(never more than CHUNK_CELLS booleans alive at once) and works on exact orientation signs.
Before the exact tests a spatial prune keeps what could touch a line, never less: for big
batches a uniform grid over the walls (docs/geometry.md, 'Spatial prune').

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

import functools
import itertools
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import shapely

from geometry.caches import drop_oldest

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

# Rows of 2-D and 3-D arrays are gathered with np.take(..., axis=0) throughout: numpy's fancy
# indexing of whole rows measured 7-15x slower here (5 ms against 0.3 ms for 160k rows).


_Item = TypeVar("_Item", bound=np.generic)


def take_rows(array: npt.NDArray[_Item], idx: IntArray) -> npt.NDArray[_Item]:
    """array[idx] for whole rows, by np.take (see above)."""
    out: npt.NDArray[_Item] = np.take(array, idx, axis=0)
    return out


def shuffled_ranks(group: IntArray) -> IntArray:
    """Each item's place among the items of its group (group numbers below 2**39), in a
    fixed shuffled order: rounds that try the items of rank below k first sample all of a
    group's items, not its first k (the lines of a pair tried until one runs free)."""
    n = len(group)
    key = (np.arange(n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    # By group, then by key: one stable sort of both in one integer (lexsort of the two
    # costs about twice as much).
    order = np.argsort((group.astype(np.int64) << 24) | key.astype(np.int64), kind="stable")
    sorted_g = group[order]
    first = np.searchsorted(sorted_g, sorted_g)
    rank = np.empty(n, dtype=np.intp)
    rank[order] = np.arange(n) - first
    return rank


def in_rounds(group: IntArray, firsts: Sequence[int], one_round: int, chunk: int,
              done: Callable[[IntArray], BoolArray]) -> Iterator[IntArray]:
    """The items (positions in `group`) to try until each group has what it looks for:
    the first firsts[0] items of every group (in `shuffled_ranks`' order), then up to
    firsts[1], ..., then the rest; each round in chunks of at most `chunk` items, from
    which the items `done` says need no more trying (asked before each chunk is given,
    so after the caller has tried the one before) are left out. Up to `one_round` items
    in all are one round, in their own order: a few items' cost is the calls', not the
    items'."""
    n = len(group)
    rounds: tuple[int, ...] = (n,) if n <= one_round else (*firsts, n)
    rank = shuffled_ranks(group) if len(rounds) > 1 else None
    lo = 0
    for hi in rounds:
        sel = np.arange(n) if rank is None else np.flatnonzero((rank >= lo) & (rank < hi))
        lo = hi
        for c0 in range(0, len(sel), chunk):
            part = sel[c0:c0 + chunk]
            part = part[~done(part)]
            if len(part):
                yield part


def within_runs(counts: IntArray) -> IntArray:
    """For runs of these lengths laid end to end, each element's place in its own run:
    (2, 0, 3) gives 0 1 0 1 2. With `np.repeat(starts, counts)` it lists every element of
    every run: each pair's lines, each wall's cells, each creature's hexes."""
    counts = np.asarray(counts)
    out: IntArray = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts,
                                                             counts)
    return out


def point_segment_distance(px: FloatArray, py: FloatArray, ax: FloatArray, ay: FloatArray,
                           bx: FloatArray, by: FloatArray) -> FloatArray:
    """Distances from points (px, py) to segments from (ax, ay) to (bx, by), as planes of
    coordinates broadcast together (a segment of no length: the distance to its point)."""
    dx, dy = bx - ax, by - ay
    length2 = dx * dx + dy * dy
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.clip(((px - ax) * dx + (py - ay) * dy) / length2, 0.0, 1.0)
    f = np.where(length2 > 0, f, 0.0)
    out: FloatArray = np.hypot(px - (ax + f * dx), py - (ay + f * dy))
    return out


def dense_unique(keys: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], IntArray]:
    """`np.unique(keys, return_inverse=True)` for non-negative integer keys: by a table of
    the keys present when they are few enough for one (a row's outcome code: tens of
    thousands of rows, a few dozen distinct codes), instead of a sort."""
    if len(keys) == 0 or int(keys.max()) >= max(4 * len(keys), 1 << 16):
        uniq, inverse = np.unique(keys, return_inverse=True)
        return uniq, inverse.reshape(-1)
    present = np.zeros(int(keys.max()) + 1, dtype=bool)
    present[keys] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present).astype(np.int64), rank[keys]

# Booleans alive at once per chunk; 4M keeps a chunk's temporaries around 100 MB.
CHUNK_CELLS = 4_000_000
# Minimum parameter length (fraction of the line) a line must spend inside an open square.
_INSIDE_EPS = 1e-9


def _orient(px: FloatArray, py: FloatArray, qx: FloatArray, qy: FloatArray,
            xx: FloatArray, xy: FloatArray) -> FloatArray:
    """Twice the signed area of (P, Q, X); broadcasts."""
    return (qx - px) * (xy - py) - (qy - py) * (xx - px)


# Slack (pixels) on the projected-interval test: it only prunes, so it must never drop a
# pair that rounding puts a hair apart.
_AXIS_SLACK = 1e-6


def _unit_normals(d: FloatArray) -> FloatArray:
    """Unit normals (-dy, dx) of directions d; zero where d is (nearly) zero, which makes
    the projected test below pass everything."""
    norm = np.hypot(d[:, 0], d[:, 1])
    safe = np.where(norm > 1e-12, norm, 1.0)
    n = np.column_stack([-d[:, 1], d[:, 0]]) / safe[:, None]
    n[norm <= 1e-12] = 0.0
    return n


def _thing_extent(things: FloatArray, normals: FloatArray, segments: bool
                  ) -> tuple[FloatArray, FloatArray]:
    """Row-paired: the interval a wall (segments) or box covers along each normal."""
    p0 = things[:, 0] * normals[:, 0] + things[:, 1] * normals[:, 1]
    p1 = things[:, 2] * normals[:, 0] + things[:, 3] * normals[:, 1]
    if segments:
        return np.minimum(p0, p1), np.maximum(p0, p1)
    # A box's other two corners project to the ends of the same interval's complement:
    # centre +- half-extents against |n|.
    centre = (p0 + p1) / 2
    half = (np.abs(things[:, 2] - things[:, 0]) * np.abs(normals[:, 0])
            + np.abs(things[:, 3] - things[:, 1]) * np.abs(normals[:, 1])) / 2
    return centre - half, centre + half


def _candidates(glo: FloatArray, ghi: FloatArray, sizes: IntArray, boxes: FloatArray,
                axis: tuple[FloatArray, FloatArray, FloatArray] | None, segments: bool,
                ) -> Iterator[tuple[IntArray, IntArray]]:
    """(group, thing) pairs whose bounding boxes overlap and, with `axis` (per group: unit
    normal of its general direction, and the interval its lines' ends cover along it),
    whose extents along that normal overlap too, in chunks of about CHUNK_CELLS lines.

    Both tests are separating axes of the convex hull of a group's lines: a thing outside
    either interval cannot touch any of the lines, so the exact tests that follow see only
    what could."""
    m = len(boxes)
    bx0 = np.minimum(boxes[:, 0], boxes[:, 2])[None, :]
    bx1 = np.maximum(boxes[:, 0], boxes[:, 2])[None, :]
    by0 = np.minimum(boxes[:, 1], boxes[:, 3])[None, :]
    by1 = np.maximum(boxes[:, 1], boxes[:, 3])[None, :]
    step = max(1, CHUNK_CELLS // (m * int(sizes.max())))
    # With slack, as the grid's cells and the normal axis: the exact tests that follow
    # decide a pair rounding puts a hair apart, never the prune (a wall end a denormal
    # beyond a line's end can round onto it), so every prune keeps the same pairs.
    glo, ghi = glo - _AXIS_SLACK, ghi + _AXIS_SLACK
    for g0 in range(0, len(glo), step):
        sl = slice(g0, g0 + step)
        near = ((glo[sl, 0:1] <= bx1) & (ghi[sl, 0:1] >= bx0)
                & (glo[sl, 1:2] <= by1) & (ghi[sl, 1:2] >= by0))
        gi, bi = np.nonzero(near)
        if gi.size == 0:
            continue
        gi += g0
        if axis is not None:
            normals, lo, hi = axis
            n = np.take(normals, gi, axis=0)
            t_lo, t_hi = _thing_extent(np.take(boxes, bi, axis=0), n, segments)
            keep = (t_lo <= hi[gi] + _AXIS_SLACK) & (t_hi >= lo[gi] - _AXIS_SLACK)
            gi, bi = gi[keep], bi[keep]
        yield gi, bi


# -- uniform grid over the walls ----------------------------------------------------------

# Slack, in cells, on every cell range: both sides of a shared point must land in a shared
# cell whatever the rounding of the conversion to cell units.
_CELL_SLACK = 1e-6
# Batches with fewer walls than this, or fewer blocks x walls than GRID_MIN_WORK, use the
# brute box test (cheap at that size; the grid's fixed costs would outweigh it).
GRID_MIN_WALLS = 200
GRID_MIN_WORK = 75_000
# Cell side as a multiple of sqrt(area per wall).
GRID_CELL_FACTOR = 1.5
# Entries of the dedupe buffer (one int32 per block x wall of a chunk).
_DEDUPE_CELLS = 4_000_000


@dataclass(frozen=True, slots=True)
class _Grid:
    """Square cells of side `size` from (x0, y0), nx columns by ny rows; cell id
    column * ny + row; the walls registered in each cell in CSR form (every cell a wall
    passes through, within slack)."""

    x0: float
    y0: float
    size: float
    nx: int
    ny: int
    cell_start: IntArray  # (nx * ny + 1,)
    cell_walls: IntArray


def _cover_cells(a: FloatArray, b: FloatArray, rx: FloatArray | float,
                 ry: FloatArray | float, grid: _Grid) -> tuple[IntArray, IntArray]:
    """(item, cell) for every grid cell that segment a-b of each item, widened by a box of
    half-sides rx, ry (its Minkowski sum with that box), meets, with slack: column by
    column, the widened segment's y extent over the column. Items ascending, each item's
    cells ascending; no cell twice."""
    c, n = grid.size, len(a)
    ax, ay = (a[:, 0] - grid.x0) / c, (a[:, 1] - grid.y0) / c
    dx, dy = (b[:, 0] - grid.x0) / c - ax, (b[:, 1] - grid.y0) / c - ay
    rxu = np.broadcast_to(np.asarray(rx, dtype=np.float64) / c + _CELL_SLACK, (n,))
    ryu = np.broadcast_to(np.asarray(ry, dtype=np.float64) / c + _CELL_SLACK, (n,))
    # A vertical centre segment (or one so steep that its slope could overflow) is taken
    # as its middle widened by half its length: the whole of its y extent in each column.
    flat = np.abs(dx) <= 1e-9 * np.abs(dy)
    slope = np.divide(dy, dx, out=np.zeros(n), where=~flat)
    ay = np.where(flat, ay + dy / 2, ay)
    ryu = np.where(flat, ryu + np.abs(dy) / 2, ryu)
    cx0, cx1 = np.minimum(ax, ax + dx), np.maximum(ax, ax + dx)
    i0 = np.maximum(np.floor(cx0 - rxu), 0).astype(np.intp)
    i1 = np.minimum(np.floor(cx1 + rxu), grid.nx - 1).astype(np.intp)
    ncol = np.maximum(i1 - i0 + 1, 0)
    item = np.repeat(np.arange(n), ncol)
    col = np.arange(int(ncol.sum())) + np.repeat(i0 - (np.cumsum(ncol) - ncol), ncol)
    # Per column: the centre segment's part whose widened box reaches into it.
    lo_x, hi_x, r_x = cx0[item], cx1[item], rxu[item]
    xs = np.minimum(np.maximum(col - r_x, lo_x), hi_x)
    xe = np.minimum(np.maximum(col + 1 + r_x, lo_x), hi_x)
    y0, x0, k, r_y = ay[item], ax[item], slope[item], ryu[item]
    ys, ye = y0 + (xs - x0) * k, y0 + (xe - x0) * k
    j0 = np.maximum(np.floor(np.minimum(ys, ye) - r_y - _CELL_SLACK), 0).astype(np.intp)
    j1 = np.minimum(np.floor(np.maximum(ys, ye) + r_y + _CELL_SLACK),
                    grid.ny - 1).astype(np.intp)
    nrow = np.maximum(j1 - j0 + 1, 0)
    first = col * grid.ny + j0 - (np.cumsum(nrow) - nrow)
    return np.repeat(item, nrow), np.arange(int(nrow.sum())) + np.repeat(first, nrow)


_GRIDS: dict[tuple[bytes, bytes, float | None], _Grid] = {}
# The same grids by the identity of the walls array (holding it: the id is not reused).
_GRIDS_BY_ID: dict[tuple[int, float | None], tuple[FloatArray, _Grid]] = {}
_GRIDS_KEPT = 8


def _wall_grid(walls: FloatArray, which: IntArray | None = None,
               cell: float | None = None) -> _Grid:
    """The grid index of the walls `which` (default: all), listing them by their index in
    `walls`, with cells of side `cell` (default: about GRID_CELL_FACTOR walls' worth of
    their bounding box each). Kept for the last few sets of walls (by their coordinates:
    the next batch of a scene, and the next revision while its walls stay, reuse it)."""
    # Every wall of an array that cannot change (merged runs: read-only, owning their
    # data) is found by identity, without hashing its bytes (320 KB at 20,000 walls).
    fixed = which is None and not walls.flags.writeable and walls.flags.owndata
    if fixed:
        held = _GRIDS_BY_ID.get((id(walls), cell))
        if held is not None and held[0] is walls:
            return held[1]
    key = (walls.tobytes(), b"" if which is None else which.tobytes(), cell)
    found = _GRIDS.get(key)
    if found is not None:
        if fixed:
            _keep_by_id(walls, cell, found)
        return found
    sub = walls if which is None else take_rows(walls, which)
    lo = np.minimum(sub[:, 0:2], sub[:, 2:4]).min(axis=0)
    hi = np.maximum(sub[:, 0:2], sub[:, 2:4]).max(axis=0)
    span = np.maximum(hi - lo, 1e-9)
    if cell is None:
        cell = GRID_CELL_FACTOR * float(np.sqrt(span[0] * span[1] / len(sub)))
        # Never more cells than a few per wall (a long thin scene).
        cell = max(cell, float(max(span)) / (4 * len(sub)), 1e-9)
    nx = int(span[0] // cell) + 1
    ny = int(span[1] // cell) + 1
    grid = _Grid(float(lo[0]), float(lo[1]), cell, nx, ny,
                 np.zeros(1, dtype=np.intp), np.zeros(0, dtype=np.intp))
    wall, cells = _cover_cells(sub[:, 0:2], sub[:, 2:4], 0.0, 0.0, grid)
    order = np.argsort(cells, kind="stable")
    counts = np.bincount(cells, minlength=nx * ny)
    start = np.zeros(nx * ny + 1, dtype=np.intp)
    np.cumsum(counts, out=start[1:])
    listed = wall[order] if which is None else which[wall[order]]
    grid = replace(grid, cell_start=start, cell_walls=listed)
    if len(_GRIDS) >= _GRIDS_KEPT:
        drop_oldest(_GRIDS)
    _GRIDS[key] = grid
    if fixed:
        _keep_by_id(walls, key[2], grid)  # the cell asked for (None: chosen here)
    return grid


def _keep_by_id(walls: FloatArray, cell: float | None, grid: _Grid) -> None:
    if len(_GRIDS_BY_ID) >= _GRIDS_KEPT:
        drop_oldest(_GRIDS_BY_ID)
    _GRIDS_BY_ID[(id(walls), cell)] = (walls, grid)


def _block_cells(hulls: _Hulls, grid: _Grid) -> tuple[IntArray, IntArray, IntArray]:
    """(block, cell, walls in the cell) for every cell holding walls that a block's hull
    (every line between its start and end points) may touch: the hull lies in the segment
    between the points' centres widened by their spread. Blocks ascending."""
    pb, pc = _cover_cells(hulls.centre_s, hulls.centre_e, hulls.spread[:, 0],
                          hulls.spread[:, 1], grid)
    cnt = grid.cell_start[pc + 1] - grid.cell_start[pc]
    busy = cnt > 0
    return pb[busy], pc[busy], cnt[busy]


def _cell_walls(grid: _Grid, pb: IntArray, pc: IntArray, cnt: IntArray
                ) -> tuple[IntArray, IntArray]:
    """(block, wall) for every wall of each (block, cell) row, in row order."""
    within = within_runs(cnt)
    return np.repeat(pb, cnt), grid.cell_walls[np.repeat(grid.cell_start[pc], cnt) + within]


def _axis_keep(walls: FloatArray, bi: IntArray, wi: IntArray,
               axis: tuple[FloatArray, FloatArray, FloatArray]) -> BoolArray:
    """Whether each (block, wall) row's wall overlaps the block along its normal axis."""
    normals, lo, hi = axis
    t_lo, t_hi = _thing_extent(np.take(walls, wi, axis=0), np.take(normals, bi, axis=0), True)
    keep: BoolArray = (t_lo <= hi[bi] + _AXIS_SLACK) & (t_hi >= lo[bi] - _AXIS_SLACK)
    return keep


def _grid_candidates(hulls: _Hulls, walls: FloatArray, which: IntArray | None = None,
                     cell: float | None = None) -> Iterator[tuple[IntArray, IntArray]]:
    """`_candidates` for blocks against walls (those in `which`, default all), by a uniform
    grid over the walls instead of testing every block against every wall: the walls of
    the cells a block's hull may touch (`_block_cells`), then the normal-axis test. Blocks
    ascending, each (block, wall) once, in chunks of about CHUNK_CELLS rows."""
    grid = _wall_grid(walls, which, cell)
    m, b = len(walls), len(hulls.lo)
    pb, pc, cnt = _block_cells(hulls, grid)
    if len(pb) == 0:
        return
    cum = np.cumsum(np.bincount(pb, weights=cnt, minlength=b))
    cuts = np.searchsorted(cum, np.arange(1, int(cum[-1] // CHUNK_CELLS) + 1) * CHUNK_CELLS)
    step = max(1, _DEDUPE_CELLS // m)
    cuts = np.unique(np.concatenate([[0, b], cuts, np.arange(step, b, step)]).astype(np.intp))
    bounds = np.searchsorted(pb, cuts)
    # Not cleared between chunks: every entry a chunk reads it has just written.
    buf = np.empty(min(b, step) * m, dtype=np.int32)
    for k in range(len(cuts) - 1):
        b0, p0, p1 = int(cuts[k]), int(bounds[k]), int(bounds[k + 1])
        if p0 == p1:
            continue
        bi, wi = _cell_walls(grid, pb[p0:p1], pc[p0:p1], cnt[p0:p1])
        keep = _axis_keep(walls, bi, wi, hulls.axis)
        bi, wi = bi[keep], wi[keep]
        # A wall met in several of a block's cells: keep one of its rows (whichever the
        # scatter leaves last; the order of blocks is kept).
        key = (bi - b0) * m + wi
        seq = np.arange(len(key), dtype=np.int32)
        buf[key] = seq
        once = buf[key] == seq
        yield bi[once], wi[once]


def iter_group_candidates(starts: FloatArray, ends: FloatArray, group_start: IntArray,
                          boxes: FloatArray, segments: bool | None = None,
                          ) -> Iterator[tuple[IntArray, IntArray]]:
    """Spatial prune, in bounded chunks: (line, box) pairs whose line's *group* bounding box
    overlaps the box.

    Lines come in contiguous groups (the lines of one pair of creatures) that share most of
    their bounding box, so the box test runs once per group instead of once per line; only
    the survivors reach the exact tests. group_start: first line of each group, ascending.
    boxes: (M, 4) as x0, y0, x1, y1 (any order within each axis). Each chunk holds at most
    about CHUNK_CELLS pairs, whatever the scene's size. With `segments` set (True: the
    things are wall segments, False: boxes), a group must also overlap the thing along the
    normal of the group's general direction (a long diagonal group's bounding box is mostly
    empty).
    """
    n, m = len(starts), len(boxes)
    if n == 0 or m == 0 or len(group_start) == 0:
        return
    lo = np.minimum(starts, ends)
    hi = np.maximum(starts, ends)
    glo = np.minimum.reduceat(lo, group_start, axis=0)
    ghi = np.maximum.reduceat(hi, group_start, axis=0)
    sizes = np.diff(np.append(group_start, n))
    axis = None
    if segments is not None:
        direction = np.add.reduceat(ends - starts, group_start, axis=0)
        normals = _unit_normals(direction)
        line_n = np.repeat(normals, sizes, axis=0)
        ps = starts[:, 0] * line_n[:, 0] + starts[:, 1] * line_n[:, 1]
        pe = ends[:, 0] * line_n[:, 0] + ends[:, 1] * line_n[:, 1]
        axis = (normals, np.minimum.reduceat(np.minimum(ps, pe), group_start),
                np.maximum.reduceat(np.maximum(ps, pe), group_start))
    for gi, bi in _candidates(glo, ghi, sizes, boxes, axis, bool(segments)):
        counts = sizes[gi]
        # Expand each (group, box) candidate to every line of the group.
        first = np.repeat(group_start[gi], counts)
        offset = within_runs(counts)
        yield first + offset, np.repeat(bi, counts)


@dataclass(frozen=True, slots=True)
class _Hulls:
    """What the prunes know of blocks of P x Q lines (every start point to every end
    point): bounding boxes (lo, hi); the normal axis of each block's general direction
    (unit normal, and the interval the block's points cover along it); and the segment
    between the centres of its start and end points, with the points' largest distance
    from their centre along x and y (the hull lies within that segment widened by it)."""

    lo: FloatArray
    hi: FloatArray
    axis: tuple[FloatArray, FloatArray, FloatArray]
    centre_s: FloatArray
    centre_e: FloatArray
    spread: FloatArray


def run_starts(changes: BoolArray) -> BoolArray:
    """Where runs start, from whether each element differs from the one before it
    (changes[k] for k >= 1): the first element, then every change (np.r_[True, changes]
    without np.r_'s parsing, which costs more than the rest for a few elements)."""
    out = np.empty(len(changes) + 1, dtype=bool)
    out[0] = True
    out[1:] = changes
    return out


def next_corners(rings: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Each ring's corners (axis 1) taken from its second, the first last: corner k of the
    result is the corner after corner k (np.roll(rings, -1, axis=1), without the generic
    roll's costs, which are most of the work for a few rings)."""
    out: npt.NDArray[Any] = np.concatenate([rings[:, 1:], rings[:, :1]], axis=1)
    return out


def over_points(f: np.ufunc, pts: npt.NDArray[_Item]) -> npt.NDArray[_Item]:
    """f reduced over axis 1 of (B, P, ...) by P - 1 whole-array calls: per block (or
    ring), the least, largest or summed coordinates of its points (of booleans, with
    np.logical_and or np.logical_or: whether all or any hold). numpy's reduce over a
    short middle axis before a trailing axis of 2 is about five times slower (0.5 ms
    against 0.09 for 3,000 rings of 6 corners). For a few blocks numpy's reduce is the
    quicker (one call); the least and largest only, which no order of the points
    changes (a sum's rounding may)."""
    if pts.shape[0] * pts.shape[1] <= _REDUCE_MAX_POINTS and f is not np.add:
        small: npt.NDArray[_Item] = f.reduce(pts, axis=1)
        return small
    out: npt.NDArray[_Item] = functools.reduce(f, [pts[:, k] for k in range(pts.shape[1])])
    return out


#: Points (blocks x points per block) up to which `over_points` takes numpy's reduce.
_REDUCE_MAX_POINTS = 128


def _hulls(starts: FloatArray, ends: FloatArray) -> _Hulls:
    """The `_Hulls` of blocks with start points (B, P, 2) and end points (B, Q, 2)."""
    lo = np.minimum(over_points(np.minimum, starts), over_points(np.minimum, ends))
    hi = np.maximum(over_points(np.maximum, starts), over_points(np.maximum, ends))
    cs = over_points(np.add, starts) / starts.shape[1]
    ce = over_points(np.add, ends) / ends.shape[1]
    normals = _unit_normals(ce - cs)
    ps = starts[:, :, 0] * normals[:, 0, None] + starts[:, :, 1] * normals[:, 1, None]
    pe = ends[:, :, 0] * normals[:, 0, None] + ends[:, :, 1] * normals[:, 1, None]
    axis = (normals, np.minimum(over_points(np.minimum, ps), over_points(np.minimum, pe)),
            np.maximum(over_points(np.maximum, ps), over_points(np.maximum, pe)))
    spread = np.maximum(over_points(np.maximum, np.abs(starts - cs[:, None, :])),
                        over_points(np.maximum, np.abs(ends - ce[:, None, :])))
    return _Hulls(lo, hi, axis, cs, ce, spread)


def _sub_hulls(hulls: _Hulls, blocks: IntArray) -> _Hulls:
    """The `_Hulls` of some of the blocks, in the order given."""
    def rows(a: FloatArray) -> FloatArray:
        return take_rows(a, blocks)

    normals, lo, hi = hulls.axis
    return _Hulls(rows(hulls.lo), rows(hulls.hi), (rows(normals), rows(lo), rows(hi)),
                  rows(hulls.centre_s), rows(hulls.centre_e), rows(hulls.spread))


def _use_grid(blocks: int, walls: int) -> bool:
    """Whether the grid index pays for a batch of this many blocks and walls."""
    return walls >= GRID_MIN_WALLS and blocks * walls >= GRID_MIN_WORK


def _block_candidates(starts: FloatArray, ends: FloatArray, things: FloatArray,
                      segments: bool, hulls: _Hulls | None = None,
                      which: IntArray | None = None) -> Iterator[tuple[IntArray, IntArray]]:
    """(block, thing) candidates for blocks of P x Q lines (every start to every end), by
    the bounding-box and normal-axis tests of `_candidates`, or for many walls by the
    grid index and the normal-axis test (`_grid_candidates`); only the things `which`
    when given (indices stay those of `things`). Blocks come in ascending order, each
    (block, thing) once."""
    if hulls is None:
        hulls = _hulls(starts, ends)
    m = len(things) if which is None else len(which)
    if segments and _use_grid(len(starts), m):
        yield from _grid_candidates(hulls, things, which)
        return
    sizes = np.ones(len(starts), dtype=np.intp)
    sub = things if which is None else take_rows(things, which)
    for bi, ti in _candidates(hulls.lo, hulls.hi, sizes, sub, hulls.axis, segments):
        yield bi, (ti if which is None else which[ti])


def group_candidates(starts: FloatArray, ends: FloatArray, group_start: IntArray,
                     boxes: FloatArray) -> tuple[IntArray, IntArray]:
    """All of iter_group_candidates at once."""
    return _collect(list(iter_group_candidates(starts, ends, group_start, boxes)))


def _pruned(starts: FloatArray, ends: FloatArray, things: FloatArray,
            group_start: IntArray | None,
            exact: Callable[[FloatArray, FloatArray, FloatArray], BoolArray],
            segments: bool) -> tuple[IntArray, IntArray]:
    """(line, thing) pairs that pass the spatial prune and then the exact row-paired test
    (each line its own group, bounding boxes only, when no groups are given)."""
    axis: bool | None = segments
    if group_start is None:
        group_start = np.arange(len(starts), dtype=np.intp)
        axis = None
    parts = []
    for li, ti in iter_group_candidates(starts, ends, group_start, things, axis):
        hit = exact(take_rows(starts, li), take_rows(ends, li), take_rows(things, ti))
        parts.append((li[hit], ti[hit]))
    return _collect(parts)


def _collect(parts: list[tuple[IntArray, IntArray]]) -> tuple[IntArray, IntArray]:
    if not parts:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty.copy()
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def segments_cross_walls(starts: FloatArray, ends: FloatArray, walls: FloatArray,
                         group_start: IntArray | None = None) -> tuple[IntArray, IntArray]:
    """Which walls block which lines, by the crossing convention above.

    starts, ends: (N, 2) line endpoints; walls: (M, 4) as x0, y0, x1, y1; group_start
    optionally names contiguous groups of lines for the spatial prune (default: every line
    its own group). Returns (line_index, wall_index) for every blocking pair.
    """
    return _pruned(starts, ends, walls, group_start, _cross, True)


def _cross(starts: FloatArray, ends: FloatArray, walls: FloatArray) -> BoolArray:
    """Row-paired lines and walls: does the wall block the line (the convention above)?"""
    px, py, qx, qy = starts[:, 0], starts[:, 1], ends[:, 0], ends[:, 1]
    ax, ay, bx, by = walls[:, 0], walls[:, 1], walls[:, 2], walls[:, 3]
    o1 = np.sign(_orient(px, py, qx, qy, ax, ay))
    o2 = np.sign(_orient(px, py, qx, qy, bx, by))
    o3 = np.sign(_orient(ax, ay, bx, by, px, py))
    o4 = np.sign(_orient(ax, ay, bx, by, qx, qy))
    # Wall endpoints on or across the line, and the line's endpoints strictly on both sides
    # of the wall's line: the touch point is inside the line, never at its ends; collinear
    # pairs have o3 == o4 == 0 and fall out.
    hit: BoolArray = (o1 * o2 <= 0) & (o3 * o4 < 0)
    return hit


def cross_paired(starts: FloatArray, ends: FloatArray, walls: FloatArray) -> BoolArray:
    """Row-paired lines and walls: does the wall block the line (the convention above)? The
    exact test `segments_cross_walls` ends in, for callers that pick their own candidate
    (line, wall) pairs."""
    return _cross(starts, ends, walls)


def blocks_cross_walls(
        starts: FloatArray, ends: FloatArray,
        walls: FloatArray) -> tuple[IntArray, IntArray, npt.NDArray[np.int8]]:
    """The crossing convention for blocks of P x Q lines: every line from one of a block's
    P start points to one of its Q end points (the lines between two creatures' corners).

    starts: (B, P, 2), ends: (B, Q, 2). Returns (line, wall, side) for every hit, where line
    is block * P * Q + p * Q + q, and side is Foundry's side of the line's start (1 left,
    2 right; the end is always on the other side of a wall that blocks).

    Works per (block, wall) first: a wall can block a line only if its start and end lie
    strictly on opposite sides of the wall's line, and those P + Q orientations decide it
    for all P * Q lines at once; the wall's ends are then tested densely, in chunks sized to
    stay in cache.
    """
    line, wall, side, _ = blocks_cross_walls_any(starts, ends, walls, None)
    return line, wall, side


def _block_hits(starts: FloatArray, ends: FloatArray, walls: FloatArray, cb: IntArray,
                cw: IntArray) -> tuple[BoolArray, FloatArray]:
    """Rows of (block, wall): which of the block's P x Q lines the wall blocks (C, P, Q),
    and the orientation of each start point to the wall (C, P, 1)."""
    # Worked out with the rows last, (P, Q, C): numpy broadcasts a (P, 1, C) operand over
    # long inner loops there, where rows first would loop over Q (4) at a time (twice the
    # time). The same operations on the same numbers: the same results.
    w = np.take(walls, cw, axis=0).T  # (4, C)
    ax, ay, bx, by = w[0], w[1], w[2], w[3]
    s = np.take(starts, cb, axis=0).transpose(2, 1, 0).copy()  # (2, P, C)
    e = np.take(ends, cb, axis=0).transpose(2, 1, 0).copy()  # (2, Q, C)
    px, py = s[0][:, None, :], s[1][:, None, :]  # (P, 1, C)
    qx, qy = e[0][None, :, :], e[1][None, :, :]  # (1, Q, C)
    o3 = _orient(ax, ay, bx, by, px, py)  # (P, 1, C)
    o4 = _orient(ax, ay, bx, by, qx, qy)  # (1, Q, C)
    dx, dy = qx - px, qy - py  # (P, Q, C)
    o1 = dx * (ay - py) - dy * (ax - px)
    o2 = dx * (by - py) - dy * (bx - px)
    # Dense over the block's lines: cheaper than gathering the few that survive.
    hit: BoolArray = np.ascontiguousarray(((o3 * o4 < 0) & (o1 * o2 <= 0)).transpose(2, 0, 1))
    return hit, o3.transpose(2, 0, 1)


def _or_runs(out: BoolArray, cb: IntArray, hit: BoolArray) -> None:
    """out[block] |= hit for rows that come block by block (ascending): each run of a
    block's rows ORed first (a block listed twice in one fancy assignment would keep only
    one of its rows)."""
    first = np.flatnonzero(run_starts(cb[1:] != cb[:-1]))
    if not out.flags.c_contiguous:
        out[cb[first]] |= np.logical_or.reduceat(hit, first, axis=0)
        return
    # As whole words: each block's P x Q booleans (0 or 1 bytes) ORed several at a time.
    per = hit[0].size if len(hit) else 1
    word = next(w for w in ("u8", "u4", "u2", "u1") if per % int(w[1]) == 0)
    flat_out: npt.NDArray[np.unsignedinteger[Any]] = out.reshape(len(out), -1).view(word)
    flat_hit = np.ascontiguousarray(hit).reshape(len(hit), -1).view(word)
    rows = cb[first]
    flat_out[rows] = flat_out[rows] | np.bitwise_or.reduceat(flat_hit, first, axis=0)


# Per walls array (by identity: a scene's wall arrays are kept per set of walls, and every
# snapshot of a token moving shares them), the merged runs of a few subsets of it. Found by
# identity and an equality test of the subset, not by hashing the walls' bytes (640 KB at
# 20,000 walls: a millisecond a call).
_RUNS: dict[int, tuple[FloatArray, list[tuple[IntArray, FloatArray]]]] = {}
_RUNS_KEPT = 8
_RUNS_SUBSETS = 8


def _merged_runs(walls: FloatArray, which: IntArray) -> FloatArray:
    """The walls `which` for a test that only asks whether a line crosses any of them:
    walls running exactly along one vertical (or horizontal) line that touch or overlap
    merged into one wall per run (a room's side drawn as many segments and doors is one
    wall here), the others as they are. Kept for the last few sets of walls.

    A line crosses a run exactly when it crosses one of its walls, in floating point too:
    along an axis-parallel run every wall shares the run's orientation to the line's ends
    (the same exact products), and the computed orientation of a point of the run to the
    line is monotone along the run (each operation rounds monotonically), so the run's
    ends lie on opposite sides of the line, or one on it, exactly when some wall's do."""
    held = _RUNS.get(id(walls))
    if held is not None and held[0] is walls:
        for subset, found in held[1]:
            if np.array_equal(subset, which):
                return found
    sub = np.take(walls, which, axis=0)
    vertical = (sub[:, 0] == sub[:, 2]) & (sub[:, 1] != sub[:, 3])
    horizontal = (sub[:, 1] == sub[:, 3]) & (sub[:, 0] != sub[:, 2])
    parts = [np.compress(~vertical & ~horizontal, sub, axis=0)]
    for mask, along, across in ((vertical, 1, 0), (horizontal, 0, 1)):
        w = np.compress(mask, sub, axis=0)
        at = w[:, across]
        lo = np.minimum(w[:, along], w[:, along + 2])
        hi = np.maximum(w[:, along], w[:, along + 2])
        order = np.lexsort((lo, at))
        runs: list[tuple[float, float, float]] = []
        for a, b, c in zip(at[order].tolist(), lo[order].tolist(), hi[order].tolist(),
                           strict=True):
            if runs and runs[-1][0] == a and b <= runs[-1][2]:
                if c > runs[-1][2]:
                    runs[-1] = (a, runs[-1][1], c)
            else:
                runs.append((a, b, c))
        r = np.array(runs, dtype=np.float64).reshape(-1, 3)
        out = np.empty((len(r), 4))
        out[:, across], out[:, across + 2] = r[:, 0], r[:, 0]
        out[:, along], out[:, along + 2] = r[:, 1], r[:, 2]
        parts.append(out)
    merged = np.concatenate(parts)
    merged.flags.writeable = False
    if held is None or held[0] is not walls:
        if len(_RUNS) >= _RUNS_KEPT:
            drop_oldest(_RUNS)
        held = _RUNS[id(walls)] = (walls, [])
    held[1][:] = [(which.copy(), merged), *held[1][:_RUNS_SUBSETS - 1]]
    return merged


# Per merged runs (by identity: `_merged_runs` keeps one array per set of walls): the run
# that last sealed a block, by a key of the block's start points and one of its end points
# (a creature's corners or ring). A token that moves a square is still cut off from most
# of those it was cut off from by the same wall, and a filtered table of one attacker
# follows every pair it has: trying that run first spares the walk over the grid's cells
# (at 1,000 tokens and 20,000 walls, most of an attacker's move). A hint is only tried: a
# block is sealed by the block test, never by the hint, so a stale or colliding hint costs
# one test and changes no answer.
_SEALERS: dict[int, tuple[FloatArray, dict[int, int]]] = {}
_SEALERS_KEPT = 8
#: Hints kept per set of runs (two per block sealed: its start and its end points' keys);
#: past this the hints start again from empty.
_SEALERS_MAX = 1 << 16
#: Blocks past which a call neither reads nor keeps hints: a whole table's trace (tens of
#: thousands of blocks on hex grids) finds few and would spend milliseconds on the keys
#: alone; a move's, or one attacker's 999 pairs at the limits, is what they are for. (A
#: caller cutting a bigger batch into calls asks `sealed_blocks` for no hints.)
HINT_MAX_BLOCKS = 2048
# Odd multipliers for the keys of point sets (fixed: keys must agree from call to call).
_KEY_MULT = np.random.default_rng(20261206).integers(
    1, 1 << 62, size=64, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


def forget_hints() -> None:
    """Forget every run kept as the last to seal a block (`_SEALERS`): the next walk is a
    first one's."""
    _SEALERS.clear()


def _point_keys(points: FloatArray) -> npt.NDArray[np.uint64]:
    """A 64-bit key per block of points (B, K, 2), from their coordinates' bits: equal
    points, equal keys; different points, almost surely different keys (a hint's key only
    picks which run to try first)."""
    bits = np.ascontiguousarray(points, dtype=np.float64).reshape(len(points), -1)
    u = bits.view(np.uint64)
    mult = _KEY_MULT if u.shape[1] <= len(_KEY_MULT) else np.resize(_KEY_MULT, u.shape[1])
    keys: npt.NDArray[np.uint64] = (u * mult[:u.shape[1]]).sum(axis=1, dtype=np.uint64)
    return keys ^ np.uint64(u.shape[1])


@dataclass(slots=True)
class _Hints:
    """Each block's keys (of its start and of its end points) and the run that seals it
    (-1: none found yet), for one call over merged runs `runs`."""

    runs: FloatArray
    start_keys: list[int]
    end_keys: list[int]
    sealer: IntArray
    #: Blocks a hint sealed (nothing new to keep for them).
    hinted: BoolArray | None = None


def _hinted(starts: FloatArray, ends: FloatArray, runs: FloatArray,
            step: int, use: bool = True) -> tuple[_Hints, BoolArray]:
    """Blocks sealed by the run that last sealed a block with the same start points or the
    same end points (`_SEALERS`), tested now: the hints of this call, and which blocks a
    hint sealed (their `sealer` set). None read or kept without `use`, or past
    HINT_MAX_BLOCKS."""
    b = len(starts)
    if not use or b > HINT_MAX_BLOCKS:
        return _Hints(runs, [], [], np.full(b, -1, dtype=np.intp)), np.zeros(b, dtype=bool)
    hints = _Hints(runs, _point_keys(starts).tolist(), _point_keys(ends).tolist(),
                   np.full(b, -1, dtype=np.intp))
    held = _SEALERS.get(id(runs))
    if held is None or held[0] is not runs or not held[1]:
        return hints, np.zeros(b, dtype=bool)
    get = held[1].get
    by_start = np.fromiter(map(get, hints.start_keys, itertools.repeat(-1)),
                           dtype=np.intp, count=b)
    by_end = np.fromiter(map(get, hints.end_keys, itertools.repeat(-1)),
                         dtype=np.intp, count=b)
    # The end's hint first (an attacker moving keeps its targets' points), then the
    # start's where it differs, for the blocks the first did not seal.
    for cand, blocks in ((by_end, None), (by_start, by_end)):
        ok = cand >= 0
        if blocks is not None:
            ok &= (cand != blocks) & (hints.sealer < 0)
        rows = np.flatnonzero(ok)
        _try_sealers(starts, ends, runs, step, hints.sealer, rows, cand[rows])
    hints.hinted = hints.sealer >= 0
    return hints, hints.hinted.copy()


def _try_sealers(starts: FloatArray, ends: FloatArray, runs: FloatArray, step: int,
                 sealer: IntArray, blocks: IntArray, cand: IntArray) -> None:
    """Rows (block blocks[k], run cand[k]), `step` at a time: sealer[block] set to the run
    where it crosses every line of the block (the block test)."""
    for c0 in range(0, len(blocks), step):
        cb, cw = blocks[c0:c0 + step], cand[c0:c0 + step]
        hit, _ = _block_hits(starts, ends, runs, cb, cw)
        seal = hit.reshape(len(cb), -1).all(axis=1)
        sealer[cb[seal]] = cw[seal]


def _remember(hints: _Hints) -> None:
    """Keep the runs found to seal blocks of this call as hints for later calls."""
    new = hints.sealer >= 0
    if hints.hinted is not None:
        new &= ~hints.hinted
    found = np.flatnonzero(new)
    if len(found) == 0 or not hints.start_keys:
        return
    runs = hints.runs
    held = _SEALERS.get(id(runs))
    if held is None or held[0] is not runs:
        if len(_SEALERS) >= _SEALERS_KEPT:
            drop_oldest(_SEALERS)
        held = _SEALERS[id(runs)] = (runs, {})
    table = held[1]
    if len(table) + 2 * len(found) > _SEALERS_MAX:
        table.clear()
    walls = hints.sealer[found].tolist()
    idx = found.tolist()
    table.update(zip([hints.start_keys[k] for k in idx], walls, strict=True))
    table.update(zip([hints.end_keys[k] for k in idx], walls, strict=True))


# Cells per block in the first round of `_crossed_any`; each round after takes twice as
# many.
_ROUND_CELLS = 1


def _crossed_any(starts: FloatArray, ends: FloatArray, walls: FloatArray, which: IntArray,
                 out: BoolArray, step: int, hulls: _Hulls | None = None,
                 cell: float | None = None, sealed: BoolArray | None = None) -> None:
    """Sets out[block, p, q] where line (p, q) of a block crosses any of the walls `which`.
    Only whether a line crosses one matters, so a block whose lines are all crossed is
    looked at no further: the walls of its cells (`_block_cells`) are tested a few cells
    at a time, in rounds, until it is or its cells run out (a wall seen in two cells is
    tested twice, which changes nothing: no dedupe).

    With `sealed` (B,), also sets sealed[block] where one (merged) wall tested crosses
    every line of the block: it separates the block's two hulls of points wholly
    (geometry.openings, 'Sealed'). A block may be done before its sealing wall is tested:
    sealed is a subset of the blocks that are."""
    if len(which) == 0 or len(starts) == 0:
        return
    walls = _merged_runs(walls, which)
    grid = _wall_grid(walls, None, cell)
    if hulls is None:
        hulls = _hulls(starts, ends)
    b = len(starts)
    # Blocks a hint seals are done (a sealing run crosses every line): no cells walked.
    hints, done = _hinted(starts, ends, walls, step)
    if done.any():
        out[done] = True
        if sealed is not None:
            sealed[done] = True
        rest = np.flatnonzero(~done)
        pb, pc, cnt = _block_cells(_sub_hulls(hulls, rest), grid)
        pb = rest[pb]
    else:
        pb, pc, cnt = _block_cells(hulls, grid)
    if len(pb) == 0:
        _remember(hints)
        return
    per = np.bincount(pb, minlength=b)
    first = np.cumsum(per) - per
    # Each row's place in its block's walk, from the middle of the block outwards (the
    # walls between two creatures' rooms are more likely away from either end), and the
    # round it falls in: rounds of _ROUND_CELLS, then twice as many each time.
    pos = np.arange(len(pb)) - first[pb]
    n = per[pb]
    rank = np.where(2 * pos >= n, 2 * pos - n, n - 1 - 2 * pos)
    rnd = np.floor(np.log2(rank / _ROUND_CELLS + 1)).astype(np.uint8)
    order = np.argsort(rnd, kind="stable")
    cuts = np.searchsorted(rnd[order], np.arange(int(rnd.max()) + 2))
    for k in range(len(cuts) - 1):
        rows = order[cuts[k]:cuts[k + 1]]
        # With `sealed`, a block done but not sealed goes on: its sealing wall may lie in a
        # cell not reached yet (the later rounds' rows of such blocks only).
        rows = rows[~(done & sealed)[pb[rows]] if sealed is not None else ~done[pb[rows]]]
        if len(rows) == 0:
            continue
        bi, wi = _cell_walls(grid, pb[rows], pc[rows], cnt[rows])
        keep = _axis_keep(walls, bi, wi, hulls.axis)
        bi, wi = bi[keep], wi[keep]
        for c0 in range(0, len(bi), step):
            cb, cw = bi[c0:c0 + step], wi[c0:c0 + step]
            hit, _ = _block_hits(starts, ends, walls, cb, cw)
            _or_runs(out, cb, hit)
            seal = hit.reshape(len(cb), -1).all(axis=1)
            hints.sealer[cb[seal]] = cw[seal]
            if sealed is not None:
                sealed[cb[seal]] = True
        blocks = pb[rows]  # ascending
        act = blocks[run_starts(blocks[1:] != blocks[:-1])]
        done[act] = out[act].reshape(len(act), -1).all(axis=1)
    _remember(hints)


def blocks_cross_walls_any(
        starts: FloatArray, ends: FloatArray, walls: FloatArray, alike: BoolArray | None,
        still: BoolArray | None = None, sealed: BoolArray | None = None,
        still_when_sealed: bool = False,
        ) -> tuple[IntArray, IntArray, npt.NDArray[np.int8], IntArray]:
    """`blocks_cross_walls`, except that walls marked `alike` (interchangeable for whoever
    reads the hits: it only asks whether a line crosses any of them) are not listed hit by
    hit: the fourth array holds each line that crosses at least one of them, once. A dense
    scene's lines cross dozens of walls each; this keeps the hits to what differs.

    With `still` (walls that matter to the reader even on a line that crosses an alike
    wall), a line that crosses an alike wall lists no other hits than those of `still`
    walls: a block whose every line crosses one is tested against nothing else.

    With `sealed` (B,), sets sealed[block] where one alike wall (or merged run of them)
    tested crosses every line of the block (`_crossed_any`): a subset of such blocks. A
    sealed block lists no `still` walls either: that wall stops every one of its lines, so
    no corner of it is only partly blocked, the one case where an arrow slit on a stopped
    line counts (rulesets/corner.py, `_levels`). Unless `still_when_sealed`: blocks cut
    from bigger ones (geometry/trace.py, `trace_block_groups`), where a corner's lines may
    run in two cuts, one of them sealed."""
    b, m = len(starts), len(walls)
    empty_i = np.empty(0, dtype=np.intp)
    if b == 0 or m == 0:
        return empty_i, empty_i.copy(), np.empty(0, dtype=np.int8), empty_i.copy()
    p_n, q_n = starts.shape[1], ends.shape[1]
    parts: list[tuple[IntArray, IntArray, npt.NDArray[np.int8]]] = []
    any_alike = np.zeros((b, p_n, q_n), dtype=bool) if alike is not None else None
    step = max(1, 65536 // (p_n * q_n))
    listed = None  # the walls listed hit by hit, when not all
    hulls = _hulls(starts, ends)
    passes: list[tuple[IntArray | None, IntArray]] = []  # (blocks or all, walls)
    if any_alike is not None and alike is not None and _use_grid(b, m) and alike.any():
        _crossed_any(starts, ends, walls, np.flatnonzero(alike), any_alike, step, hulls,
                     sealed=sealed)
        listed = np.flatnonzero(~alike)
        if still is not None and len(listed):
            # Blocks whose every line is crossed meet only the `still` walls, and sealed
            # blocks not even those.
            open_blocks = np.flatnonzero(~any_alike.reshape(b, -1).all(axis=1))
            kept = still[listed]
            passes = [(open_blocks, listed[~kept]),
                      (None if sealed is None or still_when_sealed
                       else np.flatnonzero(~sealed), listed[kept])]
        else:
            passes = [(None, listed)]
    for blocks, which in passes if listed is not None else [(None, None)]:
        if which is not None and len(which) == 0:
            continue
        if blocks is None:
            candidates = _block_candidates(starts, ends, walls, True, hulls, which)
        elif len(blocks) == 0:
            continue
        else:
            candidates = ((blocks[bi], wi) for bi, wi in _block_candidates(
                take_rows(starts, blocks), take_rows(ends, blocks), walls, True,
                _sub_hulls(hulls, blocks), which))
        for bi, wi in candidates:
            if listed is None and any_alike is not None and alike is not None:
                same = alike[wi]
                ab, aw = bi[same], wi[same]
                for c0 in range(0, len(ab), step):
                    cb = ab[c0:c0 + step]
                    hit, _ = _block_hits(starts, ends, walls, cb, aw[c0:c0 + step])
                    _or_runs(any_alike, cb, hit)
                    if sealed is not None:
                        sealed[cb[hit.reshape(len(cb), -1).all(axis=1)]] = True
                bi, wi = bi[~same], wi[~same]
            for c0 in range(0, len(bi), step):
                cb, cw = bi[c0:c0 + step], wi[c0:c0 + step]
                hit, o3 = _block_hits(starts, ends, walls, cb, cw)
                ci, k, el = np.nonzero(hit)
                if ci.size == 0:
                    continue
                # Foundry's orient2dFast is the negative of this orientation: positive is
                # left.
                side = np.where(o3[ci, k, 0] > 0, 1, 2).astype(np.int8)
                parts.append((cb[ci] * (p_n * q_n) + k * q_n + el, cw[ci], side))
    crossed = (np.flatnonzero(any_alike.reshape(-1)) if any_alike is not None
               else empty_i.copy())
    if not parts:
        return empty_i, empty_i.copy(), np.empty(0, dtype=np.int8), crossed
    line, wall, side = (np.concatenate([p[0] for p in parts]),
                        np.concatenate([p[1] for p in parts]),
                        np.concatenate([p[2] for p in parts]))
    if still is not None and any_alike is not None:
        keep = ~any_alike.reshape(-1)[line] | still[wall]
        line, wall, side = line[keep], wall[keep], side[keep]
    return line, wall, side, crossed


def block_candidates(starts: FloatArray, ends: FloatArray,
                     walls: FloatArray) -> tuple[IntArray, IntArray]:
    """(block, wall) pairs, blocks ascending, for blocks of P x Q lines (starts (B, P, 2),
    ends (B, Q, 2)): every wall that may touch a line between a start and an end point (the
    prunes `blocks_cross_walls` applies: bounding boxes and the normal axis, or the grid).
    The lines of effect between two spaces (geometry.openings) lie in the hull the prunes
    bound, so these are every wall that may touch one."""
    if len(starts) == 0 or len(walls) == 0:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty.copy()
    return _collect(list(_block_candidates(starts, ends, walls, True)))


#: Lines `sealed_blocks` tests in one call of the block test (a chunk that stays in cache).
SEAL_STEP_LINES = 65536


def sealed_blocks(starts: FloatArray, ends: FloatArray, walls: FloatArray,
                  which: IntArray, hints: bool = True) -> BoolArray:
    """Per block of P x Q lines (starts (B, P, 2), ends (B, Q, 2)): whether one of the walls
    `which` (axis-parallel ones touching end to end merged into runs) crosses every line of
    the block. Only for walls that stop a line alone (plain ones): such a wall separates
    the block's two hulls of points wholly (geometry.openings, 'Sealed').

    The run that last sealed a block with the same start or end points is tried first
    (`_SEALERS`), unless `hints` is False; the other blocks are looked for as `_seal_walk`
    says."""
    b = len(starts)
    if b == 0 or len(which) == 0:
        return np.zeros(b, dtype=bool)
    p_n, q_n = starts.shape[1], ends.shape[1]
    runs = _merged_runs(walls, which)
    got, sealed = _hinted(starts, ends, runs, max(1, SEAL_STEP_LINES // (p_n * q_n)), hints)
    rest = np.flatnonzero(~sealed)
    if len(rest):
        found = _seal_walk(take_rows(starts, rest), take_rows(ends, rest), runs)
        got.sealer[rest] = found
        sealed[rest] = found >= 0
    _remember(got)
    return sealed


def _seal_walk(starts: FloatArray, ends: FloatArray, runs: FloatArray) -> IntArray:
    """Per block: a run of `runs` that crosses every line of the block (-1: none).

    Such a run crosses in particular two of the block's own lines: from the start to the
    end point furthest to one side of the line between their centres, and furthest to the
    other. Only the runs in the grid's cells along the first of them that cross both are
    tested against all of the block's lines, each block's first such run before its
    others (nearly every one left seals its block)."""
    b = len(starts)
    sealer = np.full(b, -1, dtype=np.intp)
    p_n, q_n = starts.shape[1], ends.shape[1]
    # The same grid as `_crossed_any` builds over the same runs (one cache entry).
    grid = _wall_grid(runs)
    # Two of the block's lines: between the start and the end point furthest to one side
    # of the line between their centres, and furthest to the other. A wall crossing every
    # line crosses both, which few walls near a block do: only those are tested against
    # all of its lines. The walls are looked for in the grid's cells along the first line
    # (a thin strip, not the block's whole hull).
    # (Sums over the points as `mean` takes them, and the sides' products per coordinate:
    # numpy's reductions over a short middle axis are slow, `over_points`.)
    axis = over_points(np.add, ends) / q_n - over_points(np.add, starts) / p_n
    nx, ny = -axis[:, 1:2], axis[:, 0:1]
    every = np.arange(b)
    side_s = starts[..., 0] * nx + starts[..., 1] * ny
    side_e = ends[..., 0] * nx + ends[..., 1] * ny
    edges = [(starts[every, pick(side_s, axis=1)], ends[every, pick(side_e, axis=1)])
             for pick in (np.argmax, np.argmin)]
    hulls = _hulls(edges[0][0][:, None, :], edges[0][1][:, None, :])
    pb, pc, cnt = _block_cells(hulls, grid)
    cum = np.cumsum(cnt)
    cuts = np.searchsorted(cum, np.arange(CHUNK_CELLS, int(cum[-1]) if len(cum) else 0,
                                          CHUNK_CELLS))
    step = max(1, SEAL_STEP_LINES // (p_n * q_n))
    for r0, r1 in itertools.pairwise([0, *cuts.tolist(), len(pb)]):
        bi, wi = _cell_walls(grid, pb[r0:r1], pc[r0:r1], cnt[r0:r1])
        keep = _axis_keep(runs, bi, wi, hulls.axis)
        bi, wi = bi[keep], wi[keep]
        w = np.take(runs, wi, axis=0)
        keep = np.ones(len(bi), dtype=bool)
        for s0, e0 in edges:
            keep &= _cross(np.take(s0, bi, axis=0), np.take(e0, bi, axis=0), w)
        bi, wi = bi[keep], wi[keep]
        # Nearly every wall left seals its block: each block's first is tested, then the
        # others of the blocks it did not seal (blocks ascending).
        first = np.ones(len(bi), dtype=bool)
        first[1:] = bi[1:] != bi[:-1]
        for which_rows in (first, ~first):
            rows = np.flatnonzero(which_rows & (sealer[bi] < 0))
            _try_sealers(starts, ends, runs, step, sealer, bi[rows], wi[rows])
    return sealer


def block_hits(starts: FloatArray, ends: FloatArray, walls: FloatArray, cb: IntArray,
               cw: IntArray) -> tuple[BoolArray, FloatArray]:
    """Rows of (block cb[k], wall cw[k]): which of the block's P x Q lines the wall blocks
    (C, P, Q), by the crossing convention, and each start point's orientation to the
    wall."""
    return _block_hits(starts, ends, walls, cb, cw)


def merged_runs(walls: FloatArray, which: IntArray) -> FloatArray:
    """The walls `which`, axis-parallel ones that touch or overlap end to end merged into
    one per run (`_merged_runs`): for tests that only ask whether a line crosses any."""
    return _merged_runs(walls, which)


def foundry_side(walls: FloatArray, points: FloatArray) -> npt.NDArray[np.int8]:
    """Foundry's Wall#orientPoint for row-paired walls and points: 0 both, 1 left, 2 right."""
    ax, ay, bx, by = walls[:, 0], walls[:, 1], walls[:, 2], walls[:, 3]
    px, py = points[:, 0], points[:, 1]
    o = (ay - py) * (bx - px) - (ax - px) * (by - py)
    side = np.zeros(len(o), dtype=np.int8)
    side[o < 0] = 1
    side[o > 0] = 2
    return side


def enter_paired(starts: FloatArray, ends: FloatArray, boxes: FloatArray) -> BoolArray:
    """Row-paired lines and boxes: does the line pass through the box's open interior?"""
    # The block test's operations broadcast over plain rows as well.
    return _enter_block(starts, ends, boxes)


def segments_enter_boxes(starts: FloatArray, ends: FloatArray, boxes: FloatArray,
                         group_start: IntArray | None = None) -> tuple[IntArray, IntArray]:
    """Which lines pass through the open interior of which axis-aligned boxes.

    boxes: (T, 4) as x0, y0, x1, y1 with x0 < x1, y0 < y1. Grazing a corner or running along
    an edge is not entering. group_start as for segments_cross_walls. Returns
    (line_index, box_index) pairs.
    """
    return _pruned(starts, ends, boxes, group_start, enter_paired, False)


def _enter_block(starts: FloatArray, ends: FloatArray, boxes: FloatArray) -> BoolArray:
    """Whether lines pass through boxes' open interiors (a slab clip), on row-paired
    arrays (N, 2) / (N, 4) or broadcast blocks (starts (C, P, 1, 2), ends (C, 1, Q, 2),
    boxes (C, 1, 1, 4)) without copying each line's points and box out first."""
    return _slab_enter((starts[..., 0], starts[..., 1]), (ends[..., 0], ends[..., 1]),
                       tuple(boxes[..., k] for k in range(4)))


def _slab_enter(start: Sequence[FloatArray], end: Sequence[FloatArray],
                box: Sequence[FloatArray]) -> BoolArray:
    """`_enter_block` on coordinates given apart (x and y of the starts and ends; x0, y0,
    x1, y1 of the boxes), broadcast together."""
    with np.errstate(divide="ignore", invalid="ignore"):
        tlo: FloatArray = np.zeros(1)
        thi: FloatArray = np.ones(1)
        for axis in (0, 1):
            p = start[axis]
            d = end[axis] - p
            b0, b1 = box[axis], box[axis + 2]
            ta, tb = (b0 - p) / d, (b1 - p) / d
            still = d == 0
            inside = (p > b0) & (p < b1)
            tlo = np.maximum(tlo, np.where(still, np.where(inside, -np.inf, np.inf),
                                           np.minimum(ta, tb)))
            thi = np.minimum(thi, np.where(still, np.where(inside, np.inf, -np.inf),
                                           np.maximum(ta, tb)))
    entered: BoolArray = thi - tlo > _INSIDE_EPS
    return entered


def blocks_enter_boxes(starts: FloatArray, ends: FloatArray, boxes: FloatArray,
                       skip: BoolArray | None = None) -> tuple[IntArray, IntArray]:
    """`segments_enter_boxes` for blocks of P x Q lines (as `blocks_cross_walls` numbers
    them): the same test, element for element, on every line of each candidate block at
    once instead of gathering lines one by one. Lines marked in `skip` (B, P, Q) list no
    hits, and a block whose lines all are is not tested at all."""
    b, m = len(starts), len(boxes)
    empty = np.empty(0, dtype=np.intp)
    if b == 0 or m == 0:
        return empty, empty.copy()
    p_n, q_n = starts.shape[1], ends.shape[1]
    parts: list[tuple[IntArray, IntArray]] = []
    step = max(1, 65536 // (p_n * q_n))
    blocks = None
    if skip is not None:
        blocks = np.flatnonzero(~skip.reshape(b, -1).all(axis=1))
        if len(blocks) == 0:
            return empty, empty.copy()
        if len(blocks) == b:
            blocks = None
    sub_s, sub_e = ((starts, ends) if blocks is None
                    else (take_rows(starts, blocks), take_rows(ends, blocks)))
    for bi, ti in _block_candidates(sub_s, sub_e, boxes, False):
        if blocks is not None:
            bi = blocks[bi]
        for c0 in range(0, len(bi), step):
            cb, ct = bi[c0:c0 + step], ti[c0:c0 + step]
            # Rows last, (P, Q, C), as in `_block_hits`: long inner loops.
            s = np.take(starts, cb, axis=0).transpose(2, 1, 0).copy()  # (2, P, C)
            e = np.take(ends, cb, axis=0).transpose(2, 1, 0).copy()  # (2, Q, C)
            box = np.take(boxes, ct, axis=0).T.copy()  # (4, C)
            hit = np.ascontiguousarray(_slab_enter(
                (s[0][:, None], s[1][:, None]), (e[0][None], e[1][None]),
                tuple(box)).transpose(2, 0, 1))
            if skip is not None:
                hit &= ~np.take(skip, cb, axis=0)
            ci = np.flatnonzero(hit)
            if ci.size == 0:
                continue
            blk = ci // (p_n * q_n)
            parts.append((cb[blk] * (p_n * q_n) + ci % (p_n * q_n), ct[blk]))
    return _collect(parts)


@dataclass(frozen=True, slots=True)
class _PolygonIndex:
    """A region's polygon, prepared once, with its sides in an STRtree (a simple ring only:
    `fast` is False for anything else, which gets GEOS's relate for every line)."""

    fast: bool
    #: Sides as (x0, y0, x1, y1) rows, and the tree over them.
    sides: FloatArray
    tree: shapely.STRtree | None


# Per polygon (by value): its index, built at most once per region whatever the scene's
# revision (a region is part of the scene's value; Shapely geometries hash by coordinates).
_POLYGONS: weakref.WeakKeyDictionary[shapely.Polygon, _PolygonIndex] = (
    weakref.WeakKeyDictionary())


def _polygon_index(poly: shapely.Polygon) -> _PolygonIndex:
    held = _POLYGONS.get(poly)
    if held is not None:
        return held
    shapely.prepare(poly)
    fast = bool(poly.is_valid) and not poly.interiors and poly.geom_type == "Polygon"
    ring = np.asarray(poly.exterior.coords, dtype=np.float64) if fast else np.empty((0, 2))
    sides = np.concatenate([ring[:-1], ring[1:]], axis=1) if len(ring) > 1 else np.empty((0, 4))
    tree = shapely.STRtree(shapely.linestrings(sides.reshape(-1, 2, 2))) if fast else None
    index = _PolygonIndex(fast, sides, tree)
    _POLYGONS[poly] = index
    return index


def polygon_sides_meeting(poly: shapely.Polygon, area: shapely.Geometry) -> FloatArray:
    """The sides of a region's polygon that meet `area`, as (x0, y0, x1, y1) rows in ring
    order, found in the polygon's side index (built once per region). The only sides that
    can cast a shadow from a point onto a body are those meeting the convex hull of the
    two, so a region of thousands of sides adds per pair only the few near the line of
    sight."""
    index = _polygon_index(poly)
    if index.tree is None:
        ring = np.asarray(poly.exterior.coords, dtype=np.float64)
        out: FloatArray = np.concatenate([ring[:-1], ring[1:]], axis=1)
        return out
    idx = np.sort(index.tree.query(area, predicate="intersects"))
    return take_rows(index.sides, idx.astype(np.intp))


def polygon_sides_meeting_many(poly: shapely.Polygon, areas: npt.NDArray[Any],
                               ) -> tuple[IntArray, FloatArray]:
    """`polygon_sides_meeting` for many areas in one query: (area, side) rows, each area's
    sides in ring order, areas in order."""
    index = _polygon_index(poly)
    if index.tree is None:
        ring = np.asarray(poly.exterior.coords, dtype=np.float64)
        sides = np.concatenate([ring[:-1], ring[1:]], axis=1)
        which = np.repeat(np.arange(len(areas), dtype=np.intp), len(sides))
        return which, np.tile(sides, (len(areas), 1))
    row, side = index.tree.query(areas, predicate="intersects")
    order = np.lexsort((side, row))
    return row[order].astype(np.intp), take_rows(index.sides, side[order].astype(np.intp))


def _enter_polygon(lines: npt.NDArray[Any], starts: FloatArray, ends: FloatArray,
                   poly: shapely.Polygon) -> IntArray:
    """Indices of the lines whose interior meets the polygon's interior.

    Exactly GEOS's DE-9IM test (interior/interior 'T'), at a cost that grows with the
    lines and the sides near them, not lines x sides: a line the prepared polygon properly
    contains is in and one it does not intersect is out (both indexed in GEOS); of the
    lines that touch the boundary, one that crosses a side at a point inside both (strict
    orientation signs, well away from zero) passes from one side of the ring to the other,
    so it enters the interior; only the rest (lines through a vertex, along a side, or
    ending on the boundary) are settled by `relate_pattern`."""
    index = _polygon_index(poly)
    if not index.fast or index.tree is None:
        return np.flatnonzero(shapely.relate_pattern(lines, poly, "T********"))
    inside = shapely.contains_properly(poly, lines)
    meets = shapely.intersects(poly, lines)
    edge = np.flatnonzero(meets & ~inside)
    found = np.zeros(len(lines), dtype=bool)
    found[inside] = True
    if edge.size:
        ln, sd = index.tree.query(np.take(lines, edge))
        li = np.take(edge, ln)
        s, e = take_rows(starts, li), take_rows(ends, li)
        w = take_rows(index.sides, sd)
        o1 = _orient(w[:, 0], w[:, 1], w[:, 2], w[:, 3], s[:, 0], s[:, 1])
        o2 = _orient(w[:, 0], w[:, 1], w[:, 2], w[:, 3], e[:, 0], e[:, 1])
        o3 = _orient(s[:, 0], s[:, 1], e[:, 0], e[:, 1], w[:, 0], w[:, 1])
        o4 = _orient(s[:, 0], s[:, 1], e[:, 0], e[:, 1], w[:, 2], w[:, 3])
        # Signs trusted only well clear of rounding: |o| above a relative margin of the
        # products it is made of (anything closer goes to the exact test below).
        span = (np.abs(s - e).max(axis=1) + np.abs(w[:, :2] - w[:, 2:]).max(axis=1)) ** 2
        tol = 1e-9 * span
        proper = ((o1 > tol) & (o2 < -tol) | (o1 < -tol) & (o2 > tol)) & (
            (o3 > tol) & (o4 < -tol) | (o3 < -tol) & (o4 > tol))
        found[li[proper]] = True
        rest = edge[~found[edge]]
        if rest.size:
            hit = shapely.relate_pattern(np.take(lines, rest), poly, "T********")
            found[rest[hit]] = True
    return np.flatnonzero(found)


def segments_enter_polygons(starts: FloatArray, ends: FloatArray,
                            polygons: Sequence[shapely.Polygon]) -> tuple[IntArray, IntArray]:
    """Which lines pass through the interior of which polygons (the DE-9IM 'T' in the
    interior/interior cell; see `_enter_polygon` for how a polygon of many sides is kept
    cheap)."""
    if len(starts) == 0 or not polygons:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty.copy()
    lo, hi = np.minimum(starts, ends), np.maximum(starts, ends)
    line_parts: list[IntArray] = []
    poly_parts: list[IntArray] = []
    for k, poly in enumerate(polygons):
        # A line that enters the polygon's interior meets its bounding box: only those are
        # tested exactly (a map's regions are small next to it, so most lines are not).
        x0, y0, x1, y1 = poly.bounds
        near = np.flatnonzero((hi[:, 0] >= x0) & (lo[:, 0] <= x1)
                              & (hi[:, 1] >= y0) & (lo[:, 1] <= y1))
        if near.size == 0:
            continue
        lines = shapely.linestrings(np.stack([starts[near], ends[near]], axis=1))
        found = _enter_polygon(lines, starts[near], ends[near], poly)
        idx = near[found].astype(np.intp)
        line_parts.append(idx)
        poly_parts.append(np.full(len(idx), k, dtype=np.intp))
    if not line_parts:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty.copy()
    return np.concatenate(line_parts), np.concatenate(poly_parts)
