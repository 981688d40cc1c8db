"""The front process of `covercast serve --workers N`: client connections in, each frame
on to the worker owning its scene, everything a worker sends straight back.

Rule of this module: move frames between client sockets and worker links, nothing else (an
edge module, beside server/app.py, whose listener it shares: admission, the overlay page,
the limits before `welcome`). Where a frame goes is server/routing.py's; what it means is
the workers' (each runs a Core behind server/app.py, on a Unix socket). Per client
connection the front holds one link to each worker the client has used: the first frame
goes to worker 0 (a hello, welcomed or refused there); on its first frame for another
worker the link to that one is opened and the hello said again, its welcome kept back.

Replies come back in the order of the requests (protocol section 3, "Ordering"): a worker
follows each request's replies with ANSWERED on the link (server/app.py), and a frame for
another worker waits until the client's requests to the others are answered; frames for one
worker go on at once (it answers them in order). Frames from a worker are written to the
client as they come, one at a time: a client that stops reading stops its links being
read, so the worker's own writer holds the latest state for it (server/app.py: a slow
subscriber gets the latest delta, never a backlog) and closes it if its replies pile up.
A worker closing a link (a refused hello, a client over its limits) closes the client with
the same code and reason; a worker that dies closes its clients with 1011, and the
supervisor (server/workers.py) starts it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from websockets.asyncio.client import ClientConnection, unix_connect
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus

from server.admission import POLICY_VIOLATION, TRY_AGAIN_LATER, EdgeLimits
from server.app import ANSWERED, Listener
from server.connection import Guarded
from server.routing import Links

log = logging.getLogger("covercast.front")

INTERNAL_ERROR = 1011
#: Seconds a worker that is not listening (being started again) is waited for.
REACH_S = 15.0
#: Seconds a closed link's last frames have to reach the client before it is closed.
_LAST_FRAMES_S = 1.0


class _Gone(Exception):
    """A worker closed the link (or died): the client is closed with this code."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _closed(up: ClientConnection) -> _Gone:
    code = up.close_code
    if code is None or code in (1005, 1006):
        return _Gone(INTERNAL_ERROR, "the worker holding this scene stopped; reconnect")
    return _Gone(code, up.close_reason or "")


class _InFlight:
    """One client's requests on their way to each worker, not answered yet."""

    def __init__(self) -> None:
        self.count: dict[int, int] = {}
        self.changed = asyncio.Event()

    def sent(self, k: int) -> None:
        self.count[k] = self.count.get(k, 0) + 1

    def answered(self, k: int) -> None:
        self.count[k] = max(0, self.count.get(k, 0) - 1)
        self.changed.set()

    def lost(self, k: int) -> None:
        """The link to worker `k` closed: nothing more comes from it."""
        self.count.pop(k, None)
        self.changed.set()

    async def only(self, k: int) -> None:
        """Until no request to a worker other than `k` waits for its answer."""
        while any(n for j, n in self.count.items() if j != k):
            self.changed.clear()
            await self.changed.wait()


