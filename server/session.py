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

import enum
import hmac
import logging
import random
import time
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from geometry.incremental import Affected
from geometry.incremental import affected as affected_by
from geometry.model import SceneGeom, point_creature
from geometry.templates import Template, TemplateKind
from geometry.water import submerged
from rulesets import REGISTRY, friendlyfire
from rulesets.base import Annotation, AttackMode, Degree, Flag, Modifier
from rulesets.breath import Breath, Step, TurnEvent, end_turn
from server import focus as focusing
from server import scene as scenes
from server.compact import encode_annotations
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
    BreathGet,
    BreathOut,
    BreathState,
    CandidateOut,
    CoverQuery,
    CoverResult,
    DieOut,
    Error,
    FriendlyFireOut,
    FriendlyFireResolve,
    FriendlyFireResult,
    Hello,
    LineOut,
    ModifierOut,
    Response,
    Rolls,
    SceneFocus,
    SceneGet,
    SceneLoad,
    SceneState,
    SceneUnload,
    StepOut,
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
from server.settled import Settled
from server.settled import after as settled_after
from server.store import Store, StoreUnavailable

log = logging.getLogger("covercast.session")

SERVER_NAME = "covercast"
SERVER_VERSION = "0.1.0"
POLICY_VIOLATION = 1008
#: Cached revisions whose changed keys are remembered for cheap deltas.
CHANGE_LOG = 32
#: Delta frames kept per scene for subscribers catching up to its current state.
_FRAME_CACHE = 64
#: Seconds of geometry a slice of a table computed for the server takes (`warm`): the
#: longest another scene's request waits for the worker behind it.
SLICE_S = 0.025
#: Pairs in the first slice of a scene whose pace is not known yet (the pace then
#: doubles or halves, slice by slice, towards SLICE_S).
FIRST_SLICE = 16
#: Rounds `warm` gives a scene that changes while its table is computed.
WARM_ROUNDS = 4
#: Frames larger than this are never subscriptions: `warm_frame` does not parse them.
WARM_FRAME_BYTES = 4096

Key = tuple[str, str, str]
Pair = tuple[str, str]
#: An annotation table: (scene, lines, without hidden tokens).
CacheKey = tuple[str, bool, bool]
#: A shared delta frame's key: (lines, modes, binary, viewer, from revision, from cache,
#: compact form).
_FrameKey = tuple[bool, tuple[AttackMode, ...], bool, bool, int, CacheKey | None, bool]
#: A shared delta frame: the cache and table it leaves the subscriber with, and the frame.
_Frame = tuple[CacheKey | None, dict[Key, AnnotationOut], bytes | str | None]


def _tokens_for(pairs: int) -> int:
    """The most tokens whose pairs (n x (n - 1)) stay within `pairs`."""
    n = 1
    while (n + 1) * n <= pairs:
        n += 1
    return n


def _cache_keys(sid: str) -> tuple[CacheKey, ...]:
    """Every table a scene can have: with or without lines, the gm's or the viewers'."""
    return tuple((sid, lines, hidden_out) for lines in (False, True)
                 for hidden_out in (False, True))


class Role(enum.Enum):
    """What a connection may do, from the access token it said `hello` with. The gm changes
    scenes and sees everything; a player or an overlay only reads, and never learns of hidden
    tokens (the two viewer roles have the same rights; the name tells the server's log and
    the client what it is)."""

    GM = "gm"
    PLAYER = "player"
    OVERLAY = "overlay"

    @property
    def viewer(self) -> bool:
        return self is not Role.GM


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
    #: Tables without lines: the pairs a creature in the way can still change.
    settled: Settled | None = None


@dataclass(slots=True)
class Subscription:
    scene: str
    lines: bool
    modes: tuple[AttackMode, ...]
    binary: bool
    #: A viewer's subscription: annotations of the scene without its hidden tokens.
    viewer: bool = False
    sent: dict[Key, AnnotationOut] = field(default_factory=dict)
    revision: int = 0
    #: Each token's air as this subscriber was last sent it.
    breath_sent: dict[str, BreathOut] = field(default_factory=dict)
    #: The cached table `sent` was taken from (its change log is valid for `sent`).
    source: CacheKey | None = None
    #: The scene's focus as this subscriber was last sent it (server/focus.py).
    focus_sent: focusing.Focus = focusing.NOBODY
    #: Its `annotations` frames in the compact form (server/compact.py; asked in hello).
    compact: bool = False


@dataclass(slots=True)
class Connection:
    id: int
    greeted: bool = False
    role: Role = Role.GM
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    #: It asked in `hello` for `annotations` in the compact form.
    compact: bool = False


#: Requests that change scenes: only a gm connection may send them.
_WRITES = (SceneLoad, SceneUnload, TokenCreate, TokenUpdate, TokenDelete, WallCreate,
           WallUpdate, WallDelete, TurnEnd, SceneFocus)

#: Their `type` tags, which a viewer is refused before the rest of the message is read.
_WRITE_TYPES = frozenset(t.__struct_config__.tag for t in _WRITES)


def _forbidden(kind: str, role: Role) -> ClientError:
    return ClientError(ErrorCode.FORBIDDEN,
                       f"$.type: {kind} is not allowed for role {role.value!r}: only a gm "
                       "connection changes scenes", path="$.type")


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


def modifier_out(m: Modifier) -> ModifierOut:
    return ModifierOut(m.stat.value, m.value, m.kind.value, m.reason,
                       [d.value for d in m.damage])


def annotation_out(a: Annotation) -> AnnotationOut:
    """A ruleset result as it travels on the wire."""
    # Thousands of annotations share a handful of modifier lists and flag sets: each is
    # converted once (the wire values are never modified after they are built).
    mods = _MODS_OUT.get(a.modifiers)
    if mods is None:
        if len(_MODS_OUT) >= _OUT_CACHE:
            _MODS_OUT.clear()
        mods = _MODS_OUT[a.modifiers] = [modifier_out(m) for m in a.modifiers]
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
_AREA_FLAGS = (Flag.IMPROVED_EVASION, Flag.REFLEX_DEGREE_BETTER, Flag.TARGET_SUBMERGED)


