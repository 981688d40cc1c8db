"""Wire messages: the schema of every frame, and the one place bytes become values.

Rule of this module: everything a client sends is decoded here, once, into frozen msgspec
Structs (msgpack in binary frames, JSON in text frames, the same schema); anything that does
not fit raises ClientError naming the field and the offending value. Everything the server
sends is a Struct encoded here in the encoding of the request it answers. No other module
parses client input.

Foundry documents (walls, tokens) are mirrored so a module can forward `toObject()` untouched:
the fields Covercast reads are typed and bounded, the other fields Foundry defines are
accepted and ignored (listed below), and anything else is rejected as unknown. `_id` is
accepted as an alias of `id`. Inside `flags`, only the `wall-height` and `covercast`
namespaces are read; other modules' namespaces are ignored.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal, TypeVar

import msgpack
import msgspec
from msgspec import Meta, Struct

from server.errors import ClientError, ErrorCode

PROTOCOL_VERSION = 1


class Limits(Struct, frozen=True, rename="camel"):
    """Bounds on what a client may send, reported in `welcome`."""

    max_frame_bytes: int = 4 * 1024 * 1024
    max_scenes: int = 64
    max_tokens: int = 1000
    max_walls: int = 20000
    max_regions: int = 1000
    max_region_points: int = 2000
    max_batch: int = 5000
    max_string: int = 256
    max_coordinate: float = 1e7
    #: A token's width and height, in squares: the rules' largest creature, Colossal, takes
    #: 6 squares a side. A pair of two 6 x 6 creatures costs the corner engine 23-24 ms,
    #: every mode (8 x 8: 38-42 ms), growing with the fourth power of the side, and a pair
    #: is the least a slice of a table holds (bench/RESULTS.md, "Big creatures").
    max_token_squares: int = 6
    max_subscriptions: int = 64
    #: Attacker-target pairs a subscription's table may hold (tokens x (tokens - 1)):
    #: about 316 tokens. Measured (docs/protocol.md, 'Cost limits'): what one table of
    #: that size takes in memory and worker time is what the server can do per scene.
    max_table_pairs: int = 100_000


LIMITS = Limits()

Id = Annotated[str, Meta(min_length=1, max_length=LIMITS.max_string)]
Coord = Annotated[float, Meta(ge=-LIMITS.max_coordinate, le=LIMITS.max_coordinate)]
Height = Annotated[float, Meta(ge=-LIMITS.max_coordinate, le=LIMITS.max_coordinate)]
Squares = Annotated[float, Meta(gt=0, le=LIMITS.max_token_squares)]
SizeLabel = Literal["fine", "diminutive", "tiny", "small", "medium", "large", "huge",
                    "gargantuan", "colossal"]
Mode = Literal["melee", "reach", "ranged"]


class _Strict(Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    pass


# -- Foundry documents ----------------------------------------------------------------------

class WallHeightFlags(Struct, frozen=True):
    """flags["wall-height"] of the Wall Height module (other keys of it are ignored)."""

    bottom: Height | None = None
    top: Height | None = None


class CovercastWallFlags(_Strict, frozen=True):
    """flags.covercast on a wall: what it is for cover beyond Foundry's own fields."""

    cover: Literal["solid", "low", "improved"] = "solid"


class WallFlags(Struct, frozen=True):
    wall_height: WallHeightFlags | None = msgspec.field(default=None, name="wall-height")
    covercast: CovercastWallFlags | None = None


_IGNORED = Any  # a Foundry field Covercast accepts and does not read


class WallDoc(_Strict, frozen=True):
    """Foundry's WallDocument (c in canvas pixels, CONST.WALL_* enums)."""

    id: Id
    c: Annotated[list[Coord], Meta(min_length=4, max_length=4)]
    move: Literal[0, 10, 20, 30, 40] = 20
    sight: Literal[0, 10, 20, 30, 40] = 20
    dir: Literal[0, 1, 2] = 0
    door: Literal[0, 1, 2] = 0
    ds: Literal[0, 1, 2] = 0
    flags: WallFlags = WallFlags()
    light: _IGNORED = None
    sound: _IGNORED = None
    threshold: _IGNORED = None
    doorSound: _IGNORED = None
    animation: _IGNORED = None
    _stats: _IGNORED = None


ConMod = Annotated[int, Meta(ge=-5, le=30)]
SaveMod = Annotated[int, Meta(ge=-30, le=100)]


class TokenHeightFlags(Struct, frozen=True):
    tokenHeight: Height | None = None


class CovercastTokenFlags(_Strict, frozen=True):
    """flags.covercast on a token: `cover`, the GM's override, a minimum cover degree this
    token has against every attacker that has line of effect to it (a degree of the scene's
    ruleset); `swim`, whether it has a swim Speed (aquatic combat); `con` and `fortitude`,
    its Constitution modifier and Fortitude save modifier (drowning, `turn.end`); `mount`,
    the id of the token it rides (checked against the scene: it must exist, be at least one
    size larger and ride nothing itself); `takeCover`, the creature has used Pathfinder 2e's
    Take Cover action."""

    cover: Literal["soft", "half", "partial", "cover", "improved", "lesser", "standard",
                   "greater", "three_quarters"] | None = None
    swim: bool = False
    con: ConMod | None = None
    fortitude: SaveMod | None = None
    mount: Id | None = None
    takeCover: bool = False


