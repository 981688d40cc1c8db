"""An asyncio client library for Covercast: for scripts, bots, automated sessions and the CLI.

Rule of this module: speak the protocol exactly as docs/protocol.md says (msgpack in binary
frames) and decode every reply into the server's own frozen Structs from `server.messages`,
the single definition of the wire schema; nothing else of the server is imported. Every
request carries an integer `id` and its reply is matched to it, so concurrent requests on
one connection are fine; `annotations` pushes go to the `Subscription` of their scene.

    async with Client("ws://127.0.0.1:8765") as cc:
        await cc.load_scene({"id": "s", "grid": {"type": 1}, "tokens": [...]})
        sub = await cc.subscribe("s")
        await cc.update_tokens("s", [{"_id": "goblin", "x": 300}])
        delta = await anext(sub)          # the annotations that changed
        print(sub.table[("archer", "goblin", "ranged")].cover)

docs/client.md has the whole API and a runnable example (examples/automated_session.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import os
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any, Literal, TypeVar

import msgpack
import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from server.messages import (
    PROTOCOL_VERSION,
    Ack,
    AnnotationOut,
    Annotations,
    AreaResult,
    BreathOut,
    BreathState,
    CompactAnnotations,
    CompactResponse,
    CoverResult,
    Error,
    FocusOut,
    FriendlyFireAttack,
    FriendlyFireOut,
    FriendlyFireResolve,
    FriendlyFireResult,
    Response,
    RoleName,
    Rolls,
    SceneDoc,
    SceneState,
    TemplateDoc,
    TurnEnd,
    Welcome,
)

__all__ = [
    "PROTOCOL_VERSION",
    "Ack",
    "AnnotationOut",
    "Annotations",
    "AreaResult",
    "BreathOut",
    "BreathState",
    "Client",
    "ConnectionLost",
    "CoverResult",
    "CovercastError",
    "Flags",
    "FocusOut",
    "FriendlyFireAttack",
    "FriendlyFireOut",
    "FriendlyFireResult",
    "Key",
    "Mode",
    "ProtocolError",
    "SceneState",
    "ServerError",
    "Subscription",
    "Welcome",
    "expand",
    "expand_plain",
    "flags",
    "token_from_env",
]

log = logging.getLogger("covercast.client")

#: An annotation's identity: (attacker, target, mode).
Key = tuple[str, str, str]
Mode = Literal["melee", "reach", "ranged"]
#: A side a subscription filter names (docs/protocol.md section 3.12): token dispositions.
Side = Literal["friendly", "neutral", "hostile", "secret"]
ALL_MODES: tuple[Mode, ...] = ("melee", "reach", "ranged")

_DECODER = msgspec.msgpack.Decoder(Response)
#: A connection granted the compact form (welcome.compact) gets `annotations` compact.
_COMPACT_DECODER = msgspec.msgpack.Decoder(CompactResponse)
_COMPACT_JSON = msgspec.json.Decoder(CompactResponse)
#: The reconnection jitter's own generator: a library draws nothing from the global one (a
#: program seeding `random` for its own rolls keeps its sequence whatever the client does).
_JITTER = random.Random()
#: True in the tasks that re-establish a connection: their requests (hello, on_reconnect's
#: scene loads, renewed subscriptions) go out before the ones waiting for the connection.
_PRIVILEGED: contextvars.ContextVar[bool] = contextvars.ContextVar("covercast_privileged",
                                                                   default=False)
R = TypeVar("R", Welcome, Ack, CoverResult, AreaResult, SceneState, Annotations,
            BreathState, FriendlyFireResult)


class Flags(msgspec.Struct, frozen=True, kw_only=True):
    """An annotation's `flags` as typed attributes: what the rules let the attacker do
    against this target, or what holds for the pair (each False unless the server said
    True). `flags(annotation)` makes one; the wire keeps a plain map, whose keys a newer
    server may extend (unknown keys are ignored here)."""

    #: The target can be attacked or targeted at all (it has a line of effect).
    can_target: bool = False
    #: Moving out of this attacker's threat provokes an attack of opportunity.
    can_aoo: bool = False
    #: The target's cover lets it attempt to hide (Stealth/Hide) from this attacker.
    can_hide: bool = False
    #: The target is within this attack mode's reach (always True for ranged).
    in_reach: bool = False
    #: The two occupy adjacent squares or hexes.
    adjacent: bool = False
    #: The attacker flanks the target (`flankers` names the allies).
    flanking: bool = False
    #: Cover grants improved evasion against area effects (3.5/PF1 improved cover).
    improved_evasion: bool = False
    #: Cover improves the degree of success of the target's Reflex save (degrees, pf2).
    reflex_degree_better: bool = False
    #: A miss may hit someone else: resolve it with `friendly_fire` (realms).
    friendly_fire: bool = False
    #: The target's full cover faces the attacker: it may not act in that direction.
    cannot_act_toward_cover: bool = False
    #: The target is off-guard (-2 circumstance to AC) against this attacker (pf2).
    off_guard: bool = False
    #: The attacker rolls with advantage (dnd5e flanking): a die, not a number.
    advantage: bool = False
    #: Aquatic combat: the attacker / the target is under water; the line passes water.
    attacker_submerged: bool = False
    target_submerged: bool = False
    through_water: bool = False
    #: A ranged slashing or bludgeoning attack misses automatically.
    ranged_auto_miss_slashing_bludgeoning: bool = False
    #: A ranged piercing attack has its range increments halved.
    range_increment_halved_piercing: bool = False
    #: No fire spell and no action with the fire trait.
    no_fire: bool = False
    #: Rider and mount share the multiple attack penalty.
    shares_map: bool = False
    #: The attacker is mounted: dismounting is its only move action.
    dismount_only_move: bool = False


def flags(annotation: AnnotationOut) -> Flags:
    """The annotation's flags, typed: `flags(sub.get("archer", "goblin")).can_hide`."""
    return msgspec.convert(annotation.flags, Flags)


