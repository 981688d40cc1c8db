"""Hex-grid facts in Foundry VTT's own pixel geometry: cells, cube coordinates, neighbours,
distances, hex polygons and token footprints of several hexes.

Rule of this module: pure functions of a frozen HexLayout (and of CreatureGeom) returning
plain tuples, arrays and Shapely polygons in canvas pixels; game rules decide which of these
facts matter. Everything here follows Foundry's `foundry.grid.HexagonalGrid` (v12/v13,
common/grid/hexagonal.mjs) and `BaseToken` (common/documents/token.mjs) formula for formula,
so a cell, a centre or a footprint is the one Foundry draws (docs/geometry.md cites each):

- offsets are Foundry's {i: row, j: column}; cube coordinates (q, r, s) with q + r + s = 0;
- `grid.size` is the distance between the centres of two adjacent hexes: the hex's width
  for row layouts (pointy-topped, HEXODDR/HEXEVENR), its height for column layouts
  (flat-topped, HEXODDQ/HEXEVENQ); the other dimension is size * 2 / sqrt(3);
- `even` layouts (HEXEVENR, HEXEVENQ) shift the even rows (columns) by half a hex.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import shapely

from geometry.caches import changed_positions
from geometry.kernel import within_runs
from geometry.model import CreatureGeom, Grid, GridKind

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
Cell = tuple[int, int]  # Foundry offset (i = row, j = column)
Cube = tuple[int, int, int]

SQRT3 = math.sqrt(3.0)
HEX_GRIDS = frozenset({GridKind.HEXODDR, GridKind.HEXEVENR, GridKind.HEXODDQ,
                       GridKind.HEXEVENQ})

#: Foundry's HexagonalGrid#getAdjacentCubes order (q, r deltas).
NEIGHBOUR_STEPS: tuple[tuple[int, int], ...] = (
    (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0))

#: Foundry's CONST.TOKEN_SHAPES.
ELLIPSE_1, ELLIPSE_2, TRAPEZOID_1, TRAPEZOID_2, RECTANGLE_1, RECTANGLE_2 = range(6)


def is_hex(grid: Grid) -> bool:
    return grid.kind in HEX_GRIDS


@dataclass(frozen=True, slots=True)
class HexLayout:
    """One of Foundry's four hex layouts at a grid size (pixels between adjacent centres)."""

    columns: bool
    even: bool
    size: float

    @classmethod
    def of(cls, grid: Grid) -> HexLayout:
        if grid.kind not in HEX_GRIDS:
            raise ValueError(f"grid type {int(grid.kind)} ({grid.kind.name}) is not a hex grid")
        return cls(columns=grid.kind in (GridKind.HEXODDQ, GridKind.HEXEVENQ),
                   even=grid.kind in (GridKind.HEXEVENR, GridKind.HEXEVENQ), size=grid.size)

    @property
    def size_x(self) -> float:
        """Width of one hex in pixels (Foundry's grid.sizeX)."""
        return self.size * 2 / SQRT3 if self.columns else self.size

    @property
    def size_y(self) -> float:
        """Height of one hex in pixels (Foundry's grid.sizeY)."""
        return self.size if self.columns else self.size * 2 / SQRT3


# -- offsets, cubes, points ----------------------------------------------------------------

def offset_to_cube(layout: HexLayout, i: IntArray, j: IntArray) -> tuple[IntArray, IntArray]:
    """Offsets (rows i, columns j) to cube (q, r) (s = -q - r): HexagonalGrid#offsetToCube."""
    i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
    sign = 1 if layout.even else -1
    if layout.columns:
        q = j
        r = i - ((j + sign * (j & 1)) >> 1)
    else:
        q = j - ((i + sign * (i & 1)) >> 1)
        r = i
    return q, r


def cube_to_offset(layout: HexLayout, q: IntArray, r: IntArray) -> tuple[IntArray, IntArray]:
    """Cube (q, r) to offsets (i, j): HexagonalGrid#cubeToOffset."""
    q, r = np.asarray(q, dtype=np.int64), np.asarray(r, dtype=np.int64)
    sign = 1 if layout.even else -1
    if layout.columns:
        j = q
        i = r + ((q + sign * (q & 1)) >> 1)
    else:
        i = r
        j = q + ((r + sign * (r & 1)) >> 1)
    return i, j