class TokenFlags(Struct, frozen=True):
    wall_height: TokenHeightFlags | None = msgspec.field(default=None, name="wall-height")
    covercast: CovercastTokenFlags | None = None


TokenShapeId = Literal[0, 1, 2, 3, 4, 5]


class TokenDoc(_Strict, frozen=True):
    """Foundry's TokenDocument: x, y top-left in pixels, width/height in squares, elevation in
    scene units; `size` and `reach` (feet) stand in for the actor when it is not forwarded."""

    id: Id
    x: Coord
    y: Coord
    width: Squares = 1
    height: Squares = 1
    elevation: Height = 0
    disposition: Literal[-2, -1, 0, 1] = -1
    hidden: bool = False
    name: Annotated[str, Meta(max_length=LIMITS.max_string)] = ""
    size: SizeLabel | None = None
    reach: Annotated[float, Meta(ge=0, le=1000)] | None = None
    flags: TokenFlags = TokenFlags()
    #: Foundry's CONST.TOKEN_SHAPES (v13 `shape`, v12 `hexagonalShape`): the token's hex
    #: footprint on hex grids (default 4, RECTANGLE_1).
    shape: TokenShapeId | None = None
    hexagonalShape: TokenShapeId | None = None
    # Foundry fields accepted untouched and not read:
    displayName: _IGNORED = None
    actorId: _IGNORED = None
    actorLink: _IGNORED = None
    delta: _IGNORED = None
    actorData: _IGNORED = None
    appendNumber: _IGNORED = None
    prependAdjective: _IGNORED = None
    texture: _IGNORED = None
    sort: _IGNORED = None
    locked: _IGNORED = None
    lockRotation: _IGNORED = None
    rotation: _IGNORED = None
    alpha: _IGNORED = None
    displayBars: _IGNORED = None
    bar1: _IGNORED = None
    bar2: _IGNORED = None
    light: _IGNORED = None
    sight: _IGNORED = None
    detectionModes: _IGNORED = None
    occludable: _IGNORED = None
    ring: _IGNORED = None
    turnMarker: _IGNORED = None
    movementAction: _IGNORED = None
    effects: _IGNORED = None
    overlayEffect: _IGNORED = None
    _movementHistory: _IGNORED = None
    _regions: _IGNORED = None
    _stats: _IGNORED = None
    # Foundry v14: the scene level the token stands on, and its depth in grid spaces (not
    # read: heights come from the size table or Wall Height's tokenHeight, docs/protocol.md).
    level: _IGNORED = None
    depth: _IGNORED = None


RegionKindName = Literal["blocking", "cover", "improved", "obscuring", "water"]
Points = Annotated[list[Coord], Meta(min_length=6, max_length=2 * LIMITS.max_region_points)]


Penalty = Annotated[int, Meta(ge=0, le=100)]


class CovercastRegionFlags(_Strict, frozen=True):
    kind: RegionKindName
    #: Obscurement: the GM's penalty to attacks and Awareness through or into the region.
    penalty: Penalty | None = None
    #: For kind "water": the elevation of the water's surface, in scene units.
    surface: Height | None = None


class RegionFlags(Struct, frozen=True):
    covercast: CovercastRegionFlags | None = None


class ShapeDoc(_Strict, frozen=True):
    """One shape of a Foundry RegionDocument that Covercast reads (pixels, degrees)."""

    type: Literal["polygon", "rectangle", "circle", "ellipse"]
    points: Points | None = None
    x: Coord = 0
    y: Coord = 0
    width: Annotated[float, Meta(ge=0, le=LIMITS.max_coordinate)] = 0
    height: Annotated[float, Meta(ge=0, le=LIMITS.max_coordinate)] = 0
    radius: Annotated[float, Meta(ge=0, le=LIMITS.max_coordinate)] = 0
    radiusX: Annotated[float, Meta(ge=0, le=LIMITS.max_coordinate)] = 0
    radiusY: Annotated[float, Meta(ge=0, le=LIMITS.max_coordinate)] = 0
    rotation: Annotated[float, Meta(ge=-3600, le=3600)] = 0
    hole: bool = False


class RegionDoc(_Strict, frozen=True):
    """A map feature Foundry has no wall for, in either of two forms:

    - Covercast's own: `kind` (blocking, cover, improved, obscuring, water) and `points`, a
      flat polygon [x0, y0, x1, y1, ...] in pixels; water also needs `surface`, the
      elevation of its surface in scene units;
    - Foundry's RegionDocument, forwarded untouched: read when `flags.covercast.kind` names
      a kind (its `shapes` become the polygon), ignored otherwise (a region for other
      purposes).
    """

    id: Id
    kind: RegionKindName | None = None
    points: Points | None = None
    penalty: Penalty | None = None
    surface: Height | None = None
    shapes: Annotated[list[dict[str, Any]], Meta(max_length=64)] = []
    flags: RegionFlags = RegionFlags()
    name: _IGNORED = None
    color: _IGNORED = None
    elevation: _IGNORED = None
    behaviors: _IGNORED = None
    visibility: _IGNORED = None
    displayMeasurements: _IGNORED = None
    highlightMode: _IGNORED = None
    restriction: _IGNORED = None
    locked: _IGNORED = None
    ownership: _IGNORED = None
    _stats: _IGNORED = None


