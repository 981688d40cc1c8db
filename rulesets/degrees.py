"""Cover degrees (seed 000): a homebrew on Pathfinder 2e's procedure.

Rule of this module: one line from the centre of the attacker's space to the centre of the
target's; what it crosses sets a degree on the ladder none < lesser < standard < greater;
a target with no unblocked line from any part of the attacker's space at all has no line of
effect. Area effects count obstructions square by square along the line from their origin.
Flanking bonuses grow with the number of flanking pairs. Numbers sit in the tables below.
The procedure is centre to centre, so it runs unchanged on Foundry's hex grids: centres are
Foundry's token centres, "any part" of a space is its hex footprint's corners, distances
count hexes, creatures in the way are hex footprints, flanking crosses opposite sides of the
hex under the target's centre, and area obstructions count the hexes the line passes.

How it is computed: `evaluate` takes every pair at once (all centre lines in one traced
batch; for pairs whose centre line is blocked, the 'any part' lines proved blocked by a few
plain walls, the rest traced; reach and threats as arrays; one outcome built per distinct
combination of facts); `reference` keeps the pair-by-pair computation it replaced, which
tests and the benchmark hold it to, annotation by annotation. On hex grids `evaluate` takes
the same path with the reference's hex facts: Foundry's token centres, the footprint's corners
as 'any part' samples (padded to one width per scene with repeats of the centre, whose lines
are skipped), the tracer's exact hex footprint test for creatures on the centre line, and
hexes between footprints for reach and adjacency.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import msgspec
import numpy as np
import numpy.typing as npt
import shapely

from geometry import hex as hexgrid
from geometry import kernel, openings
from geometry.caches import drop_oldest
from geometry.columns import (
    columns,
    has_riders,
    hex_footprints,
    ids_of,
    per_creature,
    upper_pairs,
)
from geometry.flanking import (
    any_crosses_opposite_faces,
    any_crosses_opposite_prism_sides,
    crosses_opposite_faces_many,
    crosses_opposite_prism_sides_many,
)
from geometry.kernel import (
    BoolArray,
    FloatArray,
    IntArray,
    dense_unique,
    segments_enter_boxes,
)
from geometry.model import Direction, GridKind, RegionKind, SceneGeom
from geometry.seams import Seams, box_seams, hex_seams, seam_hits
from geometry.square import (
    INSET_PX,
    Box,
    centre,
    corners_many,
    grid_steps_many,
    inset_many,
    squares,
    steps_3d,
    vertical_steps_many,
    within_reach_many,
)
from geometry.templates import Template, inside, shape
from geometry.trace import SOLID_CODE, LineHits, Tracer
from geometry.vertical import box_passage, flank_height, sheet, wall_crossing
from rulesets import kept
from rulesets.base import (
    Annotation,
    AreaHit,
    AttackMode,
    Degree,
    Flag,
    Modifier,
    ModKind,
    Ruleset,
    Stat,
    TracedLine,
    attack_flags,
    in_reach_by_mode,
    pair_indices,
    pair_rows,
)
from rulesets.obstacles import creature_hits, limited_blocked, wall_roles_3d

M = Modifier
LADDER = (Degree.NONE, Degree.LESSER, Degree.STANDARD, Degree.GREATER)
NONE, LESSER, STANDARD, GREATER, TOTAL = 0, 1, 2, 3, 4
_AREA = "vs area effects"


class DegreesOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    size_shift: bool = True
    area_walls_count: bool = True


@dataclass(frozen=True, slots=True)
class _Row:
    level: int
    lines: tuple[TracedLine, ...] | None


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one distinct combination of an attack's facts is worth (shared by every
    annotation with those facts)."""

    loe: bool
    degree: Degree
    modifiers: tuple[Modifier, ...]
    flags: frozenset[Flag]
    flankers: tuple[str, ...]