def point_to_cube(layout: HexLayout, x: FloatArray,
                  y: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Pixels to fractional cube (q, r): HexagonalGrid#pointToCube."""
    x = np.asarray(x, dtype=np.float64) / layout.size
    y = np.asarray(y, dtype=np.float64) / layout.size
    shift = 1.0 if layout.even else 0.0
    if layout.columns:
        q = 2 / SQRT3 * x - 2 / 3
        r = -0.5 * (q + shift) + y
    else:
        r = 2 / SQRT3 * y - 2 / 3
        q = -0.5 * (r + shift) + x
    return q, r


def cube_to_point(layout: HexLayout, q: FloatArray | IntArray,
                  r: FloatArray | IntArray) -> tuple[FloatArray, FloatArray]:
    """Cube (q, r), fractional or not, to pixels (a cell's centre): HexagonalGrid#cubeToPoint."""
    q, r = np.asarray(q, dtype=np.float64), np.asarray(r, dtype=np.float64)
    shift = 1.0 if layout.even else 0.0
    s = layout.size
    if layout.columns:
        return 0.5 / SQRT3 * ((3 * q + 2) * s), (0.5 * (q + shift) + r) * s
    return (0.5 * (r + shift) + q) * s, 0.5 / SQRT3 * ((3 * r + 2) * s)


def _js_round(v: FloatArray) -> FloatArray:
    """JavaScript's Math.round (halves go up), which Foundry's rounding relies on."""
    out: FloatArray = np.floor(v + 0.5)
    return out


def cube_round(q: FloatArray, r: FloatArray) -> tuple[IntArray, IntArray]:
    """Fractional cube coordinates to the cube of the hex holding them: HexagonalGrid.cubeRound."""
    q, r = np.asarray(q, dtype=np.float64), np.asarray(r, dtype=np.float64)
    s = -q - r
    iq, ir, is_ = _js_round(q), _js_round(r), _js_round(s)
    dq, dr, ds = np.abs(iq - q), np.abs(ir - r), np.abs(is_ - s)
    fix_q = (dq > dr) & (dq > ds)
    fix_r = ~fix_q & (dr > ds)
    iq = np.where(fix_q, -ir - is_, iq)
    ir = np.where(fix_r, -iq - is_, ir)
    return iq.astype(np.int64), ir.astype(np.int64)


def point_to_offset(layout: HexLayout, x: FloatArray,
                    y: FloatArray) -> tuple[IntArray, IntArray]:
    """The cell holding each point: HexagonalGrid#getOffset({x, y})."""
    q, r = cube_round(*point_to_cube(layout, x, y))
    return cube_to_offset(layout, q, r)


def centre_point(layout: HexLayout, i: IntArray, j: IntArray) -> tuple[FloatArray, FloatArray]:
    """The centre of each cell: HexagonalGrid#getCenterPoint({i, j})."""
    i, j = np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)
    s = layout.size
    if layout.columns:
        x = 2 / SQRT3 * ((0.75 * j + 0.5) * s)
        shifted = layout.even == ((j + 1) % 2 == 0)
        y = (i + np.where(shifted, 0.0, 0.5)) * s
    else:
        y = 2 / SQRT3 * ((0.75 * i + 0.5) * s)
        shifted = layout.even == ((i + 1) % 2 == 0)
        x = (j + np.where(shifted, 0.0, 0.5)) * s
    return np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)


def top_left_point(layout: HexLayout, i: IntArray, j: IntArray) -> tuple[FloatArray, FloatArray]:
    """The top-left corner of each cell's bounding box: HexagonalGrid#getTopLeftPoint({i, j})."""
    x, y = centre_point(layout, i, j)
    return x - layout.size_x / 2, y - layout.size_y / 2