class GridDoc(_Strict, frozen=True):
    type: Literal[0, 1, 2, 3, 4, 5]
    size: Annotated[float, Meta(ge=10, le=1000)] = 100
    distance: Annotated[float, Meta(gt=0, le=10000)] = 5
    units: Annotated[str, Meta(max_length=32)] = "ft"
    style: _IGNORED = None
    thickness: _IGNORED = None
    color: _IGNORED = None
    alpha: _IGNORED = None


class CovercastSceneFlags(_Strict, frozen=True):
    """flags.covercast on a scene: `underwater`, the whole scene is under water (every
    creature is submerged, every line passes through water)."""

    underwater: bool = False


class SceneFlags(Struct, frozen=True):
    """A scene's flags: only the `covercast` namespace is read, others are ignored."""

    covercast: CovercastSceneFlags | None = None


class SceneDoc(_Strict, frozen=True):
    id: Id
    grid: GridDoc
    width: Annotated[float, Meta(gt=0, le=LIMITS.max_coordinate)] = 4000
    height: Annotated[float, Meta(gt=0, le=LIMITS.max_coordinate)] = 3000
    name: Annotated[str, Meta(max_length=LIMITS.max_string)] = ""
    walls: Annotated[list[WallDoc], Meta(max_length=LIMITS.max_walls)] = []
    tokens: Annotated[list[TokenDoc], Meta(max_length=LIMITS.max_tokens)] = []
    regions: Annotated[list[RegionDoc], Meta(max_length=LIMITS.max_regions)] = []
    # Foundry SceneDocument fields accepted untouched and not read:
    padding: _IGNORED = None
    active: _IGNORED = None
    navigation: _IGNORED = None
    navOrder: _IGNORED = None
    navName: _IGNORED = None
    background: _IGNORED = None
    foreground: _IGNORED = None
    foregroundElevation: _IGNORED = None
    thumb: _IGNORED = None
    initial: _IGNORED = None
    backgroundColor: _IGNORED = None
    tokenVision: _IGNORED = None
    fog: _IGNORED = None
    environment: _IGNORED = None
    drawings: _IGNORED = None
    lights: _IGNORED = None
    notes: _IGNORED = None
    sounds: _IGNORED = None
    templates: _IGNORED = None
    tiles: _IGNORED = None
    playlist: _IGNORED = None
    playlistSound: _IGNORED = None
    journal: _IGNORED = None
    journalEntryPage: _IGNORED = None
    weather: _IGNORED = None
    folder: _IGNORED = None
    sort: _IGNORED = None
    ownership: _IGNORED = None
    flags: SceneFlags | None = None
    levels: _IGNORED = None
    _stats: _IGNORED = None


# -- client -> server -----------------------------------------------------------------------

#: Largest integer a JavaScript client can hold exactly (Number.MAX_SAFE_INTEGER): the bound
#: of seeds, which the server may roll and send back.
MAX_SAFE_INT = 2 ** 53 - 1
#: The bound of every integer anywhere in a message (_check_values) and of request ids: a
#: signed 64-bit integer, which msgpack and JSON both carry back (past 64 bits msgpack
#: cannot, and the reply would fail to encode).
MAX_INT = 2 ** 63 - 1
ReqId = (Annotated[str, Meta(max_length=LIMITS.max_string)]
         | Annotated[int, Meta(ge=0, le=MAX_INT)] | None)
Patch = Annotated[dict[str, Any], Meta(max_length=64)]
Batch = Meta(min_length=1, max_length=LIMITS.max_batch)


RoleName = Literal["gm", "player", "overlay"]


class Hello(_Strict, frozen=True, tag="hello", tag_field="type"):
    protocol: Annotated[int, Meta(ge=0, le=65535)]
    client: Annotated[str, Meta(max_length=LIMITS.max_string)]
    token: Annotated[str, Meta(max_length=1024)] | None = None
    #: A role at most as powerful as the token's (a gm viewing as players do); none: the
    #: token's role.
    role: RoleName | None = None
    #: Annotation sets in the compact form (docs/protocol.md section 12): modifiers listed
    #: once per frame and referenced by index, flags as the indices of the true ones. The
    #: `welcome` says whether it was granted; false (the default): the verbose form.
    compact: bool = False
    id: ReqId = None


class SceneLoad(_Strict, frozen=True, tag="scene.load", tag_field="type"):
    scene: SceneDoc
    ruleset: Id = "dnd35"
    options: Annotated[dict[str, Any], Meta(max_length=64)] = {}
    id: ReqId = None


class TokenCreate(_Strict, frozen=True, tag="token.create", tag_field="type"):
    scene: Id
    tokens: Annotated[list[TokenDoc], Batch]
    id: ReqId = None


class TokenUpdate(_Strict, frozen=True, tag="token.update", tag_field="type"):
    scene: Id
    tokens: Annotated[list[Patch], Batch]
    id: ReqId = None


