"""The network edge: the only module of `server` that imports asyncio or websockets.

Rule of this module: move frames between sockets and the sans-I/O Core, nothing else. The
Core runs on one worker thread, so geometry never blocks the event loop (pings and other
connections keep flowing) and the Core never sees two frames at once. Each connection has
a writer: replies wait in a bounded queue (a client that stops reading them is closed), and
annotation news is a set of scenes, turned into one delta per scene when the connection is
ready for it, so a slow subscriber gets the latest state, never a backlog. A change's news
goes out in one fan-out per scene: one trip to the Core thread builds the deltas of every
subscriber that is ready (idle writer, nearly empty write buffer), and each distinct frame
is written to all of them at once; a subscriber that is not ready is left to its writer.
When a fan-out is done, the Core thread does the scene's idle-time work (`Core.prepare`) so
it does not fall inside the next change.

A request or a delta that needs a table computed first gets it in slices (`Core.warm`), one
trip to the Core thread per slice, so whatever else is queued there (other scenes' requests)
runs between two slices. A large frame (a whole scene, a batch of thousands of walls) is
read, and the scene it changes built, on a thread of its own before it goes to the Core
thread (`Core.ahead`, server/ahead.py), so its reading does not hold the worker either. Who
may connect, and how many bytes a connection may make the
server hold, are server/admission.py's and server/connection.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, broadcast, serve, unix_serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from server import static
from server.admission import (
    POLICY_VIOLATION,
    TRY_AGAIN_LATER,
    Admission,
    EdgeLimits,
    Seldom,
    descriptor_limit,
    total_cap,
)
from server.ahead import AHEAD_BYTES
from server.connection import Guarded, Inbox, Outbox
from server.frames import Parts
from server.memory import tune_process
from server.messages import LIMITS
from server.session import Close, Core, Notify, Output, Send, SendParts

log = logging.getLogger("covercast.app")

#: Seconds a refused client is asked to wait before it tries again.
RETRY_AFTER_S = 5
#: A subscriber whose socket holds more unsent bytes than this gets its next delta from its
#: own writer, which waits for the socket to drain (websockets' default high-water mark):
#: a fan-out never queues more than one frame beyond it.
FAN_OUT_BACKLOG = 2**15
#: A reply larger than this (a large table's full set: 53 MB at 200 tokens) goes out as a
#: fragmented message of pieces this size, the event loop running between two of them
#: (`_send`): written whole, websockets copies it into one frame on the event loop (tens of
#: ms a copy), and every other connection of the worker waits for that.
FRAGMENT_BYTES = 2**20
#: A Core call at least this long (a whole matrix: a first subscription, a scene's first
#: annotations) is followed by a full garbage collection, and what survives it is frozen
#: (gc.freeze), at most once per SETTLE_INTERVAL seconds. Measured with 100 tokens, 1,000
#: walls and 50 subscribers: a full collection of the unfrozen heap took about 22 ms and
#: fell in the middle of a move every 50 to 100 moves (most of a p99); with the scenes'
#: and connections' long-lived objects frozen, it scans only what was made since. Frozen
#: objects are unfrozen and scanned again at the next settle, so cyclic garbage among them
#: (a closed connection's) is collected then.
HEAVY_CALL_S = 0.2
SETTLE_INTERVAL_S = 5.0


@dataclass(slots=True)
class _Peer:
    ws: ServerConnection
    replies: Outbox[bytes | str | Parts]
    news: set[str] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    #: Its writer is sending, or a fan-out is building its delta: nobody else writes to it.
    busy: bool = False


#: A subscriber's delta from a fan-out: its connection, its peer and the frame (None: none).
_Delta = tuple[int, _Peer, bytes | str | None]


class Listener:
    """The listening side of a server: admission, the overlay page on plain HTTP, the
    guarded connections; `handler` serves one WebSocket (App's: a Core behind it; the
    front process's, server/front.py: links to the workers owning its scenes)."""

    def __init__(self, limits: EdgeLimits | None = None) -> None:
        self.limits = limits if limits is not None else EdgeLimits()
        self.admission = Admission(total_cap(self.limits.max_connections),
                                   self.limits.max_per_address)
        self._refusals = Seldom(log)
        self._slow = Seldom(log)
        self._closing: set[asyncio.Task[None]] = set()
        self._files = static.overlay_files()

    async def handler(self, ws: ServerConnection) -> None:
        raise NotImplementedError

    def http(self, ws: ServerConnection, request: Request) -> Response | None:
        """Plain HTTP on the same port: the overlay page (None: go on with the WebSocket
        handshake)."""
        refused = ws.refused if isinstance(ws, Guarded) else None
        if refused is not None:
            body = f"covercast is busy: {refused}; try again later\n".encode()
            return Response(503, "Service Unavailable", Headers({
                "Content-Type": "text/plain; charset=utf-8", "Content-Length": str(len(body)),
                "Retry-After": str(RETRY_AFTER_S), "Connection": "close"}), body)
        reply = static.route(request.path, request.headers, self._files, request.method)
        if reply is None:
            return None
        return Response(reply.status, reply.reason, Headers(reply.headers), reply.body)

    async def start(self, host: str, port: int, unix: str | None = None) -> Server:
        """Listen on host:port, or on the Unix socket `unix` (a worker process behind a
        front process, server/workers.py)."""
        # Per-message deflate is off: measured (bench/RESULTS.md), sending a 4.7 KB move
        # delta to 50 clients costs ~0.9 ms of server CPU without it and ~2.7 ms with it,
        # and a 5 MB full set 175 ms against 756 ms; clients are usually on the same host
        # or LAN, where the bytes saved matter less than the latency added.
        #
        # Frames are taken off websockets' queue as they come (`_reader`) and held in the
        # connection's inbox, bounded in bytes; websockets holds at most a frame or two.
        guarded = type("Connection", (Guarded,), {
            "limits": self.limits, "admission": self.admission,
            "on_refused": self._refused})
        if unix is not None:
            return await unix_serve(self.handler, unix, max_size=LIMITS.max_frame_bytes,
                                    compression=None, max_queue=2, process_request=self.http,
                                    create_connection=guarded)
        return await serve(self.handler, host, port, max_size=LIMITS.max_frame_bytes,
                           compression=None, max_queue=2, process_request=self.http,
                           create_connection=guarded)

    def _refused(self, why: str) -> None:
        self._refusals(logging.WARNING, "refusing connections: %s", why)

    async def serve(self, host: str, port: int,
                    ready: Callable[[int], Awaitable[None] | None] | None = None,
                    unix: str | None = None,
                    started: Callable[[], None] | None = None) -> None:
        """Listen (`start`) and serve until cancelled; `ready` is told the bound port (0 on
        a Unix socket), after `started` (work for once the listener is up)."""
        asyncio.get_running_loop().set_exception_handler(self.loop_errors)
        server = await self.start(host, port, unix)
        if started is not None:
            started()
        bound = 0 if unix is not None else next(iter(server.sockets)).getsockname()[1]
        try:
            if ready is not None:
                maybe = ready(bound)
                if maybe is not None:
                    await maybe
            await server.serve_forever()
        finally:
            server.close()
            await server.wait_closed()

    def loop_errors(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The event loop's exception handler: asyncio reports a failed accept (out of
        descriptors or memory) on every attempt; it is logged once a minute."""
        if str(context.get("message", "")).startswith("socket.accept() out of system"):
            self._refusals(logging.ERROR, "cannot accept connections: %s (descriptor "
                           "limit %d, %d connections open)", context.get("exception"),
                           descriptor_limit(), self.admission.open)
            return
        loop.default_exception_handler(context)

    def _close_later(self, ws: ServerConnection, code: int, reason: str) -> None:
        task = asyncio.create_task(ws.close(code, reason))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)


#: Behind a front process (server/front.py), written to its link after the replies to each
#: request: a byte that starts no msgpack value and no UTF-8 text, so never a frame of the
#: protocol. The front does not pass it on; it tells it the request was answered.
ANSWERED = b"\xc1"


class App(Listener):
    """A running Covercast server: a Core behind a websockets listener; `marks`: every
    connection is a front process's link, and each request's replies are followed by
    ANSWERED."""

    def __init__(self, core: Core, limits: EdgeLimits | None = None,
                 marks: bool = False) -> None:
        super().__init__(limits)
        self.core = core
        self.marks = marks
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="covercast-core")
        # Large frames are read ahead of the Core, one at a time (server/ahead.py).
        self._ahead = ThreadPoolExecutor(max_workers=1, thread_name_prefix="covercast-ahead")
        self._peers: dict[int, _Peer] = {}
        # Scenes with a fan-out running (it loops until no ready subscriber has news).
        self._fanning: dict[str, asyncio.Task[None]] = {}
        self._settled = float("-inf")

    async def _core(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._timed, fn, *args)

    async def _core_sliced(self, warm: Callable[[], Generator[None, None, None]],
                           fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the Core thread after `warm()`'s slices, one trip to the thread
        per slice: between two slices whatever else is queued for the Core runs (other
        scenes' requests wait for one slice, not for a whole table). The last slice and
        `fn` run in the same trip, so `fn` finds what the slices computed."""
        steps: Generator[None, None, None] | None = None
        worked = False  # the current `warm()` has yielded: it did work in slices
        spent = 0.0

        def step() -> tuple[bool, Any]:
            nonlocal steps, worked, spent
            t0 = time.perf_counter()
            try:
                if steps is None:
                    steps, worked = warm(), False
                next(steps)
                worked = True
                return False, None
            except StopIteration:
                if worked:
                    # Work done in slices ends a trip; `fn` gets a trip of its own, after
                    # a fresh check (a change may have come in between).
                    steps = None
                    return False, None
            except Exception:
                # `fn` meets the same bug and reports it where it belongs.
                log.exception("bug while computing annotations ahead of a request")
            finally:
                spent += time.perf_counter() - t0
            return True, fn(*args)

        while True:
            done, result = await self._core(step)
            if done:
                break
        if spent >= HEAVY_CALL_S:
            # A whole table computed in slices is a heavy call too (see HEAVY_CALL_S); the
            # heap is settled in a trip of its own.
            self._settle_soon()
        return result

    def _settle_soon(self) -> None:
        """Settle the heap in a trip of its own to the Core thread."""
        with contextlib.suppress(RuntimeError):  # the pool is shut down
            self._pool.submit(self._settle)

    def _settle(self) -> None:
        if time.perf_counter() - self._settled >= SETTLE_INTERVAL_S:
            settle_heap()
            self._settled = time.perf_counter()

    def _timed(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the Core thread; after a heavy call, settle the heap there."""
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            now = time.perf_counter()
            if now - t0 >= HEAVY_CALL_S and now - self._settled >= SETTLE_INTERVAL_S:
                settle_heap()
                self._settled = time.perf_counter()

    async def handler(self, ws: ServerConnection) -> None:
        loop = asyncio.get_running_loop()
        conn: int = await self._core(self.core.connect)
        peer = _Peer(ws, Outbox[bytes | str | Parts](self.limits.reply_bytes))
        self._peers[conn] = peer
        writer = asyncio.create_task(self._writer(conn, peer))
        inbox = Inbox(self.limits.inbound_bytes)
        reader = asyncio.create_task(self._reader(conn, ws, inbox))
        # The hello must come in time; once a first frame is in, the worker may take as
        # long as it takes to answer it.
        deadline = loop.call_later(
            self.limits.hello_timeout_s, self._close_later, ws, POLICY_VIOLATION,
            f"no hello within {self.limits.hello_timeout_s:g} s")
        try:
            while (frame := await inbox.get()) is not None:
                deadline.cancel()
                read = None
                if len(frame) >= AHEAD_BYTES and self.core.greeted(conn):
                    # Read (and built into its new scene) on a thread of its own, so the
                    # Core thread serves other scenes meanwhile (server/ahead.py).
                    read = await loop.run_in_executor(self._ahead, self.core.ahead, conn,
                                                      frame)
                outputs: list[Output] = await self._core_sliced(
                    functools.partial(self.core.warm_frame, conn, frame, read),
                    self.core.receive, conn, frame, read)
                if read is not None and read.staged is not None:
                    # What the load replaced in the store goes, off the Core's thread.
                    self._ahead.submit(self.core.sweep)
                if read is not None:
                    # The read froze the heap (server/ahead.py), with whatever cyclic
                    # garbage was in it (a connection closed meanwhile): a settle frees
                    # it, its full collection coming at most once a minute.
                    self._settle_soon()
                if isinstance(ws, Guarded) and not ws.greeted and self.core.greeted(conn):
                    ws.welcome()  # before the welcome goes out
                await self._deliver(outputs)
                if self.marks and not any(isinstance(o, Close) and o.conn == conn
                                          for o in outputs):
                    peer.replies.put(ANSWERED)
                    peer.wake.set()
        except ConnectionClosed:
            pass
        finally:
            deadline.cancel()
            self._peers.pop(conn, None)
            await self._core(self.core.disconnect, conn)
            for task in (reader, writer):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _reader(self, conn: int, ws: ServerConnection, inbox: Inbox) -> None:
        """Take frames off the socket as they come, into the connection's inbox; a client
        that sends more than the inbox holds while its frames wait for the worker is
        closed (1013)."""
        try:
            async for frame in ws:
                if not inbox.put(frame):
                    self._slow(logging.WARNING,
                               "connection %d sent more than %d bytes ahead of the worker, "
                               "closing it", conn, self.limits.inbound_bytes)
                    self._close_later(ws, TRY_AGAIN_LATER,
                                      f"more than {self.limits.inbound_bytes} bytes "
                                      "waiting; wait for replies before sending more")
                    break
        except ConnectionClosed:
            pass
        finally:
            inbox.end()

    async def _deliver(self, outputs: list[Output]) -> None:
        for out in outputs:
            peer = self._peers.get(out.conn)
            if peer is None:
                continue
            if isinstance(out, (Send, SendParts)):
                if not peer.replies.put(out.frame):
                    self._slow(logging.WARNING,
                               "connection %d does not read its replies (%d bytes waiting), "
                               "closing it", out.conn, peer.replies.bytes)
                    self._close_later(peer.ws, TRY_AGAIN_LATER,
                                      "too slow: read your replies")
                peer.wake.set()
            elif isinstance(out, Notify):
                peer.news.add(out.scene)
                if out.scene not in self._fanning:
                    self._fanning[out.scene] = asyncio.create_task(self._fan_out(out.scene))
            elif isinstance(out, Close):
                # Replies queued before the close still go out, then the close itself.
                peer.idle.clear()
                peer.wake.set()
                if not peer.replies.empty():
                    await peer.idle.wait()
                await peer.ws.close(out.code, out.reason)

    async def _fan_out(self, scene: str) -> None:
        """Send the scene's news to every subscriber ready for it: one trip to the Core for
        all their deltas (subscribers with one view share one frame), each frame written to
        its subscribers at once. Subscribers not ready (their writer busy, or their socket
        backed up) are left to their writers, so a slow one never delays the others and
        never holds more than its latest delta's worth of news."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                ready: list[tuple[int, _Peer]] = []
                for conn, peer in self._peers.items():
                    if scene not in peer.news:
                        continue
                    if peer.busy or not peer.replies.empty() or (
                            peer.ws.transport.get_write_buffer_size() > FAN_OUT_BACKLOG):
                        peer.wake.set()
                        continue
                    peer.news.discard(scene)
                    peer.busy = True
                    ready.append((conn, peer))
                if not ready:
                    return
                written: set[int] = set()

                def write(batch: list[_Delta], written: set[int] = written) -> None:
                    self._write(batch)
                    written.update(conn for conn, _, _ in batch)

                conns = [conn for conn, _ in ready]
                try:
                    write(await self._core_sliced(
                        functools.partial(self.core.warm_delta, conns, scene),
                        self._deltas, loop, ready, scene, write))
                finally:
                    for conn, peer in ready:
                        if conn not in written:
                            self._release(peer)
        finally:
            self._fanning.pop(scene, None)
            # Idle-time work for the scene's next change, on the Core thread after whatever
            # is queued there already.
            with contextlib.suppress(RuntimeError):  # the pool is shut down
                self._pool.submit(self._prepare, scene)

    def _prepare(self, scene: str) -> None:
        try:
            self.core.prepare(scene)
        except Exception:
            log.exception("bug while preparing scene %r for its next change", scene)

    def _deltas(self, loop: asyncio.AbstractEventLoop, ready: list[tuple[int, _Peer]],
                scene: str, write: Callable[[list[_Delta]], None]) -> list[_Delta]:
        """On the Core thread: each ready subscriber's delta, in order. Before one whose
        view's annotations are still to compute (a viewer's without hidden tokens, a
        subscriber with lines, after the gm's), what is done so far is handed to `write`
        on the loop, so those subscribers do not wait for that table too. The rest is
        returned."""
        batch: list[_Delta] = []
        for conn, peer in ready:
            if batch and not self.core.computed(conn, scene):
                loop.call_soon_threadsafe(write, batch)
                batch = []
            batch.append((conn, peer, self.core.delta(conn, scene)))
        return batch

    def _write(self, batch: list[_Delta]) -> None:
        """Release these subscribers from a fan-out and write their frames, each distinct
        frame to all of its subscribers at once."""
        same: dict[int, tuple[bytes | str, list[ServerConnection]]] = {}
        for conn, peer, frame in batch:
            self._release(peer)
            if frame is not None and self._peers.get(conn) is peer:
                same.setdefault(id(frame), (frame, []))[1].append(peer.ws)
        for frame, sockets in same.values():
            broadcast(sockets, frame)

    @staticmethod
    def _release(peer: _Peer) -> None:
        peer.busy = False
        if peer.news or not peer.replies.empty():
            peer.wake.set()

    async def _writer(self, conn: int, peer: _Peer) -> None:
        try:
            while True:
                await peer.wake.wait()
                peer.wake.clear()
                if peer.busy:
                    continue  # a fan-out holds it and wakes it when done
                peer.busy = True
                try:
                    while not peer.replies.empty():
                        await _send(peer.ws, peer.replies.get())
                    while peer.news:
                        scene = peer.news.pop()
                        frame = await self._core_sliced(
                            functools.partial(self.core.warm_delta, [conn], scene),
                            self.core.delta, conn, scene)
                        if frame is not None:
                            await _send(peer.ws, frame)
                        while not peer.replies.empty():
                            await _send(peer.ws, peer.replies.get())
                finally:
                    peer.busy = False
                peer.idle.set()
        except ConnectionClosed:
            return

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._ahead.shutdown(wait=False, cancel_futures=True)


async def _send(ws: ServerConnection, frame: bytes | str | Parts) -> None:
    """Send one frame's message, fragmented past FRAGMENT_BYTES (a client reads it as one
    message: WebSocket fragments are reassembled before any application sees them); a
    frame given in parts is never joined here either. Only a connection's writer sends
    this way: a fan-out's `broadcast` skips a connection with a fragmented message under
    way, and never meets one (the writer holds it busy)."""
    if len(frame) <= FRAGMENT_BYTES and not isinstance(frame, Parts):
        await ws.send(frame)
    elif isinstance(frame, str):
        await ws.send(_pieces(frame))
    else:
        parts = frame if isinstance(frame, Parts) else Parts.of([frame], text=False)
        await ws.send(_fragments(parts), text=parts.text)


async def _pieces(frame: str) -> AsyncIterator[str]:
    """A text frame in FRAGMENT_BYTES pieces (of characters: websockets encodes each),
    the event loop let run between two, as `_fragments` writes bytes."""
    for k in range(0, len(frame), FRAGMENT_BYTES):
        if k:
            await asyncio.sleep(0)
        yield frame[k:k + FRAGMENT_BYTES]


async def _fragments(frame: Parts) -> AsyncIterator[bytes | memoryview]:
    """A frame (one part, or a frame given in parts) in fragments of FRAGMENT_BYTES (the
    last one shorter), the event loop let run between two: websockets waits for the
    socket only past its high-water mark, and a reader that keeps up would otherwise have
    the whole frame copied out in one go, every other connection of the worker waiting.
    A part is cut where a fragment ends, and small parts (a key, a header) share one; a
    fragment of a text message may end inside a character, as RFC 6455 allows (a message
    is decoded whole)."""
    pending = bytearray()
    first = True
    for part in frame.parts:
        view = memoryview(part)
        while view:
            if not pending and len(view) >= FRAGMENT_BYTES:
                piece: bytes | memoryview = view[:FRAGMENT_BYTES]
                view = view[FRAGMENT_BYTES:]
            else:
                room = FRAGMENT_BYTES - len(pending)
                pending += view[:room]
                view = view[room:]
                if len(pending) < FRAGMENT_BYTES:
                    continue
                piece, pending = bytes(pending), bytearray()
            if not first:
                await asyncio.sleep(0)
            first = False
            yield piece
    if pending or first:
        if not first:
            await asyncio.sleep(0)
        yield bytes(pending)


#: Seconds between the collections that walk the frozen heap too (at most one per this
#: many seconds, after a heavy call): what a connection left when it closed (websockets'
#: and asyncio's objects hold cycles), if it was frozen while open, is freed only by one.
#: Measured under `make fuzz` (connections opened and closed all the time): with one an
#: hour, each worker grew by ~40 MB a minute.
FULL_COLLECTION_S = 60.0
_full_collected = time.monotonic()


def settle_heap(full: bool = False) -> None:
    """Collect the garbage among the objects not yet frozen and freeze the survivors, so
    that later collections (which stop every thread) scan only younger objects. The frozen
    heap itself (every scene, every table: 65-90 ms with a 20,000-wall scene loaded here)
    is walked only with `full`, or once every FULL_COLLECTION_S: a collection walking it is
    a pause of every scene. Scenes and tables are freed by their reference counts; the
    cyclic garbage frozen meanwhile is a few closures per heavy call, and the connections
    closed since."""
    global _full_collected
    if full or time.monotonic() - _full_collected >= FULL_COLLECTION_S:
        gc.unfreeze()
        _full_collected = time.monotonic()
    gc.collect()
    gc.freeze()


async def run(core: Core, host: str, port: int,
              ready: Callable[[int], Awaitable[None] | None] | None = None,
              limits: EdgeLimits | None = None, unix: str | None = None,
              marks: bool = False) -> None:
    """Serve until cancelled; `ready` is told the bound port (port 0 picks a free one;
    0 too when serving on the Unix socket `unix`); `marks`: behind a front process."""
    tune_process()
    # This edge writes a frame given in parts as one message (`_send`).
    core.in_parts = True
    app = App(core, limits, marks)
    try:
        # Once listening, settle the modules and whatever the Core was given (a preloaded
        # scene).
        await app.serve(host, port, ready, unix, started=functools.partial(settle_heap, True))
    finally:
        app.shutdown()
        gc.unfreeze()  # a process that goes on without the server (tests) collects it all