def vertices(layout: HexLayout, i: int, j: int) -> FloatArray:
    """The cell's six corners (6, 2), clockwise on screen: HexagonalGrid#getVertices."""
    sx, sy = layout.size_x / 4, layout.size_y / 4
    if layout.columns:
        x = 3 * j
        y = 4 * i - (2 if layout.even == ((j + 1) % 2 == 0) else 0)
        pts = [(x, y + 2), (x + 1, y), (x + 3, y), (x + 4, y + 2), (x + 3, y + 4),
               (x + 1, y + 4)]
    else:
        y = 3 * i
        x = 4 * j - (2 if layout.even == ((i + 1) % 2 == 0) else 0)
        pts = [(x + 2, y), (x + 4, y + 1), (x + 4, y + 3), (x + 2, y + 4), (x, y + 3),
               (x, y + 1)]
    return np.array([(px * sx, py * sy) for px, py in pts], dtype=np.float64)


def polygon(layout: HexLayout, i: int, j: int) -> shapely.Polygon:
    return shapely.Polygon(vertices(layout, i, j))


def neighbours(layout: HexLayout, cell: Cell) -> list[Cell]:
    """The six cells around one, in Foundry's getAdjacentCubes order."""
    q, r = offset_to_cube(layout, np.array([cell[0]]), np.array([cell[1]]))
    qs = q[0] + np.array([d[0] for d in NEIGHBOUR_STEPS])
    rs = r[0] + np.array([d[1] for d in NEIGHBOUR_STEPS])
    ii, jj = cube_to_offset(layout, qs, rs)
    return [(int(a), int(b)) for a, b in zip(ii.tolist(), jj.tolist(), strict=True)]


def cube_distance(q0: IntArray, r0: IntArray, q1: IntArray, r1: IntArray) -> IntArray:
    """Hexes between cubes: HexagonalGrid.cubeDistance."""
    dq = np.asarray(q0, dtype=np.int64) - np.asarray(q1, dtype=np.int64)
    dr = np.asarray(r0, dtype=np.int64) - np.asarray(r1, dtype=np.int64)
    out: IntArray = (np.abs(dq) + np.abs(dr) + np.abs(dq + dr)) // 2
    return out


def distance(layout: HexLayout, a: Cell, b: Cell) -> int:
    """Hexes between two cells (one step per hex, Foundry's hex measurement)."""
    qa, ra = offset_to_cube(layout, np.array([a[0]]), np.array([a[1]]))
    qb, rb = offset_to_cube(layout, np.array([b[0]]), np.array([b[1]]))
    return int(cube_distance(qa, ra, qb, rb)[0])


def cells_distance(layout: HexLayout, a: Sequence[Cell], b: Sequence[Cell]) -> int:
    """Hexes between the nearest cells of two footprints (0: they share a cell)."""
    ia, ja = np.array([c[0] for c in a]), np.array([c[1] for c in a])
    ib, jb = np.array([c[0] for c in b]), np.array([c[1] for c in b])
    qa, ra = offset_to_cube(layout, ia, ja)
    qb, rb = offset_to_cube(layout, ib, jb)
    d = cube_distance(qa[:, None], ra[:, None], qb[None, :], rb[None, :])
    return int(d.min())


