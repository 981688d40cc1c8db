"""Enchanted Realms (seed 003): cover from the share of the target's body a barrier hides,
obscurement as a penalty on the attacker, and the friendly-fire rule's triggers.

Rule of this module: one measurement, then tables. Seen from the attacker (the centre of
whichever of its cells sees the most of the target), the covered fraction of the target's
hex(es) is the area hidden by the shadows that walls and map regions cast, each weighted by
how much of a body it hides (a full wall all of it, an arrow slit nine tenths, a low wall
or rubble half); partial cover from half, three-quarters cover from three quarters, full
cover when nothing is left. The Shapely shadows are those of rulesets/corner.py. Hex-first;
on square grids the same measurement runs on the target's squares. Numbers sit in the
tables below; every choice is quoted against the seed in docs/rulesets.md.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, ClassVar, cast

import msgspec
import numpy as np
import numpy.typing as npt
import shapely

from geometry import hex as hexgrid
from geometry import kernel, openings
from geometry.caches import changed_positions, drop_oldest
from geometry.columns import columns, hex_footprints, ids_of, per_creature
from geometry.kernel import FloatArray, IntArray, take_rows
from geometry.model import (
    CreatureGeom,
    Grid,
    GridKind,
    RegionGeom,
    RegionKind,
    SceneGeom,
    WallCover,
    WallGeom,
)
from geometry.square import (
    INSET_PX,
    feet_many,
    grid_steps_many,
    vertical_steps_many,
)
from geometry.templates import Template, inside, shape
from geometry.trace import Tracer
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
    pair_rows,
)
from rulesets.obstacles import wall_roles
from rulesets.shadows import (
    front_sides,
    hidden_areas,
    hulls,
    meeting,
    repaired,
    shadow_polygons,
    wall_lines,
    warm_wall_lines,
)

M = Modifier
_AREA = "vs area effects"
LADDER = (Degree.NONE, Degree.PARTIAL, Degree.THREE_QUARTERS)
_COVERED = operator.attrgetter("covered")
#: The degrees in a fixed order, and each one's place in it: the columns carry degrees as
#: these numbers.
_DEGREES = tuple(Degree)
_DEGREE_AT = {d: k for k, d in enumerate(_DEGREES)}
#: A pair's line of effect as `_degrees` codes it: 1 some line, 0 none, -1 not known yet.
_SEEN_CODE: dict[bool | None, int] = {True: 1, False: 0, None: -1}
#: A covered fraction this close to 1 is full cover (rounding in the polygon areas).
_FULL = 1.0 - 1e-6
#: Pairs whose feet `RealmsContext._measure_feet` measures in one call at most.
FEET_BLOCK = 1 << 16


class RealmsOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    #: The same range as a region's own penalty (server/messages.py Penalty).
    obscured_penalty: Annotated[int, msgspec.Meta(ge=0, le=100)] = 2
    #: Feet; as far as a token's reach may be (server/messages.py TokenDoc.reach).
    vicinity_ft: Annotated[float, msgspec.Meta(ge=0, le=1000)] = 10.0
    low_cover_near_attacker: bool = False


@dataclass(frozen=True, slots=True)
class Measure:
    """How much of a target one viewpoint sees: the covered fraction and what covers it."""

    covered: float
    origin: tuple[float, float]
    walls: tuple[str, ...]
    regions: tuple[str, ...]
    #: Whether walls and regions name what covers it (a batch measures the fraction only).
    named: bool = True


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What one combination of facts gives an annotation (shared by all that have it)."""

    full: bool
    modifiers: tuple[Modifier, ...]
    flags: frozenset[Flag]


