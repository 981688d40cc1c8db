"""One client connection at the edge: what it may send before `welcome`, and the bytes it
may make the server hold in either direction.

Rule of this module: per-connection bookkeeping for server/app.py, in bytes (never in
frames: a frame may be 20 bytes or 4 MiB); it applies the limits of server/admission.py
and moves no frame to or from the Core.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from websockets.asyncio.server import ServerConnection
from websockets.protocol import State

from server.admission import MESSAGE_TOO_BIG, Admission, EdgeLimits
from server.frames import Parts

#: What waits in either direction: a frame, or one given in parts (an Outbox's only).
_Frame = TypeVar("_Frame", bytes | str, bytes | str | Parts)


def _size(frame: bytes | str | Parts) -> int:
    # A text frame's characters are nearly all ASCII (JSON); its length is near its bytes.
    return len(frame)


class Guarded(ServerConnection):
    """A websockets connection that is counted from its accepted socket on, and reads at
    most `pre_hello_bytes` of frames before it is welcomed (see `greeted`)."""

    limits: EdgeLimits
    admission: Admission
    #: Told (on the loop) when a connection is refused at accept time or past its limit.
    on_refused: Callable[[str], None]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.greeted = False
        self.address = ""
        #: Why the connection is not admitted (None: it is, and counted).
        self.refused: str | None = "not yet accepted"
        self._read = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) and peer else str(peer)
        self.refused = self.admission.admit(self.address)
        if self.refused is not None:
            self.on_refused(self.refused)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.refused is None:
            self.admission.release(self.address)
            self.refused = "closed"
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.greeted and self.protocol.state is State.OPEN:
            # Bytes of frames before welcome (the handshake's own are websockets' to bound).
            self._read += len(data)
            if self._read > self.limits.pre_hello_bytes:
                # The close goes out, and from now on websockets drops what comes in
                # unparsed (its parser discards until the client closes): the client's
                # send finishes and it reads the close, and nothing piles up here.
                self.protocol.fail(MESSAGE_TOO_BIG,
                                   f"more than {self.limits.pre_hello_bytes} bytes before "
                                   "welcome: send hello alone and wait for welcome")
        super().data_received(data)

    def welcome(self) -> None:
        """The connection is welcomed: from now on its frames are bounded by the
        protocol's frame size alone."""
        self.greeted = True


class _Budget(Generic[_Frame]):
    """Frames waiting in one direction of one connection, bounded in bytes: a frame that
    would take them past `budget` is refused (the caller closes the connection); the first
    waiting frame is always taken, whatever its size."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.bytes = 0
        self._frames: deque[_Frame | None] = deque()

    def put(self, frame: _Frame) -> bool:
        size = _size(frame)
        if self._frames and self.bytes + size > self.budget:
            return False
        self._frames.append(frame)
        self.bytes += size
        self._added()
        return True

    def _added(self) -> None:
        """A frame was queued (for a waiter to hear of)."""

    def _take(self) -> _Frame | None:
        frame = self._frames.popleft()
        if frame is not None:
            self.bytes -= _size(frame)
        return frame


class Inbox(_Budget[bytes | str]):
    """Frames received from one connection and not yet handed to the worker."""

    def __init__(self, budget: int) -> None:
        super().__init__(budget)
        self._ready = asyncio.Event()

    def _added(self) -> None:
        self._ready.set()

    def end(self) -> None:
        """No more frames will come (`get` answers None once the others are taken)."""
        self._frames.append(None)
        self._ready.set()

    async def get(self) -> bytes | str | None:
        while not self._frames:
            self._ready.clear()
            await self._ready.wait()
        return self._take()


class Outbox(_Budget[_Frame]):
    """Replies waiting for one connection's socket (never None): frames, and for
    server/app.py frames given in parts too."""

    def empty(self) -> bool:
        return not self._frames

    def get(self) -> _Frame:
        frame = self._take()
        assert frame is not None  # only an Inbox is ever ended
        return frame
