"""Pathfinder 2e cover, flanking and mounted combat (Core Rulebook, and seed 002's "special
battles") as a variant of the cover-degrees ruleset: only what differs is here.

Rule of this module: the degrees procedure (one centre-to-centre line, lesser/standard/greater,
no line of effect when no part of the target can be reached) is reused; this module overrides
its tables (PF2's +1/+2/+4 and what each obstacle is worth), the creature rule (a creature is
lesser cover, standard when it is at least two sizes larger than both attacker and target),
flanking (the target is off-guard, -2 AC, instead of a growing bonus), and adds Take Cover and
mounted combat: a rider attacks and is attacked from every square of its mount.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Literal

import msgspec
import numpy as np
import numpy.typing as npt

from geometry.columns import columns, has_riders, ids_of
from geometry.kernel import IntArray
from geometry.model import CreatureGeom, SceneGeom, Size, point_creature
from geometry.square import within_reach_many
from geometry.templates import Template, inside, shape
from rulesets.base import (
    Annotation,
    AreaHit,
    AttackMode,
    Degree,
    Flag,
    Modifier,
    ModKind,
    Stat,
    attack_flags,
    pair_rows,
)
from rulesets.degrees import (
    GREATER,
    LADDER,
    LESSER,
    NONE,
    STANDARD,
    TOTAL,
    CoverDegrees,
    _Context,
    _Outcome,
    _Row,
)

M = Modifier
_AREA = "vs area effects"
_STEALTH = "to Hide, Sneak or otherwise avoid detection"
#: Rider reach on a Large or larger mount, measured from the mount's space (seed 002).
_BIG_MOUNT = Size.LARGE.rank


#: Every combination of `_fast_extra`'s facts, by code: (attacked from the ground, the
#: target has Taken Cover, the target rides, the attacker's role in mounted combat).
_EXTRA_FACTS: tuple[tuple[bool, bool, bool, int], ...] = tuple(
    (g, tc, r, role) for g in (False, True) for tc in (False, True) for r in (False, True)
    for role in (0, 1, 2))


class Pf2Options(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    low_walls: Literal["standard", "lesser"] = "standard"
    big_creature_standard: bool = True
    reach_weapon: Literal["crb", "double"] = "crb"


def rider_reach(rider_reach_ft: float, mount: CreatureGeom) -> float:
    """The rider's reach measured from its mount's space (seed 002): its own on a Medium or
    smaller mount; on a Large or bigger one, 5 and 10 ft reach only the squares adjacent to
    the mount (5 ft from it), 15 ft reaches 10 ft from it, and longer reach 5 ft less."""
    if mount.size.rank < _BIG_MOUNT or rider_reach_ft <= 0:
        return rider_reach_ft
    if rider_reach_ft <= 10:
        return 5.0
    return rider_reach_ft - 5.0


def weapon_reach(natural_ft: float, mount: CreatureGeom | None,
                 rule: Literal["crb", "double"] = "crb") -> float:
    """How far a reach weapon reaches in PF2, adjacent creatures included (CRB, Reach trait:
    10 ft, or 5 ft more than a natural reach already longer than 5 ft; `"double"`: twice the
    natural reach); for a rider, that reach is worked out first and then cut by the mount's
    size (`rider_reach`, seed 002)."""
    if natural_ft <= 0:
        weapon = natural_ft
    elif rule == "double":
        weapon = 2 * natural_ft
    else:
        weapon = max(10.0, natural_ft + 5.0)
    return weapon if mount is None else rider_reach(weapon, mount)


def mounted_scene(scene: SceneGeom) -> tuple[SceneGeom, dict[str, CreatureGeom]]:
    """The scene as a mounted rider fights in it: each rider occupies every square of its
    mount (its footprint, elevation and cube), sitting on it (its drawn height reaches half
    the mount's up plus its own), with its reach from the mount's space. Also returns each
    rider's mount as it stands."""
    if not has_riders(scene.creatures):
        return scene, {}
    by_id = {c.id: c for c in scene.creatures}
    mounts: dict[str, CreatureGeom] = {}
    creatures = []
    for c in scene.creatures:
        steed = by_id.get(c.mount) if c.mount is not None else None
        if steed is None:
            creatures.append(c)
            continue
        mounts[c.id] = steed
        # The same rider on the same mount is the same object, snapshot after snapshot:
        # what is kept per creature object (hex footprints, line of effect per pair)
        # holds for it too.
        held = _RIDING.get((id(c), id(steed)))
        if held is not None and held[0] is c and held[1] is steed:
            creatures.append(held[2])
            continue
        riding = replace(
            c, x=steed.x, y=steed.y, width=steed.width, height=steed.height, shape=steed.shape,
            elevation=steed.elevation, tall=max(steed.tall, steed.tall / 2 + c.tall),
            reach=rider_reach(c.reach, steed))
        if len(_RIDING) >= _RIDING_KEPT:
            _RIDING.clear()
        _RIDING[(id(c), id(steed))] = (c, steed, riding)
        creatures.append(riding)
    if not mounts:
        return scene, mounts
    return replace(scene, creatures=tuple(creatures)), mounts


#: Per (rider, mount) objects (by identity, both held): the rider as it fights mounted
#: (`mounted_scene`), for the last _RIDING_KEPT pairs.
_RIDING: dict[tuple[int, int], tuple[CreatureGeom, CreatureGeom, CreatureGeom]] = {}
_RIDING_KEPT = 4_096


class Pf2(CoverDegrees):
    """Pathfinder 2e: centre line, lesser/standard/greater, off-guard flanking, mounts."""

    name: ClassVar[str] = "pf2"
    title: ClassVar[str] = "Pathfinder 2e (Core Rulebook cover and flanking, seed 002)"
    seed: ClassVar[str] = "002_42f49098cedf76be.txt"
    Options: ClassVar[type[Pf2Options]] = Pf2Options  # type: ignore[assignment]
    option_docs: ClassVar[Mapping[str, str]] = {
        "lowWalls": "What a wall marked low (or waist-high by Wall Height) on the centre line "
                    "gives: 'standard' (an object that blocks the effect, the CRB's rule) or "
                    "'lesser' (light cover, as seed 000 rules it).",
        "bigCreatureStandard": "A creature at least two sizes larger than both attacker and "
                               "target gives standard cover instead of lesser.",
        "reachWeapon": "How far a reach weapon reaches (adjacent creatures included): 'crb' "
                       "(10 ft, or natural reach + 5 ft when it is already longer, the CRB's "
                       "Reach trait) or 'double' (twice the natural reach).",
    }

    TABLE: ClassVar[Mapping[Degree, tuple[Modifier, ...]]] = {
        Degree.NONE: (),
        Degree.LESSER: (M(Stat.AC, 1, ModKind.CIRCUMSTANCE, "lesser cover"),),
        Degree.STANDARD: (M(Stat.AC, 2, ModKind.CIRCUMSTANCE, "standard cover"),
                          M(Stat.REFLEX, 2, ModKind.CIRCUMSTANCE, f"standard cover, {_AREA}"),
                          M(Stat.STEALTH, 2, ModKind.CIRCUMSTANCE,
                            f"standard cover, {_STEALTH}")),
        Degree.GREATER: (M(Stat.AC, 4, ModKind.CIRCUMSTANCE, "greater cover"),
                         M(Stat.REFLEX, 4, ModKind.CIRCUMSTANCE, f"greater cover, {_AREA}"),
                         M(Stat.STEALTH, 4, ModKind.CIRCUMSTANCE,
                           f"greater cover, {_STEALTH}")),
        Degree.TOTAL: (),
    }
    REFLEX_BETTER_DEGREES: ClassVar[frozenset[Degree]] = frozenset()
    WALL_LEVEL: ClassVar[Mapping[str, int]] = {"solid": STANDARD, "low": STANDARD,
                                               "improved": GREATER}
    #: Take Cover: standard becomes greater, anything less becomes standard.
    TAKE_COVER: ClassVar[Mapping[Degree, Degree]] = {
        Degree.NONE: Degree.STANDARD, Degree.LESSER: Degree.STANDARD,
        Degree.STANDARD: Degree.GREATER, Degree.GREATER: Degree.GREATER,
        Degree.TOTAL: Degree.TOTAL}
    OFF_GUARD_AC: ClassVar[int] = -2
    MOUNTED_REFLEX: ClassVar[int] = -2

    def creature_level(self, ctx: _Context, c: int, a: int, t: int) -> int:
        big = ctx.rank[c] >= ctx.rank[a] + 2 and ctx.rank[c] >= ctx.rank[t] + 2
        return STANDARD if big and ctx.options.big_creature_standard else LESSER

    def creature_levels(self, ctx: _Context, c: IntArray, a: IntArray,
                        t: IntArray) -> IntArray:
        big = (ctx.rank[c] >= ctx.rank[a] + 2) & (ctx.rank[c] >= ctx.rank[t] + 2)
        out: IntArray = np.where(big & ctx.options.big_creature_standard, STANDARD, LESSER)
        return out

    def _wall_levels(self, options: Pf2Options) -> Mapping[str, int]:
        low = STANDARD if options.low_walls == "standard" else LESSER
        return {**self.WALL_LEVEL, "low": low}

    #: Flags of an attacker by its part in mounted combat: none, a ridden mount, a rider.
    MOUNT_FLAGS: ClassVar[tuple[frozenset[Flag], ...]] = (
        frozenset(), frozenset({Flag.SHARES_MAP}),
        frozenset({Flag.SHARES_MAP, Flag.DISMOUNT_ONLY_MOVE}))

    # -- attacks ------------------------------------------------------------------------

    def _context(self, scene: SceneGeom, options: Any, attack: bool = True) -> _Pf2Context:
        """Attacks (True) or an area effect's origin (False) in the scene as mounted riders
        fight in it."""
        geom, mounts = mounted_scene(scene)
        return _Pf2Context(geom, options, self, scene, mounts, attack)

    def _degree(self, level: int, from_ground: bool, floor: str | None,
                take_cover: bool) -> Degree:
        """The target's cover: the centre line's degree; lesser at least for a rider
        attacked from the ground (seed 002); the GM's floor; then Take Cover."""
        if level == TOTAL:
            return Degree.TOTAL
        degree = LADDER[level]
        if from_ground and degree is Degree.NONE:
            degree = Degree.LESSER
        degree = self.floored(degree, floor)
        if take_cover:
            degree = self.TAKE_COVER[degree]
        return degree

    def _fast_extra(self, ctx: _Context, a: IntArray, t: IntArray,
                    ) -> tuple[IntArray, Sequence[Any]]:
        """Per pair: attacked from the ground, the target has Taken Cover, the target rides,
        the attacker's part in mounted combat (`MOUNT_FLAGS`)."""
        assert isinstance(ctx, _Pf2Context)
        cs = ctx.cs
        rider = np.array([c.id in ctx.mounts for c in cs], dtype=bool)
        steed = np.array([ctx.index[ctx.mounts[c.id].id] if c.id in ctx.mounts else -1
                          for c in cs], dtype=np.intp)
        steed_elev = np.array([ctx.mounts[c.id].elevation if c.id in ctx.mounts else np.nan
                               for c in cs], dtype=np.float64)
        before_elev = np.array([ctx.before[c.id].elevation for c in cs], dtype=np.float64)
        role = np.where(rider, 2, np.where([c.id in ctx.ridden for c in cs], 1, 0))
        take_cover = np.array([c.take_cover for c in cs], dtype=bool)
        with np.errstate(invalid="ignore"):
            ground = ctx.attack & rider[t] & (before_elev[a] <= steed_elev[t]) & (a != steed[t])
        code = ((ground.astype(np.intp) * 2 + take_cover[t]) * 2 + rider[t]) * 3 + role[a]
        return code, _EXTRA_FACTS

    def _reach_by_mode(self, ctx: _Context, a: IntArray, sx: npt.NDArray[np.int64],
                       sy: npt.NDArray[np.int64], sz: npt.NDArray[np.int64],
                       ) -> dict[AttackMode, npt.NDArray[np.bool_]]:
        """Melee at natural reach (a rider's cut by its mount); a reach weapon at
        `weapon_reach`, adjacent creatures included (PF2 has no 3.5-style blind spot)."""
        assert isinstance(ctx, _Pf2Context)
        return {AttackMode.MELEE: within_reach_many(sx, sy, ctx.reach[a], sz),
                AttackMode.REACH: within_reach_many(sx, sy, ctx.weapon_reach_arr[a], sz),
                AttackMode.RANGED: np.ones(len(sx), dtype=bool)}

    def _reference_annotate(self, ctx: _Context, a: int, t: int, mode: AttackMode,
                            row: _Row, flank: tuple[int, tuple[str, ...]] | None) -> Annotation:
        assert isinstance(ctx, _Pf2Context)
        reach = ctx.cs[a].reach
        in_reach = mode is AttackMode.RANGED or ctx.in_reach(a, t, reach)
        if mode is AttackMode.REACH:
            in_reach = ctx.in_reach(a, t, ctx.weapon_reach[a])
        me = ctx.cs[a].id
        role = 2 if me in ctx.mounts else 1 if me in ctx.ridden else 0
        extra = (ctx.attack and ctx.from_ground(a, t), ctx.cs[t].take_cover,
                 ctx.cs[t].id in ctx.mounts, role)
        o = self._outcome(mode, row.level, ctx.cs[t].cover_floor, in_reach,
                          ctx.adjacent(a, t), flank, extra)
        return Annotation(ctx.cs[a].id, ctx.cs[t].id, mode, o.loe, o.degree, o.modifiers,
                          o.flags, o.flankers, row.lines)

    def _outcome(self, mode: AttackMode, level: int, floor: str | None, in_reach: bool,
                 adjacent: bool, flank: tuple[int, tuple[str, ...]] | None,
                 extra: Any) -> _Outcome:
        """CoverDegrees' outcome with PF2's degree (`_degree`), off-guard flanking with line
        of effect, and mounted combat; `extra` as `_fast_extra` gives it."""
        from_ground, take_cover, target_rides, role = extra
        degree = self._degree(level, from_ground, floor, take_cover)
        loe = degree is not Degree.TOTAL
        flags = attack_flags(degree, mode is not AttackMode.RANGED, in_reach, adjacent,
                             degree in self.STEALTH_DEGREES)
        mods = list(self.TABLE[degree])
        flankers: tuple[str, ...] = ()
        if flank is not None and mode is not AttackMode.RANGED and in_reach and loe:
            flankers = flank[1]
            flags |= {Flag.FLANKING, Flag.OFF_GUARD}
            mods.append(M(Stat.AC, self.OFF_GUARD_AC, ModKind.CIRCUMSTANCE,
                          "off-guard: flanked with " + ", ".join(flankers)))
        if target_rides:
            mods.append(M(Stat.REFLEX, self.MOUNTED_REFLEX, ModKind.CIRCUMSTANCE,
                          "mounted: -2 circumstance to all Reflex saves"))
        flags |= self.MOUNT_FLAGS[role]
        return _Outcome(loe, degree, tuple(mods), frozenset(flags), flankers)

    def distance(self, scene: SceneGeom, attacker: str, target: str) -> int:
        """As every ruleset's, a rider measured from its mount's space."""
        return super().distance(mounted_scene(scene)[0], attacker, target)

    # -- areas --------------------------------------------------------------------------

    def area_creatures(self, scene: SceneGeom) -> SceneGeom:
        """A rider is in an area wherever its mount's space is."""
        return mounted_scene(scene)[0]

    def area(self, scene: SceneGeom, options: Any, template: Template) -> list[AreaHit]:
        """Creatures in the area (a rider wherever its mount is) with line of effect from
        the origin; cover from the line between the origin and the centre of their space
        (CRB: 'draw the line from the effect's point of origin to the center of the
        creature's space'), only its Reflex side applies, and a rider's -2 Reflex."""
        geom, _ = mounted_scene(scene)
        region = shape(template, scene.grid)
        taken = {c.id for c in scene.creatures}
        origin_id = next(f"origin#{k}" for k in itertools.count() if f"origin#{k}" not in taken)
        point = point_creature(origin_id, template.x, template.y, scene.grid)
        targets = [c.id for c in geom.creatures if inside(region, c, scene.grid)]
        full = replace(scene, creatures=(*scene.creatures, point))
        ctx = self._context(full, options, attack=False)
        idx = pair_rows(len(ctx.cs), ctx.index, [(origin_id, t) for t in targets])
        hits = []
        for ann in self._fast(ctx, idx, (AttackMode.RANGED,), False):
            if not ann.loe:
                continue
            hits.append(AreaHit(ann.target, ann.cover,
                                tuple(m for m in ann.modifiers if m.stat is Stat.REFLEX),
                                frozenset()))
        return hits


class _Pf2Context(_Context):
    """The degrees context with PF2's wall levels and who rides whom."""

    def __init__(self, scene: SceneGeom, options: Any, rules: Pf2, before: SceneGeom,
                 mounts: dict[str, CreatureGeom], attack: bool) -> None:
        super().__init__(scene, options, rules)
        self.wall_level = rules._wall_levels(options)
        #: Attacks (True) or an area effect's origin (False): only attacks see a rider's
        #: lesser cover from the ground.
        self.attack = attack
        self.mounts = mounts
        self.ridden = {m.id for m in mounts.values()}
        before_cs = before.creatures
        self.before = dict(zip(ids_of(before_cs), before_cs, strict=True))
        #: Per creature index, its reach weapon's reach (feet), from the natural reach it
        #: has before any mount cut (`weapon_reach`, every creature at once: the riders in
        #: the same order as before they mounted, `mounted_scene`).
        natural = columns(before_cs, before.grid).reach
        weapon = np.where(natural <= 0, natural,
                          2 * natural if options.reach_weapon == "double"
                          else np.maximum(10.0, natural + 5.0))
        for rider, steed in mounts.items():
            k = self.index[rider]
            weapon[k] = rider_reach(float(weapon[k]), steed)
        self.weapon_reach_arr: npt.NDArray[np.float64] = weapon
        self.weapon_reach: list[float] = weapon.tolist()

    def from_ground(self, a: int, t: int) -> bool:
        """A rider (t) attacked from the ground: the attacker stands no higher than the
        mount's base (a flyer above it, or a creature on a ledge above it, is not)."""
        steed = self.mounts.get(self.cs[t].id)
        if steed is None:
            return False
        return bool(self.before[self.cs[a].id].elevation <= steed.elevation
                    and self.cs[a].id != steed.id)


__all__ = ["GREATER", "NONE", "Pf2", "Pf2Options"]