def expand(msg: CompactAnnotations) -> Annotations:
    """The verbose `annotations` message a compact one stands for (docs/protocol.md section
    12): equal, field for field, to what the server sends a client that did not ask for the
    compact form. Annotations with the same modifiers or flags share those lists and maps
    (they are the server's values, not to be changed in place)."""
    names = msg.flags
    table = msg.modifiers
    mods: dict[tuple[int, ...], list[Any]] = {}
    flag_maps: dict[tuple[int, ...], dict[str, bool]] = {}
    none_set = dict.fromkeys(names, False)
    out = []
    for a in msg.annotations:
        mk = tuple(a.modifiers)
        m = mods.get(mk)
        if m is None:
            m = mods[mk] = [table[k] for k in mk]
        fk = tuple(a.flags)
        f = flag_maps.get(fk)
        if f is None:
            f = dict(none_set)
            for k in fk:
                f[names[k]] = True
            flag_maps[fk] = f
        extra = a.extra
        if extra is None:
            out.append(AnnotationOut(a.attacker, a.target, a.mode, a.loe, a.cover, m, f))
        else:
            out.append(AnnotationOut(a.attacker, a.target, a.mode, a.loe, a.cover, m, f,
                                     extra.flankers, extra.lines, extra.visible))
    return Annotations(msg.scene, msg.revision, msg.full, out,
                       [(r[0], r[1], r[2]) for r in msg.removed], msg.breath, msg.id)


def expand_plain(msg: dict[str, Any]) -> dict[str, Any]:
    """`expand` on plain decoded values (json.loads, msgpack.unpackb): the verbose message as
    those decoders would have given it; any other message is returned as it is."""
    if msg.get("type") != "annotations" or msg.get("form") != "compact":
        return msg
    names = msg["flags"]
    table = msg["modifiers"]
    out = []
    for row in msg["annotations"]:
        a: dict[str, Any] = {"attacker": row[0], "target": row[1], "mode": row[2],
                             "loe": row[3], "cover": row[4],
                             "modifiers": [table[k] for k in row[5]],
                             "flags": dict.fromkeys(names, False)}
        for k in row[6]:
            a["flags"][names[k]] = True
        if len(row) > 7:
            a.update(row[7])
        out.append(a)
    verbose = {k: v for k, v in msg.items() if k not in ("form", "flags", "modifiers")}
    verbose["annotations"] = out
    return verbose


class CovercastError(Exception):
    """Root of every error this client raises."""


class ServerError(CovercastError):
    """The server refused a request: the request changed nothing. `code` is one of the codes
    of docs/protocol.md section 8 (`invalid`, `unknown_token`, ...), `path` says where in the
    request (`$.tokens[1].id`), `message` names the value."""

    def __init__(self, error: Error) -> None:
        super().__init__(f"{error.code}: {error.message}")
        self.error = error
        self.code = error.code
        self.message = error.message
        self.path = error.path
        self.request_id = error.id


class ConnectionLost(CovercastError):
    """The connection closed (or could not be opened) before the answer arrived. A change
    sent just before may or may not have been applied: resynchronise (`get_scene`)."""


