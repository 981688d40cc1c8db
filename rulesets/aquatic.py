"""Aquatic combat (seed 002, Pathfinder 2e "special battles"): a layer any ruleset can opt
into with `aquatic = True` (see `Ruleset.annotate`).

Rule of this module: one table maps each aquatic situation of an (attacker, target, mode)
to the modifiers and flags it adds; `with_aquatic` reads the water facts of
`geometry.water` and appends the table's rows to the ruleset's annotations, nothing else.
Modifiers limited to damage types carry them in `Modifier.damage`; flags that depend on a
damage type name it. The seed's sentences, and how each is read, are in docs/rulesets.md.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

from geometry.model import SceneGeom
from geometry.water import in_water, pair_segments, submerged, through_water
from rulesets.base import (
    Annotation,
    AreaHit,
    AttackMode,
    DamageType,
    Flag,
    Modifier,
    ModKind,
    Stat,
)


class Situation(enum.Enum):
    """What about a pair makes the water matter."""

    #: The target is in the water (swimming at the surface or under it), no swim Speed.
    TARGET_WITHOUT_SWIM = "target_without_swim"
    #: The target is in the water (whatever its Speeds).
    TARGET_IN_WATER = "target_in_water"
    #: The target is submerged (wholly under the surface).
    TARGET_SUBMERGED = "target_submerged"
    #: The attacker is submerged.
    ATTACKER_SUBMERGED = "attacker_submerged"
    #: The attack line passes through water (below a surface).
    THROUGH_WATER = "through_water"
    #: A ranged attack where the attacker or the target is submerged.
    RANGED_UNDERWATER = "ranged_underwater"


SB = (DamageType.SLASHING, DamageType.BLUDGEONING)
M = Modifier

#: The seed's numbers, one row per situation: (modifiers, flags).
TABLE: Mapping[Situation, tuple[tuple[Modifier, ...], frozenset[Flag]]] = {
    Situation.TARGET_WITHOUT_SWIM: (
        (M(Stat.AC, -2, ModKind.CIRCUMSTANCE, "off-guard: in water without a swim Speed"),),
        frozenset({Flag.OFF_GUARD})),
    Situation.TARGET_IN_WATER: (
        (M(Stat.RESISTANCE, 5, ModKind.ENVIRONMENT, "in water: resistance 5 to acid",
           (DamageType.ACID,)),
         M(Stat.RESISTANCE, 5, ModKind.ENVIRONMENT, "in water: resistance 5 to fire",
           (DamageType.FIRE,))),
        frozenset()),
    Situation.TARGET_SUBMERGED: ((), frozenset({Flag.TARGET_SUBMERGED})),
    Situation.ATTACKER_SUBMERGED: (
        (), frozenset({Flag.ATTACKER_SUBMERGED, Flag.NO_FIRE})),
    Situation.THROUGH_WATER: (
        (M(Stat.ATTACK, -2, ModKind.CIRCUMSTANCE,
           "slashing or bludgeoning attack passing through water", SB),),
        frozenset({Flag.THROUGH_WATER})),
    Situation.RANGED_UNDERWATER: (
        (), frozenset({Flag.RANGED_AUTO_MISS_SLASHING_BLUDGEONING,
                       Flag.RANGE_INCREMENT_HALVED_PIERCING})),
}


def situations(mode: AttackMode, attacker_under: bool, target_under: bool,
               target_swims: bool, wet_line: bool,
               target_in_water: bool | None = None) -> tuple[Situation, ...]:
    """The aquatic situations of one attack, in table order (`target_in_water`: swimming
    at the surface or under it; None: as `target_under`)."""
    wet_target = target_under if target_in_water is None else target_in_water or target_under
    out: list[Situation] = []
    if wet_target and not target_swims:
        out.append(Situation.TARGET_WITHOUT_SWIM)
    if wet_target:
        out.append(Situation.TARGET_IN_WATER)
    if target_under:
        out.append(Situation.TARGET_SUBMERGED)
    if attacker_under:
        out.append(Situation.ATTACKER_SUBMERGED)
    if wet_line:
        out.append(Situation.THROUGH_WATER)
    if mode is AttackMode.RANGED and (attacker_under or target_under):
        out.append(Situation.RANGED_UNDERWATER)
    return tuple(out)


def with_aquatic(scene: SceneGeom, annotations: Sequence[Annotation]) -> list[Annotation]:
    """The annotations with the aquatic table's modifiers and flags added. A scene without
    water returns them untouched (the same objects)."""
    if not scene.water and not scene.underwater:
        return list(annotations)
    index = {c.id: k for k, c in enumerate(scene.creatures)}
    under = submerged(scene)
    wet_body = in_water(scene)
    pairs = sorted({(index[a.attacker], index[a.target]) for a in annotations})
    starts, ends = pair_segments(scene, pairs)
    wet = dict(zip(pairs, through_water(scene, starts, ends).tolist(), strict=True))
    # Annotations share few situation sets: each set's additions are built once.
    additions: dict[tuple[tuple[Situation, ...], bool],
                    tuple[tuple[Modifier, ...], frozenset[Flag]]] = {}
    out = []
    for ann in annotations:
        a, t = index[ann.attacker], index[ann.target]
        found = situations(ann.mode, bool(under[a]), bool(under[t]),
                           scene.creatures[t].swim, wet[(a, t)], bool(wet_body[t]))
        if not found:
            out.append(ann)
            continue
        key = (found, Flag.OFF_GUARD in ann.flags)
        extra = additions.get(key)
        if extra is None:
            extra = additions[key] = _additions(*key)
        mods, flags = extra
        out.append(Annotation(ann.attacker, ann.target, ann.mode, ann.loe, ann.cover,
                              ann.modifiers + mods, ann.flags | flags, ann.flankers,
                              ann.lines, ann.visible))
    return out


def with_aquatic_area(scene: SceneGeom, hits: Sequence[AreaHit]) -> list[AreaHit]:
    """Area effects: a creature in the water (swimming or submerged) caught in one has its
    resistance to acid and fire, and a submerged one the `target_submerged` flag (the
    target rows of the table; off-guard is about AC, which areas do not use)."""
    if not scene.water and not scene.underwater:
        return list(hits)
    index = {c.id: k for k, c in enumerate(scene.creatures)}
    under = submerged(scene)
    wet_body = in_water(scene)
    mods = TABLE[Situation.TARGET_IN_WATER][0]
    flags = TABLE[Situation.TARGET_SUBMERGED][1]
    out = []
    for h in hits:
        k = index[h.target]
        if wet_body[k] or under[k]:
            h = AreaHit(h.target, h.cover, h.modifiers + mods,
                        h.flags | flags if under[k] else h.flags, h.obstructions)
        out.append(h)
    return out


def _additions(found: tuple[Situation, ...],
               off_guard: bool) -> tuple[tuple[Modifier, ...], frozenset[Flag]]:
    """The table's rows for these situations, together."""
    mods: list[Modifier] = []
    flags: set[Flag] = set()
    for s in found:
        # Off-guard is a condition: it does not stack with off-guard from elsewhere
        # (a ruleset's flanking sets the same flag with its own -2).
        if s is Situation.TARGET_WITHOUT_SWIM and off_guard:
            continue
        extra, extra_flags = TABLE[s]
        mods.extend(extra)
        flags |= extra_flags
    return tuple(mods), frozenset(flags)
