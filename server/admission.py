"""Who may connect and how much a connection may make the server hold: the edge's limits.

Rule of this module: the numbers and the counting that keep one client (or many) from
using up the server's descriptors, memory or worker before it has even said who it is;
plain values and counters, no sockets (server/connection.py and server/app.py apply them).

- Before `welcome` a connection may send PRE_HELLO_BYTES in all (a `hello` is a few
  hundred bytes); past that it is closed with 1009 ("message too big", the code RFC 6455
  gives to data too big to process) without a byte more being read or decoded.
- A connection that has not sent its first frame HELLO_TIMEOUT_S after the handshake is
  closed with 1008 (policy violation).
- Connections are counted from the accepted socket on, per peer address and in total; past
  either cap a request is answered HTTP 503 at the handshake (with Retry-After). The total
  cap stays below the process's descriptor limit (RLIMIT_NOFILE), so the server can always
  accept, refuse and log.
- A welcomed connection's frames waiting for the worker may hold INBOUND_BYTES, its replies
  waiting for the socket REPLY_BYTES (one frame is always taken, however large, when
  nothing else waits: a whole scene's annotations); past either it is closed with 1013
  (try again later).
"""

from __future__ import annotations

import logging
import resource
import time
from collections import Counter
from dataclasses import dataclass

from server.messages import LIMITS

#: Bytes a connection may send between the handshake and `welcome`.
PRE_HELLO_BYTES = 4096
#: Seconds a connection has, after the handshake, to send its first frame (its hello).
HELLO_TIMEOUT_S = 5.0
#: Connections from one peer address.
MAX_PER_ADDRESS = 256
#: Connections in all (lowered to what the descriptor limit leaves, see `total_cap`).
MAX_CONNECTIONS = 4096
#: Frames received and not yet handed to the worker, per welcomed connection: two frames
#: of the largest size a client may send.
INBOUND_BYTES = 2 * LIMITS.max_frame_bytes
#: Replies waiting for the socket, per connection (beyond one frame of any size).
REPLY_BYTES = 8 * 1024 * 1024
#: Descriptors kept free of connections: the listening sockets, the state store, logs,
#: the worker's files, and room to accept and refuse.
_RESERVE_MIN = 64

POLICY_VIOLATION = 1008
MESSAGE_TOO_BIG = 1009
TRY_AGAIN_LATER = 1013


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """The limits of the network edge, as configured (server.app, `covercast serve`)."""

    pre_hello_bytes: int = PRE_HELLO_BYTES
    hello_timeout_s: float = HELLO_TIMEOUT_S
    max_per_address: int = MAX_PER_ADDRESS
    max_connections: int = MAX_CONNECTIONS
    inbound_bytes: int = INBOUND_BYTES
    reply_bytes: int = REPLY_BYTES


def descriptor_limit() -> int:
    """The process's soft limit on open files (RLIMIT_NOFILE; a large number if none)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def total_cap(wanted: int, nofile: int | None = None) -> int:
    """The total number of connections the server admits: `wanted`, lowered to keep a
    tenth of the descriptor limit (at least 64) free, and at least 1."""
    limit = descriptor_limit() if nofile is None else nofile
    return max(1, min(wanted, limit - max(_RESERVE_MIN, limit // 10)))


class Admission:
    """Counts open connections, per peer address and in total, against the caps."""

    def __init__(self, total: int, per_address: int) -> None:
        self.total = total
        self.per_address = per_address
        self.open = 0
        self.by_address: Counter[str] = Counter()

    def admit(self, address: str) -> str | None:
        """Count a new connection from `address`; None if admitted, else why not (it is
        then not counted)."""
        if self.open >= self.total:
            return f"the server holds {self.open} connections, its limit"
        if self.by_address[address] >= self.per_address:
            return (f"{self.by_address[address]} connections from {address} are open, the "
                    f"limit per address")
        self.open += 1
        self.by_address[address] += 1
        return None

    def release(self, address: str) -> None:
        """An admitted connection from `address` is gone."""
        self.open -= 1
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]


class Seldom:
    """A log line said at most once per `interval` seconds, with how many times it was
    suppressed since (a resource error repeats on every accept; the log must not)."""

    def __init__(self, logger: logging.Logger, interval: float = 60.0) -> None:
        self.logger = logger
        self.interval = interval
        self._last = float("-inf")
        self._quiet = 0

    def __call__(self, level: int, message: str, *args: object) -> bool:
        """Log `message` now if the last one is `interval` old; returns whether it did."""
        now = time.monotonic()
        if now - self._last < self.interval:
            self._quiet += 1
            return False
        if self._quiet:
            message += f" (and {self._quiet} more like it in the last %.0f s)"
            args = (*args, now - self._last)
        self._last, self._quiet = now, 0
        self.logger.log(level, message, *args)
        return True
