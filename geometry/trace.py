"""Tracing sight lines through a scene: which walls, creatures and regions each line meets.

Rule of this module: a Tracer is built once per scene snapshot (arrays of walls, spaces and
regions) and answers batches of lines with sparse hit lists; it decides what *physically*
meets a line (doors open or shut, one-way walls seen from the line's start, limited walls),
never what that means in a game. Rulesets classify the hits. What depends only on the
walls is kept across snapshots of the same walls (their arrays, and the wall hits of small
batches for the next snapshot); of what depends on where creatures stand, only what one
footprint on a hex grid alone decides (its polygon and hexes, `_hex_cells`), never what
depends on several creatures.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import shapely

from geometry import hex as hexgrid
from geometry import kernel
from geometry.caches import drop_oldest
from geometry.columns import columns, per_creature
from geometry.kernel import BoolArray, FloatArray, IntArray
from geometry.model import CreatureGeom, Direction, RegionKind, SceneGeom, WallCover, WallGeom

#: Wall cover kinds as small integers for vectorised tests.
SOLID_CODE, LOW_CODE, IMPROVED_CODE = 0, 1, 2
_COVER_CODE = {WallCover.SOLID: SOLID_CODE, WallCover.LOW: LOW_CODE,
               WallCover.IMPROVED: IMPROVED_CODE}


@dataclass(frozen=True, slots=True)
class LineHits:
    """Sparse hits for a batch of n lines: parallel (line, index) arrays.

    walls: active walls met by the line from its start's side (limited ones included; the
    two-limited-walls rule is the Tracer's `solid` helper); creatures: spaces entered;
    regions: region interiors entered.
    """

    n: int
    wall_line: IntArray
    wall_idx: IntArray
    creature_line: IntArray
    creature_idx: IntArray
    region_line: IntArray
    region_idx: IntArray
    #: Foundry side of each wall hit's line start, when one-way walls are not yet applied
    #: (block tracing serves both directions of a pair); None: already applied.
    wall_side: npt.NDArray[np.int8] | None = None
    #: Per line, when known (block tracing): its block of lines is sealed, one plain wall
    #: (or run of them) crossing every line of it, which separates its two hulls of points
    #: wholly (geometry.openings). False says nothing.
    sealed: BoolArray | None = None


@dataclass(frozen=True, slots=True)
class _WallArrays:
    walls: tuple[WallGeom, ...]
    xy: FloatArray
    direction: npt.NDArray[np.int8]
    limited: BoolArray
    cover: tuple[WallCover, ...]
    cover_code: npt.NDArray[np.int8]
    top: FloatArray
    bottom: FloatArray
    #: Plain walls: two-way, unlimited, solid, full height (no Wall Height band at all: a
    #: banded wall is one the third dimension may let a line pass over or under). A line
    #: crossing any of them is blocked whatever else it meets, from either end, for every
    #: target.
    plain: BoolArray
    index: dict[str, int]


# The walls of a scene rarely change while its tokens move: their arrays are kept for the
# last few wall tuples seen (by identity; the tuple is held, so its id stays unique).
_WALL_CACHE: dict[int, tuple[tuple[WallGeom, ...], _WallArrays]] = {}
_WALL_CACHE_SIZE = 16


def _wall_arrays(all_walls: tuple[WallGeom, ...]) -> _WallArrays:
    hit = _WALL_CACHE.get(id(all_walls))
    if hit is not None and hit[0] is all_walls:
        return hit[1]
    walls = tuple(w for w in all_walls if w.active)
    arrays = _WallArrays(
        walls=walls,
        xy=np.array([[w.x0, w.y0, w.x1, w.y1] for w in walls],
                    dtype=np.float64).reshape(-1, 4),
        direction=np.array([int(w.direction) for w in walls], dtype=np.int8),
        limited=np.array([w.limited for w in walls], dtype=bool),
        cover=tuple(w.cover for w in walls),
        cover_code=np.array([_COVER_CODE[w.cover] for w in walls], dtype=np.int8),
        top=np.array([np.nan if w.top is None else w.top for w in walls], dtype=np.float64),
        bottom=np.array([np.nan if w.bottom is None else w.bottom for w in walls],
                        dtype=np.float64),
        plain=np.array([w.direction == Direction.BOTH and not w.limited
                        and w.cover is WallCover.SOLID and w.top is None and w.bottom is None
                        for w in walls], dtype=bool),
        index={w.id: k for k, w in enumerate(walls)})
    if len(_WALL_CACHE) >= _WALL_CACHE_SIZE:
        drop_oldest(_WALL_CACHE)
    _WALL_CACHE[id(all_walls)] = (all_walls, arrays)
    return arrays


@functools.lru_cache(maxsize=8192)
def _hex_cells(layout: hexgrid.HexLayout, x: float, y: float, width: float, height: float,
               shape: int) -> tuple[shapely.Polygon, FloatArray]:
    """A hex footprint's polygon and its hexes' corners (k, 6, 2; a point footprint's box
    as a hexagon), kept per footprint: a move changes one creature's, and every snapshot
    builds its tracer again. Read-only."""
    fp = hexgrid.footprint_at(layout, x, y, width, height, shape)
    verts = np.array([_box_hex(fp.polygon) if fp.point else hexgrid.vertices(layout, i, j)
                      for i, j in fp.cells], dtype=np.float64).reshape(-1, 6, 2)
    verts.flags.writeable = False
    return fp.polygon, verts


def _box_hex(poly: shapely.Polygon) -> FloatArray:
    """A point stand-in's tiny box as a degenerate six-cornered ring (its box, corner 0
    repeated): lines never need to enter it."""
    x0, y0, x1, y1 = poly.bounds
    out: FloatArray = np.array([(x0, y0), (x1, y0), (x1, y1), (x0, y1), (x0, y0), (x0, y0)],
                               dtype=np.float64)
    return out


#: A group of at most this many blocks traced with others of another shape rides along
#: with the largest group, cut into blocks of its shape (`Tracer.trace_block_groups`):
#: measured with 1,000 walls, a call for one or two blocks cost 0.15-0.3 ms, nearly all of
#: it fixed costs, against a few microseconds per block within a larger call.
MERGE_MAX_BLOCKS = 8
#: One group of blocks: its first line in the caller's numbering, then its start and end
#: points for walls and for spaces (as `Tracer.trace_blocks` takes them).
BlockGroup = tuple[int, FloatArray, FloatArray, FloatArray, FloatArray]


def concat_hits(parts: list[tuple[int, LineHits]], n: int) -> LineHits:
    """Hits of several traced groups of lines, each numbered from its offset, as one batch
    of n lines."""
    def cat(field: str, shift: bool) -> npt.NDArray[Any]:
        arrays = [getattr(h, field) + (off if shift else 0) for off, h in parts]
        return np.concatenate(arrays) if arrays else np.empty(0, dtype=np.intp)

    sides = [h.wall_side for _, h in parts if h.wall_side is not None]
    sealed = None
    if any(h.sealed is not None for _, h in parts):
        sealed = np.zeros(n, dtype=bool)
        for off, h in parts:
            if h.sealed is not None:
                sealed[off:off + h.n] = h.sealed
    return LineHits(n, cat("wall_line", True), cat("wall_idx", False),
                    cat("creature_line", True), cat("creature_idx", False),
                    cat("region_line", True), cat("region_idx", False),
                    np.concatenate(sides).astype(np.int8) if sides else
                    np.empty(0, dtype=np.int8), sealed)


def _cut(group: BlockGroup, p_n: int, q_n: int) -> tuple[list[FloatArray], IntArray]:
    """A group's blocks cut into blocks of p_n x q_n (the last cut of each side padded with
    its last point again), and where each of their lines is in the caller's numbering (-1:
    a padding line, a copy of one already there)."""
    first, *points = group
    b, p, q = len(points[0]), points[0].shape[1], points[1].shape[1]
    ci, cj = -(-p // p_n), -(-q // q_n)
    pi = np.arange(ci * p_n).reshape(ci, p_n)
    qj = np.arange(cj * q_n).reshape(cj, q_n)
    sidx, eidx = np.minimum(pi, p - 1), np.minimum(qj, q - 1)
    cut = []
    for k, pts in enumerate(points):
        if k % 2 == 0:  # start points: the same for every end cut
            ps = np.broadcast_to(pts[:, sidx][:, :, None], (b, ci, cj, p_n, 2))
            cut.append(ps.reshape(-1, p_n, 2))
        else:
            pe = np.broadcast_to(pts[:, eidx][:, None], (b, ci, cj, q_n, 2))
            cut.append(pe.reshape(-1, q_n, 2))
    valid = (pi < p)[:, None, :, None] & (qj < q)[None, :, None, :]
    local = pi[:, None, :, None] * q + qj[None, :, None, :]
    dest = np.where(valid[None], first + (np.arange(b) * p * q)[:, None, None, None, None]
                    + local[None], -1)
    return cut, dest.reshape(-1)


def _renumbered(hits: LineHits, dest: IntArray, n: int, whole: int = 0) -> LineHits:
    """Hits of a traced batch with each line renumbered by `dest` (-1: dropped). Only its
    first `whole` lines (blocks traced whole, not cut) keep their `sealed` marks: a cut of
    a sealed block says nothing of the block it was cut from."""
    def keep(line: IntArray) -> tuple[IntArray, BoolArray]:
        d = dest[line]
        k = d >= 0
        return d[k], k

    wl, wk = keep(hits.wall_line)
    cl, ck = keep(hits.creature_line)
    rl, rk = keep(hits.region_line)
    sealed = None
    if hits.sealed is not None and whole:
        sealed = np.zeros(n, dtype=bool)
        sealed[dest[:whole]] = hits.sealed[:whole]
    return LineHits(n, wl, hits.wall_idx[wk], cl, hits.creature_idx[ck], rl,
                    hits.region_idx[rk],
                    None if hits.wall_side is None else hits.wall_side[wk], sealed)


#: Batches of at most this many blocks (of one shape) reuse earlier wall hits (a move's
#: few hundred pairs); a full matrix traces everything once and keeps nothing.
REUSE_MAX_BLOCKS = 512
_BlockHits = tuple[IntArray, IntArray, npt.NDArray[np.int8]]
#: One block's hits as held: the traced batch's sorted hits, where the block's run starts
#: and ends in them, and the line offset of the block in that batch (cut when read: most
#: blocks held are never read again).
_HeldBlock = tuple[_BlockHits, int, int, int, bool | None]


@dataclass(slots=True)
class _BlockGeneration:
    """Wall hits of blocks (by their points) traced over one walls tuple (held, so its id
    stays unique) for the scene geometry `geom` and for the one before it."""

    walls: tuple[WallGeom, ...]
    geom: SceneGeom
    current: dict[bytes, _HeldBlock]
    previous: dict[bytes, _HeldBlock]


# Per (walls tuple id, block shape, every wall listed, blocks cut from bigger ones).
_BLOCK_HITS: dict[tuple[int, int, int, bool, bool], _BlockGeneration] = {}
_BLOCK_HITS_SLOTS = 16


class Tracer:
    """Line tracing over one frozen scene."""

    def __init__(self, scene: SceneGeom) -> None:
        self.scene = scene
        grid = scene.grid
        w = _wall_arrays(scene.walls)
        self.walls = w.walls
        self.wall_xy: FloatArray = w.xy
        self.wall_dir = w.direction
        self.wall_limited: BoolArray = w.limited
        self.wall_cover = w.cover
        self.wall_cover_code = w.cover_code
        self.wall_top: FloatArray = w.top
        self.wall_bottom: FloatArray = w.bottom
        #: Walls with a height band (Wall Height's bottom or top): the only ones the third
        #: dimension can let a line pass over or under.
        self.wall_banded: BoolArray = ~(np.isnan(w.top) & np.isnan(w.bottom))
        self.wall_plain: BoolArray = w.plain
        #: Walls whose cover hint is improved (arrow slits): the only walls besides plain
        #: ones a level-only trace lists on a line a plain wall stops (`trace_blocks`).
        self.wall_improved: BoolArray = w.cover_code == IMPROVED_CODE
        self.wall_index = w.index
        self.creatures: tuple[CreatureGeom, ...] = scene.creatures
        cols = columns(scene.creatures, grid)
        self.boxes: FloatArray = cols.spaces
        #: Hex grids: each creature's exact footprint (its box only prunes the tests), and
        #: its hexes' corners for the vectorised test.
        self.creature_polys: list[shapely.Polygon] | None = None
        if hexgrid.is_hex(grid):
            layout = hexgrid.HexLayout.of(grid)
            cs = scene.creatures
            held = per_creature("hex cells", cs, grid, lambda todo: [
                _hex_cells(layout, cs[k].x, cs[k].y, cs[k].width, cs[k].height, cs[k].shape)
                for k in todo])
            self.creature_polys = [poly for poly, _ in held]
            counts = np.array([len(verts) for _, verts in held], dtype=np.intp)
            self._cell_start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.intp)
            self._cell_count = counts
            self._cell_verts = (np.concatenate([verts for _, verts in held]) if held
                                else np.zeros((0, 6, 2)))
            self._tol = 1e-9 * grid.size
        self.regions = scene.regions
        self.region_polys = [shapely.Polygon(r.points) for r in scene.regions]
        self.region_kind = tuple(r.kind for r in scene.regions)
        self.elev: FloatArray = cols.elev
        self.tall: FloatArray = cols.tall
        self.side: FloatArray = cols.side
        #: Creatures stand at several elevations: lines may pass over or under creatures.
        self.raised = bool(len(self.elev) and np.ptp(self.elev) > 0)

    @property
    def cell_verts(self) -> FloatArray:
        """Hex grids: the corners (K, 6, 2) of every creature's hexes, creature by creature
        (`cell_start`, `cell_count`)."""
        return self._cell_verts

    @property
    def cell_start(self) -> IntArray:
        return self._cell_start

    @property
    def cell_count(self) -> IntArray:
        return self._cell_count

    def trace(self, starts: FloatArray, ends: FloatArray,
              group_start: IntArray | None = None,
              space_lines: tuple[FloatArray, FloatArray] | None = None) -> LineHits:
        """Trace lines from `starts` (the attacker's side, for one-way walls) to `ends`;
        `group_start` (first line of each contiguous group sharing a neighbourhood) turns on
        the spatial prune, with identical results. `space_lines` are the same lines for the
        tests against creatures' spaces and regions, when those differ (the rules' exact
        corner-to-corner lines, where walls see lines drawn a hair inside the spaces)."""
        n = len(starts)
        s_starts, s_ends = space_lines if space_lines is not None else (starts, ends)
        wl, wi = kernel.segments_cross_walls(starts, ends, self.wall_xy, group_start)
        if wl.size:
            keep = self.facing(wi, starts[wl])
            wl, wi = wl[keep], wi[keep]
        cl, ci = kernel.segments_enter_boxes(s_starts, s_ends, self.boxes, group_start)
        cl, ci = self.exact_footprints(s_starts, s_ends, cl, ci)
        rl, ri = kernel.segments_enter_polygons(s_starts, s_ends, self.region_polys)
        return LineHits(n, wl, wi, cl, ci, rl, ri)

    def facing(self, wi: IntArray, origins: FloatArray) -> BoolArray:
        """Per row (wall index, origin point): whether the wall stands against sight from
        that origin: two-way, or one-way with the origin not on the side Foundry ignores
        it from."""
        one_way = self.wall_dir[wi] != Direction.BOTH
        out: BoolArray = ~one_way
        if one_way.any():
            side = kernel.foundry_side(self.wall_xy[wi[one_way]], origins[one_way])
            out[one_way] = side != self.wall_dir[wi[one_way]]
        return out

    def exact_footprints(self, starts: FloatArray, ends: FloatArray, cl: IntArray,
                          ci: IntArray) -> tuple[IntArray, IntArray]:
        """On hex grids, keep the (line, creature) hits whose line really enters the
        creature's hex footprint, not only its bounding box: a vectorised clip of each line
        against each of the creature's hexes (open interiors); a line running exactly along
        a side shared by two hexes of one creature is settled by Shapely."""
        if self.creature_polys is None or cl.size == 0:
            return cl, ci
        counts = self._cell_count[ci]
        pair = np.repeat(np.arange(cl.size), counts)
        first = np.repeat(self._cell_start[ci], counts)
        cells = first + kernel.within_runs(counts)
        verts = self._cell_verts[cells]  # (K, 6, 2)
        sides, lengths = self._cell_sides
        normal, scale = sides[cells], lengths[cells]
        p, d = starts[cl[pair]], ends[cl[pair]] - starts[cl[pair]]
        px, py, dx, dy = p[:, 0], p[:, 1], d[:, 0], d[:, 1]
        span = np.hypot(dx, dy)
        k = len(cells)
        lower, upper = np.full(k, -np.inf), np.full(k, np.inf)
        parallel_out, along = np.zeros(k, dtype=bool), np.zeros(k, dtype=bool)
        # A side at a time over every (line, hex) row: the products a (K, 6) array would
        # hold, without its temporaries.
        with np.errstate(divide="ignore", invalid="ignore"):
            for i in range(verts.shape[1]):
                nx, ny = normal[:, i, 0], normal[:, i, 1]
                a = nx * dx + ny * dy
                b = nx * (verts[:, i, 0] - px) + ny * (verts[:, i, 1] - py)
                tol = self._tol * scale[:, i]
                # A line parallel to a side within rounding (one running along it) is held
                # by that side's half-plane alone: its clip ratio would be rounding noise.
                parallel = np.abs(a) <= tol * span
                ratio = b / a
                np.maximum(lower, np.where((a > 0) & ~parallel, ratio, -np.inf), out=lower)
                np.minimum(upper, np.where((a < 0) & ~parallel, ratio, np.inf), out=upper)
                parallel_out |= parallel & (b >= -tol)
                along |= parallel & (np.abs(b) <= tol)
        lo, hi = np.maximum(lower, 0.0), np.minimum(upper, 1.0)
        enters = (hi - lo > 1e-12) & ~parallel_out
        # Per (line, creature): any of its hexes (each row's hexes are one run; a row of
        # none, which a footprint never is, stays False).
        runs, some = np.cumsum(counts) - counts, counts > 0
        hit = np.zeros(cl.size, dtype=bool)
        maybe = np.zeros(cl.size, dtype=bool)
        hit[some] = np.logical_or.reduceat(enters, runs[some])
        maybe[some] = np.logical_or.reduceat(along, runs[some])
        # Along a side: inside the union only if the side is shared by two of its hexes.
        check = np.nonzero(maybe & ~hit & (self._cell_count[ci] > 1))[0]
        if check.size:
            lines = shapely.linestrings(np.stack([starts[cl[check]], ends[cl[check]]], axis=1))
            polys = np.array(self.creature_polys, dtype=object)[ci[check]]
            hit[check] = shapely.relate_pattern(lines, polys, "T********")
        return cl[hit], ci[hit]

    @functools.cached_property
    def _cell_sides(self) -> tuple[FloatArray, FloatArray]:
        """Hex grids: the sides of every creature's hexes (`cell_verts`) as inward normals
        (K, 6, 2), pointing from each side towards its hex's centre, and their lengths (the
        sides' own, the normals' scale)."""
        verts = self._cell_verts
        edge = kernel.next_corners(verts) - verts
        centre = (kernel.over_points(np.add, verts) / verts.shape[1])[:, None, :]
        normal = np.stack([-edge[..., 1], edge[..., 0]], axis=-1)
        flip = np.sign(np.einsum("kij,kij->ki", normal, centre - verts))
        normal = normal * flip[..., None]
        return normal, np.hypot(normal[..., 0], normal[..., 1])

    def trace_blocks(self, starts: FloatArray, ends: FloatArray,
                     space_starts: FloatArray, space_ends: FloatArray,
                     every_wall: bool = True, cut: bool = False) -> LineHits:
        """Trace blocks of P x Q lines (all lines from P start points to Q end points, line
        index block * P * Q + p * Q + q), for both directions at once: one-way walls are
        left to the reader, with each hit's side in `wall_side`. Spaces and regions are
        tested on the `space_*` points, as in `trace`. Without `every_wall`, a line that
        crosses plain walls (`_WallArrays.plain`) lists one of them, not each, and of all
        else it meets only the walls whose cover hint is improved (`wall_improved`): no
        creature, no other wall. A plain wall stops a line from either end whatever else
        it meets, and an arrow slit before it is the one thing that can still make the
        line worth more to a rule than plain cover (rulesets/corner.py, `_levels`'
        partly blocked corner). Enough for rules that ask what a line's obstacles are worth,
        not for drawing it. A block one plain wall seals lists no arrow slits (no corner of
        it is partly blocked), unless `cut`: some blocks are cuts of bigger ones
        (`trace_block_groups`), where a corner's lines may run in two cuts, one sealed."""
        b, p_n, q_n = len(starts), starts.shape[1], ends.shape[1]
        if b <= REUSE_MAX_BLOCKS:
            wl, wi, side, sealed = self._walls_reused(starts, ends, every_wall, cut)
        else:
            wl, wi, side, sealed = self._walls(starts, ends, every_wall, cut)
        skip = None
        if not every_wall and self.wall_plain.any():
            # Lines a plain wall stops: no creature can matter on them.
            skip = np.zeros((b, p_n, q_n), dtype=bool)
            skip.reshape(-1)[wl[self.wall_plain[wi]]] = True
        cl, ci = kernel.blocks_enter_boxes(space_starts, space_ends, self.boxes, skip)
        rl = ri = np.empty(0, dtype=np.intp)
        if self.region_polys or self.creature_polys is not None:
            flat_s = np.repeat(space_starts, q_n, axis=1).reshape(-1, 2)
            flat_e = np.tile(space_ends, (1, p_n, 1)).reshape(-1, 2)
            # Hex grids: the boxes found above are the footprints' bounds; keep the hits
            # whose line enters a hex of the footprint.
            cl, ci = self.exact_footprints(flat_s, flat_e, cl, ci)
            if self.region_polys:
                rl, ri = kernel.segments_enter_polygons(flat_s, flat_e, self.region_polys)
        return LineHits(b * p_n * q_n, wl, wi, cl, ci, rl, ri, side,
                        None if sealed is None else np.repeat(sealed, p_n * q_n))

    def trace_block_groups(self, groups: list[BlockGroup], n: int,
                           every_wall: bool = True) -> LineHits:
        """`trace_blocks` for groups of blocks of different shapes, each group's lines
        numbered from its first line on (n lines in all): the hits of all, in that
        numbering. A group of at most MERGE_MAX_BLOCKS blocks is cut into blocks of the
        largest group's shape and traced with it (one call instead of one each: a small
        call is nearly all fixed costs); a padding line is a copy of a line of its block,
        so dropping its hits loses nothing."""
        if not groups:
            return concat_hits([], n)
        size = [len(g[1]) * g[1].shape[1] * g[2].shape[1] for g in groups]
        main = max(range(len(groups)), key=size.__getitem__)
        riders = [k for k, g in enumerate(groups)
                  if k != main and len(g[1]) <= MERGE_MAX_BLOCKS]
        alone = [(g[0], self.trace_blocks(*g[1:], every_wall))
                 for k, g in enumerate(groups) if k != main and k not in riders]
        if not riders:
            first, s_in, e_in, s_raw, e_raw = groups[main]
            return concat_hits([(first, self.trace_blocks(s_in, e_in, s_raw, e_raw,
                                                          every_wall)), *alone], n)
        p_n, q_n = groups[main][1].shape[1], groups[main][2].shape[1]
        first = groups[main][0]
        parts = [list(groups[main][1:])]
        dests = [first + np.arange(size[main], dtype=np.intp)]
        for k in riders:
            cut, dest = _cut(groups[k], p_n, q_n)
            parts.append(cut)
            dests.append(dest)
        s_in, e_in, s_raw, e_raw = (np.concatenate([part[i] for part in parts])
                                    for i in range(4))
        merged = _renumbered(self.trace_blocks(s_in, e_in, s_raw, e_raw, every_wall, True),
                             np.concatenate(dests), n, size[main])
        return concat_hits([(0, merged), *alone], n)

    def _walls(self, starts: FloatArray, ends: FloatArray, every_wall: bool,
               cut: bool = False) -> tuple[IntArray, IntArray, npt.NDArray[np.int8],
                                           BoolArray | None]:
        """Wall hits of blocks, plain walls collapsed to one per line unless every_wall;
        and then also which blocks one plain wall (or run) seals
        (`kernel.blocks_cross_walls_any`; None: not looked for)."""
        if every_wall or not self.wall_plain.any():
            return (*kernel.blocks_cross_walls(starts, ends, self.wall_xy), None)
        sealed = np.zeros(len(starts), dtype=bool)
        wl, wi, side, crossed = kernel.blocks_cross_walls_any(
            starts, ends, self.wall_xy, self.wall_plain, self.wall_improved, sealed=sealed,
            still_when_sealed=cut)
        first_plain = int(np.argmax(self.wall_plain))
        return (np.concatenate([wl, crossed]),
                np.concatenate([wi, np.full(len(crossed), first_plain, dtype=np.intp)]),
                np.concatenate([side, np.ones(len(crossed), dtype=np.int8)]), sealed)

    def _walls_reused(self, starts: FloatArray, ends: FloatArray, every_wall: bool,
                      cut: bool = False) -> tuple[IntArray, IntArray, npt.NDArray[np.int8],
                                                 BoolArray | None]:
        """`_walls`, reusing the hits of blocks traced for this scene
        geometry or the one before it over the same walls (a token moving changes what
        creatures are in the way of other pairs' lines, never which walls those lines
        cross). Nothing older is kept: a token moving back to where it stood two changes
        ago is traced again, as during a real drag."""
        b, p_n, q_n = len(starts), starts.shape[1], ends.shape[1]
        slot = (id(self.scene.walls), p_n, q_n, every_wall, cut)
        held = _BLOCK_HITS.get(slot)
        if held is None or held.walls is not self.scene.walls:
            held = _BlockGeneration(self.scene.walls, self.scene, {}, {})
        elif held.geom is not self.scene:
            held = _BlockGeneration(self.scene.walls, self.scene, {}, held.current)
        # Each block's points as one bytes key (rows viewed as one void item each: one call,
        # not a tobytes per block).
        rows = np.concatenate([starts.reshape(b, -1), ends.reshape(b, -1)], axis=1)
        keys = cast("list[bytes]", np.ascontiguousarray(rows).view(
            np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel().tolist())
        current, previous = held.current, held.previous
        found = [current.get(key) or previous.get(key) for key in keys]
        todo = [k for k, f in enumerate(found) if f is None]
        per = p_n * q_n
        fresh: _BlockHits | None = None
        fresh_sealed: BoolArray | None = None
        if todo:
            wl, wi, side, fresh_sealed = self._walls(starts[todo], ends[todo], every_wall,
                                                     cut)
            blk = wl // per
            order = np.argsort(blk, kind="stable")
            fresh = (wl[order], wi[order], side[order])
            cuts = np.searchsorted(blk[order], np.arange(len(todo) + 1)).tolist()
            marks = ([None] * len(todo) if fresh_sealed is None
                     else fresh_sealed.tolist())
            for j, k in enumerate(todo):
                found[k] = (fresh, cuts[j], cuts[j + 1], j * per, marks[j])
        complete = [f for f in found if f is not None]  # every block, now
        current.update(zip(keys, complete, strict=True))
        if len(_BLOCK_HITS) >= _BLOCK_HITS_SLOTS and slot not in _BLOCK_HITS:
            drop_oldest(_BLOCK_HITS)
        _BLOCK_HITS[slot] = held
        if fresh is not None and len(todo) == b:
            # Nothing reused: the batch's hits, block by block, as traced.
            return (*fresh, fresh_sealed)
        marked = [f[4] for f in complete]
        sealed = (None if any(m is None for m in marked)
                  else np.array(marked, dtype=bool))
        # The fresh blocks' hits moved to their places in one step; only the reused blocks
        # (few on a move: the mover's pairs are new) are cut out one by one.
        parts: list[_BlockHits] = []
        if fresh is not None:
            shift = (np.asarray(todo, dtype=np.intp) - np.arange(len(todo))) * per
            parts.append((fresh[0] + shift[fresh[0] // per], fresh[1], fresh[2]))
        is_fresh = set(todo)
        for k in (k for k in range(b) if k not in is_fresh):
            arrays, lo, hi, offset, _ = complete[k]
            if hi > lo:
                parts.append((arrays[0][lo:hi] - offset + k * per, arrays[1][lo:hi],
                              arrays[2][lo:hi]))
        if not parts:
            return (np.empty(0, dtype=np.intp), np.empty(0, dtype=np.intp),
                    np.empty(0, dtype=np.int8), sealed)
        wl = np.concatenate([p[0] for p in parts])
        # In block order, each block's hits in the order traced (as the blocks were asked).
        order = np.argsort(wl // per, kind="stable")
        return (wl[order], np.concatenate([p[1] for p in parts])[order],
                np.concatenate([p[2] for p in parts])[order], sealed)

    def per_line_any(self, lines: IntArray, mask: BoolArray, n: int) -> BoolArray:
        """Per line: whether any of its hits (given by line indices) passes `mask`."""
        out = np.zeros(n, dtype=bool)
        out[lines[mask]] = True
        return out

    def region_lines(self, hits: LineHits, kind: RegionKind) -> BoolArray:
        mask = np.array([self.region_kind[i] is kind for i in hits.region_idx], dtype=bool)
        return self.per_line_any(hits.region_line, mask, hits.n)