class Front(Listener):
    """Client connections for the workers listening on `sockets` (worker k on
    sockets[k])."""

    def __init__(self, sockets: Sequence[str], limits: EdgeLimits | None = None) -> None:
        super().__init__(limits)
        self.sockets = list(sockets)

    async def _open(self, k: int, hello: bytes | str) -> tuple[ClientConnection, bytes | str]:
        """A link to worker `k` that has said `hello`, and the worker's first answer (its
        welcome); _Gone when the worker closed it instead."""
        waited = 0.0
        while True:
            try:
                up = await unix_connect(self.sockets[k], max_size=None, compression=None,
                                        max_queue=4)
                break
            except InvalidStatus as exc:  # the worker refused it at the handshake (503)
                raise _Gone(TRY_AGAIN_LATER, "the worker holding this scene is busy; try "
                            "again later") from exc
            except OSError as exc:
                # A worker being started again (server/workers.py) listens within seconds.
                if waited >= REACH_S:
                    raise _Gone(INTERNAL_ERROR, "the worker holding this scene is not "
                                "reachable; try again") from exc
                await asyncio.sleep(0.1)
                waited += 0.1
        try:
            await up.send(hello)
            first = await up.recv()
            if await up.recv() != ANSWERED:  # the welcome is the hello's only reply
                raise _Gone(INTERNAL_ERROR, "the worker holding this scene answered the "
                            "hello out of turn; reconnect")
            return up, first
        except ConnectionClosed:
            raise _closed(up) from None

    async def handler(self, ws: ServerConnection) -> None:
        loop = asyncio.get_running_loop()
        links = Links(len(self.sockets))
        ups: dict[int, ClientConnection] = {}
        inflight = _InFlight()
        tasks: list[asyncio.Task[None]] = []
        gone: asyncio.Future[_Gone] = loop.create_future()
        deadline = loop.call_later(
            self.limits.hello_timeout_s, self._close_later, ws, POLICY_VIOLATION,
            f"no hello within {self.limits.hello_timeout_s:g} s")

        def lost(k: int, up: ClientConnection) -> None:
            """Link k closed by its worker."""
            if ups.get(k) is not up:
                return  # an older link to a worker started again
            del ups[k]
            inflight.lost(k)
            if links.lost(k) and not gone.done():
                gone.set_result(_closed(up))

        def link(k: int, up: ClientConnection) -> None:
            ups[k] = up
            tasks.append(asyncio.create_task(self._pump(k, up, ws, lost, inflight)))
            tasks.append(asyncio.create_task(self._watch(k, up, lost)))

        reader = asyncio.create_task(self._forward(ws, links, ups, link, deadline, inflight))
        try:
            waiting: list[asyncio.Future[Any]] = [reader, gone]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if reader.done() and not reader.cancelled():
                exc = reader.exception()
                if isinstance(exc, _Gone) and not gone.done():
                    gone.set_result(exc)
                elif exc is not None:
                    log.error("bug while passing a client's frames on", exc_info=exc)
                    if not gone.done():
                        gone.set_result(_Gone(INTERNAL_ERROR, "internal error"))
            if gone.done():
                why = gone.result()
                await ws.close(why.code, why.reason)
        except ConnectionClosed:
            pass
        finally:
            deadline.cancel()
            reader.cancel()
            for up in list(ups.values()):
                await up.close()
            for task in (reader, *tasks):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _forward(self, ws: ServerConnection, links: Links,
                       ups: dict[int, ClientConnection],
                       link: Callable[[int, ClientConnection], None],
                       deadline: asyncio.TimerHandle, inflight: _InFlight) -> None:
        """The client's frames, each to its scene's worker (raises _Gone when a worker
        closed the link the frame was for, or cannot be reached)."""
        try:
            async for frame in ws:
                deadline.cancel()
                k, new = links.target(frame)
                if new and links.hello is None:
                    up, first = await self._open(k, frame)
                    if isinstance(ws, Guarded):
                        ws.welcome()  # before the welcome goes out
                    await ws.send(first)
                    links.greeted(frame)
                    link(k, up)
                    continue
                # Replies in request order: the other workers answer first.
                await inflight.only(k)
                held = ups.get(k)
                if held is None:  # a worker not used yet, or whose link closed meanwhile
                    assert links.hello is not None
                    held, _ = await self._open(k, links.hello)  # its welcome: said already
                    links.opened(k)
                    link(k, held)
                up = held
                links.sent(k)
                inflight.sent(k)
                try:
                    await up.send(frame)
                except ConnectionClosed:
                    raise _closed(up) from None
        except ConnectionClosed:
            return

    @staticmethod
    async def _pump(k: int, up: ClientConnection, ws: ServerConnection,
                    lost: Callable[[int, ClientConnection], None],
                    inflight: _InFlight) -> None:
        """A worker's frames to the client, in order; when the worker closes the link, the
        client is closed the same way (after the frames sent before it) if it had used
        that worker."""
        try:
            async for frame in up:
                if frame == ANSWERED:
                    inflight.answered(k)
                    continue
                await ws.send(frame)
        except ConnectionClosed:
            if ws.close_code is not None:
                return  # the client is gone
        lost(k, up)

    @staticmethod
    async def _watch(k: int, up: ClientConnection,
                     lost: Callable[[int, ClientConnection], None]) -> None:
        """A link closed while its pump waits on a client that does not read (a worker
        closing it for that very reason): the client is closed all the same."""
        await up.wait_closed()
        await asyncio.sleep(_LAST_FRAMES_S)  # the pump forwards what came before the close
        lost(k, up)


async def run(sockets: Sequence[str], host: str, port: int,
              ready: Callable[[int], Awaitable[None] | None] | None = None,
              limits: EdgeLimits | None = None) -> None:
    """Serve clients for these workers until cancelled; `ready` is told the bound port."""
    await Front(sockets, limits).serve(host, port, ready)
