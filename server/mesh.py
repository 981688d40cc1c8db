"""NATS mode (`covercast serve --nats nats://host:4222`): front processes and workers on
many machines, talking over NATS with JetStream.

Rule of this module: move messages between NATS, client sockets and a worker's Core, nothing
else (an edge module: the only one importing nats). What to remember and decide is
server/cluster.py's, where a frame goes server/routing.py's; each worker runs today's Core,
called on its thread as server/app.py calls it (the same slices for heavy tables).

Subjects (T is a scene's subject token, server/routing.py; F a front process's id):

    cc.req.T      a client request for scene T, to its owner (a receipt answers at once)
    cc.out.F      frames for clients of front F: answers (with the request's rid) and pushes
    cc.delta.T    scene T's deltas, one message per distinct frame with the sessions it is for
    cc.owner.T    scene T has a new owner, resumed: fronts send it their subscriptions again
    cc.hello      a hello to welcome (any worker: queue group)
    cc.any        a frame that names no scene (any worker: it refuses it as one server would)
    cc.claim      a scene nobody owns (any worker takes its lease)
    cc.gone       a client went (every worker forgets its connection)
    cc.fronts     a front is still there (every FRONT_BEAT_S; its clients are forgotten
                  FRONT_GONE_S after its last)

JetStream: the key-value bucket CC_OWNERS holds each scene's lease (its owner and id), CC_ALIVE
each worker's liveness (renewed every RENEW_S); the stream CC_LOG every accepted change of a
scene (its request, rid and answer, on cc.log.T), CC_SNAP each scene's last snapshot (on
cc.snap.T). An owner logs a change (waiting for JetStream's acknowledgement, with the log's
last sequence it knows as a condition, so a deposed owner cannot write) before it answers.

Delivery: plain NATS is at most once (a node that dies takes the messages on it along). A
front sends a request unanswered for RESEND_S again, with its rid; the owner drops a copy of
a request it is still handling and answers a copy of a change as it answered the first
(server/cluster.py `Requests`, and the log's answers).

Sizes: a message on cc.out and cc.delta larger than the server's `max_payload` (a full set
of a large table runs to tens of MB) is sent in parts (`publish_parts`: header Cc-Part =
id/index/count, in order from one connection) and joined by the front (`Parts`). The other
messages carry at most one frame (`welcome.limits.maxFrameBytes`, 4 MiB) with a small
envelope, so the NATS servers must allow MIN_PAYLOAD (8 MiB: `max_payload: 8MB` in their
configuration); a process started against less says so and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import msgpack
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType, StreamConfig
from nats.js.kv import KeyValue
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from server.admission import POLICY_VIOLATION, TRY_AGAIN_LATER, EdgeLimits
from server.app import App, Listener
from server.cluster import (
    FRONT_BEAT_S,
    LEASE_S,
    RENEW_S,
    RESEND_S,
    Journal,
    Liveness,
    Pending,
    Requests,
    Sessions,
    silent_fronts,
    takeovers,
)
from server.connection import Guarded, Outbox
from server.errors import ErrorCode
from server.messages import LIMITS, Error, decode_frame, encode
from server.routing import peek, subject_token
from server.session import Close, Core, Notify, Output, Send

log = logging.getLogger("covercast.mesh")

OWNERS = "CC_OWNERS"
ALIVE = "CC_ALIVE"
LOG = "CC_LOG"
SNAP = "CC_SNAP"
WORKERS = "cc-workers"  # the queue group
#: Seconds a front waits for a scene's owner to say it has the request.
RECEIPT_S = 2.0
#: Seconds a worker starting waits for JetStream to answer (leaders being elected).
START_S = 60.0
#: Seconds one write of a change to the log waits for JetStream's acknowledgement, and
#: seconds an owner goes on writing the same entry again while it gets none (`_log`).
LOG_WRITE_S = 2.0
LOG_RETRY_S = 6.0
#: JetStream error codes: another entry came first (the condition on the last sequence
#: failed); an entry with this Nats-Msg-Id is being stored (the first write of it).
_WRONG_LAST = 10071
_ID_IN_PROCESS = 10158

#: Requests that change a scene (logged before their ack); `scene.focus` too.
_CHANGES = frozenset({"scene.load", "scene.unload", "token.create", "token.update",
                      "token.delete", "wall.create", "wall.update", "wall.delete",
                      "scene.focus"})
_EXPECTED = "Nats-Expected-Last-Subject-Sequence"
_MSG_ID = "Nats-Msg-Id"
#: The least `max_payload` of the NATS servers: one frame and its envelope.
MIN_PAYLOAD = 8 * 1024 * 1024
_PART = "Cc-Part"
#: Bytes of a part's envelope beside its data (subject, headers).
_PART_ROOM = 4096


class PayloadTooSmall(Exception):
    """The NATS servers' max_payload is below MIN_PAYLOAD."""


def check_payload(nc: Client) -> None:
    if nc.max_payload < MIN_PAYLOAD:
        raise PayloadTooSmall(
            f"the NATS server allows messages of {nc.max_payload} bytes (max_payload); "
            f"Covercast needs {MIN_PAYLOAD} (one frame of {LIMITS.max_frame_bytes} bytes "
            "and its envelope): set `max_payload: 8MB` in every NATS server's "
            "configuration")