class TokenDelete(_Strict, frozen=True, tag="token.delete", tag_field="type"):
    scene: Id
    ids: Annotated[list[Id], Batch]
    id: ReqId = None


class WallCreate(_Strict, frozen=True, tag="wall.create", tag_field="type"):
    scene: Id
    walls: Annotated[list[WallDoc], Batch]
    id: ReqId = None


class WallUpdate(_Strict, frozen=True, tag="wall.update", tag_field="type"):
    scene: Id
    walls: Annotated[list[Patch], Batch]
    id: ReqId = None


class WallDelete(_Strict, frozen=True, tag="wall.delete", tag_field="type"):
    scene: Id
    ids: Annotated[list[Id], Batch]
    id: ReqId = None


class Point(_Strict, frozen=True):
    x: Coord
    y: Coord


class CoverQuery(_Strict, frozen=True, tag="cover.query", tag_field="type"):
    scene: Id
    attacker: Id
    target: Id
    attack: Mode = "ranged"
    origin: Point | None = None
    lines: bool = False
    id: ReqId = None


class TemplateDoc(_Strict, frozen=True):
    """Foundry's MeasuredTemplateDocument: t circle|cone|rect|ray, x, y origin in pixels,
    distance (and ray width) in scene units, direction and cone angle in degrees, elevation
    of the origin in scene units."""

    t: Literal["circle", "cone", "rect", "ray"]
    x: Coord
    y: Coord
    distance: Annotated[float, Meta(gt=0, le=LIMITS.max_coordinate)]
    direction: Annotated[float, Meta(ge=-3600, le=3600)] = 0
    angle: Annotated[float, Meta(gt=0, le=360)] = 53.13
    width: Annotated[float, Meta(gt=0, le=LIMITS.max_coordinate)] | None = None
    #: The origin's height (and the shape's axis), in scene units like token elevations
    #: (Foundry's MeasuredTemplateDocument.elevation).
    elevation: Height = 0
    id: Id | None = None
    user: _IGNORED = None
    author: _IGNORED = None
    borderColor: _IGNORED = None
    fillColor: _IGNORED = None
    texture: _IGNORED = None
    hidden: _IGNORED = None
    sort: _IGNORED = None
    flags: _IGNORED = None
    _stats: _IGNORED = None


class AreaQuery(_Strict, frozen=True, tag="area.query", tag_field="type"):
    scene: Id
    template: TemplateDoc
    id: ReqId = None


class SceneUnload(_Strict, frozen=True, tag="scene.unload", tag_field="type"):
    scene: Id
    id: ReqId = None


class SceneGet(_Strict, frozen=True, tag="scene.get", tag_field="type"):
    scene: Id
    id: ReqId = None


class Rolls(_Strict, frozen=True):
    """Dice a client rolled itself: the d20 of a Fortitude save and the d10s of its
    damage (as many as the save's damage needs)."""

    d20: Annotated[int, Meta(ge=1, le=20)] | None = None
    d10: Annotated[list[Annotated[int, Meta(ge=1, le=10)]], Meta(max_length=100)] | None = None


Count = Annotated[int, Meta(ge=0, le=100)]


class TurnEnd(_Strict, frozen=True, tag="turn.end", tag_field="type", rename="camel"):
    """The end of a token's turn, with what it did during the turn (drowning and
    suffocating, docs/rulesets.md). `breathing` null: computed from the water."""

    scene: Id
    token: Id
    attacked: bool = False
    cast_spell: bool = False
    spoke: bool = False
    critical_hits: Count = 0
    crit_failed_damage_saves: Count = 0
    breathing: bool | None = None
    con: ConMod | None = None
    fortitude: SaveMod | None = None
    hp: Annotated[int, Meta(ge=0, le=1_000_000)] | None = None
    rolls: Rolls | None = None
    seed: Annotated[int, Meta(ge=0, le=MAX_SAFE_INT)] | None = None
    id: ReqId = None


class BreathGet(_Strict, frozen=True, tag="breath.get", tag_field="type"):
    """A token's air (or, without `token`, every stored one of the scene's tokens)."""

    scene: Id
    token: Id | None = None
    id: ReqId = None


class SceneFocus(_Strict, frozen=True, tag="scene.focus", tag_field="type"):
    """The gm says which pair the table is looking at (the creature whose turn it is and its
    target, or the last attack's): overlays follow it. `null` clears a side; the scene's
    revision does not change (no rule depends on it)."""

    scene: Id
    attacker: Id | None = None
    target: Id | None = None
    mode: Mode | None = None
    id: ReqId = None


class Subscribe(_Strict, frozen=True, tag="subscribe", tag_field="type"):
    """A table to follow; `attackers`, `targets` (token ids) and `sides` (dispositions by
    name) narrow it to the pairs they select (their sizes, ids and names are checked by
    server/subscriptions.py, against the scene)."""

    scene: Id
    lines: bool = False
    modes: Annotated[tuple[Mode, ...], Meta(min_length=1, max_length=3)] = (
        "melee", "reach", "ranged")
    attackers: list[Id] | None = None
    targets: list[Id] | None = None
    sides: list[Id] | None = None
    id: ReqId = None


