"""Geometric scene model: what the geometry layer knows about a battle map.

Rule of this module: plain frozen values and closed enums, in canvas pixels (Foundry's
coordinate system, y pointing down). Nothing here knows about the wire protocol or about any
game system's numbers; the server converts Foundry documents into these values and the
rulesets read facts computed from them. One square of the grid is five feet in every ruleset
(the convention of all the systems Covercast supports), so feet convert to pixels through the
grid size.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

FEET_PER_SQUARE = 5.0


class GridKind(enum.IntEnum):
    """Foundry's CONST.GRID_TYPES."""

    GRIDLESS = 0
    SQUARE = 1
    HEXODDR = 2
    HEXEVENR = 3
    HEXODDQ = 4
    HEXEVENQ = 5


class Size(enum.Enum):
    """Creature size categories with the D&D 3.5 space/reach/height table.

    `space` and `reach` are in feet (reach is the natural reach of a tall creature), `height`
    is a representative height in feet inside the table's range (used for "a wall up to the
    creature's waist" and, later, vertical lines); a token may override its height.
    """

    FINE = ("fine", 0.5, 0.0, 0.5)
    DIMINUTIVE = ("diminutive", 1.0, 0.0, 1.0)
    TINY = ("tiny", 2.5, 0.0, 2.0)
    SMALL = ("small", 5.0, 5.0, 3.0)
    MEDIUM = ("medium", 5.0, 5.0, 6.0)
    LARGE = ("large", 10.0, 10.0, 12.0)
    HUGE = ("huge", 15.0, 15.0, 24.0)
    GARGANTUAN = ("gargantuan", 20.0, 20.0, 48.0)
    COLOSSAL = ("colossal", 30.0, 30.0, 96.0)

    def __init__(self, label: str, space: float, reach: float, height: float) -> None:
        self.label = label
        self.space = space
        self.reach = reach
        self.height = height

    @property
    def rank(self) -> int:
        """Position in the size ladder (fine = 0), for 'one size larger' comparisons."""
        return _SIZE_ORDER.index(self)

    @classmethod
    def from_label(cls, label: str) -> Size:
        for size in cls:
            if size.label == label:
                return size
        raise ValueError(label)

    @classmethod
    def from_squares(cls, width: float) -> Size:
        """The size a token of this many squares across most likely has (no actor forwarded)."""
        if width < 0.5:
            return cls.DIMINUTIVE
        if width < 1:
            return cls.TINY
        if width < 2:
            return cls.MEDIUM
        if width < 3:
            return cls.LARGE
        if width < 4:
            return cls.HUGE
        if width < 6:
            return cls.GARGANTUAN
        return cls.COLOSSAL


_SIZE_ORDER = list(Size)
SIZE_LABELS = tuple(s.label for s in Size)


class Sense(enum.IntEnum):
    """Foundry's CONST.WALL_SENSE_TYPES for the sight restriction of a wall."""

    NONE = 0
    LIMITED = 10
    NORMAL = 20
    PROXIMITY = 30
    DISTANCE = 40


class Direction(enum.IntEnum):
    """Foundry's CONST.WALL_DIRECTIONS."""

    BOTH = 0
    LEFT = 1
    RIGHT = 2


class WallCover(enum.Enum):
    """What a wall is for cover purposes, beyond Foundry's own fields.

    SOLID blocks line of effect; LOW is a low obstacle (gives cover, never blocks line of
    effect); IMPROVED is an arrow slit or murder hole: lines pass, the target gets improved
    cover.
    """

    SOLID = "solid"
    LOW = "low"
    IMPROVED = "improved"


class RegionKind(enum.Enum):
    """Map features Foundry has no wall for, drawn as polygons.

    BLOCKING: terrain that blocks line of effect (a pillar, a boulder filling squares).
    COVER: squares that provide cover without blocking (rubble, a wagon).
    IMPROVED: squares that provide improved cover.
    OBSCURING: vision-limiting terrain (fog, foliage): lines pass, sight is limited.
    WATER: a body of water whose surface lies at `RegionGeom.surface` (feet); it is no
    obstacle (SceneGeom keeps it apart, in `water`), it makes what lies below it submerged.
    """

    BLOCKING = "blocking"
    COVER = "cover"
    IMPROVED = "improved"
    OBSCURING = "obscuring"
    WATER = "water"