async def publish_parts(nc: Client, subject: str, data: bytes) -> None:
    """Publish `data`, in parts when it is larger than one message may be."""
    room = nc.max_payload - _PART_ROOM
    if len(data) <= room:
        await nc.publish(subject, data)
        return
    tag = uuid.uuid4().hex[:12]
    count = -(-len(data) // room)
    for k in range(count):
        await nc.publish(subject, data[k * room:(k + 1) * room],
                         headers={_PART: f"{tag}/{k}/{count}"})


class Parts:
    """Messages sent in parts (`publish_parts`), joined: `whole(msg)` is the message's
    data, or None while parts of it are still to come."""

    def __init__(self) -> None:
        self._held: dict[str, list[bytes]] = {}

    def whole(self, msg: Msg) -> bytes | None:
        part = (msg.headers or {}).get(_PART)
        if part is None:
            return msg.data
        tag, k, count = part.split("/")
        held = self._held.setdefault(tag, [])
        if int(k) != len(held):  # a part lost (a reconnect): the message is dropped
            self._held.pop(tag, None)
            log.warning("a message in parts lost part %d of %s; dropped", len(held), count)
            return None
        held.append(msg.data)
        if len(held) < int(count):
            return None
        del self._held[tag]
        return b"".join(held)


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False)


async def connect(url: str, name: str) -> Client:
    """A NATS connection that reconnects for ever to any server of `url` (comma-separated),
    the first one first: list a machine's own node first, and its messages to the
    processes of that machine take no hop between nodes."""
    nc = await nats.connect(servers=url.split(","), name=name, max_reconnect_attempts=-1,
                            reconnect_time_wait=0.2, connect_timeout=5, dont_randomize=True,
                            ping_interval=5, max_outstanding_pings=3)
    try:
        check_payload(nc)
    except PayloadTooSmall as exc:
        await nc.close()
        raise SystemExit(f"error: {exc}") from None
    return nc


async def _ensure(js: JetStreamContext, replicas: int) -> tuple[KeyValue, KeyValue]:
    """The buckets and streams, made if missing (the first worker makes them; the others
    find them)."""
    async def made(make: Callable[[int], Awaitable[Any]]) -> Any:
        for n in dict.fromkeys((replicas, 1)):
            try:
                return await make(n)
            except nats.js.errors.BadRequestError as exc:
                if "already in use" in str(exc.description or "") or exc.err_code == 10058:
                    return await make(0)  # exists: opened as it is
                if n == 1:
                    raise
                log.warning("JetStream refused %d replicas (%s); using 1", n, exc.description)
        raise AssertionError("unreachable")

    async def stream(name: str, subjects: list[str], per_subject: int, n: int) -> Any:
        if n == 0:
            return await js.stream_info(name)
        return await js.add_stream(StreamConfig(
            name=name, subjects=subjects, storage=StorageType.FILE, num_replicas=n,
            max_msgs_per_subject=per_subject))

    async def bucket(name: str, n: int) -> KeyValue:
        if n == 0:
            return await js.key_value(name)
        return await js.create_key_value(KeyValueConfig(bucket=name, history=1, replicas=n,
                                                        storage=StorageType.FILE))

    await made(functools.partial(stream, LOG, ["cc.log.*"], -1))
    await made(functools.partial(stream, SNAP, ["cc.snap.*"], 1))
    owners = await made(functools.partial(bucket, OWNERS))
    alive = await made(functools.partial(bucket, ALIVE))
    return owners, alive


# -- the worker -----------------------------------------------------------------------------

@dataclass(slots=True)
class _Owned:
    sid: str
    tok: str
    journal: Journal
    #: The lease's revision in CC_OWNERS when it was taken.
    lease: int
    queue: asyncio.Queue[list[Any]] = field(default_factory=asyncio.Queue)
    #: The requests waiting here and the answers given, by rid (copies a front sent again).
    requests: Requests = field(default_factory=Requests)
    task: asyncio.Task[None] | None = None
    sub: Any = None
    #: The last scene.focus frame (a snapshot keeps it: the focus has no revision).
    focus: bytes | str | None = None
    lost: bool = False


def _load_frame(snapshot: dict[str, Any]) -> str:
    """A scene's snapshot (Scene.snapshot) as the scene.load that makes it again."""
    doc = {k: v for k, v in snapshot.items() if k not in ("revision", "ruleset", "options")}
    return json.dumps({"type": "scene.load", "scene": doc, "ruleset": snapshot["ruleset"],
                       "options": snapshot["options"]})


