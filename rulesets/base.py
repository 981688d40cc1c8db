"""What every ruleset returns, and the contract it fulfils.

Rule of this module: results are frozen values built from closed enums; a ruleset maps
geometry facts (from `geometry`) to these values and never touches the wire or the scene
documents. Options are msgspec Structs so the server can validate them at the edge and list
them, with their defaults and meaning, in `welcome`.
"""

from __future__ import annotations

import abc
import enum
import itertools
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import replace
from typing import Any, ClassVar

import msgspec
import numpy as np
import numpy.typing as npt

from geometry.incremental import SightPoints
from geometry.model import GridKind, SceneGeom
from geometry.square import distance_feet_3d, within_reach_many
from geometry.templates import Template, in_area_3d, shape
from geometry.vertical import lowered


class AttackMode(enum.Enum):
    """melee: at the attacker's natural reach; reach: with a reach weapon (double natural
    reach, not adjacent); ranged: a ranged attack or ray."""

    MELEE = "melee"
    REACH = "reach"
    RANGED = "ranged"


class Degree(enum.Enum):
    """Cover degrees across systems; each ruleset uses its own ladder of them."""

    NONE = "none"
    SOFT = "soft"
    HALF = "half"
    PARTIAL = "partial"
    THREE_QUARTERS = "three_quarters"
    LESSER = "lesser"
    COVER = "cover"
    STANDARD = "standard"
    IMPROVED = "improved"
    GREATER = "greater"
    TOTAL = "total"


class Stat(enum.Enum):
    AC = "ac"
    REFLEX = "reflex"
    #: The target's Dexterity saving throws (D&D 5e).
    DEXTERITY = "dexterity"
    ATTACK = "attack"
    HIDE = "hide"
    STEALTH = "stealth"
    CONCENTRATION = "concentration"
    DEFENSE = "defense"
    AGILITY = "agility"
    AWARENESS = "awareness"
    #: The target's resistance to the modifier's damage types (a value to subtract from
    #: that damage, not a bonus).
    RESISTANCE = "resistance"


class ModKind(enum.Enum):
    COVER = "cover"
    CIRCUMSTANCE = "circumstance"
    FLANKING = "flanking"
    OBSCUREMENT = "obscurement"
    #: From the surroundings, of no bonus type (the water's resistance to acid and fire).
    ENVIRONMENT = "environment"


class DamageType(enum.Enum):
    """Damage types a modifier or flag can be limited to (an attack dealing one of them)."""

    SLASHING = "slashing"
    BLUDGEONING = "bludgeoning"
    PIERCING = "piercing"
    ACID = "acid"
    FIRE = "fire"


class Flag(enum.Enum):
    CAN_TARGET = "can_target"
    CAN_AOO = "can_aoo"
    CAN_HIDE = "can_hide"
    IN_REACH = "in_reach"
    ADJACENT = "adjacent"
    FLANKING = "flanking"
    IMPROVED_EVASION = "improved_evasion"
    REFLEX_DEGREE_BETTER = "reflex_degree_better"
    #: Firing at this target is resolved by the friendly-fire rule (friendlyfire.resolve).
    FRIENDLY_FIRE = "friendly_fire"
    #: The target's full cover stands toward the attacker: it may not act in that direction.
    CANNOT_ACT_TOWARD_COVER = "cannot_act_toward_cover"
    #: The target is off-guard (-2 circumstance to AC) against this attacker.
    OFF_GUARD = "off_guard"
    #: The attacker has advantage on its attack rolls against this target (D&D 5e
    #: flanking): a die, not a number.
    ADVANTAGE = "advantage"
    # Aquatic combat (rulesets.aquatic; set only by rulesets that opt into it):
    ATTACKER_SUBMERGED = "attacker_submerged"
    TARGET_SUBMERGED = "target_submerged"
    THROUGH_WATER = "through_water"
    #: A ranged attack dealing slashing or bludgeoning damage misses automatically.
    RANGED_AUTO_MISS_SLASHING_BLUDGEONING = "ranged_auto_miss_slashing_bludgeoning"
    #: A ranged attack dealing piercing damage has its range increments halved.
    RANGE_INCREMENT_HALVED_PIERCING = "range_increment_halved_piercing"
    #: The attacker can cast no fire spell and use no action with the fire trait.
    NO_FIRE = "no_fire"
    #: The attacker is a rider or a ridden mount: the two share the multiple attack penalty.
    SHARES_MAP = "shares_map"
    #: The attacker is mounted: dismounting is its only move action.
    DISMOUNT_ONLY_MOVE = "dismount_only_move"


