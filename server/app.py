"""The network edge: the only module of `server` that imports asyncio or websockets.

Rule of this module: move frames between sockets and the sans-I/O Core, nothing else. The
Core runs on one worker thread, so geometry never blocks the event loop (pings and other
connections keep flowing) and the Core never sees two frames at once. Each connection has
a bounded outgoing queue; a client too slow to drain it is closed rather than allowed to
grow the server's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from server.messages import LIMITS
from server.session import Close, Core, Output, Send

log = logging.getLogger("covercast.app")

OUTGOING_QUEUE = 1024
TRY_AGAIN_LATER = 1013


class App:
    """A running Covercast server: a Core behind a websockets listener."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="covercast-core")
        self._queues: dict[int, asyncio.Queue[bytes | str | None]] = {}
        self._sockets: dict[int, ServerConnection] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def _core(self, fn: Callable[..., Any], *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, fn, *args)

    async def handler(self, ws: ServerConnection) -> None:
        conn: int = await self._core(self.core.connect)
        queue: asyncio.Queue[bytes | str | None] = asyncio.Queue(OUTGOING_QUEUE)
        self._queues[conn] = queue
        self._sockets[conn] = ws
        writer = asyncio.create_task(self._writer(ws, queue))
        try:
            async for frame in ws:
                outputs: list[Output] = await self._core(self.core.receive, conn, frame)
                await self._deliver(outputs)
        except ConnectionClosed:
            pass
        finally:
            self._queues.pop(conn, None)
            self._sockets.pop(conn, None)
            await self._core(self.core.disconnect, conn)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    async def _deliver(self, outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, Send):
                queue = self._queues.get(out.conn)
                if queue is None:
                    continue
                try:
                    queue.put_nowait(out.frame)
                except asyncio.QueueFull:
                    log.warning("connection %d too slow, closing it", out.conn)
                    ws = self._sockets.get(out.conn)
                    if ws is not None:
                        task = asyncio.create_task(ws.close(TRY_AGAIN_LATER, "too slow"))
                        self._closing.add(task)
                        task.add_done_callback(self._closing.discard)
            elif isinstance(out, Close):
                ws = self._sockets.get(out.conn)
                queue = self._queues.get(out.conn)
                if queue is not None:
                    # Frames queued before the close still go out, then the close itself.
                    await queue.join()
                if ws is not None:
                    await ws.close(out.code, out.reason)

    async def _writer(self, ws: ServerConnection,
                      queue: asyncio.Queue[bytes | str | None]) -> None:
        while True:
            frame = await queue.get()
            try:
                if frame is not None:
                    await ws.send(frame)
            except ConnectionClosed:
                return
            finally:
                queue.task_done()

    async def start(self, host: str, port: int) -> Server:
        # Per-message deflate is off: measured, it made one 20 KB broadcast to 50 clients
        # cost ~50 ms of CPU instead of under 1 ms; annotation frames are small and local.
        return await serve(self.handler, host, port, max_size=LIMITS.max_frame_bytes,
                           compression=None, max_queue=16)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


async def run(core: Core, host: str, port: int,
              ready: Callable[[int], Awaitable[None] | None] | None = None) -> None:
    """Serve until cancelled; `ready` is told the bound port (port 0 picks a free one)."""
    app = App(core)
    server = await app.start(host, port)
    bound = next(iter(server.sockets)).getsockname()[1]
    try:
        if ready is not None:
            maybe = ready(bound)
            if maybe is not None:
                await maybe
        await server.serve_forever()
    finally:
        server.close()
        await server.wait_closed()
        app.shutdown()