@dataclass(frozen=True, slots=True)
class Grid:
    kind: GridKind
    size: float  # pixels per square
    distance: float  # scene units per square
    units: str

    @property
    def px_per_foot(self) -> float:
        return self.size / FEET_PER_SQUARE

    def units_to_feet(self, value: float) -> float:
        """Scene units (elevation, wall heights) to feet."""
        return value * FEET_PER_SQUARE / self.distance


@dataclass(frozen=True, slots=True)
class WallGeom:
    """A wall segment as the geometry sees it, already reduced to what blocks lines.

    `active` is False for open doors and sight-less walls; `limited` marks Foundry's limited
    (terrain) sight walls, which block only the second one a line crosses; `top` is the wall's
    top in feet (None: unbounded).
    """

    id: str
    x0: float
    y0: float
    x1: float
    y1: float
    active: bool
    limited: bool
    direction: Direction
    cover: WallCover
    bottom: float | None
    top: float | None


@dataclass(frozen=True, slots=True)
class CreatureGeom:
    """A token's space: top-left corner in pixels and its extent in squares."""

    id: str
    x: float
    y: float
    width: float  # squares
    height: float  # squares
    size: Size
    reach: float  # feet
    tall: float  # height in feet
    elevation: float  # feet
    disposition: int
    hidden: bool
    #: The GM's minimum cover degree for this creature (a ruleset degree name), if any.
    cover_floor: str | None = None
    #: Whether the creature has a swim Speed (it is not off-guard when submerged).
    swim: bool = False
    #: The id of the creature this one rides (flags.covercast.mount), if mounted.
    mount: str | None = None
    #: The creature has Taken Cover (flags.covercast.takeCover).
    take_cover: bool = False


@dataclass(frozen=True, slots=True)
class RegionGeom:
    id: str
    kind: RegionKind
    points: tuple[tuple[float, float], ...]
    #: For water: the elevation of its surface in feet (None for every other kind).
    surface: float | None = None


@dataclass(frozen=True, slots=True)
class SceneGeom:
    """Everything the geometry layer needs about one scene, in a frozen snapshot."""

    grid: Grid
    walls: tuple[WallGeom, ...]
    creatures: tuple[CreatureGeom, ...]
    regions: tuple[RegionGeom, ...] = ()
    #: Bodies of water (RegionKind.WATER); kept apart from `regions`, which are obstacles.
    water: tuple[RegionGeom, ...] = ()
    #: The whole scene is under water: every creature is submerged wherever it stands.
    underwater: bool = False

    def creature(self, creature_id: str) -> CreatureGeom:
        for c in self.creatures:
            if c.id == creature_id:
                return c
        raise KeyError(creature_id)


def point_creature(creature_id: str, x: float, y: float, grid: Grid,
                   like: CreatureGeom | None = None) -> CreatureGeom:
    """A point-sized stand-in at (x, y): an area effect's origin, or an attacker shooting
    from a chosen point (keeping `like`'s size, reach and side)."""
    tiny = 1e-6  # squares: far below any pixel, so the 'space' is the point itself
    # Centred on the point: lines start exactly there, so an origin on a wall reaches both
    # sides of it (the wall touches those lines only at their end), not just the side the
    # space's centre happened to fall on.
    x0, y0 = x - tiny * grid.size / 2, y - tiny * grid.size / 2
    if like is None:
        return CreatureGeom(creature_id, x0, y0, tiny, tiny, Size.MEDIUM, 0.0, 0.0, 0.0,
                            -99, False)
    return CreatureGeom(creature_id, x0, y0, tiny, tiny, like.size, like.reach, like.tall,
                        like.elevation, like.disposition, like.hidden)
