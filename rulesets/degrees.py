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
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec
import numpy as np
import shapely

from geometry import hex as hexgrid
from geometry.flanking import crosses_opposite_faces, crosses_opposite_prism_sides
from geometry.kernel import FloatArray, IntArray, segments_enter_boxes
from geometry.model import GridKind, RegionKind, SceneGeom
from geometry.square import (
    INSET_PX,
    Box,
    centre,
    corners,
    creature_centre,
    inset,
    space,
    squares,
    steps_3d,
    vertical_side,
    vertical_steps_many,
    within_reach_many,
)
from geometry.templates import Template, inside, shape
from geometry.trace import LineHits, Tracer
from geometry.vertical import flank_height
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
    in_reach_by_mode,
    pair_indices,
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

    # -- attacks ------------------------------------------------------------------------

    def evaluate(self, scene: SceneGeom, options: Any,
                 pairs: Sequence[tuple[str, str]] | None = None,
                 modes: Iterable[AttackMode] = tuple(AttackMode),
                 lines: bool = False) -> list[Annotation]:
        ctx = _Context(scene, options, self)
        idx = pair_indices(len(scene.creatures), ctx.index, pairs)
        rows = ctx.rows(idx, lines)
        modes = tuple(modes)
        flanking = ctx.flanking(idx, rows) if any(m is not AttackMode.RANGED for m in modes) \
            else {}
        out = []
        for (a, t), row in zip(idx, rows, strict=True):
            for mode in modes:
                out.append(self._annotate(ctx, a, t, mode, row, flanking.get((a, t))))
        return out

    def _annotate(self, ctx: _Context, a: int, t: int, mode: AttackMode, row: _Row,
                  flank: tuple[int, tuple[str, ...]] | None) -> Annotation:
        degree = Degree.TOTAL if row.level == TOTAL else LADDER[row.level]
        degree = self.floored(degree, ctx.cs[t].cover_floor)
        loe = degree is not Degree.TOTAL
        sx, sy, sz = ctx.steps(a, t)
        in_reach = bool(in_reach_by_mode(np.array([sx]), np.array([sy]),
                                         np.array([ctx.cs[a].reach]), np.array([sz]))[mode][0])
        flags = set()
        if in_reach:
            flags.add(Flag.IN_REACH)
        if ctx.adjacent(a, t):
            flags.add(Flag.ADJACENT)
        if loe and in_reach:
            flags.add(Flag.CAN_TARGET)
        if degree in self.STEALTH_DEGREES:
            flags.add(Flag.CAN_HIDE)
        if degree in self.REFLEX_BETTER_DEGREES:
            flags.add(Flag.REFLEX_DEGREE_BETTER)
        if mode is not AttackMode.RANGED and loe and in_reach and degree is Degree.NONE:
            flags.add(Flag.CAN_AOO)
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
        return Annotation(ctx.cs[a].id, ctx.cs[t].id, mode, loe, degree, tuple(mods),
                          frozenset(flags), flankers, row.lines)

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
        self.index = {c.id: k for k, c in enumerate(self.cs)}
        self.spaces = [space(c, self.grid) for c in self.cs]
        self.hex = hexgrid.HexLayout.of(self.grid) if hexgrid.is_hex(self.grid) else None
        self.centres = [creature_centre(c, self.grid) for c in self.cs]
        self.tall = np.array([c.tall for c in self.cs], dtype=np.float64)
        self.elev = np.array([c.elevation for c in self.cs], dtype=np.float64)
        self.rank = np.array([c.size.rank for c in self.cs], dtype=np.intp)
        self.side = np.array([vertical_side(c) for c in self.cs], dtype=np.float64)
        #: Rider and mount, each other's partner: never cover between or for each other.
        self.partner: dict[int, int] = {}
        for k, c in enumerate(self.cs):
            if c.mount is not None and c.mount in self.index:
                self.partner[k] = self.index[c.mount]
                self.partner[self.index[c.mount]] = k

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

    @functools.cached_property
    def _hex_steps(self) -> np.ndarray:
        assert self.hex is not None
        return hexgrid.footprints_distance(
            self.hex, [hexgrid.footprint(c, self.grid).cells for c in self.cs])

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
            box = self.spaces[k]
            return np.vstack([inset(corners(box), box), np.array([centre(box)])])
        fp = hexgrid.footprint(self.cs[k], self.grid)
        ring = np.asarray(fp.polygon.exterior.coords, dtype=np.float64)[:-1]
        c = np.array(fp.centre)
        d = c - ring
        dist = np.hypot(d[:, 0], d[:, 1])[:, None]
        moved = ring + d / np.maximum(dist, 1e-12) * np.minimum(INSET_PX, dist)
        return np.vstack([moved, c[None, :]])

    def _solid(self, hits: LineHits, att: IntArray, tgt: IntArray, starts: FloatArray,
               ends: FloatArray, origin: tuple[float, float] | None = None,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per line: blocked outright (line of effect); the wall roles of each hit (in three
        dimensions: geometry.vertical); per creature hit, whether the sheet of sight meets
        the creature rather than passing over or under it."""
        tr = self.tracer
        solid, low, improved = wall_roles_3d(tr, hits.wall_idx, hits.wall_line, att, tgt,
                                             starts, ends, origin)
        creature_ok = creature_hits(tr, hits, att, tgt, starts, ends, origin)
        limited = tr.wall_limited[hits.wall_idx]
        blocked = tr.per_line_any(hits.wall_line, solid & ~limited, hits.n)
        by_limited = limited_blocked(tr, hits.wall_line, hits.wall_idx, solid, starts, ends,
                                     hits.n)
        blocked |= by_limited
        blocked |= tr.region_lines(hits, RegionKind.BLOCKING)
        # A limited wall would block nothing alone: it counts only with a second one.
        solid &= ~limited | by_limited[hits.wall_line]
        roles = np.where(solid, 0, np.where(low, 1, np.where(improved, 2, -1)))
        return blocked, roles, creature_ok

    def rows(self, pairs: Sequence[tuple[int, int]], want_lines: bool) -> list[_Row]:
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
        hits = self.tracer.trace(s, e)
        blocked, roles, ok = self._solid(hits, np.array(att, dtype=np.intp), tgt_a, s, e)
        first = np.concatenate([[0], np.nonzero(np.diff(group_a))[0] + 1])
        open_any = np.zeros(len(pairs), dtype=bool)
        np.logical_or.at(open_any, group_a, ~blocked)
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

    # -- flanking -------------------------------------------------------------------------

    def _threatens(self, b: int, t: int, rows: dict[tuple[int, int], int]) -> bool:
        c = self.cs[b]
        if c.reach <= 0:
            return False  # creatures with 0 reach cannot flank
        if not self.in_reach(b, t, c.reach):
            return False
        return rows.get((b, t), TOTAL) != TOTAL

    def flanking(self, pairs: Sequence[tuple[int, int]],
                 rows: Sequence[_Row]) -> dict[tuple[int, int], tuple[int, tuple[str, ...]]]:
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
            for pair, row in zip(extra, self.rows(extra, False), strict=True):
                levels[pair] = row.level
        out: dict[tuple[int, int], tuple[int, tuple[str, ...]]] = {}
        by_target: dict[tuple[int, int], tuple[int, dict[int, list[int]]]] = {}
        for a, t in pairs:
            key = (t, self.cs[a].disposition)
            if key not in by_target:
                by_target[key] = self._pairs_around(t, self.cs[a].disposition, levels)
            bonus, partners = by_target[key]
            if bonus and partners.get(a):
                out[(a, t)] = (bonus, tuple(self.cs[p].id for p in partners[a]))
        return out

    def _pairs_around(self, t: int, side: int,
                      levels: dict[tuple[int, int], int]) -> tuple[int, dict[int, list[int]]]:
        box = self.spaces[t]
        who = [b for b, c in enumerate(self.cs)
               if b != t and c.disposition == side and self._threatens(b, t, levels)]
        partners: dict[int, list[int]] = {b: [] for b in who}
        edges = []
        et, st = float(self.elev[t]), float(self.side[t])
        crosses = self._crosses_target(t, box, et, et + st)

        def centres(b: int) -> list[tuple[float, float, float]]:
            z = flank_height(float(self.elev[b]), float(self.side[b]), et, st)
            return [(*centre(sq), z) for sq in squares(self.cs[b], self.grid)]

        for b, d in itertools.combinations(who, 2):
            if any(crosses(p, q) for p in centres(b) for q in centres(d)):
                partners[b].append(d)
                partners[d].append(b)
                edges.append((b, d))
        side_squares = max(1, round(max(self.cs[t].width, self.cs[t].height)))
        cap = 2 * side_squares + 2
        return min(_max_matching(edges), cap), partners

    def _crosses_target(self, t: int, box: Box, z0: float, z1: float) -> Any:
        """The opposite-faces test for target t (z0..z1: its cube's vertical extent in
        feet): its square space, or on a hex grid the opposite sides of the hex under its
        centre (a hexagonal prism: its top and bottom are opposite faces too)."""
        if self.hex is None:
            return lambda p, q: crosses_opposite_faces(p, q, box, z0, z1)
        layout = self.hex
        cells = hexgrid.footprint(self.cs[t], self.grid).cells
        cx, cy = self.centres[t]
        ii, jj = hexgrid.point_to_offset(layout, np.array([cx]), np.array([cy]))
        cell = (int(ii[0]), int(jj[0]))
        if cell not in cells:
            cell = cells[0]
        ring = [tuple(v) for v in hexgrid.vertices(layout, *cell).tolist()]
        return lambda p, q: crosses_opposite_prism_sides(p, q, ring, z0, z1)

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
        if blocked.all():
            return None
        line = len(ends) - 1  # the centre sample
        count = 0
        if self.options.area_walls_count:
            count += int(np.count_nonzero((hits.wall_line == line) & (roles >= 0)))
        count += self._squares_with_obstructions(origin, self.centres[t], t)
        return count

    def _squares_with_obstructions(self, p: tuple[float, float], q: tuple[float, float],
                                   t: int) -> int:
        """Grid cells (squares, or hexes on a hex grid) the line from p to q passes through,
        other than the one it starts in and the target's own, holding an obstruction."""
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
        start_cell = shapely.Point(p)
        keep = ~shapely.intersects(boxes, start_cell) & ~shapely.relate_pattern(
            boxes, own, "T********")
        count = 0
        creatures = [self._body(c) for c in range(len(self.cs)) if c != t]
        things = creatures + list(self.tracer.region_polys)
        if not things:
            return 0
        things_arr = np.array(things, dtype=object)
        for cell in boxes[keep]:
            if np.any(shapely.relate_pattern(things_arr, cell, "T********")):
                count += 1
        return count


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

