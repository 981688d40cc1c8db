"""The corner-line cover procedure shared by D&D 3.5 and Pathfinder 1e.

Rule of this module: build every sight line a corner-based rule draws for many pairs, trace
them all in one vectorised call, and reduce them per line, per probe (one attacker corner
and one target square) and per pair and mode, with numpy. The ruleset on top only says what
each degree is worth; the procedure itself is the seed text:

- ranged: pick a corner of your space; if any line from it to a corner of the target's space
  crosses a square or border that blocks line of effect, a square that gives cover, or a
  square occupied by a creature, the target has cover. The attacker picks the corner best for
  it, so the pair's degree is the smallest over corners.
- melee against an adjacent target: cover only if a line from your square to its square
  crosses a wall (low walls included); creatures never cover.
- melee against a target that is not adjacent (reach): the ranged procedure.
- big creatures in melee: either side may use any square the creature occupies.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, cast, overload

import msgspec
import numpy as np
import numpy.typing as npt
import shapely

from geometry import kernel, openings, rooms
from geometry.caches import changed_positions
from geometry.columns import columns, has_riders
from geometry.flanking import any_crosses_opposite_faces, crosses_opposite_faces_many
from geometry.kernel import BoolArray, FloatArray, IntArray, take_rows
from geometry.model import FEET_PER_SQUARE, CreatureGeom, Grid, RegionKind, SceneGeom
from geometry.square import (
    INSET_PX,
    Box,
    adjacent,
    adjacent_pairs,
    centre,
    corners,
    corners_many,
    grid_steps_many,
    inset,
    inset_many,
    segment_grid_feet,
    space,
    squares,
    vertical_steps_many,
    within_reach_many,
)
from geometry.trace import LOW_CODE, SOLID_CODE, BlockGroup, LineHits, Tracer
from geometry.vertical import band_stretches, flank_height
from rulesets import kept
from rulesets.base import AttackMode, TracedLine, in_reach_by_mode
from rulesets.obstacles import creature_hits, limited_blocked, wall_roles, wall_roles_3d
from rulesets.shadows import (
    front_sides,
    grouped_union,
    hidden_areas,
    hulls,
    meeting,
    near_edges,
    open_ended,
    repaired,
    shadow_polygons,
    truncated_shadows,
    wall_lines,
)

# Per-line levels, ordered by how much they help the target.
NONE, SOFT, COVER, IMPROVED, TOTAL = 0, 1, 2, 3, 4

# Line kinds: which obstructions a line's rule lets count.
RANGED_LINE, REACH_LINE, ADJACENT_LINE = 0, 1, 2

LOW_OBSTACLE_RANGE_FT = 30.0


class CornerOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    big_creatures_ranged: bool = False
    # Both texts send reach attacks to the ranged rules, soft cover included (issue 14,
    # docs/rulesets.md dnd35 choice 5): the same default in 3.5 and PF1.
    soft_cover_vs_reach: bool = True
    low_obstacle_range_from: Literal["attacker", "target"] = "attacker"


CORNER_OPTION_DOCS = {
    "bigCreaturesRanged": "Let either side use any square a big creature occupies for ranged "
                          "attacks too (the seed grants it only in melee).",
    "softCoverVsReach": "Creatures in the way give soft cover against reach attacks as well as "
                        "ranged ones (reach uses the ranged rules; false: ranged only).",
    "lowObstacleRangeFrom": "Whose distance to a low obstacle must be within 30 ft for it to "
                            "give cover: 'attacker' (the seed: 'contro le creature entro 9 m') "
                            "or 'target' (the English SRD: 'only to creatures within 30 ft').",
}


@dataclass(frozen=True, slots=True)
class Probe:
    """One attacker choice that reached the pair's degree: its origin point (None for the
    adjacent-melee square-to-square probe), the target box its lines ran to, and how many of
    its lines no obstacle stopped (creatures aside)."""

    origin: tuple[float, float] | None
    target_box: Box
    open_lines: int
    lines: int


@dataclass(frozen=True, slots=True)
class PairFacts:
    """Per pair and mode: the reduced level, and what the rule needs to explain it."""

    level: int
    adjacent: bool
    in_reach: bool
    best_lines: tuple[TracedLine, ...] | None
    best: tuple[Probe, ...] = ()


@dataclass(frozen=True, slots=True)
class CoverProbes:
    """The probes that put rows at cover, as arrays (what `PairFacts.best` holds for one
    row, for many rows at once): per probe, the row it belongs to (ascending), its origin
    (NaN: the adjacent-melee probe, from a whole square), the target square its lines ran
    to, and how many of its lines no obstacle stopped (creatures aside) of how many (-1
    where not counted)."""

    row: IntArray
    origin: FloatArray
    box: FloatArray
    open_lines: IntArray
    lines: IntArray


@dataclass(frozen=True, slots=True)
class RowFacts:
    """Per row (pair and mode), as arrays: the reduced level, whether the two are adjacent,
    and whether the target is in reach of that attack. What a rule that reads nothing but
    the level needs, without a PairFacts object per row; when asked, the probes of the rows
    at cover too (`cover`)."""

    level: npt.NDArray[np.int8]
    adjacent: BoolArray
    in_reach: BoolArray
    cover: CoverProbes | None = None


@dataclass(frozen=True, slots=True)
class _Traced:
    """A plan traced and reduced: per row its level; per probe and virtual line what the
    per-row facts (`_evaluate_plan`) read back."""

    row_level: npt.NDArray[np.int8]
    hits: LineHits
    comps: dict[str, BoolArray]
    at: IntArray
    level: npt.NDArray[np.int8]
    starts: FloatArray
    ends: FloatArray
    probe_level: npt.NDArray[np.int8]
    #: Each row's level with its ranged lines read under the reach rule (when asked for).
    row_level_reach: npt.NDArray[np.int8] | None = None


@dataclass(frozen=True, slots=True)
class PlanArrays:
    """Lines to trace and how the rules read them.

    Real lines are traced once; virtual lines are what the rules see: each maps to a real
    line (`virt_real`), so the three attack modes of a pair share one traced block. Probes
    are contiguous runs of virtual lines; rows (pair and mode) contiguous runs of probes.
    """

    real_starts: FloatArray
    real_ends: FloatArray
    #: The same lines between the exact corners (walls see the inset ones above).
    space_starts: FloatArray
    space_ends: FloatArray
    real_groups: IntArray | None  # None: no spatial prune (the reference computation)
    virt_real: IntArray
    #: Virtual lines that read their real line backwards (the target's side of a block).
    virt_reversed: BoolArray
    #: The real lines as blocks of P x Q, grouped by shape: (first real line, start points,
    #: end points, and the same two exact, for spaces and regions), when they are.
    blocks: list[BlockGroup] | None
    kind: npt.NDArray[np.int8]
    att: IntArray
    tgt: IntArray
    probe_start: IntArray
    probe_origin: FloatArray  # NaN where a probe has several origins
    probe_box: FloatArray
    row_probe_start: IntArray


class _Plan:
    """Flat arrays of lines, probes and rows under construction, one probe at a time (the
    general path: big creatures, any mode)."""

    def __init__(self) -> None:
        self.starts: list[FloatArray] = []
        self.ends: list[FloatArray] = []
        self.space_starts: list[FloatArray] = []
        self.space_ends: list[FloatArray] = []
        self.line_kind: list[int] = []
        self.line_att: list[int] = []
        self.line_tgt: list[int] = []
        self.probe_start: list[int] = []
        self.probe_origin: list[tuple[float, float] | None] = []
        self.probe_box: list[Box] = []
        self.row_probe_start: list[int] = []
        self.count = 0

    def begin_row(self) -> None:
        self.row_probe_start.append(len(self.probe_start))

    def probe(self, a: int, t: int, kind: int, origins: FloatArray, o_space: Box,
              targets: FloatArray, t_space: Box, t_box: Box) -> None:
        """Every line from each origin point (a corner of the attacker's square or space
        o_space, pulled into it) to each target point (corners of t_box, pulled into
        t_space, that box or the target's whole space), as one probe."""
        n = len(origins) * len(targets)
        self.probe_start.append(self.count)
        self.probe_origin.append(
            (float(origins[0, 0]), float(origins[0, 1])) if len(origins) == 1 else None)
        self.probe_box.append(t_box)
        self.starts.append(np.repeat(inset(origins, o_space), len(targets), axis=0))
        self.ends.append(np.tile(inset(targets, t_space), (len(origins), 1)))
        self.space_starts.append(np.repeat(origins, len(targets), axis=0))
        self.space_ends.append(np.tile(targets, (len(origins), 1)))
        self.line_kind.extend([kind] * n)
        self.line_att.extend([a] * n)
        self.line_tgt.extend([t] * n)
        self.count += n

    def arrays(self) -> PlanArrays:
        starts = np.concatenate(self.starts)
        rows = np.array(self.row_probe_start, dtype=np.intp)
        pstart = np.array(self.probe_start, dtype=np.intp)
        return PlanArrays(
            real_starts=starts, real_ends=np.concatenate(self.ends),
            space_starts=np.concatenate(self.space_starts),
            space_ends=np.concatenate(self.space_ends),
            real_groups=pstart[rows], virt_real=np.arange(len(starts), dtype=np.intp),
            virt_reversed=np.zeros(len(starts), dtype=bool), blocks=None,
            kind=np.array(self.line_kind, dtype=np.int8),
            att=np.array(self.line_att, dtype=np.intp),
            tgt=np.array(self.line_tgt, dtype=np.intp),
            probe_start=pstart,
            probe_origin=np.array([(np.nan, np.nan) if o is None else o
                                   for o in self.probe_origin], dtype=np.float64),
            probe_box=np.array(self.probe_box, dtype=np.float64).reshape(-1, 4),
            row_probe_start=rows)


_NO_POINTS: FloatArray = np.empty((0, 2))
_COMMON_FACTS: dict[tuple[int, bool, bool], PairFacts] = {}

#: A stack of one per-creature list's arrays of one shape, and each creature's row in it
#: (-1: its array has another shape).
_Stack = tuple[npt.NDArray[Any], IntArray]
#: The last engine's stacks (by list name and shape) and the grid and creatures they were
#: built for: the next engine of a scene (a token moved) patches the rows of the creatures
#: that are not the same objects instead of stacking every creature again. A few engines
#: are kept, newest first: a gm's and a viewer's view of a scene with hidden tokens (or
#: two scenes) take turns.
_LAST_STACKS: list[tuple[Grid, tuple[CreatureGeom, ...], dict[tuple[str, tuple[int, ...]],
                                                              _Stack], _Lists]] = []
_LAST_STACKS_KEPT = 4


@dataclass(frozen=True, slots=True)
class _Lists:
    """An engine's per creature lists (by position), read from the creatures' layouts: the
    next engine of a scene copies them and replaces the moved creatures' entries."""

    layouts: list[_Layout]
    spaces: list[Box]
    squares: list[list[Box]]
    points: list[FloatArray]
    points_in: list[FloatArray]
    space_idx: list[IntArray]
    square_idx: list[IntArray]
    square_boxes: list[FloatArray]
    k: IntArray

    @staticmethod
    def of(layouts: list[_Layout]) -> _Lists:
        points = [lay.points for lay in layouts]
        return _Lists(layouts, [lay.space for lay in layouts],
                      [lay.squares for lay in layouts], points,
                      [lay.points_in for lay in layouts],
                      [lay.space_idx for lay in layouts],
                      [lay.square_idx for lay in layouts],
                      [lay.square_boxes for lay in layouts],
                      np.fromiter(map(len, points), dtype=np.intp, count=len(points)))

    def patched(self, cs: Sequence[CreatureGeom], grid: Grid, moved: list[int]) -> _Lists:
        """These lists for the creatures `cs`, which differ from the ones they were read
        for at the positions `moved` only."""
        out = _Lists([*self.layouts], [*self.spaces], [*self.squares], [*self.points],
                     [*self.points_in], [*self.space_idx], [*self.square_idx],
                     [*self.square_boxes], self.k.copy())
        for k in moved:
            lay = out.layouts[k] = _layout(cs[k], grid)
            out.spaces[k], out.squares[k], out.points[k] = lay.space, lay.squares, lay.points
            out.points_in[k], out.space_idx[k] = lay.points_in, lay.space_idx
            out.square_idx[k], out.square_boxes[k] = lay.square_idx, lay.square_boxes
            out.k[k] = len(lay.points)
        return out


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where a creature's lines can start or end: the four corners of every square it
    occupies, square by square (a one-square creature's are its space's four), exact and a
    hair inside that square (so a corner two of its squares share is two points, each
    pulled into its own square: "uno qualunque dei quadretti occupati", the lines run
    between the chosen square's corners); where the space's corners and each square's
    corners sit among them; and every corner once, exact (what a line can end at)."""

    space: Box
    squares: list[Box]
    points: FloatArray
    points_in: FloatArray
    space_idx: IntArray
    square_idx: IntArray
    square_boxes: FloatArray
    distinct: FloatArray
    #: The box holding the space and every square: where any of the creature's lines, and
    #: any line of effect to or from its space, can start. The space itself, but for a
    #: token whose size is not a whole number of squares (1.5 squares: two squares
    #: wide, lines from their corners; 1.4: one square, in a space wider than it).
    reach_box: Box
    #: Whether the squares hold the whole space (the lines' points span it), so that a wall
    #: crossing every line between their corners separates the spaces too.
    squares_hold_space: bool


_LAYOUTS: dict[tuple[float, float, float, float, float], _Layout] = {}
_LAYOUTS_MAX = 16384


def _layout(c: CreatureGeom, grid: Grid) -> _Layout:
    # A layout depends only on where the creature stands on the map, its size and the
    # grid's: a token that did not move keeps its layout across revisions (the arrays are
    # never written to). Keyed by those numbers, not the creature (hashing a whole creature
    # is slower). The third dimension (elevation, tall, mount) is never part of a layout:
    # the engine reads it from the creatures themselves (_elev, _side, _partner).
    key = (c.x, c.y, c.width, c.height, grid.size)
    found = _LAYOUTS.get(key)
    if found is None:
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        found = _LAYOUTS[key] = _new_layout(c, grid)
    return found


def _new_layout(c: CreatureGeom, grid: Grid) -> _Layout:
    box = space(c, grid)
    sqs = squares(c, grid)
    sq_arr = np.array(sqs, dtype=np.float64)
    each = corners_many(sq_arr)  # (squares, 4, 2)
    pts = each.reshape(-1, 2)
    pts_in = inset_many(each, sq_arr).reshape(-1, 2)
    lo, hi = sq_arr[:, 0:2].min(axis=0), sq_arr[:, 2:4].max(axis=0)
    reach_box = (min(box[0], float(lo[0])), min(box[1], float(lo[1])),
                 max(box[2], float(hi[0])), max(box[3], float(hi[1])))
    holds = bool(lo[0] <= box[0] and lo[1] <= box[1] and hi[0] >= box[2] and hi[1] >= box[3])
    # A corner of the space is a corner of one square only: its point is that square's.
    return _Layout(box, sqs, pts, pts_in, _indices(pts, corners(box)),
                   np.arange(len(pts), dtype=np.intp).reshape(len(sqs), 4), sq_arr,
                   _distinct_corners(sqs), reach_box, holds)


def sight_points(c: CreatureGeom, grid: Grid) -> FloatArray:
    """Every point a corner-rule line to or from this creature can end at: the corners of
    every square it occupies (creatures in the way are tested on these exact lines)."""
    return _layout(c, grid).distinct


# Attack modes as row codes (CornerEngine._row_arrays).
_MELEE_CODE, _REACH_CODE, _RANGED_CODE = 0, 1, 2
#: Each attack mode's code in the row arrays, and back.
MODE_CODE: dict[AttackMode, int] = {AttackMode.MELEE: _MELEE_CODE,
                                    AttackMode.REACH: _REACH_CODE,
                                    AttackMode.RANGED: _RANGED_CODE}
CODE_MODE: tuple[AttackMode, ...] = (AttackMode.MELEE, AttackMode.REACH, AttackMode.RANGED)
# Row shapes (CornerEngine._row_shapes), in planning order.
_SIMPLE, _SPACES, _SQUARES, _ONE_BY_ONE = 0, 1, 2, 3


def _distinct_corners(boxes: Sequence[Box]) -> FloatArray:
    """The corners of several squares, each once, in first-seen order."""
    pts = np.concatenate([corners(b) for b in boxes])
    _, first = np.unique(pts, axis=0, return_index=True)
    return pts[np.sort(first)]



def _indices(points: FloatArray, wanted: FloatArray) -> IntArray:
    """Where each wanted point sits in `points`."""
    hits = np.all(np.isclose(points[None, :, :], wanted[:, None, :]), axis=2)
    found: IntArray = np.argmax(hits, axis=1)
    return found


def reduce_segments(op: np.ufunc, values: npt.NDArray[np.int8],
                    starts: IntArray) -> npt.NDArray[np.int8]:
    """`op.reduceat(values, starts)` for segments that are never empty, the first starting
    at 0. A probe's lines come four (a corner to the target's four corners) or sixteen at a
    time: when every segment starts on a multiple of four and the total is one too, each
    aligned four is reduced first by three elementwise calls on strided views, then the
    segments of those (numpy's reduceat over int8 segments of four measured ~18x slower
    than the strided calls)."""
    n = len(values)
    if n and n % 4 == 0 and len(starts) and starts[0] == 0 and not (starts & 3).any():
        fours: npt.NDArray[np.int8] = op(op(values[0::4], values[1::4]),
                                         op(values[2::4], values[3::4]))
        if len(starts) * 4 == n:
            return fours
        values, starts = fours, starts >> 2
    # Over wider integers: numpy's reduceat is faster there than over int8.
    out: npt.NDArray[np.int8] = op.reduceat(values.astype(np.intp), starts).astype(np.int8)
    return out


def _probe_levels(level: npt.NDArray[np.int8], partly: npt.NDArray[np.int8],
                  pstart: IntArray) -> npt.NDArray[np.int8]:
    """Each probe's level from its lines': total when every line is blocked, else the
    worst of what its lines are worth (a blocked line counting as at least cover)."""
    probe_max = reduce_segments(np.maximum, partly, pstart)
    all_total = reduce_segments(np.minimum, level, pstart) == TOTAL
    out: npt.NDArray[np.int8] = np.where(all_total, TOTAL, probe_max).astype(np.int8)
    return out


def _expand(real: LineHits, virt_real: IntArray, virt_reversed: BoolArray,
            wall_dir: npt.NDArray[np.int8]) -> LineHits:
    """Hits on traced (real) lines as hits on every virtual line that reads them; where the
    real hits still carry sides, one-way walls are applied per virtual line's direction."""
    n_real = real.n
    counts = np.bincount(virt_real, minlength=n_real)
    k = int(counts[0]) if n_real else 0
    if (n_real and len(virt_real) == k * n_real and bool((counts == k).all())
            and bool((virt_real[1:] >= virt_real[:-1]).all())):
        # Every real line read the same number of times, in order (a full matrix reads
        # each both ways): virtual line k * real + j, no sort and no ragged repeat.
        ks = np.arange(k)

        def spread(line: IntArray, other: npt.NDArray[Any]
                   ) -> tuple[IntArray, npt.NDArray[Any]]:
            return (line[:, None] * k + ks).reshape(-1), np.repeat(other, k)
    else:
        order = np.argsort(virt_real, kind="stable")
        offsets = np.cumsum(counts) - counts

        def spread(line: IntArray, other: npt.NDArray[Any]
                   ) -> tuple[IntArray, npt.NDArray[Any]]:
            c = counts[line]
            within = kernel.within_runs(c)
            return order[np.repeat(offsets[line], c) + within], np.repeat(other, c)

    sides = real.wall_side
    one_way = wall_dir[real.wall_idx] != 0
    if sides is None or not one_way.any():
        wl, wi = spread(real.wall_line, real.wall_idx)
    else:
        # Sides matter only on one-way walls' hits (few): the others are spread as they are.
        both = ~one_way
        wl, wi = spread(real.wall_line[both], real.wall_idx[both])
        line1 = real.wall_line[one_way]
        wl1, wi1 = spread(line1, real.wall_idx[one_way])
        _, side = spread(line1, sides[one_way])
        side = np.where(virt_reversed[wl1], 3 - side, side)
        keep = side != wall_dir[wi1]
        wl, wi = np.concatenate([wl, wl1[keep]]), np.concatenate([wi, wi1[keep]])
    cl, ci = spread(real.creature_line, real.creature_idx)
    rl, ri = spread(real.region_line, real.region_idx)
    return LineHits(len(virt_real), wl, wi, cl, ci, rl, ri)


class Rows(Sequence[tuple[int, int, AttackMode]]):
    """Rows (attacker, target, attack mode) laid out as arrays (`code`: MODE_CODE): what
    the engine plans from, without a tuple per row; a row is read as a tuple on demand."""

    __slots__ = ("a", "code", "t")

    def __init__(self, a: IntArray, t: IntArray, code: npt.NDArray[np.int8]) -> None:
        self.a = a.astype(np.intp, copy=False)
        self.t = t.astype(np.intp, copy=False)
        self.code = code.astype(np.int8, copy=False)

    def __len__(self) -> int:
        return len(self.a)

    @overload
    def __getitem__(self, i: int) -> tuple[int, int, AttackMode]: ...
    @overload
    def __getitem__(self, i: slice) -> Rows: ...

    def __getitem__(self, i: int | slice) -> tuple[int, int, AttackMode] | Rows:
        if isinstance(i, slice):
            return Rows(self.a[i], self.t[i], self.code[i])
        return int(self.a[i]), int(self.t[i]), CODE_MODE[int(self.code[i])]


#: Creature x wall slots up to which `CornerEngine._distances` finds its distinct keys by
#: marking a table of every slot (the benchmark's 100 x 1,000: cheaper than sorting).
_DENSE_DISTANCE_SLOTS = 1 << 20


#: Lines (squares' centres of two allies) up to which `CornerEngine.flankers_many` leaves
#: all of its rows to `flankers` (a move's: the arrays' fixed costs outweigh them), and
#: past which one ally of a row is `flankers`' own (two big allies: its test prunes).
FLANK_FEW = 48
FLANK_LINES = 256


#: The key of the corner engine's tables of visible fractions (`rulesets.kept`), which
#: depend on its options, not on the ruleset that runs it.
_VISIBLE_FRACTIONS = "visible fractions"


class CornerEngine:
    """Evaluates the corner procedure for many pairs of one scene."""

    def __init__(self, scene: SceneGeom, options: CornerOptions) -> None:
        self.scene = scene
        self.grid: Grid = scene.grid
        self.options = options
        self.tracer = Tracer(scene)
        self.cs = scene.creatures
        self._stacks: dict[tuple[int, tuple[int, ...]], _Stack] = {}
        self._named_stacks: dict[tuple[str, tuple[int, ...]], _Stack] = {}
        self._before_stacks: dict[tuple[str, tuple[int, ...]], _Stack] = {}
        self._moved: list[int] = []
        before: _Lists | None = None
        kept = list(_LAST_STACKS)
        for grid, cs, stacks, lists in kept:
            if grid != self.grid or len(cs) != len(self.cs):
                continue
            # (A 1,000-creature scene on every move: compared in C, not a loop body each.)
            moved = changed_positions(self.cs, cs)
            # (As before the lists were kept: a candidate whose stacks are still empty is
            # replaced by any later one that qualifies.)
            if len(moved) * 4 <= len(self.cs) and (
                    before is None or not self._before_stacks or len(moved) < len(self._moved)):
                self._before_stacks, self._moved, before = stacks, moved, lists
        # The per creature lists: the last engine's, with the moved creatures' entries
        # replaced (1,000 creatures read again took 0.4 ms of a move).
        lists = (_Lists.of(list(map(_layout, self.cs, itertools.repeat(self.grid))))
                 if before is None else before.patched(self.cs, self.grid, self._moved))
        _LAST_STACKS[:] = [(self.grid, self.cs, self._named_stacks, lists),
                           *kept[:_LAST_STACKS_KEPT - 1]]
        layouts = lists.layouts
        self._layouts = layouts
        self.spaces = lists.spaces
        self.squares = lists.squares
        cols = columns(self.cs, self.grid)
        self.index = cols.index
        self._space_arr = cols.spaces
        self._reach = cols.reach
        self._points = lists.points
        self._points_in = lists.points_in
        self._k = lists.k
        self._space_idx = lists.space_idx
        self._square_idx = lists.square_idx
        self._square_boxes = lists.square_boxes
        self._tall = cols.tall
        self._elev = cols.elev
        self._list_names = {id(self._points): "points", id(self._points_in): "points_in",
                            id(self._space_idx): "space_idx",
                            id(self._square_idx): "square_idx",
                            id(self._square_boxes): "square_boxes"}
        self._regions_on: dict[tuple[int, Box], shapely.Geometry] = {}
        #: Measure visible fractions request by request (`visible_fraction`), as before
        #: they were batched: the reference the batched path is checked against.
        self.reference_shadows = False
        self._visible: dict[tuple[int, int, tuple[float, float], Box], float] = {}
        self._rows_memo: tuple[Sequence[tuple[int, int, AttackMode]],
                               tuple[IntArray, IntArray, npt.NDArray[np.int8]]] | None = None
        self._side = cols.side
        #: Each creature's room (geometry.rooms), found when first asked.
        self._room: IntArray | None = None
        # (Most scenes have no rider: asked in C first, a loop body per creature only then.)
        riders = {k: self.index[c.mount] for k, c in enumerate(self.cs)
                  if c.mount is not None and c.mount in self.index} \
            if has_riders(self.cs) else {}
        self._partner: IntArray | None = None
        if riders:
            self._partner = np.full(len(self.cs), -1, dtype=np.intp)
            for rider, steed in riders.items():
                self._partner[rider], self._partner[steed] = steed, rider

    def _row_arrays(self, rows: Sequence[tuple[int, int, AttackMode]],
                    ) -> tuple[IntArray, IntArray, npt.NDArray[np.int8]]:
        """Attacker, target and mode (_MELEE_CODE, _REACH_CODE, _RANGED_CODE) of each row as
        arrays, read once per list of rows (planning and evaluation read the same list)."""
        if isinstance(rows, Rows):
            return rows.a, rows.t, rows.code
        memo = self._rows_memo
        if memo is not None and memo[0] is rows:
            return memo[1]
        n = len(rows)
        melee, reach = AttackMode.MELEE, AttackMode.REACH
        arrays = (np.fromiter((r[0] for r in rows), dtype=np.intp, count=n),
                  np.fromiter((r[1] for r in rows), dtype=np.intp, count=n),
                  np.fromiter((_MELEE_CODE if r[2] is melee else _REACH_CODE
                               if r[2] is reach else _RANGED_CODE for r in rows),
                              dtype=np.int8, count=n))
        self._rows_memo = (rows, arrays)
        return arrays

    def _gather(self, items: list[npt.NDArray[Any]], idx: IntArray) -> npt.NDArray[Any]:
        """np.stack([items[c] for c in idx]) for creatures whose arrays (one of the per
        creature lists above) share one shape, gathered from one stack per list and shape
        instead of row by row."""
        if len(idx) == 0:
            return np.stack([items[c] for c in idx.tolist()])
        shape = items[int(idx[0])].shape
        key = (id(items), shape)
        hit = self._stacks.get(key)
        if hit is None:
            name = self._list_names.get(id(items))
            hit = self._patched(name, shape, items) if name is not None else None
            if hit is None:
                members = [c for c, x in enumerate(items) if x.shape == shape]
                pos = np.full(len(items), -1, dtype=np.intp)
                pos[members] = np.arange(len(members))
                hit = (np.stack([items[c] for c in members]), pos)
            self._stacks[key] = hit
            if name is not None:
                self._named_stacks[(name, shape)] = hit
        big, pos = hit
        at = pos[idx]
        if (at < 0).any():  # not one shape after all: row by row
            return np.stack([items[c] for c in idx.tolist()])
        out: npt.NDArray[Any] = big[at]
        return out

    def _patched(self, name: str, shape: tuple[int, ...],
                 items: list[npt.NDArray[Any]]) -> _Stack | None:
        """The previous engine's stack of this list and shape with the rows of the
        creatures that changed replaced (a creature that is the same object has the same
        arrays); None when there is none, or a changed creature's array changed shape."""
        before = self._before_stacks.get((name, shape))
        if before is None:
            return None
        big, pos = before
        if any((items[c].shape == shape) != (pos[c] >= 0) for c in self._moved):
            return None
        big = big.copy()  # the previous engine's stack stays as it was
        for c in self._moved:
            if pos[c] >= 0:
                big[pos[c]] = items[c]
        return big, pos

    @functools.cached_property
    def _squares_short(self) -> BoolArray | None:
        """Per creature: whether its squares do not hold its whole space (a token of 1.4
        squares: one square, in a wider space); None when no creature's do not."""
        short = [k for k, lay in enumerate(self._layouts) if not lay.squares_hold_space]
        if not short:
            return None
        out = np.zeros(len(self._layouts), dtype=bool)
        out[short] = True
        return out

    def _walled_off(self, a: IntArray, t: IntArray) -> BoolArray | None:
        """Per row: whether its two spaces are walled off from each other (geometry.rooms),
        so that every line between them is stopped by a plain wall; None when no row is."""
        if len(a) == 0:
            return None
        room = self._room
        if room is None and rooms.rooms(self.tracer, len(a) >= rooms.BUILD_PAIRS) is None:
            # No rooms (too many walls, or not built for a move's few pairs): no space is
            # read (1,000 creatures' boxes are a fifth of a millisecond).
            return None
        if room is None:
            # Each creature's space with every square its lines start from (a token of 1.5
            # squares draws its lines from two).
            reach = np.array([lay.reach_box for lay in self._layouts],
                             dtype=np.float64).reshape(-1, 4)
            room = self._room = rooms.rooms_of(self.tracer, openings.box_rings(reach, INSET_PX),
                                               len(a))
        if (room == rooms.NO_ROOM).all():
            return None
        off = rooms.walled_off(room[a], room[t])
        return off if off.any() else None

    #: Rows a call asks about from which `_sealed_rows` first looks for one plain wall
    #: sealing their pairs (fewer: a move's pairs near the mover, traced as they are).
    SEAL_FIRST_ROWS: ClassVar[int] = 64

    def _sealed_rows(self, a: IntArray, t: IntArray,
                     skip: BoolArray | None) -> BoolArray | None:
        """Per row: whether one plain wall (or a run of them end to end) crosses every
        line between the corners of the two creatures' `reach_box`es (kernel.
        sealed_blocks), so that it stops every line between their spaces: the row is
        total and no line of it is planned or traced. For a whole table, a wall plain
        but for a band holding both creatures whole counts too (openings.banded_walk),
        and the pairs so sealed are kept for the exact test to read back. None when no
        row is. The rows of `skip` are not looked at.

        A creature walking across a big map has a thousand rows, nearly all sealed so:
        the wall that sealed a pair at the last step is tried first, and seals most of
        them again (a walking step at 1,000 creatures: the planning, tracing and reading
        of those rows was most of its work)."""
        tr = self.tracer
        if len(a) < self.SEAL_FIRST_ROWS or not (tr.wall_plain.any()
                                                 or openings.banded_plain(tr).any()):
            return None
        todo = np.ones(len(a), dtype=bool) if skip is None else ~skip
        n = len(self.cs)
        lo, hi = np.minimum(a, t), np.maximum(a, t)
        pair, back = np.unique((lo * n + hi)[todo], return_inverse=True)
        if len(pair) == 0:
            return None
        who, inverse = np.unique(np.concatenate([pair // n, pair % n]), return_inverse=True)
        layouts = self._layouts
        boxes = np.array([layouts[k].reach_box for k in who.tolist()],
                         dtype=np.float64).reshape(-1, 4)
        rings = openings.box_rings(boxes, 0.0)
        inverse = inverse.reshape(2, -1)

        plain = np.flatnonzero(tr.wall_plain)

        def sealed(ra: FloatArray, rt: FloatArray, which: IntArray = plain) -> BoolArray:
            found = kernel.sealed_blocks(ra, rt, tr.wall_xy, which)
            # Boxes that touch or overlap (a rider on its mount, creatures side by side
            # across a wall's end) are left to the tracer, as geometry.openings leaves such
            # rings (a ring's first and third corners are its box's).
            ba, bt = ra[:, 0], rt[:, 0]
            ea, et = ra[:, 2], rt[:, 2]
            out: BoolArray = found & ((ba[:, 0] > et[:, 0]) | (bt[:, 0] > ea[:, 0])
                                      | (ba[:, 1] > et[:, 1]) | (bt[:, 1] > ea[:, 1]))
            return out

        # (Kept with the walls for a move's few pairs: a token moved back where it stood
        # reads them back.)
        ra, rt = rings[inverse[0]], rings[inverse[1]]
        found = openings.sealed_known(tr, ra, rt, sealed)
        left = np.flatnonzero(~found)
        if len(left) >= openings.BANDED_MIN_PAIRS:
            # A whole table's pairs: walls plain but for a band holding both creatures
            # whole seal them too (geometry.openings.banded_walk).
            ra_left, rt_left = ra[left], rt[left]
            found[left] = banded = openings.banded_walk(
                tr, who[inverse[0][left]], who[inverse[1][left]], plain,
                lambda rows, which: sealed(ra_left[rows], rt_left[rows], which))
            # A move's pairs are too few for that walk: its rows of these pairs are traced,
            # and the exact test that follows reads the answer kept here, as it reads its
            # own for the pairs it searched (`_through_openings`' spaces and heights).
            openings.remember_no_line(tr, *self._loe_pairs(who[inverse[0][left[banded]]],
                                                           who[inverse[1][left[banded]]]))
        if not found.any():
            return None
        out = np.zeros(len(a), dtype=bool)
        out[np.flatnonzero(todo)] = found[back.reshape(-1)]
        return out

    def _boxes(self, idx: IntArray) -> FloatArray:
        """The spaces (x0, y0, x1, y1) of these creatures."""
        return take_rows(self._space_arr, idx)

    def _steps(self, a: IntArray, t: IntArray) -> tuple[npt.NDArray[np.int64],
                                                        npt.NDArray[np.int64]]:
        """Grid steps across and down between row-paired creatures' spaces."""
        return grid_steps_many(self._boxes(a), self._boxes(t), self.grid.size)

    def _vsteps(self, a: IntArray, t: IntArray) -> npt.NDArray[np.int64]:
        """Vertical grid steps between row-paired creatures' cubes."""
        return vertical_steps_many(self._elev[a], self._side[a], self._elev[t], self._side[t])

    def _adjacent(self, a: int, t: int) -> bool:
        """Spaces that touch or overlap, in three dimensions."""
        if not adjacent(self.spaces[a], self.spaces[t], self.grid):
            return False
        # Cubes touch or overlap vertically (one vertical step or none).
        ea, et = float(self._elev[a]), float(self._elev[t])
        gap = max(et - (ea + float(self._side[a])), ea - (et + float(self._side[t])))
        return gap / FEET_PER_SQUARE + 1e-9 < 1

    # -- line construction --------------------------------------------------------------

    def _corner_probes(self, plan: _Plan, a: int, t: int, kind: int, big: bool) -> None:
        if big:
            # Each side picks one of its own squares: the lines run between that square's
            # corners, each a hair inside that square.
            for tsq in self.squares[t]:
                tc = corners(tsq)
                for asq in self.squares[a]:
                    for o in corners(asq):
                        plan.probe(a, t, kind, o[None, :], asq, tc, tsq, tsq)
        else:
            tc = corners(self.spaces[t])
            for o in corners(self.spaces[a]):
                plan.probe(a, t, kind, o[None, :], self.spaces[a], tc, self.spaces[t],
                           self.spaces[t])

    def _plan_row(self, plan: _Plan, a: int, t: int, mode: AttackMode) -> None:
        plan.begin_row()
        if mode is AttackMode.RANGED:
            self._corner_probes(plan, a, t, RANGED_LINE, self.options.big_creatures_ranged)
            return
        if mode is AttackMode.MELEE and self._adjacent(a, t):
            for i, j in zip(*adjacent_pairs(self.squares[a], self.squares[t], self.grid),
                            strict=True):
                asq, tsq = self.squares[a][i], self.squares[t][j]
                plan.probe(a, t, ADJACENT_LINE, corners(asq), asq, corners(tsq), tsq, tsq)
            if plan.row_probe_start[-1] < len(plan.probe_start):
                return
        self._corner_probes(plan, a, t, REACH_LINE, True)

    # -- classification ----------------------------------------------------------------

    def _components(self, hits: LineHits, att: IntArray, tgt: IntArray,
                    starts: FloatArray, ends: FloatArray) -> dict[str, BoolArray]:
        """What each directed line (a traced line read from its attacker's end) meets, before
        any attack mode's rule: per line booleans, and per hit masks of what counted."""
        tr = self.tracer
        n = hits.n
        wl, wi = hits.wall_line, hits.wall_idx
        h_solid, h_low, h_improved, h_partial = wall_roles_3d(tr, wi, wl, att, tgt, starts,
                                                             ends)
        limited = tr.wall_limited[wi]
        # A wall lower than the sheet of sight gives cover, never total; a limited (terrain)
        # wall gives nothing alone, and one the sight passes over is not a second one.
        h_partial &= ~limited
        solid_full = tr.per_line_any(wl, h_solid & ~limited, n)
        lim_blocked = limited_blocked(tr, wl, wi, h_solid, starts, ends, n)
        h_low_active = h_low & self._low_active(wl, wi, att, tgt, h_low)
        rkind = np.array([tr.region_kind[r] for r in hits.region_idx], dtype=object)
        rl = hits.region_line
        cl, ci = hits.creature_line, hits.creature_idx
        h_creature = (ci != att[cl]) & (ci != tgt[cl]) & creature_hits(
            tr, hits, att, tgt, starts, ends)
        if self._partner is not None:
            # A rider and its mount never stand in each other's way.
            h_creature &= (ci != self._partner[att[cl]]) & (ci != self._partner[tgt[cl]])
        return {
            "solid": solid_full | lim_blocked,
            "low": tr.per_line_any(wl, h_low_active, n),
            "partial": tr.per_line_any(wl, h_partial, n),
            "improved_wall": tr.per_line_any(wl, h_improved, n),
            "block_reg": tr.per_line_any(rl, rkind == RegionKind.BLOCKING, n),
            "cover_reg": tr.per_line_any(rl, rkind == RegionKind.COVER, n),
            "impr_reg": tr.per_line_any(rl, rkind == RegionKind.IMPROVED, n),
            "creature": tr.per_line_any(cl, h_creature, n),
            "h_walls": ((h_solid & (~limited | lim_blocked[wl])) | h_low_active | h_improved
                        | h_partial),
            "h_creature": h_creature,
            "h_blocking_region": rkind == RegionKind.BLOCKING,
        }

    def _level_table(self, comps: dict[str, BoolArray]) -> npt.NDArray[np.int8]:
        """Per directed line and line kind (RANGED_LINE, REACH_LINE, ADJACENT_LINE): its
        level plus 8 times what it is worth when its corner is only partly blocked."""
        # Worked out per directed line for each of the three line kinds, then read once per
        # virtual line: there are several virtual lines per directed line.
        n = len(comps["solid"])
        blocked = comps["solid"] | comps["block_reg"]
        # A wall the sight passes over in part (partial) gives cover in every mode, adjacent
        # melee included ("attraversa un muro"), and without the low obstacle's range.
        low, improved_wall = comps["low"] | comps["partial"], comps["improved_wall"]
        cover_any = comps["cover_reg"] | low
        improved_any = improved_wall | comps["impr_reg"]
        # Per directed line and kind: level + 8 * partly (both 0..4), read back with one
        # gather at 3 * line + kind.
        table = np.empty((n, 3), dtype=np.int8)
        for k in (RANGED_LINE, REACH_LINE, ADJACENT_LINE):
            adj = k == ADJACENT_LINE
            soft_ok = k == RANGED_LINE or (k == REACH_LINE and self.options.soft_cover_vs_reach)
            # Each later rule overrides the one before: the largest that applies.
            base = np.where(improved_wall if adj else improved_any, IMPROVED,
                            np.where(low if adj else cover_any, COVER,
                                     np.where(comps["creature"] if soft_ok else False,
                                              SOFT, NONE))).astype(np.int8)
            # A blocked line still tells what else it passed (an arrow slit before the wall
            # behind it): a partly blocked corner is worth at least that, never less.
            table[:, k] = np.where(blocked, TOTAL + 8 * np.maximum(base, COVER), base * 9)
        return table

    def _probe_levels(self, level: npt.NDArray[np.int8], partly: npt.NDArray[np.int8],
                      pstart: IntArray) -> npt.NDArray[np.int8]:
        """Each probe's level from its lines' (`_probe_levels`; a rule that weighs a
        corner's lines otherwise, by counting them, says so here)."""
        return _probe_levels(level, partly, pstart)

    @staticmethod
    def _levels(table: npt.NDArray[np.int8], at: IntArray, kind: npt.NDArray[np.int8],
                ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int8]]:
        """Per virtual line (reading directed line at[v] under its kind's rule, from
        `_level_table`): its level, and what it is worth when its corner is only partly
        blocked."""
        flat = at * 3
        flat += kind
        both = np.take(table.reshape(-1), flat)
        level: npt.NDArray[np.int8] = both & 7
        partly: npt.NDArray[np.int8] = both >> 3
        return level, partly

    def _wall_roles(self, walls: IntArray,
                    targets: IntArray) -> tuple[BoolArray, BoolArray, BoolArray]:
        return wall_roles(self.tracer, self._tall, self._elev, walls, targets)

    def visible_fraction(self, a: int, t: int, origin: tuple[float, float],
                         box: Box) -> float:
        """How much of the target's square (box) no obstacle hides from the attacker's chosen
        corner: the box minus the shadows that walls, low obstacles in range and cover or
        blocking terrain cast from that point. Creatures and limited walls cast none. A wall
        with a height band casts its shadow only over the stretch of the target's square
        where the sight between the two creatures meets the band (as the lines do), so a
        flyer seen over a low wall is not hidden by it."""
        tr = self.tracer
        target = shapely.box(*box)
        # From the point the lines start at, a hair inside the attacker's space.
        p = inset(np.array([origin], dtype=np.float64), self.spaces[a])[0]
        corners_far = np.asarray(target.exterior.coords, dtype=np.float64)
        reach = 2.0 * float(np.max(np.hypot(*(corners_far - p).T))) + 1.0
        segments: list[FloatArray] = []
        banded: list[npt.NDArray[np.object_]] = []
        if len(tr.walls):
            idx = np.arange(len(tr.walls))
            solid, low, _ = self._wall_roles(idx, np.full(len(idx), t))
            facing = tr.facing(idx, np.repeat(p[None, :], len(idx), axis=0))
            low_ok = np.zeros(len(idx), dtype=bool)
            if low.any():
                li = idx[low]
                n = len(li)
                low_ok[li] = self._low_active(np.arange(n), li, np.full(n, a), np.full(n, t),
                                              np.ones(n, dtype=bool))
            flat = ~tr.wall_banded
            keep = facing & flat & ((solid & ~tr.wall_limited) | low_ok)
            segments.append(tr.wall_xy[keep])
            if (facing & ~flat).any():
                banded.append(self._banded_shadows(a, t, p, idx[facing & ~flat], reach))
        if any(kind in (RegionKind.BLOCKING, RegionKind.COVER) for kind in tr.region_kind):
            # Only sides meeting the hull of the point and the square can shade the square
            # (found in each region's side index, built once per region).
            hull = shapely.convex_hull(shapely.union(target, shapely.Point(p)))
            for k, kind in enumerate(tr.region_kind):
                if kind in (RegionKind.BLOCKING, RegionKind.COVER):
                    segments.append(kernel.polygon_sides_meeting(tr.region_polys[k], hull))
        segs = np.concatenate(segments) if segments else np.empty((0, 4))
        parts = list(banded)
        if len(segs):
            parts.append(shapely.polygons(shadow_polygons(p, segs[:, 0:2], segs[:, 2:4],
                                                          reach)))
        if not parts:
            return 1.0
        shadows = repaired(np.concatenate(parts))
        shadows = shadows[shapely.intersects(shadows, target)]
        # A region counts by what of it lies on the square: its part there, once per
        # (region, square), instead of all its sides in every pair's union.
        regions = [self._region_on(k, box) for k, kind in enumerate(tr.region_kind)
                   if kind in (RegionKind.BLOCKING, RegionKind.COVER)]
        if len(shadows) == 0 and not regions:
            return 1.0
        hidden = shapely.union_all(np.concatenate([shadows, np.array(regions, dtype=object)]))
        hidden_area = float(shapely.area(shapely.intersection(hidden, target)))
        return 1.0 - hidden_area / float(target.area)

    def measure_visible(self, requests: Sequence[tuple[int, int, tuple[float, float], Box]],
                        ) -> None:
        """Measure the visible fractions of these (attacker, target, corner, target square)
        requests all at once, for `visible_of` to read back."""
        todo = [q for q in dict.fromkeys(requests) if q not in self._visible]
        if not todo or self.reference_shadows:
            return
        values = self.visible_fractions(
            np.array([q[0] for q in todo], dtype=np.intp),
            np.array([q[1] for q in todo], dtype=np.intp),
            np.array([q[2] for q in todo], dtype=np.float64).reshape(-1, 2),
            np.array([q[3] for q in todo], dtype=np.float64).reshape(-1, 4))
        self._visible.update(zip(todo, values.tolist(), strict=True))

    def visible_of(self, a: int, t: int, origin: tuple[float, float], box: Box) -> float:
        """`visible_fraction`, measured with the batch `measure_visible` ran (or now)."""
        if self.reference_shadows:
            return self.visible_fraction(a, t, origin, box)
        key = (a, t, origin, box)
        if key not in self._visible:
            self.measure_visible([key])
        return self._visible[key]

    @functools.cached_property
    def _visible_kept(self) -> kept.Kept:
        """This snapshot's walls' table of visible fractions (`rulesets.kept`): per pair of
        creature objects, per (corner, target square), the fraction."""
        return kept.table(self.scene, _VISIBLE_FRACTIONS, self.options)

    def visible_fractions(self, a: IntArray, t: IntArray, origins: FloatArray,
                          boxes: FloatArray) -> FloatArray:
        """`visible_fraction` of many (attacker, target, corner, target square) requests at
        once (`measure_visible_fractions`). A request an earlier snapshot of these walls
        measured for the same two creature objects is read back: the fraction depends on
        the two creatures (their spaces and heights), the walls, the terrain and the
        options, never on another creature. After a move, the pairs recomputed because the
        mover stood in their way (soft cover) measure nothing again."""
        n = len(a)
        if n == 0:
            return np.ones(0)
        table = self._visible_kept
        found, held = table.known(a, t)
        rows = np.ascontiguousarray(np.column_stack([origins, boxes]), dtype=np.float64)
        keys = cast("list[bytes]", rows.view(np.dtype((np.void, 6 * 8))).ravel().tolist())
        out: FloatArray = np.full(n, np.nan)
        if found.any():
            out[:] = [np.nan if h is None else h.get(k, np.nan)
                      for h, k in zip(held, keys, strict=True)]
        todo = np.flatnonzero(np.isnan(out))
        if len(todo) == 0:
            return out
        out[todo] = self.measure_visible_fractions(a[todo], t[todo], origins[todo],
                                                   boxes[todo])
        # Each pair's table of fractions: the one held, or a new one (one per pair, however
        # many of its requests are new).
        new: dict[tuple[int, int], dict[bytes, float]] = {}
        # (The pairs as lists: a numpy scalar read per request was most of this loop.)
        pair_of = zip(a[todo].tolist(), t[todo].tolist(), strict=True)
        for k, value, pair in zip(todo.tolist(), out[todo].tolist(), pair_of, strict=True):
            h = held[k]
            if h is None:
                h = new.setdefault(pair, {})
            h[keys[k]] = value
        if new:
            pairs = np.array(list(new), dtype=np.intp).reshape(-1, 2)
            table.remember(pairs[:, 0], pairs[:, 1], list(new.values()))
        return out

    def measure_visible_fractions(self, a: IntArray, t: IntArray, origins: FloatArray,
                                  boxes: FloatArray) -> FloatArray:
        """`visible_fraction` of many (attacker, target, corner, target square) requests at
        once, equal to it request by request (to rounding): the walls that can shade each
        square are found in the scene's wall index (those meeting the hull of the point and
        the square: any other's shadow misses it), and the hidden area is measured exactly
        by `rulesets.shadows.hidden_areas` (whole-array numpy, no polygon overlay), a wall
        with a height band that counts over a stretch of the way only as a shadow that
        stops at a far edge. The few requests it does not cover (the point inside a region
        or on a wall, or nearly on the square's border) unite their Shapely shadows as
        `visible_fraction` does, in one GEOS call for all of them."""
        tr = self.tracer
        n = len(a)
        out: FloatArray = np.ones(n)
        if n == 0:
            return out
        a, t = a.astype(np.intp), t.astype(np.intp)
        p = inset_many(origins[:, None, :], self._boxes(a))[:, 0, :]
        corners4 = corners_many(boxes)
        reach = 2.0 * np.max(np.hypot(corners4[..., 0] - p[:, None, 0],
                                      corners4[..., 1] - p[:, None, 1]), axis=1) + 1.0
        hull = hulls(p, corners4)
        # Segments casting a shadow, as (request, order within the request, segment):
        # plain walls' then region sides' (visible_fraction's order); banded walls apart.
        req: list[IntArray] = []
        key: list[IntArray] = []
        segs: list[FloatArray] = []
        groups: list[IntArray] = []
        # How far each segment's shadow reaches, as a scale from p (inf: all the way).
        fars: list[FloatArray] = []
        # Rows (request, wall, s0, s1) casting a truncated shadow with a far edge.
        banded_at: tuple[IntArray, IntArray, FloatArray, FloatArray] | None = None
        n_walls = len(tr.walls)
        if n_walls:
            _, tree = wall_lines(tr.walls, tr.wall_xy)
            r, w = meeting(tree, hull, (p, corners4, tr.wall_xy))
            if len(r):
                solid, low, _ = self._wall_roles(w, t[r])
                facing = tr.facing(w, take_rows(p, r))
                low_ok = np.zeros(len(w), dtype=bool)
                if low.any():
                    li = np.flatnonzero(low)
                    low_ok[li] = self._low_active(np.arange(len(li)), w[li], a[r[li]],
                                                  t[r[li]], np.ones(len(li), dtype=bool))
                flat = ~tr.wall_banded[w]
                keep = facing & flat & ((solid & ~tr.wall_limited[w]) | low_ok)
                banded = np.flatnonzero(facing & ~flat)
                if len(banded):
                    # A band counting over the whole way casts the whole shadow, as a wall
                    # without one does; one counting nowhere casts none. Only a stretch of
                    # the way (creatures at different heights) truncates it.
                    s0, s1 = self._band_stretches_many(a[r[banded]], t[r[banded]], w[banded])
                    keep[banded[(s0 <= 0) & (s1 >= 1)]] = True
                    cut = (s1 > s0) & ((s0 > 0) | (s1 < 1))
                    part = banded[cut]
                    if len(part):
                        # A truncated shadow is the shadow of its near edge (the wall
                        # scaled from p by 1 / s1), stopping at its far edge (scaled by
                        # 1 / s0) unless that is beyond reach: the exact sum takes it as
                        # that segment. The union (requests the sum leaves) takes the
                        # ones with a far edge from banded_at.
                        rp, xy = r[part], tr.wall_xy[w[part]]
                        opened = open_ended(p[rp], xy[:, 0:2], xy[:, 2:4], s0[cut],
                                            reach[rp])
                        na, nb = near_edges(p[rp], xy[:, 0:2], xy[:, 2:4], s1[cut])
                        req.append(rp)
                        key.append(n_walls + w[part])
                        segs.append(np.concatenate([na, nb], axis=1))
                        groups.append(np.full(len(part), -1, dtype=np.intp))
                        with np.errstate(divide="ignore"):
                            fars.append(np.where(opened, np.inf, s1[cut] / s0[cut]))
                        closed = ~opened
                        if closed.any():
                            banded_at = (rp[closed], w[part[closed]], s0[cut][closed],
                                         s1[cut][closed])
                req.append(r[keep])
                key.append(n_walls + w[keep])
                segs.append(take_rows(tr.wall_xy, w[keep]))
                groups.append(np.full(int(keep.sum()), -1, dtype=np.intp))
                fars.append(np.full(int(keep.sum()), np.inf))
        shading = [k for k, kind in enumerate(tr.region_kind)
                   if kind in (RegionKind.BLOCKING, RegionKind.COVER)]
        for order, k in enumerate(shading):
            rs, sides = kernel.polygon_sides_meeting_many(tr.region_polys[k], hull)
            req.append(rs)
            key.append(2 * n_walls + order * (1 << 40) + np.arange(len(rs), dtype=np.intp))
            segs.append(sides)
            groups.append(np.full(len(rs), order, dtype=np.intp))
            fars.append(np.full(len(rs), np.inf))
        seg_req = np.concatenate(req) if req else np.empty(0, dtype=np.intp)
        seg_key = np.concatenate(key) if key else np.empty(0, dtype=np.intp)
        seg = np.concatenate(segs) if segs else np.empty((0, 4))
        seg_group = np.concatenate(groups) if groups else np.empty(0, dtype=np.intp)
        seg_far = np.concatenate(fars) if fars else np.empty(0)
        # Which requests the exact sum cannot take: the point inside (or on) a region
        # whose part of the square counts whole, or on a segment.
        slow = np.zeros(n, dtype=bool)
        if shading:
            points = shapely.points(p)
            for k in shading:
                slow |= shapely.intersects(tr.region_polys[k], points)
        if len(seg):
            q = take_rows(p, seg_req)
            near = kernel.point_segment_distance(q[:, 0], q[:, 1], seg[:, 0], seg[:, 1],
                                                 seg[:, 2], seg[:, 3]) <= 1e-6
            slow[seg_req[near]] = True
        # A point (nearly) on the square's border sees it across (nearly) half a turn: the
        # angular sum is ill-conditioned there, the union settles it.
        v = corners4 - p[:, None, :]
        mid = kernel.over_points(np.add, v) / v.shape[1]
        cos = np.einsum("rkj,rj->rk", v, mid) / np.maximum(
            np.hypot(v[..., 0], v[..., 1]) * np.hypot(mid[:, 0], mid[:, 1])[:, None], 1e-300)
        slow |= cos.min(axis=1) < 0.5
        fast = ~slow
        if len(seg) and fast.any():
            on = fast[seg_req]
            # Of a region's sides, those whose outer face the point sees are enough (the
            # point is outside the region on these requests).
            for order, k in enumerate(shading):
                mine = np.flatnonzero(on & (seg_group == order))
                on[mine] = front_sides(tr.region_polys[k], seg_req[mine], seg[mine], p)
            renum = np.cumsum(fast) - 1
            sel = np.flatnonzero(fast)
            sr = renum[seg_req[on]]
            by_req = np.argsort(sr, kind="stable")
            s = take_rows(seg, np.flatnonzero(on)[by_req])
            hidden = hidden_areas(take_rows(p, sel), take_rows(corners4, sel), sr[by_req],
                                  s[:, 0:2], s[:, 2:4], np.ones(len(s)), np.ones(1),
                                  seg_group[on][by_req], seg_far[on][by_req])[:, 0]
            area = (boxes[sel, 2] - boxes[sel, 0]) * (boxes[sel, 3] - boxes[sel, 1])
            out[sel] = 1.0 - hidden / area
        if slow.any():
            # (The shadows that stop short are united from banded_at, not as segments.)
            plain = np.isinf(seg_far)
            out[slow] = self._visible_by_union(a, t, p, boxes, reach, slow, seg_req[plain],
                                               seg_key[plain], seg[plain], banded_at,
                                               len(shading) > 0)
        return out

    def _visible_by_union(self, a: IntArray, t: IntArray, p: FloatArray, boxes: FloatArray,
                          reach: FloatArray, wanted: BoolArray, seg_req: IntArray,
                          seg_key: IntArray, seg: FloatArray,
                          banded_at: tuple[IntArray, IntArray, FloatArray, FloatArray] | None,
                          regions: bool) -> FloatArray:
        """The visible fraction of the wanted requests as `visible_fraction` computes it
        (the union of the Shapely shadows and region parts), for all of them at once."""
        tr = self.tracer
        n = len(a)
        sel = np.flatnonzero(wanted)
        # (Only the wanted requests' squares are read.)
        targets = np.empty(n, dtype=object)
        targets[sel] = shapely.box(boxes[sel, 0], boxes[sel, 1], boxes[sel, 2], boxes[sel, 3])
        on = wanted[seg_req]
        s = seg[on]
        all_req = [seg_req[on]]
        all_key = [seg_key[on]]
        geoms = [shapely.polygons(shadow_polygons(p[all_req[0]], s[:, 0:2], s[:, 2:4],
                                                  reach[all_req[0]][:, None]))]
        if banded_at is not None:
            br, bw, b0, b1 = banded_at
            pick = wanted[br]
            all_req.append(br[pick])
            all_key.append(bw[pick])
            geoms.append(self._truncated(p, br[pick], bw[pick], b0[pick], b1[pick], reach))
        req, key, shadows = (np.concatenate(all_req), np.concatenate(all_key),
                             np.concatenate(geoms))
        if len(shadows):
            shadows = repaired(shadows)
            hits = shapely.intersects(shadows, targets[req])
            req, key, shadows = req[hits], key[hits], shadows[hits]
        if regions:
            # Each region's part on each wanted square, after the shadows.
            uniq, back = np.unique(boxes[sel], axis=0, return_inverse=True)
            squares_u = shapely.box(uniq[:, 0], uniq[:, 1], uniq[:, 2], uniq[:, 3])
            order = 0
            for k, kind in enumerate(tr.region_kind):
                if kind not in (RegionKind.BLOCKING, RegionKind.COVER):
                    continue
                parts = shapely.intersection(tr.region_polys[k], squares_u)[back.reshape(-1)]
                req = np.concatenate([req, sel])
                key = np.concatenate([key, np.full(len(sel), 1 << 62, dtype=np.intp) + order])
                shadows = np.concatenate([shadows, parts])
                order += 1
        result: FloatArray = np.ones(len(sel))
        some = np.zeros(n, dtype=bool)
        some[req] = True
        if not some.any():
            return result
        renum = np.cumsum(some) - 1
        hidden = grouped_union(shadows, renum[req], key, int(some.sum()))
        united = np.flatnonzero(some)
        hidden_area = shapely.area(shapely.intersection(hidden, targets[united]))
        value = 1.0 - hidden_area / shapely.area(targets[united])
        result[np.searchsorted(sel, united)] = value
        return result

    def _banded_shadows_many(self, a: IntArray, t: IntArray, p: FloatArray, r: IntArray,
                             walls: IntArray, reach: FloatArray,
                             ) -> tuple[IntArray, IntArray, npt.NDArray[np.object_]]:
        """`_banded_shadows` for row-paired (attacker, target, request, wall) rows: the
        requests and walls that cast one, and the shadows."""
        s0, s1 = self._band_stretches_many(a, t, walls)
        some = s1 > s0
        return r[some], walls[some], self._truncated(p, r[some], walls[some], s0[some],
                                                     s1[some], reach)

    def _truncated(self, p: FloatArray, r: IntArray, walls: IntArray, s0: FloatArray,
                   s1: FloatArray, reach: FloatArray) -> npt.NDArray[np.object_]:
        """The shadows walls cast from p[r] over the stretches [s0, s1] of the way
        (`_band_stretches_many`, s1 > s0)."""
        xy = self.tracer.wall_xy[walls]
        return truncated_shadows(p[r], xy[:, 0:2], xy[:, 2:4], s0, s1, reach[r])

    def _band_stretches_many(self, a: IntArray, t: IntArray, walls: IntArray
                             ) -> tuple[FloatArray, FloatArray]:
        """For row-paired (attacker, target, wall with a height band) rows: the stretch
        [s0, s1] of the way from the attacker where the wall's shadow counts
        (`_banded_shadows`); none where s1 <= s0, the wall's whole shadow where it is
        [0, 1]."""
        tr = self.tracer
        ea, ha = self._elev[a], self._tall[a]
        et, ht = self._elev[t], self._tall[t]
        bottom, top = tr.wall_bottom[walls], tr.wall_top[walls]
        m0, m1, w0, w1 = band_stretches(bottom, top, ea, ha, et, ht)
        b = np.where(np.isnan(bottom), -np.inf, bottom)
        tp = np.where(np.isnan(top), np.inf, top)
        hidden = np.minimum(tp, et + ht) - np.maximum(b, et)
        by_height = hidden <= ht / 2
        code = tr.wall_cover_code[walls]
        limited = tr.wall_limited[walls]
        low = ((code == LOW_CODE) | by_height) & (hidden > 0)
        active = np.zeros(len(walls), dtype=bool)
        if low.any():
            k = int(low.sum())
            active[low] = self._low_active(np.arange(k), walls[low], a[low], t[low],
                                           np.ones(k, dtype=bool))
        solid_code = code == SOLID_CODE
        whole_sheet = solid_code & ~limited
        s0 = np.where(whole_sheet, w0, 1.0)
        s1 = np.where(whole_sheet, w1, -1.0)
        meets_counts = (solid_code & ~by_height & ~limited) | (low & active)
        s0 = np.where(meets_counts, m0, s0)
        s1 = np.where(meets_counts, m1, s1)
        return s0, s1


    def _region_on(self, k: int, box: Box) -> shapely.Geometry:
        """Region k's part inside the square `box` (cached per engine)."""
        held = self._regions_on.get((k, box))
        if held is None:
            held = shapely.intersection(self.tracer.region_polys[k], shapely.box(*box))
            self._regions_on[(k, box)] = held
        return held

    def _banded_shadows(self, a: int, t: int, p: FloatArray, walls: IntArray,
                        reach: float) -> npt.NDArray[np.object_]:
        """The shadows walls with a height band cast from p for this pair, each only over
        the stretch of the way (from p) where the sight meets the band and the band counts,
        as the line rule classifies it (rulesets.obstacles.wall_roles_3d): a solid wall where
        it meets the sheet; a wall low for the target (band hiding at most half of it) where
        it meets the sheet if the low obstacle is in range, else only where it spans the
        whole sheet; limited walls never."""
        n = len(walls)
        if n == 0:
            return np.empty(0, dtype=object)
        # One request, so every row is this pair's: the row-paired version, broadcast.
        _, _, shadows = self._banded_shadows_many(
            np.full(n, a, dtype=np.intp), np.full(n, t, dtype=np.intp),
            np.asarray(p, dtype=np.float64).reshape(1, 2), np.zeros(n, dtype=np.intp), walls,
            np.array([reach], dtype=np.float64))
        return shadows

    def _low_active(self, wl: IntArray, wi: IntArray, att: IntArray, tgt: IntArray,
                    h_low: BoolArray) -> BoolArray:
        """Per wall hit: a low obstacle counts only within 30 ft (of the attacker, or of the
        target by option), and not when the attacker is closer to it than the target."""
        active = np.zeros(len(wl), dtype=bool)
        idx = np.nonzero(h_low)[0]
        if idx.size == 0:
            return active
        lines = wl[idx]
        da, dt = self._distances(att[lines], tgt[lines], wi[idx])
        near = da if self.options.low_obstacle_range_from == "attacker" else dt
        active[idx] = (near <= LOW_OBSTACLE_RANGE_FT + 1e-9) & ~(da < dt - 1e-9)
        return active

    def _distances(self, att: IntArray, tgt: IntArray,
                   walls: IntArray) -> tuple[FloatArray, FloatArray]:
        """Feet from each attacker's and each target's space to each (paired) wall, counted
        in squares on the grid (diagonals alternating 5/10 ft: "entro 9 metri (6
        quadretti)", docs/rulesets.md dnd35 choice 6), exact up to LOW_OBSTACLE_RANGE_FT
        and beyond it only a bound from below that is itself beyond it (all `_low_active`
        can tell apart: a wall out of range for one end never counts, and the other end, in
        range, is then the closer). Every distinct (creature, wall) pair is measured once,
        however many lines cross that wall (attackers' and targets' pairs share walls)."""
        tr = self.tracer
        n_walls = len(tr.walls)
        keys_a, keys_t = att * n_walls + walls, tgt * n_walls + walls
        steps = int(LOW_OBSTACLE_RANGE_FT // FEET_PER_SQUARE) + 1
        slots = len(self.cs) * n_walls
        if slots > _DENSE_DISTANCE_SLOTS:
            # A big map (1,000 creatures x 20,000 walls: 20 million slots, 20 ms to mark
            # and scan for a few hundred keys): the distinct keys by sorting them.
            unique, back = np.unique(np.concatenate([keys_a, keys_t]), return_inverse=True)
            feet = segment_grid_feet(tr.boxes[unique // n_walls], tr.wall_xy[unique % n_walls],
                                     self.grid.size, steps)
            back = back.reshape(-1)
            return feet[back[:len(keys_a)]], feet[back[len(keys_a):]]
        # The distinct keys by marking (keys are dense small integers), and each key's
        # distance read back from a table over every creature x wall slot, written only
        # at those keys (all that is read).
        mark = np.zeros(slots, dtype=bool)
        mark[keys_a] = True
        mark[keys_t] = True
        unique = np.flatnonzero(mark)
        uc, uw = unique // n_walls, unique % n_walls
        feet = segment_grid_feet(tr.boxes[uc], tr.wall_xy[uw], self.grid.size, steps)
        table = np.empty(len(mark), dtype=np.float64)
        table[unique] = feet
        return table[keys_a], table[keys_t]

    # -- evaluation --------------------------------------------------------------------

    def evaluate(self, rows: Sequence[tuple[int, int, AttackMode]],
                 want_lines: bool, want_probes: bool = True) -> list[PairFacts]:
        """Facts for each (attacker, target, mode) row, planned with whole-array operations:
        each unordered pair's lines (every corner of one creature's squares to every corner
        of the other's) are traced once, for all modes and both directions, and each row
        reads its probes from them. Rows of one-square creatures (nearly all) are planned
        all at once; the others row by row. `reference` gives the same facts. Without
        `want_probes`, rows at cover leave out which probes reached it (`PairFacts.best`,
        for rules that look closer at cover)."""
        if not rows:
            return []
        plan, ordered, order = self._planned(rows)
        facts = self._evaluate_plan(plan, ordered, want_lines, want_probes)
        if order is None:
            return facts
        out: list[PairFacts | None] = [None] * len(rows)
        for pos, i in enumerate(order.tolist()):
            out[i] = facts[pos]
        return [f for f in out if f is not None]

    def row_facts(self, rows: Sequence[tuple[int, int, AttackMode]],
                  cover_probes: bool = False, open_lines: bool = False) -> RowFacts:
        """`evaluate`'s level, adjacency and reach of each row, as arrays, for rules that
        read nothing more (no lines): the same planning and tracing, without an object per
        row. With `cover_probes`, also the probes that put each row at cover (`evaluate`'s
        `PairFacts.best`, read from the same trace), with their open lines counted if
        `open_lines`."""
        if not rows:
            empty = np.zeros(0, dtype=bool)
            return RowFacts(np.zeros(0, dtype=np.int8), empty, empty)
        a, t, code = self._row_arrays(rows)
        adjacent, in_reach = self._reach_facts(a, t, code)
        # Between one-square creatures a melee attack on a target it is not adjacent to
        # reads the same lines under the same rule as a reach attack (REACH_LINE probes
        # from each corner): each such pair is planned and traced once for both.
        simple = (self._k[a] == 4) & (self._k[t] == 4)
        planned = np.where(simple & (code == _MELEE_CODE) & ~adjacent, _REACH_CODE, code)
        # ...and a reach attack between them reads the very probes of the ranged attack,
        # only under the reach rule (creatures in the way count for ranged lines alone,
        # unless the option says otherwise): planned and traced as the ranged row, read
        # twice.
        by_reach = simple & (planned == _REACH_CODE)
        planned = np.where(by_reach, _RANGED_CODE, planned)
        n = len(self.cs)
        key = (a * n + t) * 3 + planned
        unique, back = np.unique(key, return_inverse=True)
        back = back.reshape(-1)
        pair = unique // 3
        planned_rows = Rows(pair // n, pair % n, (unique % 3).astype(np.int8))
        held: list[tuple[PlanArrays, _Traced, IntArray | None]] = []
        level, reach_level = self._row_levels(planned_rows, bool(by_reach.any()),
                                              held if cover_probes else None)
        out = level[back]
        if reach_level is not None:
            out = np.where(by_reach, reach_level[back], out)
        cover = None
        if cover_probes:
            # (Nothing planned: every row walled off, none at cover.)
            cover = self._cover_probes(out, back, *held[0], open_lines) if held else (
                CoverProbes(np.zeros(0, dtype=np.intp), np.zeros((0, 2)), np.zeros((0, 4)),
                            np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)))
        return RowFacts(out, adjacent, in_reach, cover)

    def _cover_probes(self, level: npt.NDArray[np.int8], back: IntArray, plan: PlanArrays,
                      traced: _Traced, order: IntArray | None,
                      open_lines: bool) -> CoverProbes:
        """The probes of the rows at cover (`level`, per row; row r was planned as row
        back[r] of the plan's rows, in the plan's place order[...] of it): those whose level
        is the row's (all of the row's when none is: a row raised through an opening), as
        `_evaluate_plan` gives them.

        A reach row planned as its ranged row (`row_facts`) reads the ranged probes here:
        the two rules differ only in whether a creature in the way makes a line soft, and a
        soft line is open, so which probes are at cover and which of their lines are open
        is the same under both (for this engine's `_level_table` and `_probe_levels`; a
        variant reading lines otherwise must not ask for these probes, as dnd5e does not).
        A row at cover always has a probe at cover (only total rows are raised through an
        opening, to OPEN_LEVEL): the fallback to all of its probes is `_evaluate_plan`'s,
        kept for a variant whose OPEN_LEVEL is cover."""
        rows = np.flatnonzero(level == COVER)
        u = back[rows]
        if order is not None:
            # (Rows walled off are in no plan, and never at cover: their places stay -1.)
            place = np.full(int(order.max(initial=-1)) + 1, -1, dtype=np.intp)
            place[order] = np.arange(len(order))
            u = place[u]
        rstart = plan.row_probe_start
        rend = np.append(rstart[1:], len(plan.probe_start))
        count = rend[u] - rstart[u]
        probe = np.repeat(rstart[u], count) + kernel.within_runs(count)
        owner = np.repeat(np.arange(len(rows)), count)
        tied = traced.probe_level[probe] == COVER
        reached = np.zeros(len(rows), dtype=bool)
        reached[owner[tied]] = True
        keep = tied | ~reached[owner]
        probe, owner = probe[keep], owner[keep]
        opened = np.full(len(probe), -1, dtype=np.intp)
        n_lines = opened
        if open_lines and len(probe):
            pstart = plan.probe_start
            n_lines = np.diff(np.append(pstart, len(plan.kind)))[probe]
            v = np.repeat(pstart[probe], n_lines) + kernel.within_runs(n_lines)
            opened = np.add.reduceat((traced.level[v] <= SOFT).astype(np.intp),
                                     np.cumsum(n_lines) - n_lines)
        return CoverProbes(rows[owner], plan.probe_origin[probe], plan.probe_box[probe],
                           opened, n_lines)

    def _row_levels(self, rows: Sequence[tuple[int, int, AttackMode]], reach_too: bool,
                    held: list[tuple[PlanArrays, _Traced, IntArray | None]] | None = None,
                    ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int8] | None]:
        """Each row's level, in the rows' order, and with `reach_too` also its level with
        its ranged lines read under the reach rule. `held`: where to put the plan, the
        trace and the order, for reading the probes again.

        Rows between spaces walled off from each other (geometry.rooms: in two rooms of
        the plain walls) are total, each of their lines stopped by a plain wall, and are
        neither planned nor traced."""
        a, t, code = self._row_arrays(rows)
        off = self._walled_off(a, t)
        sealed = self._sealed_rows(a, t, off)
        if sealed is not None:
            off = sealed if off is None else off | sealed
        if off is None:
            return self._traced_levels(rows, reach_too, held)
        live = np.flatnonzero(~off)
        level = np.full(len(a), TOTAL, dtype=np.int8)
        reach_level = level.copy() if reach_too else None
        if len(live):
            got, got_reach = self._traced_levels(Rows(a[live], t[live], code[live]),
                                                 reach_too, held, live)
            level[live] = got
            if reach_level is not None and got_reach is not None:
                reach_level[live] = got_reach
        return level, reach_level

    def _traced_levels(self, rows: Sequence[tuple[int, int, AttackMode]], reach_too: bool,
                       held: list[tuple[PlanArrays, _Traced, IntArray | None]] | None,
                       among: IntArray | None = None,
                       ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int8] | None]:
        """`_row_levels` of these rows, every one planned and traced. `among`: these rows
        are those rows of the caller's, whose numbering the order put in `held` is read in
        (`_cover_probes`)."""
        plan, _, order = self._planned(rows)
        traced = self._plan_levels(plan, False, reach_too)
        if held is not None:
            held.append((plan, traced, order if among is None else
                         among if order is None else among[order]))

        def in_order(level: npt.NDArray[np.int8]) -> npt.NDArray[np.int8]:
            level = level.astype(np.int8)
            if order is None:
                return level
            put = np.empty_like(level)
            put[order] = level
            return put

        reach = traced.row_level_reach
        return in_order(traced.row_level), None if reach is None else in_order(reach)

    def _planned(self, rows: Sequence[tuple[int, int, AttackMode]],
                 ) -> tuple[PlanArrays, Sequence[tuple[int, int, AttackMode]], IntArray | None]:
        """The plan of `rows`, the rows in the plan's order, and where each planned row came
        from (None: the rows' own order)."""
        # Nearly every row is between one-square creatures (shape _SIMPLE, planned first);
        # the others are sorted by shape and planned a run of one shape at a time.
        a, t, code = self._row_arrays(rows)
        simple = (self._k[a] == 4) & (self._k[t] == 4)
        simple_idx = np.flatnonzero(simple)
        others = np.flatnonzero(~simple)
        n_simple = len(simple_idx)
        segments: list[tuple[tuple[int, ...], int, int]] = (
            [((_SIMPLE,), 0, n_simple)] if n_simple else [])
        if not len(others):
            return self._block_plan(rows, segments), rows, None
        shape = self._row_shapes(a[others], t[others], code[others])
        # Stable: rows of one shape keep their order.
        order = np.lexsort(shape[::-1])
        others, shape = others[order], shape[:, order]
        # A run ends where the shape changes; adjacent melee rows are each their own.
        ends = np.flatnonzero((shape[:, 1:] != shape[:, :-1]).any(axis=0)
                              | (shape[0, :-1] == _ONE_BY_ONE)) + 1
        bounds = np.concatenate([[0], ends, [len(others)]]).tolist()
        for lo, hi in itertools.pairwise(bounds):
            kind, ka, kt, n_sq = shape[:, lo].tolist()
            key = ((_ONE_BY_ONE,) if kind == _ONE_BY_ONE else (_SPACES, ka, kt)
                   if kind == _SPACES else (_SQUARES, ka, kt, n_sq))
            segments.append((key, n_simple + lo, n_simple + hi))
        at = np.concatenate([simple_idx, others])
        ordered = Rows(a[at], t[at], code[at])
        return self._block_plan(ordered, segments), ordered, at

    def reference(self, rows: Sequence[tuple[int, int, AttackMode]],
                  want_lines: bool, want_probes: bool = True) -> list[PairFacts]:
        """The straightforward computation: every row planned probe by probe, every line
        traced against every wall and space with no spatial prune. Tests and benchmarks hold
        `evaluate` to it."""
        plan = _Plan()
        for a, t, mode in rows:
            self._plan_row(plan, a, t, mode)
        if not rows:
            return []
        return self._evaluate_plan(replace(plan.arrays(), real_groups=None), rows, want_lines,
                                   want_probes)

    def _row_shapes(self, a: IntArray, t: IntArray, code: npt.NDArray[np.int8],
                    ) -> npt.NDArray[np.intp]:
        """The shape of each of these rows with a creature bigger than one square, as a
        (4, rows) array: kind (_ONE_BY_ONE, _SPACES or _SQUARES), the attacker's and the
        target's corner counts, and the target's square count (0 unless _SQUARES). Rows of
        one shape share their probe layout and are planned together: space corners to
        space corners; every corner to each target square; or, one by one, adjacent melee
        with a big creature."""
        sx, sy = self._steps(a, t)
        adj = (sx <= 1) & (sy <= 1) & (self._vsteps(a, t) <= 1)
        n_squares = np.array([len(sq) for sq in self.squares], dtype=np.intp)
        spaces = code == _RANGED_CODE if not self.options.big_creatures_ranged else (
            np.zeros(len(code), dtype=bool))
        one_by_one = (code == _MELEE_CODE) & adj
        kind = np.where(one_by_one, _ONE_BY_ONE, np.where(spaces, _SPACES, _SQUARES))
        squares = kind == _SQUARES
        return np.stack([kind, np.where(one_by_one, 0, self._k[a]),
                         np.where(one_by_one, 0, self._k[t]),
                         np.where(squares, n_squares[t], 0)]).astype(np.intp)

    def _block_plan(self, rows: Sequence[tuple[int, int, AttackMode]],
                    segments: Sequence[tuple[tuple[int, ...], int, int]]) -> PlanArrays:
        """The plan for `rows`, laid out in segments of one shape each (`_row_shapes`)."""
        n = len(self.cs)
        a, t, code = self._row_arrays(rows)
        low, high = np.minimum(a, t), np.maximum(a, t)
        keys, block = np.unique(low * n + high, return_inverse=True)
        block = block.reshape(-1)
        bl, bh = keys // n, keys % n
        size = self._k[bl] * self._k[bh]
        shape_key = self._k[bl] * 1024 + self._k[bh]
        order = np.argsort(shape_key, kind="stable")
        base = np.zeros(len(keys), dtype=np.intp)
        base[order] = np.concatenate([[0], np.cumsum(size[order])[:-1]])
        total = int(size.sum())
        real_starts = np.empty((total, 2))
        real_ends = np.empty((total, 2))
        space_starts = np.empty((total, 2))
        space_ends = np.empty((total, 2))
        groups = []
        for sk in np.unique(shape_key):
            idx = order[shape_key[order] == sk]
            p_n, q_n = int(self._k[bl[idx[0]]]), int(self._k[bh[idx[0]]])
            s_in = self._gather(self._points_in, bl[idx])
            e_in = self._gather(self._points_in, bh[idx])
            s_raw = self._gather(self._points, bl[idx])
            e_raw = self._gather(self._points, bh[idx])
            first = int(base[idx[0]])
            span = slice(first, first + len(idx) * p_n * q_n)
            real_starts[span] = np.repeat(s_in, q_n, axis=1).reshape(-1, 2)
            real_ends[span] = np.tile(e_in, (1, p_n, 1)).reshape(-1, 2)
            space_starts[span] = np.repeat(s_raw, q_n, axis=1).reshape(-1, 2)
            space_ends[span] = np.tile(e_raw, (1, p_n, 1)).reshape(-1, 2)
            groups.append((first, s_in, e_in, s_raw, e_raw))

        parts = []
        for shape, lo, hi in segments:
            sub, b = rows[lo:hi], base[block[lo:hi]]
            if shape[0] == _SIMPLE:
                parts.append(self._simple_rows(code[lo:hi], a[lo:hi], t[lo:hi], b))
            elif shape[0] == _ONE_BY_ONE:
                parts.append(self._general_row(sub[0], int(b[0])))
            else:
                parts.append(self._shaped_rows(shape, code[lo:hi], a[lo:hi], t[lo:hi], b))
        virt, rev, kind, att, tgt, pstart, porigin, pbox, rstart = [], [], [], [], [], [], \
            [], [], []
        lines = probes = 0
        for part in parts:
            virt.append(part.virt_real)
            rev.append(part.virt_reversed)
            kind.append(part.kind)
            att.append(part.att)
            tgt.append(part.tgt)
            pstart.append(part.probe_start + lines)
            porigin.append(part.probe_origin)
            pbox.append(part.probe_box)
            rstart.append(part.row_probe_start + probes)
            lines += len(part.virt_real)
            probes += len(part.probe_start)
        return PlanArrays(
            real_starts=real_starts, real_ends=real_ends, space_starts=space_starts,
            space_ends=space_ends, real_groups=None, virt_real=np.concatenate(virt),
            virt_reversed=np.concatenate(rev), blocks=groups,
            kind=np.concatenate(kind).astype(np.int8), att=np.concatenate(att),
            tgt=np.concatenate(tgt), probe_start=np.concatenate(pstart),
            probe_origin=np.concatenate(porigin).reshape(-1, 2),
            probe_box=np.concatenate(pbox).reshape(-1, 4),
            row_probe_start=np.concatenate(rstart))

    def _simple_rows(self, code: npt.NDArray[np.int8], a: IntArray,
                     t: IntArray, base: IntArray) -> PlanArrays:
        """Rows between one-square creatures: every mode reads the 16 lines between the
        spaces' corners, as 4 probes (one per attacker corner) or, for adjacent melee, as
        one probe of 16."""
        ranged = code == _RANGED_CODE
        melee = code == _MELEE_CODE
        sx, sy = self._steps(a, t)
        melee_adj = melee & (sx <= 1) & (sy <= 1) & (self._vsteps(a, t) <= 1)
        kind = np.where(ranged, RANGED_LINE, np.where(melee_adj, ADJACENT_LINE, REACH_LINE))
        k = np.repeat(np.arange(4), 4)  # attacker corner of each of a row's 16 lines
        el = np.tile(np.arange(4), 4)  # target corner
        backwards = a > t
        within = np.where(backwards[:, None], el[None, :] * 4 + k[None, :],
                          k[None, :] * 4 + el[None, :])
        virt_real = (base[:, None] + within).reshape(-1)
        nprobes = np.where(melee_adj, 1, 4)
        row_probe_start = np.concatenate([[0], np.cumsum(nprobes)[:-1]]).astype(np.intp)
        probe_row = np.repeat(np.arange(len(code)), nprobes)
        corner = np.arange(len(probe_row)) - np.repeat(row_probe_start, nprobes)
        origin = self._gather(self._points, a).reshape(
            -1, 4, 2)[probe_row, corner]
        origin[melee_adj[probe_row]] = np.nan
        return PlanArrays(
            real_starts=_NO_POINTS, real_ends=_NO_POINTS, space_starts=_NO_POINTS,
            space_ends=_NO_POINTS, real_groups=None, virt_real=virt_real.astype(np.intp),
            virt_reversed=np.repeat(backwards, 16), blocks=None,
            kind=np.repeat(kind, 16).astype(np.int8), att=np.repeat(a, 16),
            tgt=np.repeat(t, 16), probe_start=(probe_row * 16 + corner * 4).astype(np.intp),
            probe_origin=origin.reshape(-1, 2), probe_box=self._boxes(t[probe_row]),
            row_probe_start=row_probe_start)

    def _shaped_rows(self, shape: tuple[int, ...], code: npt.NDArray[np.int8],
                     a: IntArray, t: IntArray, base: IntArray) -> PlanArrays:
        """Rows of one shape with a big creature, all at once, probes as `_plan_row` makes
        them: from each space corner to the target's space corners (ranged), or from every
        corner of the attacker's squares to each of the target's squares (reach, melee that
        is not adjacent, and ranged with the big-creature option)."""
        ka, kt = shape[1], shape[2]
        g = len(code)
        if shape[0] == _SPACES:
            origins = self._gather(self._space_idx, a)  # (G, 4) origin per probe
            targets = self._gather(self._space_idx, t)[:, None, :]  # (G, 1, 4)
            targets = np.broadcast_to(targets, (g, 4, 4))
            boxes = np.broadcast_to(self._boxes(t)[:, None, :], (g, 4, 4))
            kind = np.full(g, RANGED_LINE)
        else:
            n_sq = shape[3]
            # Probes square-major, then origin: (square j, origin o) -> j * ka + o.
            origins = np.tile(np.arange(ka), (g, n_sq))  # (G, n_sq * ka)
            sq = self._gather(self._square_idx, t)  # (G, n_sq, 4)
            targets = np.repeat(sq, ka, axis=1)  # (G, n_sq * ka, 4)
            sq_boxes = self._gather(self._square_boxes, t)  # (G, n_sq, 4)
            boxes = np.repeat(sq_boxes, ka, axis=1)
            kind = np.where(code == _RANGED_CODE, RANGED_LINE, REACH_LINE)
        n_probes = origins.shape[1]
        o = np.repeat(origins[:, :, None], 4, axis=2)  # (G, P, 4)
        forward = (a < t)[:, None, None]
        within = np.where(forward, o * kt + targets, targets * ka + o)
        virt_real = (base[:, None, None] + within).reshape(-1)
        lines_per_row = n_probes * 4
        origin_pts = self._gather(self._points, a)  # (G, ka, 2)
        probe_origin = np.take_along_axis(origin_pts, origins[:, :, None], axis=1)
        return PlanArrays(
            real_starts=_NO_POINTS, real_ends=_NO_POINTS, space_starts=_NO_POINTS,
            space_ends=_NO_POINTS, real_groups=None, virt_real=virt_real.astype(np.intp),
            virt_reversed=np.repeat(a > t, lines_per_row), blocks=None,
            kind=np.repeat(kind, lines_per_row).astype(np.int8),
            att=np.repeat(a, lines_per_row), tgt=np.repeat(t, lines_per_row),
            probe_start=(np.arange(g * n_probes) * 4).astype(np.intp),
            probe_origin=probe_origin.reshape(-1, 2), probe_box=boxes.reshape(-1, 4),
            row_probe_start=(np.arange(g) * n_probes).astype(np.intp))

    def _general_row(self, row: tuple[int, int, AttackMode], base: int) -> PlanArrays:
        """One row with a creature bigger than a square: its probes, as `_plan_row` makes
        them, read from the pair's block of lines."""
        a, t, mode = row
        ka, kt = int(self._k[a]), int(self._k[t])
        probes: list[tuple[IntArray, IntArray, Box]] = []  # origins, targets, target box
        kind = RANGED_LINE
        if mode is AttackMode.RANGED and not self.options.big_creatures_ranged:
            for o in self._space_idx[a]:
                probes.append((np.array([o]), self._space_idx[t], self.spaces[t]))
        else:
            if mode is AttackMode.MELEE and self._adjacent(a, t):
                for i, j in zip(*adjacent_pairs(self.squares[a], self.squares[t],
                                                self.grid), strict=True):
                    probes.append((self._square_idx[a][i], self._square_idx[t][j],
                                   self.squares[t][j]))
                kind = ADJACENT_LINE
            if not probes:
                kind = RANGED_LINE if mode is AttackMode.RANGED else REACH_LINE
                for j, tsq in enumerate(self.squares[t]):
                    for o in range(ka):
                        probes.append((np.array([o]), self._square_idx[t][j], tsq))
        virt, starts, origins, boxes = [], [], [], []
        count = 0
        for o_idx, t_idx, box in probes:
            oo, tt = np.repeat(o_idx, len(t_idx)), np.tile(t_idx, len(o_idx))
            virt.append(base + (oo * kt + tt if a < t else tt * ka + oo))
            starts.append(count)
            count += len(oo)
            origins.append(self._points[a][o_idx[0]] if len(o_idx) == 1
                           else np.array([np.nan, np.nan]))
            boxes.append(box)
        return PlanArrays(
            real_starts=_NO_POINTS, real_ends=_NO_POINTS, space_starts=_NO_POINTS,
            space_ends=_NO_POINTS, real_groups=None,
            virt_real=np.concatenate(virt).astype(np.intp),
            virt_reversed=np.full(count, a > t), blocks=None,
            kind=np.full(count, kind, dtype=np.int8), att=np.full(count, a, dtype=np.intp),
            tgt=np.full(count, t, dtype=np.intp), probe_start=np.array(starts, dtype=np.intp),
            probe_origin=np.array(origins, dtype=np.float64).reshape(-1, 2),
            probe_box=np.array(boxes, dtype=np.float64).reshape(-1, 4),
            row_probe_start=np.array([0], dtype=np.intp))

    def _plan_levels(self, plan: PlanArrays, want_lines: bool,
                     reach_too: bool = False) -> _Traced:
        """Trace the plan's lines and reduce them to each row's level, with the probe and
        line arrays the per-row facts read back; with `reach_too`, each row's level also
        with its ranged lines read under the reach rule. Adjacency and reach are the
        caller's (`row_facts` has them for the rows as asked, before planning)."""
        if plan.blocks is not None:
            real = self.tracer.trace_block_groups(plan.blocks, len(plan.real_starts),
                                                  want_lines)
        else:
            real = self.tracer.trace(plan.real_starts, plan.real_ends, plan.real_groups,
                                     (plan.space_starts, plan.space_ends))
        # Each traced line is read from one end or the other: compute what it meets once per
        # direction used, then apply each mode's rule per virtual line.
        # np.unique(key, return_inverse=True), by marking: keys are dense small integers.
        key = plan.virt_real * 2 + plan.virt_reversed
        mark = np.zeros(2 * max(len(plan.real_starts), 1), dtype=bool)
        mark[key] = True
        used = np.flatnonzero(mark)
        at = (np.cumsum(mark) - 1)[key]
        d_real, d_rev = used // 2, (used % 2).astype(bool)
        hits = _expand(real, d_real, d_rev, self.tracer.wall_dir)
        att = np.empty(len(used), dtype=np.intp)
        tgt = np.empty(len(used), dtype=np.intp)
        att[at], tgt[at] = plan.att, plan.tgt
        # np.take: numpy's fancy indexing of whole rows is many times slower.
        both = np.concatenate([plan.real_starts, plan.real_ends])
        flip = d_rev * len(plan.real_starts)
        starts = np.take(both, d_real + flip, axis=0)
        ends = np.take(both, d_real + len(plan.real_starts) - flip, axis=0)
        comps = self._components(hits, att, tgt, starts, ends)
        table = self._level_table(comps)
        level, partly = self._levels(table, at, plan.kind)

        pstart, rstart = plan.probe_start, plan.row_probe_start
        probe_level = self._probe_levels(level, partly, pstart)
        row_level = reduce_segments(np.minimum, probe_level, rstart)
        row_level_reach = None
        if reach_too:
            # The same probes read under the reach rule (ranged lines only differ).
            kind = np.where(plan.kind == RANGED_LINE, REACH_LINE, plan.kind).astype(np.int8)
            row_level_reach = reduce_segments(
                np.minimum, self._probe_levels(*self._levels(table, at, kind), pstart), rstart)
        row_level, row_level_reach = self._through_openings(plan, real.sealed, row_level,
                                                            row_level_reach)
        return _Traced(row_level, hits, comps, at, level, starts, ends, probe_level,
                       row_level_reach)

    def _loe_pairs(self, ua: IntArray, ut: IntArray
                   ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray,
                              FloatArray]:
        """Pairs of creatures (ua[k], ut[k], the lower position first) as the exact line of
        effect takes them: each space a hair inside as a ring, and each one's elevation and
        height. One place for both its callers, as the answers it keeps are read back by
        these very numbers (`_through_openings`, `_sealed_rows`)."""
        return (openings.box_rings(self._boxes(ua), INSET_PX),
                openings.box_rings(self._boxes(ut), INSET_PX), self._elev[ua],
                self._tall[ua], self._elev[ut], self._tall[ut])

    #: The level of a row whose every line is blocked while a line of effect still passes
    #: between the two spaces (an opening narrower than the corners' spacing): the best
    #: cover short of total the rules give, an arrow slit's (docs/rulesets.md, dnd35
    #: "Line of effect through openings").
    OPEN_LEVEL: int = IMPROVED

    def _through_openings(self, plan: PlanArrays, sealed: BoolArray | None,
                          row_level: npt.NDArray[np.int8],
                          row_level_reach: npt.NDArray[np.int8] | None,
                          ) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int8] | None]:
        """Rows at TOTAL whose two spaces still see each other through an opening no corner
        line passes (geometry.openings, exact): raised to OPEN_LEVEL. Total cover needs no
        line of effect at all ("se non avete alcuna linea di visuale"). Rows whose pair's
        block of lines the tracer found sealed by one plain wall (`sealed`, per traced
        line) are total for certain and not looked at again."""
        shut = row_level == TOTAL
        if row_level_reach is not None:
            shut |= row_level_reach == TOTAL
        rows = np.flatnonzero(shut)
        if len(rows) and sealed is not None:
            first = plan.probe_start[plan.row_probe_start[rows]]
            known = sealed[plan.virt_real[first]]
            # (The lines' points span the spaces only where the squares hold them: a token
            # of 1.4 squares has a space wider than its one square.)
            odd = self._squares_short
            if odd is not None:
                known &= ~(odd[plan.att[first]] | odd[plan.tgt[first]])
            rows = rows[~known]
        if len(rows) == 0:
            return row_level, row_level_reach
        first = plan.probe_start[plan.row_probe_start[rows]]
        a, t = plan.att[first], plan.tgt[first]
        n = len(self.cs)
        # Each pair once, both ways (the same lines, read from either end).
        low, high = np.minimum(a, t), np.maximum(a, t)
        keys, back = np.unique(low * n + high, return_inverse=True)
        ua, ut = keys // n, keys % n
        fwd, bwd = openings.line_of_effect_both(self.tracer, *self._loe_pairs(ua, ut),
                                                walked=sealed is not None)
        back = back.reshape(-1)
        seen = np.where(a <= t, fwd[back], bwd[back])
        if not seen.any():
            return row_level, row_level_reach
        opened = rows[seen]
        row_level = row_level.copy()
        row_level[opened] = np.where(row_level[opened] == TOTAL, self.OPEN_LEVEL,
                                     row_level[opened])
        if row_level_reach is not None:
            row_level_reach = row_level_reach.copy()
            row_level_reach[opened] = np.where(row_level_reach[opened] == TOTAL,
                                               self.OPEN_LEVEL, row_level_reach[opened])
        return row_level, row_level_reach

    def _reach_facts(self, a: IntArray, t: IntArray, mode_code: npt.NDArray[np.int8],
                     ) -> tuple[BoolArray, BoolArray]:
        """Per row: whether the two creatures are adjacent, and whether the target is in
        reach of the row's attack."""
        sx, sy = self._steps(a, t)
        sz = self._vsteps(a, t)
        adj = (sx <= 1) & (sy <= 1) & (sz <= 1)
        reach_by_mode = in_reach_by_mode(sx, sy, self._reach[a], sz)
        in_reach = np.choose(mode_code, [reach_by_mode[AttackMode.MELEE],
                                         reach_by_mode[AttackMode.REACH],
                                         reach_by_mode[AttackMode.RANGED]])
        return adj, in_reach

    def _evaluate_plan(self, plan: PlanArrays, rows: Sequence[tuple[int, int, AttackMode]],
                       want_lines: bool, want_probes: bool) -> list[PairFacts]:
        tr = self._plan_levels(plan, want_lines)
        hits, comps, at, level, starts, ends = (tr.hits, tr.comps, tr.at, tr.level,
                                                tr.starts, tr.ends)
        pstart, rstart = plan.probe_start, plan.row_probe_start
        probe_open = np.add.reduceat((level <= SOFT).astype(np.intp), pstart)
        probe_n = np.diff(np.append(pstart, len(level)))
        rend = np.append(rstart[1:], len(pstart))
        adj, in_reach = self._reach_facts(*self._row_arrays(rows))
        in_reach_l = in_reach.tolist()
        adj_list = adj.tolist()
        level_list = tr.row_level.tolist()
        rstart_l, rend_l = rstart.tolist(), rend.tolist()
        plevel_l, popen_l, pn_l = (tr.probe_level.tolist(), probe_open.tolist(),
                                   probe_n.tolist())
        out: list[PairFacts] = []
        for r in range(len(rows)):
            in_reach = in_reach_l[r]
            lvl = level_list[r]
            if (lvl != COVER or not want_probes) and not want_lines:
                # Facts with nothing but the level are values: share one per kind.
                fact_key = (lvl, adj_list[r], in_reach)
                common = _COMMON_FACTS.get(fact_key)
                if common is None:
                    common = PairFacts(lvl, adj_list[r], in_reach, None)
                    _COMMON_FACTS[fact_key] = common
                out.append(common)
                continue
            best: tuple[Probe, ...] = ()
            traced = None
            tied = [p for p in range(rstart_l[r], rend_l[r]) if plevel_l[p] == lvl]
            if not tied:
                # Raised from total through an opening (`_through_openings`): no probe reached
                # the level; every probe of the row stands for it.
                tied = list(range(rstart_l[r], rend_l[r]))
            if lvl == COVER and want_probes:
                best = tuple(self._probe(plan, p, popen_l[p], pn_l[p]) for p in tied)
            if want_lines:
                first = tied[0]
                traced = self._traced(hits, comps, at, plan.kind, level, starts, ends,
                                      int(pstart[first]),
                                      int(pstart[first] + probe_n[first]))
            out.append(PairFacts(lvl, adj_list[r], in_reach, traced, best))
        return out

    @staticmethod
    def _probe(plan: PlanArrays, p: int, open_lines: int, lines: int) -> Probe:
        ox, oy = plan.probe_origin[p].tolist()
        origin = None if ox != ox else (ox, oy)  # NaN: several origins
        x0, y0, x1, y1 = plan.probe_box[p].tolist()
        return Probe(origin, (x0, y0, x1, y1), open_lines, lines)

    def _traced(self, hits: LineHits, comps: dict[str, BoolArray], at: IntArray,
                kind: npt.NDArray[np.int8], level: npt.NDArray[np.int8], starts: FloatArray,
                ends: FloatArray, lo: int, hi: int) -> tuple[TracedLine, ...]:
        """Virtual lines lo..hi as drawn, with what counted on each under its rule."""
        tr = self.tracer
        result = []
        for v in range(lo, hi):
            line, k = int(at[v]), int(kind[v])
            soft_ok = k == RANGED_LINE or (k == REACH_LINE and self.options.soft_cover_vs_reach)
            wsel = (hits.wall_line == line) & comps["h_walls"]
            csel = (hits.creature_line == line) & comps["h_creature"] & soft_ok
            rsel = (hits.region_line == line) & (
                comps["h_blocking_region"] | (k != ADJACENT_LINE))
            result.append(TracedLine(
                start=(float(starts[line, 0]), float(starts[line, 1])),
                end=(float(ends[line, 0]), float(ends[line, 1])),
                blocked=bool(level[v] == TOTAL),
                walls=tuple(sorted({tr.walls[w].id for w in hits.wall_idx[wsel]})),
                tokens=tuple(sorted({self.cs[c].id for c in hits.creature_idx[csel]})),
                regions=tuple(sorted({tr.regions[g].id for g in hits.region_idx[rsel]})),
            ))
        return tuple(result)

    # -- flanking ----------------------------------------------------------------------

    def threat_rows(self, pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """The (creature, target) pairs flanking needs to know about for attacks of these
        pairs: only creatures within their natural reach of a target can threaten it, and
        only a target some attacker here may strike in melee or with a reach weapon (within
        twice its natural reach, the widest of the two) can be flanked by one."""
        if not pairs:
            return []
        at = np.array(pairs, dtype=np.intp).reshape(-1, 2)
        sx, sy = self._steps(at[:, 0], at[:, 1])
        close = within_reach_many(sx, sy, 2 * self._reach[at[:, 0]],
                                  self._vsteps(at[:, 0], at[:, 1]))
        targets = sorted(set(at[close, 1].tolist()))
        if not targets:
            return []
        n = len(self.cs)
        tt = np.repeat(np.array(targets, dtype=np.intp), n)
        bb = np.tile(np.arange(n), len(targets))
        sx, sy = self._steps(bb, tt)
        near = within_reach_many(sx, sy, self._reach[bb], self._vsteps(bb, tt)) & (bb != tt)
        return list(zip(bb[near].tolist(), tt[near].tolist(), strict=True))

    def flankers(self, a: int, t: int, threatens: Mapping[tuple[int, int], bool]) -> list[str]:
        """Allies of `a` that, threatening `t`, stand across it from `a` (3.5 SRD flanking:
        the line between centres crosses opposite borders or corners; big creatures may use
        any square they occupy)."""
        found = []
        for b, other in enumerate(self.cs):
            if b in (a, t) or other.disposition != self.cs[a].disposition:
                continue
            if not threatens.get((b, t), False):
                continue
            if self._flank_test(a, b, t):
                found.append(other.id)
        return found

    def flankers_many(self, a: IntArray, t: IntArray, who: IntArray,
                      whom: IntArray) -> list[list[str]]:
        """`flankers` of rows (a[k], t[k]) at once; (who[j], whom[j]): the creatures that
        threaten each target. Every line between the two allies' squares' centres, around
        every target, in one array test (geometry.flanking's `_many` test, the same
        answer line by line); two allies with more than FLANK_LINES lines between them are
        `flankers`' own (its test skips the lines that cannot cross: two huge allies are
        millions of them), and so are all when they are few (a move's rows). `flankers`
        is the reference this is held to."""
        n_rows = len(a)
        if n_rows == 0:
            return []
        # Each target's threateners, in creature order.
        key = np.unique(whom.astype(np.int64) * len(self.cs) + who)
        by_t, by_b = key // len(self.cs), key % len(self.cs)
        lo = np.searchsorted(by_t, t, side="left")
        cnt = np.searchsorted(by_t, t, side="right") - lo
        row = np.repeat(np.arange(n_rows), cnt)
        b = by_b[np.repeat(lo, cnt) + kernel.within_runs(cnt)]
        ra, rt = a[row], t[row]
        side = self._dispositions
        ok = (b != ra) & (b != rt) & (side[b] == side[ra])
        row, b, ra, rt = row[ok], b[ok], ra[ok], rt[ok]
        # The squares' centres of the creatures here only (a move's few rows in a scene of
        # a thousand creatures).
        who_here = np.unique(np.concatenate([ra, b]))
        count = np.zeros(len(self.cs), dtype=np.intp)
        count[who_here] = np.fromiter(map(len, map(self.squares.__getitem__,
                                                   who_here.tolist())),
                                      dtype=np.intp, count=len(who_here))
        lines = count[ra] * count[b]
        if int(lines.sum()) <= FLANK_FEW:
            threatens = dict.fromkeys(zip(who.tolist(), whom.tolist(), strict=True), True)
            return [self.flankers(int(x), int(y), threatens)
                    for x, y in zip(a.tolist(), t.tolist(), strict=True)]
        hit = np.zeros(len(b), dtype=bool)
        big = np.flatnonzero(lines > FLANK_LINES)
        for k in big.tolist():
            x, y, z = int(ra[k]), int(b[k]), int(rt[k])
            hit[k] = bool(self._flank_test(x, y, z))
        small = np.flatnonzero(lines <= FLANK_LINES)
        if len(small):
            cand = np.repeat(small, lines[small])
            within = kernel.within_runs(lines[small])
            cb = count[b[cand]]
            start = np.cumsum(count) - count
            boxes = np.array([sq for k in who_here.tolist() for sq in self.squares[k]],
                             dtype=np.float64).reshape(-1, 4)
            first = np.column_stack([(boxes[:, 0] + boxes[:, 2]) / 2,
                                     (boxes[:, 1] + boxes[:, 3]) / 2])
            i = start[ra[cand]] + within // cb
            j = start[b[cand]] + within % cb
            tt = rt[cand]
            et, st = self._elev[tt], self._side[tt]
            middle = et + st / 2

            def height(c: IntArray) -> FloatArray:
                # `flank_height`, every line at once (the same arithmetic).
                low, up = self._elev[c], self._side[c]
                out: FloatArray = np.where((low <= middle) & (middle <= low + up), middle,
                                           low + up / 2)
                return out

            p = np.column_stack([first[i], height(ra[cand])])
            q = np.column_stack([first[j], height(b[cand])])
            crossed = crosses_opposite_faces_many(p, q, self._space_arr[tt], et, et + st)
            hit[small] = np.bincount(cand, weights=crossed, minlength=len(b))[small] > 0
        out: list[list[str]] = [[] for _ in range(n_rows)]
        ids = self._ids
        for r, y in zip(row[hit].tolist(), b[hit].tolist(), strict=True):
            out[r].append(ids[y])
        return out

    def _flank_test(self, a: int, b: int, t: int) -> bool:
        """Whether a and b, allies, stand across t: any line between their squares'
        centres, each at its `flank_height`, crosses t's cube from a face to the opposite
        one."""
        et, st = float(self._elev[t]), float(self._side[t])
        za = flank_height(float(self._elev[a]), float(self._side[a]), et, st)
        zb = flank_height(float(self._elev[b]), float(self._side[b]), et, st)
        return any_crosses_opposite_faces([(*centre(sq), za) for sq in self.squares[a]],
                                          [(*centre(sq), zb) for sq in self.squares[b]],
                                          self.spaces[t], et, et + st)

    @functools.cached_property
    def _dispositions(self) -> npt.NDArray[np.int64]:
        return np.fromiter((c.disposition for c in self.cs), dtype=np.int64,
                           count=len(self.cs))

    @functools.cached_property
    def _ids(self) -> list[str]:
        return [c.id for c in self.cs]