class Realms(Ruleset):
    """Seed 003: partial/three-quarters/full cover by covered fraction; friendly fire."""

    name: ClassVar[str] = "realms"
    title: ClassVar[str] = "Enchanted Realms (cover, obscurement, friendly fire; seed 003)"
    seed: ClassVar[str] = "003_e7d3a2564bb3cfcd.txt"
    Options: ClassVar[type[RealmsOptions]] = RealmsOptions
    option_docs: ClassVar[Mapping[str, str]] = {
        "obscuredPenalty": "Penalty to attacks and Awareness through or into an obscuring "
                           "region that carries no penalty of its own (flags.covercast."
                           "penalty sets it per region).",
        "vicinityFt": "How close (feet, footprint to footprint) another creature must be to "
                      "a target with three-quarters cover for the friendly-fire rule to "
                      "apply ('if there are others in the vicinity').",
        "lowCoverNearAttacker": "Whether a low obstacle nearer the attacker than the target "
                                "(the archer's own parapet) still covers the target; off by "
                                "default: it protects the attacker's legs, not the target.",
    }
    ladder: ClassVar[tuple[Degree, ...]] = LADDER
    grids: ClassVar[frozenset[GridKind]] = frozenset({GridKind.SQUARE} | hexgrid.HEX_GRIDS)

    #: Covered fraction at least -> degree (the first that applies).
    THRESHOLDS: ClassVar[tuple[tuple[float, Degree], ...]] = (
        (_FULL, Degree.TOTAL), (0.75, Degree.THREE_QUARTERS), (0.5, Degree.PARTIAL))
    #: What each degree is worth to the target, against ranged attacks and area effects.
    TABLE: ClassVar[Mapping[Degree, tuple[Modifier, ...]]] = {
        Degree.NONE: (),
        Degree.PARTIAL: (M(Stat.DEFENSE, 3, ModKind.COVER, "partial cover"),
                         M(Stat.AGILITY, 3, ModKind.COVER, f"partial cover, {_AREA}")),
        Degree.THREE_QUARTERS: (
            M(Stat.DEFENSE, 3, ModKind.COVER, "three-quarters cover (partial cover's bonus)"),
            M(Stat.AGILITY, 3, ModKind.COVER, f"three-quarters cover, {_AREA}")),
        Degree.TOTAL: (M(Stat.AGILITY, 5, ModKind.COVER, f"full cover, {_AREA}"),),
    }
    #: How much of a body each obstacle hides where its shadow falls.
    WALL_HIDES: ClassVar[Mapping[WallCover, float]] = {
        WallCover.SOLID: 1.0, WallCover.IMPROVED: 0.9, WallCover.LOW: 0.5}
    #: The most a wall the sight passes over in part hides (an arrow slit's share: at
    #: most three-quarters cover, never full).
    PARTIAL_WALL_MAX: ClassVar[float] = 0.9
    REGION_HIDES: ClassVar[Mapping[RegionKind, float]] = {
        RegionKind.BLOCKING: 1.0, RegionKind.IMPROVED: 0.9, RegionKind.COVER: 0.5,
        RegionKind.OBSCURING: 0.0}

    # -- attacks ------------------------------------------------------------------------

    def evaluate(self, scene: SceneGeom, options: Any,
                 pairs: Sequence[tuple[str, str]] | None = None,
                 modes: Iterable[AttackMode] = tuple(AttackMode),
                 lines: bool = False) -> list[Annotation]:
        return self._evaluate(scene, options, pairs, modes, lines, reference=False)

    def warm(self, scene: SceneGeom, options: Any) -> None:
        """The walls' index every covered fraction reads (`rulesets.shadows.wall_lines`)."""
        warm_wall_lines(scene)

    def reference(self, scene: SceneGeom, options: Any,
                  pairs: Sequence[tuple[str, str]] | None = None,
                  modes: Iterable[AttackMode] = tuple(AttackMode),
                  lines: bool = False) -> list[Annotation]:
        """`evaluate` with every covered fraction measured pair by pair from the Shapely
        shadows (`RealmsContext.measure`), none read from what earlier revisions
        measured: the computation the batch replaced, which it must equal."""
        return self._evaluate(scene, options, pairs, modes, lines, reference=True)

    def _evaluate(self, scene: SceneGeom, options: Any,
                  pairs: Sequence[tuple[str, str]] | None, modes: Iterable[AttackMode],
                  lines: bool, reference: bool) -> list[Annotation]:
        ctx = RealmsContext(scene, options, reference=reference)
        modes = tuple(modes)
        at = pair_rows(len(scene.creatures), ctx.index, pairs)
        if not len(at):
            return []
        sx, sy, sz = ctx.steps(at[:, 0], at[:, 1])
        reach = np.array([c.reach for c in scene.creatures], dtype=np.float64)[at[:, 0]]
        by_mode = in_reach_by_mode(sx, sy, reach, sz)
        # Per pair, which modes reach: bit j for modes[j].
        reach_bits = sum((by_mode[mode].astype(np.int64) << j
                          for j, mode in enumerate(modes)), np.zeros(len(at), dtype=np.int64))
        reach_l = reach_bits.tolist()
        adjacent = (np.maximum(np.maximum(sx, sy), sz) <= 1).tolist()
        # (As tuples of ints, for the steps that go pair by pair: lines, obscurement.)
        idx: list[tuple[int, int]] = (list(map(tuple, at.tolist())) if lines or ctx.obscuring
                                      else [])
        measures = ([ctx.best_measure(a, t) for a, t in idx] if lines
                    else ctx.measures_of(at))
        deg, covered, unseen = self._degrees(ctx, at, measures)
        # Each pair's obscurement (the worst penalty and its regions), measured once: the
        # columns read the penalty, the lines the regions.
        centres = ctx.centres
        penalties = ([ctx.obscurement(centres[a], centres[t]) for a, t in idx]
                     if ctx.obscuring else None)
        annotations = self._columns(ctx, at, modes, deg, covered, unseen, reach_l,
                                    adjacent, penalties)
        if not lines:
            return annotations
        # With lines, each annotation carries the line its pair was measured along: from
        # the viewpoint that sees most of the target to the target's centre, naming the
        # walls and regions that cover it and the regions that obscure the attack.
        n_modes = len(modes)
        out: list[Annotation] = []
        for k, (_, t) in enumerate(idx):
            m = measures[k]
            obscuring = penalties[k][1] if penalties is not None else ()
            regions = tuple(sorted({*m.regions, *obscuring}))
            out += [msgspec.structs.replace(ann, lines=(TracedLine(
                        m.origin, centres[t], not ann.loe, m.walls, (), regions),))
                    for ann in annotations[k * n_modes:(k + 1) * n_modes]]
        return out

    def _columns(self, ctx: RealmsContext, at: IntArray, modes: tuple[AttackMode, ...],
                 deg: npt.NDArray[np.int64], covered: FloatArray,
                 unseen: npt.NDArray[np.bool_], reach_l: list[int], adjacent: list[bool],
                 obscured: Sequence[tuple[int, tuple[str, ...]]] | None) -> list[Annotation]:
        """`_evaluate`'s annotations, lines aside, as columns: the pairs' facts coded as one
        integer each, every distinct outcome worked out once per mode (`_outcome`), and
        the annotations built by map from the gathered columns, with no Python loop body
        per pair (30,000 annotations a table). `deg`, `covered`, `unseen`: as `_degrees`
        gives them; `obscured`: each pair's obscurement (None: the scene has no obscuring
        region)."""
        n, n_modes = len(at), len(modes)
        # The facts an outcome depends on: degree, obscurement, which modes reach,
        # adjacency, and (at three-quarters) whether others stand near the target.
        code = deg
        penalties: list[tuple[int, tuple[str, ...]]] = [(0, ())]
        if obscured is not None:
            seen_pen: dict[tuple[int, tuple[str, ...]], int] = {(0, ()): 0}
            pen = [seen_pen.setdefault(o, len(seen_pen)) for o in obscured]
            penalties = list(seen_pen)
            code = code * len(penalties) + np.array(pen, dtype=np.int64)
        code = (code * (1 << n_modes) + np.array(reach_l, dtype=np.int64)) * 2 + np.array(
            adjacent, dtype=np.int64)
        crowded = np.zeros(n, dtype=np.int64)
        three = np.flatnonzero(deg == _DEGREE_AT[Degree.THREE_QUARTERS])
        crowded[three] = ctx.others_near_many(at[three, 0], at[three, 1])
        code = code * 2 + crowded
        keys, which = np.unique(code, return_inverse=True)
        which = which.reshape(-1)
        # Per distinct outcome and mode: line of effect, modifiers and flags.
        cols = [np.empty((len(keys), n_modes), dtype=object) for _ in range(3)]
        for u, key in enumerate(keys.tolist()):
            crowd, key = bool(key & 1), key >> 1
            adj, key = bool(key & 1), key >> 1
            bits, key = key & ((1 << n_modes) - 1), key >> n_modes
            pen_k, deg_k = key % len(penalties), key // len(penalties)
            for j, mode in enumerate(modes):
                o = self._outcome(mode, _DEGREES[deg_k], penalties[pen_k], bool(bits >> j & 1),
                                  adj, crowd)
                cols[0][u, j], cols[1][u, j], cols[2][u, j] = not o.full, o.modifiers, o.flags
        # The visible fraction, each distinct one rounded once (as Python rounds: numpy's
        # rounding may differ in the last place).
        distinct, back = np.unique(covered, return_inverse=True)
        visible = np.array([round(1.0 - c, 6) for c in distinct.tolist()],
                           dtype=np.float64)[back.reshape(-1)]
        visible[unseen] = 0.0  # no line reaches it: nothing of it shows
        ids = np.array(ids_of(ctx.cs), dtype=object)
        loe, mods, flags = (np.take(col, which, axis=0).reshape(-1).tolist() for col in cols)
        return list(map(
            Annotation, np.repeat(np.take(ids, at[:, 0]), n_modes).tolist(),
            np.repeat(np.take(ids, at[:, 1]), n_modes).tolist(), list(modes) * n, loe,
            np.take(np.array(_DEGREES, dtype=object), np.repeat(deg, n_modes)).tolist(),
            mods, flags, itertools.repeat(()), itertools.repeat(None),
            np.repeat(visible, n_modes).tolist()))

    def _degrees(self, ctx: RealmsContext, at: IntArray, measures: Sequence[Measure]
                 ) -> tuple[npt.NDArray[np.int64], FloatArray, npt.NDArray[np.bool_]]:
        """Per pair (at[k]: attacker, target) the degree of cover its measure gives, after
        the exact line of effect and the GM's floor: full cover from every viewpoint, yet a
        line of effect through an opening from elsewhere in the attacker's space
        (geometry.openings), is three-quarters; no line of effect at all, shadows or not
        (two limited walls; a wall stopping every line in 3D that its shadow on the map
        does not show), is full cover. Returns, per pair, the degree (its place in
        `Degree`'s members, `_DEGREES`), the covered fraction, and whether it was made
        full so."""
        n = len(measures)
        covered = np.fromiter(map(_COVERED, measures), dtype=np.float64, count=n)
        # The first threshold each covered fraction reaches (none: the last entry), as
        # `degree_of` reads them.
        ladder = np.array([_DEGREE_AT[d] for _, d in self.THRESHOLDS]
                          + [_DEGREE_AT[Degree.NONE]], dtype=np.int64)
        step = np.full(n, len(self.THRESHOLDS), dtype=np.intp)
        for k in range(len(self.THRESHOLDS) - 1, -1, -1):
            step[covered >= self.THRESHOLDS[k][0]] = k
        deg = ladder[step]
        total, three = _DEGREE_AT[Degree.TOTAL], _DEGREE_AT[Degree.THREE_QUARTERS]
        at_full = deg == total
        # No line of effect at all is full cover, whatever the shadows (docs/rulesets.md,
        # realms choice 5): limited walls cast none, yet two of them stop a line; the
        # shadows are cast on the map, while a wall between a creature on the ground and
        # one on a ledge stops every line in 3D. A pair with a line from its viewpoint to
        # its target's centre or a corner that crosses nothing that stops lines has a line
        # of effect: only the others are asked, with the pairs at full cover, in one call.
        # (Those whose line of effect is known, found when they were measured, are read
        # back, all in one pass: 1 has a line, 0 has none, -1 unknown.)
        seen = np.fromiter(map(_SEEN_CODE.__getitem__, ctx.known_lines(at)), dtype=np.int8,
                           count=n)
        ask = np.flatnonzero(~at_full & (seen < 0))
        if len(ask):
            origins = np.array([measures[k].origin for k in ask.tolist()],
                               dtype=np.float64).reshape(-1, 2)
            blocked = ctx.sight_blocked(at[ask], origins)
            seen[ask[~blocked]] = 1
        todo = np.flatnonzero(seen < 0)
        if len(todo):
            seen[todo] = ctx.lines_of_effect(at[todo])
        deg[at_full & (seen == 1)] = three
        unseen = ~at_full & (seen == 0)
        deg[unseen] = total
        floors = [c.cover_floor for c in ctx.cs]
        has_floor = np.array([f is not None for f in floors], dtype=bool)
        for k in np.flatnonzero(has_floor[at[:, 1]]).tolist():
            t = int(at[k, 1])
            deg[k] = _DEGREE_AT[self.floored(_DEGREES[int(deg[k])], floors[t])]
        return deg, covered, unseen

    def degree_of(self, covered: float) -> Degree:
        for least, degree in self.THRESHOLDS:
            if covered >= least:
                return degree
        return Degree.NONE

    def _outcome(self, mode: AttackMode, degree: Degree, penalty: tuple[int, tuple[str, ...]],
                 in_reach: bool, adjacent: bool, crowded: bool) -> _Outcome:
        """What an attack in `mode` at this degree of cover faces: the table's modifiers
        (ranged), the obscurement penalty (`penalty`: its value and the regions), and the
        flags; `crowded`: others stand within the vicinity of a target at three-quarters
        cover (the friendly-fire rule)."""
        full = degree is Degree.TOTAL
        flags = set()
        if in_reach:
            flags.add(Flag.IN_REACH)
        if adjacent:
            flags.add(Flag.ADJACENT)
        if in_reach and not full:
            flags.add(Flag.CAN_TARGET)
        if full:
            flags.add(Flag.CANNOT_ACT_TOWARD_COVER)
        mods: list[Modifier] = []
        if mode is AttackMode.RANGED:
            mods.extend(self.TABLE[degree])
            if full or crowded:
                flags.add(Flag.FRIENDLY_FIRE)
        value, regions = penalty
        if value:
            why = "obscured by " + ", ".join(regions)
            mods.append(M(Stat.ATTACK, -value, ModKind.OBSCUREMENT, why))
            mods.append(M(Stat.AWARENESS, -value, ModKind.OBSCUREMENT, why))
        return _Outcome(full, tuple(mods), frozenset(flags))

    def in_the_way_modes(self, options: Any) -> tuple[AttackMode, ...]:
        # Creatures cast no shadows here: one stepping into or out of a pair's lines changes
        # none of its annotations (who stands near the target is `widen`'s).
        return ()

    def widen(self, old: SceneGeom, new: SceneGeom, options: Any,
              pairs: set[tuple[str, str]],
              only: Set[tuple[str, str]] | None = None) -> set[tuple[str, str]]:
        """The friendly-fire flag depends on who stands near the target: a creature that
        moved, came or went changes the attacks on the targets within the vicinity of its
        old or new place. Only those at three-quarters cover: the flag is always raised at
        full cover and never below three-quarters, and a pair of creatures that did not
        change keeps its degree (it depends on the two, the walls and the regions). With
        `only`, only the pairs followed are looked at (a subscriber following one attacker
        of a thousand creatures needs none of the others' degrees)."""
        if only is not None and only <= pairs:
            # Every pair followed is recomputed already (the attacker a subscriber follows
            # walked): nothing can be added, and no snapshot is prepared to find it out.
            return pairs
        before = {c.id: c for c in old.creatures}
        after = {c.id: c for c in new.creatures}
        # (Unchanged tokens keep their creature object: equality is asked of the others.)
        moved = [c for i in before.keys() | after.keys()
                 if (b := before.get(i)) is not (f := after.get(i)) and b != f
                 for c in (b, f) if c is not None]
        if not moved:
            return pairs
        ctx = RealmsContext(replace(new, creatures=(*new.creatures, *moved)), options)
        n = len(new.creatures)
        ids = [c.id for c in new.creatures]
        # Distances are symmetric: the moved creatures' columns, not every target's.
        close = np.zeros(len(ctx.cs), dtype=bool)
        for m in range(n, n + len(moved)):
            close |= ctx.feet_to(m) <= options.vicinity_ft
        near = np.flatnonzero(close[:n]).tolist()
        todo = [(a, t) for t in near for a in range(n)
                if a != t and (ids[a], ids[t]) not in pairs
                and (only is None or (ids[a], ids[t]) in only)]
        if not todo:
            return pairs
        rows = np.array(todo, dtype=np.intp)
        deg, _, _ = self._degrees(ctx, rows, ctx.measures_of(rows))
        three = (deg == _DEGREE_AT[Degree.THREE_QUARTERS]).tolist()
        return pairs | {(ids[a], ids[t]) for (a, t), d in zip(todo, three, strict=True) if d}

    # -- areas --------------------------------------------------------------------------

    def area(self, scene: SceneGeom, options: Any, template: Template) -> list[AreaHit]:
        """Every creature inside the area, full cover included (the seed: a fireball still
        reaches a creature behind complete cover); cover is measured from the origin."""
        ctx = RealmsContext(scene, options)
        region = shape(template, scene.grid)
        origin = (template.x, template.y)
        hits = []
        for t, c in enumerate(scene.creatures):
            if not inside(region, c, scene.grid):
                continue
            m = ctx.measure(origin, t)
            degree = self.floored(self.degree_of(m.covered), c.cover_floor)
            mods = tuple(x for x in self.TABLE[degree] if x.stat is Stat.AGILITY)
            hits.append(AreaHit(c.id, degree, mods, frozenset()))
        return hits