class Unsubscribe(_Strict, frozen=True, tag="unsubscribe", tag_field="type"):
    scene: Id
    id: ReqId = None


D20 = Annotated[int, Meta(ge=1, le=20)]
#: The friendly-fire die: a d10 for a one-hex target, more faces for more candidate cells
#: (checked against the shot's candidates by the session).
D10 = Annotated[int, Meta(ge=1, le=1000)]
#: Largest seed a JavaScript client can hold exactly (Number.MAX_SAFE_INTEGER).
MAX_SEED = MAX_SAFE_INT
MAX_DICE = 10


class FriendlyFireAttack(_Strict, frozen=True):
    """One attack of a friendlyfire.resolve: a pool of d20s at one target. `dice` are the
    raw faces the client rolled, or `count` asks the server to roll that many; `d10` is the
    client's friendly-fire die (the server rolls it when absent and needed)."""

    target: Id
    dice: Annotated[list[D20], Meta(min_length=1, max_length=MAX_DICE)] | None = None
    count: Annotated[int, Meta(ge=1, le=MAX_DICE)] | None = None
    d10: D10 | None = None


class FriendlyFireResolve(_Strict, frozen=True, tag="friendlyfire.resolve", tag_field="type"):
    """Resolve shots by Enchanted Realms' friendly-fire rule (ruleset 'realms', hex and
    square grids).
    Several attacks are split dice; `defense` holds Defense values before cover (the target's
    is required, a struck creature without one is left to the GM); `bonus` is added to each
    die; `seed` makes the server's rolls replayable."""

    scene: Id
    attacker: Id
    attacks: Annotated[list[FriendlyFireAttack], Meta(min_length=1, max_length=MAX_DICE)]
    defense: Annotated[dict[Id, Annotated[int, Meta(ge=-1000, le=1000)]],
                       Meta(max_length=LIMITS.max_tokens)]
    bonus: Annotated[int, Meta(ge=-1000, le=1000)] = 0
    seed: Annotated[int, Meta(ge=0, le=MAX_SEED)] | None = None
    id: ReqId = None


Request = (Hello | SceneLoad | TokenCreate | TokenUpdate | TokenDelete | WallCreate
           | WallUpdate | WallDelete | CoverQuery | AreaQuery | SceneGet | SceneUnload | Subscribe
           | Unsubscribe | FriendlyFireResolve | TurnEnd | BreathGet | SceneFocus)
REQUEST_TYPES = tuple(sorted(
    msgspec.inspect.type_info(t).tag  # type: ignore[attr-defined]
    for t in Request.__args__))


# -- server -> client -----------------------------------------------------------------------

class ModifierOut(_Strict, frozen=True):
    stat: str
    value: int
    kind: str
    reason: str
    #: Damage types it is limited to (omitted: every attack).
    damage: list[str] = []


class LineOut(_Strict, frozen=True):
    start: tuple[float, float]
    end: tuple[float, float]
    blocked: bool
    walls: list[str] = []
    tokens: list[str] = []
    regions: list[str] = []


# gc=False: a scene's table holds one per pair and mode (tens of thousands), and they
# can hold no reference cycle; untracked, they no longer lengthen every full collection.
class AnnotationOut(Struct, frozen=True, omit_defaults=True, gc=False):
    attacker: str
    target: str
    mode: str
    loe: bool
    cover: str
    modifiers: list[ModifierOut]
    flags: dict[str, bool]
    flankers: list[str] = []
    lines: list[LineOut] | None = None
    visible: float | None = None


class StepOut(Struct, frozen=True, omit_defaults=True):
    """One thing that happened to a token's air at a turn end; save fields only on saves."""

    event: str
    air: int
    detail: str
    dc: int | None = None
    d20: int | None = None
    modifier: int | None = None
    total: int | None = None
    degree: str | None = None
    dice: list[int] | None = None
    damage: int | None = None


class BreathOut(Struct, frozen=True, omit_defaults=True, rename="camel"):
    """A token's air and suffocation, and the steps of the last turn end that changed it
    (`seed`: the seed of the dice the server rolled, when it rolled any)."""

    token: str
    air: int
    max_air: int
    suffocating: bool
    unconscious: bool
    dead: bool
    checks: int
    next_dc: int | None = None
    next_dice: int | None = None
    steps: list[StepOut] = []
    seed: int | None = None


class BreathState(Struct, frozen=True, tag="breath", tag_field="type", omit_defaults=True):
    """Reply to `turn.end` (one entry, with its steps) and `breath.get`."""

    scene: str
    breath: list[BreathOut]
    id: ReqId = None


class AreaHitOut(Struct, frozen=True, omit_defaults=True):
    token: str
    cover: str
    modifiers: list[ModifierOut]
    flags: dict[str, bool]
    obstructions: int | None = None


class AreaResult(Struct, frozen=True, tag="area.result", tag_field="type", omit_defaults=True):
    scene: str
    revision: int
    affected: list[AreaHitOut]
    id: ReqId = None


