"""Shared fixtures: a real Covercast server on 127.0.0.1 and a synchronous client for it."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest
from websockets.sync.client import ClientConnection, connect

from server.admission import EdgeLimits
from server.app import run
from server.session import Core
from server.store import Store


@pytest.fixture(autouse=True)
def _nothing_kept_from_other_tests() -> None:
    """Each test starts with nothing the rulesets keep across revisions of a scene
    (`rulesets.forget_kept`): a test that counts what an evaluation computes must not
    find it read back from an earlier test's scene."""
    from rulesets import forget_kept

    forget_kept()


#: The threads of a websockets client connection (websockets.sync): one reading frames,
#: one sending keepalive pings.
_CONNECTION_THREADS = ("(recv_events)", "(keepalive)")


@pytest.fixture(autouse=True)
def _no_connection_left_open() -> Iterator[None]:
    """Every client connection a test opens is closed by its end. A connection left open
    keeps its threads, and its keepalive thread draws its pings from the `random` module
    every 20 s: drawn while Hypothesis generates a later test's example, that is
    Hypothesis's "Do not use the `random` module inside strategies" warning, blamed on
    whatever strategy was running (stops 45 and 46 saw it, each time on another one)."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5.0
    while True:
        left = [t.name for t in threading.enumerate()
                if t not in before and t.name.endswith(_CONNECTION_THREADS)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert not left, f"client connections left open: {left}"


# No test reads or writes the user's own state store (`covercast serve` without --state
# uses $XDG_STATE_HOME/covercast/state.sqlite3, and brings back every scene it holds):
# this run's servers, and the processes they start, get a folder of their own. A process
# the run starts that imports this file again keeps the run's folder; the run's own
# process removes it when it exits (one folder was left in /tmp per import before).
_STATE_PREFIX = "covercast-tests-state-"
if not os.path.basename(os.environ.get("XDG_STATE_HOME", "")).startswith(_STATE_PREFIX):
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix=_STATE_PREFIX)
    _state_owner = os.getpid()

    @atexit.register
    def _remove_state_folder() -> None:
        if os.getpid() == _state_owner:
            shutil.rmtree(os.environ["XDG_STATE_HOME"], ignore_errors=True)


class LiveServer:
    """A Covercast server running on its own event loop in a background thread; `state`
    is its store file (None: in memory)."""

    def __init__(self, token: str | None = None, state: str | None = None,
                 seed: int | None = None, player_token: str | None = None,
                 overlay_token: str | None = None, limits: EdgeLimits | None = None) -> None:
        self.limits = limits
        self.store = Store(state) if state is not None else Store()
        self.core = Core(access_token=token, player_token=player_token,
                         overlay_token=overlay_token, store=self.store, seed=seed)
        self.port = 0
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)

        def ready(port: int) -> None:
            self.port = port
            self._ready.set()

        self._task = self._loop.create_task(run(self.core, "127.0.0.1", 0, ready,
                                                  self.limits))
        with contextlib.suppress(asyncio.CancelledError):
            self._loop.run_until_complete(self._task)

    def start(self) -> LiveServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("server did not start")
        return self

    def stop(self) -> None:
        if self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(10)
        self.store.close()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Peer:
    """A test client: send dicts as msgpack (or JSON text), receive decoded dicts."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    @classmethod
    def open(cls, url: str) -> Peer:
        # Entered as websockets asks (its context manager), closed by close().
        ws = connect(url, max_size=None).__enter__()
        return cls(ws)

    def send(self, message: dict[str, Any]) -> None:
        self.ws.send(msgpack.packb(message))

    def send_raw(self, frame: bytes | str) -> None:
        self.ws.send(frame)

    def recv(self, timeout: float = 10) -> dict[str, Any]:
        frame = self.ws.recv(timeout)
        if isinstance(frame, str):
            import json

            out: dict[str, Any] = json.loads(frame)
            return out
        decoded: dict[str, Any] = msgpack.unpackb(frame, raw=False)
        return decoded

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.send(message)
        return self.recv()

    def hello(self, token: str | None = None, role: str | None = None) -> dict[str, Any]:
        msg: dict[str, Any] = {"type": "hello", "protocol": 1, "client": "pytest"}
        if token is not None:
            msg["token"] = token
        if role is not None:
            msg["role"] = role
        return self.request(msg)

    def close(self) -> None:
        self.ws.close()