# A pair's covered fraction depends only on the two creatures (where they stand, how tall),
# the walls, the regions and the options: creatures cast no shadows. So does its line of
# effect through openings. Both are kept across revisions, per wall tuple (by identity;
# token-only changes keep the tuple), so a move re-measures only the pairs of the creature
# that moved.
# Pairs are keyed by a number per creature state (its CreatureGeom, numbered once per
# table): a dict lookup then hashes one int, not two dataclasses of thirteen fields. A full
# table is replaced by an empty one, never emptied in place: a context keeps the table it
# started with (the ahead thread builds contexts beside the Core's, server/ahead.py), so
# numbers given by the new table never meet keys made by an older context.
#: A pair of creature states, attacker then target: (number of the attacker's state << 32)
#: | the target's (`_numbered`), an int so that a table's keys are made in one array step.
CreaturePair = int
#: Bits of a pair key's target number.
_PAIR_SHIFT = 32
#: Creature states numbered per table at most before it starts again (a pair key holds
#: two numbers of 32 bits; a token dragged about for days makes a state a step).
_STATES = 1 << 20


@dataclass(slots=True)
class _Kept:
    """What was measured for one scene's walls, regions, grid and options: each pair's
    `Measure`, and whether it has a line of effect (known for the pairs at full cover, and
    for those partly covered whose quick test found a line or whose line was searched)."""

    walls: tuple[WallGeom, ...]
    regions: tuple[RegionGeom, ...]
    grid: Grid
    options: RealmsOptions
    measures: dict[CreaturePair, Measure] = field(default_factory=dict)
    seen: dict[CreaturePair, bool] = field(default_factory=dict)
    numbers: dict[CreatureGeom, int] = field(default_factory=dict)
    #: The creature objects numbered, by id (`_numbered`).
    by_id: dict[int, tuple[CreatureGeom, int]] = field(default_factory=dict)
    #: The next numbers to give (one step of the interpreter: two threads never get one
    #: number).
    count: Iterator[int] = field(default_factory=itertools.count)
    #: The last creatures tuple numbered and its numbers (one assignment: either thread
    #: reads a whole pair), for the next snapshot to patch (`_numbered`).
    last: tuple[tuple[CreatureGeom, ...], list[int]] = ((), [])
    #: The last creatures tuple whose bodies and viewpoints were made on a square grid, and
    #: those (`RealmsContext._shapes`), for the next snapshot to patch.
    shapes: tuple[tuple[CreatureGeom, ...], _Shapes] | None = None


_MEASURES: dict[int, _Kept] = {}
_MEASURE_SCENES = 8
_MEASURE_PAIRS = 200_000


def _measure_cache(scene: SceneGeom, options: RealmsOptions) -> _Kept:
    # The wall tuple's identity ties the table to one scene's walls; the grid, regions and
    # options are compared too (scenes without walls all share the empty tuple).
    hit = _MEASURES.get(id(scene.walls))
    if hit is not None and hit.walls is scene.walls and hit.regions == scene.regions \
            and hit.grid == scene.grid and hit.options == options \
            and len(hit.measures) + len(hit.seen) <= _MEASURE_PAIRS \
            and len(hit.numbers) <= _STATES:
        return hit
    # (A full table is replaced like another scene's: an empty one in its place.)
    _MEASURES.pop(id(scene.walls), None)
    if len(_MEASURES) >= _MEASURE_SCENES:
        drop_oldest(_MEASURES)
    kept = _Kept(scene.walls, scene.regions, scene.grid, options)
    _MEASURES[id(scene.walls)] = kept
    return kept


#: Creature objects `_numbered` keeps by identity at most, before it lets go of them.
_BY_ID_KEPT = 20_000


def _numbered(cs: tuple[CreatureGeom, ...], numbers: dict[CreatureGeom, int],
              kept: _Kept | None) -> list[int]:
    """Each creature's number in `numbers` (given one the first time its state is seen,
    from `kept`'s count: from 0 in each table).
    A creature object numbered before is found by its identity (it is held, so its id is
    not reused), without hashing its thirteen fields: a move keeps every other creature's
    object."""
    by_id = kept.by_id if kept is not None else {}
    count = kept.count if kept is not None else itertools.count()
    if len(by_id) > _BY_ID_KEPT:
        # Objects of many snapshots (a token dragged to and fro makes one per step, of
        # few states): let go of them; the numbers stay, found again by their state.
        by_id.clear()
    last_cs, last_numbers = kept.last if kept is not None else ((), [])
    if len(last_cs) == len(cs) and cs:
        # The last snapshot's numbers, those of the creatures that are new objects (a
        # move's one) looked up: found in C (a loop over 1,000 creatures was a fortieth of
        # a walking step).
        out = list(last_numbers)
        for k in changed_positions(cs, last_cs):
            out[k] = _number(cs[k], numbers, by_id, count)
    else:
        out = [_number(c, numbers, by_id, count) for c in cs]
    if kept is not None:
        kept.last = (cs, out)
    return out


def _number(c: CreatureGeom, numbers: dict[CreatureGeom, int],
            by_id: dict[int, tuple[CreatureGeom, int]], count: Iterator[int]) -> int:
    """`_numbered`'s number of one creature."""
    held = by_id.get(id(c))
    if held is not None and held[0] is c:
        return held[1]
    k = numbers[c] if c in numbers else numbers.setdefault(c, next(count))
    by_id[id(c)] = (c, k)
    return k


@dataclass(frozen=True, slots=True)
class _Shapes:
    """Every creature's body (a polygon), centre and viewpoints, stacked: creature k's
    viewpoints are views[view_start[k]:][:view_count[k]]."""

    bodies: npt.NDArray[np.object_]
    centres: list[tuple[float, float]]
    views: FloatArray
    view_start: IntArray
    view_count: IntArray

    def __getitem__(self, k: int) -> FloatArray:
        """Creature k's viewpoints (n, 2)."""
        start = int(self.view_start[k])
        return self.views[start:start + int(self.view_count[k])]

    def __len__(self) -> int:
        return len(self.view_start)

    def __iter__(self) -> Iterator[FloatArray]:
        return (self[k] for k in range(len(self)))


#: Of a snapshot's creatures, the share past which `_shapes` are made afresh rather than
#: patched from the last snapshot's.
_PATCH_SHARE = 0.25


