"""The session core, sans I/O: frames in, frames out.

Rule of this module: `Core.receive(conn, frame)` takes one frame from one connection and
returns what to send: replies, closes, and a `Notify` for every subscriber of a scene it
changed, whose delta `Core.delta(conn, scene)` builds when that connection is ready for
it (so bursts coalesce, latest state wins); it never awaits, sleeps or touches a socket.
State flows one way: validated request -> new Scene value -> ruleset annotations (only the
pairs a change can touch are recomputed) -> delta against what each subscriber was last
sent.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from geometry.incremental import affected as affected_by
from geometry.model import SceneGeom, point_creature
from geometry.templates import Template, TemplateKind
from rulesets import REGISTRY
from rulesets.base import Annotation, AttackMode, Degree, Flag, Modifier
from server import scene as scenes
from server.errors import ClientError, ErrorCode
from server.messages import (
    LIMITS,
    PROTOCOL_VERSION,
    Ack,
    AnnotationOut,
    Annotations,
    AreaHitOut,
    AreaQuery,
    AreaResult,
    CoverQuery,
    CoverResult,
    Error,
    Hello,
    LineOut,
    ModifierOut,
    Response,
    SceneGet,
    SceneLoad,
    SceneState,
    SceneUnload,
    Subscribe,
    TokenCreate,
    TokenDelete,
    TokenUpdate,
    Unsubscribe,
    WallCreate,
    WallDelete,
    WallUpdate,
    Welcome,
    decode_frame,
    encode,
    parse_request,
    request_id,
)

log = logging.getLogger("covercast.session")

SERVER_NAME = "covercast"
SERVER_VERSION = "0.1.0"
POLICY_VIOLATION = 1008
#: Cached revisions whose changed keys are remembered for cheap deltas.
CHANGE_LOG = 32
#: Delta frames kept per scene for subscribers catching up to its current state.
_FRAME_CACHE = 64

Key = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Send:
    conn: int
    frame: bytes | str


@dataclass(frozen=True, slots=True)
class Close:
    conn: int
    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class Notify:
    """A subscriber has news about a scene: send it `Core.delta(conn, scene)` when ready."""

    conn: int
    scene: str


Output = Send | Close | Notify


@dataclass(frozen=True, slots=True)
class _Cached:
    revision: int
    geom: SceneGeom
    ruleset: Any
    options: Any
    table: dict[Key, AnnotationOut]
    #: Per cached revision, the keys that may have changed since the previous cached one
    #: (None: all of them), for subscribers a few revisions behind.
    log: dict[int, frozenset[Key] | None]


@dataclass(slots=True)
class Subscription:
    scene: str
    lines: bool
    modes: tuple[AttackMode, ...]
    binary: bool
    sent: dict[Key, AnnotationOut] = field(default_factory=dict)
    revision: int = 0


@dataclass(slots=True)
class Connection:
    id: int
    greeted: bool = False
    subscriptions: dict[str, Subscription] = field(default_factory=dict)


#: Batch requests: the scene operation, the documents it changes, the field holding them.
_BATCHES: dict[type, tuple[Any, str, str]] = {
    TokenCreate: (scenes.create, "tokens", "tokens"),
    TokenUpdate: (scenes.update, "tokens", "tokens"),
    TokenDelete: (scenes.delete, "tokens", "ids"),
    WallCreate: (scenes.create, "walls", "walls"),
    WallUpdate: (scenes.update, "walls", "walls"),
    WallDelete: (scenes.delete, "walls", "ids"),
}


def _flag_map(flags: frozenset[Flag]) -> dict[str, bool]:
    """Every flag by name, true for those set (the wire shows them all)."""
    out = dict(_ALL_FALSE)
    for f in flags:
        out[f.value] = True
    return out


def _reason(text: str) -> str:
    """A close reason: WebSocket allows 123 bytes of UTF-8."""
    data = text.encode()
    return text if len(data) <= 123 else data[:120].decode(errors="ignore") + "..."


def annotation_out(a: Annotation) -> AnnotationOut:
    """A ruleset result as it travels on the wire."""
    # Thousands of annotations share a handful of modifier lists and flag sets: each is
    # converted once (the wire values are never modified after they are built).
    mods = _MODS_OUT.get(a.modifiers)
    if mods is None:
        if len(_MODS_OUT) >= _OUT_CACHE:
            _MODS_OUT.clear()
        mods = _MODS_OUT[a.modifiers] = [
            ModifierOut(m.stat.value, m.value, m.kind.value, m.reason) for m in a.modifiers]
    flags = _FLAGS_OUT.get(a.flags)
    if flags is None:
        flags = _FLAGS_OUT[a.flags] = _flag_map(a.flags)
    # _value_ (the documented member attribute) rather than the slower .value property:
    # this runs once per pair and mode.
    return AnnotationOut(
        attacker=a.attacker, target=a.target, mode=a.mode._value_, loe=a.loe,
        cover=a.cover._value_,
        modifiers=mods,
        flags=flags,
        flankers=list(a.flankers) if a.flankers else _NO_FLANKERS,
        lines=None if a.lines is None else [
            LineOut(ln.start, ln.end, ln.blocked, list(ln.walls), list(ln.tokens),
                    list(ln.regions)) for ln in a.lines],
        visible=a.visible,
    )


_FLAGS = tuple(sorted(Flag, key=lambda f: f.value))
_ALL_FALSE = {f.value: False for f in _FLAGS}
_MODE_VALUES = tuple(m.value for m in AttackMode)
#: Wire forms of modifier tuples and flag sets already converted (flag sets are few;
#: modifier tuples name flankers, so that cache is bounded).
_OUT_CACHE = 4096
_MODS_OUT: dict[tuple[Modifier, ...], list[ModifierOut]] = {}
_FLAGS_OUT: dict[frozenset[Flag], dict[str, bool]] = {}
_NO_FLANKERS: list[str] = []
#: The flags that mean something for a creature caught in an area effect.
_AREA_FLAGS = (Flag.IMPROVED_EVASION, Flag.REFLEX_DEGREE_BETTER)


class Core:
    """All connections and scenes of one server process."""

    def __init__(self, access_token: str | None = None) -> None:
        self.access_token = access_token
        self.connections: dict[int, Connection] = {}
        self.scenes: dict[str, scenes.Scene] = {}
        self._next = 1
        # Per scene and lines flag: annotations at the scene's current revision.
        self._cache: dict[tuple[str, bool], _Cached] = {}
        # Per scene, delta frames to its current state (the scene value they lead to) by
        # (lines, modes, binary, from revision): the table they leave the subscriber with,
        # and the frame.
        self._frames: dict[str, tuple[scenes.Scene, dict[
            tuple[bool, tuple[AttackMode, ...], bool, int],
            tuple[dict[Key, AnnotationOut], bytes | str | None]]]] = {}

    # -- connection lifecycle ----------------------------------------------------------

    def connect(self) -> int:
        conn = self._next
        self._next += 1
        self.connections[conn] = Connection(conn)
        return conn

    def disconnect(self, conn: int) -> None:
        self.connections.pop(conn, None)

    def preload(self, request: SceneLoad) -> None:
        """Install a scene without a client (the demo scene at start-up)."""
        self._load(request)

    # -- frames --------------------------------------------------------------------------

    def receive(self, conn: int, frame: bytes | str) -> list[Output]:
        """Handle one frame from `conn`; return everything to send as a result."""
        state = self.connections[conn]
        binary = isinstance(frame, bytes)
        raw: Any = None
        try:
            raw = decode_frame(frame)
            request = parse_request(raw)
        except ClientError as exc:
            if not state.greeted:
                reason = _reason(f"expected hello; {exc.message}")
                return [Close(conn, POLICY_VIOLATION, reason)]
            return [Send(conn, encode(self._error(exc, request_id(raw)), binary))]
        if not state.greeted:
            return self._hello(state, request, binary)
        try:
            return self._dispatch(state, request, binary)
        except ClientError as exc:
            return [Send(conn, encode(self._error(exc, request.id), binary))]
        except Exception:
            log.exception("bug while handling %s from connection %d",
                          type(request).__name__, conn)
            err = Error(ErrorCode.INTERNAL.value,
                        "internal error; the request was not applied", None, request.id)
            return [Send(conn, encode(err, binary))]

    def _error(self, exc: ClientError, rid: Any) -> Error:
        return Error(exc.code.value, exc.message, exc.path, rid)

    def _hello(self, state: Connection, request: Any, binary: bool) -> list[Output]:
        if not isinstance(request, Hello):
            return [Close(state.id, POLICY_VIOLATION, "expected hello")]
        if self.access_token is not None and not (
                request.token is not None
                and hmac.compare_digest(request.token.encode(), self.access_token.encode())):
            return [Close(state.id, POLICY_VIOLATION, "access denied")]
        if request.protocol != PROTOCOL_VERSION:
            return [Close(state.id, POLICY_VIOLATION,
                          f"unsupported protocol {request.protocol}; this server speaks "
                          f"{PROTOCOL_VERSION}")]
        state.greeted = True
        welcome = Welcome(PROTOCOL_VERSION, SERVER_NAME, SERVER_VERSION,
                          [r.describe() for r in REGISTRY.all()], LIMITS, request.id)
        return [Send(state.id, encode(welcome, binary))]

    def _dispatch(self, state: Connection, request: Any, binary: bool) -> list[Output]:
        match request:
            case Hello():
                raise ClientError(ErrorCode.PROTOCOL, "already greeted: hello comes once")
            case SceneLoad():
                changed = self._load(request)
                return self._after_change(state, changed, request.id, binary)
            case (TokenCreate() | TokenUpdate() | TokenDelete() | WallCreate() | WallUpdate()
                  | WallDelete()):
                build, kind, field_name = _BATCHES[type(request)]
                items = getattr(request, field_name)
                return self._change(state, request.scene, lambda s: build(s, kind, items),
                                    request.id, binary)
            case CoverQuery():
                return [Send(state.id, encode(self._query(request), binary))]
            case AreaQuery():
                return [Send(state.id, encode(self._area(request), binary))]
            case SceneUnload(scene=sid):
                return self._unload(state, sid, request.id, binary)
            case SceneGet(scene=sid):
                scene = self._scene(sid)
                reply = SceneState(scene.snapshot(), scene.revision, request.id)
                return [Send(state.id, encode(reply, binary))]
            case Subscribe():
                return self._subscribe(state, request, binary)
            case Unsubscribe(scene=sid):
                if state.subscriptions.pop(sid, None) is None:
                    raise ClientError(ErrorCode.UNKNOWN_SCENE,
                                      f"$.scene: not subscribed to scene {sid!r}",
                                      path="$.scene")
                return [Send(state.id, encode(Ack(sid, self._scene(sid).revision,
                                                  request.id), binary))]
        raise AssertionError(f"unhandled request {request!r}")

    # -- scene changes ---------------------------------------------------------------------

    def _scene(self, sid: str) -> scenes.Scene:
        try:
            return self.scenes[sid]
        except KeyError:
            known = ", ".join(sorted(self.scenes)) or "none"
            raise ClientError(ErrorCode.UNKNOWN_SCENE,
                              f"$.scene: no scene {sid!r} is loaded (loaded: {known})",
                              path="$.scene") from None

    def _load(self, request: SceneLoad) -> str:
        sid = request.scene.id
        previous = self.scenes.get(sid)
        if previous is None and len(self.scenes) >= LIMITS.max_scenes:
            raise ClientError(ErrorCode.TOO_LARGE,
                              f"$.scene.id: the server holds {len(self.scenes)} scenes, the "
                              f"limit is {LIMITS.max_scenes}", path="$.scene.id")
        self.scenes[sid] = scenes.load(request.scene, request.ruleset, request.options,
                                       previous)
        return sid

    def _unload(self, state: Connection, sid: str, rid: Any, binary: bool) -> list[Output]:
        """Forget a scene; its subscribers get a last, empty full set and are unsubscribed."""
        scene = self._scene(sid)
        del self.scenes[sid]
        for lines in (False, True):
            self._cache.pop((sid, lines), None)
        self._frames.pop(sid, None)
        out: list[Output] = [Send(state.id, encode(Ack(sid, scene.revision, rid), binary))]
        for conn in self.connections.values():
            sub = conn.subscriptions.pop(sid, None)
            if sub is not None:
                last = Annotations(sid, scene.revision + 1, True, [], [])
                out.append(Send(conn.id, encode(last, sub.binary)))
        return out

    def _change(self, state: Connection, sid: str, build: Any, rid: Any,
                binary: bool) -> list[Output]:
        current = self._scene(sid)
        self.scenes[sid] = build(current)  # raises before the swap: the scene stays as it was
        return self._after_change(state, sid, rid, binary)

    def _after_change(self, state: Connection, sid: str, rid: Any,
                      binary: bool) -> list[Output]:
        scene = self.scenes[sid]
        out: list[Output] = [Send(state.id, encode(Ack(sid, scene.revision, rid), binary))]
        # Subscribers are only told there is news; each one's delta is computed when its
        # connection is ready for it (`delta`), so bursts coalesce and slow readers cost
        # no memory.
        out.extend(Notify(conn, sid) for conn in self.subscribers(sid))
        return out

    # -- annotations -----------------------------------------------------------------------

    def delta(self, conn: int, sid: str) -> bytes | str | None:
        """The `annotations` frame bringing this subscriber from what it was last sent to
        the scene's current state (None: nothing changed, or no longer subscribed). A bug
        while computing it is logged and reported to the subscriber as an `internal` error;
        the connection, and what it was last sent, stay as they were."""
        try:
            return self._delta(conn, sid)
        except Exception:
            log.exception("bug while computing annotations of scene %r for connection %d",
                          sid, conn)
            state = self.connections.get(conn)
            sub = state.subscriptions.get(sid) if state is not None else None
            err = Error(ErrorCode.INTERNAL.value,
                        f"internal error computing annotations of scene {sid!r}; they may "
                        "be stale until the next change", None, None)
            return encode(err, sub.binary if sub is not None else True)

    def _delta(self, conn: int, sid: str) -> bytes | str | None:
        state = self.connections.get(conn)
        sub = state.subscriptions.get(sid) if state is not None else None
        if sub is None or sid not in self.scenes:
            return None
        scene = self.scenes[sid]
        # Subscribers at the same revision with the same view get the same frame: build it
        # once per revision (50 subscribers of a scene cost one diff and one encoding).
        # Only frames leading to the scene's current state are kept: older ones (and the
        # tables they hold) go as soon as the scene changes.
        held = self._frames.get(sid)
        if held is None or held[0] is not scene:
            held = self._frames[sid] = (scene, {})
        frames = held[1]
        fkey = (sub.lines, sub.modes, sub.binary, sub.revision)
        cached_frame = frames.get(fkey)
        if cached_frame is not None:
            table, frame = cached_frame
            sub.sent = table
            sub.revision = scene.revision
            return frame
        frame = self._diff(sid, sub)
        if len(frames) < _FRAME_CACHE:
            frames[fkey] = (sub.sent, frame)
        return frame

    def _diff(self, sid: str, sub: Subscription) -> bytes | str | None:
        """The delta frame from the subscriber's table to the current one, which becomes
        its table."""
        table = self._filtered(sid, sub)
        keys = self._touched_since(sid, sub)
        if keys is None:
            changed = [v for k, v in table.items() if sub.sent.get(k) is not v]
            removed = [k for k in sub.sent if k not in table]
        else:
            changed = [table[k] for k in keys if k in table and sub.sent.get(k) is not table[k]]
            removed = [k for k in keys if k not in table and k in sub.sent]
        revision = self.scenes[sid].revision
        if not changed and not removed and sub.revision == revision:
            sub.sent = table
            return None
        sub.sent = table
        sub.revision = revision
        msg = Annotations(sid, revision, False, changed, removed)
        return encode(msg, sub.binary)

    def _touched_since(self, sid: str, sub: Subscription) -> list[Key] | None:
        """Keys that may differ between the table this subscriber holds and the current
        one, from the cache's change log; None when the log does not reach back."""
        cached = self._cache.get((sid, sub.lines))
        if cached is None or sub.revision not in cached.log:
            return None
        keys: set[Key] = set()
        for revision, touched in cached.log.items():
            if revision <= sub.revision:
                continue
            if touched is None:
                return None
            keys |= touched
        modes = {m.value for m in sub.modes}
        return [k for k in keys if k[2] in modes]

    def drain(self, outputs: list[Output]) -> list[Send | Close]:
        """Outputs with every Notify resolved into its delta now (for callers without
        per-connection writers: tests, tools)."""
        out: list[Send | Close] = []
        for o in outputs:
            if isinstance(o, Notify):
                frame = self.delta(o.conn, o.scene)
                if frame is not None:
                    out.append(Send(o.conn, frame))
            else:
                out.append(o)
        return out

    def _current(self, sid: str, lines: bool) -> dict[Key, AnnotationOut]:
        """Annotations of the scene's current revision, recomputing only the pairs the
        changes since the cached revision can have touched. Tables are never changed once
        built: a new revision copies the last one and replaces what it recomputes, so
        unchanged entries stay the same objects."""
        scene = self.scenes[sid]
        cached = self._cache.get((sid, lines))
        if cached is not None and cached.revision == scene.revision:
            return cached.table
        geom = scene.geometry
        affected = None
        if (cached is not None and cached.ruleset is scene.ruleset
                and cached.options == scene.options):
            affected = affected_by(cached.geom, geom, scene.ruleset.sight_points())
        touched: frozenset[Key] | None
        if affected is None:
            results = scene.ruleset.evaluate(geom, scene.options, lines=lines)
            table = {a.key(): annotation_out(a) for a in results}
            touched = None
        else:
            assert cached is not None
            table = dict(cached.table)
            gone = {c.id for c in cached.geom.creatures} - {c.id for c in geom.creatures}
            # Pairs only a creature in the way may have changed: only the modes where
            # creatures in the way count.
            way_modes = tuple(scene.ruleset.in_the_way_modes(scene.options))
            way_values = tuple(m.value for m in way_modes)
            in_the_way = set(affected.in_the_way)
            if not lines:
                # ...and only those whose degree a creature in the way can still change.
                may = {d.value: scene.ruleset.in_the_way_may_change(d) for d in Degree}
                in_the_way = {(a, t) for a, t in in_the_way
                              if any((old := cached.table.get((a, t, m))) is None
                                     or may[old.cover] for m in way_values)}
            stale = {(a, t, m) for a, t in affected.whole for m in _MODE_VALUES}
            stale.update((a, t, m) for a, t in in_the_way for m in way_values)
            if gone:
                stale.update(k for k in cached.table if k[0] in gone or k[1] in gone)
            for key in stale:
                table.pop(key, None)
            results = scene.ruleset.evaluate(geom, scene.options, pairs=sorted(affected.whole),
                                             lines=lines) if affected.whole else []
            if in_the_way and way_modes:
                results += scene.ruleset.evaluate(geom, scene.options,
                                                  pairs=sorted(in_the_way),
                                                  modes=way_modes, lines=lines)
            changed: set[Key] = set()
            for a in results:
                new = annotation_out(a)
                key = (new.attacker, new.target, new.mode)
                old = cached.table.get(key)
                if old is not None and old == new:
                    table[key] = old  # the same object: unchanged for every diff
                else:
                    table[key] = new
                    changed.add(key)
            touched = frozenset(changed | {k for k in stale if k not in table})
        log = dict(cached.log) if cached is not None else {}
        log[scene.revision] = touched
        while len(log) > CHANGE_LOG:
            del log[min(log)]
        self._cache[(sid, lines)] = _Cached(scene.revision, geom, scene.ruleset,
                                            scene.options, table, log)
        return table

    def _filtered(self, sid: str, sub: Subscription) -> dict[Key, AnnotationOut]:
        table = self._current(sid, sub.lines)
        modes = {m.value for m in sub.modes}
        if len(modes) == len(AttackMode):
            return table
        return {k: v for k, v in table.items() if k[2] in modes}

    def _subscribe(self, state: Connection, request: Subscribe, binary: bool) -> list[Output]:
        scene = self._scene(request.scene)
        if (request.scene not in state.subscriptions
                and len(state.subscriptions) >= LIMITS.max_subscriptions):
            raise ClientError(ErrorCode.TOO_LARGE,
                              f"$.scene: this connection has {len(state.subscriptions)} "
                              f"subscriptions, the limit is {LIMITS.max_subscriptions}",
                              path="$.scene")
        sub = Subscription(request.scene, request.lines,
                           tuple(AttackMode(m) for m in request.modes), binary)
        sub.sent = self._filtered(request.scene, sub)
        sub.revision = scene.revision
        state.subscriptions[request.scene] = sub
        msg = Annotations(request.scene, scene.revision, True, list(sub.sent.values()), [],
                          request.id)
        return [Send(state.id, encode(msg, binary))]

    def _query(self, request: CoverQuery) -> Response:
        scene = self._scene(request.scene)
        for field_name, tid in (("attacker", request.attacker), ("target", request.target)):
            if tid not in scene.tokens:
                raise ClientError(ErrorCode.UNKNOWN_TOKEN,
                                  f"$.{field_name}: no token {tid!r} in scene "
                                  f"{request.scene!r}", path=f"$.{field_name}")
        if request.attacker == request.target:
            raise ClientError(ErrorCode.INVALID,
                              f"$.target: a token cannot attack itself ({request.target!r})",
                              path="$.target")
        geom = scene.geometry
        if request.origin is not None:
            geom = with_origin(geom, request.attacker, request.origin.x, request.origin.y)
        (result,) = scene.ruleset.evaluate(geom, scene.options,
                                           pairs=[(request.attacker, request.target)],
                                           modes=[AttackMode(request.attack)],
                                           lines=request.lines)
        return CoverResult(request.scene, scene.revision, annotation_out(result), request.id)

    def _area(self, request: AreaQuery) -> Response:
        scene = self._scene(request.scene)
        t = request.template
        template = Template(TemplateKind(t.t), t.x, t.y, t.distance, t.direction, t.angle,
                            t.width)
        hits = scene.ruleset.area(scene.geometry, scene.options, template)
        return AreaResult(request.scene, scene.revision, [
            AreaHitOut(h.target, h.cover.value,
                       [ModifierOut(m.stat.value, m.value, m.kind.value, m.reason)
                        for m in h.modifiers],
                       {f.value: (f in h.flags) for f in _AREA_FLAGS}, h.obstructions)
            for h in hits], request.id)

    # -- introspection for tests and tools -------------------------------------------------

    def subscribers(self, sid: str) -> Iterable[int]:
        return [c.id for c in self.connections.values() if sid in c.subscriptions]



def with_origin(geom: SceneGeom, attacker: str, x: float, y: float) -> SceneGeom:
    """The scene as seen from a point: the attacker's lines start at (x, y) instead of its
    corners (a spell's point of origin, a shot from a chosen spot). Modelled as a
    point-sized attacker there, keeping its size for reach and disposition for allies."""
    creatures = tuple(point_creature(c.id, x, y, like=c) if c.id == attacker else c
                      for c in geom.creatures)
    return replace(geom, creatures=creatures)