class CoverDegrees(Ruleset):
    """Seed 000: lesser/standard/greater cover from one centre line; flanking pairs."""

    name: ClassVar[str] = "degrees"
    title: ClassVar[str] = "Cover degrees (seed 000, a homebrew on Pathfinder 2e)"
    seed: ClassVar[str] = "000_e5bf255a343d57a6.txt"
    Options: ClassVar[type[DegreesOptions]] = DegreesOptions
    option_docs: ClassVar[Mapping[str, str]] = {
        "sizeShift": "A covering creature larger than the covered one raises cover one degree, "
                     "a smaller one lowers it (the seed's rule; off for tables that skip it).",
        "areaWallsCount": "For area effects, each low wall (or other wall the centre line "
                          "crosses while line of effect still reaches the creature) counts as "
                          "one obstruction, like an object in a square.",
    }

    TABLE: ClassVar[Mapping[Degree, tuple[Modifier, ...]]] = {
        Degree.NONE: (),
        Degree.LESSER: (M(Stat.AC, 2, ModKind.CIRCUMSTANCE, "lesser cover"),
                        M(Stat.REFLEX, 2, ModKind.CIRCUMSTANCE, f"lesser cover, {_AREA}")),
        Degree.STANDARD: (M(Stat.AC, 4, ModKind.CIRCUMSTANCE, "standard cover"),
                          M(Stat.REFLEX, 4, ModKind.CIRCUMSTANCE, f"standard cover, {_AREA}")),
        Degree.GREATER: (M(Stat.AC, 8, ModKind.CIRCUMSTANCE, "greater cover"),
                         M(Stat.REFLEX, 8, ModKind.CIRCUMSTANCE, f"greater cover, {_AREA}")),
        Degree.TOTAL: (),
    }
    ladder: ClassVar[tuple[Degree, ...]] = LADDER
    grids: ClassVar[frozenset[GridKind]] = frozenset({GridKind.SQUARE} | hexgrid.HEX_GRIDS)
    STEALTH_DEGREES: ClassVar[frozenset[Degree]] = frozenset({Degree.STANDARD, Degree.GREATER})
    REFLEX_BETTER_DEGREES: ClassVar[frozenset[Degree]] = frozenset({Degree.GREATER})
    #: What one obstruction on the centre line is worth, before the size shift.
    WALL_LEVEL: ClassVar[Mapping[str, int]] = {"solid": STANDARD, "low": LESSER,
                                               "improved": GREATER}
    REGION_LEVEL: ClassVar[Mapping[RegionKind, int]] = {
        RegionKind.BLOCKING: STANDARD, RegionKind.COVER: STANDARD,
        RegionKind.IMPROVED: GREATER, RegionKind.OBSCURING: NONE}
    CREATURE_LEVEL: ClassVar[int] = LESSER
    #: Seed 000 builds on Pathfinder 2e: its aquatic combat rules (seed 002) apply.
    aquatic: ClassVar[bool] = True

    def creature_level(self, ctx: _Context, c: int, a: int, t: int) -> int:
        """What creature c on the centre line between a and t is worth (before the cap)."""
        shift = 0
        if ctx.options.size_shift:
            shift = int(np.sign(ctx.rank[c] - ctx.rank[t]))
        return self.CREATURE_LEVEL + shift

    def creature_levels(self, ctx: _Context, c: IntArray, a: IntArray,
                        t: IntArray) -> IntArray:
        """creature_level for many (creature, attacker, target) triples at once."""
        shift = np.sign(ctx.rank[c] - ctx.rank[t]) if ctx.options.size_shift else 0
        out: IntArray = (self.CREATURE_LEVEL + shift + np.zeros(len(c), dtype=np.intp))
        return out

    def in_the_way_may_change(self, cover: Degree) -> bool:
        # No line of effect comes from walls and terrain alone (creatures never block a
        # line), and a GM's floor only raises a degree: a creature stepping into or out of
        # the way leaves an attack without line of effect as it is. Any other degree counts
        # what stands on the centre line, creatures included.
        return cover is not Degree.TOTAL

    # -- attacks ------------------------------------------------------------------------

    def evaluate(self, scene: SceneGeom, options: Any,
                 pairs: Sequence[tuple[str, str]] | None = None,
                 modes: Iterable[AttackMode] = tuple(AttackMode),
                 lines: bool = False) -> list[Annotation]:
        ctx = self._context(scene, options)
        return self._fast(ctx, pair_rows(len(ctx.cs), ctx.index, pairs), tuple(modes), lines)

    def reference(self, scene: SceneGeom, options: Any,
                  pairs: Sequence[tuple[str, str]] | None = None,
                  modes: Iterable[AttackMode] = tuple(AttackMode),
                  lines: bool = False) -> list[Annotation]:
        """`evaluate` computed the straightforward way, pair by pair: every pair's 26 lines
        traced through `Tracer.trace`, its degree, reach and flanking partners found one by
        one. Tests and benchmarks hold `evaluate` to it."""
        ctx = self._context(scene, options)
        idx = pair_indices(len(ctx.cs), ctx.index, pairs)
        return self._by_pairs(ctx, idx, tuple(modes), lines)

    def _by_pairs(self, ctx: _Context, idx: Sequence[tuple[int, int]],
                  modes: tuple[AttackMode, ...], lines: bool) -> list[Annotation]:
        """The pair-by-pair computation for these pairs of ctx's creatures."""
        rows = ctx.reference_rows(idx, lines)
        flanking = ctx.reference_flanking(idx, rows) \
            if any(m is not AttackMode.RANGED for m in modes) else {}
        out = []
        for (a, t), row in zip(idx, rows, strict=True):
            for mode in modes:
                out.append(self._reference_annotate(ctx, a, t, mode, row,
                                                    flanking.get((a, t))))
        return out

    def _context(self, scene: SceneGeom, options: Any, attack: bool = True) -> _Context:
        return _Context(scene, options, self)

    def _fast(self, ctx: _Context, idx: IntArray, modes: tuple[AttackMode, ...],
              want_lines: bool) -> list[Annotation]:
        """Every pair's facts as arrays (one traced batch, one reach computation), then one
        Outcome per distinct combination of facts, shared by the annotations that have it.
        On hex grids the same, with hex centres, footprints, samples and steps."""
        if not len(idx):
            return []
        a, t = np.ascontiguousarray(idx[:, 0]), np.ascontiguousarray(idx[:, 1])
        levels, lines = ctx.fast_rows(a, t, want_lines)
        sx, sy = ctx.steps_many(a, t)
        sz = vertical_steps_many(ctx.elev[a], ctx.side[a], ctx.elev[t], ctx.side[t])
        flanking = ctx.fast_flanking(a, t, levels, (sx, sy, sz)) \
            if any(m is not AttackMode.RANGED for m in modes) else {}
        by_mode = self._reach_by_mode(ctx, a, sx, sy, sz)
        extra, extra_values = self._fast_extra(ctx, a, t)
        # Each row's outcome key (mode, level, target's floor, in reach, adjacent,
        # flanking, the variant's extra facts) as one integer per row, pairs first, modes
        # within; each distinct key worked out once, every row's fields then gathered by
        # numpy and the annotations built by map, with no Python loop body per row.
        n_rows, n_modes = len(a), len(modes)
        floors = list(dict.fromkeys(c.cover_floor for c in ctx.cs))
        floor_code = np.array([floors.index(c.cover_floor) for c in ctx.cs], dtype=np.int64)
        flanks: list[tuple[int, tuple[str, ...]] | None] = [None]
        flank_code = np.zeros(n_rows, dtype=np.int64)
        if flanking:
            # Each row looks its pair up among the flanking pairs (which may name pairs
            # beyond those asked for); equal flanks share a code.
            n = len(ctx.cs)
            codes = {v: k for k, v in enumerate(dict.fromkeys(flanking.values()), start=1)}
            flanks.extend(codes)
            keys = np.array([p[0] * n + p[1] for p in flanking], dtype=np.int64)
            values = np.array([codes[v] for v in flanking.values()], dtype=np.int64)
            order = np.argsort(keys)
            keys, values = keys[order], values[order]
            pair_code = a.astype(np.int64) * n + t
            at = np.minimum(np.searchsorted(keys, pair_code), len(keys) - 1)
            found = keys[at] == pair_code
            flank_code[found] = values[at[found]]
        reach = np.stack([by_mode[m] for m in modes], axis=1)  # (rows, modes)
        adjacent = (sx <= 1) & (sy <= 1) & (sz <= 1)
        key = np.arange(n_modes, dtype=np.int64)[None, :]
        for code, size in ((levels.astype(np.int64)[:, None], TOTAL + 1),
                           (floor_code[t][:, None], len(floors)),
                           (reach.astype(np.int64), 2),
                           (adjacent.astype(np.int64)[:, None], 2),
                           (flank_code[:, None], len(flanks)),
                           (extra.astype(np.int64)[:, None], len(extra_values))):
            key = key * size + code
        uniq, which = dense_unique(key.reshape(-1))
        columns = [np.empty(len(uniq), dtype=object) for _ in range(5)]
        for u, k in enumerate(uniq.tolist()):
            k, ex = divmod(k, len(extra_values))
            k, fl = divmod(k, len(flanks))
            k, adj = divmod(k, 2)
            k, rch = divmod(k, 2)
            k, floor = divmod(k, len(floors))
            j, level = divmod(k, TOTAL + 1)
            o = self._outcome(modes[j], level, floors[floor], bool(rch), bool(adj),
                              flanks[fl], extra_values[ex])
            for column, value in zip(columns, (o.loe, o.degree, o.modifiers, o.flags,
                                               o.flankers), strict=True):
                column[u] = value
        which = which.reshape(-1)
        ids = np.array(ids_of(ctx.cs), dtype=object)
        traced: Iterable[Any] = (itertools.repeat(None) if lines is None else
                                 (line for line in lines for _ in modes))
        return list(map(Annotation, np.repeat(np.take(ids, a), n_modes).tolist(),
                        np.repeat(np.take(ids, t), n_modes).tolist(), list(modes) * n_rows,
                        *(np.take(column, which).tolist() for column in columns), traced))

    def _fast_extra(self, ctx: _Context, a: IntArray, t: IntArray,
                    ) -> tuple[IntArray, Sequence[Any]]:
        """Per pair: the facts beyond the shared ones a variant's outcome depends on, as a
        code, and each code's facts (as `_outcome` takes them)."""
        return np.zeros(len(a), dtype=np.intp), [()]

    def _reach_by_mode(self, ctx: _Context, a: IntArray, sx: npt.NDArray[np.int64],
                       sy: npt.NDArray[np.int64], sz: npt.NDArray[np.int64],
                       ) -> dict[AttackMode, npt.NDArray[np.bool_]]:
        """Per attack mode, whether each target (these steps from attacker `a`) is in reach
        (a variant changes what a reach weapon reaches)."""
        return in_reach_by_mode(sx, sy, ctx.reach[a], sz)

    def _reference_annotate(self, ctx: _Context, a: int, t: int, mode: AttackMode, row: _Row,
                            flank: tuple[int, tuple[str, ...]] | None) -> Annotation:
        sx, sy, sz = ctx.steps(a, t)
        in_reach = bool(in_reach_by_mode(np.array([sx]), np.array([sy]),
                                         np.array([ctx.cs[a].reach]), np.array([sz]))[mode][0])
        o = self._outcome(mode, row.level, ctx.cs[t].cover_floor, in_reach,
                          ctx.adjacent(a, t), flank, ())
        return Annotation(ctx.cs[a].id, ctx.cs[t].id, mode, o.loe, o.degree, o.modifiers,
                          o.flags, o.flankers, row.lines)

    def _outcome(self, mode: AttackMode, level: int, floor: str | None, in_reach: bool,
                 adjacent: bool, flank: tuple[int, tuple[str, ...]] | None,
                 extra: Any) -> _Outcome:
        """What one attack is worth: its centre line's level (TOTAL: no line of effect), the
        GM's floor on the target, whether the target is in reach for this mode and adjacent,
        the attacker's flanking bonus and partners (None: not flanking)."""
        degree = Degree.TOTAL if level == TOTAL else LADDER[level]
        degree = self.floored(degree, floor)
        loe = degree is not Degree.TOTAL
        flags = attack_flags(degree, mode is not AttackMode.RANGED, in_reach, adjacent,
                             degree in self.STEALTH_DEGREES)
        if degree in self.REFLEX_BETTER_DEGREES:
            flags.add(Flag.REFLEX_DEGREE_BETTER)
        mods = list(self.TABLE[degree])
        flankers: tuple[str, ...] = ()
        # No flanking bonus for attacks made through cover.
        if (flank is not None and mode is not AttackMode.RANGED and in_reach
                and degree is Degree.NONE):
            bonus, flankers = flank
            flags.add(Flag.FLANKING)
            mods.append(M(Stat.ATTACK, bonus, ModKind.FLANKING,
                          "flanking with " + ", ".join(flankers)))
            mods.append(M(Stat.CONCENTRATION, -bonus, ModKind.FLANKING,
                          "flanked: the bonus is a penalty to Concentration for spellcasters"))
        return _Outcome(loe, degree, tuple(mods), frozenset(flags), flankers)

    # -- areas --------------------------------------------------------------------------

    def area(self, scene: SceneGeom, options: Any, template: Template) -> list[AreaHit]:
        ctx = _Context(scene, options, self)
        region = shape(template, scene.grid)
        origin = (template.x, template.y)
        hits = []
        for t, c in enumerate(scene.creatures):
            if not inside(region, c, scene.grid):
                continue
            count = ctx.area_obstructions(origin, t)
            if count is None:
                continue  # walls stop the area: no line of effect from its origin
            degree = self.floored(LADDER[min(count, GREATER)], c.cover_floor)
            flags = {Flag.REFLEX_DEGREE_BETTER} if degree in self.REFLEX_BETTER_DEGREES \
                else set()
            mods = tuple(m for m in self.TABLE[degree] if m.stat is Stat.REFLEX)
            hits.append(AreaHit(c.id, degree, mods, frozenset(flags), count))
        return hits


#: Per hex footprint (layout, x, y, width, height, shape): its `seal_rings` ring (read-only),
#: for the _SEAL_RINGS_KEPT footprints used last. Shared by the Core's thread and the one
#: that works ahead (server/ahead.py): read and written under the lock.
_SEAL_RINGS: OrderedDict[tuple[Any, ...], FloatArray] = OrderedDict()
_SEAL_RINGS_KEPT = 8192
_SEAL_RINGS_LOCK = threading.Lock()


@functools.lru_cache(maxsize=8192)
def _hex_samples(layout: hexgrid.HexLayout, x: float, y: float, width: float, height: float,
                 shape: int) -> FloatArray:
    """A hex footprint's 'any part' samples: its corners, a hair inside, then its centre
    (cached, as footprints are: a move changes one creature's, and every move builds the
    scene's samples again). Read-only: shared by every snapshot."""
    fp = hexgrid.footprint_at(layout, x, y, width, height, shape)
    ring = np.asarray(fp.polygon.exterior.coords, dtype=np.float64)[:-1]
    c = np.array(fp.centre)
    d = c - ring
    dist = np.hypot(d[:, 0], d[:, 1])[:, None]
    moved = ring + d / np.maximum(dist, 1e-12) * np.minimum(INSET_PX, dist)
    out: FloatArray = np.vstack([moved, c[None, :]])
    out.flags.writeable = False
    return out


#: Squares of one target's threatening allies (all of them) up to which their flanking
#: lines are tested with every other target's at once (`_Context._partners_many`); past
#: it, pair by pair with the tests' own pruning (two Colossal allies are 1,296 lines).
_FLANK_POINTS = 256
#: Lines up to which they are tested pair by pair (`_partners`), not in arrays: on a
#: square grid (a few microseconds a line), and on a hex grid (Shapely's, 50 us a line).
_FLANK_FEW = 48
_FLANK_FEW_HEX = 2
#: No flanking bonus, no partners.
_NO_PARTNERS: tuple[int, dict[int, list[int]]] = (0, {})