def _square_parts(box: FloatArray, cs: Sequence[CreatureGeom], size: float
                  ) -> tuple[npt.NDArray[np.object_], FloatArray, FloatArray, IntArray]:
    """Of these creatures (their spaces `box`, (n, 4)) on a square grid of `size` pixels:
    bodies, centres (n, 2), viewpoints stacked and how many each has. Viewpoints are the
    centre of each square the creature occupies (`squares`), row by row; a creature under
    one square has its own space's centre."""
    x0, y0, x1, y1 = box[:, 0], box[:, 1], box[:, 2], box[:, 3]
    bodies = shapely.box(x0, y0, x1, y1).reshape(-1)
    centre = np.column_stack([(x0 + x1) / 2, (y0 + y1) / 2]).reshape(-1, 2)
    width = np.array([c.width for c in cs], dtype=np.float64)
    height = np.array([c.height for c in cs], dtype=np.float64)
    small = (width < 1) | (height < 1)
    cols = np.where(small, 1, np.round(width)).astype(np.intp)
    rows = np.where(small, 1, np.round(height)).astype(np.intp)
    count = cols * rows
    who = np.repeat(np.arange(len(cs)), count)
    k = kernel.within_runs(count)
    i, j = k % cols[who], k // cols[who]
    # The same sums as `squares` makes, so the same numbers to the last bit.
    sx0, sy0 = x0[who] + i * size, y0[who] + j * size
    sx1, sy1 = x0[who] + (i + 1) * size, y0[who] + (j + 1) * size
    views = np.column_stack([(sx0 + sx1) / 2, (sy0 + sy1) / 2]).reshape(-1, 2)
    views[small[who]] = centre[who[small[who]]]
    return bodies, centre, views, count


def _square_shapes(box: FloatArray, cs: Sequence[CreatureGeom], size: float) -> _Shapes:
    """`RealmsContext._shapes` on a square grid, every creature made afresh."""
    bodies, centre, views, count = _square_parts(box, cs, size)
    return _Shapes(bodies, [(x, y) for x, y in centre.tolist()], views,
                   np.cumsum(count) - count, count)


def _patched_shapes(last: _Shapes, box: FloatArray, cs: Sequence[CreatureGeom],
                    changed: list[int], size: float) -> _Shapes | None:
    """`_square_shapes` of `cs`, from `last` (those of a snapshot of as many creatures)
    with the creatures at `changed` made afresh: a walking token's step remakes one body of
    a thousand. None when too many changed, or one changed how many squares it covers
    (every later creature's viewpoints would move along)."""
    if not changed:
        return last
    if len(changed) > _PATCH_SHARE * len(cs):
        return None
    at = np.array(changed, dtype=np.intp)
    bodies, centre, views, count = _square_parts(box[at], [cs[k] for k in changed], size)
    if not np.array_equal(count, last.view_count[at]):
        return None
    out_bodies = last.bodies.copy()
    out_bodies[at] = bodies
    centres = list(last.centres)
    for k, xy in zip(changed, centre.tolist(), strict=True):
        centres[k] = (xy[0], xy[1])
    out_views = last.views.copy()
    out_views[np.repeat(last.view_start[at], count) + kernel.within_runs(count)] = views
    return _Shapes(out_bodies, centres, out_views, last.view_start, last.view_count)


