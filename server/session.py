"""The session core, sans I/O: frames in, frames out.

Rule of this module: `Core.receive(conn, frame)` takes one frame from one connection and
returns what to send: replies, closes, and a `Notify` for every subscriber of a scene it
changed, whose delta `Core.delta(conn, scene)` builds when that connection is ready for
it (so bursts coalesce, latest state wins); it never awaits, sleeps or touches a socket.
The Core holds the connections (each one's role and subscriptions) and routes each request
to the module of its concern, each sans-I/O: the scenes and their changes in
server/changes.py, the annotation tables in server/tables.py, subscriptions and deltas in
server/subscriptions.py, roles and access tokens in server/roles.py, large frames read
ahead in server/ahead.py, drowning and suffocating in server/drowning.py, friendly fire in
server/friendly_fire.py, the scene's focus in server/focus.py. State flows one way:
validated request -> new Scene value -> ruleset annotations (only the pairs some
subscriber's filter selects, and of those only the ones a change can touch, are
recomputed) -> delta against what each subscriber was last sent.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from geometry.model import SceneGeom, point_creature
from geometry.templates import Template, TemplateKind
from rulesets import REGISTRY
from rulesets.base import AttackMode, Flag
from server import ahead as ahead_reading
from server import compact, drowning, friendly_fire
from server import focus as focusing
from server import scene as scenes
from server.changes import SceneChanges
from server.compact import encode_annotations
from server.errors import ClientError, ErrorCode
from server.frames import Parts
from server.messages import (
    LIMITS,
    PROTOCOL_VERSION,
    Ack,
    Annotations,
    AreaHitOut,
    AreaQuery,
    AreaResult,
    BreathGet,
    BreathOut,
    BreathState,
    CoverQuery,
    CoverResult,
    Error,
    FriendlyFireResolve,
    FriendlyFireResult,
    Hello,
    Response,
    SceneFocus,
    SceneGet,
    SceneLoad,
    SceneState,
    SceneUnload,
    Subscribe,
    TokenCreate,
    TokenDelete,
    TokenDoc,
    TokenUpdate,
    TurnEnd,
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
from server.roles import WRITE_TYPES, WRITES, Access, Role, forbidden
from server.store import Store
from server.subscriptions import (
    EVERYTHING,
    EncodedFullSet,
    Filter,
    Frames,
    Subscription,
    Table,
    encoding_full_set,
    full_set,
    open_subscription,
    refuse_too_large,
)
from server.subscriptions import SIDES as _SIDES
from server.tables import Tables, annotation_out, modifier_out, over_limit

log = logging.getLogger("covercast.session")

SERVER_NAME = "covercast"
SERVER_VERSION = "0.1.0"
POLICY_VIOLATION = 1008
#: Frames larger than this are never subscriptions: `warm_frame` does not parse them.
WARM_FRAME_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Send:
    conn: int
    frame: bytes | str


@dataclass(frozen=True, slots=True)
class SendParts:
    """A frame given in its parts (server/frames.py), to write as one message: only a Core
    whose edge writes them so (`Core.in_parts`) gives one."""

    conn: int
    frame: Parts


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


Output = Send | SendParts | Close | Notify


@dataclass(slots=True)
class Connection:
    id: int
    greeted: bool = False
    role: Role = Role.GM
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    #: It asked in `hello` for `annotations` in the compact form.
    compact: bool = False


#: Batch requests: the scene operation, the documents it changes, the field holding them.
_BATCHES = ahead_reading.BATCHES


def _reason(text: str) -> str:
    """A close reason: WebSocket allows 123 bytes of UTF-8."""
    data = text.encode()
    return text if len(data) <= 123 else data[:120].decode(errors="ignore") + "..."


#: The flags that mean something for a creature caught in an area effect.
_AREA_FLAGS = (Flag.IMPROVED_EVASION, Flag.REFLEX_DEGREE_BETTER, Flag.TARGET_SUBMERGED)


class Core:
    """All connections and scenes of one server process; `store` keeps what outlives them
    (every scene, each token's air), `seed` seeds the generator of the seeds of
    server-rolled dice."""

    def __init__(self, access_token: str | None = None, player_token: str | None = None,
                 overlay_token: str | None = None, store: Store | None = None,
                 seed: int | None = None, restore: bool = True,
                 keep_scenes: bool = True) -> None:
        """`access_token` is the gm's (server/roles.py's `Access` says which sets of
        tokens are refused, with ValueError). `restore`: every scene of the store is back
        at its stored revision (StoreError: one cannot be read back); without it,
        `restore(ids)` brings back chosen ones. `keep_scenes` False: scenes are not written
        to the store (on NATS they live in JetStream, server/mesh.py; the store keeps air)."""
        self.store = store if store is not None else Store()
        # The scenes held, and their changes (server/changes.py).
        self.changes = SceneChanges(self.store, keep_scenes)
        self.scenes = self.changes.scenes
        self._access = Access(access_token, player_token, overlay_token)
        self.access_token = access_token
        self.connections: dict[int, Connection] = {}
        self._next = 1
        # Every scene's annotation tables (server/tables.py), for the pairs its
        # subscriptions follow.
        self.tables = Tables(self.scenes, self._follows)
        # Per scene, delta frames to its current state, shared by its subscribers
        # (server/subscriptions.py).
        self._deltas = Frames()
        # Per connection, the full set of the subscription it sent last, encoded ahead of
        # handling it (`warm_frame`); taken by `_subscribe`.
        self._full_sets: dict[int, EncodedFullSet] = {}
        #: Its edge writes a frame given in parts as one message (server/app.py does): a
        #: large full set is then handed on in its parts (`SendParts`), never joined.
        self.in_parts = False
        self._seeds = random.Random(seed)
        # Each token's air (drowning and suffocating), kept in the store.
        self.air = drowning.Air(self.store, self._seeds)
        # Per scene: the pair the gm pointed the table at (scene.focus), if any.
        self._focus: dict[str, focusing.Focus] = {}
        if restore:
            self.restore()

    # -- connection lifecycle ----------------------------------------------------------

    def connect(self) -> int:
        conn = self._next
        self._next += 1
        self.connections[conn] = Connection(conn)
        return conn

    def greeted(self, conn: int) -> bool:
        """Whether the connection has been welcomed (its hello accepted)."""
        state = self.connections.get(conn)
        return state is not None and state.greeted

    def disconnect(self, conn: int) -> None:
        self.connections.pop(conn, None)
        self._full_sets.pop(conn, None)

    def preload(self, request: SceneLoad, keep_stored: bool = True) -> bool:
        """Install a scene without a client (the demo scene at start-up); with
        `keep_stored`, a scene the store brought back under its id is kept instead, with
        its changes (False). ClientError (`unavailable`): it cannot be stored."""
        if keep_stored and request.scene.id in self.scenes:
            return False
        self._load(request)
        return True

    def restore(self, ids: Iterable[str] | None = None) -> list[str]:
        """SceneChanges.restore: the stored scenes `ids` (None: all) brought back."""
        return self.changes.restore(ids)

    def sweep(self) -> None:
        """SceneChanges.sweep, on the ahead thread."""
        self.changes.sweep()

    @property
    def keep_scenes(self) -> bool:
        """Whether scenes are written to the store."""
        return self.changes.keep

    # -- frames --------------------------------------------------------------------------

    def ahead(self, conn: int, frame: bytes | str) -> ahead_reading.Ahead | None:
        """Read `frame` (and build the scene it changes) the way `receive` will, off the
        Core's thread (server/ahead.py): safe to call from another thread, it only reads.
        None when the connection is not greeted (its frames are read by the Core)."""
        state = self.connections.get(conn)
        if state is None or not state.greeted:
            return None
        return ahead_reading.read(frame, state.role.viewer, WRITE_TYPES, dict(self.scenes),
                                  self.changes.stager(), rows=self.changes.keep)

    def receive(self, conn: int, frame: bytes | str,
                ahead: ahead_reading.Ahead | None = None) -> list[Output]:
        """Handle one frame from `conn`; return everything to send as a result. `ahead` is
        what `ahead(conn, frame)` read of this very frame, if it was read ahead."""
        state = self.connections[conn]
        binary = isinstance(frame, bytes)
        raw: Any = None
        if ahead is not None and (ahead.frame is not frame or not state.greeted):
            ahead = None
        try:
            if ahead is not None:
                raw = ahead.raw
                if ahead.error is not None:
                    raise ahead.error
            else:
                raw = decode_frame(frame)
            if state.greeted and state.role.viewer:
                # The role check comes before any other (protocol section 10.1): a
                # viewer's write is forbidden however the rest of it reads.
                kind = raw.get("type") if isinstance(raw, dict) else None
                if isinstance(kind, str) and kind in WRITE_TYPES:
                    raise forbidden(kind, state.role)
            request = (ahead.request if ahead is not None and ahead.request is not None
                       else parse_request(raw))
        except ClientError as exc:
            _drop_frames(exc)
            if not state.greeted:
                reason = _reason(f"expected hello; {exc.message}")
                return [Close(conn, POLICY_VIOLATION, reason)]
            return [Send(conn, encode(self._error(exc, request_id(raw)), binary))]
        if not state.greeted:
            return self._hello(state, request, binary)
        try:
            self.changes.begin(ahead)
            return self._dispatch(state, request, binary)
        except ClientError as exc:
            _drop_frames(exc)
            return [Send(conn, encode(self._error(exc, request.id), binary))]
        except Exception:
            log.exception("bug while handling %s from connection %d",
                          type(request).__name__, conn)
            err = Error(ErrorCode.INTERNAL.value,
                        "internal error; the request was not applied", None, request.id)
            return [Send(conn, encode(err, binary))]
        finally:
            self.changes.end(ahead)

    def _error(self, exc: ClientError, rid: Any) -> Error:
        return Error(exc.code.value, exc.message, exc.path, rid)

    def _hello(self, state: Connection, request: Any, binary: bool) -> list[Output]:
        if not isinstance(request, Hello):
            return [Close(state.id, POLICY_VIOLATION, "expected hello")]
        role = self._access.grant(request)
        if role is None:
            return [Close(state.id, POLICY_VIOLATION, "access denied")]
        if request.protocol != PROTOCOL_VERSION:
            return [Close(state.id, POLICY_VIOLATION,
                          f"unsupported protocol {request.protocol}; this server speaks "
                          f"{PROTOCOL_VERSION}")]
        state.greeted = True
        state.role = role
        state.compact = request.compact
        welcome = Welcome(PROTOCOL_VERSION, SERVER_NAME, SERVER_VERSION,
                          [r.describe() for r in REGISTRY.all()], LIMITS, role.value,
                          request.compact, request.id)
        return [Send(state.id, encode(welcome, binary))]

    def _dispatch(self, state: Connection, request: Any, binary: bool) -> list[Output]:
        if state.role.viewer and isinstance(request, WRITES):
            raise forbidden(str(type(request).__struct_config__.tag), state.role)
        viewer = state.role.viewer
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
                                    request.id, binary, (kind, items))
            case CoverQuery():
                return [Send(state.id, encode(self._query(request, viewer), binary))]
            case AreaQuery():
                return [Send(state.id, encode(self._area(request, viewer), binary))]
            case FriendlyFireResolve():
                return [Send(state.id, encode(self._friendly_fire(request, viewer), binary))]
            case SceneUnload(scene=sid):
                return self._unload(state, sid, request.id, binary)
            case SceneGet(scene=sid):
                scene = self._scene(sid)
                snapshot = viewer_snapshot(scene) if viewer else scene.snapshot()
                reply = SceneState(snapshot, scene.revision, request.id)
                return [Send(state.id, encode(reply, binary))]
            case Subscribe():
                return self._subscribe(state, request, binary)
            case SceneFocus():
                return self._set_focus(state, request, binary)
            case TurnEnd():
                return self._turn_end(state, request, binary)
            case BreathGet():
                return [Send(state.id, encode(self._breath_get(request, viewer), binary))]
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
        return self.changes.get(sid)

    def _load(self, request: SceneLoad) -> str:
        return self.changes.load(request, self._subscribed_limit).id

    def _unload(self, state: Connection, sid: str, rid: Any, binary: bool) -> list[Output]:
        """Forget a scene for good (the store too); its subscribers get a last, empty full
        set and are unsubscribed."""
        scene = self.changes.unload(sid)
        self.tables.forget(sid)
        self.air.forget(sid)
        self._deltas.forget(sid)
        self._focus.pop(sid, None)
        out: list[Output] = [Send(state.id, encode(Ack(sid, scene.revision, rid), binary))]
        for conn in self.connections.values():
            sub = conn.subscriptions.pop(sid, None)
            if sub is not None:
                last = Annotations(sid, scene.revision + 1, True, [], [])
                out.append(Send(conn.id, encode_annotations(last, sub.binary, sub.compact)))
        return out

    def _change(self, state: Connection, sid: str, build: Any, rid: Any,
                binary: bool, batch: tuple[str, Sequence[Any]]) -> list[Output]:
        """Apply a batch (`batch`: the kind of documents and the items it names)."""
        self.changes.change(sid, build, batch, self._subscribed_limit)
        return self._after_change(state, sid, rid, binary)

    def _subscribed_limit(self, scene: scenes.Scene) -> None:
        """A scene with subscribers may not grow past the table limit (their tables would
        be computed at every change), each subscription counted by the pairs its filter
        selects: refused, the scene left as it was."""
        if not over_limit(scene):
            return
        creatures = scene.geometry.creatures
        visible = None
        asked: set[tuple[Filter, bool]] = set()
        for conn in self.connections.values():
            sub = conn.subscriptions.get(scene.id)
            if sub is None or (sub.filter, sub.viewer) in asked:
                continue
            asked.add((sub.filter, sub.viewer))
            if sub.viewer and visible is None:
                visible = tuple(c for c in creatures if not c.hidden)
            refuse_too_large(sub.filter, visible if sub.viewer and visible is not None
                             else creatures, scene.id, "$")

    def _after_change(self, state: Connection, sid: str, rid: Any,
                      binary: bool) -> list[Output]:
        scene = self.scenes[sid]
        out: list[Output] = [Send(state.id, encode(Ack(sid, scene.revision, rid), binary))]
        # Subscribers are only told there is news; each one's delta is computed when its
        # connection is ready for it (`delta`), so bursts coalesce and slow readers cost
        # no memory.
        out.extend(Notify(conn, sid) for conn in self.subscribers(sid))
        out.extend(self._focus_news(sid))  # a focused token hidden, shown or deleted
        return out

    # -- focus -----------------------------------------------------------------------------

    def _set_focus(self, state: Connection, request: SceneFocus,
                   binary: bool) -> list[Output]:
        """The gm points the table at a pair: acknowledged (the revision stays), then every
        subscriber whose view of it changed is sent its view."""
        scene = self._scene(request.scene)
        for side in ("attacker", "target"):
            tid = getattr(request, side)
            if tid is not None:
                self._token(scene, tid, path=f"$.{side}")
        self._focus[request.scene] = focusing.Focus(request.attacker, request.target,
                                                    request.mode)
        out: list[Output] = [Send(state.id, encode(Ack(request.scene, scene.revision,
                                                       request.id), binary))]
        out.extend(self._focus_news(request.scene))
        return out

    def _focus_news(self, sid: str, only: int | None = None) -> list[Output]:
        """A `focus` push to each subscriber of `sid` (or only connection `only`) whose
        view of the scene's focus is not the one it was last sent."""
        scene = self.scenes.get(sid)
        focus = self._focus.get(sid)
        if scene is None or focus is None:
            return []
        out: list[Output] = []
        for conn in self.connections.values():
            sub = conn.subscriptions.get(sid)
            if sub is None or (only is not None and conn.id != only):
                continue
            seen = focusing.view(focus, scene.tokens, sub.viewer)
            if seen != sub.focus_sent:
                sub.focus_sent = seen
                out.append(Send(conn.id, encode(focusing.out(sid, seen), sub.binary)))
        return out

    # -- annotations -----------------------------------------------------------------------

    def delta(self, conn: int, sid: str) -> bytes | str | None:
        """The `annotations` frame bringing this subscriber from what it was last sent to
        the scene's current state (None: nothing changed, or no longer subscribed). A bug
        while computing it is logged and reported to the subscriber as an `internal` error;
        the connection, and what it was last sent, stay as they were."""
        try:
            return self._delta(conn, sid)
        except ClientError as exc:  # the store cannot be read: no bug, said once in the log
            state = self.connections.get(conn)
            sub = state.subscriptions.get(sid) if state is not None else None
            return encode(self._error(exc, None), sub.binary if sub is not None else True)
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
        # Subscribers at the same revision with the same ask and view get the same frame:
        # built once per revision (50 subscribers of a scene cost one diff and one
        # encoding).
        air = self._breath_visible(sid, sub.viewer)
        return self._deltas.delta(sub, sid, scene, scene.revision, air,
                                  lambda: self.tables.view_table(sid, sub.lines, sub.viewer))

    def computed(self, conn: int, sid: str) -> bool:
        """Whether the annotations this subscriber's delta is built from are computed for
        the scene's current revision (its delta then only diffs and encodes, or hands over
        a frame already built); True when it has no delta to get."""
        state = self.connections.get(conn)
        sub = state.subscriptions.get(sid) if state is not None else None
        if sub is None or sid not in self.scenes:
            return True
        return self.tables.computed(sub, sid)

    def _follows(self, sid: str) -> Iterator[Subscription]:
        """The scene's current subscriptions (what its tables must hold)."""
        for conn in self.connections.values():
            sub = conn.subscriptions.get(sid)
            if sub is not None:
                yield sub

    def warm(self, tables: Iterable[tuple[str, bool, bool]]) -> Generator[None, None, None]:
        """Tables.warm: these tables (scene, lines, viewer), every pair, computed in
        slices."""
        return self.tables.warm(tables)

    def prepare(self, sid: str) -> None:
        """Tables.prepare: the scene's idle-time work once a change has gone out."""
        self.tables.prepare(sid)

    def drain(self, outputs: list[Output]) -> list[Send | Close]:
        """Outputs with every Notify resolved into its delta now, and every frame given in
        parts joined (for callers without per-connection writers: tests, tools)."""
        out: list[Send | Close] = []
        for o in outputs:
            if isinstance(o, Notify):
                frame = self.delta(o.conn, o.scene)
                if frame is not None:
                    out.append(Send(o.conn, frame))
            elif isinstance(o, SendParts):
                out.append(Send(o.conn, o.frame.joined()))
            else:
                out.append(o)
        return out

    def too_many_pairs(self, scene: scenes.Scene, path: str) -> None:
        """Refuse (too_large) a whole table of this scene when it would pass the limit."""
        refuse_too_large(EVERYTHING, scene.geometry.creatures, scene.id, path)

    def warm_frame(self, conn: int, frame: bytes | str,
                   ahead: ahead_reading.Ahead | None = None) -> Generator[None, None, None]:
        """`warm` for what this frame will need: a subscription's table, the pairs it and
        the table's subscribers follow (small frames only: a subscription is a few dozen
        bytes, a few KB with its filter; anything else needs no table). `ahead`: what was
        read of this frame ahead (server/ahead.py), so it is not read twice."""
        state = self.connections.get(conn)
        if state is None or not state.greeted or len(frame) > WARM_FRAME_BYTES:
            return
        if ahead is not None and ahead.frame is frame:
            if ahead.request is None:
                return
            request: Any = ahead.request
        else:
            try:
                request = parse_request(decode_frame(frame))
            except ClientError:
                return
        if isinstance(request, Subscribe):
            if any(s not in _SIDES for s in request.sides or ()):
                return  # refused when it is handled
            flt = Filter(
                None if request.attackers is None else frozenset(request.attackers),
                None if request.targets is None else frozenset(request.targets),
                None if request.sides is None else frozenset(_SIDES[s]
                                                             for s in request.sides))
            yield from self.tables.warm_for(request.scene, request.lines, state.role.viewer, (flt,))
            yield from self._full_set_ahead(state, request, isinstance(frame, bytes))

    def warm_delta(self, conns: Iterable[int], sid: str) -> Generator[None, None, None]:
        """`warm` for the deltas of these subscribers of scene `sid`: the pairs its
        subscribers follow."""
        tables = []
        for conn in conns:
            state = self.connections.get(conn)
            sub = state.subscriptions.get(sid) if state is not None else None
            if sub is not None and (sid, sub.lines, sub.viewer) not in tables:
                tables.append((sid, sub.lines, sub.viewer))
        for table in tables:
            yield from self.tables.warm_for(*table, ())

    def _subscribe(self, state: Connection, request: Subscribe, binary: bool) -> list[Output]:
        """A new subscription (server/subscriptions.py), or a new ask of this connection's
        subscription to the scene: its full set now, computed for the pairs it follows.
        A refused one leaves the connection's subscriptions as they were."""
        ahead = self._full_sets.pop(state.id, None)
        scene = self._scene(request.scene)
        if (request.scene not in state.subscriptions
                and len(state.subscriptions) >= LIMITS.max_subscriptions):
            raise ClientError(ErrorCode.TOO_LARGE,
                              f"$.scene: this connection has {len(state.subscriptions)} "
                              f"subscriptions, the limit is {LIMITS.max_subscriptions}",
                              path="$.scene")
        sub, table = self._opened(state, request, binary)
        frame = full_set(sub, request.scene, scene.revision, table,
                         self._breath_visible(request.scene, sub.viewer), request.id, ahead)
        state.subscriptions[request.scene] = sub
        # The scene's focus follows its full set (none is sent while nobody set one).
        first: Output = (SendParts(state.id, frame) if isinstance(frame, Parts)
                         else Send(state.id, frame))
        return [first, *self._focus_news(request.scene, only=state.id)]

    def _opened(self, state: Connection, request: Subscribe, binary: bool
                ) -> tuple[Subscription, Table]:
        """The subscription this request opens and the table its full set is taken from
        (ClientError: its filter is refused)."""
        viewer = state.role.viewer
        scene = self._scene(request.scene)
        _, geom = self.tables.view_key(request.scene, request.lines, viewer)
        sub = open_subscription(request, scene.id, scene.tokens, geom.creatures, viewer,
                                binary, state.compact)
        table = self.tables.view_table(request.scene, request.lines, viewer, extra=(sub.filter,))
        return sub, table

    def _full_set_ahead(self, state: Connection, request: Subscribe, binary: bool
                        ) -> Generator[None, None, None]:
        """The full set this subscription will be sent, if it may be larger than a step of
        the encoder (server/compact.py), encoded now in steps (its table just computed by
        `warm_frame`), kept for `receive`: a large one (119,400 annotations at 200 tokens)
        is 70 ms of the encoder in one call, longer than a slice of any table. `receive`
        sends it if nothing it was made of changed meanwhile, and builds it again
        otherwise."""
        try:
            sub, table = self._opened(state, request, binary)
        except ClientError:
            return  # refused when it is handled
        if len(table.entries) <= compact.ENCODE_CHUNK:
            return  # one step of the encoder, in `receive`
        air = self._breath_visible(request.scene, sub.viewer)
        revision = self._scene(request.scene).revision
        done = self._full_sets.get(state.id)
        if done is not None and done.fits(sub, revision, table, air, request.id):
            return  # (warm_frame is asked again after work done in steps)
        # Installing the table just computed was a step's work of its own (the slices
        # yield before it, not after).
        yield
        self._full_sets[state.id] = yield from encoding_full_set(
            sub, request.scene, revision, table, air, request.id, self.in_parts)

    def _query(self, request: CoverQuery, viewer: bool = False) -> Response:
        scene = self._scene(request.scene)
        self._token(scene, request.attacker, viewer, "$.attacker")
        self._token(scene, request.target, viewer, "$.target")
        if request.attacker == request.target:
            raise ClientError(ErrorCode.INVALID,
                              f"$.target: a token cannot attack itself ({request.target!r})",
                              path="$.target")
        geom = self.tables.visible_geometry(scene) if viewer else scene.geometry
        if request.origin is not None:
            geom = with_origin(geom, request.attacker, request.origin.x, request.origin.y)
        (result,) = scene.ruleset.annotate(geom, scene.options,
                                           pairs=[(request.attacker, request.target)],
                                           modes=[AttackMode(request.attack)],
                                           lines=request.lines)
        return CoverResult(request.scene, scene.revision, annotation_out(result), request.id,
                           float(scene.ruleset.distance(geom, request.attacker,
                                                        request.target)))

    def _area(self, request: AreaQuery, viewer: bool = False) -> Response:
        scene = self._scene(request.scene)
        t = request.template
        template = Template(TemplateKind(t.t), t.x, t.y, t.distance, t.direction, t.angle,
                            t.width, scene.geometry.grid.units_to_feet(t.elevation))
        geom = self.tables.visible_geometry(scene) if viewer else scene.geometry
        hits = scene.ruleset.area_hits(geom, scene.options, template)
        return AreaResult(request.scene, scene.revision, [
            AreaHitOut(h.target, h.cover.value,
                       [modifier_out(m) for m in h.modifiers],
                       {f.value: (f in h.flags) for f in _AREA_FLAGS}, h.obstructions)
            for h in hits], request.id)

    def _friendly_fire(self, request: FriendlyFireResolve,
                       viewer: bool = False) -> FriendlyFireResult:
        """Enchanted Realms' friendly fire (server/friendly_fire.py), on the scene without
        its hidden tokens for a viewer."""
        scene = self._scene(request.scene)
        geom = self.tables.visible_geometry(scene) if viewer else scene.geometry
        return friendly_fire.resolve(scene, geom, request, self._seeds, viewer)

    # -- drowning and suffocating ---------------------------------------------------------

    def _breath_visible(self, sid: str, viewer: bool = False) -> dict[str, BreathOut]:
        return self.air.visible(self.scenes[sid], viewer)

    def _token(self, scene: scenes.Scene, tid: str, viewer: bool = False,
               path: str = "$.token") -> TokenDoc:
        return scenes.find_token(scene, tid, viewer, path)

    def _turn_end(self, state: Connection, request: TurnEnd, binary: bool) -> list[Output]:
        """A token's turn ended (server/drowning.py): its new air is stored, then sent to
        the client and to the scene's subscribers."""
        scene = self._scene(request.scene)
        out = self.air.turn_end(scene, request)
        reply: list[Output] = [Send(state.id, encode(BreathState(scene.id, [out], request.id),
                                                     binary))]
        reply.extend(Notify(conn, scene.id) for conn in self.subscribers(scene.id))
        return reply

    def _breath_get(self, request: BreathGet, viewer: bool = False) -> Response:
        return self.air.get(self._scene(request.scene), request, viewer)

    # -- introspection for tests and tools -------------------------------------------------

    def subscribers(self, sid: str) -> Iterable[int]:
        return [c.id for c in self.connections.values() if sid in c.subscriptions]