class ProtocolError(CovercastError):
    """The server sent something this client does not understand (a different version)."""


def _plain(value: Any) -> Any:
    """A document given as a msgspec Struct (e.g. server.messages.SceneDoc) as plain data."""
    return msgspec.to_builtins(value) if isinstance(value, msgspec.Struct) else value


_ROLE_TOKEN_VARS: Mapping[str, str] = {"player": "COVERCAST_PLAYER_TOKEN",
                                        "overlay": "COVERCAST_OVERLAY_TOKEN"}


def token_from_env(role: str | None = None) -> str | None:
    """The access token a client with `role` says hello with when none is given: the
    role's own variable if set, else $COVERCAST_TOKEN (a gm token admits every role)."""
    own = _ROLE_TOKEN_VARS.get(role or "")
    return (os.environ.get(own) if own else None) or os.environ.get("COVERCAST_TOKEN") or None


class Subscription:
    """The live annotations of one scene on this connection.

    `table` always holds the latest annotation of every (attacker, target, mode) key, as of
    `revision`, and `air` the latest air state of every token that has one (drowning).
    Iterating (`async for delta in sub`) yields each `annotations` push after it has been
    applied to `table`; revisions may jump when the server coalesces a burst of
    changes (that is not a loss: the delta covers every change in between). Iteration ends
    when the subscription ends (`unsubscribe`, the scene unloaded); it raises ConnectionLost
    if the connection drops (with `reconnect=True`: only if reconnecting fails; after a
    reconnection it yields the new full set, `full` true, which replaced the table), and
    ServerError when the server reports it failed to compute a delta (the table may be stale
    until the next one; iterating again continues).
    """

    def __init__(self, client: Client, full: Annotations, modes: tuple[Mode, ...],
                 lines: bool, filters: Mapping[str, list[str]] | None = None) -> None:
        self._client = client
        self.scene = full.scene
        self.modes = modes
        self.lines = lines
        #: The server-side filter asked for (`attackers`, `targets`, `sides`: only those
        #: given); the table holds the pairs it selects, and is asked for again with it on
        #: reconnecting.
        self.filters: dict[str, list[str]] = dict(filters or {})
        self.full = full
        self.revision = full.revision
        self._table: dict[Key, AnnotationOut] = {_key(a): a for a in full.annotations}
        self._air: dict[str, BreathOut] = {b.token: b for b in full.breath}
        self._queue: asyncio.Queue[Annotations | BaseException | None] = asyncio.Queue()
        self.active = True
        #: The pair the gm points the table at (`Client.set_focus`), as this client may
        #: see it; None until the server sends one.
        self.focus: FocusOut | None = None

    @property
    def table(self) -> Mapping[Key, AnnotationOut]:
        """Read-only view of the current annotations by (attacker, target, mode)."""
        return MappingProxyType(self._table)

    @property
    def air(self) -> Mapping[str, BreathOut]:
        """Read-only view of the air (drowning) state of each token that has one, by id."""
        return MappingProxyType(self._air)

    def get(self, attacker: str, target: str, mode: Mode = "ranged") -> AnnotationOut | None:
        """What `attacker` gets against `target` with this attack mode right now."""
        return self._table.get((attacker, target, mode))

    def _push(self, msg: Annotations) -> None:
        if msg.full:
            # Only a scene.unload sends an unrequested full set: the last, empty one.
            self._table = {_key(a): a for a in msg.annotations}
            self._air = {b.token: b for b in msg.breath}
            self.revision = msg.revision
            self._queue.put_nowait(msg)
            self._end(None)
            return
        if msg.revision < self.revision:
            # (Equal is fine: a turn.end's air news comes at the same revision.)
            log.warning("scene %r: delta at revision %d after %d, ignored", self.scene,
                        msg.revision, self.revision)
            return
        for key in msg.removed:
            self._table.pop((key[0], key[1], key[2]), None)
        for a in msg.annotations:
            self._table[_key(a)] = a
        for b in msg.breath:
            self._air[b.token] = b
        self.revision = msg.revision
        self._queue.put_nowait(msg)

    def _resync(self, full: Annotations) -> None:
        """A fresh full set after a reconnection replaces the table, and is yielded."""
        self.full = full
        self._table = {_key(a): a for a in full.annotations}
        self._air = {b.token: b for b in full.breath}
        self.revision = full.revision
        self._queue.put_nowait(full)

    def _end(self, reason: BaseException | None) -> None:
        if self.active:
            self.active = False
            self._queue.put_nowait(reason)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Annotations:
        if self._queue.empty() and not self.active:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is None:
            self._queue.put_nowait(None)  # later calls end too
            raise StopAsyncIteration
        if isinstance(item, ConnectionLost):
            self._queue.put_nowait(item)
            raise item
        if isinstance(item, BaseException):
            raise item
        return item

    async def wait_for(self, revision: int, timeout: float | None = 10.0) -> None:
        """Consume pushes until the table is at `revision` or later (e.g. an `ack`'s)."""
        async with asyncio.timeout(timeout):
            while self.revision < revision:
                await anext(self)

    async def close(self) -> None:
        """Unsubscribe (iteration then ends)."""
        if self.active:
            await self._client.unsubscribe(self.scene)