def footprints_distance(layout: HexLayout, footprints: Sequence[Sequence[Cell]],
                        among: IntArray | None = None) -> IntArray:
    """Hexes between the nearest cells of every footprint and each footprint of `among`
    (indices, sorted, unique; None: every footprint): (n, len(among)), 0 for a footprint
    against itself and wherever two share a cell.

    Past a few cells only border cells (those with a neighbour outside their footprint) are
    measured: the nearest cells of two footprints that share none are on their borders (a
    cell whose neighbours are all in its footprint has one of them a step nearer any cell
    outside), and two footprints that share cells share one on the border of one of them
    (the shared cells have a border of their own), which `_sharing` finds. A 10 x 10 token
    has 36 border cells of its 100, a 100 x 100 one about 400 of 10,000: every cell against
    every cell was 800 MB for 100 tokens of 10 x 10 on each evaluation, and a minute and
    3.2 GB for two 100 x 100 tokens. The distances are made in blocks of rows, so memory
    stays bounded."""
    n = len(footprints)
    cols = np.arange(n) if among is None else np.asarray(among, dtype=np.int64)
    if n == 0 or not len(cols):
        return np.zeros((n, len(cols)), dtype=np.int64)
    sizes = [len(f) for f in footprints]
    owner = np.repeat(np.arange(n), sizes)
    i = np.array([c[0] for f in footprints for c in f], dtype=np.int64)
    j = np.array([c[1] for f in footprints for c in f], dtype=np.int64)
    q, r = offset_to_cube(layout, i, j)
    if len(q) <= _ALL_CELLS:
        # Few cells (Medium and Large tokens): every cell against every cell of the
        # columns' footprints is quicker.
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        chosen = np.isin(owner, cols)
        col_starts = np.searchsorted(owner[chosen], cols)
        d = cube_distance(q[:, None], r[:, None], q[chosen][None, :], r[chosen][None, :])
        picked: IntArray = np.minimum.reduceat(np.minimum.reduceat(d, starts, axis=0),
                                               col_starts, axis=1)
        return picked
    border = _border_cells(owner, q, r)
    bq, br, bo = q[border], r[border], owner[border]  # in owner order, as the cells are
    # The columns' border cells, in the order of `cols` (sorted, as the owners are).
    chosen = np.isin(bo, cols)
    cq, cr, col_of = bq[chosen], br[chosen], np.searchsorted(cols, bo[chosen])
    starts = np.searchsorted(col_of, np.arange(len(cols)))  # each has a border cell
    out: IntArray = np.full((n, len(cols)), np.iinfo(np.int64).max, dtype=np.int64)
    step = max(1, _DISTANCE_BLOCK // max(1, len(cq)))
    for k in range(0, len(bq), step):
        d = cube_distance(bq[k:k + step, None], br[k:k + step, None], cq[None, :], cr[None, :])
        np.minimum.at(out, bo[k:k + step], np.minimum.reduceat(d, starts, axis=1))
    a, b = _sharing(owner, q, r, border)
    for x, y in ((a, b), (b, a)):
        hit = np.isin(y, cols)
        out[x[hit], np.searchsorted(cols, y[hit])] = 0
    return out  # 0 against itself: its border cells are among the columns' cells


class FootprintSteps:
    """Hexes between every two footprints, read as an (n, n) array (`steps[a, t]`, with
    indices or index arrays), each footprint's distances to every other (its row and its
    column: the distance is symmetric) measured when first read: a slice of a table reads
    the columns of its pairs' targets, not all n (200 hex tokens of 6 x 6 took 1.1 s for
    every slice when every column was measured); the pairs of one attacker read its one
    row (a table following one attacker of 1,000 tokens, on each move)."""

    def __init__(self, layout: HexLayout, footprints: Sequence[Sequence[Cell]]) -> None:
        self.layout = layout
        self.footprints = list(footprints)
        n = len(self.footprints)
        self._m: IntArray = np.zeros((n, n), dtype=np.int64)
        self._done = np.zeros(n, dtype=bool)
        # Very few cells: every distance at once costs less than a second call.
        self._all_at_once = sum(len(f) for f in self.footprints) <= _ONE_CALL_CELLS

    def __getitem__(self, key: tuple[Any, Any]) -> Any:
        rows, cols = key
        if isinstance(cols, slice) or isinstance(rows, slice) or self._all_at_once:
            todo = np.flatnonzero(~self._done)
        else:
            # The footprints on whichever side of the pairs has fewer left to measure
            # (pairs whose other side is measured already are known).
            want_c = np.unique(np.asarray(cols, dtype=np.int64).ravel())
            want_r = np.unique(np.asarray(rows, dtype=np.int64).ravel())
            left_c, left_r = want_c[~self._done[want_c]], want_r[~self._done[want_r]]
            todo = left_r if len(left_r) < len(left_c) else left_c
        if len(todo):
            self._measure(todo)
        return self._m[rows, cols]

    def _measure(self, todo: IntArray) -> None:
        d = footprints_distance(self.layout, self.footprints, todo)
        self._m[:, todo] = d
        self._m[todo, :] = d.T
        self._done[todo] = True

    @classmethod
    def of(cls, layout: HexLayout, footprints: Sequence[Sequence[Cell]]) -> FootprintSteps:
        """`FootprintSteps(layout, footprints)`; when they are few enough to be measured
        all at once, the distances of a recent table whose footprints are the same objects
        at the same positions, but for a few (or a few more at the end: a rules engine
        adds the moved creatures' old states), are taken from it, and only the others'
        rows and columns measured: a move changes one footprint, and each evaluation of a
        100-token scene measured the whole table again (a tenth of a realms move on a hex
        grid). Compared by identity (`geometry.caches.changed_positions`)."""
        new = cls(layout, footprints)
        if not new._all_at_once:
            return new
        n = len(new.footprints)
        for old in list(_MEASURED):
            m = len(old.footprints)
            if old.layout != layout or m > n or not old._done.all():
                continue
            differ = changed_positions(new.footprints, old.footprints)
            if len(differ) * 4 <= n:
                new._m[:m, :m] = old._m
                new._done[:] = True
                if differ:
                    new._measure(np.array(differ, dtype=np.intp))
                break
        _MEASURED[:] = [new, *_MEASURED[:_MEASURED_KEPT - 1]]
        return new


#: Tables measured all at once lately (`FootprintSteps.of`), the newest first: a table is
#: read by the Core's thread and by the one working ahead on large frames, never changed
#: once measured whole.
_MEASURED: list[FootprintSteps] = []
_MEASURED_KEPT = 4


def forget_measured() -> None:
    """Forget the tables `FootprintSteps.of` keeps (a benchmark's first subscription)."""
    _MEASURED.clear()


#: Distances one block of `footprints_distance` holds at most (8 bytes each).
_DISTANCE_BLOCK = 1 << 22
#: Cells in all up to which `footprints_distance` measures every cell against every cell
#: of the columns asked (at most 32 MB of distances).
_ALL_CELLS = 2048
#: Cells in all up to which `FootprintSteps` measures every distance on its first read.
_ONE_CALL_CELLS = 256


def _sharing(owner: IntArray, q: IntArray, r: IntArray,
             border: BoolArray) -> tuple[IntArray, IntArray]:
    """Pairs of footprints (owner a, owner b) where a border cell of a is a cell of b:
    every border cell against the owners of its cell."""
    order = np.lexsort((owner, r, q))
    sq, sr, so = q[order], r[order], owner[order]
    new = np.ones(len(sq), dtype=bool)
    new[1:] = (sq[1:] != sq[:-1]) | (sr[1:] != sr[:-1])
    run_start = np.flatnonzero(new)
    run_len = np.diff(np.append(run_start, len(sq)))
    run_of = np.empty(len(sq), dtype=np.int64)
    run_of[order] = np.cumsum(new) - 1
    cells = np.flatnonzero(border)
    runs = run_of[cells]
    lens = run_len[runs]
    first = np.repeat(run_start[runs], lens)
    within = within_runs(lens)
    return np.repeat(owner[cells], lens), so[first + within]


def _border_cells(owner: IntArray, q: IntArray, r: IntArray) -> BoolArray:
    """Which cells (owner, q, r) have a neighbour that is not a cell of the same owner."""
    def rows(o: IntArray, a: IntArray, b: IntArray) -> np.ndarray:
        stacked = np.ascontiguousarray(np.stack([o, a, b], axis=1), dtype=np.int64)
        return stacked.view(np.dtype((np.void, 24))).ravel()

    own = rows(owner, q, r)
    border = np.zeros(len(q), dtype=bool)
    for dq, dr in NEIGHBOUR_STEPS:
        border |= ~np.isin(rows(owner, q + dq, r + dr), own)
    return border


# -- token footprints ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TokenShape:
    """A token's hex shape in Foundry's units (offsets relative to its top-left cell, points
    and centre in hex widths/heights from the token's top-left)."""

    even: tuple[Cell, ...]
    odd: tuple[Cell, ...]
    anchor: tuple[float, float]
    center: tuple[float, float] | None
    points: tuple[float, ...] | None


def _ellipse_or_trapezoid(width: float, height: float, shape: int) -> TokenShape | None:
    """BaseToken.#createHexagonalEllipseOrTrapezoid (row layout)."""
    if not float(width).is_integer() or not float(height).is_integer():
        return None
    w, h = int(width), int(height)
    if shape == ELLIPSE_1:
        if h >= 2 * w:
            return None
        top, bottom = h // 2, (h - 1) // 2
    elif shape == ELLIPSE_2:
        if h >= 2 * w:
            return None
        top, bottom = (h - 1) // 2, h // 2
    elif shape == TRAPEZOID_1:
        if h > w:
            return None
        top, bottom = h - 1, 0
    else:
        if h > w:
            return None
        top, bottom = 0, h - 1
    even: list[Cell] = []
    odd: list[Cell] = []
    for k in range(bottom, 0, -1):
        for j in range(w - k):
            even.append((bottom - k, j + (((bottom & 1) + k + 1) >> 1)))
            odd.append((bottom - k, j + (((bottom & 1) + k) >> 1)))
    for k in range(top + 1):
        for j in range(w - k):
            even.append((bottom + k, j + (((bottom & 1) + k + 1) >> 1)))
            odd.append((bottom + k, j + (((bottom & 1) + k) >> 1)))
    pts: list[float] = []
    x, y = 0.5 * bottom, 0.25
    for _ in range(w - bottom):
        pts += [x, y]
        x, y = x + 0.5, y - 0.25
        pts += [x, y]
        x, y = x + 0.5, y + 0.25
    pts += [x, y]
    for _ in range(bottom):
        y += 0.5
        pts += [x, y]
        x, y = x + 0.5, y + 0.25
        pts += [x, y]
    y += 0.5
    for _ in range(top):
        pts += [x, y]
        x, y = x - 0.5, y + 0.25
        pts += [x, y]
        y += 0.5
    for _ in range(w - top):
        pts += [x, y]
        x, y = x - 0.5, y + 0.25
        pts += [x, y]
        x, y = x - 0.5, y - 0.25
    pts += [x, y]
    for _ in range(top):
        y -= 0.5
        pts += [x, y]
        x, y = x - 0.5, y - 0.25
        pts += [x, y]
    y -= 0.5
    for _ in range(bottom):
        pts += [x, y]
        x, y = x + 0.5, y - 0.25
        pts += [x, y]
        y -= 0.5
    c = shapely.Polygon(list(zip(pts[0::2], pts[1::2], strict=True))).centroid
    anchor = (0.0, 0.5) if bottom % 2 else (0.5, 0.5)
    return TokenShape(tuple(even), tuple(odd), anchor, (float(c.x), float(c.y)), tuple(pts))


def _rectangle(width: float, height: float, shape: int) -> TokenShape | None:
    """BaseToken.#createHexagonalRectangle (row layout); only offsets, centre and anchor."""
    if width < 1 or not float(height).is_integer():
        return None
    if width == 1 and height > 1:
        return None
    if not float(width).is_integer() and height == 1:
        return None
    even_shape = shape == RECTANGLE_1 or height == 1
    even: list[Cell] = []
    odd: list[Cell] = []
    for i in range(int(height)):
        j0 = 0 if even_shape else (i + 1) & 1
        j1 = int(width + (i & 1) * 0.5) - ((i & 1) if even_shape else 0)
        for j in range(j0, j1):
            even.append((i, j + (i & 1)))
            odd.append((i, j))
    center = (width / 2, (0.75 * math.floor(height) + 0.5 * (height % 1) + 0.25) / 2)
    anchor = (0.5, 0.5) if even_shape else (0.0, 0.5)
    return TokenShape(tuple(even), tuple(odd), anchor, center, None)


@functools.lru_cache(maxsize=256)
def _row_shape(width: float, height: float, shape: int) -> TokenShape | None:
    """BaseToken.#getHexagonalShape for a row layout."""
    if not float(width * 2).is_integer() or not float(height * 2).is_integer():
        return None
    if width == 0.5 and height == 0.5:
        return TokenShape(((0, 0),), ((0, 0),), (0.25, 0.25), (0.25, 0.25),
                          (0.25, 0.0, 0.5, 0.125, 0.5, 0.375, 0.25, 0.5, 0.0, 0.375, 0.0, 0.125))
    if width == 1 and height == 1:
        return TokenShape(((0, 0),), ((0, 0),), (0.5, 0.5), (0.5, 0.5),
                          (0.5, 0.0, 1.0, 0.25, 1.0, 0.75, 0.5, 1.0, 0.0, 0.75, 0.0, 0.25))
    if shape <= TRAPEZOID_2:
        return _ellipse_or_trapezoid(width, height, shape)
    if shape <= RECTANGLE_2:
        return _rectangle(width, height, shape)
    return None


def _hex_shape(width: float, height: float, shape: int, columns: bool) -> TokenShape | None:
    """BaseToken.#getHexagonalShape: column layouts transpose the row shape."""
    if not columns:
        return _row_shape(width, height, shape)
    row = _row_shape(height, width, shape)
    if row is None:
        return None
    even = tuple(sorted(((j, i) for i, j in row.even), key=lambda c: (c[1], c[0])))
    odd = tuple(sorted(((j, i) for i, j in row.odd), key=lambda c: (c[1], c[0])))
    center = None if row.center is None else (row.center[1], row.center[0])
    return TokenShape(even, odd, (row.anchor[1], row.anchor[0]), center, None)


@functools.lru_cache(maxsize=256)
def token_offsets(width: float, height: float, shape: int, columns: bool) -> TokenShape:
    """BaseToken._getHexagonalOffsets: the shape's cells, with Foundry's fallback (a
    rectangle shape, anchor moved a quarter hex) for sizes no hex shape exists for."""
    data = _hex_shape(width, height, shape, columns)
    if data is not None:
        return data
    w, h = width, height
    if columns:
        h += 0.5
        w = math.floor(w + 0.5)
        if w == 1:
            h = math.floor(h)
        elif h == 1:
            h += 0.5
    else:
        w += 0.5
        h = math.floor(h + 0.5)
        if h == 1:
            w = math.floor(w)
        elif w == 1:
            w += 0.5
    fallback = _hex_shape(w, h, RECTANGLE_1, columns)
    assert fallback is not None, (width, height, shape, columns)
    anchor = (fallback.anchor[0] - 0.25, fallback.anchor[1] - 0.25)
    return TokenShape(fallback.even, fallback.odd, anchor, None, None)


def _half(v: float) -> float:
    return math.floor(v * 2 + 0.5) / 2


def token_cells(layout: HexLayout, x: float, y: float, width: float, height: float,
                shape: int = RECTANGLE_1) -> tuple[Cell, ...]:
    """The cells a token at (x, y) (top-left, pixels) occupies:
    BaseToken#getOccupiedGridSpaceOffsets on a hex grid."""
    w, h = _half(width), _half(height)
    data = token_offsets(w, h, shape, layout.columns)
    px = math.floor(x + 0.5) + layout.size_x * data.anchor[0]
    py = math.floor(y + 0.5) + layout.size_y * data.anchor[1]
    i0, j0 = (int(v[0]) for v in point_to_offset(layout, np.array([px]), np.array([py])))
    first = j0 if layout.columns else i0
    is_even = (first % 2 == 0) == layout.even
    return tuple((i0 + di, j0 + dj) for di, dj in (data.even if is_even else data.odd))


def token_position(layout: HexLayout, cell: Cell, width: float, height: float,
                   shape: int = RECTANGLE_1) -> tuple[float, float]:
    """Where Foundry puts a token whose top-left cell is `cell` (its x, y in pixels):
    BaseToken#_gridOffsetToPosition on a hex grid."""
    data = token_offsets(_half(width), _half(height), shape, layout.columns)
    cx, cy = centre_point(layout, np.array([cell[0]]), np.array([cell[1]]))
    return (float(cx[0]) - data.anchor[0] * layout.size_x,
            float(cy[0]) - data.anchor[1] * layout.size_y)


def token_size(layout: HexLayout, width: float, height: float) -> tuple[float, float]:
    """A token's bounding rectangle in pixels: BaseToken#getSize on a hex grid."""
    if layout.columns:
        width = 0.75 * math.floor(width) + 0.5 * (width % 1) + 0.25
    else:
        height = 0.75 * math.floor(height) + 0.5 * (height % 1) + 0.25
    return width * layout.size_x, height * layout.size_y


def token_centre(layout: HexLayout, x: float, y: float, width: float, height: float,
                 shape: int = RECTANGLE_1) -> tuple[float, float]:
    """BaseToken#getCenterPoint on a hex grid: the shape's centre, or the rectangle's."""
    data = _hex_shape(width, height, shape, layout.columns)
    if data is not None and data.center is not None:
        return x + data.center[0] * layout.size_x, y + data.center[1] * layout.size_y
    w, h = token_size(layout, width, height)
    return x + w / 2, y + h / 2


@dataclass(frozen=True, slots=True)
class Footprint:
    """Where a creature stands on a hex grid: its cells, their union, its centre."""

    cells: tuple[Cell, ...]
    polygon: shapely.Polygon
    centre: tuple[float, float]
    cell_centres: FloatArray
    #: A point stand-in (an effect's origin, a shot from a chosen spot): `polygon` is a
    #: speck around `centre`, `cells` the one cell holding it.
    point: bool = False

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        x0, y0, x1, y1 = self.polygon.bounds
        return (float(x0), float(y0), float(x1), float(y1))


@functools.lru_cache(maxsize=8192)
def _footprint(layout: HexLayout, x: float, y: float, width: float, height: float,
               shape: int) -> Footprint:
    if _half(width) == 0 or _half(height) == 0:
        # Under a quarter hex (a point stand-in: an effect's origin, a shot from a chosen
        # spot): the point itself, in the cell that holds it.
        w, h = max(width, 1e-9), max(height, 1e-9)
        px, py = x + w * layout.size_x / 2, y + h * layout.size_y / 2
        pi, pj = point_to_offset(layout, np.array([px]), np.array([py]))
        tiny = shapely.box(x, y, x + w * layout.size_x, y + h * layout.size_y)
        return Footprint(((int(pi[0]), int(pj[0])),), tiny, (px, py), np.array([[px, py]]),
                         point=True)
    cells = token_cells(layout, x, y, width, height, shape)
    poly = shapely.union_all([polygon(layout, i, j) for i, j in cells])
    # Adjacent hexes share bit-identical corners (the same formula on the same integers),
    # so the union merges them exactly; no snapping that would move Foundry's corners.
    poly = shapely.normalize(poly)
    ii = np.array([c[0] for c in cells], dtype=np.int64)
    jj = np.array([c[1] for c in cells], dtype=np.int64)
    cx, cy = centre_point(layout, ii, jj)
    centre = token_centre(layout, x, y, width, height, shape)
    return Footprint(cells, poly, centre, np.column_stack([cx, cy]))


def footprint(c: CreatureGeom, grid: Grid) -> Footprint:
    """The creature's footprint on a hex grid (cached: tokens rarely change shape)."""
    return _footprint(HexLayout.of(grid), c.x, c.y, c.width, c.height, c.shape)


def footprint_at(layout: HexLayout, x: float, y: float, width: float, height: float,
                 shape: int) -> Footprint:
    """The footprint of a token at (x, y) of this size and shape (cached, as `footprint`)."""
    return _footprint(layout, x, y, width, height, shape)


def cells_on_segment(layout: HexLayout, p: tuple[float, float], q: tuple[float, float],
                     ) -> list[Cell]:
    """Every cell whose interior the segment p-q passes through, in order from p."""
    length = math.hypot(q[0] - p[0], q[1] - p[1])
    steps = max(2, math.ceil(length / (layout.size / 16)) + 1)
    t = np.linspace(0.0, 1.0, steps)
    ii, jj = point_to_offset(layout, p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1]))
    seen: dict[Cell, None] = {}
    for a, b in zip(ii.tolist(), jj.tolist(), strict=True):
        seen.setdefault((a, b), None)
    # Sampling finds every cell the segment crosses by more than a sixteenth of a hex; the
    # neighbours of those are tested exactly so a clipped corner is not missed.
    candidates = dict(seen)
    for cell in list(seen):
        for n in neighbours(layout, cell):
            candidates.setdefault(n, None)
    line = shapely.LineString([p, q])
    out = [cell for cell in candidates
           if shapely.relate_pattern(line, polygon(layout, *cell), "T********")]
    if not out:
        return out
    cx, cy = centre_point(layout, np.array([c[0] for c in out]), np.array([c[1] for c in out]))
    along = (cx - p[0]) * (q[0] - p[0]) + (cy - p[1]) * (q[1] - p[1])
    return [out[k] for k in np.argsort(along, kind="stable").tolist()]


def cells_polygons(layout: HexLayout, cells: Iterable[Cell]) -> list[shapely.Polygon]:
    return [polygon(layout, i, j) for i, j in cells]