class Modifier(msgspec.Struct, frozen=True, gc=False):
    """A number the table applies: `value` to `stat` (of the target for ac/reflex/hide and
    resistance, of the attacker for attack), of a bonus `kind`, and why; `damage`, when not
    empty, limits it to attacks dealing one of those damage types (for resistance: the
    damage types resisted)."""

    stat: Stat
    value: int
    kind: ModKind
    reason: str
    damage: tuple[DamageType, ...] = ()


class TracedLine(msgspec.Struct, frozen=True, gc=False):
    """One sight line the rule drew, and what it met (for overlays that show why)."""

    start: tuple[float, float]
    end: tuple[float, float]
    blocked: bool
    walls: tuple[str, ...]
    tokens: tuple[str, ...]
    regions: tuple[str, ...]


class Annotation(msgspec.Struct, frozen=True, gc=False):
    """What one attacker faces when attacking one target in one mode."""

    attacker: str
    target: str
    mode: AttackMode
    loe: bool
    cover: Degree
    modifiers: tuple[Modifier, ...]
    flags: frozenset[Flag]
    flankers: tuple[str, ...] = ()
    lines: tuple[TracedLine, ...] | None = None
    #: Fraction of the target no obstacle hides, where the ruleset measured it.
    visible: float | None = None

    def key(self) -> tuple[str, str, str]:
        return (self.attacker, self.target, self.mode.value)


class AreaHit(msgspec.Struct, frozen=True, gc=False):
    """What one creature caught in an area effect gets against it: its cover from the
    effect's origin and the save modifiers that follow. `obstructions` counts what the
    ruleset counted along the line, where it counts (cover-degree rulesets)."""

    target: str
    cover: Degree
    modifiers: tuple[Modifier, ...]
    flags: frozenset[Flag]
    obstructions: int | None = None