class MeshWorker:
    """One worker: the scenes whose leases it holds, in a Core of its own."""

    def __init__(self, nc: Client, core: Core, name: str, replicas: int = 3) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=5)
        self.core = core
        self.app = App(core)  # its Core thread and slices; it listens on nothing
        self.me = name
        self.replicas = replicas
        self.owned: dict[str, _Owned] = {}
        self.owners: dict[str, tuple[str, str, int]] = {}
        self.live = Liveness(time.monotonic())
        self._sessions: dict[str, int] = {}
        self._where: dict[int, tuple[str, str]] = {}  # conn -> (session, front)
        self._tasks: list[asyncio.Task[None]] = []
        self._sys = 0
        self._fronts: dict[str, float] = {}  # front -> when last heard
        self._turns: dict[str, asyncio.Lock] = {}
        # Scenes given up while their leases still name this worker: claimed again at the
        # next renewal that succeeds (`_renew`).
        self._given_up: dict[str, str] = {}
        self.stopping = False

    async def start(self) -> None:
        # JetStream may be electing leaders (a node just restarted, the cluster starting):
        # its first answers are waited for, up to START_S.
        deadline = time.monotonic() + START_S
        while True:
            try:
                self.kv_owners, self.kv_alive = await _ensure(self.js, self.replicas)
                await self.kv_alive.put(self.me, b"1")
                break
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError,
                    nats.js.errors.NoStreamResponseError,
                    nats.js.errors.ServiceUnavailableError) as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("JetStream does not answer yet (%s); trying again", exc)
                await asyncio.sleep(0.5)
        self._sys = self.core.connect()
        token = self.core.access_token
        hello = {"type": "hello", "protocol": 1, "client": "covercast-worker",
                 **({"token": token} if token else {})}
        self.core.receive(self._sys, json.dumps(hello))
        self._tasks += [asyncio.create_task(self._renew()),
                        asyncio.create_task(self._watch(self.kv_alive, self._alive_entry)),
                        asyncio.create_task(self._watch(self.kv_owners, self._owner_entry)),
                        asyncio.create_task(self._take_over()),
                        asyncio.create_task(self._forget_fronts())]
        await self.nc.subscribe("cc.hello", queue=WORKERS, cb=self._on_hello)
        await self.nc.subscribe("cc.any", queue=WORKERS, cb=self._on_any)
        await self.nc.subscribe("cc.claim", queue=WORKERS, cb=self._on_claim)
        await self.nc.subscribe("cc.gone", cb=self._on_gone)
        await self.nc.subscribe("cc.fronts", cb=self._on_front)
        await self.nc.flush()
        log.info("worker %s ready", self.me)

    async def stop(self) -> None:
        """Leave: the leases go to the other workers at once (no wait for them to age)."""
        self.stopping = True
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await self.kv_alive.delete(self.me)
        with contextlib.suppress(Exception):
            await self.nc.drain()
        self.app.shutdown()

    # -- leases ------------------------------------------------------------------------

    async def _renew(self) -> None:
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(RENEW_S)
            try:
                await self.kv_alive.put(self.me, b"1")
                last_ok = time.monotonic()
            except Exception as exc:
                if time.monotonic() - last_ok > LEASE_S and self.owned:
                    # Others may have taken the scenes over by now: stop serving them.
                    log.error("cannot renew the lease (%s): giving up %d scenes", exc,
                              len(self.owned))
                    for tok, owned in list(self.owned.items()):
                        self._given_up[tok] = owned.sid
                        await self._lose(tok)
                continue
            # Renewing again: the scenes given up whose leases nobody took are ours again
            # (their leases still name this worker, so no other would take them).
            for tok, sid in list(self._given_up.items()):
                with contextlib.suppress(Exception):
                    await self._claim(sid)
                    del self._given_up[tok]

    async def _watch(self, kv: KeyValue, on: Callable[[Any], Awaitable[None]]) -> None:
        while True:
            try:
                watcher = await kv.watchall()
                async for entry in watcher:
                    if entry is not None:
                        await on(entry)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("watch of %s failed (%s); again", kv._name, exc)
                await asyncio.sleep(0.5)

    async def _alive_entry(self, entry: Any) -> None:
        if entry.operation in ("DEL", "PURGE"):
            self.live.gone(entry.key)
        else:
            self.live.heard(entry.key, time.monotonic())

    async def _owner_entry(self, entry: Any) -> None:
        tok = entry.key
        if entry.operation in ("DEL", "PURGE") or not entry.value:
            self.owners.pop(tok, None)
            return
        worker, sid = unpack(entry.value)
        self.owners[tok] = (worker, sid, entry.revision)
        mine = self.owned.get(tok)
        if worker != self.me and mine is not None and entry.revision > mine.lease:
            log.warning("scene %r was taken over by %s", sid, worker)
            await self._lose(tok)

    async def _take_over(self) -> None:
        while True:
            await asyncio.sleep(RENEW_S)
            for tok, sid, rev in takeovers(self.owners, self.me, self.live, time.monotonic()):
                if self.stopping:
                    return
                was = self.owners.get(tok, ("?", sid, rev))[0]
                try:
                    new = await self.kv_owners.update(tok, pack([self.me, sid]), last=rev)
                    self.owners[tok] = (self.me, sid, new)
                    log.info("took over scene %r from %s", sid, was)
                    await self._own(tok, sid, new)
                except nats.js.errors.KeyWrongLastSequenceError:
                    pass  # another worker took it first
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # JetStream stalled: a claim takes it up again
                    log.warning("taking over scene %r failed (%s)", sid, exc)

    async def _claim(self, sid: str) -> bool:
        """Take the lease of a scene nobody holds (or whose holder stopped renewing)."""
        tok = subject_token(sid)
        if tok in self.owned:
            return True
        try:
            lease = await self.kv_owners.create(tok, pack([self.me, sid]))
        except nats.js.errors.KeyWrongLastSequenceError:
            try:
                entry = await self.kv_owners.get(tok)
            except nats.js.errors.KeyNotFoundError:
                return False
            worker, _ = unpack(entry.value) if entry.value else (None, None)
            if worker is not None and worker != self.me and not self.live.may_take(
                    worker, self.me, time.monotonic()):
                return False
            try:
                lease = await self.kv_owners.update(tok, pack([self.me, sid]),
                                                    last=entry.revision)
            except nats.js.errors.KeyWrongLastSequenceError:
                return False
        await self._own(tok, sid, lease)
        return True

    def _turn(self, tok: str) -> asyncio.Lock:
        """Scene tok's lock: taking it (a resume) and giving it up happen one at a time, so
        a scene given up while it is being resumed is not left loaded, or replayed twice."""
        lock = self._turns.get(tok)
        if lock is None:
            lock = self._turns[tok] = asyncio.Lock()
        return lock

    async def _own(self, tok: str, sid: str, lease: int) -> None:
        """Resume a scene whose lease is ours: from its snapshot and log, then take its
        requests, then tell the fronts."""
        async with self._turn(tok):
            if tok in self.owned:
                return
            journal = Journal()
            owned = _Owned(sid, tok, journal, lease)
            self.owned[tok] = owned
            try:
                await self._resume(owned)
            except Exception:
                if self.owned.get(tok) is owned:
                    self.owned.pop(tok, None)
                await self._unload(sid)
                raise
            owned.task = asyncio.create_task(self._serve(owned))
            owned.sub = await self.nc.subscribe(f"cc.req.{tok}", cb=functools.partial(
                self._on_request, owned))
            await self.nc.flush()
            await self.nc.publish(f"cc.owner.{tok}", pack([self.me, sid]))

    async def _resume(self, owned: _Owned) -> None:
        sid, tok = owned.sid, owned.tok
        await self._unload(sid)  # left from an earlier time as owner
        start = 0
        try:
            snap = await self.js.get_last_msg(SNAP, f"cc.snap.{tok}")
            held = unpack(snap.data or b"")
            start = held["seq"]
            await self._apply(held["load"])
            scene = self.core.scenes[sid]
            self.core.scenes[sid] = replace(scene, revision=held["revision"])
            if held.get("focus") is not None:
                owned.focus = held["focus"]
                await self._apply(held["focus"])
            owned.journal.seq = start
        except nats.js.errors.NotFoundError:
            pass
        seq = start
        replayed = 0
        while True:
            try:
                msg = await self.js.get_msg(LOG, seq=seq + 1, subject=f"cc.log.{tok}",
                                            next=True)
            except nats.js.errors.NotFoundError:
                break
            rid, frame, answer = unpack(msg.data or b"")
            await self._apply(frame)
            if peek(frame).kind == "scene.focus":
                owned.focus = frame
            assert msg.seq is not None
            owned.journal.logged(rid, answer, msg.seq)
            seq = msg.seq
            replayed += 1
        now = self.core.scenes.get(sid)
        log.info("scene %r resumed at revision %s (%d changes replayed)", sid,
                 now.revision if now else None, replayed)

    async def _apply(self, frame: bytes | str) -> None:
        outs = await self.app._core(self.core.receive, self._sys, frame)
        for o in outs:
            if isinstance(o, Send) and o.conn == self._sys:
                reply = decode_frame(o.frame)
                if reply.get("type") == "error":
                    log.error("a logged change does not apply again: %s", reply)

    async def _lose(self, tok: str) -> None:
        """Give scene tok up (its lease is another's, or could not be renewed)."""
        owned = self.owned.get(tok)
        if owned is None:
            return
        owned.lost = True  # its serving stops at once, whatever waits for the lock
        async with self._turn(tok):
            if self.owned.get(tok) is not owned:
                return
            del self.owned[tok]
            if owned.sub is not None:
                with contextlib.suppress(Exception):
                    await owned.sub.unsubscribe()
            await self._unload(owned.sid)
            # Last: this may be the task running this very call (a change not logged).
            if owned.task is not None:
                owned.task.cancel()

    async def _unload(self, sid: str) -> None:
        if sid in self.core.scenes:
            await self.app._core(self.core.receive, self._sys, json.dumps(
                {"type": "scene.unload", "scene": sid}))

    # -- requests ----------------------------------------------------------------------

    async def _on_request(self, owned: _Owned, msg: Msg) -> None:
        if msg.reply:
            await msg.respond(b"")  # the receipt: the front knows the scene has an owner
        request = unpack(msg.data)
        if owned.requests.arrived(request[2]):
            owned.queue.put_nowait(request)

    async def _serve(self, owned: _Owned) -> None:
        """The scene's requests, one at a time, in the order they came."""
        while True:
            request = await owned.queue.get()
            if owned.lost:
                return  # the fronts send what waited here to the next owner
            try:
                await self._handle(owned, request)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("bug while handling a request of scene %r", owned.sid)

    async def _conn(self, session: str, front: str, hello: bytes | str) -> int | None:
        conn = self._sessions.get(session)
        if conn is not None:
            return conn
        conn = int(await self.app._core(self.core.connect))
        await self.app._core(self.core.receive, conn, hello)
        if not self.core.greeted(conn):
            await self.app._core(self.core.disconnect, conn)
            return None
        self._sessions[session] = conn
        self._where[conn] = (session, front)
        return conn

    async def _handle(self, owned: _Owned, request: list[Any]) -> None:
        """One request of the scene, answered to its front; what it was answered is
        remembered for a copy of it (the front sends a request again when it is late)."""
        rid, frame = request[2], request[4]
        answer = None
        try:
            answer = await self._answered(owned, request)
        finally:
            # A change's answer is given again to a copy (a copy of a read, or of a
            # subscription, is answered afresh: at the scene's revision then).
            owned.requests.done(rid, answer if peek(frame).kind in _CHANGES else None)

    async def _answered(self, owned: _Owned, request: list[Any]) -> bytes | None:
        """Handle a request and publish its answer: the answer (None: none was sent)."""
        session, front, rid, hello, frame = request
        known = owned.journal.answer(rid) or owned.requests.answer(rid)
        if known is not None:  # sent again: a logged change is not applied twice
            await publish_parts(self.nc, f"cc.out.{front}", known)
            return known
        conn = await self._conn(session, front, hello)
        if conn is None:
            denied = pack([rid, [[session, "close", POLICY_VIOLATION, "access denied"]]])
            await publish_parts(self.nc, f"cc.out.{front}", denied)
            return denied
        kind = peek(frame).kind
        before = self.core.scenes.get(owned.sid)
        outputs: list[Output]
        if kind == "subscribe":  # the one request whose table may be computed in slices
            outputs = await self.app._core_sliced(
                functools.partial(self.core.warm_frame, conn, frame), self.core.receive,
                conn, frame)
        else:
            outputs = await self.app._core(self.core.receive, conn, frame)
        mine = [o for o in outputs if o.conn == conn and not isinstance(o, Notify)]
        answer = pack([rid, [self._item(session, o) for o in mine]])
        first = mine[0] if mine and isinstance(mine[0], Send) else None
        acked = (kind in _CHANGES and first is not None
                 and decode_frame(first.frame).get("type") == "ack")
        if first is not None and acked and not await self._log(owned, rid, frame, answer, before):
            if owned.lost:
                return None  # the new owner answers it
            binary = isinstance(frame, bytes)
            err = Error(ErrorCode.UNAVAILABLE.value, "the change log cannot be written "
                        "now; the change was not applied, try again later", None,
                        decode_frame(first.frame).get("id"))
            refused = pack([rid, [[session, "send", encode(err, binary)]]])
            await publish_parts(self.nc, f"cc.out.{front}", refused)
            return refused
        await publish_parts(self.nc, f"cc.out.{front}", answer)
        await self._push([o for o in outputs if o.conn != conn and not isinstance(o, Notify)])
        notified = [o.conn for o in outputs if isinstance(o, Notify)]
        if notified:
            await self._deltas(owned, notified)
        if owned.journal.snapshot_due():
            await self._snapshot(owned)
        return answer

    def _item(self, session: str, o: Output) -> list[Any]:
        if isinstance(o, Send):
            return [session, "send", o.frame]
        assert isinstance(o, Close)
        return [session, "close", o.code, o.reason]

    async def _push(self, outputs: list[Output]) -> None:
        """Frames for other clients (a focus, a scene unloaded), to their fronts."""
        by_front: dict[str, list[list[Any]]] = {}
        for o in outputs:
            where = self._where.get(o.conn)
            if where is not None:
                by_front.setdefault(where[1], []).append(self._item(where[0], o))
        for front, items in by_front.items():
            await publish_parts(self.nc, f"cc.out.{front}", pack([None, items]))

    async def _log(self, owned: _Owned, rid: str, frame: bytes | str, answer: bytes,
                   before: Any) -> bool:
        """Log an applied change in JetStream before its ack goes out; False when it is not
        logged: the scene is put back as it was, or given up.

        - JetStream refuses the entry (it answers with an error): the scene is put back
          and the change refused `unavailable`, or, when another owner wrote meanwhile (the
          condition on the log's last sequence failed), the scene is given up.
        - JetStream does not answer (a node died, a leader is being elected): whether it
          stored the entry is not known, since what was lost may be its acknowledgement.
          The same entry is written again, for LOG_RETRY_S: JetStream stores an entry once
          per Nats-Msg-Id (the request's rid) and answers a copy with the first one's
          sequence. (It does so for any entry of the stream in its duplicate window, two
          minutes, whatever the scene: rids carry their front's random id to be unique.)
          Past that, the scene is given up and resumed from the log at once
          (`_from_the_log`): the log, not this owner, says whether the change was made,
          and the request, sent again by its front, is answered from it. Saying `unavailable`
          ("not applied") there would be a guess; when the entry had been stored, the next
          owner would replay a change its client was told was refused."""
        subject = f"cc.log.{owned.tok}"
        data = pack([rid, frame, answer])
        headers = {_EXPECTED: str(owned.journal.seq), _MSG_ID: rid}
        deadline = time.monotonic() + LOG_RETRY_S
        unknown = False  # a write may have been stored without our hearing of it
        while True:
            try:
                ack = await self.js.publish(subject, data, headers=headers,
                                            timeout=LOG_WRITE_S)
                seq = ack.seq
                break
            except nats.js.errors.APIError as exc:
                if exc.err_code == _ID_IN_PROCESS:
                    unknown = True  # the first write is being stored: its answer is due
                elif exc.err_code == _WRONG_LAST and unknown:
                    # (A single-node stream checks the last sequence before the rid: our
                    # own first write may be what came first.)
                    mine = await self._last_logged_is(owned, rid)
                    if mine is None:
                        log.warning("change of scene %r: the log's last entry is not ours "
                                    "(%s)", owned.sid, exc)
                        return await self._from_the_log(owned)
                    seq = mine
                    break
                elif not unknown:
                    return await self._not_logged(owned, exc, lose=exc.err_code == _WRONG_LAST,
                                                  before=before)
                else:
                    # A refusal of a later write says nothing of an earlier one, which may
                    # be stored: never `unavailable` then, on until the log decides.
                    log.warning("change of scene %r: JetStream refused a second write (%s)",
                                owned.sid, exc)
            except nats.js.errors.NoStreamResponseError as exc:
                # Nobody stored this write (no stream answered): an earlier one may have been.
                if not unknown and time.monotonic() > deadline:
                    return await self._not_logged(owned, exc, before=before)
            except Exception as exc:  # no answer: unknown
                unknown = True
                log.warning("change of scene %r: no answer from JetStream (%s); writing the "
                            "same entry again", owned.sid, exc or type(exc).__name__)
            if owned.lost:
                return False
            if time.monotonic() > deadline:
                log.warning("change of scene %r: JetStream gave no answer for %g s", owned.sid,
                            LOG_RETRY_S)
                return await self._from_the_log(owned)
            await asyncio.sleep(0.1)
        owned.journal.logged(rid, answer, seq)
        if peek(frame).kind == "scene.focus":
            owned.focus = frame
        if peek(frame).kind == "scene.unload":
            owned.focus = None
        return True

    async def _last_logged_is(self, owned: _Owned, rid: str) -> int | None:
        """The sequence of the scene's last log entry when it is request rid's (None: it
        is another's, or the log cannot be read)."""
        try:
            last = await self.js.get_last_msg(LOG, f"cc.log.{owned.tok}")
        except Exception as exc:
            log.warning("the log of scene %r cannot be read (%s)", owned.sid, exc)
            return None
        if last.seq is None or unpack(last.data or b"")[0] != rid:
            return None
        return int(last.seq)

    async def _not_logged(self, owned: _Owned, exc: Exception, lose: bool = False,
                          before: Any = None) -> bool:
        """A change JetStream did not log: the scene given up (`lose`: another owner
        wrote; or what this owner holds cannot be known to be the log's), else put back."""
        log.warning("change of scene %r not logged (%s)", owned.sid, exc)
        if lose:
            await self._lose(owned.tok)
        elif owned.lost:
            pass  # given up meanwhile: the scene is no longer this worker's to put back
        elif before is None:
            self.core.scenes.pop(owned.sid, None)
        else:
            self.core.scenes[owned.sid] = before
        return False

    async def _from_the_log(self, owned: _Owned) -> bool:
        """Give the scene up and take it back from its log at the next renewal (`_renew`),
        its lease still this worker's: the log says whether a change was made, and the
        fronts send the new owner their unanswered requests. Returns False (not logged
        here)."""
        log.warning("scene %r is resumed from its log", owned.sid)
        await self._lose(owned.tok)
        # (After: a renewal claiming it while it is still held here would find it held.
        # `_lose` cancels this very task last, at its next await: there is none below.)
        self._given_up[owned.tok] = owned.sid
        return False

    async def _snapshot(self, owned: _Owned) -> None:
        scene = self.core.scenes.get(owned.sid)
        if scene is None:
            return
        held = {"seq": owned.journal.seq, "revision": scene.revision,
                "load": _load_frame(scene.snapshot()), "focus": owned.focus}
        try:
            await self.js.publish(f"cc.snap.{owned.tok}", pack(held))
            owned.journal.since_snapshot = 0
            # What the snapshot holds leaves the log (the last entry stays: the next
            # change's condition reads it).
            await self.js.purge_stream(LOG, subject=f"cc.log.{owned.tok}",
                                       seq=owned.journal.seq)
        except Exception as exc:
            log.warning("snapshot of scene %r not written (%s)", owned.sid, exc)

    async def _deltas(self, owned: _Owned, conns: list[int]) -> None:
        sid = owned.sid

        def build() -> list[tuple[int, bytes | str | None]]:
            return [(c, self.core.delta(c, sid)) for c in conns]

        built = await self.app._core_sliced(
            functools.partial(self.core.warm_delta, conns, sid), build)
        same: dict[int, tuple[bytes | str, list[str]]] = {}
        for conn, frame in built:
            where = self._where.get(conn)
            if frame is not None and where is not None:
                same.setdefault(id(frame), (frame, []))[1].append(where[0])
        if same:
            await publish_parts(self.nc, f"cc.delta.{owned.tok}", pack(
                [[sessions, frame] for frame, sessions in same.values()]))

    # -- what any worker answers -------------------------------------------------------

    async def _on_hello(self, msg: Msg) -> None:
        conn = await self.app._core(self.core.connect)
        try:
            (hello,) = unpack(msg.data)
            outs = await self.app._core(self.core.receive, conn, hello)
        finally:
            await self.app._core(self.core.disconnect, conn)
        await msg.respond(pack([self._item("", o) for o in outs if not isinstance(o, Notify)]))

    async def _on_any(self, msg: Msg) -> None:
        hello, frame = unpack(msg.data)
        conn = await self.app._core(self.core.connect)
        try:
            await self.app._core(self.core.receive, conn, hello)
            outs = await self.app._core(self.core.receive, conn, frame)
        finally:
            await self.app._core(self.core.disconnect, conn)
        await msg.respond(pack([self._item("", o) for o in outs if not isinstance(o, Notify)]))

    async def _on_claim(self, msg: Msg) -> None:
        sid = msg.data.decode()
        try:
            ok = await self._claim(sid)
        except Exception as exc:
            log.warning("claim of scene %r failed: %s", sid, exc)
            ok = False
        await msg.respond(b"ok" if ok else b"owned")

    async def _on_gone(self, msg: Msg) -> None:
        await self._forget(msg.data.decode())

    async def _forget(self, session: str) -> None:
        conn = self._sessions.pop(session, None)
        if conn is not None:
            self._where.pop(conn, None)
            await self.app._core(self.core.disconnect, conn)

    async def _on_front(self, msg: Msg) -> None:
        self._fronts[msg.data.decode()] = time.monotonic()

    async def _forget_fronts(self) -> None:
        """The clients of a front gone silent (killed) are gone: their connections are
        dropped, or every change would still build deltas for them."""
        started = time.monotonic()
        while True:
            await asyncio.sleep(FRONT_BEAT_S * 2)
            silent = silent_fronts({front for _, front in self._where.values()},
                                   self._fronts, started, time.monotonic())
            for session, front in list(self._where.values()):
                if front in silent:
                    await self._forget(session)
            for front in silent:
                self._fronts.pop(front, None)
                log.info("front %s is silent: its clients are forgotten", front)


