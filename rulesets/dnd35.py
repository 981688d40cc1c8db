"""D&D 3.5 cover (seed 004, the Italian SRD text) with SRD flanking.

Rule of this module: the numbers sit in the tables below; the procedure is the shared corner
engine (rulesets.corner). A variant (Pathfinder 1e) subclasses and overrides only the table
entries and steps that differ, as python-chess variants do.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from geometry.columns import ids_of
from geometry.incremental import SightPoints
from geometry.kernel import IntArray
from geometry.model import SceneGeom, point_creature
from geometry.templates import Template, inside, shape
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
    attack_flags,
    pair_indices,
    pair_rows,
)
from rulesets.corner import (
    CORNER_OPTION_DOCS,
    COVER,
    IMPROVED,
    MODE_CODE,
    NONE,
    SOFT,
    TOTAL,
    CornerEngine,
    CornerOptions,
    CoverProbes,
    PairFacts,
    Rows,
)
from rulesets.corner import sight_points as corner_sight_points
from rulesets.shadows import warm_wall_lines

M = Modifier
_OUTCOMES: dict[tuple[type, Degree, bool, bool, bool],
                tuple[frozenset[Flag], tuple[Modifier, ...]]] = {}
_BEYOND = "vs effects originating beyond the cover"
_FLOOR = operator.attrgetter("cover_floor")


class Dnd35(Ruleset):
    """D&D 3.5: corner lines, soft cover from creatures, low obstacles, improved cover."""

    name: ClassVar[str] = "dnd35"
    title: ClassVar[str] = "D&D 3.5 (SRD cover, seed 004)"
    seed: ClassVar[str] = "004_abbe9fd9ba2a48ff.txt"
    Options: ClassVar[type[CornerOptions]] = CornerOptions
    option_docs: ClassVar[Mapping[str, str]] = CORNER_OPTION_DOCS

    #: Engine level -> reported degree.
    DEGREES: ClassVar[Mapping[int, Degree]] = {
        NONE: Degree.NONE, SOFT: Degree.SOFT, COVER: Degree.COVER,
        IMPROVED: Degree.IMPROVED, TOTAL: Degree.TOTAL,
    }
    ladder: ClassVar[tuple[Degree, ...]] = (Degree.NONE, Degree.SOFT, Degree.COVER,
                                            Degree.IMPROVED)
    grid_note: ClassVar[str] = ("its cover is drawn from the corners of squares, which a hex "
                                "grid does not have")
    #: What each degree is worth to the target.
    TABLE: ClassVar[Mapping[Degree, tuple[Modifier, ...]]] = {
        Degree.NONE: (),
        Degree.SOFT: (M(Stat.AC, 4, ModKind.COVER, "soft cover: a creature in the way"),),
        Degree.COVER: (M(Stat.AC, 4, ModKind.COVER, "cover"),
                       M(Stat.REFLEX, 2, ModKind.COVER, f"cover, {_BEYOND}")),
        Degree.IMPROVED: (M(Stat.AC, 8, ModKind.COVER, "improved cover"),
                          M(Stat.REFLEX, 4, ModKind.COVER, f"improved cover, {_BEYOND}"),
                          M(Stat.HIDE, 10, ModKind.COVER, "improved cover")),
        Degree.TOTAL: (),
    }
    #: Degrees that let the target hide (soft cover does not).
    HIDE_DEGREES: ClassVar[frozenset[Degree]] = frozenset({Degree.COVER, Degree.IMPROVED})
    EVASION_DEGREES: ClassVar[frozenset[Degree]] = frozenset({Degree.IMPROVED})
    FLANKING_BONUS: ClassVar[int] = 2
    #: The flags a flanking attacker gets.
    FLANKING_FLAGS: ClassVar[frozenset[Flag]] = frozenset({Flag.FLANKING})
    #: What a creature caught in an area effect keeps of its annotation: the save bonus
    #: and the flags that mean something against an area.
    AREA_STATS: ClassVar[frozenset[Stat]] = frozenset({Stat.REFLEX})
    AREA_FLAGS: ClassVar[frozenset[Flag]] = frozenset({Flag.IMPROVED_EVASION})

    #: Whether `_degree` looks closer at rows the lines put at cover (pf1's partial
    #: cover), and at those only: the other rows are annotated as columns all the same.
    REFINES_COVER: ClassVar[bool] = False

    def evaluate(self, scene: SceneGeom, options: Any,
                 pairs: Sequence[tuple[str, str]] | None = None,
                 modes: Iterable[AttackMode] = tuple(AttackMode),
                 lines: bool = False) -> list[Annotation]:
        return self._evaluate(scene, options, pairs, modes, lines, reference=False)

    def _evaluate(self, scene: SceneGeom, options: Any,
                  pairs: Sequence[tuple[str, str]] | None, modes: Iterable[AttackMode],
                  lines: bool, reference: bool) -> list[Annotation]:
        """`evaluate`; with `reference`, every row one by one through `_annotation` (and
        the engine's pair-by-pair measurements), the computation the columns replace."""
        engine = self._engine(scene, options)
        engine.reference_shadows = reference
        modes = tuple(modes)
        columnar = not lines and not reference and (
            type(self)._degree is Dnd35._degree or self.REFINES_COVER)
        n = len(scene.creatures)
        if pairs is None and columnar:
            # Every ordered pair, as arrays; flanking's melee facts are all among them.
            return self._annotate_columns(engine, pair_rows(n, engine.index, None), modes, [],
                                          options)
        idx_pairs = pair_indices(n, engine.index, pairs)
        # Flanking needs melee facts for everyone who can reach a target, asked for or not.
        melee = AttackMode.MELEE in modes
        asked = set(idx_pairs) if melee else set()
        extra = [] if not any(m is not AttackMode.RANGED for m in modes) else [
            (b, t) for b, t in engine.threat_rows(idx_pairs) if (b, t) not in asked]
        if not columnar:
            # A variant overriding _degree may look at the probes; lines are per row.
            rows = [(a, t, m) for a, t in idx_pairs for m in modes]
            all_rows = rows + [(b, t, AttackMode.MELEE) for b, t in extra]
            facts = engine.evaluate(all_rows, lines,
                                    want_probes=type(self)._degree is not Dnd35._degree)
            self._prepare(engine, rows, facts[:len(rows)], options)
            threatens = {(a, t): bool(self._threatens(f.in_reach, f.adjacent, f.level))
                         for (a, t, m), f in zip(all_rows, facts, strict=True)
                         if m is AttackMode.MELEE}
            return [self._annotation(engine, a, t, m, f, threatens, options)
                    for (a, t, m), f in zip(rows, facts[:len(rows)], strict=True)]
        return self._annotate_columns(
            engine, np.array(idx_pairs, dtype=np.intp).reshape(-1, 2), modes, extra, options)

    def _annotate_columns(self, engine: CornerEngine, pa: npt.NDArray[np.intp],
                          modes: tuple[AttackMode, ...], extra: Sequence[tuple[int, int]],
                          options: Any) -> list[Annotation]:
        """Every row's annotation when the degree is the engine's level: the facts come as
        arrays, rows sharing an outcome (degree, reach, adjacency, melee) share its flags
        and modifiers, and only rows a GM floor or flanking touches are worked out one by
        one (`_annotation`). Equal to `_annotation` on every row."""
        n_pairs, n_modes = len(pa), len(modes)
        ex = np.array(extra, dtype=np.intp).reshape(-1, 2)
        codes = np.array([MODE_CODE[m] for m in modes], dtype=np.int8)
        a = np.concatenate([np.repeat(pa[:, 0], n_modes), ex[:, 0]])
        t = np.concatenate([np.repeat(pa[:, 1], n_modes), ex[:, 1]])
        code = np.concatenate([np.tile(codes, n_pairs),
                               np.full(len(ex), MODE_CODE[AttackMode.MELEE], dtype=np.int8)])
        rf = engine.row_facts(Rows(a, t, code), cover_probes=self.REFINES_COVER,
                              open_lines=self.REFINES_COVER and self._counts_lines(options))
        rows_a, rows_t = a, t
        n = n_pairs * n_modes
        level, reach, adj = rf.level[:n], rf.in_reach[:n], rf.adjacent[:n]
        melee = code[:n] != MODE_CODE[AttackMode.RANGED]
        a, t = a[:n], t[:n]
        outcome_key = ((level.astype(np.intp) * 2 + reach) * 2 + adj) * 2 + melee
        # Each distinct outcome once, as columns (line of effect, degree, modifiers, flags)
        # of object arrays; every row's fields are then gathered by numpy and the
        # annotations built by map, with no Python loop body per row.
        keys = np.unique(outcome_key)
        lookup = np.zeros(int(keys[-1]) + 1 if len(keys) else 1, dtype=np.intp)
        lookup[keys] = np.arange(len(keys))
        which = np.take(lookup, outcome_key)
        columns = [np.empty(len(keys), dtype=object) for _ in range(4)]
        for j, k in enumerate(keys.tolist()):
            degree = self.DEGREES[k >> 3]
            flags, mods = self._outcome_of(degree, bool(k & 4), bool(k & 2), bool(k & 1))
            for column, value in zip(columns, (degree is not Degree.TOTAL, degree, mods, flags),
                                     strict=True):
                column[j] = value
        ids = np.array(ids_of(engine.cs), dtype=object)
        mode_of = list(modes) * n_pairs  # the rows' modes, as laid out above
        out = list(map(Annotation, np.take(ids, a).tolist(), np.take(ids, t).tolist(), mode_of,
                       *(np.take(column, which).tolist() for column in columns)))
        # One by one: a target under a GM floor, and melee rows that may be flanking.
        # Asked of the creatures in these rows only (a few pairs of a 1,000-creature scene
        # are a move's work: not a call per creature of the scene).
        # (Every creature's floor read in C: cheaper than a loop over a walking attacker's
        # thousand targets, and a few microseconds for a small scene.)
        floored = np.fromiter(map(operator.is_not, map(_FLOOR, engine.cs),
                                  itertools.repeat(None)), dtype=bool, count=len(engine.cs))
        can_flank = np.zeros(len(engine.cs), dtype=bool)
        for k in np.unique(a[melee & reach]).tolist():
            can_flank[k] = self._can_flank(engine, k)
        flank = melee & reach & (level != TOTAL) & can_flank[a]
        special = np.flatnonzero(floored[t] | flank)
        known: dict[int, tuple[Degree, float | None]] = {}
        if rf.cover is not None:
            # Rows at cover, looked at closer (`_refine_cover`) from the probes that put
            # them there, all at once.
            at_cover = np.flatnonzero(level == COVER)
            probes = rf.cover
            mine = probes.row < n  # not the extra rows flanking reads
            probes = CoverProbes(np.searchsorted(at_cover, probes.row[mine]),
                                 probes.origin[mine], probes.box[mine],
                                 probes.open_lines[mine], probes.lines[mine])
            degrees, visible = self._refine_cover(engine, a[at_cover], t[at_cover], probes,
                                                  options)
            c_reach, c_adj, c_melee = (reach[at_cover].tolist(), adj[at_cover].tolist(),
                                       melee[at_cover].tolist())
            outcomes = [self._outcome_of(d, r, j, m) for d, r, j, m in
                        zip(degrees, c_reach, c_adj, c_melee, strict=True)]
            cover_out = map(Annotation, np.take(ids, a[at_cover]).tolist(),
                            np.take(ids, t[at_cover]).tolist(),
                            [mode_of[i] for i in at_cover.tolist()],
                            itertools.repeat(True), degrees, [m for _, m in outcomes],
                            [f for f, _ in outcomes], itertools.repeat(()),
                            itertools.repeat(None), visible)
            for i, ann in zip(at_cover.tolist(), cover_out, strict=True):
                out[i] = ann
            if special.size:
                place = {i: k for k, i in enumerate(at_cover.tolist())}
                known = {i: (degrees[place[i]], visible[place[i]])
                         for i in special.tolist() if i in place}
        if special.size:
            all_melee = np.flatnonzero(code == MODE_CODE[AttackMode.MELEE])
            threat = all_melee[self._threatens(rf.in_reach[all_melee], rf.adjacent[all_melee],
                                               rf.level[all_melee])]
            who, whom = rows_a[threat], rows_t[threat]
            # The allies across each flanking row's target, all rows at once (a row's
            # `_annotation` reads them if its degree leaves it a line of effect).
            at_flank = np.flatnonzero(flank)
            partners = dict(zip(at_flank.tolist(), engine.flankers_many(
                a[at_flank], t[at_flank], who, whom), strict=True))
            for i in special.tolist():
                f = PairFacts(int(level[i]), bool(adj[i]), bool(reach[i]), None)
                out[i] = self._annotation(engine, int(a[i]), int(t[i]), mode_of[i], f,
                                          {}, options, known.get(i), partners.get(i, []))
        return out

    def sight_points(self) -> SightPoints:
        return corner_sight_points

    def in_the_way_modes(self, options: Any) -> tuple[AttackMode, ...]:
        # Creatures give soft cover on ranged lines, and on reach lines by option; never
        # total cover, so never who threatens (flanking), and never on adjacent melee.
        if options.soft_cover_vs_reach:
            return tuple(AttackMode)
        return (AttackMode.RANGED,)

    def in_the_way_may_change(self, cover: Degree) -> bool:
        # A creature only adds soft cover to a line: a corner (or the best one) already at
        # cover, improved or total stays there, and a GM's floor only raises the degree.
        return cover in (Degree.NONE, Degree.SOFT)

    def area(self, scene: SceneGeom, options: Any, template: Template) -> list[AreaHit]:
        """Creatures in the area with line of effect from its origin; cover is traced from
        the origin point to their corners, and only its Reflex side applies (soft cover gives
        none). Spreads that go around corners are the client's call (the seed: they can
        negate this bonus)."""
        region = shape(template, scene.grid)
        taken = {c.id for c in scene.creatures}
        origin_id = next(f"origin#{k}" for k in itertools.count() if f"origin#{k}" not in taken)
        point = point_creature(origin_id, template.x, template.y, scene.grid)
        geom = replace(scene, creatures=(*scene.creatures, point))
        targets = [c.id for c in scene.creatures if inside(region, c, scene.grid)]
        hits = []
        for ann in self.evaluate(geom, options, pairs=[(origin_id, t) for t in targets],
                                 modes=[AttackMode.RANGED]):
            if not ann.loe:
                continue  # walls stop the area
            # Soft cover is against ranged attacks only: nothing against an area effect.
            degree = Degree.NONE if ann.cover is Degree.SOFT else ann.cover
            hits.append(AreaHit(
                ann.target, degree,
                tuple(m for m in ann.modifiers if m.stat in self.AREA_STATS),
                ann.flags & self.AREA_FLAGS))
        return hits

    def _degree(self, engine: CornerEngine, a: int, t: int, facts: PairFacts,
                options: Any) -> tuple[Degree, float | None]:
        """The degree the target enjoys, and the visible fraction when it was measured."""
        return self.DEGREES[facts.level], None

    def _prepare(self, engine: CornerEngine, rows: Sequence[tuple[int, int, AttackMode]],
                 facts: Sequence[PairFacts], options: Any) -> None:
        """Before `_degree` runs on these rows: measure, for all of them at once, what it
        will look at (nothing here)."""

    def _refine_cover(self, engine: CornerEngine, a: IntArray, t: IntArray,
                      probes: CoverProbes, options: Any,
                      ) -> tuple[list[Degree], list[float | None]]:
        """With REFINES_COVER: `_degree` of rows the lines put at cover (attackers a,
        targets t), all at once, from the probes that put each there (`probes.row`: the
        row's place in a and t): each row's degree and visible fraction. Equal to
        `_degree` row by row."""
        raise NotImplementedError(f"{type(self).__name__} sets REFINES_COVER without "
                                  "_refine_cover")

    def _counts_lines(self, options: Any) -> bool:
        """Whether `_refine_cover` reads how many of each probe's lines are open."""
        return False

    def warm(self, scene: SceneGeom, options: Any) -> None:
        """With REFINES_COVER by visible area: the walls' index the measure of the visible
        part reads (`rulesets.shadows.wall_lines`). Built on the first pair at cover
        otherwise: 6 ms for 20,000 walls, the slowest move of an attacker walking at the
        limits (bench/RESULTS.md, stop 38)."""
        if self.REFINES_COVER and not self._counts_lines(options):
            warm_wall_lines(scene)

    def _engine(self, scene: SceneGeom, options: Any) -> CornerEngine:
        """The corner engine for this scene under these options."""
        return CornerEngine(scene, options)

    def _can_flank(self, engine: CornerEngine, who: int) -> bool:
        """Whether this creature may be one of a flanking pair at all."""
        return True

    @staticmethod
    def _threatens(in_reach: Any, adjacent: Any, level: Any) -> Any:
        """Whether a creature's melee facts against a target (booleans and levels, or
        arrays of them) let it be the attacker or the partner of a flanking pair: it
        threatens the target, in reach with line of effect."""
        return in_reach & (level != TOTAL)

    def _annotation(self, engine: CornerEngine, a: int, t: int, mode: AttackMode,
                    f: PairFacts, threatens: Mapping[tuple[int, int], bool],
                    options: Any, known: tuple[Degree, float | None] | None = None,
                    partners: Sequence[str] | None = None) -> Annotation:
        """One row's annotation: its degree (floored by the GM's override), the flags and
        modifiers of that degree (`_outcome`), and flanking for melee and reach attacks.
        `known`: the degree and visible fraction `_degree` gives, already worked out;
        `partners`: the flanking allies (`CornerEngine.flankers`), already worked out."""
        degree, visible = known or self._degree(engine, a, t, f, options)
        floor = engine.cs[t].cover_floor
        if floor is not None:
            degree = self.floored(degree, floor)
        loe = degree is not Degree.TOTAL
        melee = mode is not AttackMode.RANGED
        flags, mods = self._outcome_of(degree, f.in_reach, f.adjacent, melee)
        flankers: tuple[str, ...] = ()
        if (melee and loe and self._threatens(f.in_reach, f.adjacent, f.level)
                and self._can_flank(engine, a)):
            if partners is None:
                partners = engine.flankers(a, t, threatens)
            flankers = tuple(fl for fl in partners
                             if self._can_flank(engine, engine.index[fl]))
            if flankers:
                flags = flags | self.FLANKING_FLAGS
                if self.FLANKING_BONUS:
                    mods = (*mods, M(Stat.ATTACK, self.FLANKING_BONUS, ModKind.FLANKING,
                                     "flanking with " + ", ".join(flankers)))
        return Annotation(engine.cs[a].id, engine.cs[t].id, mode, loe, degree, mods, flags,
                          flankers, f.best_lines, visible)

    def _outcome_of(self, degree: Degree, in_reach: bool, adjacent: bool,
                    melee: bool) -> tuple[frozenset[Flag], tuple[Modifier, ...]]:
        """`_outcome`, kept per ruleset and outcome in _OUTCOMES: thousands of rows share a
        handful of them."""
        key = (type(self), degree, in_reach, adjacent, melee)
        outcome = _OUTCOMES.get(key)
        if outcome is None:
            outcome = _OUTCOMES[key] = self._outcome(degree, in_reach, adjacent, melee)
        return outcome

    def _outcome(self, degree: Degree, in_reach: bool, adjacent: bool,
                 melee: bool) -> tuple[frozenset[Flag], tuple[Modifier, ...]]:
        """Flags and modifiers of an attack at this degree, flanking aside."""
        flags = attack_flags(degree, melee, in_reach, adjacent, degree in self.HIDE_DEGREES)
        if degree in self.EVASION_DEGREES:
            flags.add(Flag.IMPROVED_EVASION)
        return frozenset(flags), tuple(self.TABLE[degree])