class Ruleset(abc.ABC):
    """A game system: a name, an options schema, and the evaluation of pairs."""

    name: ClassVar[str]
    title: ClassVar[str]
    seed: ClassVar[str]
    Options: ClassVar[type[msgspec.Struct]]
    option_docs: ClassVar[Mapping[str, str]] = {}
    #: The ruleset's cover degrees from none upwards, total cover excluded.
    ladder: ClassVar[tuple[Degree, ...]]
    #: The grid types the ruleset's procedure is defined on; `scene.load` refuses others.
    grids: ClassVar[frozenset[GridKind]] = frozenset({GridKind.SQUARE})
    #: Why the ruleset refuses the grids it does not list (shown in the refusal).
    grid_note: ClassVar[str] = ""
    #: Whether `annotate` adds the aquatic combat layer (rulesets.aquatic) to `evaluate`.
    aquatic: ClassVar[bool] = False

    def floored(self, degree: Degree, floor: str | None) -> Degree:
        """The degree after the GM's override: at least `floor` (a degree name of this
        ruleset) when there is line of effect at all."""
        if floor is None or degree is Degree.TOTAL:
            return degree
        wanted = Degree(floor)
        return wanted if self.ladder.index(wanted) > self.ladder.index(degree) else degree

    @abc.abstractmethod
    def evaluate(self, scene: SceneGeom, options: Any,
                 pairs: Sequence[tuple[str, str]] | None = None,
                 modes: Iterable[AttackMode] = tuple(AttackMode),
                 lines: bool = False) -> list[Annotation]:
        """Annotations for the given ordered (attacker, target) pairs, or every ordered pair
        of the scene's creatures when `pairs` is None."""

    def annotate(self, scene: SceneGeom, options: Any,
                 pairs: Sequence[tuple[str, str]] | None = None,
                 modes: Iterable[AttackMode] = tuple(AttackMode),
                 lines: bool = False) -> list[Annotation]:
        """`evaluate`, then the ruleset-independent layers it opts into (aquatic combat):
        what the server and the golden files call."""
        out = self.evaluate(scene, options, pairs, modes, lines)
        if self.aquatic:
            # Imported here: the layer is built on this module's types.
            from rulesets.aquatic import with_aquatic
            out = with_aquatic(scene, out)
        return out

    def area_hits(self, scene: SceneGeom, options: Any, template: Template) -> list[AreaHit]:
        """`area` in three dimensions, then the layers the ruleset opts into (a submerged
        creature's resistance to acid and fire): what the server calls.

        The origin stands at the template's elevation. Every ruleset's `area` traces its
        lines from a point at elevation 0, so it is given the scene lowered by that much
        (the third dimension is the same wherever zero is); of the creatures it reaches on
        the map, those whose cube the template's solid misses (`in_area_3d`: a burst is a
        sphere, a cone a cone, a ray a cylinder, a rect a box) are not in the area."""
        placed = scene  # the water facts are judged where the creatures stand (ground at 0)
        if template.elevation:
            scene = lowered(scene, template.elevation)
            template = replace(template, elevation=0.0)
        hits = self.area(scene, options, template)
        region = shape(template, scene.grid)
        solid = {c.id for c in self.area_creatures(scene).creatures
                 if in_area_3d(template, region, c, scene.grid)}
        hits = [h for h in hits if h.target in solid]
        if self.aquatic:
            from rulesets.aquatic import with_aquatic_area
            hits = with_aquatic_area(placed, hits)
        return hits

    @abc.abstractmethod
    def area(self, scene: SceneGeom, options: Any, template: Template) -> list[AreaHit]:
        """Every creature the area effect reaches (inside it on the map and with line of
        effect from its origin, a point at elevation 0), with its cover and save modifiers
        against the effect."""

    def area_creatures(self, scene: SceneGeom) -> SceneGeom:
        """The scene whose creatures' spaces an area effect is measured against (a ruleset
        that moves a rider onto its mount's space says so here)."""
        return scene

    def widen(self, old: SceneGeom, new: SceneGeom, options: Any,
              pairs: set[tuple[str, str]],
              only: Set[tuple[str, str]] | None = None) -> set[tuple[str, str]]:
        """The pairs to recompute after a change, given those the geometry says it can
        touch (geometry.incremental): a ruleset whose annotations depend on more than the
        pair's lines and reach (who stands near the target) adds the pairs that depend.
        With `only` (the pairs some subscriber follows), the pairs it adds are among
        those: no other pair is looked at."""
        return pairs

    def distance(self, scene: SceneGeom, attacker: str, target: str) -> int:
        """Feet from the attacker to the target, between the nearest cubes of their spaces,
        diagonals alternating 5/10 ft on the vertical too: what range increments count."""
        return distance_feet_3d(scene.creature(attacker), scene.creature(target), scene.grid)

    def sight_points(self) -> SightPoints | None:
        """Where this ruleset's lines between two creatures can start and end (each line
        between a and t joins one of a's points to one of t's), so a change elsewhere is
        tested against those lines exactly; None: anywhere in the hull of their spaces."""
        return None

    def warm(self, scene: SceneGeom, options: Any) -> None:
        """Build, while nothing waits, what this ruleset keeps per set of walls and would
        otherwise build on the first request that needs it: the server calls it once a
        change has gone out (idle time) and on the thread that reads a scene ahead of the
        worker. Each call after the first finds it built. Nothing by default."""
        return None

    def in_the_way_modes(self, options: Any) -> tuple[AttackMode, ...]:
        """The attack modes whose annotation a creature standing in the way of the lines
        (or no longer standing there) can change, under these options; the others are
        not recomputed for such a change."""
        return tuple(AttackMode)

    def in_the_way_may_change(self, cover: Degree) -> bool:
        """Whether an annotation at this degree (lines not drawn) can change when a creature
        steps into or out of the way of its lines; the safe answer is yes."""
        return True

    def default_options(self) -> Any:
        return self.Options()

    def describe(self) -> dict[str, Any]:
        """The ruleset and its options as listed in `welcome`."""
        defaults = msgspec.to_builtins(self.Options())
        opts = []
        info = msgspec.inspect.type_info(self.Options)
        assert isinstance(info, msgspec.inspect.StructType)
        for f in info.fields:
            opt = {"name": f.encode_name, "default": defaults[f.encode_name],
                   "type": type(defaults[f.encode_name]).__name__,
                   "doc": self.option_docs.get(f.encode_name, "")}
            # A numeric option's range, as its Meta bounds it.
            if isinstance(f.type, msgspec.inspect.IntType | msgspec.inspect.FloatType):
                low, high = f.type.ge, f.type.le
                if low is not None:
                    opt["min"] = low
                if high is not None:
                    opt["max"] = high
            opts.append(opt)
        return {"name": self.name, "title": self.title, "seed": self.seed, "options": opts,
                "degrees": [d.value for d in (*self.ladder, Degree.TOTAL)],
                "grids": sorted(int(g) for g in self.grids),
                "aquatic": self.aquatic}