class _Context:
    """One scene snapshot, traced for the degrees procedure."""

    def __init__(self, scene: SceneGeom, options: Any, rules: CoverDegrees) -> None:
        self.rules = rules
        self.wall_level: Mapping[str, int] = rules.WALL_LEVEL
        self.scene = scene
        self.grid = scene.grid
        self.options = options
        self.tracer = Tracer(scene)
        self.cs = scene.creatures
        cols = columns(self.cs, self.grid)
        self.index = cols.index
        self.space_arr: FloatArray = cols.spaces
        self.hex = hexgrid.HexLayout.of(self.grid) if hexgrid.is_hex(self.grid) else None
        self.centre_arr: FloatArray = cols.centre
        self.tall, self.elev = cols.tall, cols.elev
        # (Kept per creature object across snapshots, and riders looked for in C first:
        # a walking step at 1,000 creatures read every creature here.)
        cs = self.cs
        self.rank = np.array(per_creature("degrees rank", cs, self.grid,
                                          lambda todo: [cs[k].size.rank for k in todo]),
                             dtype=np.intp).reshape(-1)
        self.side, self.reach = cols.side, cols.reach
        #: Rider and mount, each other's partner: never cover between or for each other.
        self.partner: dict[int, int] = {}
        if has_riders(cs):
            for k, c in enumerate(cs):
                if c.mount is not None and c.mount in self.index:
                    self.partner[k] = self.index[c.mount]
                    self.partner[self.index[c.mount]] = k
        #: The same as an array (-1: none).
        self.partner_arr = np.full(len(self.cs), -1, dtype=np.intp)
        for k, p in self.partner.items():
            self.partner_arr[k] = p
        self._sample_arr: FloatArray | None = None
        self._sample_valid: BoolArray | None = None
        self._sample_box_arr: FloatArray | None = None
        self._seams: Seams | None = None
        # Per creature, the centres of its squares (`_square_centres`).
        self._centres_of: dict[int, FloatArray] = {}

    @functools.cached_property
    def _sides(self) -> tuple[IntArray, int]:
        """Each creature's side (its disposition) as a number from 0, and how many
        numbers there are (from the lowest disposition to the highest): allies share
        one."""
        disposition = np.fromiter((c.disposition for c in self.cs), dtype=np.int64,
                                  count=len(self.cs))
        low = int(disposition.min(initial=0))
        return disposition - low, int(disposition.max(initial=low)) - low + 1

    @functools.cached_property
    def spaces(self) -> list[Box]:
        """Each creature's space (`space`), as boxes (the rows of `space_arr`)."""
        return [(x0, y0, x1, y1) for x0, y0, x1, y1 in self.space_arr.tolist()]

    @functools.cached_property
    def centres(self) -> list[tuple[float, float]]:
        """Each creature's centre (`creature_centre`; the rows of `centre_arr`)."""
        return [(x, y) for x, y in self.centre_arr.tolist()]

    @property
    def seams(self) -> Seams:
        """Where two creatures' spaces meet (geometry.seams), found once per scene."""
        if self._seams is None:
            tr = self.tracer
            if self.hex is None:
                self._seams = box_seams(self.space_arr)
            else:
                owner = np.repeat(np.arange(len(self.cs), dtype=np.intp), tr._cell_count)
                self._seams = hex_seams(tr._cell_verts, owner)
        return self._seams

    def with_seams(self, hits: LineHits, starts: FloatArray, ends: FloatArray) -> LineHits:
        """The hits with the creatures of every seam a line runs along or pinch it squeezes
        through (both creatures of each): a line between two creatures side by side passes
        through creatures (choice 12), though it enters neither space."""
        if len(self.cs) < 2 or self.seams.empty:
            return hits
        sl, sc = seam_hits(self.seams, starts, ends)
        if not sl.size:
            return hits
        return replace(hits, creature_line=np.concatenate([hits.creature_line, sl]),
                       creature_idx=np.concatenate([hits.creature_idx, sc]))

    def ignored(self, a: int, t: int) -> set[int]:
        """Creatures that never stand between a and t: themselves and their mount or rider."""
        out = {a, t}
        for k in (a, t):
            if k in self.partner:
                out.add(self.partner[k])
        return out

    def steps(self, a: int, t: int) -> tuple[int, int, int]:
        """Grid steps between two creatures' spaces, across the map and vertically (on a hex
        grid: hexes between their footprints, as (n, 0, vertical))."""
        if self.hex is None:
            return steps_3d(self.cs[a], self.cs[t], self.grid)
        sz = vertical_steps_many(self.elev[a:a + 1], self.side[a:a + 1],
                                 self.elev[t:t + 1], self.side[t:t + 1])
        return int(self._hex_steps[a, t]), 0, int(sz[0])

    def steps_many(self, a: IntArray, t: IntArray,
                   ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Grid steps across the map between row-paired creatures' spaces, as `steps`
        counts them (on a hex grid: hexes between their footprints, and 0)."""
        if self.hex is None:
            return grid_steps_many(self.space_arr[a], self.space_arr[t], self.grid.size)
        sx: npt.NDArray[np.int64] = self._hex_steps[a, t].astype(np.int64)
        return sx, np.zeros(len(sx), dtype=np.int64)

    @functools.cached_property
    def _hex_steps(self) -> hexgrid.FootprintSteps:
        assert self.hex is not None
        return hexgrid.FootprintSteps.of(
            self.hex, [fp.cells for fp in hex_footprints(self.cs, self.grid)])

    def in_reach(self, a: int, t: int, reach: float) -> bool:
        """Whether t is within `reach` feet of a, counted in three dimensions."""
        sx, sy, sz = self.steps(a, t)
        return bool(within_reach_many(np.array([sx]), np.array([sy]), np.array([reach]),
                                      np.array([sz]))[0])

    def adjacent(self, a: int, t: int) -> bool:
        sx, sy, sz = self.steps(a, t)
        return sx <= 1 and sy <= 1 and sz <= 1

    def _samples(self, k: int) -> FloatArray:
        """Points standing for 'any part' of a creature's space: its corners (a hair inside)
        and centre; on a hex grid the corners of its hex footprint."""
        if self.hex is None:
            mine: FloatArray = self.samples[k]  # all creatures' at once (`samples`)
            return mine
        c = self.cs[k]
        return _hex_samples(self.hex, c.x, c.y, c.width, c.height, c.shape)

    def _blocked_roles(self, hits: LineHits, att: IntArray, tgt: IntArray, starts: FloatArray,
                       ends: FloatArray, origin: tuple[float, float] | None = None,
                       ) -> tuple[BoolArray, IntArray]:
        """Per line: blocked outright (line of effect); per wall hit, its role in three
        dimensions (geometry.vertical): 0 solid, 1 low, 2 improved, -1 nothing to this line."""
        tr = self.tracer
        solid, low, improved, partial = wall_roles_3d(tr, hits.wall_idx, hits.wall_line, att,
                                                      tgt, starts, ends, origin)
        limited = tr.wall_limited[hits.wall_idx]
        blocked = tr.per_line_any(hits.wall_line, solid & ~limited, hits.n)
        by_limited = limited_blocked(tr, hits.wall_line, hits.wall_idx, solid, starts, ends,
                                     hits.n)
        blocked |= by_limited
        blocked |= tr.region_lines(hits, RegionKind.BLOCKING)
        # A limited wall would block nothing alone: it counts only with a second one.
        solid &= ~limited | by_limited[hits.wall_line]
        # A wall lower than the sheet of sight (partial) crosses the line as a solid wall
        # does, for the degree, without stopping it; a limited one gives nothing alone.
        solid |= partial & ~limited
        roles: IntArray = np.where(solid, 0, np.where(low, 1, np.where(improved, 2, -1)))
        return blocked, roles

    def _solid(self, hits: LineHits, att: IntArray, tgt: IntArray, starts: FloatArray,
               ends: FloatArray, origin: tuple[float, float] | None = None,
               ) -> tuple[BoolArray, IntArray, BoolArray]:
        """`_blocked_roles`, and per creature hit, whether the sheet of sight meets the
        creature rather than passing over or under it."""
        blocked, roles = self._blocked_roles(hits, att, tgt, starts, ends, origin)
        creature_ok = creature_hits(self.tracer, hits, att, tgt, starts, ends, origin)
        return blocked, roles, creature_ok

    # -- the fast path: every pair at once ----------------------------------------------

    def fast_rows(self, a: IntArray, t: IntArray,
                  want_lines: bool) -> tuple[IntArray, list[tuple[TracedLine, ...]] | None]:
        """Per pair (a[k], t[k]): its level (TOTAL: no line of effect), and its traced centre
        line when asked; what `reference_rows` computes, for many pairs at once.

        The centre lines are traced first; only pairs whose centre line is blocked need the
        25 lines between their 'any part' samples, and of those only whether one is open
        (walls and terrain: creatures never block a line). Most of those lines are proved
        blocked by a few plain walls near the centre line (`_covered`); only the others are
        traced.

        Before any of it, pairs that one plain wall (or a run of them end to end) separates
        wholly are found by the kernel's walk over their corner lines (geometry.openings,
        'Sealed'; on a hex grid, the corners of a ring holding all of each creature,
        `seal_rings`): every line between the two spaces is blocked, so they are
        at TOTAL and nothing of theirs is traced (97% of the benchmark scene's pairs have
        every line blocked). With lines asked for, their centre lines are traced as
        drawn, and only their samples are left out."""
        # Line of effect depends on the two creatures, the walls and the terrain alone:
        # what an earlier snapshot of the same walls found for the same two creature
        # objects holds (a move changes one creature's object; the pairs whose centre
        # lines it crosses are asked again for their cover, not for their line of effect).
        known, seen = self._known_open(a, t)
        unknown = np.flatnonzero(~known)
        got = self._sealed_pairs(a[unknown], t[unknown])
        sealed = None
        if got is not None:
            sealed = np.zeros(len(a), dtype=bool)
            sealed[unknown] = got
            self._remember_open(a[unknown[got]], t[unknown[got]],
                                np.zeros(int(got.sum()), dtype=bool))
        if want_lines:
            return self._rows(a, t, want_lines, sealed, known, seen)
        closed = known & ~seen if sealed is None else (known & ~seen) | sealed
        if not closed.any():
            return self._rows(a, t, False, sealed, known, seen)
        level = np.full(len(a), TOTAL, dtype=np.intp)
        rest = np.flatnonzero(~closed)
        if rest.size:
            level[rest] = self._rows(a[rest], t[rest], False,
                                     None if sealed is None else sealed[rest],
                                     known[rest], seen[rest])[0]
        return level, None

    def _rows(self, a: IntArray, t: IntArray, want_lines: bool, sealed: BoolArray | None,
              known: BoolArray | None = None, seen: BoolArray | None = None,
              ) -> tuple[IntArray, list[tuple[TracedLine, ...]] | None]:
        """`fast_rows` from the centre lines on; `sealed`: `_sealed_pairs`' answer for
        these pairs (None: not asked), whose sealed pairs' samples are not traced; `known`:
        the pairs whose line of effect an earlier snapshot found (`seen`), not looked for
        again."""
        n = len(a)
        starts, ends = self.centre_arr[a], self.centre_arr[t]
        # Creatures in the way are looked for below, once it is known which pairs have a
        # line of effect, unless lines are drawn (every line names its creatures).
        hits = self._trace_lines(starts, ends, creatures=want_lines)
        if want_lines:
            hits = self.with_seams(hits, starts, ends)
        blocked, roles = self._blocked_roles(hits, a, t, starts, ends)
        open_any = ~blocked
        ask = blocked.copy()
        if sealed is not None:
            # (A sealed pair's centre line is blocked too: every line between the spaces
            # is.)
            ask &= ~sealed
        if known is not None and seen is not None:
            open_any[known] = seen[known]
            ask &= ~known
        if self.hex is not None and ask.any():
            # Creatures of several hexes walled apart by what the sealing walk does not
            # look for (a room's corner, a banded wall filling the sheet): proved so once
            # per pair of creatures, not per pair of hexes, and none of their lines traced.
            apart = self._walled_apart(a, t, ask)
            if apart.any():
                # (They are asked pairs: their centre line is stopped, open_any False.)
                sealed = apart if sealed is None else sealed | apart
                ask &= ~apart
                self._remember_open(a[apart], t[apart], np.zeros(int(apart.sum()), dtype=bool))
        shut = np.flatnonzero(ask)
        if shut.size:
            # (Padding samples, hex footprints of fewer corners, repeat a real line:
            # `_covered` counts them covered, so they are not traced.)
            todo = ~self._covered(shut, hits, starts, ends, a, t)
            rows, cols = np.nonzero(todo)
            if rows.size:
                open_any[shut] = self._open_lines(a[shut], t[shut], rows, cols)
        level = np.zeros(n, dtype=np.intp)
        table = self.wall_level
        role_level = np.array([table["solid"], table["low"], table["improved"]], dtype=np.intp)
        sel = roles >= 0
        np.maximum.at(level, hits.wall_line[sel], role_level[roles[sel]])
        if hits.region_idx.size:
            kinds = self.tracer.region_kind
            worth = np.array([self.rules.REGION_LEVEL[kinds[r]] for r in hits.region_idx],
                             dtype=np.intp)
            np.maximum.at(level, hits.region_line, worth)
        open_any = self._through_openings(a, t, open_any, sealed, ask)
        # Creatures in the way count only on the centre lines of pairs with a line of
        # effect (the others are at TOTAL whatever stands on them): only those lines are
        # looked at for them, unless lines are drawn. On the hex scenes a third of the
        # centre lines the sealing walk leaves have none, and each creature a line's box
        # test finds there is put to the footprint's exact test.
        on = np.arange(n) if want_lines else np.flatnonzero(open_any)
        crowd = hits if want_lines else self.with_seams(
            self._crowd_lines(starts[on], ends[on]), starts[on], ends[on])
        keep = self._crowd_level(level, crowd, on, a, t, starts, ends)
        level = np.minimum(level, GREATER)
        # Every pair's answer not known before is kept, those whose centre line is open
        # too: a token moved back where it stood then has nothing to look for. (The sealed
        # pairs `fast_rows` kept already.)
        fresh = np.ones(n, dtype=bool) if known is None else ~known
        if sealed is not None:
            fresh &= ~sealed
        new = np.flatnonzero(fresh)
        if new.size:
            self._remember_open(a[new], t[new], open_any[new])
        level[~open_any] = TOTAL
        lines = self._fast_traced(hits, roles, keep, blocked, starts, ends) if want_lines \
            else None
        return level, lines

    def _crowd_level(self, level: IntArray, hits: LineHits, on: IntArray, a: IntArray,
                     t: IntArray, starts: FloatArray, ends: FloatArray) -> BoolArray:
        """Raise the level of each pair on[k] (a[on[k]] against t[on[k]], its centre line
        from starts[on[k]] to ends[on[k]]: line k of `hits`) to what the creatures standing
        on its centre line give (`creature_levels`), those the sheet of sight meets rather
        than passing over or under; returns which of the hits' creatures count."""
        sa, st = a[on], t[on]
        ok = creature_hits(self.tracer, hits, sa, st, starts[on], ends[on])
        cl, ci = hits.creature_line, hits.creature_idx
        ca, ct = sa[cl], st[cl]
        keep: BoolArray = ok & (ci != ca) & (ci != ct) & (ci != self.partner_arr[ca]) \
            & (ci != self.partner_arr[ct])
        if keep.any():
            np.maximum.at(level, on[cl[keep]],
                          self.rules.creature_levels(self, ci[keep], ca[keep], ct[keep]))
        return keep

    def _through_openings(self, a: IntArray, t: IntArray, open_any: BoolArray,
                          sealed: BoolArray | None = None,
                          ask: BoolArray | None = None) -> BoolArray:
        """`open_any` (per pair: some 'any part' line is unblocked) with the pairs whose
        every sample line is blocked looked at exactly: a line of effect through an opening
        narrower than the samples' spacing still exists (geometry.openings), and the pair's
        degree is then its centre line's, as for any pair with line of effect. `sealed`:
        `_sealed_pairs`' answer, if asked: the sealed pairs have none, and the others'
        walk is not done again. `ask`: only these pairs are looked at (the others' answer
        is known)."""
        shut = ~open_any if sealed is None else ~open_any & ~sealed
        if ask is not None:
            shut &= ask
        rows = np.flatnonzero(shut)
        if rows.size == 0:
            return open_any
        out = open_any.copy()
        # On a hex grid the walk was over each creature's one hull, not over the pairs of
        # hexes the exact test looks at: it is not taken as done for them.
        out[rows] = openings.pairs_line_of_effect(self.tracer, self.loe_spaces, a[rows],
                                                  t[rows],
                                                  walked=sealed is not None and self.hex is None)
        return out

    @functools.cached_property
    def _seen(self) -> kept.Kept:
        """This snapshot's walls' table of line of effect (`rulesets.kept`)."""
        return kept.table(self.scene, self.rules, self.options)

    def _known_open(self, a: IntArray, t: IntArray) -> tuple[BoolArray, BoolArray]:
        """Per pair (a[k], t[k]): whether an earlier snapshot of these walls (or this one)
        worked out its line of effect for these two creature objects, and what it found."""
        found, values = self._seen.known(a, t)
        if not found.any():
            return found, found.copy()
        return found, np.fromiter(map(bool, values), dtype=bool, count=len(values))

    def _remember_open(self, a: IntArray, t: IntArray, value: BoolArray) -> None:
        """Note the pairs' line of effect for later snapshots of these walls."""
        self._seen.remember(a, t, value.tolist())

    def _walled_apart(self, a: IntArray, t: IntArray, ask: BoolArray) -> BoolArray:
        """Per pair (a[k], t[k]): whether it is asked (`ask`), one of the two creatures has
        several hexes, and walls separate the two creatures' `seal_rings` wholly
        (geometry.openings.walled_apart): every line between their spaces is stopped, so
        no line of effect. (A pair of one hex each is left to the exact test, whose proof
        for its one pair of hexes is the same.)"""
        out = np.zeros(len(a), dtype=bool)
        count = self.loe_spaces.count
        rows = np.flatnonzero(ask & ((count[a] > 1) | (count[t] > 1)))
        if rows.size:
            out[rows] = openings.walled_apart(self.tracer, *self.seal_rings, a[rows], t[rows])
        return out

    def _sealed_pairs(self, a: IntArray, t: IntArray) -> BoolArray | None:
        """Per pair: whether one plain wall, or a run of them end to end, separates the two
        creatures' `seal_rings` wholly (geometry.openings.sealed_pairs; for a whole table,
        a wall plain but for a band holding both creatures whole counts too); None with no
        such wall."""
        return openings.sealed_pairs(self.tracer, *self.seal_rings, a, t)

    @functools.cached_property
    def seal_rings(self) -> tuple[FloatArray, IntArray]:
        """Per creature, a convex ring holding its whole space and its 'any part' samples,
        and its number of corners: on a square grid its space a hair inside (the samples
        are its corners); on a hex grid the hull of its hexes a hair inside, grown a hair
        to hold its footprint's corners (geometry.openings.hull_rings)."""
        if self.hex is None:
            rings = self.loe_spaces.rings
            return rings, np.full(len(rings), rings.shape[1], dtype=np.intp)
        # Each creature's ring once per snapshot (a move changes one creature's); each
        # footprint's once (`_seal_rings_of`).
        return openings.padded_rings(per_creature(
            "degrees seal ring", self.cs, self.grid, self._seal_rings_of))

    def _seal_rings_of(self, todo: list[int]) -> list[FloatArray]:
        """`seal_rings` of the creatures at these positions: each footprint's ring once
        (a token moving back to where one stood finds it again), the missing worked out
        together."""
        keys = [(self.hex, c.x, c.y, c.width, c.height, c.shape)
                for c in (self.cs[k] for k in todo)]
        with _SEAL_RINGS_LOCK:
            held = [_SEAL_RINGS.get(k) for k in keys]
            for k, h in zip(keys, held, strict=True):
                if h is not None:
                    _SEAL_RINGS.move_to_end(k)
        missing = np.array([i for i, h in enumerate(held) if h is None], dtype=np.intp)
        if missing.size:
            who = np.asarray(todo, dtype=np.intp)[missing]
            rings, corners = openings.hull_rings(self.loe_spaces.take(who),
                                                 self.samples[who], self.sample_valid[who])
            with _SEAL_RINGS_LOCK:
                for j, i in enumerate(missing.tolist()):
                    ring = rings[j, :corners[j]].copy()
                    ring.flags.writeable = False
                    held[i] = _SEAL_RINGS[keys[i]] = ring
                while len(_SEAL_RINGS) > _SEAL_RINGS_KEPT:
                    _SEAL_RINGS.popitem(last=False)
        return [h for h in held if h is not None]

    @functools.cached_property
    def loe_spaces(self) -> openings.Spaces:
        """Every creature's space for the exact line of effect, a hair inside (as the 'any
        part' samples)."""
        return openings.spaces_of(self.tracer, INSET_PX)

    def _trace_lines(self, starts: FloatArray, ends: FloatArray,
                     creatures: bool = True) -> LineHits:
        """`Tracer.trace(starts, ends)`, hit for hit, with walls tested through the block
        kernel (each line a block of one: the same prune, the same exact test, less
        gathering); creatures' spaces only when asked (`_crowd_lines`)."""
        tr = self.tracer
        wl, wi, _ = kernel.blocks_cross_walls(starts[:, None, :], ends[:, None, :], tr.wall_xy)
        if wl.size:
            keep = tr.facing(wi, starts[wl])
            wl, wi = wl[keep], wi[keep]
        rl, ri = kernel.segments_enter_polygons(starts, ends, tr.region_polys)
        crowd = self._crowd_lines(starts, ends) if creatures else None
        empty = np.empty(0, dtype=np.intp)
        return LineHits(len(starts), wl, wi,
                        empty if crowd is None else crowd.creature_line,
                        empty if crowd is None else crowd.creature_idx, rl, ri)

    def _crowd_lines(self, starts: FloatArray, ends: FloatArray) -> LineHits:
        """The creatures' spaces the lines enter, alone (no wall, no terrain), as
        `Tracer.trace` finds them: the box test, then on a hex grid the footprint's exact
        test."""
        tr = self.tracer
        cl, ci = kernel.segments_enter_boxes(starts, ends, tr.boxes)
        cl, ci = tr.exact_footprints(starts, ends, cl, ci)
        empty = np.empty(0, dtype=np.intp)
        return LineHits(len(starts), empty, empty, cl, ci, empty, empty)

    @property
    def samples(self) -> FloatArray:
        """Per creature, its 'any part' sample points (n, P, 2), the centre last: 5 on a
        square grid; on a hex grid its footprint's corners, as many as the creature with the
        most has (others repeat their centre before it: see `sample_valid`)."""
        if self._sample_arr is None and self.hex is None:
            # Square grids: every creature's corners a hair inside, then its centre, for
            # all spaces at once.
            sp = self.space_arr
            mid = np.stack([(sp[:, 0] + sp[:, 2]) / 2, (sp[:, 1] + sp[:, 3]) / 2], axis=1)
            self._sample_arr = np.concatenate([inset_many(corners_many(sp), sp),
                                               mid[:, None, :]], axis=1)
            self._sample_valid = np.ones(self._sample_arr.shape[:2], dtype=bool)
        if self._sample_arr is None:
            each = per_creature("degrees hex samples", self.cs, self.grid,
                                lambda todo: [self._samples(k) for k in todo])
            width = max((len(s) for s in each), default=5)
            arr = np.empty((len(each), width, 2), dtype=np.float64)
            valid = np.zeros((len(each), width), dtype=bool)
            for k, s in enumerate(each):
                arr[k, :len(s) - 1] = s[:-1]
                arr[k, len(s) - 1:] = s[-1]
                valid[k, :len(s) - 1] = True
                valid[k, -1] = True
            self._sample_arr, self._sample_valid = arr, valid
        return self._sample_arr

    @property
    def sample_valid(self) -> BoolArray:
        """Per creature and sample slot: a sample of its own (False: a repeat of its centre
        filling the row)."""
        if self._sample_valid is None:
            _ = self.samples
        assert self._sample_valid is not None
        return self._sample_valid

    @functools.cached_property
    def sample_count(self) -> IntArray:
        """Per creature, how many samples of its own it has (its first count - 1 slots,
        and the last: its centre)."""
        out: IntArray = self.sample_valid.sum(axis=1)
        return out

    def _valid_lines(self, a: IntArray, t: IntArray) -> BoolArray:
        """Per pair and sample line (column p * P + q): both ends are samples of their own
        (lines from or to a repeated centre repeat the centre's own lines)."""
        va, vt = self.sample_valid[a], self.sample_valid[t]
        out: BoolArray = (va[:, :, None] & vt[:, None, :]).reshape(len(a), -1)
        return out

    @property
    def sample_boxes(self) -> FloatArray:
        """Per creature, the bounding box (x0, y0, x1, y1) of its sample points."""
        if self._sample_box_arr is None:
            pts = self.samples
            self._sample_box_arr = np.concatenate([pts.min(axis=1), pts.max(axis=1)], axis=1)
        return self._sample_box_arr

    def _covered(self, shut: IntArray, hits: LineHits, starts: FloatArray, ends: FloatArray,
                 a: IntArray, t: IntArray) -> BoolArray:
        """Per pair in `shut` (pairs whose centre line is blocked) and per sample line (row
        k, column p * 5 + q): whether the line is certainly blocked, by a wall plain to the
        pair (solid, both ways, not limited, and with no height band or one reaching from
        below both creatures to above both: it blocks every line of the pair it crosses)
        near the centre line.

        A pair is usually walled in by the first or the last wall its centre line crosses,
        or by walls joined to them end to end (walls are drawn in segments): only those are
        tested against the 25 lines, with the kernel's exact row-paired test and the prune
        the tracer applies, so a line found blocked here is blocked in `reference_rows`.
        Lines not found blocked are traced (`_open_lines`)."""
        tr = self.tracer
        # A line from or to a padding slot (a hex footprint of fewer corners than the
        # largest) is no line of the pair: counted covered, so that a pair whose own lines
        # the first wall covers all is not tested against the last one too.
        covered = ~self._valid_lines(a[shut], t[shut])
        plain = _plain_walls(tr)
        wl, wi = hits.wall_line, hits.wall_idx
        on_shut = np.zeros(hits.n, dtype=bool)
        on_shut[shut] = True
        sel = plain[wi] & on_shut[wl]
        sel[sel] = self._spans_pair(wl[sel], wi[sel], a, t)
        if not sel.any():
            return covered
        cl, cw = wl[sel], wi[sel]
        along = wall_crossing(starts[cl], ends[cl], tr.wall_xy[cw])
        order = np.lexsort((along, cl))
        cl, cw = cl[order], cw[order]
        first = np.ones(len(cl), dtype=bool)
        first[1:] = cl[1:] != cl[:-1]
        last = np.ones(len(cl), dtype=bool)
        last[:-1] = cl[:-1] != cl[1:]
        pos = np.full(hits.n, -1, dtype=np.intp)
        pos[shut] = np.arange(len(shut))
        # The wall nearest the attacker first; the one nearest the target for pairs left.
        self._cover(covered, pos, cl[first], cw[first], a, t)
        left = ~np.logical_and.reduce(covered, axis=1)[pos[cl]]
        sel = last & ~first & left
        if sel.any():
            self._cover(covered, pos, cl[sel], cw[sel], a, t)
        return covered

    def _spans_pair(self, cl: IntArray, cw: IntArray, a: IntArray, t: IntArray) -> BoolArray:
        """Per (pair cl[k], wall cw[k]): whether the wall's height band (if any) reaches from
        below both creatures' vertical extents to above both, with a margin: the sheet of
        sight between them then lies wholly inside the band wherever a line crosses it
        (geometry.vertical), so the wall (solid) stops every line of theirs it crosses."""
        tr = self.tracer
        bottom, top = tr.wall_bottom[cw], tr.wall_top[cw]
        ca, ct = a[cl], t[cl]
        low = np.minimum(tr.elev[ca], tr.elev[ct])
        high = np.maximum(tr.elev[ca] + tr.tall[ca], tr.elev[ct] + tr.tall[ct])
        with np.errstate(invalid="ignore"):
            spans: BoolArray = ((np.isnan(bottom) | (bottom <= low - _BAND_MARGIN_FT))
                                & (np.isnan(top) | (top >= high + _BAND_MARGIN_FT)))
        return spans

    def _cover(self, covered: BoolArray, pos: IntArray, cl: IntArray, cw: IntArray,
               a: IntArray, t: IntArray) -> None:
        """Mark in `covered` (row pos[line] per pair, a column per sample line) the sample
        lines of pair cl[k] that wall cw[k], or a wall joined to it end to end, crosses,
        where the wall is plain to the pair."""
        tr = self.tracer
        indptr, nbrs = _wall_neighbours(tr)
        deg = indptr[cw + 1] - indptr[cw]
        within = kernel.within_runs(deg)
        cw = nbrs[np.repeat(indptr[cw], deg) + within]
        cl = np.repeat(cl, deg)
        m = max(1, len(tr.walls))
        key = np.unique(cl.astype(np.int64) * m + cw)
        cl, cw = (key // m).astype(np.intp), (key % m).astype(np.intp)
        spans = self._spans_pair(cl, cw, a, t)
        cl, cw = cl[spans], cw[spans]
        # Walls out of the pair's box of lines meet none of them (the tracer's prune).
        box = (np.take(self.sample_boxes, a[cl], axis=0),
               np.take(self.sample_boxes, t[cl], axis=0))
        w = np.take(tr.wall_xy, cw, axis=0)
        near = ((np.minimum(box[0][:, 0], box[1][:, 0]) <= np.maximum(w[:, 0], w[:, 2]))
                & (np.maximum(box[0][:, 2], box[1][:, 2]) >= np.minimum(w[:, 0], w[:, 2]))
                & (np.minimum(box[0][:, 1], box[1][:, 1]) <= np.maximum(w[:, 1], w[:, 3]))
                & (np.maximum(box[0][:, 3], box[1][:, 3]) >= np.minimum(w[:, 1], w[:, 3])))
        cl, cw = cl[near], cw[near]
        xy = tr.wall_xy
        width = self.samples.shape[1]
        # By the pairs' numbers of samples (one group on a square grid; on a hex grid a
        # creature's samples are its footprint's corners, padded to the largest with
        # repeats of its centre): each group's lines are its pairs' own, as one block.
        na, nt = self.sample_count[a[cl]], self.sample_count[t[cl]]
        kinds = na * (width + 1) + nt
        for kind in np.unique(kinds).tolist():
            group = np.flatnonzero(kinds == kind)
            # Every pair of the group has its own samples in the same slots.
            first = cl[group[0]]
            slots_a = np.flatnonzero(self.sample_valid[a[first]])
            slots_t = np.flatnonzero(self.sample_valid[t[first]])
            cols = (slots_a[:, None] * width + slots_t[None, :]).reshape(-1)
            per = len(cols)
            step = max(1, _CHUNK_ROWS // per)
            for c0 in range(0, len(group), step):
                pc, wc = cl[group[c0:c0 + step]], cw[group[c0:c0 + step]]
                n_e = len(pc)
                sa = np.take(self.samples, a[pc], axis=0)[:, slots_a]
                st = np.take(self.samples, t[pc], axis=0)[:, slots_t]
                # Each (pair, wall) row a block of its pair's ka x kt lines, tested by the
                # kernel's block test (the crossing convention, dense over the block).
                hit, _ = kernel.block_hits(sa, st, xy, np.arange(n_e), wc)
                row, col = np.nonzero(hit.reshape(n_e, per))
                covered[pos[pc][row], cols[col]] = True

    def _open_lines(self, a: IntArray, t: IntArray, rows: IntArray,
                    cols: IntArray) -> BoolArray:
        """Per pair (a[k], t[k]): whether one of its sample lines (pair rows[j], line
        cols[j]: a's sample cols[j] // 5 to t's sample cols[j] % 5) is unblocked (walls,
        limited walls, blocking terrain), each traced as `reference_rows` traces it."""
        per = self.samples.shape[1]
        any_open = np.zeros(len(a), dtype=bool)
        # In rounds: a few lines of every pair first, then more, then the rest, of the pairs
        # with no open line yet. A pair with an open line usually has many (on the hex
        # benchmark scenes two thirds of the lines left to trace are such pairs', 85% on
        # the plain one); the answer is the same as tracing every line. A few lines (a
        # move's) go in one round: a round's cost is then its calls'.
        # In chunks: a scene of walls no plain wall proves anything about leaves up to 25
        # lines per pair (hundreds on a hex grid), each with many hits.
        for k in kernel.in_rounds(rows, _OPEN_ROUNDS, _OPEN_ONE_ROUND, _CHUNK_LINES,
                                  lambda k: any_open[rows[k]]):
            r, c = rows[k], cols[k]
            starts = self.samples[a[r], c // per]
            ends = self.samples[t[r], c % per]
            hits = self._trace_lines(starts, ends, creatures=False)
            blocked, _ = self._blocked_roles(hits, a[r], t[r], starts, ends)
            any_open[r[~blocked]] = True
        return any_open

    def _fast_traced(self, hits: LineHits, roles: IntArray, keep: BoolArray,
                     blocked: BoolArray, starts: FloatArray,
                     ends: FloatArray) -> list[tuple[TracedLine, ...]]:
        """Each pair's centre line as drawn, with what counted on it (as `_traced`)."""
        tr = self.tracer
        walls: list[set[str]] = [set() for _ in range(hits.n)]
        tokens: list[set[str]] = [set() for _ in range(hits.n)]
        regions: list[set[str]] = [set() for _ in range(hits.n)]
        sel = roles >= 0
        for line, w in zip(hits.wall_line[sel].tolist(), hits.wall_idx[sel].tolist(),
                           strict=True):
            walls[line].add(tr.walls[w].id)
        for line, c in zip(hits.creature_line[keep].tolist(),
                           hits.creature_idx[keep].tolist(), strict=True):
            tokens[line].add(self.cs[c].id)
        for line, r in zip(hits.region_line.tolist(), hits.region_idx.tolist(), strict=True):
            regions[line].add(tr.regions[r].id)
        s, e, b = starts.tolist(), ends.tolist(), blocked.tolist()
        return [(TracedLine((float(s[k][0]), float(s[k][1])), (float(e[k][0]), float(e[k][1])),
                            bool(b[k]), tuple(sorted(walls[k])), tuple(sorted(tokens[k])),
                            tuple(sorted(regions[k]))),)
                for k in range(hits.n)]

    def fast_flanking(self, a: IntArray, t: IntArray, levels: IntArray,
                      steps: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64],
                                   npt.NDArray[np.int64]],
                      ) -> dict[tuple[int, int], tuple[int, tuple[str, ...]]]:
        """`reference_flanking` for the pairs (a[k], t[k]) at their `levels`, with who
        threatens each target found for all targets at once: only creatures within their
        reach of a target can threaten it, so only their levels are traced when the pairs
        asked for lack them; and only an attacker that threatens its target can flank it,
        so only those targets' threats are looked for (a move asks for the mover against
        every target, and it threatens a few). `steps`: the pairs' grid steps along x, y
        and z."""
        n = len(self.cs)
        sx, sy, sz = steps
        threat = (levels != TOTAL) & (a != t) & (self.reach[a] > 0) \
            & within_reach_many(sx, sy, self.reach[a], sz)
        targets = np.unique(t[threat])
        if targets.size == 0:
            return {}
        bb = np.repeat(np.arange(n, dtype=np.intp), len(targets))
        tt = np.tile(targets, n)
        sx, sy = self.steps_many(bb, tt)
        sz = vertical_steps_many(self.elev[bb], self.side[bb], self.elev[tt], self.side[tt])
        near = (bb != tt) & (self.reach[bb] > 0) & within_reach_many(sx, sy, self.reach[bb], sz)
        bb, tt = bb[near], tt[near]
        # The levels known from the pairs asked for, by pair code (a pair asked twice has
        # one level); the candidates' others are traced.
        code = bb * n + tt
        asked = a.astype(np.intp) * n + t
        order = np.argsort(asked, kind="stable")
        asked, asked_level = asked[order], levels[order]
        at = np.minimum(np.searchsorted(asked, code), len(asked) - 1)
        found = asked[at] == code
        level = np.where(found, asked_level[at], TOTAL)
        missing = np.flatnonzero(~found)
        if missing.size:
            level[missing] = self.fast_rows(bb[missing], tt[missing], False)[0]
        # Who threatens each target, by side, in creature order (as the reference lists
        # them): the allies among whom each attacker's partners are matched. Only an
        # attacker threatening the target can flank it (its level not TOTAL, the target
        # within its reach: `threat`), so only its target's and side's group is matched (a
        # move asks for the mover against every target, and it threatens a few).
        side, n_sides = self._sides
        rows = np.flatnonzero(threat)
        asked_key = t[rows].astype(np.int64) * n_sides + side[a[rows]]
        ok = level != TOTAL
        tb, bt = tt[ok], bb[ok]
        key = tb.astype(np.int64) * n_sides + side[bt]
        mark = np.zeros(len(self.cs) * n_sides, dtype=bool)
        mark[asked_key] = True
        wanted = mark[key]
        key, bt = key[wanted], bt[wanted]
        order = np.lexsort((bt, key))
        key, bt = key[order], bt[order]
        cuts = np.flatnonzero(np.diff(key)) + 1
        starts = np.concatenate([[0], cuts]).astype(np.intp) if len(key) else cuts
        keys = key[starts].tolist()
        members = bt.tolist()
        bounds = [*starts.tolist(), len(members)]
        groups = [(k // n_sides, members[lo:hi])
                  for k, lo, hi in zip(keys, bounds, bounds[1:], strict=False)]
        by_target = dict(zip(keys, self._partners_many(groups), strict=True))
        out: dict[tuple[int, int], tuple[int, tuple[str, ...]]] = {}
        ids = [c.id for c in self.cs]
        for ak, tk, k in zip(a[rows].tolist(), t[rows].tolist(), asked_key.tolist(),
                             strict=True):
            bonus, partners = by_target.get(k, _NO_PARTNERS)
            if bonus and partners.get(ak):
                out[(ak, tk)] = (bonus, tuple(ids[p] for p in partners[ak]))
        return out

    # -- the reference: pair by pair ----------------------------------------------------

    def reference_rows(self, pairs: Sequence[tuple[int, int]], want_lines: bool) -> list[_Row]:
        if not pairs:
            return []
        starts, ends, att, tgt, group = [], [], [], [], []
        for k, (a, t) in enumerate(pairs):
            sa, st = self._samples(a), self._samples(t)
            # Line 0 of each group is centre to centre; the rest sample 'any part'.
            starts.append(np.vstack([[self.centres[a]], np.repeat(sa, len(st), 0)]))
            ends.append(np.vstack([[self.centres[t]], np.tile(st, (len(sa), 1))]))
            n = 1 + len(sa) * len(st)
            att.extend([a] * n)
            tgt.extend([t] * n)
            group.extend([k] * n)
        s, e = np.concatenate(starts), np.concatenate(ends)
        tgt_a = np.array(tgt, dtype=np.intp)
        group_a = np.array(group, dtype=np.intp)
        hits = self.with_seams(self.tracer.trace(s, e), s, e)
        blocked, roles, ok = self._solid(hits, np.array(att, dtype=np.intp), tgt_a, s, e)
        first = np.concatenate([[0], np.nonzero(np.diff(group_a))[0] + 1])
        open_any = np.zeros(len(pairs), dtype=bool)
        np.logical_or.at(open_any, group_a, ~blocked)
        pa = np.array(pairs, dtype=np.intp).reshape(-1, 2)
        open_any = self._through_openings(pa[:, 0], pa[:, 1], open_any)
        rows = []
        for k, (a, t) in enumerate(pairs):
            line = int(first[k])
            level = self._centre_level(hits, roles, ok, line, a, t) if open_any[k] else TOTAL
            traced = self._traced(hits, roles, ok, blocked, s, e, line, a, t) if want_lines \
                else None
            rows.append(_Row(level, traced))
        return rows

    def _centre_level(self, hits: LineHits, roles: np.ndarray, ok: np.ndarray, line: int,
                      a: int,
                      t: int) -> int:
        level = NONE
        table = self.wall_level
        names = ("solid", "low", "improved")
        for role in roles[hits.wall_line == line]:
            if role >= 0:
                level = max(level, table[names[role]])
        for r in hits.region_idx[hits.region_line == line]:
            level = max(level, self.rules.REGION_LEVEL[self.tracer.region_kind[r]])
        on_line = (hits.creature_line == line) & ok
        for c in hits.creature_idx[on_line]:
            if c in self.ignored(a, t):
                continue
            level = max(level, self.rules.creature_level(self, int(c), a, t))
        return min(level, GREATER)

    def _traced(self, hits: LineHits, roles: np.ndarray, ok: np.ndarray, blocked: np.ndarray,
                s: FloatArray,
                e: FloatArray, line: int, a: int, t: int) -> tuple[TracedLine, ...]:
        tr = self.tracer
        walls = hits.wall_idx[(hits.wall_line == line) & (roles >= 0)]
        on_line = (hits.creature_line == line) & ok
        crs = [c for c in hits.creature_idx[on_line] if c not in self.ignored(a, t)]
        regs = hits.region_idx[hits.region_line == line]
        return (TracedLine((float(s[line, 0]), float(s[line, 1])),
                           (float(e[line, 0]), float(e[line, 1])), bool(blocked[line]),
                           tuple(sorted({tr.walls[w].id for w in walls})),
                           tuple(sorted({self.cs[c].id for c in crs})),
                           tuple(sorted({tr.regions[r].id for r in regs}))),)

    def _threatens(self, b: int, t: int, rows: dict[tuple[int, int], int]) -> bool:
        c = self.cs[b]
        if c.reach <= 0:
            return False  # creatures with 0 reach cannot flank
        if not self.in_reach(b, t, c.reach):
            return False
        return rows.get((b, t), TOTAL) != TOTAL

    def reference_flanking(self, pairs: Sequence[tuple[int, int]], rows: Sequence[_Row],
                           ) -> dict[tuple[int, int], tuple[int, tuple[str, ...]]]:
        """Per (attacker, target): the flanking bonus and the attacker's flanking partners.

        Allies (same disposition) that threaten the target and stand on opposite sides or
        corners form flanking pairs; the bonus is the number of disjoint pairs around the
        target (a maximum matching), capped by the target's perimeter: 2·side + 2 pairs
        (+4 for a Medium creature, +6 Large, +8 Huge, +10 Gargantuan, +14 Colossal).
        """
        levels = {pair: row.level for pair, row in zip(pairs, rows, strict=True)}
        needed = {(b, t) for _, t in pairs for b in range(len(self.cs))
                  if b != t and (b, t) not in levels}
        if needed:
            extra = sorted(needed)
            for pair, row in zip(extra, self.reference_rows(extra, False), strict=True):
                levels[pair] = row.level
        out: dict[tuple[int, int], tuple[int, tuple[str, ...]]] = {}
        by_target: dict[tuple[int, int], tuple[int, dict[int, list[int]]]] = {}
        for a, t in pairs:
            key = (t, self.cs[a].disposition)
            if key not in by_target:
                side = self.cs[a].disposition
                who = [b for b, c in enumerate(self.cs)
                       if b != t and c.disposition == side and self._threatens(b, t, levels)]
                by_target[key] = self._partners(t, who)
            bonus, partners = by_target[key]
            if bonus and partners.get(a):
                out[(a, t)] = (bonus, tuple(self.cs[p].id for p in partners[a]))
        return out

    # -- flanking ---------------------------------------------------------------------------

    def _partners(self, t: int, who: Sequence[int]) -> tuple[int, dict[int, list[int]]]:
        """The flanking bonus around t for these allies threatening it (in creature order),
        and each one's flanking partners among them."""
        box = self.spaces[t]
        partners: dict[int, list[int]] = {b: [] for b in who}
        edges = []
        et, st = float(self.elev[t]), float(self.side[t])
        crosses = self._crosses_target(t, box, et, et + st)

        def centres(b: int) -> list[tuple[float, float, float]]:
            z = flank_height(float(self.elev[b]), float(self.side[b]), et, st)
            return [(*centre(sq), z) for sq in squares(self.cs[b], self.grid)]

        points = {b: centres(b) for b in who}
        for b, d in itertools.combinations(who, 2):
            if crosses(points[b], points[d]):
                partners[b].append(d)
                partners[d].append(b)
                edges.append((b, d))
        return min(_max_matching(edges), self._flank_cap(t)), partners

    def _flank_cap(self, t: int) -> int:
        """The most flanking pairs around t: 2 x its side in squares + 2."""
        side_squares = max(1, round(max(self.cs[t].width, self.cs[t].height)))
        return 2 * side_squares + 2

    def _partners_many(self, groups: Sequence[tuple[int, Sequence[int]]],
                       ) -> list[tuple[int, dict[int, list[int]]]]:
        """`_partners` of several targets, each with its allies threatening it (in creature
        order), at once: every line between two allies' squares' centres, around every
        target, tested in one array computation (geometry.flanking's `_many` tests, the
        same answer line by line). A group whose allies have more than _FLANK_POINTS
        squares between them is `_partners`' (its tests skip the pairs that cannot cross:
        two huge allies are millions of lines). `_partners` is the reference this is held
        to, pair by pair."""
        out: list[tuple[int, dict[int, list[int]]] | None] = [None] * len(groups)
        # Every ally's points (the centres of its squares), group after group; every two
        # points of two allies of a group a line.
        xy: list[FloatArray] = []
        ally: list[int] = []
        point_group: list[int] = []
        seg_i, seg_j, seg_pair = [], [], []
        n_pairs = [0] * len(groups)
        for g, (t, who) in enumerate(groups):
            k = len(who)
            if k < 2:
                out[g] = (0, {b: [] for b in who})
                continue
            mine = [self._square_centres(b) for b in who]
            counts = [len(m) for m in mine]
            total = sum(counts)
            if total > _FLANK_POINTS:
                out[g] = self._partners(t, who)
                continue
            i, j = upper_pairs(total)
            if total == k:
                owner_i, owner_j = i, j
            else:
                # (owner ascends with the point's place: owner[i] <= owner[j].)
                owner = np.repeat(np.arange(k), counts)
                two = owner[i] != owner[j]
                i, j = i[two], j[two]
                owner_i, owner_j = owner[i], owner[j]
            first = len(ally)
            seg_i.append(i + first)
            seg_j.append(j + first)
            seg_pair.append((owner_i * k + owner_j, g))
            xy.extend(mine)
            ally.extend(np.repeat(who, counts).tolist() if total != k else who)
            point_group.extend([t] * total)
            n_pairs[g] = k * k
        if sum(len(i) for i in seg_i) <= (_FLANK_FEW if self.hex is None else _FLANK_FEW_HEX):
            # A few lines (a move's mover against its few targets): pair by pair is
            # quicker than the arrays' fixed costs.
            return [o if o is not None else self._partners(t, who)
                    for o, (t, who) in zip(out, groups, strict=True)]
        base = np.cumsum([0, *n_pairs])
        hit = np.zeros(int(base[-1]), dtype=bool)
        if seg_i:
            b_arr = np.array(ally, dtype=np.intp)
            t_arr = np.array(point_group, dtype=np.intp)
            # `flank_height` of every point at once (the same arithmetic).
            middle = self.elev[t_arr] + self.side[t_arr] / 2
            low, side = self.elev[b_arr], self.side[b_arr]
            z = np.where((low <= middle) & (middle <= low + side), middle, low + side / 2)
            points = np.column_stack([np.concatenate(xy), z])
            i_all, j_all = np.concatenate(seg_i), np.concatenate(seg_j)
            pair = np.concatenate([base[g] + code for code, g in seg_pair])
            crossed = self._cross_many(points[i_all], points[j_all], t_arr[i_all])
            hit[pair[crossed]] = True
        # The crossing pairs, group by group, each (x, y) with x before y in the group, in
        # the order of itertools.combinations(who, 2) (as `_partners` finds them).
        found = np.flatnonzero(hit)
        in_group = np.searchsorted(base, found, side="right") - 1
        local = found - base[in_group]
        size = np.array([len(w) for _, w in groups], dtype=np.intp)[in_group]
        edges_of: dict[int, list[tuple[int, int]]] = {}
        for g, x, y in zip(in_group.tolist(), (local // size).tolist(), (local % size).tolist(),
                           strict=True):
            who = groups[g][1]
            edges_of.setdefault(g, []).append((who[x], who[y]))
        for g, (t, who) in enumerate(groups):
            if out[g] is not None:
                continue
            partners: dict[int, list[int]] = {b: [] for b in who}
            edges = edges_of.get(g, [])
            for b, d in edges:
                partners[b].append(d)
            for b, d in edges:
                partners[d].append(b)
            if edges:
                place = {b: k for k, b in enumerate(who)}
                for b in partners:
                    partners[b].sort(key=place.__getitem__)
            out[g] = (min(_max_matching(edges), self._flank_cap(t)), partners)
        return [o for o in out if o is not None]

    def _square_centres(self, b: int) -> FloatArray:
        """The centres of the squares a creature occupies ((k, 2) pixels), once per
        engine."""
        held = self._centres_of.get(b)
        if held is None:
            held = self._centres_of[b] = np.array(
                [centre(sq) for sq in squares(self.cs[b], self.grid)],
                dtype=np.float64).reshape(-1, 2)
        return held

    def _cross_many(self, p: FloatArray, q: FloatArray, target: IntArray) -> BoolArray:
        """Per line p[k]-q[k] around target[k]: whether it crosses the target's
        `_flank_shape` from a face to the opposite one."""
        used, back = np.unique(target, return_inverse=True)
        shapes = [self._flank_shape(t) for t in used.tolist()]
        back = back.reshape(-1)
        z0 = np.array([s[1] for s in shapes], dtype=np.float64)[back]
        z1 = np.array([s[2] for s in shapes], dtype=np.float64)[back]
        body = np.array([s[0] for s in shapes], dtype=np.float64)[back]
        if self.hex is None:
            return crosses_opposite_faces_many(p, q, body, z0, z1)
        return crosses_opposite_prism_sides_many(p, q, body, z0, z1)

    def _flank_shape(self, t: int) -> tuple[Any, float, float]:
        """What flanking lines must cross around target t, from a face to the opposite
        one: its square space (a box), or on a hex grid the hex under its centre (its ring
        of corners: a hexagonal prism, whose top and bottom are opposite faces too); and
        its cube's vertical extent, z0..z1 feet."""
        et, st = float(self.elev[t]), float(self.side[t])
        if self.hex is None:
            return self.spaces[t], et, et + st
        layout = self.hex
        cells = hexgrid.footprint(self.cs[t], self.grid).cells
        cx, cy = self.centres[t]
        ii, jj = hexgrid.point_to_offset(layout, np.array([cx]), np.array([cy]))
        cell = (int(ii[0]), int(jj[0]))
        if cell not in cells:
            cell = cells[0]
        return [tuple(v) for v in hexgrid.vertices(layout, *cell).tolist()], et, et + st

    def _crosses_target(self, t: int, box: Box, z0: float, z1: float) -> Any:
        """The opposite-faces test for target t (z0..z1: its cube's vertical extent in
        feet), asked of every line between two sets of points at once (two allies'
        squares' centres), one pair of points at a time: its square space, or on a hex grid
        the opposite sides of the hex under its centre (`_flank_shape`)."""
        if self.hex is None:
            return lambda ps, qs: any_crosses_opposite_faces(ps, qs, box, z0, z1)
        ring = self._flank_shape(t)[0]
        return lambda ps, qs: any_crosses_opposite_prism_sides(ps, qs, ring, z0, z1)

    def _body(self, c: int) -> shapely.Geometry:
        """A creature's space as a polygon (its hex footprint on a hex grid)."""
        if self.hex is not None:
            return hexgrid.footprint(self.cs[c], self.grid).polygon
        return shapely.box(*self.spaces[c])

    # -- area obstructions ----------------------------------------------------------------

    def area_obstructions(self, origin: tuple[float, float], t: int) -> int | None:
        """Obstructions on the line from an area's origin to the centre of the target's
        space: each grid square it passes through that holds an object, another creature or
        vision-limiting terrain counts once; each wall it crosses (if line of effect still
        reaches the target around it) counts once. None: no line of effect at all."""
        ends = self._samples(t)
        starts = np.repeat(np.array([origin], dtype=np.float64), len(ends), 0)
        hits = self.tracer.trace(starts, ends)
        tgt = np.full(len(ends), t, dtype=np.intp)
        # Templates carry no elevation: the origin is a point on the ground.
        blocked, roles, _ = self._solid(hits, tgt, tgt, starts, ends, origin=(0.0, 0.0))
        if blocked.all() and not self._origin_sees(origin, t):
            return None
        line = len(ends) - 1  # the centre sample
        count = 0
        if self.options.area_walls_count:
            count += int(np.count_nonzero((hits.wall_line == line) & (roles >= 0)))
        count += self._squares_with_obstructions(origin, self.centres[t], t)
        return count

    def _origin_sees(self, origin: tuple[float, float], t: int) -> bool:
        """Whether a line of effect runs from an area's origin (on the ground) to any part
        of the target's space, exactly (geometry.openings): the samples can miss an opening
        narrower than their spacing."""
        sp = self.loe_spaces
        rings = sp.rings[sp.first[t]:sp.first[t] + sp.count[t]]
        k = len(rings)
        point = np.broadcast_to(np.array(origin, dtype=np.float64), rings.shape).copy()
        zero = np.zeros(k)
        seen = openings.line_of_effect(self.tracer, point, rings, zero, zero,
                                       np.full(k, self.elev[t]), np.full(k, self.tall[t]))
        return bool(seen.any())

    def _passage(self, p: tuple[float, float], q: tuple[float, float],
                 cells: npt.NDArray[np.object_]) -> tuple[FloatArray, FloatArray]:
        """The fractions of the way from p to q where the line enters and leaves each cell
        (squares: box_passage; hexes: the line clipped to the hex)."""
        n = len(cells)
        if self.hex is None:
            bounds = shapely.bounds(cells)
            return box_passage(np.repeat(np.array([p]), n, 0), np.repeat(np.array([q]), n, 0),
                               bounds)
        line = shapely.LineString([p, q])
        length = max(float(line.length), 1e-12)
        s0, s1 = np.zeros(n), np.ones(n)
        for k, part in enumerate(shapely.intersection(line, cells)):
            coords = shapely.get_coordinates(part)
            if len(coords):
                along = [line.project(shapely.Point(c)) / length for c in coords]
                s0[k], s1[k] = min(along), max(along)
        return s0, s1

    def _squares_with_obstructions(self, p: tuple[float, float], q: tuple[float, float],
                                   t: int) -> int:
        """Grid cells (squares, or hexes on a hex grid) the line from p to q passes through,
        other than the one it starts inside (none at a grid intersection or on a cell's
        side) and the target's own, holding an obstruction."""
        if self.hex is not None:
            passed_cells = hexgrid.cells_on_segment(self.hex, p, q)
            if not passed_cells:
                return 0
            boxes = np.array(hexgrid.cells_polygons(self.hex, passed_cells), dtype=object)
            own: shapely.Geometry = hexgrid.footprint(self.cs[t], self.grid).polygon
        else:
            size = self.grid.size
            x0, x1 = sorted((p[0], q[0]))
            y0, y1 = sorted((p[1], q[1]))
            gx = np.arange(np.floor(x0 / size), np.ceil(x1 / size) + 1) * size
            gy = np.arange(np.floor(y0 / size), np.ceil(y1 / size) + 1) * size
            cells = np.array([[x, y, x + size, y + size] for x in gx for y in gy],
                             dtype=np.float64)
            if len(cells) == 0:
                return 0
            _, ci = segments_enter_boxes(np.array([p]), np.array([q]), cells)
            passed = cells[ci]
            own = shapely.box(*self.spaces[t])
            boxes = shapely.box(passed[:, 0], passed[:, 1], passed[:, 2], passed[:, 3])
        # The origin's own cell is left out only when the origin lies inside it: at a grid
        # intersection (PF2's bursts) or on a cell's side there is no such cell, and the
        # cells touching the origin that the line runs through count like any other.
        start_cell = shapely.Point(p)
        keep = ~shapely.contains_properly(boxes, start_cell) & ~shapely.relate_pattern(
            boxes, own, "T********")
        others = np.array([c for c in range(len(self.cs)) if c != t], dtype=np.intp)
        creatures = [self._body(c) for c in others]
        regions = list(self.tracer.region_polys)
        if not creatures and not regions:
            return 0
        kept = boxes[keep]
        if not len(kept):
            return 0
        # A creature counts in a square only when its cube meets the sight there: the sheet
        # from the origin point (height 0: area paths run on the scene lowered to the
        # template's elevation) to the target's cube, over the stretch of the line inside
        # that square. Regions fill every height.
        tr = self.tracer
        s0, s1 = self._passage(p, q, kept)
        zero = np.zeros(len(kept))
        lo0, hi0 = sheet(s0, zero, zero, tr.elev[t], tr.side[t])
        lo1, hi1 = sheet(s1, zero, zero, tr.elev[t], tr.side[t])
        lo, hi = np.minimum(lo0, lo1), np.maximum(hi0, hi1)
        c_arr = np.array(creatures, dtype=object)
        r_arr = np.array(regions, dtype=object)
        count = 0
        for k, cell in enumerate(kept):
            if len(r_arr) and np.any(shapely.relate_pattern(r_arr, cell, "T********")):
                count += 1
                continue
            if not len(c_arr):
                continue
            inside = shapely.relate_pattern(c_arr, cell, "T********")
            who = others[inside]
            if np.any((tr.elev[who] < hi[k]) & (tr.elev[who] + tr.side[who] > lo[k])):
                count += 1
        return count


#: How many shared ends away from a wall crossing a centre line `_Context._covered` looks.
_HOPS = 3
#: How far (feet) a wall's height band must reach beyond two creatures' vertical extents for
#: `_Context._spans_pair` (far above the rounding of the sheet of sight's heights).
_BAND_MARGIN_FT = 1e-6
#: Rows of the exact row-paired wall test alive at once in `_Context._cover`.
_CHUNK_ROWS = 1 << 18
#: Sample lines traced at once by `_Context._open_lines`.
_CHUNK_LINES = 1 << 16
#: Lines per pair `_Context._open_lines` traces in its first rounds (the rest in the last),
#: and the lines in all up to which it traces them in one round.
_OPEN_ROUNDS = (4, 24)
_OPEN_ONE_ROUND = 2_048

# Per wall set (by identity, as geometry.trace caches its arrays): plain walls and which
# walls share an end with which.
_WALL_FACTS: dict[int, tuple[tuple[object, ...], BoolArray, IntArray, IntArray]] = {}
_WALL_FACTS_SIZE = 16


def _wall_facts(tr: Tracer) -> tuple[BoolArray, IntArray, IntArray]:
    hit = _WALL_FACTS.get(id(tr.walls))
    if hit is not None and hit[0] is tr.walls:
        return hit[1], hit[2], hit[3]
    plain = ((tr.wall_dir == Direction.BOTH) & ~tr.wall_limited
             & (tr.wall_cover_code == SOLID_CODE))
    m = len(tr.walls)
    indptr, nbrs = np.zeros(m + 1, dtype=np.intp), np.empty(0, dtype=np.intp)
    if m:
        ends = np.concatenate([tr.wall_xy[:, 0:2], tr.wall_xy[:, 2:4]])
        owner = np.tile(np.arange(m, dtype=np.intp), 2)
        _, point = np.unique(ends, axis=0, return_inverse=True)
        point = point.reshape(-1)
        order = np.argsort(point, kind="stable")
        pt, ow = point[order], owner[order]
        first = np.searchsorted(pt, pt, "left")
        count = np.searchsorted(pt, pt, "right") - first
        within = kernel.within_runs(count)
        src = np.repeat(ow, count)
        dst = ow[np.repeat(first, count) + within]
        keep = plain[dst]
        key = np.unique(src[keep].astype(np.int64) * m + dst[keep])
        src, nbrs = (key // m).astype(np.intp), (key % m).astype(np.intp)
        indptr = np.searchsorted(src, np.arange(m + 1)).astype(np.intp)
        one_src, one_dst, one_ptr = src, nbrs, indptr
        for _ in range(_HOPS - 1):
            # Walls reached through one more shared end (a wall drawn in short pieces).
            deg = one_ptr[nbrs + 1] - one_ptr[nbrs]
            within = kernel.within_runs(deg)
            far = one_dst[np.repeat(one_ptr[nbrs], deg) + within]
            key = np.unique(np.concatenate([src.astype(np.int64) * m + nbrs,
                                            np.repeat(src, deg).astype(np.int64) * m + far]))
            src, nbrs = (key // m).astype(np.intp), (key % m).astype(np.intp)
            indptr = np.searchsorted(src, np.arange(m + 1)).astype(np.intp)
        del one_src
    if len(_WALL_FACTS) >= _WALL_FACTS_SIZE:
        drop_oldest(_WALL_FACTS)
    _WALL_FACTS[id(tr.walls)] = (tr.walls, plain, indptr, nbrs)
    return plain, indptr, nbrs


def _plain_walls(tr: Tracer) -> BoolArray:
    """Per wall: solid, both ways, not limited (it blocks every line it crosses, in every
    direction, for every pair of creatures its height band, if any, spans)."""
    return _wall_facts(tr)[0]


def _wall_neighbours(tr: Tracer) -> tuple[IntArray, IntArray]:
    """Per wall, the plain walls sharing one of its ends (itself included when plain), as
    compressed rows: neighbours of w are nbrs[indptr[w]:indptr[w + 1]]."""
    _, indptr, nbrs = _wall_facts(tr)
    return indptr, nbrs


def _max_matching(edges: list[tuple[int, int]]) -> int:
    """Size of a maximum matching (disjoint flanking pairs); exhaustive, the graphs around
    one creature are tiny."""
    if not edges:
        return 0
    best = 0

    def grow(k: int, used: frozenset[int], size: int) -> None:
        nonlocal best
        best = max(best, size)
        if size + (len(edges) - k) <= best:
            return
        for j in range(k, len(edges)):
            b, d = edges[j]
            if b not in used and d not in used:
                grow(j + 1, used | {b, d}, size + 1)

    grow(0, frozenset(), 0)
    return best