def _key(a: AnnotationOut) -> Key:
    return (a.attacker, a.target, a.mode)


class Client:
    """One connection to a Covercast server, opened by `async with Client(url) as cc:` (or
    `await cc.connect()` / `await cc.close()`). Entering says `hello` (with `token`, and a
    `role` at most the token's: "gm", "player" or "overlay"); `welcome` is then the
    server's answer (rulesets, limits, the role granted). Every method sends one request
    and returns the server's reply as a frozen Struct; a refused request raises
    ServerError.

    With `reconnect=True`, a dropped connection is re-opened with jittered exponential
    backoff (up to `max_backoff` seconds between tries, giving up after `reconnect_timeout`
    seconds): requests in flight raise ConnectionLost (a change may or may not have been
    applied), new requests wait for the new connection, `on_reconnect(client)` runs first
    (load your scenes again there: the server may have restarted), then every subscription
    is renewed and yields its new full set.

    `token=None` reads the token from the environment, as the `covercast` command does:
    $COVERCAST_TOKEN (the gm's), or for `role="player"` / `role="overlay"` first
    $COVERCAST_PLAYER_TOKEN / $COVERCAST_OVERLAY_TOKEN; `token=""` sends none.

    `compact=True` (the default) asks for annotation sets in the compact form (a tenth of the
    bytes, docs/protocol.md section 12) and decodes them into the same `AnnotationOut`s as
    the verbose form; `welcome.compact` says whether the server granted it. A server older
    than the compact form refuses the hello: the client then says hello again without it.
    `compact=False` asks for the verbose form."""

    def __init__(self, url: str = "ws://127.0.0.1:8765", *, token: str | None = None,
                 name: str = "covercast-python", role: RoleName | None = None,
                 open_timeout: float = 10.0, reconnect: bool = False,
                 on_reconnect: Callable[[Client], Awaitable[None]] | None = None,
                 reconnect_timeout: float | None = 60.0, max_backoff: float = 5.0,
                 compact: bool = True) -> None:
        self.url = url
        self.compact = compact
        # The hello asks for the compact form (until a server refuses the flag).
        self._ask_compact = compact
        self.token = token_from_env(role) if token is None else (token or None)
        self.name = name
        self.role = role
        self.open_timeout = open_timeout
        self.reconnect = reconnect
        self.on_reconnect = on_reconnect
        self.reconnect_timeout = reconnect_timeout
        self.max_backoff = max_backoff
        #: How many times the connection was re-established.
        self.reconnects = 0
        self._ws: ClientConnection | None = None
        # Set while requests may go out; `_dead` is why they cannot, once for good.
        self._online = asyncio.Event()
        self._dead: ConnectionLost | None = None
        self._closing = False
        self._reconnecting: asyncio.Task[None] | None = None
        self._resubscribing: dict[int, Subscription] = {}
        self._welcome: Welcome | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Response]] = {}
        self._subs: dict[str, Subscription] = {}
        # subscribe requests in flight (id -> modes, lines), and the Subscriptions their
        # replies created: made by the reader, so no push can slip in before it exists.
        self._subscribing: dict[int, tuple[tuple[Mode, ...], bool, dict[str, list[str]]]] = {}
        self._subscribed: dict[int, Subscription] = {}
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, url: str, token: str | None = None,
                   name: str = "covercast-python") -> Client:
        """A connected client: `async with await Client.open(url)` is `async with
        Client(url)` (kept for scripts written against the first version of this module)."""
        client = cls(url, token=token, name=name)
        await client.connect()
        return client

    @property
    def welcome(self) -> Welcome:
        """The server's `welcome`: protocol, version, rulesets with options, limits."""
        if self._welcome is None:
            raise ConnectionLost("not connected: use `async with Client(url)` or connect()")
        return self._welcome

    @property
    def connected(self) -> bool:
        """Whether requests go out now (false while reconnecting, and once closed)."""
        return self._online.is_set() and self._dead is None

    # -- connection --------------------------------------------------------------------

    async def connect(self) -> Welcome:
        """Open the WebSocket and say hello (ConnectionLost if the server closes instead,
        e.g. 1008 for a wrong token, with the server's reason)."""
        self._closing, self._dead = False, None
        await self._open()
        self._online.set()
        return self.welcome

    async def _open(self) -> None:
        """A new WebSocket, its reader, and the hello on it."""
        try:
            self._ws = await connect(self.url, max_size=None, compression=None,
                                     open_timeout=self.open_timeout)
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
            raise ConnectionLost(f"cannot reach {self.url}: {exc}") from exc
        self._reader = asyncio.create_task(self._read(self._ws))
        hello: dict[str, Any] = {"type": "hello", "protocol": PROTOCOL_VERSION,
                                 "client": self.name}
        if self.token is not None:
            hello["token"] = self.token
        if self.role is not None:
            hello["role"] = self.role
        if self._ask_compact:
            hello["compact"] = True
        token = _PRIVILEGED.set(True)  # the hello goes before anything waiting to be sent
        try:
            self._welcome = await self._expect(hello, Welcome)
        except ConnectionLost as exc:
            if not (self._ask_compact and _refused_compact(self._ws)):
                raise
            # A server from before the compact form refuses the unknown hello field (1008,
            # naming it): the verbose form then, on a new connection.
            log.info("%s does not offer the compact form: %s", self.url, exc)
            self._ask_compact = False
            if self._reader is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await self._reader
            self._dead = None  # that reader gave up on the first connection: not on this one
            await self._open()
            return
        finally:
            _PRIVILEGED.reset(token)

    async def close(self) -> None:
        """Close the connection; subscriptions end, pending requests raise ConnectionLost."""
        self._closing = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconnecting
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._give_up(ConnectionLost("connection closed by the client"))

    async def __aenter__(self) -> Client:
        if self._ws is None:
            await self.connect()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def _read(self, ws: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for frame in ws:
                self._dispatch(frame)
        reason = ConnectionLost(_closed_text(ws))
        self._fail_pending(reason)
        welcomed = self._online.is_set()
        self._online.clear()
        if self._closing or not self.reconnect:
            self._give_up(reason)
        elif self._reconnecting is not None and not self._reconnecting.done():
            pass  # a try of the reconnection under way: it tries again
        elif not welcomed:
            self._give_up(reason)  # the first connect failed: nothing to re-establish
        else:
            log.warning("%s; reconnecting to %s", reason, self.url)
            self._reconnecting = asyncio.create_task(self._reconnect(reason))

    def _fail_pending(self, reason: ConnectionLost) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(reason)
        self._waiting.clear()

    def _give_up(self, reason: ConnectionLost) -> None:
        """No more requests: end every subscription and wake whoever waits to send."""
        if self._dead is None:
            self._dead = reason
        self._fail_pending(reason)
        for sub in self._subs.values():
            sub._end(None if self._closing else reason)  # closing ourselves just ends them
        self._subs.clear()
        self._online.set()  # waiters wake up and find `_dead`

    async def _reconnect(self, reason: ConnectionLost) -> None:
        loop = asyncio.get_running_loop()
        deadline = (None if self.reconnect_timeout is None
                    else loop.time() + self.reconnect_timeout)
        delay = 0.1
        _PRIVILEGED.set(True)  # this task's requests (and on_reconnect's) go out first
        while True:
            # Full jitter: the clients of a restarted server do not all come back at once.
            await asyncio.sleep(_JITTER.uniform(0, delay))
            delay = min(delay * 2, self.max_backoff)
            try:
                await self._open()
                await self._restore()
                break
            except ConnectionLost as exc:
                reason = exc
            if deadline is not None and loop.time() >= deadline:
                self._give_up(ConnectionLost(
                    f"gave up reconnecting to {self.url} after {self.reconnect_timeout:g} s: "
                    f"{reason}"))
                return
        self.reconnects += 1
        log.info("reconnected to %s", self.url)
        self._online.set()

    async def _restore(self) -> None:
        """On a new connection: the caller's on_reconnect, then every subscription again."""
        if self.on_reconnect is not None:
            try:
                await self.on_reconnect(self)
            except ServerError as exc:
                log.warning("on_reconnect: %s", exc)
        for scene, sub in list(self._subs.items()):
            rid = next(self._ids)
            self._resubscribing[rid] = sub
            try:
                await self._request(rid, {"type": "subscribe", "scene": scene,
                                          "modes": list(sub.modes), "lines": sub.lines,
                                          **sub.filters})
            except ServerError as exc:  # e.g. the scene is gone and was not loaded again
                self._subs.pop(scene, None)
                sub._end(exc)
            finally:
                self._resubscribing.pop(rid, None)

    def _decode(self, frame: bytes | str) -> Response:
        """A frame as the server's own Struct: a compact `annotations` (on a connection
        granted the compact form) expanded into the verbose `Annotations` it stands for."""
        compact = self._welcome is not None and self._welcome.compact
        if not compact:
            if isinstance(frame, str):
                verbose: Response = msgspec.json.decode(frame.encode(), type=Response)
                return verbose
            return _DECODER.decode(frame)
        msg = (_COMPACT_JSON.decode(frame.encode()) if isinstance(frame, str)
               else _COMPACT_DECODER.decode(frame))
        return expand(msg) if isinstance(msg, CompactAnnotations) else msg

    def _dispatch(self, frame: bytes | str) -> None:
        try:
            msg = self._decode(frame)
        except msgspec.DecodeError as exc:
            raw_id = _raw_id(frame)
            fut = self._waiting.pop(raw_id, None) if raw_id is not None else None
            problem = ProtocolError(f"cannot decode the server's message: {exc}")
            if fut is not None and not fut.done():
                fut.set_exception(problem)
            else:
                log.warning("%s", problem)
            return
        if isinstance(msg, FocusOut):  # a push: the scene's focus, as this client may see it
            focused = self._subs.get(msg.scene)
            if focused is not None:
                focused.focus = msg
            return
        rid = msg.id
        fut = self._waiting.pop(rid, None) if isinstance(rid, int) else None
        if fut is not None:
            assert isinstance(rid, int)
            wanted = self._subscribing.pop(rid, None)
            renewed = self._resubscribing.pop(rid, None)
            if renewed is not None and isinstance(msg, Annotations):
                renewed._resync(msg)
            if wanted is not None and isinstance(msg, Annotations):
                old = self._subs.get(msg.scene)
                if old is not None:
                    old._end(None)  # subscribing again replaces the subscription
                self._subs[msg.scene] = self._subscribed[rid] = Subscription(
                    self, msg, *wanted)
            if not fut.done():
                fut.set_result(msg)
        elif isinstance(msg, Annotations):
            sub = self._subs.get(msg.scene)
            if sub is not None:
                sub._push(msg)
                if not sub.active:
                    self._subs.pop(msg.scene, None)
        elif isinstance(msg, Error):
            # Without an id: the server failed to compute a delta (protocol.md section 8).
            # The message names the scene; tell its subscriber, or every one if it names none.
            subs = [s for s in self._subs.values() if repr(s.scene) in msg.message]
            for sub in subs or list(self._subs.values()):
                sub._queue.put_nowait(ServerError(msg))
        else:
            log.warning("unexpected %s from the server, ignored", type(msg).__name__)

    # -- requests ----------------------------------------------------------------------

    async def request(self, message: Mapping[str, Any]) -> Response:
        """Send one request (a map as in docs/protocol.md section 3, without `id`) and wait
        for its reply; an `error` reply raises ServerError. The typed methods below are
        this with the right message."""
        return await self._request(next(self._ids), message)

    async def _request(self, rid: int, message: Mapping[str, Any]) -> Response:
        body = msgpack.packb({**{k: _plain(v) for k, v in message.items()}, "id": rid})
        while True:
            if not _PRIVILEGED.get():
                if self._ws is None:
                    raise ConnectionLost("not connected: use `async with Client(url)` or "
                                         "connect()")
                await self._online.wait()
                if self._dead is not None:
                    raise self._dead
            ws, reader = self._ws, self._reader
            assert ws is not None
            fut: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
            self._waiting[rid] = fut
            try:
                await ws.send(body)
                break
            except ConnectionClosed as exc:
                # Not sent at all: safe to send again on the next connection, if there is one.
                self._waiting.pop(rid, None)
                if not self.reconnect or self._closing or _PRIVILEGED.get():
                    raise ConnectionLost(_closed_text(ws)) from exc
                if reader is not None:
                    await asyncio.wait([reader])  # it notices the close and reconnects
        reply = await fut
        if isinstance(reply, Error):
            raise ServerError(reply)
        return reply

    async def _expect(self, message: Mapping[str, Any], kind: type[R]) -> R:
        reply = await self.request(message)
        if not isinstance(reply, kind):
            raise ProtocolError(f"{message['type']} answered with {type(reply).__name__}, "
                                f"expected {kind.__name__}")
        return reply

    async def load_scene(self, scene: SceneDoc | Mapping[str, Any], ruleset: str = "dnd35",
                         options: Mapping[str, Any] | None = None) -> Ack:
        """Create or replace a whole scene (a Foundry scene with its walls, tokens and
        regions, docs/protocol.md section 5) under a ruleset by name and its options."""
        return await self._expect({"type": "scene.load", "scene": scene, "ruleset": ruleset,
                                   "options": dict(options or {})}, Ack)

    async def get_scene(self, scene: str) -> SceneState:
        """The scene as the server holds it (grid, walls, tokens, regions) at a revision."""
        return await self._expect({"type": "scene.get", "scene": scene}, SceneState)

    async def unload_scene(self, scene: str) -> Ack:
        """Forget a scene; its subscriptions end."""
        return await self._expect({"type": "scene.unload", "scene": scene}, Ack)

    async def create_tokens(self, scene: str, tokens: Iterable[Any]) -> Ack:
        """Add tokens (whole Foundry TokenDocuments); all or none are created."""
        return await self._batch("token.create", scene, "tokens", tokens)

    async def update_tokens(self, scene: str, patches: Iterable[Mapping[str, Any]]) -> Ack:
        """Apply Foundry-style diffs (`_id` plus the changed fields) to tokens."""
        return await self._batch("token.update", scene, "tokens", patches)

    async def move_token(self, scene: str, token: str, x: float, y: float) -> Ack:
        """Move one token so its top-left corner is at (x, y) pixels."""
        return await self.update_tokens(scene, [{"_id": token, "x": x, "y": y}])

    async def delete_tokens(self, scene: str, ids: Iterable[str]) -> Ack:
        return await self._batch("token.delete", scene, "ids", ids)

    async def create_walls(self, scene: str, walls: Iterable[Any]) -> Ack:
        """Add walls (whole Foundry WallDocuments); all or none are created."""
        return await self._batch("wall.create", scene, "walls", walls)

    async def update_walls(self, scene: str, patches: Iterable[Mapping[str, Any]]) -> Ack:
        """Apply Foundry-style diffs to walls (`{"_id": "door", "ds": 1}` opens a door)."""
        return await self._batch("wall.update", scene, "walls", patches)

    async def delete_walls(self, scene: str, ids: Iterable[str]) -> Ack:
        return await self._batch("wall.delete", scene, "ids", ids)

    async def _batch(self, kind: str, scene: str, field: str, items: Iterable[Any]) -> Ack:
        return await self._expect({"type": kind, "scene": scene,
                                   field: [_plain(i) for i in items]}, Ack)

    async def query(self, scene: str, attacker: str, target: str, attack: Mode = "ranged",
                    *, lines: bool = False,
                    origin: tuple[float, float] | None = None) -> CoverResult:
        """What `attacker` gets against `target` with one attack mode: line of effect,
        cover degree and modifiers, flags; `origin` shoots from a chosen point (pixels)."""
        message: dict[str, Any] = {"type": "cover.query", "scene": scene,
                                   "attacker": attacker, "target": target, "attack": attack,
                                   "lines": lines}
        if origin is not None:
            message["origin"] = {"x": origin[0], "y": origin[1]}
        return await self._expect(message, CoverResult)

    async def set_focus(self, scene: str, attacker: str | None = None,
                        target: str | None = None, mode: Mode | None = None) -> Ack:
        """Point the scene's overlays at a pair (gm only; None clears a side): every
        subscriber's `Subscription.focus` follows, hidden tokens left out for viewers."""
        return await self._expect({"type": "scene.focus", "scene": scene,
                                   "attacker": attacker, "target": target, "mode": mode}, Ack)

    async def area(self, scene: str, template: TemplateDoc | Mapping[str, Any]) -> AreaResult:
        """Every creature an area effect (a Foundry MeasuredTemplate) reaches, with cover."""
        return await self._expect({"type": "area.query", "scene": scene,
                                   "template": template}, AreaResult)

    async def friendly_fire(self, scene: str, attacker: str,
                            attacks: Iterable[FriendlyFireAttack | Mapping[str, Any]],
                            defense: Mapping[str, int], *, bonus: int = 0,
                            seed: int | None = None) -> FriendlyFireResult:
        """Resolve shots by Enchanted Realms' friendly-fire rule (ruleset 'realms', a hex
        grid; docs/protocol.md): each attack is a pool of d20s at one target, given as the
        faces rolled (`dice`) or how many the server rolls (`count`), with an optional
        friendly-fire `d10`; `defense` holds Defense values before cover (the targets' are
        required). Several attacks are split dice. The reply carries every step and, when
        the server rolled, the seed that replays it. Nothing in the scene changes."""
        request = FriendlyFireResolve(
            scene, attacker, [a if isinstance(a, FriendlyFireAttack)
                              else msgspec.convert(a, FriendlyFireAttack) for a in attacks],
            dict(defense), bonus, seed)
        return await self._expect(msgspec.to_builtins(request), FriendlyFireResult)

    async def turn_end(self, scene: str, token: str, *, attacked: bool = False,
                       cast_spell: bool = False, spoke: bool = False, critical_hits: int = 0,
                       crit_failed_damage_saves: int = 0, breathing: bool | None = None,
                       con: int | None = None, fortitude: int | None = None,
                       hp: int | None = None, d20: int | None = None,
                       d10: Sequence[int] | None = None,
                       seed: int | None = None) -> BreathOut:
        """A token's turn ended, with what it did (docs/protocol.md 3.15): the server spends
        or restores its air and rolls (or takes your `d20`/`d10`) its suffocation save.
        Returns its new air state with the steps taken; subscribers get it too."""
        rolls = None if d20 is None and d10 is None else Rolls(
            d20, None if d10 is None else list(d10))
        request = TurnEnd(scene, token, attacked, cast_spell, spoke, critical_hits,
                          crit_failed_damage_saves, breathing, con, fortitude, hp, rolls, seed)
        reply = await self._expect(msgspec.to_builtins(request), BreathState)
        return reply.breath[0]

    async def breath(self, scene: str, token: str | None = None) -> list[BreathOut]:
        """A token's air state (what it starts with if it has none stored), or without
        `token` every stored state of the scene's tokens."""
        message: dict[str, Any] = {"type": "breath.get", "scene": scene}
        if token is not None:
            message["token"] = token
        return (await self._expect(message, BreathState)).breath

    async def subscribe(self, scene: str, modes: Sequence[Mode] = ALL_MODES, *,
                        lines: bool = False, attackers: Iterable[str] | None = None,
                        targets: Iterable[str] | None = None,
                        sides: Iterable[Side] | None = None) -> Subscription:
        """Follow a scene's annotations: the full set now, then a delta per change. Iterate
        the returned Subscription for the deltas; its `table` is always current. With
        `attackers`, `targets` (token ids) or `sides` (the attackers' sides: "friendly",
        "neutral", "hostile", "secret"), only the pairs they all select are sent and kept
        (the server computes no others: docs/protocol.md section 3.12); a bad filter raises
        ServerError (`unknown_token`, `invalid`) and changes nothing."""
        filters = {name: list(given) for name, given in
                   (("attackers", attackers), ("targets", targets), ("sides", sides))
                   if given is not None}
        rid = next(self._ids)
        self._subscribing[rid] = (tuple(modes), lines, filters)
        try:
            reply = await self._request(rid, {"type": "subscribe", "scene": scene,
                                              "modes": list(modes), "lines": lines,
                                              **filters})
        finally:
            self._subscribing.pop(rid, None)
        sub = self._subscribed.pop(rid, None)
        if sub is None:
            raise ProtocolError(f"subscribe answered with {type(reply).__name__}, "
                                "expected annotations")
        return sub

    async def unsubscribe(self, scene: str) -> Ack:
        """Stop following a scene; its Subscription's iteration ends."""
        ack = await self._expect({"type": "unsubscribe", "scene": scene}, Ack)
        sub = self._subs.pop(scene, None)
        if sub is not None:
            sub._end(None)
        return ack


def _raw_id(frame: bytes | str) -> int | None:
    with contextlib.suppress(Exception):
        raw = msgspec.json.decode(frame) if isinstance(frame, str) else msgpack.unpackb(frame)
        rid = raw.get("id") if isinstance(raw, dict) else None
        if isinstance(rid, int) and not isinstance(rid, bool):
            return rid
    return None


def _refused_compact(ws: ClientConnection | None) -> bool:
    """Whether the server closed the connection refusing the hello's `compact` field (a
    server from before the compact form: 1008 naming the unknown field)."""
    return (ws is not None and ws.close_code == 1008
            and "compact" in (ws.close_reason or ""))


def _closed_text(ws: ClientConnection | None) -> str:
    code = ws.close_code if ws is not None else None
    if code is None:
        return "connection closed"
    reason = ws.close_reason if ws is not None else ""
    return f"connection closed ({code}{' ' + reason if reason else ''})"