def attack_flags(degree: Degree, melee: bool, in_reach: bool, adjacent: bool,
                 can_hide: bool) -> set[Flag]:
    """The flags every ruleset gives an attack at this degree: in reach, adjacent, may be
    targeted (line of effect and in reach), the target may hide, and an attack of
    opportunity is possible (a melee attack in reach with line of effect and no cover)."""
    loe = degree is not Degree.TOTAL
    flags = set()
    if in_reach:
        flags.add(Flag.IN_REACH)
    if adjacent:
        flags.add(Flag.ADJACENT)
    if loe and in_reach:
        flags.add(Flag.CAN_TARGET)
    if can_hide:
        flags.add(Flag.CAN_HIDE)
    if melee and loe and in_reach and degree is Degree.NONE:
        flags.add(Flag.CAN_AOO)
    return flags


def in_reach_by_mode(sx: npt.NDArray[np.int64], sy: npt.NDArray[np.int64],
                     reach: npt.NDArray[np.float64], sz: npt.NDArray[np.int64] | None = None,
                     ) -> dict[AttackMode, npt.NDArray[np.bool_]]:
    """Per attack mode, whether each target (these grid steps away, `sz` vertically) is in
    reach: melee at natural reach; a reach weapon doubles natural reach and cannot strike
    within it (for a Medium wielder: not adjacent; for a Large one: not within 10 ft); ranged
    always."""
    natural = within_reach_many(sx, sy, reach, sz)
    return {AttackMode.MELEE: natural,
            AttackMode.REACH: within_reach_many(sx, sy, 2 * reach, sz) & ~natural,
            AttackMode.RANGED: np.ones(len(sx), dtype=bool)}


def pair_indices(n: int, index: Mapping[str, int],
                 pairs: Sequence[tuple[str, str]] | None) -> list[tuple[int, int]]:
    """The (attacker, target) creature indices to evaluate: the given id pairs, or every
    ordered pair of the scene's n creatures."""
    if pairs is None:
        return [(a, t) for a in range(n) for t in range(n) if a != t]
    return [(index[a], index[t]) for a, t in pairs]


def pair_rows(n: int, index: Mapping[str, int],
              pairs: Sequence[tuple[str, str]] | None) -> npt.NDArray[np.intp]:
    """`pair_indices` as rows (attacker, target) of an array, made without a Python step
    per pair: every ordered pair of n creatures is 9,900 of them at 100 tokens."""
    if pairs is None:
        return np.stack(np.nonzero(~np.eye(n, dtype=bool)), axis=1).astype(np.intp)
    flat = np.fromiter(map(index.__getitem__, itertools.chain.from_iterable(pairs)),
                       dtype=np.intp)
    if len(flat) != 2 * len(pairs):
        raise ValueError("pairs must be (attacker, target) pairs")
    return flat.reshape(-1, 2)


class UnknownRuleset(LookupError):
    def __init__(self, name: str, valid: Sequence[str]) -> None:
        super().__init__(f"unknown ruleset {name!r}; valid rulesets: {', '.join(valid)}")
        self.name = name
        self.valid = tuple(valid)


class Registry:
    """Finds rulesets by name; an unknown name is an error that lists the valid ones."""

    def __init__(self) -> None:
        self._by_name: dict[str, Ruleset] = {}

    def register(self, ruleset: Ruleset) -> Ruleset:
        if ruleset.name in self._by_name:
            raise ValueError(f"ruleset {ruleset.name!r} registered twice")
        self._by_name[ruleset.name] = ruleset
        return ruleset

    def get(self, name: str) -> Ruleset:
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownRuleset(name, self.names()) from None

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def all(self) -> list[Ruleset]:
        return [self._by_name[n] for n in self.names()]
