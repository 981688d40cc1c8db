"""The session core, sans I/O: frames in, frames out.

Rule of this module: `Core.receive(conn, frame)` takes one frame from one connection and
returns what to send: replies, closes, and a `Notify` for every subscriber of a scene it
changed, whose delta `Core.delta(conn, scene)` builds when that connection is ready for
it (so bursts coalesce, latest state wins); it never awaits, sleeps or touches a socket.
State flows one way: validated request -> new Scene value -> ruleset annotations (only the
pairs some subscriber's filter selects, and of those only the ones a change can touch, are
recomputed) -> delta against what each subscriber was last sent (server/subscriptions.py).
Requests of one concern live in their own sans-I/O module, which the Core calls with a
Scene value: roles and access tokens in server/roles.py, large frames read ahead in
server/ahead.py, drowning and suffocating in server/drowning.py, friendly fire in
server/friendly_fire.py, the scene's focus in server/focus.py.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from geometry.incremental import Affected
from geometry.incremental import affected as affected_by
from geometry.model import SceneGeom, point_creature
from geometry.templates import Template, TemplateKind
from rulesets import REGISTRY
from rulesets.base import Annotation, AttackMode, Degree, Flag, Modifier
from server import ahead as ahead_reading
from server import drowning, durable, friendly_fire
from server import focus as focusing
from server import scene as scenes
from server.compact import encode_annotations
from server.errors import ClientError, ErrorCode, unavailable
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
    CoverQuery,
    CoverResult,
    Error,
    FriendlyFireResolve,
    FriendlyFireResult,
    Hello,
    LineOut,
    ModifierOut,
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
from server.settled import Settled
from server.settled import after as settled_after
from server.store import Store, StoreUnavailable
from server.subscriptions import (
    EVERYTHING,
    Filter,
    Frames,
    Subscription,
    Table,
    full_set,
    open_subscription,
    pairs_of,
    refuse_too_large,
)
from server.subscriptions import SIDES as _SIDES
from server.subscriptions import need as pairs_needed

log = logging.getLogger("covercast.session")

SERVER_NAME = "covercast"
SERVER_VERSION = "0.1.0"
POLICY_VIOLATION = 1008
#: Cached revisions whose changed keys are remembered for cheap deltas.
CHANGE_LOG = 32
#: Seconds of geometry a slice of a table computed for the server takes (`warm`): the
#: longest another scene's request waits for the worker behind it.
SLICE_S = 0.025
#: Pairs in the first slice of a scene whose pace is not known yet (the pace then
#: doubles or halves, slice by slice, towards SLICE_S).
FIRST_SLICE = 16
#: Rounds `warm` gives a scene that changes while its table is computed.
WARM_ROUNDS = 4
#: Pairs a change recomputes in one call of the ruleset, every mode, rather than two (the
#: pairs in the way in their modes only): below this, a call's fixed cost is the larger.
_ONE_CALL = 256
#: Frames larger than this are never subscriptions: `warm_frame` does not parse them.
WARM_FRAME_BYTES = 64 * 1024

Key = tuple[str, str, str]
Pair = tuple[str, str]
#: An annotation table: (scene, lines, without hidden tokens).
CacheKey = tuple[str, bool, bool]


def _cache_keys(sid: str) -> tuple[CacheKey, ...]:
    """Every table a scene can have: with or without lines, the gm's or the viewers'."""
    return tuple((sid, lines, hidden_out) for lines in (False, True)
                 for hidden_out in (False, True))


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
    #: Tables without lines of every pair: the pairs a creature in the way can still
    #: change.
    settled: Settled | None = None
    #: The pairs the table holds (None: every pair of `geom`): what its subscribers'
    #: filters selected when it was computed.
    covered: frozenset[Pair] | None = None


def _covers(covered: frozenset[Pair] | None, need: frozenset[Pair] | None) -> bool:
    """Whether a table holding `covered` holds every pair of `need` (None: all)."""
    return covered is None or (need is not None and need <= covered)


def _all_pairs(geom: SceneGeom) -> frozenset[Pair]:
    ids = [c.id for c in geom.creatures]
    return frozenset((a, t) for a in ids for t in ids if a != t)


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
        # ":memory:" keeps nothing after the process ends: scenes written there would never
        # be read back, so they are not written.
        self.keep_scenes = keep_scenes and self.store.path != ":memory:"
        # Large loads are written ahead of this thread, on the ahead thread's connection.
        self._backstage = self.store.backstage() if self.keep_scenes else None
        self._access = Access(access_token, player_token, overlay_token)
        self.access_token = access_token
        self.connections: dict[int, Connection] = {}
        self.scenes: dict[str, scenes.Scene] = {}
        self._next = 1
        # Per scene, lines flag and view (True: without hidden tokens): annotations at the
        # revision they were last computed for.
        self._cache: dict[CacheKey, _Cached] = {}
        # Per scene, delta frames to its current state, shared by its subscribers
        # (server/subscriptions.py).
        self._deltas = Frames()
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
        self._seeds = random.Random(seed)
        # Each token's air (drowning and suffocating), kept in the store.
        self.air = drowning.Air(self.store, self._seeds)
        # Per scene: the pair the gm pointed the table at (scene.focus), if any.
        self._focus: dict[str, focusing.Focus] = {}
        # Per scene: how many times it was unloaded (a table computed in slices is only
        # installed into the scene it was started for), and the seconds per pair its
        # pairs per slice its ruleset last took about SLICE_S for.
        self._epochs: dict[str, int] = {}
        self._pace: dict[str, int] = {}
        # The change the frame being handled was built into ahead, if it was.
        self._built: ahead_reading.Ahead | None = None
        # The generation of the store a load written ahead made current, if it did.
        self._installed: int | None = None
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

    def preload(self, request: SceneLoad, keep_stored: bool = True) -> bool:
        """Install a scene without a client (the demo scene at start-up); with
        `keep_stored`, a scene the store brought back under its id is kept instead, with
        its changes (False). ClientError (`unavailable`): it cannot be stored."""
        if keep_stored and request.scene.id in self.scenes:
            return False
        self._load(request)
        return True

    def restore(self, ids: Iterable[str] | None = None) -> list[str]:
        """Bring back the stored scenes `ids` (None: every stored one) at their stored
        revisions, as they were when their last change was acknowledged; the ids brought
        back. StoreError names a scene that cannot be read back; ValueError, one this Core
        holds already."""
        wanted = self.store.scene_ids() if ids is None else list(ids)
        held = [sid for sid in wanted if sid in self.scenes]
        if held:  # tables and subscribers are of the scene held: not to be swapped here
            raise ValueError(f"scene(s) already loaded: {', '.join(map(repr, held))}")
        for sid in wanted:
            self.scenes[sid] = durable.restore(self.store, sid)
        if wanted:
            log.info("state store %s: %d scene(s) restored: %s", self.store.path,
                     len(wanted), ", ".join(f"{sid!r} at revision {self.scenes[sid].revision}"
                                            for sid in wanted))
        return wanted

    # -- frames --------------------------------------------------------------------------

    def ahead(self, conn: int, frame: bytes | str) -> ahead_reading.Ahead | None:
        """Read `frame` (and build the scene it changes) the way `receive` will, off the
        Core's thread (server/ahead.py): safe to call from another thread, it only reads.
        None when the connection is not greeted (its frames are read by the Core)."""
        state = self.connections.get(conn)
        if state is None or not state.greeted:
            return None
        return ahead_reading.read(frame, state.role.viewer, WRITE_TYPES, dict(self.scenes),
                                  self._stage if self._backstage is not None else None,
                                  rows=self.keep_scenes)

    def _stage(self, scene: scenes.Scene) -> int:
        assert self._backstage is not None
        return durable.stage_load(self._backstage, scene)

    def sweep(self) -> None:
        """Off the Core's thread, on the ahead thread: the store's generations nobody reads
        any more (a replaced large load) deleted, a slice at a time."""
        if self._backstage is not None:
            self._backstage.sweep()

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
            if not state.greeted:
                reason = _reason(f"expected hello; {exc.message}")
                return [Close(conn, POLICY_VIOLATION, reason)]
            return [Send(conn, encode(self._error(exc, request_id(raw)), binary))]
        if not state.greeted:
            return self._hello(state, request, binary)
        staged = ahead.staged if ahead is not None else None
        try:
            self._built = ahead if ahead is not None and ahead.built else None
            self._installed = None
            return self._dispatch(state, request, binary)
        except ClientError as exc:
            return [Send(conn, encode(self._error(exc, request.id), binary))]
        except Exception:
            log.exception("bug while handling %s from connection %d",
                          type(request).__name__, conn)
            err = Error(ErrorCode.INTERNAL.value,
                        "internal error; the request was not applied", None, request.id)
            return [Send(conn, encode(err, binary))]
        finally:
            self._built = None
            if staged is not None and self._installed != staged:
                # Written ahead but not taken (the scene changed meanwhile, or the load
                # was refused): left to the sweep.
                assert isinstance(request, SceneLoad)
                self.store.abandon(request.scene.id, staged)

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
        built = self._built
        loaded = self._built_from(previous, lambda: scenes.load(
            request.scene, request.ruleset, request.options, previous))
        # Its documents were written ahead if the scene built ahead is the one loaded.
        staged = built.staged if built is not None and built.scene is loaded else None
        self._subscribed_limit(loaded)
        try:  # stored before it is installed: an acknowledged revision is never lost
            if self.keep_scenes:
                durable.save_load(self.store, loaded, previous, staged)
                self._installed = staged
        except StoreUnavailable as exc:
            raise unavailable(exc, "the scene was not loaded") from None
        self.scenes[sid] = loaded
        return sid

    def _unload(self, state: Connection, sid: str, rid: Any, binary: bool) -> list[Output]:
        """Forget a scene for good (the store too); its subscribers get a last, empty full
        set and are unsubscribed."""
        scene = self._scene(sid)
        try:
            if self.keep_scenes:
                durable.forget(self.store, sid)
        except StoreUnavailable as exc:
            raise unavailable(exc, "the scene stays loaded") from None
        del self.scenes[sid]
        self._epochs[sid] = self._epochs.get(sid, 0) + 1
        self._pace.pop(sid, None)
        self.air.forget(sid)
        for key in _cache_keys(sid):
            self._cache.pop(key, None)
            self._spares.pop(key, None)
            self._retired.pop(key, None)
        self._deltas.forget(sid)
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
                binary: bool, batch: tuple[str, Sequence[Any]]) -> list[Output]:
        """Apply a batch (`batch`: the kind of documents and the items it names)."""
        current = self._scene(sid)
        built = self._built
        # Raises before the swap: the scene stays as it was.
        changed = self._built_from(current, lambda: build(current))
        self._subscribed_limit(changed)
        try:  # stored before the swap: the scene never runs ahead of what is durable
            if self.keep_scenes:
                rows = (built.rows if built is not None and built.scene is changed
                        and built.rows is not None
                        else durable.change_rows(current, changed, *batch))
                durable.save_change(self.store, changed, rows)
        except StoreUnavailable as exc:
            raise unavailable(exc, "the change was not applied") from None
        self.scenes[sid] = changed
        return self._after_change(state, sid, rid, binary)

    def _built_from(self, base: scenes.Scene | None,
                    build: Callable[[], scenes.Scene]) -> scenes.Scene:
        """The changed scene: the one built ahead (server/ahead.py) if it was built from
        `base`, this very value, else `build()`; an error met building it ahead is raised
        as building it now would."""
        built, self._built = self._built, None
        if built is None or built.base is not base:
            return build()
        if built.refused is not None:
            raise built.refused
        assert built.scene is not None
        return built.scene

    def _subscribed_limit(self, scene: scenes.Scene) -> None:
        """A scene with subscribers may not grow past the table limit (their tables would
        be computed at every change), each subscription counted by the pairs its filter
        selects: refused, the scene left as it was."""
        if not self._over_limit(scene):
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

    def computed(self, conn: int, sid: str) -> bool:
        """Whether the annotations this subscriber's delta is built from are computed for
        the scene's current revision (its delta then only diffs and encodes, or hands over
        a frame already built); True when it has no delta to get."""
        state = self.connections.get(conn)
        sub = state.subscriptions.get(sid) if state is not None else None
        scene = self.scenes.get(sid)
        if sub is None or scene is None:
            return True
        key, geom = self._view_key(sid, sub.lines, sub.viewer)
        cached = self._cache.get(key)
        if cached is None or cached.revision != scene.revision:
            return False
        if cached.covered is None:
            return True
        return (not sub.filter.everything
                and pairs_of(sub.filter, geom.creatures) <= cached.covered)

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
                                  lambda: self._view_table(sid, sub.lines, sub.viewer))

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

    def _view_key(self, sid: str, lines: bool, viewer: bool) -> tuple[CacheKey, SceneGeom]:
        """The table a gm (or a viewer) sees, and the geometry it is of. A viewer's is the
        scene without its hidden tokens, so nothing it gets names them or shows their
        effect (no soft cover, no flanking from them); while no token is hidden, that is
        the gm's table."""
        scene = self.scenes[sid]
        if viewer and self._hides(scene):
            return (sid, lines, True), self._visible_geometry(scene)
        return (sid, lines, False), scene.geometry

    def _hides(self, scene: scenes.Scene) -> bool:
        """Whether the scene has hidden tokens (its visible geometry has fewer)."""
        return len(self._visible_geometry(scene).creatures) < len(scene.geometry.creatures)

    def _table(self, sid: str, lines: bool, viewer: bool) -> tuple[CacheKey, dict[Key,
                                                                              AnnotationOut]]:
        """Every annotation a gm (or a viewer) sees now, and the cache they come from."""
        key, geom = self._view_key(sid, lines, viewer)
        return key, self._annotations(key, geom)

    def _current(self, sid: str, lines: bool) -> dict[Key, AnnotationOut]:
        """The gm's annotations of the scene's current revision, every pair."""
        return self._table(sid, lines, False)[1]

    def _need(self, key: CacheKey, geom: SceneGeom,
              extra: Iterable[Filter] = ()) -> frozenset[Pair] | None:
        """The pairs of `geom` the subscribers of this table (and `extra`, a subscription
        being made) follow; None: every pair (an unfiltered subscriber)."""
        sid, lines, without_hidden = key
        hidden = self._hides(self.scenes[sid])
        filters = list(extra)
        for conn in self.connections.values():
            sub = conn.subscriptions.get(sid)
            if sub is not None and sub.lines == lines \
                    and (sub.viewer and hidden) == without_hidden:
                filters.append(sub.filter)
        return pairs_needed(filters, geom.creatures)

    def _view_table(self, sid: str, lines: bool, viewer: bool,
                    extra: Iterable[Filter] = ()) -> Table:
        """The table a gm's (or a viewer's) subscriptions are served from, holding the
        pairs they (and `extra`) follow, computed for the current revision."""
        key, geom = self._view_key(sid, lines, viewer)
        entries = self._annotations(key, geom, self._need(key, geom, extra))
        return Table(key, geom.creatures, entries, self._cache[key].log)

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

    def _annotations(self, key: CacheKey, geom: SceneGeom,
                     need: frozenset[Pair] | None = None) -> dict[Key, AnnotationOut]:
        """Annotations of `geom` (the scene's current revision, or its visible part) for
        the pairs of `need` (None: every pair; the table may hold more), recomputing only
        the pairs the changes since the cached revision can have touched, and those it did
        not hold. Tables are never changed once built: a new revision copies the last one
        and replaces what it recomputes, so unchanged entries stay the same objects."""
        steps = self._annotating(key, geom, sliced=False, need=need)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                table: dict[Key, AnnotationOut] = done.value
                return table

    def _annotating(self, key: CacheKey, geom: SceneGeom, sliced: bool,
                    need: frozenset[Pair] | None = None
                    ) -> Generator[None, None, dict[Key, AnnotationOut]]:
        """`_annotations` as steps: with `sliced`, the ruleset is called on slices of the
        pairs, and the generator yields after each slice (SLICE_S of work) so that the
        server's worker can serve other requests in between. Whatever ran meanwhile, the
        table is only installed if the scene and this cache are still the ones it started
        from (else it is dropped, and `warm` starts again from the newer state). A table
        for `need` holds exactly those pairs: pairs no subscriber follows any more are
        dropped, new ones computed whole (lazily: only when a delta or a subscription
        asks)."""
        sid, lines, without_hidden = key
        scene = self.scenes[sid]
        cached = self._cache.get(key)
        start, epoch = cached, self._epochs.get(sid, 0)
        if (cached is not None and cached.revision == scene.revision
                and _covers(cached.covered, need)):
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
                                   may_change, only=None if need is None else set(need))
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
                    sid, geom, [(a, t) for a in ids for t in ids if a != t]
                    if need is None else sorted(need), tuple(AttackMode), lines)
                if not self._still(key, start, epoch):
                    return {}
            elif need is None:
                done = list(map(annotation_out, scene.ruleset.annotate(geom, scene.options,
                                                                       lines=lines)))
            else:
                done = list(map(annotation_out, scene.ruleset.annotate(
                    geom, scene.options, pairs=sorted(need), lines=lines))) if need else []
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
            if need is not None:
                # With a filter, `affected` is exact for the pairs followed only.
                whole_pairs &= need
                way_pairs &= need
            if cached.covered is not None:
                # Pairs followed now that the table did not hold: computed whole.
                wanted = need if need is not None else _all_pairs(geom)
                whole_pairs |= wanted - cached.covered
                way_pairs -= whole_pairs
            asked_whole, asked_way = frozenset(whole_pairs), frozenset(way_pairs)
            lent: list[AnnotationOut] = []
            if without_hidden:
                whole_pairs, way_pairs, lent = self._lend(key, geom, whole_pairs, way_pairs,
                                                          way_values)
            if way_pairs and (len(way_modes) == len(_MODE_VALUES) or (
                    whole_pairs and len(whole_pairs) + len(way_pairs) <= _ONE_CALL)):
                # Creatures in the way count in every mode, or there are few pairs: one call
                # for all of them (a call has fixed costs, the ruleset's engine for the
                # scene: at 1,000 creatures more than a few pairs' work; the other modes of
                # a pair in the way come back as they were).
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
            asked = len(asked_whole) * len(_MODE_VALUES) + (
                len(asked_way) * len(way_values) if asked_way and way_modes else 0)
            if gone or len(recomputed) != asked:
                stale = {(a, t, m) for a, t in asked_whole for m in _MODE_VALUES}
                stale.update((a, t, m) for a, t in asked_way for m in way_values)
                if gone:
                    stale.update(k for k in cached.table if k[0] in gone or k[1] in gone)
                dropped = stale - recomputed
            if need is not None:
                # Pairs no subscriber follows any more leave the table.
                if cached.covered is None:
                    dropped.update(k for k in cached.table if (k[0], k[1]) not in need)
                else:
                    dropped.update((a, t, m) for a, t in cached.covered - need
                                   for m in _MODE_VALUES)
            dropped -= recomputed
            for k in dropped:
                table.pop(k, None)
            touched = frozenset(changed | dropped)
        log = dict(cached.log) if cached is not None and own_log else {}
        if scene.revision in log:
            # The same revision again, for pairs a new subscription follows.
            before = log[scene.revision]
            touched = None if before is None or touched is None else before | touched
        log[scene.revision] = touched
        while len(log) > CHANGE_LOG:
            del log[min(log)]
        known = None
        if not lines and need is None:
            can_change = {d.value: scene.ruleset.in_the_way_may_change(d) for d in Degree}
            known = settled_after(cached.settled if cached is not None else None,
                                  tuple(c.id for c in geom.creatures), table, touched,
                                  way_values, can_change)
        replaced = self._cache.get(key)
        if replaced is not None:
            self._retired[key] = replaced
        self._cache[key] = _Cached(scene.revision, geom, scene.ruleset, scene.options,
                                   table, log, known, need)
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
        refuse_too_large(EVERYTHING, scene.geometry.creatures, scene.id, path)

    def warm(self, tables: Iterable[tuple[str, bool, bool]]) -> Generator[None, None, None]:
        """Compute these tables (scene, lines, viewer), every pair, for their scenes'
        current revision in slices, yielding between slices so that the server's worker
        can serve other requests; what is computed is left in the cache, where the request
        that needed it finds it. A scene that changes faster than its table is computed is
        left, after a few rounds, to that request (the last round is a recent revision's
        increment)."""
        for sid, lines, viewer in tables:
            yield from self._warm(sid, lines, viewer, None)

    def _warm(self, sid: str, lines: bool, viewer: bool,
              extra: tuple[Filter, ...] | None) -> Generator[None, None, None]:
        """`warm` for one table: every pair (`extra` None), or the pairs its subscribers
        and `extra` follow."""
        for _ in range(WARM_ROUNDS):
            scene = self.scenes.get(sid)
            if scene is None:
                break
            key, geom = self._view_key(sid, lines, viewer)
            need = None if extra is None else self._need(key, geom, extra)
            if len(need) > LIMITS.max_table_pairs if need is not None \
                    else self._over_limit(scene):
                break
            cached = self._cache.get(key)
            if (cached is not None and cached.revision == scene.revision
                    and _covers(cached.covered, need)):
                break
            yield from self._annotating(key, geom, sliced=True, need=need)

    @staticmethod
    def _over_limit(scene: scenes.Scene) -> bool:
        n = len(scene.tokens)  # one creature per token; no geometry built for counting
        return n * (n - 1) > LIMITS.max_table_pairs

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
            yield from self._warm(request.scene, request.lines, state.role.viewer, (flt,))

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
            yield from self._warm(*table, ())

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
            gm_key = (sid, lines, False)
            self._annotations(gm_key, scene.geometry, self._need(gm_key, scene.geometry))
            donor = self._cache.get(gm_key)
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
        covered = donor.covered
        # Pairs the gm's table does not hold (its subscribers follow others) are computed.
        own: list[set[Pair]] = [set(), set()]
        for pairs, values, kept in ((whole, _MODE_VALUES, own[0]), (way, way_values, own[1])):
            for pair in pairs - touched:
                if covered is not None and pair not in covered:
                    kept.add(pair)
                    continue
                for m in values:
                    found = held((pair[0], pair[1], m))
                    if found is not None:
                        lent.append(found)
        return (whole & touched) | own[0], (way & touched) | own[1], lent

    def _subscribe(self, state: Connection, request: Subscribe, binary: bool) -> list[Output]:
        """A new subscription (server/subscriptions.py), or a new ask of this connection's
        subscription to the scene: its full set now, computed for the pairs it follows.
        A refused one leaves the connection's subscriptions as they were."""
        scene = self._scene(request.scene)
        if (request.scene not in state.subscriptions
                and len(state.subscriptions) >= LIMITS.max_subscriptions):
            raise ClientError(ErrorCode.TOO_LARGE,
                              f"$.scene: this connection has {len(state.subscriptions)} "
                              f"subscriptions, the limit is {LIMITS.max_subscriptions}",
                              path="$.scene")
        viewer = state.role.viewer
        _, geom = self._view_key(request.scene, request.lines, viewer)
        sub = open_subscription(request, scene.id, scene.tokens, geom.creatures, viewer,
                                binary, state.compact)
        table = self._view_table(request.scene, request.lines, viewer, extra=(sub.filter,))
        frame = full_set(sub, request.scene, scene.revision, table,
                         self._breath_visible(request.scene, viewer), request.id)
        state.subscriptions[request.scene] = sub
        # The scene's focus follows its full set (none is sent while nobody set one).
        return [Send(state.id, frame), *self._focus_news(request.scene, only=state.id)]

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
        """Enchanted Realms' friendly fire (server/friendly_fire.py), on the scene without
        its hidden tokens for a viewer."""
        scene = self._scene(request.scene)
        geom = self._visible_geometry(scene) if viewer else scene.geometry
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