class SceneState(Struct, frozen=True, tag="scene", tag_field="type", omit_defaults=True):
    """A scene as the server holds it: its documents (Foundry fields Covercast ignores are
    not kept), ruleset and options, at a revision."""

    scene: dict[str, Any]
    revision: int
    id: ReqId = None


class Welcome(Struct, frozen=True, tag="welcome", tag_field="type", omit_defaults=True):
    protocol: int
    server: str
    version: str
    rulesets: list[dict[str, Any]]
    limits: Limits
    #: What this connection may do: "gm" changes scenes; "player" and "overlay" only read
    #: and never see hidden tokens.
    role: str
    #: The connection's `annotations` come in the compact form (it asked in `hello`);
    #: omitted (false): the verbose form.
    compact: bool = False
    id: ReqId = None


class Ack(Struct, frozen=True, tag="ack", tag_field="type", omit_defaults=True):
    scene: str
    revision: int
    id: ReqId = None


class CoverResult(Struct, frozen=True, tag="cover.result", tag_field="type", omit_defaults=True):
    scene: str
    revision: int
    annotation: AnnotationOut
    id: ReqId = None
    #: Feet between the two creatures' nearest cubes (3D, alternating diagonals), for the
    #: client's range increments.
    distance: float | None = None


class Annotations(Struct, frozen=True, tag="annotations", tag_field="type", omit_defaults=True):
    scene: str
    revision: int
    full: bool
    annotations: list[AnnotationOut]
    removed: list[tuple[str, str, str]]
    #: Tokens whose air changed since this subscriber was last sent (all, in a full set).
    breath: list[BreathOut] = []
    id: ReqId = None


class FocusOut(Struct, frozen=True, tag="focus", tag_field="type"):
    """Pushed to a scene's subscribers when the gm sets its focus, after each full set, and
    to a viewer when what it may see of the focus changes: a hidden (or deleted) token is
    null in a viewer's copy."""

    scene: str
    attacker: str | None
    target: str | None
    mode: str | None


class Error(Struct, frozen=True, tag="error", tag_field="type", omit_defaults=True):
    code: str
    message: str
    path: str | None = None
    id: ReqId = None


class DieOut(Struct, frozen=True):
    raw: int
    total: int
    natural20: bool
    hit: bool


class CandidateOut(Struct, frozen=True, omit_defaults=True):
    slot: int
    cell: tuple[int, int]
    x: float
    y: float
    role: str
    token: str | None = None
    note: str = ""


class FriendlyFireOut(Struct, frozen=True, rename="camel"):
    target: str
    cover: str
    trigger: str | None
    defense: int
    modifier: int
    dice: list[DieOut]
    hit_target: bool
    friendly_fire: bool
    candidates: list[CandidateOut]
    d10: int | None
    slot: int | None
    struck: str | None
    moved: list[DieOut]
    defense_struck: int | None
    hit_struck: bool | None
    rolled: list[str]
    steps: list[str]
    faces: int = 10


class FriendlyFireResult(Struct, frozen=True, tag="friendlyfire.result", tag_field="type",
                         omit_defaults=True):
    scene: str
    revision: int
    attacker: str
    seed: int | None
    attacks: list[FriendlyFireOut]
    id: ReqId = None


class CompactExtra(Struct, frozen=True, omit_defaults=True, gc=False):
    """A compact annotation's optional fields, as the verbose annotation has them (only
    those present are written; the element is left out when none is)."""

    flankers: list[str] = []
    lines: list[LineOut] | None = None
    visible: float | None = None


class CompactAnnotationOut(Struct, frozen=True, array_like=True, gc=False):
    """One annotation in the compact form, an array: attacker, target, mode, loe, cover,
    the indices of its modifiers in the frame's `modifiers`, the indices of its true flags
    in the frame's `flags`, and (only when one is present) a map of the optional fields."""

    attacker: str
    target: str
    mode: str
    loe: bool
    cover: str
    modifiers: list[int]
    flags: list[int]
    extra: CompactExtra | None = None


class CompactAnnotations(Struct, frozen=True, tag="annotations", tag_field="type",
                         omit_defaults=True):
    """`annotations` in the compact form (docs/protocol.md section 12): the same message,
    with the modifiers and flag names its annotations use listed once, in the frame."""

    scene: str
    revision: int
    full: bool
    form: Literal["compact"]
    #: Every flag name, in the order the annotations' flag indices count in.
    flags: list[str]
    #: Every distinct modifier the frame's annotations carry, each once.
    modifiers: list[ModifierOut]
    annotations: list[CompactAnnotationOut]
    removed: list[tuple[str, str, str]]
    breath: list[BreathOut] = []
    id: ReqId = None


Response = (Welcome | Ack | CoverResult | AreaResult | SceneState | Annotations | BreathState
            | Error | FriendlyFireResult | FocusOut)
#: What a connection that asked for the compact form is sent: `annotations` compact.
CompactResponse = (Welcome | Ack | CoverResult | AreaResult | SceneState | CompactAnnotations
                   | BreathState | Error | FriendlyFireResult | FocusOut)


# -- decoding -------------------------------------------------------------------------------