def _drop_frames(exc: BaseException) -> None:
    """Forget the frames an answered client error holds. An error read ahead is raised
    again here, by the frame that holds it (in `ahead`): its traceback then leads back to
    it, a reference cycle, which only the garbage collector frees. Until then the cycle
    keeps the whole request alive (a refused 5,000-token batch: about 20 MB), and the
    collector may not come for a minute: what is alive when a large frame has been read
    is frozen (server/ahead.py `_held_back`)."""
    exc.__traceback__ = None
    exc.__context__ = None


def viewer_snapshot(scene: scenes.Scene) -> dict[str, Any]:
    """The scene as a viewer may see it: without hidden tokens, and with secret doors
    (Foundry door type 2) shown as plain walls while shut and as open doors once open."""
    snap = scene.snapshot()
    snap["tokens"] = [t for t in snap["tokens"] if not t.get("hidden")]
    hidden = {t.id for t in scene.tokens.values() if t.hidden}
    for t in snap["tokens"]:
        # A visible rider on a hidden mount must not name it.
        own = (t.get("flags") or {}).get("covercast") or {}
        if own.get("mount") in hidden:
            t["flags"] = {**t["flags"], "covercast": {k: v for k, v in own.items()
                                                      if k != "mount"}}
    walls = []
    for w in snap["walls"]:
        if w.get("door") == 2:
            w = {k: v for k, v in w.items() if k not in ("door", "ds")}
            if scene.walls[w["id"]].ds == 1:
                w.update(door=1, ds=1)
        walls.append(w)
    snap["walls"] = walls
    return snap


def with_origin(geom: SceneGeom, attacker: str, x: float, y: float) -> SceneGeom:
    """The scene as seen from a point: the attacker's lines start at (x, y) instead of its
    corners (a spell's point of origin, a shot from a chosen spot). Modelled as a
    point-sized attacker there, keeping its size for reach and disposition for allies."""
    creatures = tuple(point_creature(c.id, x, y, geom.grid, like=c) if c.id == attacker else c
                      for c in geom.creatures)
    return replace(geom, creatures=creatures)