def close_all(peers: list[Peer]) -> None:
    """Close these connections and forget them: what a test opened on a server its module
    shares (`_no_connection_left_open`)."""
    for p in peers:
        p.close()
    peers.clear()


@pytest.fixture
def live_server() -> Iterator[LiveServer]:
    server = LiveServer().start()
    yield server
    server.stop()


@pytest.fixture
def peer_factory(live_server: LiveServer) -> Iterator[Any]:
    peers: list[Peer] = []

    def make(greet: bool = True) -> Peer:
        p = Peer.open(live_server.url)
        peers.append(p)
        if greet:
            welcome = p.hello()
            assert welcome["type"] == "welcome", welcome
        return p

    yield make
    close_all(peers)


def moves_warm_and_cold(ruleset: Any, geom: Any, options: Any, counted: list[int],
                        moves: int, mover: Callable[[int], int],
                        same: Callable[[Any, Any], None]) -> tuple[Any, int, int]:
    """Move after move (token mover(m) one square, from the scene before), each move's
    pairs evaluated warm (with what `rulesets.kept` holds from earlier snapshots) and cold
    (nothing held: the tables set aside, then put back), asserted the `same`. `counted`:
    a list the caller's counting patch appends to. Returns the last scene and what was
    counted warm and cold."""
    from bench.hexbench import moved
    from geometry.incremental import affected_pairs
    from rulesets import kept as kept_mod

    current, warm_count, cold_count = geom, 0, 0
    for m in range(moves):
        after = moved(current, mover(m) % len(current.creatures))
        found = affected_pairs(current, after)
        assert found is not None
        pairs = sorted(ruleset.widen(current, after, options, set(found)))
        counted.clear()
        warm = ruleset.evaluate(after, options, pairs)
        warm_count += sum(counted)
        held = dict(kept_mod._TABLES)
        kept_mod._TABLES.clear()
        counted.clear()
        same(warm, ruleset.evaluate(after, options, pairs))
        cold_count += sum(counted)
        kept_mod._TABLES.clear()
        kept_mod._TABLES.update(held)
        current = after
    return current, warm_count, cold_count


def banded_walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count what `geometry.openings.banded_walk` seals: per call, the pairs it sealed (the
    list returned fills as the test runs), so that a test can tell that it took part."""
    from geometry import openings

    walk = openings.banded_walk
    found: list[int] = []

    def counting(*args: Any) -> Any:
        out = walk(*args)
        found.append(int(out.sum()))
        return out

    monkeypatch.setattr(openings, "banded_walk", counting)
    return found


def heads_level_with_a_band() -> Any:
    """A second reviewer's scene: 12 creatures left of a long wall 7.9 ft tall and 12
    right of it, their heads at 7.9 ft too (3.1 + 4.8 on the left, 4.2 + 3.7 on the
    right), 276 pairs and no plain wall, so a whole table walks the banded walls. Along a
    line between them the head line, interpolated, rounds a float step above the wall's
    top: a line passes over it, and the band does not hold the pairs whole."""
    from geometry import model as m

    wall = m.WallGeom("w", 1300.0, -5000.0, 1300.0, 5000.0, True, False, m.Direction.BOTH,
                      m.WallCover.SOLID, None, 7.9)
    cs = []
    for k in range(12):
        cs.append(m.CreatureGeom(f"L{k}", 200.0, 200.0 * k, 1, 1, m.Size.MEDIUM, 5.0, 4.8,
                                 3.1, 1, False))
        cs.append(m.CreatureGeom(f"R{k}", 1800.0, 200.0 * k, 1, 1, m.Size.MEDIUM, 5.0, 3.7,
                                 4.2, 1, False))
    return m.SceneGeom(m.Grid(m.GridKind.SQUARE, 100, 5.0, "ft"), (wall,), tuple(cs))
