"""Scene state: the documents a VTT streamed, and their geometric snapshot.

Rule of this module: a Scene is an immutable value. Every change (a whole load or a batch of
creates, updates or deletes) builds a new Scene or raises ClientError naming the item; the
caller swaps the new value in only on success, so a rejected batch leaves the scene exactly
as it was. Documents become geometry (`SceneGeom`) here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec
import shapely
import shapely.affinity

from geometry.caches import changed_positions
from geometry.model import (
    CreatureGeom,
    Direction,
    Grid,
    GridKind,
    RegionGeom,
    RegionKind,
    SceneGeom,
    Sense,
    Size,
    WallCover,
    WallGeom,
)
from rulesets import REGISTRY, Ruleset, UnknownRuleset
from server.errors import ClientError, ErrorCode
from server.messages import (
    LIMITS,
    RegionDoc,
    SceneDoc,
    ShapeDoc,
    TokenDoc,
    WallDoc,
    normalize_ids,
    schema_error,
    short_repr,
    strip,
    to_doc,
)

#: Every grid type some ruleset supports; each ruleset lists its own in `Ruleset.grids`.
SUPPORTED_GRIDS = frozenset({GridKind.SQUARE, GridKind.HEXODDR, GridKind.HEXEVENR,
                             GridKind.HEXODDQ, GridKind.HEXEVENQ})
_GRID_LABEL = {GridKind.GRIDLESS: "gridless", GridKind.SQUARE: "square",
               GridKind.HEXODDR: "hex rows, odd", GridKind.HEXEVENR: "hex rows, even",
               GridKind.HEXODDQ: "hex columns, odd", GridKind.HEXEVENQ: "hex columns, even"}


@dataclass(frozen=True, slots=True)
class Scene:
    """One scene as the server holds it: documents by id (in arrival order), the ruleset and
    its validated options, and a revision bumped by every accepted change."""

    id: str
    doc: SceneDoc
    walls: Mapping[str, WallDoc]
    tokens: Mapping[str, TokenDoc]
    regions: Mapping[str, RegionDoc]
    ruleset: Ruleset
    options: Any
    revision: int
    _geom: list[SceneGeom] = field(default_factory=list, compare=False, repr=False)
    #: An earlier revision of the same walls and regions: its geometry and the token
    #: documents it was built from, whose unchanged parts this one reuses.
    _before: list[tuple[SceneGeom, Mapping[str, TokenDoc]]] = field(
        default_factory=list, compare=False, repr=False)

    @property
    def geometry(self) -> SceneGeom:
        """The geometric snapshot, built once per revision."""
        if not self._geom:
            before = self._before[0] if self._before else None
            self._geom.append(to_geometry(self, before))
            self._before.clear()
        return self._geom[0]

    def snapshot(self) -> dict[str, Any]:
        """Everything the scene holds as plain data (tests compare these byte for byte)."""
        return {
            "id": self.id, "revision": self.revision, "ruleset": self.ruleset.name,
            "options": msgspec.to_builtins(self.options),
            "grid": to_doc(self.doc.grid),
            # The map's size, which clients check moves against (`covercast move`).
            "width": self.doc.width, "height": self.doc.height,
            **({"name": self.doc.name} if self.doc.name else {}),
            "walls": [to_doc(w) for w in self.walls.values()],
            "tokens": [to_doc(t) for t in self.tokens.values()],
            "regions": [to_doc(r) for r in self.regions.values()],
            **({"flags": to_doc(self.doc.flags)} if self.doc.flags is not None else {}),
        }


def _unique(docs: Sequence[Any], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, d in enumerate(docs):
        if d.id in out:
            raise ClientError(ErrorCode.DUPLICATE_ID, f"$.{what}[{k}].id: duplicate id "
                              f"{short_repr(d.id)}", path=f"$.{what}[{k}].id")
        out[d.id] = d
    return out


def grid_label(kind: GridKind) -> str:
    return f"{int(kind)} ({kind.name}, {_GRID_LABEL[kind]})"


def _check_grid(doc: SceneDoc, ruleset: Ruleset) -> None:
    """The scene's grid must be one the ruleset's procedure is defined on."""
    kind = GridKind(doc.grid.type)
    if kind in ruleset.grids:
        return
    supported = ", ".join(grid_label(g) for g in sorted(ruleset.grids))
    why = f" ({ruleset.grid_note})" if ruleset.grid_note else ""
    if kind not in SUPPORTED_GRIDS:
        what = f"grid type {grid_label(kind)} is not supported yet"
    else:
        what = f"ruleset {ruleset.name!r} refuses grid type {grid_label(kind)}{why}"
    raise ClientError(ErrorCode.UNSUPPORTED,
                      f"$.scene.grid.type: {what}; ruleset {ruleset.name!r} supports: "
                      f"{supported}", path="$.scene.grid.type")


def region_penalty(r: RegionDoc) -> int | None:
    """The GM's obscurement penalty on a region (attacks and Awareness through or into it),
    from `penalty` (Covercast's own form) or `flags.covercast.penalty` (a Foundry region)."""
    if r.penalty is not None:
        return r.penalty
    return r.flags.covercast.penalty if r.flags.covercast is not None else None


def region_polygons(r: RegionDoc, prefix: str) -> tuple[RegionKind, list[shapely.Polygon]] | None:
    """The polygons a region covers and what they are, or None for a Foundry region that
    is no Covercast feature (no `kind`, no `flags.covercast.kind`)."""
    if r.kind is not None or r.points is not None:
        if r.kind is None or r.points is None:
            missing = "points" if r.points is None else "kind"
            raise ClientError(ErrorCode.INVALID, f"{prefix}.{missing}: a Covercast region "
                              f"needs both kind and points", path=f"{prefix}.{missing}")
        _check_surface(r.kind, r.surface, f"{prefix}.surface")
        return RegionKind(r.kind), [_polygon(r.points, f"{prefix}.points")]
    if r.flags.covercast is None:
        if r.surface is not None:
            raise ClientError(ErrorCode.INVALID, f"{prefix}.surface: only a Covercast "
                              "water region has a surface", path=f"{prefix}.surface")
        return None
    if r.surface is not None:
        raise ClientError(ErrorCode.INVALID, f"{prefix}.surface: a Foundry region gives "
                          "its surface in flags.covercast.surface", path=f"{prefix}.surface")
    _check_surface(r.flags.covercast.kind, r.flags.covercast.surface,
                   f"{prefix}.flags.covercast.surface")
    polygons = []
    for k, raw in enumerate(r.shapes):
        path = f"{prefix}.shapes[{k}]"
        try:
            shape = msgspec.convert(raw, ShapeDoc)
        except msgspec.ValidationError as exc:
            raise schema_error(exc, raw, prefix=path) from None
        if shape.hole:
            raise ClientError(ErrorCode.UNSUPPORTED, f"{path}.hole: holes in Covercast "
                              "regions are not supported; draw the region without them",
                              path=f"{path}.hole")
        polygons.append(_shape_polygon(shape, path))
    if not polygons:
        raise ClientError(ErrorCode.INVALID, f"{prefix}.shapes: a region marked "
                          "flags.covercast.kind needs at least one shape",
                          path=f"{prefix}.shapes")
    return RegionKind(r.flags.covercast.kind), polygons


def region_surface(r: RegionDoc) -> float | None:
    """A water region's surface elevation in scene units (None for other regions)."""
    return r.surface if r.surface is not None else (
        r.flags.covercast.surface if r.flags.covercast is not None else None)


def _check_surface(kind: str, surface: float | None, path: str) -> None:
    """Water needs a surface elevation; no other kind has one."""
    if kind == RegionKind.WATER.value and surface is None:
        raise ClientError(ErrorCode.INVALID, f"{path}: a water region needs the elevation "
                          "of its surface (scene units)", path=path)
    if kind != RegionKind.WATER.value and surface is not None:
        raise ClientError(ErrorCode.INVALID, f"{path}: only water has a surface, this "
                          f"region is {kind!r} (surface {surface!r})", path=path)


def _polygon(points: Sequence[float], path: str) -> shapely.Polygon:
    if len(points) % 2:
        raise ClientError(ErrorCode.INVALID,
                          f"{path}: needs x, y pairs, got {len(points)} numbers", path=path)
    poly = shapely.Polygon(list(zip(points[0::2], points[1::2], strict=True)))
    if poly.area <= 0:
        raise ClientError(ErrorCode.INVALID, f"{path}: the polygon has no area", path=path)
    if not poly.is_valid:
        # A polygon whose edges cross (a bowtie) has no inside GEOS can compute with: taken
        # in, every later line test through it would fail, for every client of the scene.
        raise ClientError(ErrorCode.INVALID,
                          f"{path}: the polygon is not simple ({shapely.is_valid_reason(poly)}); "
                          "its edges must not cross or touch each other", path=path)
    return poly


def _shape_polygon(s: ShapeDoc, path: str) -> shapely.Polygon:
    """Foundry's region shapes (x, y top-left for rectangles, centre for the round ones;
    rotation in degrees about the shape's centre) as polygons."""
    if s.type == "polygon":
        if s.points is None:
            raise ClientError(ErrorCode.INVALID, f"{path}.points: a polygon shape needs "
                              "points", path=f"{path}.points")
        return _polygon(s.points, f"{path}.points")
    if s.type == "rectangle":
        poly = shapely.box(s.x, s.y, s.x + s.width, s.y + s.height)
    else:
        rx, ry = (s.radius, s.radius) if s.type == "circle" else (s.radiusX, s.radiusY)
        poly = shapely.affinity.scale(shapely.Point(s.x, s.y).buffer(1.0, quad_segs=16),
                                      rx, ry)
    if s.rotation:
        poly = shapely.affinity.rotate(poly, s.rotation, origin="centroid")
    if poly.area <= 0:
        raise ClientError(ErrorCode.INVALID, f"{path}: the shape has no area", path=path)
    return poly


def _check_wall(w: WallDoc, prefix: str) -> None:
    if w.c[0] == w.c[2] and w.c[1] == w.c[3]:
        raise ClientError(ErrorCode.INVALID,
                          f"{prefix}.c: a wall needs two distinct ends, got {w.c}",
                          path=f"{prefix}.c")


def resolve_options(ruleset_name: str, options: Mapping[str, Any]) -> tuple[Ruleset, Any]:
    try:
        ruleset = REGISTRY.get(ruleset_name)
    except UnknownRuleset as exc:
        raise ClientError(ErrorCode.UNKNOWN_RULESET, f"$.ruleset: {exc}",
                          path="$.ruleset") from None
    try:
        return ruleset, msgspec.convert(options, ruleset.Options)
    except msgspec.ValidationError as exc:
        raise schema_error(exc, options, prefix="$.options") from None


def load(doc: SceneDoc, ruleset_name: str, options: Mapping[str, Any],
         previous: Scene | None, revision: int | None = None) -> Scene:
    """A whole scene from a `scene.load`; reloading keeps counting revisions (`revision`:
    the one a scene read back from the state store was at)."""
    ruleset, opts = resolve_options(ruleset_name, options)
    _check_grid(doc, ruleset)
    walls = _unique(doc.walls, "scene.walls")
    tokens = _unique(doc.tokens, "scene.tokens")
    regions = _unique(doc.regions, "scene.regions")
    for k, w in enumerate(walls.values()):
        _check_wall(w, f"$.scene.walls[{k}]")
    for k, t in enumerate(tokens.values()):
        _check_floor(t, ruleset, f"$.scene.tokens[{k}]")
    for k, r in enumerate(regions.values()):
        region_polygons(r, f"$.scene.regions[{k}]")
    order = {tid: k for k, tid in enumerate(tokens)}
    _check_mounts(tokens, lambda rider, _: f"$.scene.tokens[{order[rider]}]"
                  ".flags.covercast.mount")
    bare = msgspec.structs.replace(doc, walls=[], tokens=[], regions=[], padding=None)
    walls = {k: strip(w) for k, w in walls.items()}
    tokens = {k: strip(t) for k, t in tokens.items()}
    if revision is None:
        revision = previous.revision + 1 if previous else 1
    return Scene(doc.id, bare, walls, tokens, regions, ruleset, opts, revision)


def create(scene: Scene, kind: str, docs: Sequence[Any]) -> Scene:
    """Add new walls or tokens; an id already in the scene rejects the batch."""
    current = _current(scene, kind)
    new = dict(current)
    for k, d in enumerate(docs):
        if kind == "walls":
            _check_wall(d, f"$.walls[{k}]")
        else:
            _check_floor(d, scene.ruleset, f"$.tokens[{k}]")
        if d.id in new:
            raise ClientError(ErrorCode.DUPLICATE_ID,
                              f"$.{kind}[{k}].id: {kind[:-1]} {short_repr(d.id)} already "
                              "exists", path=f"$.{kind}[{k}].id")
        new[d.id] = strip(d)
    _check_size(kind, len(new))
    if kind == "tokens":
        _check_mounts(new, _batch_where([d.id for d in docs]))
    return _with(scene, kind, new)


def update(scene: Scene, kind: str, patches: Sequence[Mapping[str, Any]]) -> Scene:
    """Apply Foundry-style partial diffs (`changed`): nested maps merge, values replace."""
    current = _current(scene, kind)
    new = dict(current)
    schema: type[Any] = WallDoc if kind == "walls" else TokenDoc
    for k, patch in enumerate(patches):
        prefix = f"$.{kind}[{k}]"
        try:
            patch = normalize_ids(patch)
        except ClientError as exc:
            raise exc.under(prefix) from None
        doc_id = patch.get("id")
        if not isinstance(doc_id, str):
            raise ClientError(ErrorCode.INVALID,
                              f"{prefix}.id: an update names its document by a string id, "
                              f"got {short_repr(doc_id)}", path=f"{prefix}.id")
        if doc_id not in new:
            code = ErrorCode.UNKNOWN_WALL if kind == "walls" else ErrorCode.UNKNOWN_TOKEN
            raise ClientError(code, f"{prefix}.id: no {kind[:-1]} with id "
                              f"{short_repr(doc_id)} in scene {scene.id!r}",
                              path=f"{prefix}.id")
        merged = _merge(to_doc(new[doc_id]), patch)
        try:
            new[doc_id] = strip(msgspec.convert(merged, schema))
        except msgspec.ValidationError as exc:
            raise schema_error(exc, merged, prefix=prefix) from None
        if kind == "walls":
            _check_wall(new[doc_id], prefix)
        else:
            _check_floor(new[doc_id], scene.ruleset, prefix)
    if kind == "tokens":
        _check_mounts(new, _batch_where([str(normalize_ids(p).get("id")) for p in patches]))
    return _with(scene, kind, new)


def delete(scene: Scene, kind: str, ids: Sequence[str]) -> Scene:
    current = _current(scene, kind)
    new = dict(current)
    for k, doc_id in enumerate(ids):
        if doc_id not in new:
            code = ErrorCode.UNKNOWN_WALL if kind == "walls" else ErrorCode.UNKNOWN_TOKEN
            raise ClientError(code, f"$.ids[{k}]: no {kind[:-1]} with id "
                              f"{short_repr(doc_id)} in scene {scene.id!r}",
                              path=f"$.ids[{k}]")
        del new[doc_id]
    if kind == "tokens":
        for k, doc_id in enumerate(ids):
            riders = [t.id for t in new.values()
                      if t.flags.covercast is not None and t.flags.covercast.mount == doc_id]
            if riders:
                raise ClientError(ErrorCode.INVALID, f"$.ids[{k}]: token {short_repr(doc_id)} "
                                  f"is ridden by {', '.join(map(short_repr, riders))}; clear "
                                  "the rider's flags.covercast.mount first", path=f"$.ids[{k}]")
    return _with(scene, kind, new)


def find_token(scene: Scene, tid: str, viewer: bool = False, path: str = "$.token") -> TokenDoc:
    """The token `tid` (named at `path` in the request); for a viewer a hidden token does
    not exist: the same error as an unknown id, so an error never tells it is there."""
    doc = scene.tokens.get(tid)
    if doc is None or (viewer and doc.hidden):
        raise ClientError(ErrorCode.UNKNOWN_TOKEN, f"{path}: no token {tid!r} in scene "
                          f"{scene.id!r}", path=path)
    return doc


def _current(scene: Scene, kind: str) -> Mapping[str, Any]:
    return scene.walls if kind == "walls" else scene.tokens


def _check_size(kind: str, n: int) -> None:
    cap = LIMITS.max_walls if kind == "walls" else LIMITS.max_tokens
    if n > cap:
        raise ClientError(ErrorCode.TOO_LARGE,
                          f"$.{kind}: scene would hold {n} {kind}, the limit is {cap}",
                          path=f"$.{kind}")


def _check_floor(t: TokenDoc, ruleset: Ruleset, path: str) -> None:
    """A GM override must name a degree of the scene's ruleset."""
    valid = [d.value for d in ruleset.ladder[1:]]
    floor = t.flags.covercast.cover if t.flags.covercast else None
    if floor is not None and floor not in valid:
        where = f"{path}.flags.covercast.cover"
        raise ClientError(ErrorCode.INVALID,
                          f"{where}: {floor!r} is not a cover degree of ruleset "
                          f"{ruleset.name!r}; valid: {', '.join(valid)} (null clears it)",
                          path=where)


def _with(scene: Scene, kind: str, docs: dict[str, Any]) -> Scene:
    if kind == "walls":
        return Scene(scene.id, scene.doc, docs, scene.tokens, scene.regions, scene.ruleset,
                     scene.options, scene.revision + 1)
    # Only tokens changed: the next geometry can keep this one's walls and regions.
    before = [(scene._geom[0], scene.tokens)] if scene._geom else scene._before[:1]
    return Scene(scene.id, scene.doc, scene.walls, docs, scene.regions, scene.ruleset,
                 scene.options, scene.revision + 1, _before=list(before))


def _merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Foundry's mergeObject for a `changed` diff: nested maps merge, other values replace,
    and a key written `-=name` deletes `name` (how Foundry's unsetFlag travels)."""
    out = dict(base)
    for key, value in patch.items():
        if key.startswith("-="):
            out.pop(key[2:], None)
            continue
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


# -- documents to geometry -------------------------------------------------------------------

def to_geometry(scene: Scene,
                before: tuple[SceneGeom, Mapping[str, TokenDoc]] | None = None) -> SceneGeom:
    """The scene's geometry; `before` (a geometry of the same grid, walls and regions, and
    the token documents it was built from) lends its wall and region tuples, so wall arrays
    computed for it are found again by identity, and the creature of every token whose
    document is the same object (a token move rebuilds one creature, not all of them)."""
    g = scene.doc.grid
    grid = Grid(GridKind(g.type), g.size, g.distance, g.units)
    flags = scene.doc.flags.covercast if scene.doc.flags is not None else None
    if before is not None:
        geom, docs = before
        tokens = list(scene.tokens.values())
        if len(tokens) == len(docs) == len(geom.creatures) and list(scene.tokens) == list(docs):
            # The same tokens in the same order (a move, a token's flags): creature k is
            # token k's, kept unless its document changed. Found with the loops in C: at
            # 1,000 tokens a Python loop over them was a tenth of a walking step's work.
            creatures = list(geom.creatures)
            for k in changed_positions(tokens, list(docs.values())):
                creatures[k] = _creature(tokens[k], grid)
            return replace(geom, creatures=tuple(creatures))
        kept = {c.id: c for c in geom.creatures}
        return replace(geom, creatures=tuple(
            kept[t.id] if docs.get(t.id) is t else _creature(t, grid)
            for t in scene.tokens.values()))
    regions = _regions(scene.regions, grid)
    return SceneGeom(
        grid=grid,
        walls=tuple(_wall(w, grid) for w in scene.walls.values()),
        creatures=tuple(_creature(t, grid) for t in scene.tokens.values()),
        # Water is no obstacle: it travels apart, so tracers never meet it.
        regions=tuple(r for r in regions if r.kind is not RegionKind.WATER),
        water=tuple(r for r in regions if r.kind is RegionKind.WATER),
        underwater=flags is not None and flags.underwater,
    )


def _regions(regions: Mapping[str, RegionDoc], grid: Grid) -> list[RegionGeom]:
    out = []
    for k, r in enumerate(regions.values()):
        found = region_polygons(r, f"$.scene.regions[{k}]")
        if found is None:
            continue
        kind, polygons = found
        surface = region_surface(r)
        feet = None if surface is None else grid.units_to_feet(surface)
        for poly in polygons:
            ring = tuple((float(x), float(y)) for x, y in poly.exterior.coords[:-1])
            out.append(RegionGeom(r.id, kind, ring, surface=feet, penalty=region_penalty(r)))
    return out


def _wall(w: WallDoc, grid: Grid) -> WallGeom:
    is_open_door = w.door != 0 and w.ds == 1
    heights = w.flags.wall_height
    cover = WallCover(w.flags.covercast.cover) if w.flags.covercast else WallCover.SOLID
    bottom = top = None
    if heights is not None:
        bottom = None if heights.bottom is None else grid.units_to_feet(heights.bottom)
        top = None if heights.top is None else grid.units_to_feet(heights.top)
    return WallGeom(
        id=w.id, x0=w.c[0], y0=w.c[1], x1=w.c[2], y1=w.c[3],
        active=Sense(w.sight) is not Sense.NONE and not is_open_door,
        limited=Sense(w.sight) is Sense.LIMITED,
        direction=Direction(w.dir), cover=cover, bottom=bottom, top=top)


def _size(t: TokenDoc) -> Size:
    return Size.from_label(t.size) if t.size else Size.from_squares(t.width)


def _check_mounts(tokens: Mapping[str, TokenDoc], where: Callable[[str, str], str]) -> None:
    """Every rider's flags.covercast.mount names another token of the scene, at least one
    size larger, that rides nothing itself (so no chains and no cycles). `where(rider,
    mount)` is the path the error names: the rider's field, or the batch item that broke
    it (a mount made smaller)."""
    for t in tokens.values():
        mount = t.flags.covercast.mount if t.flags.covercast else None
        if mount is None:
            continue
        path = where(t.id, mount)
        if mount == t.id:
            raise ClientError(ErrorCode.INVALID, f"{path}: token {short_repr(t.id)} cannot "
                              "ride itself", path=path)
        steed = tokens.get(mount)
        if steed is None:
            raise ClientError(ErrorCode.UNKNOWN_TOKEN, f"{path}: no token "
                              f"{short_repr(mount)} in the scene to ride", path=path)
        if steed.flags.covercast is not None and steed.flags.covercast.mount is not None:
            raise ClientError(ErrorCode.INVALID, f"{path}: mount {short_repr(mount)} itself "
                              f"rides {short_repr(steed.flags.covercast.mount)}; a mount "
                              "cannot be ridden while it rides", path=path)
        if _size(steed).rank <= _size(t).rank:
            raise ClientError(ErrorCode.INVALID, f"{path}: mount {short_repr(mount)} is "
                              f"{_size(steed).label}, not at least one size larger than its "
                              f"{_size(t).label} rider {short_repr(t.id)}", path=path)


def _batch_where(batch: Sequence[str]) -> Callable[[str, str], str]:
    """Error paths for _check_mounts after a batch: the rider's field when the batch holds
    the rider, else the batch item holding its mount."""
    pos = {tid: k for k, tid in enumerate(batch)}

    def where(rider: str, mount: str) -> str:
        if rider in pos:
            return f"$.tokens[{pos[rider]}].flags.covercast.mount"
        return f"$.tokens[{pos.get(mount, 0)}]"

    return where


def _creature(t: TokenDoc, grid: Grid) -> CreatureGeom:
    size = _size(t)
    tall = size.height
    flags = t.flags.wall_height
    if flags is not None and flags.tokenHeight is not None and flags.tokenHeight > 0:
        tall = grid.units_to_feet(flags.tokenHeight)
    return CreatureGeom(
        id=t.id, x=t.x, y=t.y, width=t.width, height=t.height, size=size,
        reach=size.reach if t.reach is None else t.reach, tall=tall,
        elevation=grid.units_to_feet(t.elevation), disposition=t.disposition,
        hidden=t.hidden, cover_floor=t.flags.covercast.cover if t.flags.covercast else None,
        swim=t.flags.covercast.swim if t.flags.covercast else False,
        mount=t.flags.covercast.mount if t.flags.covercast else None,
        take_cover=bool(t.flags.covercast and t.flags.covercast.takeCover),
        shape=_token_shape(t))


def _token_shape(t: TokenDoc) -> int:
    """Foundry's token shape (v13 `shape`, v12 `hexagonalShape`; RECTANGLE_1 by default)."""
    for value in (t.shape, t.hexagonalShape):
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 5:
            return value
    return 4
