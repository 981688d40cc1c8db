"""Pathfinder 1e cover (seed 001) as a variant of D&D 3.5: only what differs is here.

Rule of this module: override the 3.5 tables and add the one step 3.5 lacks, partial cover
("more than half of the target visible"), measured as the area of the target's square that
no obstacle hides from the attacker's chosen corner (Shapely shadows), or, by option, as the
share of that corner's lines no obstacle stops.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import msgspec
import numpy as np

from geometry.kernel import IntArray
from geometry.model import SceneGeom
from geometry.square import adjacent, corners
from rulesets.base import Annotation, AttackMode, Degree, Modifier, ModKind, Stat
from rulesets.corner import (
    CORNER_OPTION_DOCS,
    COVER,
    CornerEngine,
    CoverProbes,
    PairFacts,
    Probe,
)
from rulesets.dnd35 import Dnd35

M = Modifier
_BEYOND = "vs effects originating beyond the cover"


class Pf1Options(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    big_creatures_ranged: bool = False
    # PF1: reach attacks determine cover as ranged ones do, creatures included.
    soft_cover_vs_reach: bool = True
    low_obstacle_range_from: Literal["attacker", "target"] = "attacker"
    partial_cover: Literal["area", "lines"] = "area"


class Pf1(Dnd35):
    """Pathfinder 1e: Stealth for Hide, partial cover, soft cover against reach too."""

    name: ClassVar[str] = "pf1"
    title: ClassVar[str] = "Pathfinder 1e (cover, seed 001)"
    seed: ClassVar[str] = "001_20a83ae0c60b504c.txt"
    Options: ClassVar[type[Pf1Options]] = Pf1Options  # type: ignore[assignment]
    option_docs: ClassVar[Mapping[str, str]] = {
        **CORNER_OPTION_DOCS,
        "softCoverVsReach": "Creatures in the way give soft cover against reach attacks "
                            "(PF1: reach attacks determine cover as ranged ones do).",
        "partialCover": "How 'more than half of the target is visible' is measured: 'area' "
                        "(the fraction of the target's square no obstacle hides from the "
                        "attacker's corner) or 'lines' (more than half of that corner's lines "
                        "are unobstructed).",
    }

    ladder: ClassVar[tuple[Degree, ...]] = (Degree.NONE, Degree.SOFT, Degree.PARTIAL,
                                            Degree.COVER, Degree.IMPROVED)
    TABLE: ClassVar[Mapping[Degree, tuple[Modifier, ...]]] = {
        **Dnd35.TABLE,
        Degree.PARTIAL: (M(Stat.AC, 2, ModKind.COVER, "partial cover: more than half visible"),
                         M(Stat.REFLEX, 1, ModKind.COVER, f"partial cover, {_BEYOND}")),
        # The seed doubles AC and Reflex only; it grants no Stealth bonus or evasion.
        Degree.IMPROVED: (M(Stat.AC, 8, ModKind.COVER, "improved cover"),
                          M(Stat.REFLEX, 4, ModKind.COVER, f"improved cover, {_BEYOND}")),
    }
    HIDE_DEGREES: ClassVar[frozenset[Degree]] = frozenset(
        {Degree.PARTIAL, Degree.COVER, Degree.IMPROVED})
    EVASION_DEGREES: ClassVar[frozenset[Degree]] = frozenset()

    REFINES_COVER: ClassVar[bool] = True

    def reference(self, scene: SceneGeom, options: Any,
                  pairs: Sequence[tuple[str, str]] | None = None,
                  modes: Iterable[AttackMode] = tuple(AttackMode),
                  lines: bool = False) -> list[Annotation]:
        """`evaluate` row by row, each visible fraction measured on its own from the
        Shapely shadows (`CornerEngine.visible_fraction`): the computation `evaluate`
        replaced, which it must equal."""
        return self._evaluate(scene, options, pairs, modes, lines, reference=True)

    def _prepare(self, engine: CornerEngine, rows: Sequence[tuple[int, int, AttackMode]],
                 facts: Sequence[PairFacts], options: Any) -> None:
        # Every visible fraction `_degree` will read, measured in one batch.
        assert isinstance(options, Pf1Options)
        if options.partial_cover != "area":
            return
        engine.measure_visible([
            (a, t, origin, p.target_box) for (a, t, _), f in zip(rows, facts, strict=True)
            if f.level == COVER for p in f.best for origin in self._viewpoints(engine, a, p)])

    def _degree(self, engine: CornerEngine, a: int, t: int, facts: PairFacts,
                options: object) -> tuple[Degree, float | None]:
        degree, _ = super()._degree(engine, a, t, facts, options)
        if degree is not Degree.COVER:
            return degree, None
        assert isinstance(options, Pf1Options)
        if options.partial_cover == "lines":
            best = max(facts.best, key=lambda p: p.open_lines / p.lines)
            return (Degree.PARTIAL if 2 * best.open_lines > best.lines else degree), None
        fractions = [engine.visible_of(a, t, origin, p.target_box)
                     for p in facts.best for origin in self._viewpoints(engine, a, p)]
        if not fractions:
            return degree, None
        visible = round(max(fractions), 6)
        return (Degree.PARTIAL if visible > 0.5 else degree), visible

    def _counts_lines(self, options: Any) -> bool:
        assert isinstance(options, Pf1Options)
        return options.partial_cover == "lines"

    def _refine_cover(self, engine: CornerEngine, a: IntArray, t: IntArray,
                      probes: CoverProbes, options: Any,
                      ) -> tuple[list[Degree], list[float | None]]:
        """`_degree` of many rows at cover at once. 'lines': partial where some probe has
        more than half of its lines open (the best probe's share is then over half).
        'area': each probe's visible fractions measured in one batch
        (`CornerEngine.visible_fractions`), each request once; the row's best, rounded as
        `_degree` rounds it."""
        assert isinstance(options, Pf1Options)
        n = len(a)
        if options.partial_cover == "lines":
            over = np.zeros(n, dtype=bool)
            over[probes.row[2 * probes.open_lines > probes.lines]] = True
            return ([Degree.PARTIAL if o else Degree.COVER for o in over.tolist()],
                    [None] * n)
        row, origin, box = probes.row, probes.origin, probes.box
        several = np.flatnonzero(np.isnan(origin[:, 0]))
        if len(several):
            # The adjacent-melee probes (from a whole square): each corner of the
            # attacker's squares next to the target's square is a viewpoint.
            extra = [(r, xy, b) for r, b in zip(row[several].tolist(),
                                                 box[several].tolist(), strict=True)
                     for xy in self._viewpoints(engine, int(a[r]), Probe(
                         None, (b[0], b[1], b[2], b[3]), 0, 0))]
            alone = np.ones(len(row), dtype=bool)
            alone[several] = False
            row = np.concatenate([row[alone], np.array([e[0] for e in extra], dtype=np.intp)])
            origin = np.concatenate([origin[alone], np.array(
                [e[1] for e in extra], dtype=np.float64).reshape(-1, 2)])
            box = np.concatenate([box[alone], np.array(
                [e[2] for e in extra], dtype=np.float64).reshape(-1, 4)])
        # Each distinct (attacker, target, viewpoint, square) measured once.
        # (Rows of eight floats compared as bytes: three times faster than np.unique's
        # axis=0, which sorts by each column in turn.)
        key = np.column_stack([a[row].astype(np.float64), t[row].astype(np.float64),
                               origin, box])
        _, first, back = np.unique(key.view(np.dtype((np.void, 8 * key.itemsize))).ravel(),
                                   return_index=True, return_inverse=True)
        unique = key[first]
        values = engine.visible_fractions(unique[:, 0].astype(np.intp),
                                          unique[:, 1].astype(np.intp), unique[:, 2:4],
                                          unique[:, 4:8])
        best = np.full(n, -np.inf)
        np.maximum.at(best, row, values[back.reshape(-1)])
        # Each distinct fraction rounded once (a row's fraction is often another's).
        best_l = best.tolist()
        rounded = {v: None if v == -np.inf else round(v, 6) for v in set(best_l)}
        visible = list(map(rounded.__getitem__, best_l))
        return ([Degree.COVER if v is None or v <= 0.5 else Degree.PARTIAL for v in visible],
                visible)

    @staticmethod
    def _viewpoints(engine: CornerEngine, a: int, p: Probe) -> list[tuple[float, float]]:
        """The points of the attacker's space the visible part of the target is measured
        from, for one probe: its corner; for the adjacent-melee probe (lines from a whole
        square, no one corner), each corner of the attacker's squares next to the target's
        square, the best of which counts (the attacker picks it, as at range)."""
        if p.origin is not None:
            return [p.origin]
        return [(float(x), float(y)) for sq in engine.squares[a]
                if adjacent(sq, p.target_box, engine.grid) for x, y in corners(sq)]

    def _can_flank(self, engine: CornerEngine, who: int) -> bool:
        # PF1: creatures smaller than a square cannot flank.
        c = engine.cs[who]
        return super()._can_flank(engine, who) and c.width >= 1 and c.height >= 1