class RealmsContext:
    """One scene snapshot, prepared for covered-fraction measurements."""

    def __init__(self, scene: SceneGeom, options: RealmsOptions,
                 reference: bool = False) -> None:
        self.scene = scene
        self.grid = scene.grid
        self.options = options
        self.cs = scene.creatures
        cols = columns(self.cs, self.grid)
        self.index = cols.index
        self.hex = hexgrid.HexLayout.of(self.grid) if hexgrid.is_hex(self.grid) else None
        self._feet_columns: dict[int, npt.NDArray[np.int64]] = {}
        self.tracer = Tracer(scene)
        #: The reference measures every pair afresh, one by one.
        self.reference = reference
        kept = _measure_cache(scene, options) if not reference else None
        self._kept = kept
        self._measures: dict[CreaturePair, Measure] = {} if kept is None else kept.measures
        self._seen: dict[CreaturePair, bool] = {} if kept is None else kept.seen
        numbers: dict[CreatureGeom, int] = {} if kept is None else kept.numbers
        #: Per creature, the number its state is known by in the tables above.
        self.number = _numbered(self.cs, numbers, kept)
        self._numbers = np.array(self.number, dtype=np.int64).reshape(-1)
        self._tall, self._elev = cols.tall, cols.elev
        tr = self.tracer
        #: The obscuring regions and their polygons.
        self.obscuring = [(r, poly) for r, poly in zip(tr.regions, tr.region_polys,
                                                       strict=True)
                          if r.kind is RegionKind.OBSCURING]

    # Built when first read: a move's `widen` reads its measures back from the cache and
    # needs none of them.
    @functools.cached_property
    def _shapes(self) -> _Shapes:
        if self.hex is not None:
            bodies: list[shapely.Geometry] = []
            centres: list[tuple[float, float]] = []
            views: list[FloatArray] = []
            for fp in hex_footprints(self.cs, self.grid):
                bodies.append(fp.polygon)
                centres.append(fp.centre)
                views.append(np.asarray(fp.cell_centres, dtype=np.float64).reshape(-1, 2))
            count = np.array([len(v) for v in views], dtype=np.intp)
            stacked = np.concatenate(views) if views else np.empty((0, 2))
            return _Shapes(np.array(bodies, dtype=object).reshape(-1), centres, stacked,
                           np.cumsum(count) - count, count)
        # A square grid: every creature at once (a thousand of them on a big scene, whose
        # every move builds this), or only those not where the last snapshot had them.
        box = columns(self.cs, self.grid).spaces
        kept = self._kept
        last = kept.shapes if kept is not None else None
        made: _Shapes | None = None
        if last is not None and len(last[0]) == len(self.cs):
            made = _patched_shapes(last[1], box, self.cs,
                                   changed_positions(self.cs, last[0]), self.grid.size)
        if made is None:
            made = _square_shapes(box, self.cs, self.grid.size)
        if kept is not None:
            kept.shapes = (self.cs, made)  # (one assignment: either thread reads a pair)
        return made

    @property
    def bodies(self) -> npt.NDArray[np.object_]:
        """Per creature, its space as a polygon (its hex footprint on a hex grid)."""
        return self._shapes.bodies

    @property
    def centres(self) -> list[tuple[float, float]]:
        """Per creature, the centre of its space."""
        return self._shapes.centres

    @property
    def viewpoints(self) -> _Shapes:
        """Per creature (indexed by position), where it may shoot from: the centres of its
        squares or hexes."""
        return self._shapes

    @functools.cached_property
    def _wall_lines(self) -> npt.NDArray[np.object_]:
        tr = self.tracer
        lines: npt.NDArray[np.object_] = shapely.linestrings(tr.wall_xy.reshape(-1, 2, 2)) \
            if len(tr.walls) else np.empty(0, dtype=object)
        return lines

    # -- distances ------------------------------------------------------------------------

    @functools.cached_property
    def _hex_steps(self) -> hexgrid.FootprintSteps:
        """Hexes between every two creatures' nearest cells, measured as read, a
        footprint's row and column at a time (geometry.hex.FootprintSteps)."""
        assert self.hex is not None
        cells = [fp.cells for fp in hex_footprints(self.cs, self.grid)]
        return hexgrid.FootprintSteps.of(self.hex, cells)

    def steps(self, a: IntArray, t: IntArray) -> tuple[npt.NDArray[np.int64],
                                                       npt.NDArray[np.int64],
                                                       npt.NDArray[np.int64]]:
        """Per pair (a[k], t[k]): grid steps between the two spaces along x and y (on a hex
        grid the hexes between their nearest cells, and 0), and between their cubes
        vertically (geometry.square). Only the pairs asked: a move asks for the mover's."""
        if self.hex is not None:
            sx = np.asarray(self._hex_steps[a, t], dtype=np.int64)
            sy = np.zeros(len(a), dtype=np.int64)
        else:
            boxes = self.tracer.boxes.reshape(-1, 4)
            sx, sy = grid_steps_many(boxes[a], boxes[t], self.grid.size)
        side = self.tracer.side
        sz = vertical_steps_many(self._elev[a], side[a], self._elev[t], side[t])
        return sx, sy, sz

    def feet_to(self, t: int) -> npt.NDArray[np.int64]:
        """Feet between every creature and t (5/10 diagonals on a square grid, 5 ft a hex),
        in three dimensions: a climb or a flight counts as on every other ruleset."""
        self._measure_feet([t])
        return self._feet_columns[t]

    def _measure_feet(self, targets: list[int]) -> None:
        """`feet_to` of each of these targets not measured yet, a block of targets a call
        (FEET_BLOCK pairs at most: a thousand targets of a thousand creatures at once held
        over 100 MB of temporaries)."""
        todo = [t for t in targets if t not in self._feet_columns]
        n = len(self.cs)
        step = max(1, FEET_BLOCK // max(1, n))
        for c0 in range(0, len(todo), step):
            some = todo[c0:c0 + step]
            feet = feet_many(*self.steps(np.tile(np.arange(n), len(some)),
                                         np.repeat(np.array(some, dtype=np.intp), n)))
            self._feet_columns.update(zip(some, feet.reshape(len(some), n), strict=True))

    def feet(self, a: int, t: int) -> float:
        return float(self.feet_to(t)[a])

    def others_near_many(self, a: IntArray, t: IntArray) -> npt.NDArray[np.bool_]:
        """Per pair (a[k], t[k]): someone besides the attacker and the target within the
        vicinity of the target; each target's vicinity measured once."""
        if len(a) == 0:
            return np.zeros(0, dtype=bool)
        targets, inv = np.unique(t, return_inverse=True)
        self._measure_feet(targets.tolist())
        near = np.stack([self._feet_columns[u] <= self.options.vicinity_ft
                         for u in targets.tolist()])  # (targets, creatures)
        inv = inv.reshape(-1)
        count = near.sum(axis=1)[inv] - near[inv, t] - near[inv, a]
        out: npt.NDArray[np.bool_] = count > 0
        return out

    # -- cover ----------------------------------------------------------------------------

    def best_measure(self, a: int, t: int, named: bool = True) -> Measure:
        """The attacker shoots from whichever of its cells sees most of the target (with
        `named`, the walls and regions that cover it named too)."""
        key = self.number[a] << _PAIR_SHIFT | self.number[t]
        found = self._measures.get(key)
        if found is None or (named and not found.named):
            found = self._measures[key] = self._best_measure(a, t)
        return found

    def measures_of(self, pairs: IntArray) -> list[Measure]:
        """`best_measure` of each pair (pairs[k]: attacker, target), without names: those
        not measured yet are measured all at once (`measure_pairs`), the others read
        back."""
        if self.reference:
            return [self.best_measure(a, t, named=False) for a, t in pairs.tolist()]
        keys = self._pair_keys(pairs)
        got: list[Measure | None] = list(map(self._measures.get, keys))
        if not all(got):  # (a Measure is never false; `None in` would call __eq__ each)
            missing = np.flatnonzero(np.fromiter(map(operator.not_, got), dtype=bool,
                                                 count=len(got)))
            self.measure_pairs(pairs[missing])
            got = list(map(self._measures.__getitem__, keys))
        return cast(list[Measure], got)

    def measure_pairs(self, pairs: IntArray | Sequence[tuple[int, int]]) -> None:
        """Measure the covered fraction of every pair (attacker, target) not measured yet,
        all at once (`covered_many`), for `best_measure` to read back."""
        if self.reference:
            return
        rows = np.asarray(pairs, dtype=np.intp).reshape(-1, 2)
        measures = self._measures
        # Each pair of states once, the measured left out.
        key_arr, first = np.unique(self._key_array(rows), return_index=True)
        todo = np.fromiter(map(measures.__contains__, key_arr.tolist()), dtype=bool,
                           count=len(key_arr))
        rows, key_arr = rows[first[~todo]], key_arr[~todo]
        if not len(rows):
            return
        sealed = self.sealed(rows)
        # Wholly in one plain wall's shadow from every viewpoint, and no line of effect at
        # all.
        shut: dict[int, Measure] = {}
        closed = self._at_full_cover(rows, key_arr, sealed, shut)
        self._seen.update(dict.fromkeys(closed, False))
        rows, key_arr = rows[~sealed], key_arr[~sealed]
        if not len(rows):
            return
        # Then from each viewpoint on its own (its lines to the target's corners): a pair
        # may be hidden from every viewpoint, yet see its target from another part of the
        # attacker's space (asked below, as for every pair at full cover).
        hidden, dark = self.hidden_from_viewpoints(rows)
        self._at_full_cover(rows, key_arr, hidden, shut)
        left = ~hidden
        if left.any():
            # The viewpoints found dark are not measured again: the target is wholly
            # hidden from each (a covered fraction of 1), and a pair left has a viewpoint
            # that is not, which gives its least covered fraction (a third of the hex
            # scene's viewpoints: their cells, times the target's, are covered_many's
            # work).
            of_view = np.repeat(hidden, self._shapes.view_count[rows[:, 0]])
            measures.update(zip(key_arr[left].tolist(),
                                self.covered_many(rows[left], dark[~of_view]), strict=True))
        keys = key_arr.tolist()
        covered = np.fromiter(map(_COVERED, map(measures.__getitem__, keys)),
                              dtype=np.float64, count=len(keys))
        unknown = ~np.fromiter(map(self._seen.__contains__, keys), dtype=bool,
                               count=len(keys))
        # Those at full cover are asked for a line of effect next (`_degrees`): asked here,
        # the kernel's walk for one plain wall sealing them is not done twice (it was done
        # above, on rings holding the lines' spaces; on a hex grid the exact test's rings
        # are the hexes, which that walk did not look at).
        full = np.flatnonzero((covered >= _FULL) & unknown)
        # So are those partly covered whose every line from their viewpoint may be stopped
        # (`sight_blocked`; the others have a line of effect): in the same call, whose
        # fixed costs are paid once (a second call was 10 ms of a hex scene's 150).
        part = np.flatnonzero(left & (covered < _FULL) & unknown)
        if len(part):
            origins = np.array([measures[k].origin for k in key_arr[part].tolist()],
                               dtype=np.float64).reshape(-1, 2)
            blocked = self.sight_blocked(rows[part], origins)
            self._seen.update(dict.fromkeys(key_arr[part[~blocked]].tolist(), True))
            full = np.concatenate([full, part[blocked]])
        if len(full):
            seen = openings.pairs_line_of_effect(self.tracer, self.loe_spaces,
                                                 rows[full, 0], rows[full, 1],
                                                 walked=self.hex is None)
            self._seen.update(zip(key_arr[full].tolist(), seen.tolist(), strict=True))

    def _at_full_cover(self, rows: IntArray, keys: npt.NDArray[np.int64],
                       full: npt.NDArray[np.bool_], shut: dict[int, Measure]) -> list[int]:
        """Of these pairs (rows[k]: attacker, target; keys[k] its key), those `full` are
        measured at full cover now: the measure a batch gives, from the attacker's first
        viewpoint (one per attacker, shared in `shut`). Returns the keys of those
        measured."""
        at_full = np.flatnonzero(full)
        attackers = rows[at_full, 0].tolist()
        for a in set(attackers).difference(shut):
            x, y = self.viewpoints[a][0]
            shut[a] = Measure(1.0, (float(x), float(y)), (), (), named=False)
        done: list[int] = keys[at_full].tolist()
        self._measures.update(zip(done, map(shut.__getitem__, attackers), strict=True))
        return done

    def sealed(self, pairs: IntArray) -> npt.NDArray[np.bool_]:
        """Per pair (pairs[k]: attacker, target): whether one plain wall (or a run of them
        end to end) separates the two creatures' whole spaces (`seal_rings`; geometry.
        openings.sealed_pairs). Such a wall casts a shadow of full weight that holds every
        point of the target's body, seen from anywhere in the attacker's space: the covered
        fraction is 1 from each viewpoint, and no line joins the two spaces. 97% of the
        benchmark scene's pairs are at full cover, 90% of them sealed so; finding them costs
        about a twentieth of measuring them. A creature whose space is a point or a line is
        never taken as sealed (it is measured)."""
        rings, corners = self.seal_rings
        a, t = pairs[:, 0], pairs[:, 1]
        found = openings.sealed_pairs(self.tracer, rings, corners, a, t,
                                      None if self.hex is not None else self._room_rings)
        if found is None:
            return np.zeros(len(pairs), dtype=bool)
        flat = (kernel.over_points(np.maximum, rings)
                - kernel.over_points(np.minimum, rings)).min(axis=1) <= 0
        out: npt.NDArray[np.bool_] = found & ~flat[a] & ~flat[t]
        return out

    def _room_rings(self) -> FloatArray:
        """On a square grid, the rings each creature's room is read from (geometry.rooms):
        its space a hair inside, widened to hold each of its viewpoints. A body flush
        against the wall of a room is then in the room: wholly hidden from the other
        rooms (the wall's shadow holds all of its area), and no line of effect leaves it
        (the line-of-effect spaces are a hair inside too). On the benchmark scene 1,453
        pairs of 4,950 are so walled off, 643 with the rings on their walls. A token of
        1.5 squares shoots from the centres of two squares, the second one's on its own
        border: flush against a wall, that viewpoint is on the wall and sees out, and the
        ring that holds it meets the room's border (found by a review). Square grids only:
        on a hex grid the rooms are read from the rings the sealing walk reads."""
        sh = self._shapes
        inset = openings.box_rings(self.tracer.boxes.reshape(-1, 4), INSET_PX)
        lo, hi = inset[:, 0, :], inset[:, 2, :]
        if len(sh.views):
            start = sh.view_start
            lo = np.minimum(lo, np.column_stack([np.minimum.reduceat(sh.views[:, 0], start),
                                                 np.minimum.reduceat(sh.views[:, 1], start)]))
            hi = np.maximum(hi, np.column_stack([np.maximum.reduceat(sh.views[:, 0], start),
                                                 np.maximum.reduceat(sh.views[:, 1], start)]))
        return openings.box_rings(np.concatenate([lo, hi], axis=1), 0.0)

    def hidden_from_viewpoints(self, pairs: IntArray
                               ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """Per pair (pairs[k]: attacker, target): whether from every viewpoint of the
        attacker one plain wall (or a run of them end to end) crosses every line to the
        corners of the target's `seal_ring`: its shadow, of full weight, holds the target's
        whole body, so the covered fraction is 1 from each (`kernel.sealed_blocks`, a
        viewpoint a ring of one point). Of the benchmark scene's fully covered pairs no one
        wall separates from the attacker's whole space, most are found so. A viewpoint on
        or inside its target, or within a hair of a plain wall (which casts no shadow from
        it, `measure`), is never taken as hidden. And per viewpoint of each pair in turn
        (the attacker's `viewpoints`, pair after pair), whether the target is wholly
        hidden from it so."""
        tr = self.tracer
        plain = np.flatnonzero(tr.wall_plain)
        if len(pairs) == 0:
            return np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
        a, t = pairs[:, 0], pairs[:, 1]
        counts = self._shapes.view_count[a]
        if len(plain) == 0:
            return np.zeros(len(pairs), dtype=bool), np.zeros(int(counts.sum()), dtype=bool)
        pair = np.repeat(np.arange(len(pairs)), counts)
        view = np.repeat(self._shapes.view_start[a], counts) + kernel.within_runs(counts)
        rings, _ = self.seal_rings
        p = self._shapes.views[view]
        dark = kernel.sealed_blocks(p[:, None, :], rings[t[pair]], tr.wall_xy, plain)
        dark &= ~self._views_near_wall(view)
        dark &= ~shapely.intersects(self.bodies[t[pair]], shapely.points(p))
        flat = (kernel.over_points(np.maximum, rings)
                - kernel.over_points(np.minimum, rings)).min(axis=1) <= 0
        dark &= ~flat[t[pair]]
        out = np.bincount(pair, weights=~dark, minlength=len(pairs)) == 0
        return out & ~flat[t], dark

    def _views_near_wall(self, view: IntArray) -> npt.NDArray[np.bool_]:
        """Per viewpoint asked (view[k]: a row of `_shapes.views`): within a hair (1e-6 px)
        of a plain wall. Each viewpoint is looked up when first asked: a walking step at
        1,000 creatures asks about a few, and looking up all of them was a twentieth of
        its work."""
        views, near = self._shapes.views, self._near_wall
        todo = np.unique(view[near[view] < 0])
        if len(todo):
            near[todo] = 0
            tr = self.tracer
            if len(tr.walls):
                _, tree = wall_lines(tr.walls, tr.wall_xy)
                r, w = tree.query(shapely.points(views[todo]), predicate="dwithin",
                                  distance=1e-6)
                near[todo[r[tr.wall_plain[w]]]] = 1
        out: npt.NDArray[np.bool_] = near[view] > 0
        return out

    @functools.cached_property
    def _near_wall(self) -> npt.NDArray[np.int8]:
        """Per viewpoint (`_shapes.views`): -1 until `_views_near_wall` looks it up, then
        whether it is within a hair of a plain wall (1) or not (0)."""
        return np.full(len(self._shapes.views), -1, dtype=np.int8)

    @functools.cached_property
    def seal_rings(self) -> tuple[FloatArray, IntArray]:
        """Per creature, a convex ring holding its whole space, its border included (its box
        on a square grid; on a hex grid the hull of its hexes), and its number of corners.
        Not a hair inside, as the line-of-effect spaces are: the shadows must hold the
        target's whole body."""
        tr = self.tracer
        if self.hex is None:
            rings = openings.box_rings(tr.boxes.reshape(-1, 4), 0.0)
            return rings, np.full(len(rings), 4, dtype=np.intp)
        # Each creature's ring once (a move changes one), the missing worked out together
        # (a ring does not depend on the others of its batch).
        spaces = openings.spaces_of(tr, 0.0)
        return openings.padded_rings(per_creature(
            "realms seal ring", self.cs, self.grid,
            lambda todo: openings.ring_list(*openings.hull_rings(
                spaces.take(np.array(todo, dtype=np.intp))))))

    def _key_array(self, pairs: IntArray) -> npt.NDArray[np.int64]:
        """Per pair (pairs[k]: attacker, target): the key its facts are kept by."""
        out: npt.NDArray[np.int64] = (self._numbers[pairs[:, 0]] << _PAIR_SHIFT
                                      | self._numbers[pairs[:, 1]])
        return out

    def _pair_keys(self, pairs: IntArray) -> list[CreaturePair]:
        """`_key_array` as a list (dict keys)."""
        out: list[CreaturePair] = self._key_array(pairs).tolist()
        return out

    def known_lines(self, pairs: IntArray) -> list[bool | None]:
        """Per pair (pairs[k]: attacker, target): whether it has a line of effect, if that
        is known already (`lines_of_effect`, `measure_pairs`), else None."""
        return list(map(self._seen.get, self._pair_keys(pairs)))

    def lines_of_effect(self, pairs: IntArray) -> npt.NDArray[np.bool_]:
        """Per pair (pairs[k]: attacker, target): whether some straight line joins the two
        spaces unstopped (geometry.openings), asked once per pair of creatures as they
        stand."""
        keys = self._pair_keys(pairs)
        got = list(map(self._seen.get, keys))
        todo = [k for k, g in enumerate(got) if g is None]
        if todo:
            rows = pairs[todo]
            seen = openings.pairs_line_of_effect(self.tracer, self.loe_spaces, rows[:, 0],
                                                 rows[:, 1])
            for k, s in zip(todo, seen.tolist(), strict=True):
                got[k] = self._seen[keys[k]] = s
        return np.array(got, dtype=bool)

    def sight_blocked(self, pairs: IntArray,
                      origins: FloatArray) -> npt.NDArray[np.bool_]:
        """Per pair (pairs[k]: attacker, target): whether every line tried from origins[k]
        (the viewpoint it was measured from, inside the attacker's space) to the target's
        centre and to each corner of each of its spaces (its box, or each of its hexes, a
        hair inside) may be stopped: it crosses something that can stop a line (a solid
        wall, one-way or banded ones included, a border of blocking terrain) or two
        limited walls. A line that crosses neither is a line of effect. (A target of
        several hexes partly covered is often seen through one hex only: before, the first
        hex's corners were tried alone, and 43 pairs of the hex benchmark scene's 44 went
        to the exact search, 20 ms of its 150, each to find a line.)"""
        out = np.zeros(len(pairs), dtype=bool)
        blk = openings.blockers(self.tracer)
        if len(pairs) == 0 or len(blk.xy) == 0:
            return out
        spaces = self.loe_spaces
        centre = np.asarray(self.centres, dtype=np.float64)
        t = pairs[:, 1]
        # Each pair's lines: to its target's centre and to the corners of its first space,
        # then, for the pairs all of those may be stopped at, to the other spaces' corners.
        # One block of lines per pair, from its one origin: the kernel's walls near each
        # block are found once, and a line is done with at the first wall that stops it.
        ends = np.concatenate([centre[t][:, None, :], spaces.rings[spaces.first[t]]], axis=1)
        out[:] = self._all_stopped(blk, origins[:, None, :], ends)
        more = np.flatnonzero(out & (spaces.count[t] > 1))
        # Targets of several spaces (hexes), by their number of spaces: one block of
        # lines per pair, to the corners of its other spaces.
        for count in np.unique(spaces.count[t[more]]).tolist():
            rows = more[spaces.count[t[more]] == count]
            ring = spaces.first[t[rows]][:, None] + np.arange(1, count)
            out[rows] = self._all_stopped(
                blk, origins[rows][:, None, :],
                spaces.rings[ring].reshape(len(rows), -1, 2))
        return out

    @staticmethod
    def _all_stopped(blk: openings.Blockers, starts: FloatArray,
                     ends: FloatArray) -> npt.NDArray[np.bool_]:
        """Per block of lines (starts (n, 1, 2) -> ends (n, Q, 2)), whether every one of its
        lines crosses something that can stop a line, or two limited walls."""
        n, q = ends.shape[:2]
        line, _, _, crossed = kernel.blocks_cross_walls_any(starts, ends, blk.xy,
                                                            ~blk.limited)
        # (Only the limited walls are listed hit by hit: the others are `crossed`.)
        stopped = np.bincount(line, minlength=n * q) >= 2
        stopped[crossed] = True
        out: npt.NDArray[np.bool_] = np.all(stopped.reshape(n, q), axis=1)
        return out

    @functools.cached_property
    def loe_spaces(self) -> openings.Spaces:
        """Every creature's space for the exact line of effect, a hair inside."""
        return openings.spaces_of(self.tracer, INSET_PX)

    def _best_measure(self, a: int, t: int) -> Measure:
        best: Measure | None = None
        for x, y in self.viewpoints[a]:
            m = self.measure((float(x), float(y)), t, attacker=a)
            if best is None or m.covered < best.covered - 1e-9:
                best = m
        assert best is not None
        return best

    def _band_meets_span(self, walls: npt.NDArray[np.intp], t: int,
                         attacker: int | None) -> npt.NDArray[np.bool_]:
        """Per wall: whether its height band overlaps (not only touches) the vertical span
        from the lower of the two creatures' feet to the higher of their heads (an area's
        origin: a point on the ground)."""
        et, ht = self._elev[t], self._tall[t]
        ea, ha = (0.0, 0.0) if attacker is None else (self._elev[attacker],
                                                      self._tall[attacker])
        lo, hi = min(ea, et), max(ea + ha, et + ht)
        bottom, top = self.tracer.wall_bottom[walls], self.tracer.wall_top[walls]
        bottom = np.where(np.isnan(bottom), -np.inf, bottom)  # NaN: open downwards
        top = np.where(np.isnan(top), np.inf, top)  # NaN: open upwards
        meets: npt.NDArray[np.bool_] = (bottom < hi) & (top > lo)
        return meets

    def _partial_share(self, walls: npt.NDArray[np.intp], t: int,
                       attacker: int | None) -> npt.NDArray[np.float64]:
        """Per wall: the share of the target's height its height band hides, for a band
        that leaves part of the vertical span between the two creatures (lower feet to
        higher head; an area's origin: a point on the ground) open, so some sight passes
        over or under it; -1 for a wall without a band or one spanning it whole."""
        et, ht = self._elev[t], self._tall[t]
        ea, ha = (0.0, 0.0) if attacker is None else (self._elev[attacker],
                                                      self._tall[attacker])
        lo, hi = min(ea, et), max(ea + ha, et + ht)
        bottom, top = self.tracer.wall_bottom[walls], self.tracer.wall_top[walls]
        bottom = np.where(np.isnan(bottom), -np.inf, bottom)
        top = np.where(np.isnan(top), np.inf, top)
        spans = (bottom <= lo) & (top >= hi)
        hidden = np.clip(np.minimum(top, et + ht) - np.maximum(bottom, et), 0.0, None)
        share = hidden / max(float(ht), 1e-9)
        out: npt.NDArray[np.float64] = np.where(spans, -1.0, share)
        return out

    def measure(self, p: tuple[float, float], t: int, attacker: int | None = None) -> Measure:
        """The fraction of target t's body the shadows cast from point p hide, each shadow
        weighted by how much of a body its obstacle hides."""
        tr = self.tracer
        body = self.bodies[t]
        hull = shapely.convex_hull(shapely.union(body, shapely.Point(p)))
        segs: list[FloatArray] = []
        weights: list[float] = []
        names: list[tuple[str, str]] = []
        if len(tr.walls):
            # Boxes first (numpy), then the exact test on the walls whose box meets the hull's.
            x0, y0, x1, y1 = hull.bounds
            xy = tr.wall_xy
            near = ((np.minimum(xy[:, 0], xy[:, 2]) <= x1) & (np.maximum(xy[:, 0], xy[:, 2]) >= x0)
                    & (np.minimum(xy[:, 1], xy[:, 3]) <= y1)
                    & (np.maximum(xy[:, 1], xy[:, 3]) >= y0))
            idx = np.nonzero(near)[0]
            if idx.size:
                idx = idx[shapely.intersects(self._wall_lines[idx], hull)]
            if idx.size:
                solid, low, improved = wall_roles(tr, self._tall, self._elev, idx,
                                                  np.full(idx.size, t))
                facing = tr.facing(idx, np.repeat([p], idx.size, 0))
                # Limited (terrain) walls hide nothing alone; they cast no shadow here.
                keep = facing & ~tr.wall_limited[idx]
                # The third dimension where it is exact: every line of sight from the
                # shooter's height to the target's stays between the lower feet and the
                # higher head of the two, so a wall whose height band (Wall Height) lies
                # wholly below or above that span meets none of them and casts no shadow
                # (an archer and a target on a tower over a low wall). Shadows cast are
                # still judged on the map (docs/rulesets.md, not yet in 3D).
                keep &= self._band_meets_span(idx, t, attacker)
                # A wall through the viewpoint touches each line only at its start: by the
                # crossing convention it blocks none of them, so it casts no shadow.
                keep &= shapely.distance(self._wall_lines[idx], shapely.Point(p)) > 1e-6
                if not self.options.low_cover_near_attacker and attacker is not None \
                        and low.any():
                    near_attacker = shapely.distance(self._wall_lines[idx],
                                                     self.bodies[attacker]) < shapely.distance(
                        self._wall_lines[idx], body)
                    keep &= ~(low & near_attacker)
                partly = self._partial_share(idx, t, attacker)
                for k in np.nonzero(keep)[0]:
                    w = int(idx[k])
                    cover = WallCover.LOW if low[k] else (
                        WallCover.IMPROVED if improved[k] else WallCover.SOLID)
                    assert solid[k] or low[k] or improved[k]
                    segs.append(tr.wall_xy[w])
                    hides = Realms.WALL_HIDES[cover]
                    if solid[k] and partly[k] >= 0:
                        # A wall above the waist that the sight passes over in part hides
                        # its share of the body, never all of it (issue 14).
                        hides = min(float(partly[k]), Realms.PARTIAL_WALL_MAX)
                    weights.append(hides)
                    names.append(("wall", tr.walls[w].id))
        point = shapely.Point(p)
        for r, poly in zip(tr.regions, tr.region_polys, strict=True):
            hides = Realms.REGION_HIDES[r.kind]
            if hides <= 0 or poly.contains(point) or not poly.intersects(hull):
                continue
            # Only the sides meeting the hull can cast a shadow on the body (indexed once
            # per region): a region's cost per pair is the sides near the sight, not all.
            sides = kernel.polygon_sides_meeting(poly, hull)
            far = shapely.distance(shapely.linestrings(sides.reshape(-1, 2, 2)), point) > 1e-6
            for e in sides[far]:
                segs.append(e)
                weights.append(hides)
                names.append(("region", r.id))
        if not segs:
            return Measure(0.0, p, (), ())
        arr = np.array(segs, dtype=np.float64)
        far = np.asarray(body.exterior.coords, dtype=np.float64) if body.geom_type == "Polygon" \
            else np.asarray(shapely.get_coordinates(body), dtype=np.float64)
        reach = 2.0 * float(np.max(np.hypot(far[:, 0] - p[0], far[:, 1] - p[1]))) + 1.0
        shadows = repaired(shapely.polygons(shadow_polygons(
            np.array(p, dtype=np.float64), arr[:, 0:2], arr[:, 2:4], reach)))
        on = shapely.intersection(shadows, body)
        areas = shapely.area(on)
        weight = np.array(weights)
        hit = areas > 1e-9
        if not hit.any():
            return Measure(0.0, p, (), ())
        total = float(body.area)
        covered = 0.0
        if np.any((weight == 1.0) & (areas >= total * (1 - 1e-12))):
            covered = 1.0  # one full-height obstacle hides all of it: nothing to add up
        else:
            hidden_so_far: shapely.Geometry = shapely.Polygon()
            # Heaviest obstacles first: where shadows overlap, the one hiding most counts.
            for level in sorted(set(weight[hit].tolist()), reverse=True):
                layer = shapely.union_all(on[hit & (weight == level)])
                fresh = float(shapely.area(shapely.difference(layer, hidden_so_far)))
                covered += level * fresh / total
                hidden_so_far = shapely.union(hidden_so_far, layer)
        walls = tuple(sorted({n for (kind, n), h in zip(names, hit, strict=True)
                              if h and kind == "wall"}))
        regions = tuple(sorted({n for (kind, n), h in zip(names, hit, strict=True)
                                if h and kind == "region"}))
        return Measure(min(1.0, round(covered, 9)), p, walls, regions)

    # -- cover, many pairs at once ------------------------------------------------------------

    def _prepared(self) -> None:
        """Per creature, as stacked arrays: the corners of its cells (its space on a square
        grid, its hexes on a hex grid) and its body's area (its viewpoints are
        `_shapes`')."""
        if hasattr(self, "_cells"):
            return
        self._speck = np.zeros(len(self.cs), dtype=bool)
        if self.hex is not None:
            layout = self.hex
            cells = per_creature("realms hex cells", self.cs, self.grid, lambda todo: [
                np.array([hexgrid.vertices(layout, i, j) for i, j in fp.cells],
                         dtype=np.float64).reshape(-1, 6, 2)
                for fp in (hexgrid.footprint(self.cs[k], self.grid) for k in todo)])
            self._speck[:] = [fp.point for fp in hex_footprints(self.cs, self.grid)]
            self._cells = np.concatenate(cells) if cells else np.empty((0, 6, 2))
            counts = np.array([len(x) for x in cells], dtype=np.intp)
        else:
            # One cell per creature, its space, corners clockwise from the top left.
            b = columns(self.cs, self.grid).spaces
            self._cells = np.stack([b[:, [0, 1]], b[:, [2, 1]], b[:, [2, 3]], b[:, [0, 3]]],
                                   axis=1).reshape(-1, 4, 2)
            counts = np.ones(len(self.cs), dtype=np.intp)
        self._cell_count, self._cell_start = counts, np.cumsum(counts) - counts
        self._area = shapely.area(self.bodies) if self.cs else np.empty(0)
        self._cell_area = shapely.area(shapely.polygons(self._cells))

    def covered_many(self, pairs: IntArray | Sequence[tuple[int, int]],
                     dark: npt.NDArray[np.bool_] | None = None) -> list[Measure]:
        """`_best_measure` of many (attacker, target) pairs at once, the covered fraction
        only (walls and regions not named), `dark`: per viewpoint of each pair in turn,
        the target is known to be wholly hidden from it (`hidden_from_viewpoints`; each
        pair has one that is not): it is left out, as it cannot see least of the target.
        Every viewpoint of every pair is one request;
        the walls and region sides that can shade its target are those meeting the hull of
        the viewpoint and the body (found in one wall-index query for all), weighted as
        `measure` weighs them, and the weighted hidden area is summed exactly by
        `rulesets.shadows.hidden_areas` (no polygon overlay). A viewpoint inside or on its
        target (stacked tokens) or a point target is measured by `measure` itself."""
        self._prepared()
        tr = self.tracer
        rows = np.asarray(pairs, dtype=np.intp).reshape(-1, 2)
        pa, pt = rows[:, 0], rows[:, 1]
        counts = self._shapes.view_count[pa]
        pair = np.repeat(np.arange(len(pairs)), counts)
        view = self._shapes.view_start[pa[pair]] + kernel.within_runs(counts)
        if dark is not None:
            pair, view = pair[~dark], view[~dark]
        ra, rt = pa[pair], pt[pair]
        p = take_rows(self._shapes.views, view)
        n = len(p)
        points = shapely.points(p)
        # The hull of each viewpoint and its target's cells.
        cc = self._cell_count[rt]
        cell_req = np.repeat(np.arange(n), cc)
        cell_at = np.repeat(self._cell_start[rt], cc) + kernel.within_runs(cc)
        # (Each target's hull ring for its body: the hull of its cells, `seal_rings`.)
        rings, corners = self.seal_rings
        rings_t = take_rows(rings, rt)
        hull = hulls(p, rings_t, corners[rt])
        slow = self._speck[rt] | shapely.intersects(self.bodies[rt], points)
        req: list[IntArray] = []
        segs: list[FloatArray] = []
        weights: list[FloatArray] = []
        groups: list[IntArray] = []
        if len(tr.walls):
            lines, tree = wall_lines(tr.walls, tr.wall_xy)
            r, w = meeting(tree, hull, (p, rings_t, tr.wall_xy), corners[rt])
            if len(r):
                solid, low, improved = wall_roles(tr, self._tall, self._elev, w, rt[r])
                keep = tr.facing(w, take_rows(p, r)) & ~tr.wall_limited[w]
                keep &= self._band_meets_span_rows(w, rt[r], ra[r])
                keep &= shapely.distance(lines[w], points[r]) > 1e-6
                if not self.options.low_cover_near_attacker and low.any():
                    li = np.flatnonzero(low & keep)
                    near_attacker = shapely.distance(lines[w[li]], self.bodies[ra[r[li]]]) \
                        < shapely.distance(lines[w[li]], self.bodies[rt[r[li]]])
                    keep[li[near_attacker]] = False
                partly = self._partial_share_rows(w, rt[r], ra[r])
                hides = Realms.WALL_HIDES
                weight = np.where(low, hides[WallCover.LOW], np.where(
                    improved, hides[WallCover.IMPROVED], hides[WallCover.SOLID]))
                weight = np.where(solid & (partly >= 0),
                                  np.minimum(partly, Realms.PARTIAL_WALL_MAX), weight)
                req.append(r[keep])
                segs.append(take_rows(tr.wall_xy, w[keep]))
                weights.append(weight[keep])
                groups.append(np.full(int(keep.sum()), -1, dtype=np.intp))
        for number, (region, poly) in enumerate(zip(tr.regions, tr.region_polys, strict=True)):
            hides_r = Realms.REGION_HIDES[region.kind]
            if hides_r <= 0:
                continue
            eligible = np.flatnonzero(~shapely.contains(poly, points)
                                      & shapely.intersects(poly, hull))
            if not len(eligible):
                continue
            rs, sides = kernel.polygon_sides_meeting_many(poly, hull[eligible])
            rs = eligible[rs]
            far = shapely.distance(shapely.linestrings(sides.reshape(-1, 2, 2)),
                                   points[rs]) > 1e-6
            # The viewpoint is outside the region: the sides whose outer face it sees
            # cast every shadow the others would.
            far &= front_sides(poly, rs, sides, p)
            req.append(rs[far])
            segs.append(np.compress(far, sides, axis=0))
            weights.append(np.full(int(far.sum()), hides_r))
            groups.append(np.full(int(far.sum()), number, dtype=np.intp))
        seg_req = np.concatenate(req) if req else np.empty(0, dtype=np.intp)
        seg = np.concatenate(segs) if segs else np.empty((0, 4))
        seg_w = np.concatenate(weights) if weights else np.empty(0)
        seg_g = np.concatenate(groups) if groups else np.empty(0, dtype=np.intp)
        covered = np.zeros(n)
        fast = ~slow
        live = fast[seg_req] & (seg_w > 0)
        if live.any():
            seg_req, seg_w, seg_g = seg_req[live], seg_w[live], seg_g[live]
            seg = np.compress(live, seg, axis=0)
            levels = np.unique(seg_w)[::-1]
            # One request per cell of the target; each cell sees its request's segments.
            # A cell of a target of several hexes wholly behind one plain wall (or a run)
            # from its viewpoint is hidden whole, at full weight: its area, not its
            # segments' shadows worked out (a target of one cell is such a viewpoint's,
            # left out before: `dark`).
            cell_ok = fast[cell_req]
            whole = np.zeros(len(cell_req), dtype=bool)
            plain = np.flatnonzero(tr.wall_plain)
            if len(plain):
                ask = np.flatnonzero(cell_ok & (self._cell_count[rt][cell_req] > 1)
                                     & ~self._views_near_wall(view[cell_req]))
                whole[ask] = kernel.sealed_blocks(take_rows(p, cell_req[ask])[:, None, :],
                                                  take_rows(self._cells, cell_at[ask]),
                                                  tr.wall_xy, plain)
            cell_ok &= ~whole
            cr, cat = cell_req[cell_ok], cell_at[cell_ok]
            seg_order = np.argsort(seg_req, kind="stable")
            seg_req, seg, seg_w, seg_g = (seg_req[seg_order], take_rows(seg, seg_order),
                                          seg_w[seg_order], seg_g[seg_order])
            sc = np.bincount(seg_req, minlength=n)
            s_start = np.cumsum(sc) - sc
            cell_seg_n = sc[cr]
            cell_of = np.repeat(np.arange(len(cr)), cell_seg_n)
            seg_of = np.repeat(s_start[cr], cell_seg_n) + kernel.within_runs(cell_seg_n)
            cell_segs = take_rows(seg, seg_of)
            hidden = hidden_areas(take_rows(p, cr), take_rows(self._cells, cat), cell_of,
                                  cell_segs[:, 0:2], cell_segs[:, 2:4], seg_w[seg_of], levels,
                                  seg_g[seg_of])
            step = levels - np.append(levels[1:], 0.0)
            # (Written out, level by level: `hidden @ step` would go to BLAS and its
            # threads, docs/geometry.md.)
            per_cell = functools.reduce(np.add, [hidden[:, j] * step[j]
                                                 for j in range(len(step))],
                                        np.zeros(len(hidden)))
            total = np.zeros(n)
            np.add.at(total, cr, per_cell)
            np.add.at(total, cell_req[whole], self._cell_area[cell_at[whole]])
            covered = total / self._area[rt]
        out: list[Measure] = []
        viewpoints = [(float(x), float(y)) for x, y in p.tolist()]
        values = [min(1.0, round(v, 9)) for v in covered.tolist()]
        slow_l = slow.tolist()
        pair_l = pair.tolist()
        best: Measure | None = None
        for q in range(n):
            m = (self.measure(viewpoints[q], int(rt[q]), attacker=int(ra[q])) if slow_l[q]
                 else Measure(values[q], viewpoints[q], (), (), named=False))
            if q == 0 or pair_l[q] != pair_l[q - 1]:
                if best is not None:
                    out.append(best)
                best = m
            elif best is not None and m.covered < best.covered - 1e-9:
                best = m
        if best is not None:
            out.append(best)
        return out

    def _spans_rows(self, walls: npt.NDArray[np.intp], t: npt.NDArray[np.intp],
                    attacker: npt.NDArray[np.intp],
                    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64],
                               npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Per row-paired (wall, target, attacker) row: the vertical span the two creatures
        fill (lowest foot, highest head) and the wall's band (unbounded sides infinite)."""
        et, ht = self._elev[t], self._tall[t]
        ea, ha = self._elev[attacker], self._tall[attacker]
        lo, hi = np.minimum(ea, et), np.maximum(ea + ha, et + ht)
        bottom, top = self.tracer.wall_bottom[walls], self.tracer.wall_top[walls]
        return (lo, hi, np.where(np.isnan(bottom), -np.inf, bottom),
                np.where(np.isnan(top), np.inf, top))

    def _band_meets_span_rows(self, walls: npt.NDArray[np.intp], t: npt.NDArray[np.intp],
                              attacker: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
        """`_band_meets_span` for row-paired (wall, target, attacker) rows."""
        lo, hi, bottom, top = self._spans_rows(walls, t, attacker)
        meets: npt.NDArray[np.bool_] = (bottom < hi) & (top > lo)
        return meets

    def _partial_share_rows(self, walls: npt.NDArray[np.intp], t: npt.NDArray[np.intp],
                            attacker: npt.NDArray[np.intp]) -> npt.NDArray[np.float64]:
        """`_partial_share` for row-paired (wall, target, attacker) rows."""
        lo, hi, bottom, top = self._spans_rows(walls, t, attacker)
        et, ht = self._elev[t], self._tall[t]
        spans = (bottom <= lo) & (top >= hi)
        hidden = np.clip(np.minimum(top, et + ht) - np.maximum(bottom, et), 0.0, None)
        share = hidden / np.maximum(ht, 1e-9)
        out: npt.NDArray[np.float64] = np.where(spans, -1.0, share)
        return out

    # -- obscurement ----------------------------------------------------------------------

    def obscurement(self, p: tuple[float, float],
                    q: tuple[float, float]) -> tuple[int, tuple[str, ...]]:
        """The worst penalty of the obscuring regions the line from p to q passes through or
        ends in (penalties do not stack), and those regions."""
        if not self.obscuring:
            return 0, ()
        line = shapely.LineString([p, q])
        worst, found = 0, []
        for r, poly in self.obscuring:
            if poly.intersects(line):
                found.append(r.id)
                penalty = r.penalty if r.penalty is not None else self.options.obscured_penalty
                worst = max(worst, penalty)
        return worst, tuple(sorted(set(found)))

