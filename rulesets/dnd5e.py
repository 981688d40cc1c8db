"""D&D 5th edition cover (DMG "Variant: Playing on a Grid"; PHB "Cover") and the DMG's
optional flanking rule, as a variant of D&D 3.5 on the shared corner engine.

Rule of this module: the DMG's procedure, read on the corner engine's lines. From a corner
of the attacker's space (any corner of any square it occupies), trace the four lines to the
corners of one square the target occupies and count those an obstacle blocks, a creature
included: none, no cover; one or two, half cover; three or four while the attack can still
reach the target (not all four stopped by what blocks line of effect), three-quarters; all
four stopped, total from that corner. The attacker takes the corner and the target square
that give the least cover. The same rule holds in melee, with reach and at range. The
numbers sit in `Dnd5e.TABLE`; everything else is the 3.5 ruleset's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Literal

import msgspec
import numpy as np
import numpy.typing as npt

from geometry.kernel import BoolArray, FloatArray, IntArray
from geometry.model import SceneGeom
from rulesets.base import AttackMode, Degree, Flag, Modifier, ModKind, Stat
from rulesets.corner import (
    COVER,
    IMPROVED,
    MODE_CODE,
    NONE,
    SOFT,
    TOTAL,
    CornerEngine,
    CornerOptions,
    PairFacts,
    RowFacts,
    Rows,
    reduce_segments,
)
from rulesets.dnd35 import Dnd35

M = Modifier
#: Engine levels of a corner (a probe) and of a pair: what the count of blocked lines gives.
HALF_LEVEL, THREE_QUARTERS_LEVEL = COVER, IMPROVED
#: The corner engine's own options under this rule: either side uses any square it occupies
#: in every mode, and creatures in the way count on every line.
_ENGINE_OPTIONS = CornerOptions(big_creatures_ranged=True, soft_cover_vs_reach=True)


class Dnd5eOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    flanking: bool = False
    creature_cover: Literal["lines", "half", "none"] = "lines"


class CoverLines(CornerEngine):
    """The corner engine counting blocked lines (the DMG's grid variant) instead of taking
    the worst line, with every attack mode read as one: the lines of a pair do not depend
    on how the attacker strikes, only reach and adjacency do.

    A line's level here: TOTAL where something that blocks line of effect stops it (a wall,
    blocking terrain); COVER where another obstacle blocks it that the attack can pass (a
    cover or improved region, an arrow slit; a creature under `creatureCover: "lines"`);
    SOFT where only a source the PHB names as half cover crosses it (a low wall; a creature
    under "half"), which never counts towards three-quarters."""

    #: Every line of every corner blocked while a line of effect still passes between the
    #: two spaces (an opening narrower than the corners' spacing): three-quarters, the DMG's
    #: "three or four blocked with the target still reachable" (docs/rulesets.md, dnd5e).
    OPEN_LEVEL: int = THREE_QUARTERS_LEVEL

    def __init__(self, scene: SceneGeom, options: Dnd5eOptions) -> None:
        super().__init__(scene, _ENGINE_OPTIONS)
        self.rules = options

    # -- every mode is the one rule ----------------------------------------------------

    def row_facts(self, rows: Sequence[tuple[int, int, AttackMode]],
                  cover_probes: bool = False, open_lines: bool = False) -> RowFacts:
        """Each row's level (its pair's, traced once for all its modes), adjacency and
        reach (the row's own mode). The DMG's degrees are the levels: no probes asked."""
        if cover_probes:
            raise NotImplementedError("dnd5e reads no probes at cover")
        if not rows:
            return super().row_facts(rows)
        a, t, code = self._row_arrays(rows)
        adjacent, in_reach = self._reach_facts(a, t, code)
        pairs, back = self._pairs(a, t)
        level, _ = self._row_levels(pairs, False)
        return RowFacts(level[back], adjacent, in_reach)

    def evaluate(self, rows: Sequence[tuple[int, int, AttackMode]],
                 want_lines: bool, want_probes: bool = True) -> list[PairFacts]:
        return self._per_mode(rows, super().evaluate, want_lines, want_probes)

    def reference(self, rows: Sequence[tuple[int, int, AttackMode]],
                  want_lines: bool, want_probes: bool = True) -> list[PairFacts]:
        return self._per_mode(rows, super().reference, want_lines, want_probes)

    def _pairs(self, a: IntArray, t: IntArray) -> tuple[Rows, IntArray]:
        """The distinct (attacker, target) pairs of these rows, as ranged rows (ranged
        planning with `big_creatures_ranged` is the rule's: any corner of any occupied
        square to each of the target's squares), and each row's pair."""
        n = len(self.cs)
        unique, back = np.unique(a * n + t, return_inverse=True)
        code = np.full(len(unique), MODE_CODE[AttackMode.RANGED], dtype=np.int8)
        return Rows(unique // n, unique % n, code), back.reshape(-1)

    def _per_mode(self, rows: Sequence[tuple[int, int, AttackMode]],
                  facts_of: Callable[[Sequence[tuple[int, int, AttackMode]], bool, bool],
                                     list[PairFacts]],
                  want_lines: bool, want_probes: bool) -> list[PairFacts]:
        """`facts_of` on each distinct pair once, read back per row with the row's own
        adjacency and reach."""
        if not rows:
            return []
        a, t, code = self._row_arrays(rows)
        adjacent, in_reach = self._reach_facts(a, t, code)
        pairs, back = self._pairs(a, t)
        facts = facts_of(pairs, want_lines, want_probes)
        return [replace(facts[p], adjacent=adj, in_reach=reach)
                for p, adj, reach in zip(back.tolist(), adjacent.tolist(), in_reach.tolist(),
                                         strict=True)]

    # -- what a line meets, and what a corner's lines give ----------------------------

    def _low_active(self, wl: IntArray, wi: IntArray, att: IntArray, tgt: IntArray,
                    h_low: BoolArray) -> BoolArray:
        # A low wall gives half cover at any distance (PHB: "a low wall"): no 30-ft range,
        # no attacker-closer exception.
        active: BoolArray = h_low.copy()
        return active

    def _components(self, hits: Any, att: IntArray, tgt: IntArray,
                    starts: FloatArray, ends: FloatArray) -> dict[str, BoolArray]:
        comps = super()._components(hits, att, tgt, starts, ends)
        if self.rules.creature_cover == "none":
            # Creatures never give cover: nothing counts, nothing is listed on a line.
            comps["creature"] = np.zeros_like(comps["creature"])
            comps["h_creature"] = np.zeros_like(comps["h_creature"])
        return comps

    def _level_table(self, comps: dict[str, BoolArray]) -> npt.NDArray[np.int8]:
        blocked = comps["solid"] | comps["block_reg"]
        # A wall the sight passes over in part (taller than half the target, lower than the
        # sheet of sight) is an obstacle a line counts, never one that stops it.
        counted = (comps["cover_reg"] | comps["improved_wall"] | comps["impr_reg"]
                   | comps["partial"])
        capped = comps["low"]
        creature = comps["creature"]
        if self.rules.creature_cover == "lines":
            counted = counted | creature
        else:  # "half"; under "none" `_components` left no creature hits
            capped = capped | creature
        level = np.where(blocked, TOTAL, np.where(counted, COVER, np.where(
            capped, SOFT, NONE))).astype(np.int8)
        # The same for every line kind; "partly" (level + 8 * partly) is the level itself.
        table: npt.NDArray[np.int8] = np.repeat((level * 9)[:, None], 3, axis=1)
        return table

    def _probe_levels(self, level: npt.NDArray[np.int8], partly: npt.NDArray[np.int8],
                      pstart: IntArray) -> npt.NDArray[np.int8]:
        """A corner's four lines to one target square: the lines an obstacle blocks
        (COVER or TOTAL) are counted, one or two half cover, three or four three-quarters;
        a line only a half-cover source crosses (SOFT: a low wall; a creature under
        `creatureCover: "half"`) is not counted but gives at least half cover; the four
        stopped by what blocks line of effect, total."""
        blocked = reduce_segments(np.add, (level >= COVER).astype(np.int8), pstart)
        capped = reduce_segments(np.maximum, (level == SOFT).astype(np.int8), pstart)
        out = np.where(blocked >= 3, THREE_QUARTERS_LEVEL,
                       np.where((blocked >= 1) | (capped > 0), HALF_LEVEL, NONE))
        all_total = reduce_segments(np.minimum, level, pstart) == TOTAL
        result: npt.NDArray[np.int8] = np.where(all_total, TOTAL, out).astype(np.int8)
        return result


class Dnd5e(Dnd35):
    """D&D 5e: half, three-quarters and total cover from counted corner lines; flanking
    (optional) gives advantage."""

    name: ClassVar[str] = "dnd5e"
    title: ClassVar[str] = "D&D 5th edition (DMG grid cover, PHB cover)"
    seed: ClassVar[str] = "DMG 'Variant: Playing on a Grid' (cover, flanking); PHB 'Cover'"
    Options: ClassVar[type[Dnd5eOptions]] = Dnd5eOptions  # type: ignore[assignment]
    option_docs: ClassVar[Mapping[str, str]] = {
        "flanking": "The DMG's optional flanking rule: a creature and an ally adjacent to an "
                    "enemy on opposite sides or corners of its space have advantage on melee "
                    "attack rolls against it (flag 'advantage'; no number).",
        "creatureCover": "Creatures in the way: 'lines' (the DMG: a line through a creature's "
                         "space is blocked like any other, so creatures alone may give half or "
                         "three-quarters cover), 'half' (the PHB: a creature gives half cover, "
                         "never more) or 'none' (creatures never give cover).",
    }

    #: Engine level -> reported degree.
    DEGREES: ClassVar[Mapping[int, Degree]] = {
        NONE: Degree.NONE, HALF_LEVEL: Degree.HALF,
        THREE_QUARTERS_LEVEL: Degree.THREE_QUARTERS, TOTAL: Degree.TOTAL,
    }
    ladder: ClassVar[tuple[Degree, ...]] = (Degree.NONE, Degree.HALF, Degree.THREE_QUARTERS)
    #: What each degree is worth to the target (PHB "Cover").
    TABLE: ClassVar[Mapping[Degree, tuple[Modifier, ...]]] = {
        Degree.NONE: (),
        Degree.HALF: (M(Stat.AC, 2, ModKind.COVER, "half cover"),
                      M(Stat.DEXTERITY, 2, ModKind.COVER, "half cover: Dexterity saving throws")),
        Degree.THREE_QUARTERS: (M(Stat.AC, 5, ModKind.COVER, "three-quarters cover"),
                                M(Stat.DEXTERITY, 5, ModKind.COVER,
                                  "three-quarters cover: Dexterity saving throws")),
        Degree.TOTAL: (),
    }
    #: 5e ties hiding to being unseen, not to a degree of cover: no degree sets `can_hide`.
    HIDE_DEGREES: ClassVar[frozenset[Degree]] = frozenset()
    EVASION_DEGREES: ClassVar[frozenset[Degree]] = frozenset()
    #: Flanking gives advantage, a die and not a number.
    FLANKING_BONUS: ClassVar[int] = 0
    FLANKING_FLAGS: ClassVar[frozenset[Flag]] = frozenset({Flag.FLANKING, Flag.ADVANTAGE})
    #: What an area effect's hit keeps: the Dexterity saving throw bonus.
    AREA_STATS: ClassVar[frozenset[Stat]] = frozenset({Stat.DEXTERITY})
    AREA_FLAGS: ClassVar[frozenset[Flag]] = frozenset()

    def _engine(self, scene: SceneGeom, options: Any) -> CornerEngine:
        assert isinstance(options, Dnd5eOptions)
        return CoverLines(scene, options)

    def in_the_way_modes(self, options: Any) -> tuple[AttackMode, ...]:
        # Creatures in the way count on every line, or (option "none") on none.
        return () if options.creature_cover == "none" else tuple(AttackMode)

    def in_the_way_may_change(self, cover: Degree) -> bool:
        # A creature blocks a line without stopping the attack: a pair at total cover has
        # every line of every corner stopped by walls and stays there; at three-quarters a
        # creature may be one of the three lines (creatureCover "lines"), so only total is
        # settled.
        return cover is not Degree.TOTAL

    def _can_flank(self, engine: CornerEngine, who: int) -> bool:
        # The scene model has no incapacitated condition: every creature may flank.
        assert isinstance(engine, CoverLines)
        return engine.rules.flanking

    @staticmethod
    def _threatens(in_reach: Any, adjacent: Any, level: Any) -> Any:
        # DMG: flankers are adjacent to the enemy (and can strike it: in reach, with line
        # of effect).
        return in_reach & adjacent & (level != TOTAL)

    def _outcome(self, degree: Degree, in_reach: bool, adjacent: bool,
                 melee: bool) -> tuple[frozenset[Flag], tuple[Modifier, ...]]:
        flags, mods = super()._outcome(degree, in_reach, adjacent, melee)
        if melee and Flag.CAN_TARGET in flags:
            # Cover does not prevent an opportunity attack in 5e: in reach and targetable.
            flags = flags | {Flag.CAN_AOO}
        return flags, mods