# -- the front ----------------------------------------------------------------------------

@dataclass(slots=True)
class _Client:
    ws: ServerConnection
    replies: Outbox[bytes | str]
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    closing: tuple[int, str] | None = None


class MeshFront(Listener):
    """A stateless front process: client connections, each request on to its scene's
    owner over NATS, answers and deltas back."""

    def __init__(self, nc: Client, limits: EdgeLimits | None = None) -> None:
        super().__init__(limits)
        self.nc = nc
        self.id = uuid.uuid4().hex[:12]
        self.sessions = Sessions(self.id)
        self._parts = Parts()
        self.clients: dict[str, _Client] = {}
        self._deltas: dict[str, Any] = {}
        self._moving: dict[str, asyncio.Task[None]] = {}
        self._beat: asyncio.Task[None] | None = None
        self._again: asyncio.Task[None] | None = None

    async def setup(self) -> None:
        await self.nc.subscribe(f"cc.out.{self.id}", cb=self._on_out)
        await self.nc.subscribe("cc.owner.*", cb=self._on_owner)
        await self.nc.flush()
        self._beat = asyncio.create_task(self._beating())
        self._again = asyncio.create_task(self._resending())

    async def _resending(self) -> None:
        """Requests without an answer for RESEND_S are sent again, in their order: NATS
        may have lost them or their answer (a node died); the owner answers a copy once."""
        while True:
            await asyncio.sleep(RESEND_S / 4)
            late = self.sessions.overdue(time.monotonic())
            if late:
                log.warning("%d requests without an answer for %g s: sent again", len(late),
                            RESEND_S)
            for p in late:
                try:
                    await self._send(p)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # NATS down: the next round tries again
                    log.warning("a request could not be sent again (%s)", exc)
                    break

    async def _beating(self) -> None:
        while True:
            with contextlib.suppress(Exception):
                await self.nc.publish("cc.fronts", self.id.encode())
            await asyncio.sleep(FRONT_BEAT_S)

    def _deliver(self, session: str, item: list[Any]) -> None:
        client = self.clients.get(session)
        if client is None:
            return
        if item[1] == "close":
            client.closing = (int(item[2]), str(item[3]))
        elif not client.replies.put(item[2]):
            self._slow(logging.WARNING, "session %s does not read (%d bytes waiting), closing "
                       "it", session, client.replies.bytes)
            client.closing = (TRY_AGAIN_LATER, "too slow: read your replies")
        client.wake.set()

    async def _on_out(self, msg: Msg) -> None:
        data = self._parts.whole(msg)
        if data is None:
            return
        rid, items = unpack(data)
        if rid is None:  # pushes
            for item in items:
                self._deliver(item[0], item)
        elif self.sessions.answered(rid):  # else answered already (by an owner that died)
            self._answer(rid, items)

    def _answer(self, rid: str, items: list[Any]) -> None:
        """The answer to request `rid`, handed to its client in the order of its requests,
        whatever their scenes' owners (protocol section 3)."""
        for item in self.sessions.in_order(rid, items):
            self._deliver(item[0], item)

    async def _on_delta(self, msg: Msg) -> None:
        data = self._parts.whole(msg)
        if data is None:
            return
        for sessions, frame in unpack(data):
            for session in sessions:
                if self.sessions.local(session):
                    self._deliver(session, [session, "send", frame])

    async def _on_owner(self, msg: Msg) -> None:
        _, sid = unpack(msg.data)
        tok = msg.subject.rsplit(".", 1)[1]
        again = self.sessions.moved(sid)
        if again:
            log.info("scene %r has a new owner: %d requests sent to it again", sid, len(again))

            async def resend() -> None:
                for p in again:
                    await self._send(p)

            previous = self._moving.get(tok)

            async def after() -> None:
                if previous is not None:
                    await previous
                await resend()

            self._moving[tok] = asyncio.create_task(after())

    async def _writer(self, client: _Client) -> None:
        ws = client.ws
        with contextlib.suppress(ConnectionClosed):
            while True:
                await client.wake.wait()
                client.wake.clear()
                while not client.replies.empty():
                    await ws.send(client.replies.get())
                if client.closing is not None:
                    await ws.close(*client.closing)
                    return

    async def _request(self, subject: str, payload: bytes, timeout: float) -> bytes | None:
        try:
            reply = await self.nc.request(subject, payload, timeout=timeout)
            return reply.data
        except nats.errors.NoRespondersError:
            return None

    async def _send(self, p: Pending) -> None:
        """A request to its scene's owner (found, or made by a claim, if it has none)."""
        if not self.sessions.local(p.session):
            return  # its client left
        tok = subject_token(p.scene)
        payload = pack([p.session, self.id, p.rid, self.sessions.hello(p.session), p.frame])
        for _ in range(100):
            self.sessions.sent(p.rid, time.monotonic())
            try:
                if await self._request(f"cc.req.{tok}", payload, RECEIPT_S) is not None:
                    return
            except nats.errors.TimeoutError:
                # The owner has it, busy; or died (its successor gets it again); or NATS
                # lost it: then it is sent again when its answer is late (_resending).
                return
            claimed = await self._request("cc.claim", p.scene.encode(), 10.0)
            if claimed is None:
                break  # no worker at all
            await asyncio.sleep(0.02 if claimed == b"ok" else 0.1)
        if self.sessions.answered(p.rid):
            binary = isinstance(p.frame, bytes)
            err = Error(ErrorCode.UNAVAILABLE.value, f"$.scene: no worker holds scene "
                        f"{p.scene!r} now; try again later", "$.scene",
                        _rid(p.frame))
            self._answer(p.rid, [[p.session, "send", encode(err, binary)]])

    async def _follow(self, scene: str) -> None:
        tok = subject_token(scene)
        if tok not in self._deltas:
            self._deltas[tok] = await self.nc.subscribe(f"cc.delta.{tok}", cb=self._on_delta)

    async def handler(self, ws: ServerConnection) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.call_later(
            self.limits.hello_timeout_s, self._close_later, ws, POLICY_VIOLATION,
            f"no hello within {self.limits.hello_timeout_s:g} s")
        session: str | None = None
        writer: asyncio.Task[None] | None = None
        try:
            hello = await ws.recv()
            deadline.cancel()
            answer = await self._request("cc.hello", pack([hello]), 10.0)
            if answer is None:
                await ws.close(1013, "no worker is running; try again later")
                return
            items = unpack(answer)
            if not items or items[0][1] == "close":
                code, reason = (items[0][2], items[0][3]) if items else (1011, "no answer")
                await ws.close(code, reason)
                return
            if isinstance(ws, Guarded):
                ws.welcome()
            await ws.send(items[0][2])
            session = self.sessions.open(hello)
            client = _Client(ws, Outbox[bytes | str](self.limits.reply_bytes))
            self.clients[session] = client
            writer = asyncio.create_task(self._writer(client))
            async for frame in ws:
                route = peek(frame)
                if route.scene is None:
                    rid = self.sessions.aside(session)
                    raw = await self._request("cc.any", pack([hello, frame]), 10.0)
                    self._answer(rid, [[session, *item[1:]] for item in unpack(raw)]
                                 if raw else [])
                    continue
                if route.kind == "subscribe":
                    await self._follow(route.scene)
                p = self.sessions.request(session, route.scene, route.kind, frame)
                await self._send(p)
        except ConnectionClosed:
            pass
        except (TimeoutError, nats.errors.Error) as exc:
            log.warning("closing a client: NATS did not answer (%s)", exc)
            with contextlib.suppress(Exception):
                await ws.close(1011, "the cluster does not answer now; reconnect later")
        finally:
            deadline.cancel()
            if session is not None:
                self.clients.pop(session, None)
                self.sessions.close(session)
                with contextlib.suppress(Exception):
                    await self.nc.publish("cc.gone", session.encode())
            if writer is not None:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer


def _rid(frame: bytes | str) -> Any:
    with contextlib.suppress(Exception):
        raw = decode_frame(frame)
        if isinstance(raw, dict):
            return raw.get("id")
    return None


# -- running ------------------------------------------------------------------------------

async def run_worker(url: str, core: Core, replicas: int = 3, name: str | None = None,
                     ready: Callable[[str], None] | None = None) -> None:
    """A worker until cancelled."""
    me = name or f"{os.uname().nodename}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    nc = await connect(url, f"covercast-worker {me}")
    worker = MeshWorker(nc, core, me, replicas)
    await worker.start()
    if ready is not None:
        ready(me)
    try:
        await asyncio.Event().wait()
    finally:
        await worker.stop()


async def run_front(url: str, host: str, port: int,
                    ready: Callable[[int], Awaitable[None] | None] | None = None,
                    limits: EdgeLimits | None = None) -> None:
    """A front process until cancelled; `ready` is told the bound port."""
    nc = await connect(url, "covercast-front")
    front = MeshFront(nc, limits)
    await front.setup()
    try:
        await front.serve(host, port, ready)
    finally:
        with contextlib.suppress(Exception):
            await nc.drain()