class Core:
    """All connections and scenes of one server process; `store` keeps what outlives them
    (each token's air), `seed` seeds the generator of the seeds of server-rolled dice."""

    def __init__(self, access_token: str | None = None, player_token: str | None = None,
                 overlay_token: str | None = None, store: Store | None = None,
                 seed: int | None = None) -> None:
        """`access_token` is the gm's: without it the server is open (any hello is gm
        unless it asks for a viewer role), so viewer tokens without it would protect
        nothing and are refused (ValueError), as are two roles sharing one token."""
        tokens = {Role.GM: access_token, Role.PLAYER: player_token,
                  Role.OVERLAY: overlay_token}
        self._tokens = {role: t for role, t in tokens.items() if t}
        if self._tokens and Role.GM not in self._tokens:
            raise ValueError("a player or overlay token needs a gm access token too: "
                             "without one every client may change scenes")
        if len(set(self._tokens.values())) < len(self._tokens):
            raise ValueError("the gm, player and overlay access tokens must differ")
        self.access_token = access_token
        self.connections: dict[int, Connection] = {}
        self.scenes: dict[str, scenes.Scene] = {}
        self._next = 1
        # Per scene, lines flag and view (True: without hidden tokens): annotations at the
        # revision they were last computed for.
        self._cache: dict[CacheKey, _Cached] = {}
        # Per scene, delta frames to its current state (the scene value they lead to) by
        # (lines, modes, binary, view, from revision, from table): the table they leave the
        # subscriber with, and the frame.
        self._frames: dict[str, tuple[scenes.Scene, dict[_FrameKey, _Frame]]] = {}
        # Per scene: the geometry without hidden tokens, and the revision it is of.
        self._visible: dict[str, tuple[int, SceneGeom]] = {}
        # Per scene: one key tuple for each (attacker, target, mode), shared by all its
        # tables. Once a collection has seen a key tuple of strings it is no longer tracked,
        # and a table whose keys and values are all untracked is not tracked either (after
        # a full collection) nor are its copies: a fresh tuple put into a copy would make
        # that table of 30,000 entries tracked again, scanned by young collections.
        self._keys: dict[str, dict[Key, Key]] = {}
        # Per cache: a copy of its table made in idle time (`prepare`), which the next
        # revision starts from instead of copying on the way to its deltas; and the table
        # the last revision replaced, released in idle time too (at most one per cache).
        self._spares: dict[CacheKey, tuple[_Cached, dict[Key, AnnotationOut]]] = {}
        self._retired: dict[CacheKey, _Cached] = {}
        self.store = store if store is not None else Store()
        self._seeds = random.Random(seed)
        # Per scene: each token's air as stored (read from the store on first use). A
        # token's entry is replaced, never changed, so subscribers compare by identity.
        self._breath: dict[str, dict[str, BreathOut]] = {}
        # Per scene: the pair the gm pointed the table at (scene.focus), if any.
        self._focus: dict[str, focusing.Focus] = {}
        # Per scene: how many times it was unloaded (a table computed in slices is only
        # installed into the scene it was started for), and the seconds per pair its
        # pairs per slice its ruleset last took about SLICE_S for.
        self._epochs: dict[str, int] = {}
        self._pace: dict[str, int] = {}

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
            if state.greeted and state.role.viewer:
                # The role check comes before any other (protocol section 10.1): a
                # viewer's write is forbidden however the rest of it reads.
                kind = raw.get("type") if isinstance(raw, dict) else None
                if isinstance(kind, str) and kind in _WRITE_TYPES:
                    raise _forbidden(kind, state.role)
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
        role = self._role(request)
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

    def _role(self, request: Hello) -> Role | None:
        """The role `hello` gets (None: access denied): its token's, or the viewer role it
        asks for, which any token may (a gm viewing as the players do); never more."""
        given = (request.token or "").encode()
        # Every configured token is compared, in constant time, whatever matches.
        matches = [role for role, secret in self._tokens.items()
                   if hmac.compare_digest(given, secret.encode())]
        if matches:
            granted = matches[0]
        elif Role.GM not in self._tokens:
            granted = Role.GM  # an open server (the loopback default)
        else:
            return None
        if request.role is None:
            return granted
        wanted = Role(request.role)
        return wanted if wanted.viewer or not granted.viewer else None

    def _dispatch(self, state: Connection, request: Any, binary: bool) -> list[Output]:
        if state.role.viewer and isinstance(request, _WRITES):
            raise _forbidden(str(type(request).__struct_config__.tag), state.role)
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
                                    request.id, binary)
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
        loaded = scenes.load(request.scene, request.ruleset, request.options, previous)
        self._subscribed_limit(loaded)
        self.scenes[sid] = loaded
        return sid

    def _unload(self, state: Connection, sid: str, rid: Any, binary: bool) -> list[Output]:
        """Forget a scene; its subscribers get a last, empty full set and are unsubscribed."""
        scene = self._scene(sid)
        del self.scenes[sid]
        self._epochs[sid] = self._epochs.get(sid, 0) + 1
        self._pace.pop(sid, None)
        self._breath.pop(sid, None)  # stays in the store for the scene's next load
        for key in _cache_keys(sid):
            self._cache.pop(key, None)
            self._spares.pop(key, None)
            self._retired.pop(key, None)
        self._frames.pop(sid, None)
        self._visible.pop(sid, None)
        self._keys.pop(sid, None)
        self._focus.pop(sid, None)
        out: list[Output] = [Send(state.id, encode(Ack(sid, scene.revision, rid), binary))]
        for conn in self.connections.values():
            sub = conn.subscriptions.pop(sid, None)
            if sub is not None:
                last = Annotations(sid, scene.revision + 1, True, [], [])
                out.append(Send(conn.id, encode_annotations(last, sub.binary, sub.compact)))
        return out

    def _change(self, state: Connection, sid: str, build: Any, rid: Any,
                binary: bool) -> list[Output]:
        current = self._scene(sid)
        changed = build(current)  # raises before the swap: the scene stays as it was
        self._subscribed_limit(changed)
        self.scenes[sid] = changed
        return self._after_change(state, sid, rid, binary)

    def _subscribed_limit(self, scene: scenes.Scene) -> None:
        """A scene with subscribers may not grow past the table limit (their tables would
        be computed at every change): refused, the scene left as it was."""
        if self._over_limit(scene) and any(True for _ in self.subscribers(scene.id)):
            self.too_many_pairs(scene, "$")

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

    def computed(self, conn: int, sid: str) -> bool:
        """Whether the annotations this subscriber's delta is built from are computed for
        the scene's current revision (its delta then only diffs and encodes, or hands over
        a frame already built); True when it has no delta to get."""
        state = self.connections.get(conn)
        sub = state.subscriptions.get(sid) if state is not None else None
        scene = self.scenes.get(sid)
        if sub is None or scene is None:
            return True
        hidden_out = sub.viewer and len(self._visible_geometry(scene).creatures) < len(
            scene.geometry.creatures)
        cached = self._cache.get((sid, sub.lines, hidden_out))
        return cached is not None and cached.revision == scene.revision

    def _delta(self, conn: int, sid: str) -> bytes | str | None:
        state = self.connections.get(conn)
        sub = state.subscriptions.get(sid) if state is not None else None
        if sub is None or sid not in self.scenes:
            return None
        scene = self.scenes[sid]
        # Subscribers at the same revision with the same view get the same frame: build it
        # once per revision (50 subscribers of a scene cost one diff and one encoding).
        # Only frames leading to the scene's current state are kept: older ones (and the
        # tables they hold) go as soon as the scene changes. The key holds everything the
        # frame depends on: the table the subscriber holds (its revision and the cache it
        # came from, so a viewer's table is never taken for the gm's), what it asked for,
        # and its view (a viewer's frame never carries a hidden token).
        held = self._frames.get(sid)
        if held is None or held[0] is not scene:
            held = self._frames[sid] = (scene, {})
        frames = held[1]
        # Air changes ride in deltas and each subscriber's record of the air it was sent is
        # its own (a turn end changes the air, not the revision): a frame is shared only
        # when it carries no air.
        air = self._breath_visible(sid, sub.viewer)
        breath = [v for k, v in air.items() if sub.breath_sent.get(k) is not v]
        if breath:
            return self._diff(sid, sub, air, breath)
        fkey = (sub.lines, sub.modes, sub.binary, sub.viewer, sub.revision, sub.source,
                sub.compact)
        cached_frame = frames.get(fkey)
        if cached_frame is not None:
            source, table, frame = cached_frame
            sub.sent = table
            sub.source = source
            sub.revision = scene.revision
            if frame is not None:
                sub.breath_sent = air
            return frame
        frame = self._diff(sid, sub, air, breath)
        if len(frames) < _FRAME_CACHE:
            frames[fkey] = (sub.source, sub.sent, frame)
        return frame

    def _diff(self, sid: str, sub: Subscription, air: dict[str, BreathOut],
              breath: list[BreathOut]) -> bytes | str | None:
        """The delta frame from the subscriber's table to the current one, which becomes
        its table, with the air that changed (`breath`, of its view's `air`)."""
        source, table = self._filtered(sid, sub)
        keys = self._touched_since(source, sub)
        if keys is None:
            # Entries kept from one revision to the next are the same objects; equal ones
            # from another table (a viewer's, before or after a token was hidden) are not.
            sent = sub.sent
            changed = [v for k, v in table.items()
                       if (old := sent.get(k)) is not v and old != v]
            removed = [k for k in sent if k not in table]
        else:
            changed = [table[k] for k in keys if k in table and sub.sent.get(k) is not table[k]]
            removed = [k for k in keys if k not in table and k in sub.sent]
        revision = self.scenes[sid].revision
        if not changed and not removed and not breath and sub.revision == revision:
            # Nothing to send: the subscriber's table equals this one (entry for entry
            # the same objects, or equal ones), which it now holds.
            sub.sent = table
            sub.source = source
            return None
        sub.sent = table
        sub.source = source
        sub.revision = revision
        sub.breath_sent = air
        msg = Annotations(sid, revision, False, changed, removed, breath)
        return encode_annotations(msg, sub.binary, sub.compact)

    def _touched_since(self, source: CacheKey, sub: Subscription) -> list[Key] | None:
        """Keys that may differ between the table this subscriber holds and the current
        one, from the cache's change log; None when the log does not reach back (or the
        subscriber's table came from another cache: a viewer's view of a scene changes
        cache when its first token is hidden or its last one shown)."""
        cached = self._cache.get(source)
        if cached is None or source != sub.source or sub.revision not in cached.log:
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

    def _table(self, sid: str, lines: bool, viewer: bool) -> tuple[CacheKey, dict[Key,
                                                                              AnnotationOut]]:
        """The annotations a gm (or a viewer) sees now, and the cache they come from. A
        viewer's are computed on the scene without its hidden tokens, so nothing it gets
        names them or shows their effect (no soft cover, no flanking from them); while no
        token is hidden, that is the gm's table."""
        scene = self.scenes[sid]
        if viewer and any(c.hidden for c in scene.geometry.creatures):
            key = (sid, lines, True)
            return key, self._annotations(key, self._visible_geometry(scene))
        key = (sid, lines, False)
        return key, self._annotations(key, scene.geometry)

    def _current(self, sid: str, lines: bool) -> dict[Key, AnnotationOut]:
        """The gm's annotations of the scene's current revision."""
        return self._table(sid, lines, False)[1]

    def _visible_geometry(self, scene: scenes.Scene) -> SceneGeom:
        """The scene's geometry without its hidden tokens (walls shared: wall arrays cached
        for the full geometry are found again)."""
        held = self._visible.get(scene.id)
        if held is not None and held[0] == scene.revision:
            return held[1]
        geom = scene.geometry
        visible = replace(geom, creatures=tuple(c for c in geom.creatures if not c.hidden))
        self._visible[scene.id] = (scene.revision, visible)
        return visible

    def _annotations(self, key: CacheKey, geom: SceneGeom) -> dict[Key, AnnotationOut]:
        """Annotations of `geom` (the scene's current revision, or its visible part),
        recomputing only the pairs the changes since the cached revision can have touched.
        Tables are never changed once built: a new revision copies the last one and
        replaces what it recomputes, so unchanged entries stay the same objects."""
        steps = self._annotating(key, geom, sliced=False)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                table: dict[Key, AnnotationOut] = done.value
                return table

    def _annotating(self, key: CacheKey, geom: SceneGeom, sliced: bool
                    ) -> Generator[None, None, dict[Key, AnnotationOut]]:
        """`_annotations` as steps: with `sliced`, the ruleset is called on slices of the
        pairs, and the generator yields after each slice (SLICE_S of work) so that the
        server's worker can serve other requests in between. Whatever ran meanwhile, the
        table is only installed if the scene and this cache are still the ones it started
        from (else it is dropped, and `warm` starts again from the newer state)."""
        sid, lines, without_hidden = key
        scene = self.scenes[sid]
        cached = self._cache.get(key)
        start, epoch = cached, self._epochs.get(sid, 0)
        if cached is not None and cached.revision == scene.revision:
            return cached.table
        # The copy `prepare` made of this cache's table, if any: taken or dropped now.
        spare = self._spares.pop(key, None)
        # Any table is its geometry's annotations, so the other view's table is as good a
        # starting point when it is closer to this geometry: hiding or showing a token then
        # costs the pairs it touches, as creating or deleting it would, not a whole matrix,
        # while a move with tokens hidden starts from the viewers' own last table (from the
        # gm's, every hidden token would count as changed).
        other = self._cache.get((sid, lines, not without_hidden))
        own_log = True
        if other is not None and (cached is None
                                  or _changes(other.geom, geom) < _changes(cached.geom, geom)):
            cached, own_log = other, False
        # The modes where creatures in the way count (the only ones a creature stepping into
        # or out of the way can change).
        way_modes = tuple(scene.ruleset.in_the_way_modes(scene.options))
        way_values = tuple(m.value for m in way_modes)
        affected = None
        if (cached is not None and cached.ruleset is scene.ruleset
                and cached.options == scene.options):
            may_change = None if lines or cached.settled is None else cached.settled.view
            affected = affected_by(cached.geom, geom, scene.ruleset.sight_points(),
                                   may_change)
            if affected is not None:
                # A ruleset reading more than the pair's lines and reach (who stands near the
                # target) widens what must be recomputed in every respect.
                whole = frozenset(scene.ruleset.widen(cached.geom, geom, scene.options,
                                                      set(affected.whole)))
                affected = Affected(whole, affected.in_the_way - whole)
        touched: frozenset[Key] | None
        if affected is None:
            if sliced:
                ids = [c.id for c in geom.creatures]
                done = yield from self._slices(
                    sid, geom, [(a, t) for a in ids for t in ids if a != t],
                    tuple(AttackMode), lines)
                if not self._still(key, start, epoch):
                    return {}
            else:
                done = list(map(annotation_out, scene.ruleset.annotate(geom, scene.options,
                                                                       lines=lines)))
            keys = self._keys.setdefault(sid, {})
            table = {keys.setdefault(k, k): o
                     for o in done for k in ((o.attacker, o.target, o.mode),)}
            touched = None
        else:
            assert cached is not None
            # dict.copy clones the hash table as is (a dict built by `dict(...)` re-inserts
            # every entry once the table has had a deletion: 30,000 entries per revision);
            # `prepare` has usually made it already, between the last change and this one
            # (a copy of this very table: not of another view's, nor of an older one).
            table = spare[1] if spare is not None and spare[0] is cached else cached.table.copy()
            gone = {c.id for c in cached.geom.creatures} - {c.id for c in geom.creatures}
            # Pairs only a creature in the way may have changed: only the modes where
            # creatures in the way count.
            in_the_way = set(affected.in_the_way)
            if not lines and cached.settled is not None:
                # ...and only those whose degree a creature in the way can still change.
                may = cached.settled.pair
                in_the_way = {pair for pair in in_the_way if may(*pair)}
            whole_pairs, way_pairs = set(affected.whole), in_the_way
            lent: list[AnnotationOut] = []
            if without_hidden:
                whole_pairs, way_pairs, lent = self._lend(key, geom, whole_pairs, way_pairs,
                                                          way_values)
            if way_pairs and len(way_modes) == len(_MODE_VALUES):
                # Creatures in the way count in every mode: one call for all the pairs (a
                # call has fixed costs: the ruleset's engine for the scene).
                whole_pairs, way_pairs = whole_pairs | way_pairs, set()
            outs: list[AnnotationOut] = []
            if sliced:
                outs = yield from self._slices(sid, geom, sorted(whole_pairs),
                                               tuple(AttackMode), lines)
                if way_pairs and way_modes:
                    outs += yield from self._slices(sid, geom, sorted(way_pairs),
                                                    way_modes, lines)
                if not self._still(key, start, epoch):
                    return {}
            else:
                results = scene.ruleset.annotate(geom, scene.options,
                                                 pairs=sorted(whole_pairs),
                                                 lines=lines) if whole_pairs else []
                if way_pairs and way_modes:
                    results += scene.ruleset.annotate(geom, scene.options,
                                                      pairs=sorted(way_pairs),
                                                      modes=way_modes, lines=lines)
            old_table = cached.table
            keys = self._keys.setdefault(sid, {})
            if len(keys) > 2 * len(old_table) + 1024:
                keys.clear()  # mostly keys of pairs long gone
            # A few hundred entries a move: built-in methods mapped over lists, not a
            # Python loop body per entry.
            if not sliced:
                outs = list(map(annotation_out, results))
            outs += lent
            fresh = [(o.attacker, o.target, o.mode) for o in outs]
            recomputed = set(fresh)
            # An unchanged entry stays the same object, for every diff; a recomputed one is
            # replaced in place (no deletion: the next copy stays a clone). A table is
            # written only with the scene's own key tuples (one per pair and mode, long
            # since untracked by the collector): a dict written with a key the collector
            # still tracks is tracked from then on, and every young collection would walk
            # its 30,000 entries.
            changed: set[Key] = set()
            for k, old, new in zip(fresh, map(old_table.get, fresh), outs, strict=True):
                if old is None or old != new:
                    k = keys.setdefault(k, k)
                    table[k] = new
                    changed.add(k)
            # Stale entries not computed again are pairs that no longer exist: when no
            # creature went and every pair and mode asked for came back, there are none.
            dropped: set[Key] = set()
            asked = len(affected.whole) * len(_MODE_VALUES) + (
                len(in_the_way) * len(way_values) if in_the_way and way_modes else 0)
            if gone or len(recomputed) != asked:
                stale = {(a, t, m) for a, t in affected.whole for m in _MODE_VALUES}
                stale.update((a, t, m) for a, t in in_the_way for m in way_values)
                if gone:
                    stale.update(k for k in cached.table if k[0] in gone or k[1] in gone)
                dropped = stale - recomputed
                for k in dropped:
                    table.pop(k, None)
            touched = frozenset(changed | dropped)
        log = dict(cached.log) if cached is not None and own_log else {}
        log[scene.revision] = touched
        while len(log) > CHANGE_LOG:
            del log[min(log)]
        known = None
        if not lines:
            can_change = {d.value: scene.ruleset.in_the_way_may_change(d) for d in Degree}
            known = settled_after(cached.settled if cached is not None else None,
                                  tuple(c.id for c in geom.creatures), table, touched,
                                  way_values, can_change)
        replaced = self._cache.get(key)
        if replaced is not None:
            self._retired[key] = replaced
        self._cache[key] = _Cached(scene.revision, geom, scene.ruleset, scene.options,
                                   table, log, known)
        return table

    def _still(self, key: CacheKey, start: _Cached | None, epoch: int) -> bool:
        """Whether a table started from cache `start` may still be installed: its scene is
        loaded and was not unloaded since, and nobody installed a newer one meanwhile."""
        return (key[0] in self.scenes and self._epochs.get(key[0], 0) == epoch
                and self._cache.get(key) is start)

    def _slices(self, sid: str, geom: SceneGeom, pairs: list[Pair],
                modes: tuple[AttackMode, ...], lines: bool
                ) -> Generator[None, None, list[AnnotationOut]]:
        """The ruleset's annotations of these pairs (as sent), computed a slice at a time,
        yielding after each slice (work that fits in one slice costs one call and no
        yield). A slice is sized to take about SLICE_S, from what the last
        slices of this scene took (kept from one table to the next)."""
        scene = self.scenes[sid]
        out: list[AnnotationOut] = []
        size = self._pace.get(sid, FIRST_SLICE)
        k = 0
        while k < len(pairs):
            chunk = pairs[k:k + size]
            t0 = time.perf_counter()
            out += map(annotation_out, scene.ruleset.annotate(
                geom, scene.options, pairs=chunk, modes=modes, lines=lines))
            spent = time.perf_counter() - t0
            k += len(chunk)
            if len(chunk) == size:
                # At most twice or half the last size: one slow or quick slice (a pair
                # behind many walls, a collection) does not throw the pace off.
                size = max(1, size // 2, min(2 * size, int(size * SLICE_S / max(spent, 1e-6))))
                self._pace[sid] = size
            if k < len(pairs) or k > len(chunk):
                # (After the last of several slices too: installing the table is work of
                # its own, in the next step.)
                yield
        return out

    def too_many_pairs(self, scene: scenes.Scene, path: str) -> None:
        """Refuse (too_large) a whole table of this scene when it would pass the limit."""
        n = len(scene.geometry.creatures)
        if n * (n - 1) > LIMITS.max_table_pairs:
            raise ClientError(
                ErrorCode.TOO_LARGE,
                f"{path}: scene {scene.id!r} has {n} tokens, {n * (n - 1)} pairs of attacker "
                f"and target, and a subscription computes every pair; the limit is "
                f"{LIMITS.max_table_pairs} pairs (welcome.limits.maxTablePairs, about "
                f"{_tokens_for(LIMITS.max_table_pairs)} tokens): ask for single pairs with "
                "cover.query, or split the scene", path=path)

    def warm(self, tables: Iterable[tuple[str, bool, bool]]) -> Generator[None, None, None]:
        """Compute these tables (scene, lines, viewer) for their scenes' current revision
        in slices, yielding between slices so that the server's worker can serve other
        requests; what is computed is left in the cache, where the request that needed it
        finds it. A scene that changes faster than its table is computed is left, after a
        few rounds, to that request (the last round is a recent revision's increment)."""
        for sid, lines, viewer in tables:
            for _ in range(WARM_ROUNDS):
                scene = self.scenes.get(sid)
                if scene is None or self._over_limit(scene):
                    break
                if viewer and any(c.hidden for c in scene.geometry.creatures):
                    key, geom = (sid, lines, True), self._visible_geometry(scene)
                else:
                    key, geom = (sid, lines, False), scene.geometry
                cached = self._cache.get(key)
                if cached is not None and cached.revision == scene.revision:
                    break
                yield from self._annotating(key, geom, sliced=True)

    @staticmethod
    def _over_limit(scene: scenes.Scene) -> bool:
        n = len(scene.geometry.creatures)
        return n * (n - 1) > LIMITS.max_table_pairs

    def warm_frame(self, conn: int, frame: bytes | str) -> Generator[None, None, None]:
        """`warm` for what this frame will need: a subscription's table (small frames
        only: a subscription is a few dozen bytes; anything else needs no table)."""
        state = self.connections.get(conn)
        if state is None or not state.greeted or len(frame) > WARM_FRAME_BYTES:
            return
        try:
            request = parse_request(decode_frame(frame))
        except ClientError:
            return
        if isinstance(request, Subscribe):
            yield from self.warm([(request.scene, request.lines, state.role.viewer)])

    def warm_delta(self, conns: Iterable[int], sid: str) -> Generator[None, None, None]:
        """`warm` for the deltas of these subscribers of scene `sid`."""
        tables = []
        for conn in conns:
            state = self.connections.get(conn)
            sub = state.subscriptions.get(sid) if state is not None else None
            if sub is not None and (sid, sub.lines, sub.viewer) not in tables:
                tables.append((sid, sub.lines, sub.viewer))
        yield from self.warm(tables)

    def prepare(self, sid: str) -> None:
        """Idle-time work once a change of this scene has gone out to its subscribers: the
        tables its last change replaced are let go, and each table of its current revision
        gets the copy its next revision will start from. Both are work of the next change
        otherwise (measured with 100 tokens: 0.3-0.45 ms of a move's ~7 ms, the copy of
        30,000 entries and the release of the old table), done here while nothing waits."""
        scene = self.scenes.get(sid)
        for key in _cache_keys(sid):
            self._retired.pop(key, None)
            cached = self._cache.get(key)
            if scene is None or cached is None or cached.revision != scene.revision:
                # Only tables still in use get a spare (one is computed each change).
                self._spares.pop(key, None)
                continue
            held = self._spares.get(key)
            if held is None or held[0] is not cached:
                self._spares[key] = (cached, cached.table.copy())

    def _lend(self, key: CacheKey, geom: SceneGeom, whole: set[Pair], way: set[Pair],
              way_values: tuple[str, ...]) -> tuple[set[Pair], set[Pair], list[AnnotationOut]]:
        """For the viewers' table (`geom`: the scene without its hidden tokens): of the pairs
        to recompute (`whole` in every mode, `way` in the modes creatures in the way count
        for), those whose annotations the hidden tokens cannot touch are the gm's, already
        computed at this revision: they are lent from the gm's table, and only the others
        are left to compute. The pairs the hidden tokens can touch are what the scene with
        them and without them differ in, found as for any change (geometry.incremental:
        the hidden tokens as creatures that came, the ruleset widening as it does)."""
        sid, lines, _ = key
        scene = self.scenes[sid]
        donor = self._cache.get((sid, lines, False))
        if (donor is None or donor.revision != scene.revision) and any(
                (sub := c.subscriptions.get(sid)) is not None and not sub.viewer
                and sub.lines == lines for c in self.connections.values()):
            # A gm subscriber will want its table at this revision too: computed first, it
            # is lent from.
            self._annotations((sid, lines, False), scene.geometry)
            donor = self._cache.get((sid, lines, False))
        if (donor is None or donor.revision != scene.revision
                or donor.ruleset is not scene.ruleset or donor.options != scene.options
                or not (whole or way)):
            return whole, way, []
        differ = affected_by(geom, donor.geom, scene.ruleset.sight_points(),
                             only=whole | way)
        if differ is None:
            return whole, way, []
        touched = set(scene.ruleset.widen(geom, donor.geom, scene.options, set(differ.whole)))
        touched |= differ.in_the_way
        lent: list[AnnotationOut] = []
        held = donor.table.get
        for pairs, values in ((whole, _MODE_VALUES), (way, way_values)):
            for pair in pairs - touched:
                for m in values:
                    found = held((pair[0], pair[1], m))
                    if found is not None:
                        lent.append(found)
        return whole & touched, way & touched, lent

    def _filtered(self, sid: str, sub: Subscription) -> tuple[CacheKey,
                                                              dict[Key, AnnotationOut]]:
        source, table = self._table(sid, sub.lines, sub.viewer)
        modes = {m.value for m in sub.modes}
        if len(modes) == len(AttackMode):
            return source, table
        return source, {k: v for k, v in table.items() if k[2] in modes}

    def _subscribe(self, state: Connection, request: Subscribe, binary: bool) -> list[Output]:
        scene = self._scene(request.scene)
        if (request.scene not in state.subscriptions
                and len(state.subscriptions) >= LIMITS.max_subscriptions):
            raise ClientError(ErrorCode.TOO_LARGE,
                              f"$.scene: this connection has {len(state.subscriptions)} "
                              f"subscriptions, the limit is {LIMITS.max_subscriptions}",
                              path="$.scene")
        self.too_many_pairs(scene, "$.scene")
        sub = Subscription(request.scene, request.lines,
                           tuple(AttackMode(m) for m in request.modes), binary,
                           state.role.viewer, compact=state.compact)
        sub.source, sub.sent = self._filtered(request.scene, sub)
        sub.revision = scene.revision
        sub.breath_sent = self._breath_visible(request.scene, state.role.viewer)
        state.subscriptions[request.scene] = sub
        msg = Annotations(request.scene, scene.revision, True, list(sub.sent.values()), [],
                          list(sub.breath_sent.values()), request.id)
        # The scene's focus follows its full set (none is sent while nobody set one).
        return [Send(state.id, encode_annotations(msg, binary, state.compact)),
                *self._focus_news(request.scene, only=state.id)]

    def _query(self, request: CoverQuery, viewer: bool = False) -> Response:
        scene = self._scene(request.scene)
        self._token(scene, request.attacker, viewer, "$.attacker")
        self._token(scene, request.target, viewer, "$.target")
        if request.attacker == request.target:
            raise ClientError(ErrorCode.INVALID,
                              f"$.target: a token cannot attack itself ({request.target!r})",
                              path="$.target")
        geom = self._visible_geometry(scene) if viewer else scene.geometry
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
        geom = self._visible_geometry(scene) if viewer else scene.geometry
        hits = scene.ruleset.area_hits(geom, scene.options, template)
        return AreaResult(request.scene, scene.revision, [
            AreaHitOut(h.target, h.cover.value,
                       [modifier_out(m) for m in h.modifiers],
                       {f.value: (f in h.flags) for f in _AREA_FLAGS}, h.obstructions)
            for h in hits], request.id)

    def _friendly_fire(self, request: FriendlyFireResolve,
                       viewer: bool = False) -> FriendlyFireResult:
        """Enchanted Realms' friendly-fire rule for one or more attacks (split dice), with
        every step; the scene is read, never changed, so viewers may ask too: for them it
        is resolved on the scene without its hidden tokens (none is a candidate or the
        creature struck, none gives cover), and a hidden id is an unknown one."""
        scene = self._scene(request.scene)
        if scene.ruleset.name != "realms":
            raise ClientError(ErrorCode.UNSUPPORTED,
                              f"$.scene: friendly fire is a rule of ruleset 'realms'; scene "
                              f"{request.scene!r} uses {scene.ruleset.name!r}", path="$.scene")
        self._check_shots(scene, request, viewer)
        geom = self._visible_geometry(scene) if viewer else scene.geometry
        seed = request.seed
        rng: random.Random | None = None

        def roll(sides: int) -> int:
            nonlocal rng, seed
            if rng is None:
                if seed is None:
                    # 53 bits: a seed a JavaScript client can hold exactly, to send it back.
                    seed = self._seeds.getrandbits(53)
                rng = random.Random(seed)
            return rng.randint(1, sides)

        out = []
        for k, attack in enumerate(request.attacks):
            (ann,) = scene.ruleset.annotate(geom, scene.options,
                                            pairs=[(request.attacker, attack.target)],
                                            modes=[AttackMode.RANGED])
            shot, trigger, first = friendlyfire.aimed(ann, request.defense[attack.target],
                                                      request.bonus)
            rolled: list[str] = []
            dice = attack.dice
            if dice is None:
                assert attack.count is not None
                dice = [roll(20) for _ in range(attack.count)]
                rolled.extend("d20" for _ in dice)

            try:
                cands = friendlyfire.candidates(geom, request.attacker, attack.target)
            except ValueError as exc:
                raise ClientError(ErrorCode.INVALID, f"$.attacks[{k}].target: {exc}",
                                  path=f"$.attacks[{k}].target") from None
            faces = friendlyfire.faces(cands)
            if attack.d10 is not None and attack.d10 > faces:
                raise ClientError(ErrorCode.INVALID,
                                  f"$.attacks[{k}].d10: the friendly-fire die of this shot has "
                                  f"{faces} faces ({len(cands)} candidate cells and "
                                  f"{friendlyfire.EMPTY_SLOTS} empty slots), not "
                                  f"{attack.d10}", path=f"$.attacks[{k}].d10")

            def d10(attack: Any = attack, rolled: list[str] = rolled,
                    faces: int = faces) -> int:
                if attack.d10 is not None:
                    return int(attack.d10)
                rolled.append(f"d{faces}")
                return roll(faces)
            res = friendlyfire.resolve(shot, dice, d10, cands, request.defense, k + 1)
            out.append(FriendlyFireOut(
                attack.target, ann.cover.value, trigger, shot.defense, shot.modifier,
                [_die(d) for d in res.dice], res.hit_target, res.friendly_fire,
                [CandidateOut(c.slot, c.cell, c.centre[0], c.centre[1], c.role, c.token,
                              c.note) for c in cands],
                res.d10, res.slot, res.struck, [_die(d) for d in res.moved],
                res.defense_struck, res.hit_struck, rolled, [first, *res.steps], faces))
        return FriendlyFireResult(request.scene, scene.revision, request.attacker, seed, out,
                                  request.id)

    def _check_shots(self, scene: scenes.Scene, request: FriendlyFireResolve,
                     viewer: bool = False) -> None:
        """Every id names a token of the scene (a visible one, for a viewer) and every
        attack says its dice."""
        self._token(scene, request.attacker, viewer, "$.attacker")
        for k, attack in enumerate(request.attacks):
            path = f"$.attacks[{k}]"
            self._token(scene, attack.target, viewer, f"{path}.target")
            if attack.target == request.attacker:
                raise ClientError(ErrorCode.INVALID, f"{path}.target: a token cannot shoot "
                                  f"itself ({attack.target!r})", path=f"{path}.target")
            if attack.dice is None and attack.count is None:
                raise ClientError(ErrorCode.INVALID, f"{path}.dice: give the rolled d20s "
                                  "(dice) or how many the server rolls (count)",
                                  path=f"{path}.dice")
            if attack.dice is not None and attack.count is not None \
                    and attack.count != len(attack.dice):
                raise ClientError(ErrorCode.INVALID, f"{path}.count: {attack.count} does not "
                                  f"match the {len(attack.dice)} dice given",
                                  path=f"{path}.count")
            if attack.target not in request.defense:
                raise ClientError(ErrorCode.INVALID, f"$.defense: no Defense given for the "
                                  f"target {attack.target!r} of attack {k}", path="$.defense")
        for tid in request.defense:
            self._token(scene, tid, viewer, "$.defense")

    # -- drowning and suffocating ---------------------------------------------------------

    def _breath_table(self, sid: str) -> dict[str, BreathOut]:
        table = self._breath.get(sid)
        if table is None:
            try:
                stored = self.store.scene_breath(sid)
            except StoreUnavailable as exc:
                raise _unavailable(exc, "the air of its tokens is unknown for now") from None
            table = {t: _DECODE_BREATH.decode(text) for t, text in stored.items()}
            self._breath[sid] = table
        return table

    def _breath_visible(self, sid: str, viewer: bool = False) -> dict[str, BreathOut]:
        """The stored air of the scene's current tokens (a deleted token's is kept), without
        hidden tokens' for a viewer."""
        tokens = self.scenes[sid].tokens
        return {t: v for t, v in self._breath_table(sid).items()
                if t in tokens and not (viewer and tokens[t].hidden)}

    def _token(self, scene: scenes.Scene, tid: str, viewer: bool = False,
               path: str = "$.token") -> TokenDoc:
        """The token `tid` (named at `path`); for a viewer a hidden token does not exist:
        the same error as an unknown id."""
        doc = scene.tokens.get(tid)
        if doc is None or (viewer and doc.hidden):
            raise ClientError(ErrorCode.UNKNOWN_TOKEN, f"{path}: no token {tid!r} in scene "
                              f"{scene.id!r}", path=path)
        return doc

    def _turn_end(self, state: Connection, request: TurnEnd, binary: bool) -> list[Output]:
        """A token's turn ended: spend or restore its air, roll its suffocation save, store
        the new state (one transaction) and tell the scene's subscribers."""
        scene = self._scene(request.scene)
        token = self._token(scene, request.token)
        own = token.flags.covercast
        con = request.con if request.con is not None else (
            own.con if own is not None and own.con is not None else 0)
        fortitude = request.fortitude if request.fortitude is not None else (
            own.fortitude if own is not None and own.fortitude is not None else 0)
        breathing = request.breathing
        if breathing is None:
            geom = scene.geometry
            k = next(i for i, c in enumerate(geom.creatures) if c.id == token.id)
            breathing = not bool(submerged(geom)[k])
        table = self._breath_table(scene.id)
        before = _breath_value(table[token.id]) if token.id in table else Breath.full(con)
        # 53 bits: a seed a JavaScript client can hold exactly, to send it back.
        seed = request.seed if request.seed is not None else self._seeds.getrandbits(53)
        dice = _Dice(request.rolls, seed)
        event = TurnEvent(attacked=request.attacked, cast_spell=request.cast_spell,
                          spoke=request.spoke, critical_hits=request.critical_hits,
                          crit_failed_damage_saves=request.crit_failed_damage_saves,
                          breathing=breathing, con=con, fortitude=fortitude, hp=request.hp)
        after, steps = end_turn(before, event, dice)  # raises on bad rolls: nothing stored
        out = breath_out(token.id, after, steps, seed if dice.rolled else None)
        try:
            self.store.put_breath(scene.id, token.id, _ENCODE_BREATH.encode(out).decode())
        except StoreUnavailable as exc:
            raise _unavailable(exc, "the turn end was not applied") from None
        self._breath[scene.id] = {**table, token.id: out}
        reply: list[Output] = [Send(state.id, encode(BreathState(scene.id, [out], request.id),
                                                     binary))]
        reply.extend(Notify(conn, scene.id) for conn in self.subscribers(scene.id))
        return reply

    def _breath_get(self, request: BreathGet, viewer: bool = False) -> Response:
        scene = self._scene(request.scene)
        if request.token is None:
            return BreathState(scene.id, list(self._breath_visible(scene.id, viewer).values()),
                               request.id)
        token = self._token(scene, request.token, viewer)
        stored = self._breath_table(scene.id).get(token.id)
        if stored is None:
            own = token.flags.covercast
            con = own.con if own is not None and own.con is not None else 0
            stored = breath_out(token.id, Breath.full(con), (), None)
        return BreathState(scene.id, [stored], request.id)

    # -- introspection for tests and tools -------------------------------------------------

    def subscribers(self, sid: str) -> Iterable[int]:
        return [c.id for c in self.connections.values() if sid in c.subscriptions]



def _unavailable(exc: StoreUnavailable, what: str) -> ClientError:
    """The client's error for a store that cannot be used now (the store logged it)."""
    return ClientError(ErrorCode.UNAVAILABLE, f"{exc}; {what}, try again later")


def _die(d: friendlyfire.Die) -> DieOut:
    return DieOut(d.raw, d.total, d.natural20, d.hit)


class _Dice:
    """The client's dice where it sent them, else dice drawn from random.Random(seed) in the
    order the rules need them (the d20, then each d10), so an outcome can be replayed."""

    def __init__(self, rolls: Rolls | None, seed: int) -> None:
        self.given = rolls if rolls is not None else Rolls()
        self.rng = random.Random(seed)
        self.rolled = False

    def d20(self) -> int:
        if self.given.d20 is not None:
            return self.given.d20
        self.rolled = True
        return self.rng.randint(1, 20)

    def d10(self, n: int) -> tuple[int, ...]:
        if self.given.d10 is not None:
            if len(self.given.d10) != n:
                raise ClientError(ErrorCode.INVALID,
                                  f"$.rolls.d10: this save's damage is {n}d10, got "
                                  f"{len(self.given.d10)} "
                                  f"{'die' if len(self.given.d10) == 1 else 'dice'} "
                                  f"{self.given.d10}",
                                  path="$.rolls.d10")
            return tuple(self.given.d10)
        self.rolled = True
        return tuple(self.rng.randint(1, 10) for _ in range(n))


_ENCODE_BREATH = msgspec.json.Encoder()
_DECODE_BREATH = msgspec.json.Decoder(BreathOut)


def step_out(s: Step) -> StepOut:
    return StepOut(s.kind.value, s.air, s.detail, s.dc, s.d20, s.modifier, s.total,
                   None if s.outcome is None else s.outcome.value,
                   None if s.dice is None else list(s.dice), s.damage)


def breath_out(token: str, b: Breath, steps: Iterable[Step], seed: int | None) -> BreathOut:
    """A token's air as it travels on the wire (and as the store keeps it)."""
    return BreathOut(token, b.air, b.max_air, b.suffocating, b.unconscious, b.dead, b.checks,
                     b.next_dc if b.suffocating and not b.dead else None,
                     b.next_dice if b.suffocating and not b.dead else None,
                     [step_out(s) for s in steps], seed)


def _breath_value(o: BreathOut) -> Breath:
    return Breath(o.max_air, o.air, o.suffocating, o.checks, o.unconscious, o.dead)


def _changes(old: SceneGeom, new: SceneGeom) -> float:
    """How many creatures and walls differ between two geometries (infinite when the grid
    or the regions do): how much recomputing `new` from `old`'s annotations costs, roughly."""
    if (old.grid != new.grid or old.regions != new.regions or old.water != new.water
            or old.underwater != new.underwater):
        return float("inf")
    before = {c.id: c for c in old.creatures}
    after = {c.id: c for c in new.creatures}
    n = sum(before.get(i) != after.get(i) for i in before.keys() | after.keys())
    if old.walls is not new.walls:
        n += len(set(old.walls).symmetric_difference(new.walls))
    return n


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