_PATH = re.compile(r" - at `(\$[^`]*)`$")
_UNKNOWN = re.compile(r"unknown field `(.*)`$", re.DOTALL)
_KEY = re.compile(r"^(Expected `[^`]*`) - at `key` in `(\$[^`]*)`$")
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _value_at(obj: Any, path: str) -> Any:
    """What the client sent at a msgspec path like `$.scene.tokens[2].x` (None if absent)."""
    for name, index in _SEGMENT.findall(path[1:]):
        if name:
            obj = obj.get(name) if isinstance(obj, dict) else None
        else:
            k = int(index)
            obj = obj[k] if isinstance(obj, list) and k < len(obj) else None
    return obj


def short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def schema_error(exc: msgspec.ValidationError, raw: Any, prefix: str = "$") -> ClientError:
    """A ClientError from msgspec's message, with the path rooted at `prefix` and the value
    the client actually sent at that path."""
    text = str(exc)
    key = _KEY.search(text)
    if key:
        # A map with a key that is not a string: msgspec names the map.
        path = prefix + key.group(2)[1:]
        return ClientError(ErrorCode.INVALID,
                           f"{path}: map keys must be strings ({key.group(1)})", path=path)
    match = _PATH.search(text)
    inner = match.group(1) if match else "$"
    what = _PATH.sub("", text)
    unknown = _UNKNOWN.search(what)
    if unknown:
        # The name may hold '.', '[' or backticks: look it up, never parse it as a path.
        name = unknown.group(1)
        container = _value_at(raw, inner)
        value = container.get(name) if isinstance(container, dict) else None
        path = prefix + inner[1:] + field_segment(name)
        return ClientError(ErrorCode.INVALID,
                           f"{path}: unknown field {name!r} (value {short_repr(value)})",
                           path=path)
    elif what.startswith("Object missing required field"):
        detail = what
    else:
        what = re.sub(r", got `[^`]*`$", "", what)
        detail = f"{what}, got {short_repr(_value_at(raw, inner))}"
    path = prefix + inner[1:]
    return ClientError(ErrorCode.INVALID, f"{path}: {detail}", path=path)


def normalize_ids(doc: Any) -> Any:
    """Foundry's `_id` as our `id` (a document may carry either, not two different ones)."""
    if isinstance(doc, dict) and "_id" in doc:
        doc = dict(doc)
        alias = doc.pop("_id")
        if "id" in doc and doc["id"] != alias:
            raise ClientError(ErrorCode.INVALID,
                              f"$.id: document has both id {short_repr(doc['id'])} and _id "
                              f"{short_repr(alias)}", path="$.id")
        doc["id"] = alias
    return doc


def _normalized(doc: Any, path: str) -> Any:
    try:
        return normalize_ids(doc)
    except ClientError as exc:
        raise exc.under(path) from None


def _normalize_request(obj: dict[str, Any]) -> dict[str, Any]:
    scene = obj.get("scene")
    if isinstance(scene, dict):
        scene = _normalized(scene, "$.scene")
        for key in ("walls", "tokens", "regions"):
            if isinstance(scene.get(key), list):
                scene[key] = [_normalized(d, f"$.scene.{key}[{k}]")
                              for k, d in enumerate(scene[key])]
        obj = {**obj, "scene": scene}
    for key in ("walls", "tokens"):
        if isinstance(obj.get(key), list):
            obj = {**obj, key: [_normalized(d, f"$.{key}[{k}]")
                                for k, d in enumerate(obj[key])]}
    if isinstance(obj.get("template"), dict):
        obj = {**obj, "template": _normalized(obj["template"], "$.template")}
    return obj


#: Deepest nesting a message may have; the schema itself needs six levels.
MAX_DEPTH = 32


