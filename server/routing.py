"""Which worker a client's frame goes to, when scenes live in several processes.

Rule of this module: sans-I/O routing, read from a frame's `type` and scene id and from a
scene id's stable hash, never from sockets or processes (server/front.py and server/nats.py
move the frames). Every request but `hello` names its scene (`scene.load` in its document's
`id` or `_id`, every other one in `scene`), and a scene belongs to one worker: requests of
one scene are all handled, in order, by that worker, which holds its subscribers and
computes its annotations. `hello` is the connection's own: the front process sends it to
one worker, for the welcome, and replays it on every other worker the connection comes to
use (the client said it once). A frame whose scene cannot be read (not a map, no scene, a
scene that is no string) goes to the connection's first worker, which refuses it exactly as
a single server would: the front never judges a frame, it only reads where it goes.

The owner of a scene is the hash of its id modulo the number of workers (the embedded
mode, server/front.py), or whoever holds its lease (NATS mode, server/nats.py); the hash is
BLAKE2b of the id's UTF-8, the same in every process and on every machine (Python's own
`hash` of a string differs from one process to the next).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import msgspec


class _SceneDoc(msgspec.Struct):
    id: Any = None
    alias: Any = msgspec.field(default=None, name="_id")


class _Peek(msgspec.Struct):
    """The two fields routing reads; every other field is skipped unread."""

    type: Any = None
    scene: str | _SceneDoc | None = None


_JSON_PEEK = msgspec.json.Decoder(_Peek)
_MSGPACK_PEEK = msgspec.msgpack.Decoder(_Peek)

#: The frame is a `hello` (the connection's first frame, or a client's mistake later).
HELLO = "hello"


@dataclass(frozen=True, slots=True)
class Route:
    """Where a frame goes: `scene` is the scene it names (None: none can be read), and
    `hello` tells a hello; `kind` is its `type` when that is a string (the front process
    of NATS mode remembers subscriptions)."""

    scene: str | None
    hello: bool = False
    kind: str | None = field(default=None, compare=False)


def peek(frame: bytes | str) -> Route:
    """The route of a client frame (binary frames are msgpack, text frames JSON). Keys that
    occur twice count as the request decoder counts them (the last one)."""
    try:
        head = _JSON_PEEK.decode(frame) if isinstance(frame, str) else _MSGPACK_PEEK.decode(
            frame)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        # Nested too deeply to read (msgspec's own bound) or not readable at all: the
        # worker the frame goes to refuses it, as one server would.
        return Route(None)
    kind = head.type if isinstance(head.type, str) else None
    if kind == HELLO:
        return Route(None, hello=True, kind=kind)
    scene = head.scene
    if isinstance(scene, _SceneDoc):
        if kind != "scene.load":
            return Route(None, kind=kind)
        sid = scene.alias if scene.alias is not None else scene.id
        return Route(sid if isinstance(sid, str) and sid else None, kind=kind)
    return Route(scene if isinstance(scene, str) and scene and kind != "scene.load"
                 else None, kind=kind)


def scene_hash(scene: str) -> bytes:
    """A scene id's stable 16-byte digest."""
    return hashlib.blake2b(scene.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def owner(scene: str, workers: int) -> int:
    """The worker (0 .. workers - 1) a scene belongs to in the embedded mode."""
    return int.from_bytes(scene_hash(scene)[:8], "big") % workers


def subject_token(scene: str) -> str:
    """A scene id as one token of a NATS subject (a subject token may not hold '.', '*',
    '>' or white space; an id may hold anything): its digest in hex."""
    return scene_hash(scene).hex()


@dataclass(slots=True)
class Links:
    """One client connection's links to the workers, as the front process holds them: the
    hello it said (replayed on each worker it comes to use), the workers it has a link to,
    in the order they were opened, and those it sent more than its hello (the workers
    holding something of it: a subscription, a reply on its way)."""

    workers: int
    hello: bytes | str | None = None
    used: list[int] = field(default_factory=list)
    active: set[int] = field(default_factory=set)

    def target(self, frame: bytes | str) -> tuple[int, bool]:
        """The worker this frame goes to, and whether a link to it is to be opened (the
        hello is then said there first). Before the welcome, worker 0 (the frame is the
        hello, or a frame that worker refuses by closing the connection); a frame without
        a scene goes to the first worker linked."""
        if self.hello is None:
            return 0, True
        route = peek(frame)
        if route.scene is not None:
            k = owner(route.scene, self.workers)
        else:
            k = self.used[0] if self.used else 0
        return k, k not in self.used

    def greeted(self, hello: bytes | str) -> None:
        """Worker 0 welcomed the connection with this hello."""
        self.hello = hello
        self.opened(0)

    def opened(self, k: int) -> None:
        """The link to worker `k` is open and has said the hello."""
        if k not in self.used:
            self.used.append(k)

    def sent(self, k: int) -> None:
        """A frame went to worker `k`."""
        self.active.add(k)

    def lost(self, k: int) -> bool:
        """The link to worker `k` is gone (the worker stopped); whether the client must be
        closed for it: it had sent that worker more than its hello (what the worker held
        of it is lost). A link that only said hello is opened again when needed."""
        if k in self.used:
            self.used.remove(k)
        return k in self.active