def _check_values(obj: Any) -> None:
    """Reject what the schema cannot bound by itself, anywhere in a message (ignored Foundry
    fields included, since some are kept and sent back), with the path to it: non-finite
    numbers (JSON's NaN and Infinity, msgpack floats), integers outside the signed 64-bit
    range (msgpack could not carry them back),
    strings or map keys holding a lone UTF-16 surrogate (JSON's "\\ud800" escape decodes to
    one; such text cannot be encoded as UTF-8, so it can be neither stored nor sent back),
    and nesting deeper than MAX_DEPTH."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(obj, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                where = _path(path)
                raise ClientError(ErrorCode.INVALID, f"{where}: text with a lone UTF-16 "
                                  f"surrogate {_surrogate(item)} (not Unicode text; a string "
                                  f"cut inside an emoji?), got {short_repr(item)}", path=where)
        elif isinstance(item, float):
            if not math.isfinite(item):
                where = _path(path)
                spelled = "NaN" if math.isnan(item) else ("-" if item < 0 else "") + "Infinity"
                raise ClientError(ErrorCode.INVALID, f"{where}: non-finite number {spelled}",
                                  path=where)
        elif isinstance(item, int):
            if not -MAX_INT - 1 <= item <= MAX_INT:
                where = _path(path)
                raise ClientError(ErrorCode.INVALID,
                                  f"{where}: integer {short_repr(item)} is outside the signed "
                                  "64-bit range (-2**63 to 2**63 - 1), which bounds every "
                                  "integer of a message", path=where)
        elif isinstance(item, dict | list):
            if len(path) >= MAX_DEPTH:
                where = _path(path)
                raise ClientError(ErrorCode.INVALID,
                                  f"{where}: nested deeper than {MAX_DEPTH} levels",
                                  path=where)
            if isinstance(item, dict):
                for key in item:
                    if isinstance(key, str) and not key.isascii() and _SURROGATE.search(key):
                        where = _path((*path, key))
                        raise ClientError(ErrorCode.INVALID,
                                          f"{where}: field name with a lone UTF-16 surrogate "
                                          f"{_surrogate(key)} (not Unicode text)", path=where)
                stack.extend((v, (*path, k)) for k, v in item.items())
            else:
                stack.extend((v, (*path, k)) for k, v in enumerate(item))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate(text: str) -> str:
    """The first lone surrogate of `text`, spelled as JSON escapes it (U+D800)."""
    found = _SURROGATE.search(text)
    return f"U+{ord(found.group()):04X}" if found else "?"


def _path(segments: tuple[str | int, ...]) -> str:
    return "$" + "".join(f"[{s}]" if isinstance(s, int) else field_segment(s)
                         for s in segments)


_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def field_segment(name: str) -> str:
    """One step of an error path: `.name`, or `["na.me"]` (JSON-quoted) when the name would
    not read back unambiguously."""
    return f".{name}" if _PLAIN_NAME.match(name) else f"[{json.dumps(name)}]"


def decode_frame(data: bytes | str) -> Any:
    """Frame bytes to plain objects: binary frames are msgpack, text frames JSON. Bounded:
    the frame size is capped by the transport (so are lengths: an element takes a byte at
    least), nesting by the decoders and, with paths, by parse_request."""
    try:
        if isinstance(data, str):
            return json.loads(data)
        return msgpack.unpackb(
            data, raw=False, strict_map_key=True, use_list=True,
            max_str_len=LIMITS.max_frame_bytes, max_bin_len=0, max_ext_len=0,
            max_array_len=LIMITS.max_frame_bytes, max_map_len=LIMITS.max_frame_bytes)
    except RecursionError:
        raise ClientError(ErrorCode.BAD_FRAME, "frame nested too deeply") from None
    except msgpack.StackError:
        raise ClientError(ErrorCode.BAD_FRAME, "frame nested too deeply") from None
    except msgpack.FormatError:
        raise ClientError(ErrorCode.BAD_FRAME,
                          "frame is not valid msgpack: a byte that starts no msgpack value "
                          f"(frame begins {short_repr(data[:16])})") from None
    except (ValueError, TypeError, msgpack.ExtraData, UnicodeDecodeError) as exc:
        kind = "JSON" if isinstance(data, str) else "msgpack"
        detail = str(exc) or type(exc).__name__
        raise ClientError(ErrorCode.BAD_FRAME,
                          f"frame is not valid {kind}: {short_repr(detail)}") from None


def parse_request(obj: Any) -> Request:
    """Plain objects to a validated request."""
    if not isinstance(obj, dict):
        raise ClientError(ErrorCode.INVALID,
                          f"a message must be a map with a 'type', got {short_repr(obj)}")
    _check_values(obj)
    kind = obj.get("type")
    if kind not in REQUEST_TYPES:
        raise ClientError(ErrorCode.INVALID,
                          f"$.type: unknown message type {short_repr(kind)}; valid types: "
                          f"{', '.join(REQUEST_TYPES)}", path="$.type")
    obj = _normalize_request(obj)
    try:
        request: Request = msgspec.convert(obj, Request)
        return request
    except msgspec.ValidationError as exc:
        raise schema_error(exc, obj) from None


def request_id(obj: Any) -> str | int | None:
    """The `id` of a request that failed validation, if it is usable for echoing."""
    if isinstance(obj, dict):
        rid = obj.get("id")
        if isinstance(rid, bool):
            return None
        if isinstance(rid, int) and 0 <= rid <= MAX_INT:
            return rid
        if (isinstance(rid, str) and len(rid) <= LIMITS.max_string
                and (rid.isascii() or not _SURROGATE.search(rid))):
            return rid
    return None


_MSGPACK = msgspec.msgpack.Encoder()
_JSON = msgspec.json.Encoder()


def encode(message: Response, binary: bool) -> bytes | str:
    if binary:
        return _MSGPACK.encode(message)
    return _JSON.encode(message).decode()


_IGNORED_FIELDS = {
    cls: tuple(f.name for f in msgspec.structs.fields(cls)
               if f.type is Any and f.default is None)
    for cls in (WallDoc, TokenDoc)
}

DocT = TypeVar("DocT", WallDoc, TokenDoc)


def strip(doc: DocT) -> DocT:
    """The document without the Foundry fields Covercast accepts but never reads: a scene
    holds only what it uses, however much a client forwards."""
    extra = {name: None for name in _IGNORED_FIELDS[type(doc)]
             if getattr(doc, name) is not None}
    return msgspec.structs.replace(doc, **extra) if extra else doc


def to_doc(doc: Struct) -> dict[str, Any]:
    """A document back to the plain map a client sent (defaults omitted)."""
    out: dict[str, Any] = msgspec.to_builtins(doc)
    return out
