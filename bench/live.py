"""Figures through the server: one move through the sans-I/O Core, peak memory, end to end
over real WebSockets, and permessage-deflate's cost.

Worker entry points (each prints nothing and writes JSON to --out), run by `python -m bench`:

    python -m bench.live move --tokens 100 --walls 1000 --out r.json
    python -m bench.live memory --tokens 100 --walls 1000 --out r.json
    python -m bench.live compression --tokens 100 --walls 1000 --clients 50 --out r.json
    python -m bench.live sizes --tokens 100 --walls 1000 --out r.json   # compact vs verbose
    python -m bench.live e2e --ruleset pf2 --compact --runs 3 --out r.json
    python -m bench.live e2e-matrix --rulesets dnd35 pf2 realms --runs 3 --moves 100
    python -m bench.live fan-out --rulesets dnd35 pf2 realms   # where a move's time goes
    python -m bench.live serve          # the real server (server.app.run); prints PORT n,
                                        # stops when its stdin closes

The end-to-end figure (`e2e`) runs in the parent: its clients are asyncio websockets clients
in one process, talking to the server in a child process (or, with --server-in-thread, in a
thread of the same process, as tests.conftest.LiveServer does). A delta's arrival is when
the client process's event loop woke with its last bytes in the socket (the selector
returned), not when that client's task got to it: 50 clients in one process handle their
frames one after another (about 55 us each), which a real subscriber, alone on its
machine, does not wait for; that later time is reported too ("handled").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import os
import select
import selectors
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import DATA_OPCODES, Frame
from websockets.protocol import Event

from bench.scenes import BenchScene, Move, generate, move_frame, path, pick_mover
from covercast.client import expand, expand_plain
from server.app import run
from server.compact import encode_annotations
from server.memory import tune_process
from server.messages import Annotations, CompactAnnotations
from server.session import Core, Output, Send
from server.tables import annotation_out

Result = dict[str, Any]
Key = tuple[str, str, str]

HELLO: dict[str, Any] = {"type": "hello", "protocol": 1, "client": "covercast-bench"}
REPO = Path(__file__).resolve().parent.parent


def pack(message: dict[str, Any]) -> bytes:
    data: bytes = msgpack.packb(message)
    return data


def unpack(frame: bytes | str) -> dict[str, Any]:
    if isinstance(frame, str):
        out: dict[str, Any] = json.loads(frame)
        return out
    decoded: dict[str, Any] = msgpack.unpackb(frame, raw=False)
    return decoded


def peek(frame: bytes | str) -> tuple[str | None, int | None, bool | None]:
    """(type, revision, full) of a frame without decoding its annotations (a client-side
    cost that would otherwise dominate the latency measured for 50 clients in one process)."""
    if isinstance(frame, str):
        d = json.loads(frame)
        return d.get("type"), d.get("revision"), d.get("full")
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(frame)
    typ: str | None = None
    rev: int | None = None
    full: bool | None = None
    for _ in range(unpacker.read_map_header()):
        key = unpacker.unpack()
        if key == "annotations":
            break
        value = unpacker.unpack()
        if key == "type":
            typ = value
        elif key == "revision":
            rev = value
        elif key == "full":
            full = value
        if typ is not None and rev is not None and full is not None:
            return typ, rev, full
    d = unpack(frame)
    return d.get("type"), d.get("revision"), d.get("full")


def _key(a: dict[str, Any]) -> Key:
    return (a["attacker"], a["target"], a["mode"])


def _sends_to(outputs: Sequence[Output], conn: int) -> list[bytes | str]:
    return [o.frame for o in outputs if isinstance(o, Send) and o.conn == conn]


def _one(outputs: Sequence[Output], conn: int, typ: str) -> dict[str, Any]:
    for frame in _sends_to(outputs, conn):
        msg = unpack(frame)
        if msg.get("type") == typ:
            return msg
    raise RuntimeError(f"expected a {typ!r} frame for connection {conn}, got "
                       f"{[unpack(f).get('type') for f in _sends_to(outputs, conn)]}")


class CoreHarness:
    """A Core with one game master (who loads and moves) and subscribers, frames in msgpack."""

    def __init__(self, scene: BenchScene) -> None:
        self.scene = scene
        self.core = Core()
        self.gm = self.connect()
        self.receive(self.gm, pack(scene.message))

    def connect(self) -> int:
        conn = self.core.connect()
        _one(self.core.receive(conn, pack(HELLO)), conn, "welcome")
        return conn

    def receive(self, conn: int, frame: bytes | str) -> list[Output]:
        """One frame in, every frame out, deltas included (Notify resolved now)."""
        return list(self.core.drain(self.core.receive(conn, frame)))

    def subscribe(self, conn: int) -> tuple[bytes | str, dict[str, Any]]:
        frame = pack({"type": "subscribe", "scene": self.scene.scene_id, "id": "sub"})
        outs = self.receive(conn, frame)
        (reply,) = _sends_to(outs, conn)
        return reply, unpack(reply)


def _moved(scene: BenchScene, token: str, to: tuple[float, float]) -> BenchScene:
    geom = scene.geom
    creatures = tuple(replace(c, x=to[0], y=to[1]) if c.id == token else c
                      for c in geom.creatures)
    return replace(scene, geom=replace(geom, creatures=creatures))


def fresh_table(scene: BenchScene) -> dict[Key, Any]:
    """What a subscriber should hold: a full evaluation, as the wire carries it."""
    from rulesets import REGISTRY

    ruleset = REGISTRY.get(scene.message["ruleset"])
    opts = msgspec.convert(scene.message["options"], ruleset.Options)
    return {a.key(): msgspec.to_builtins(annotation_out(a))
            for a in ruleset.evaluate(scene.geom, opts)}


# -- one move through the Core -------------------------------------------------------------------

def core_move(tokens: int, walls: int, seed: int, moves: int = 20,
              ruleset: str = "dnd35", walking: bool = False) -> Result:
    scene = generate(tokens, walls, seed)
    if ruleset != scene.message["ruleset"]:
        scene = replace(scene, message={**scene.message, "ruleset": ruleset})
    h = CoreHarness(scene)
    sub = h.connect()
    t0 = time.perf_counter()
    snapshot_frame, snapshot = h.subscribe(sub)
    subscribe_s = time.perf_counter() - t0
    view = {_key(a): a for a in snapshot["annotations"]}
    mover = pick_mover(scene, snapshot["annotations"])
    times: list[float] = []
    cpu_times: list[float] = []  # CPU time of this thread: what the Core itself costs
    changed: list[int] = []
    sizes: list[int] = []
    places = path(scene, mover, moves + 1, walking)
    for k in range(moves + 1):  # the last one is not timed: it checks the result
        position = places[k]
        frame = pack(move_frame(scene, mover[0], position, k))
        # The idle-time work the server does after each change's fan-out, not timed.
        h.core.prepare(scene.scene_id)
        gc.collect()
        c0 = time.thread_time()
        t0 = time.perf_counter()
        outs = h.receive(h.gm, frame)
        elapsed = time.perf_counter() - t0
        cpu = time.thread_time() - c0
        _one(outs, h.gm, "ack")
        delta = _one(outs, sub, "annotations")
        for a in delta["annotations"]:
            view[_key(a)] = a
        for key in delta.get("removed", []):
            view.pop((key[0], key[1], key[2]), None)
        if k < moves:
            times.append(elapsed)
            cpu_times.append(cpu)
            changed.append(len(delta["annotations"]))
            sizes.append(len(_sends_to(outs, sub)[0]))
    expected = fresh_table(_moved(scene, mover[0], position))
    wrong = sorted(k for k in expected.keys() | view.keys() if expected.get(k) != view.get(k))
    return {
        "tokens": tokens, "walls": walls, "moves": moves, "mover": mover[0], "ruleset": ruleset,
        "walking": walking,
        "median_s": statistics.median(times), "times": times,
        "cpu_median_s": statistics.median(cpu_times),
        "changed_median": statistics.median(changed), "changed_max": max(changed),
        "delta_bytes_median": statistics.median(sizes),
        "subscribe_s": subscribe_s, "snapshot_bytes": len(snapshot_frame),
        "view_matches_fresh": not wrong, "view_mismatches": len(wrong),
        "view_examples": [str(k) for k in wrong[:3]],
    }


# -- peak memory -----------------------------------------------------------------------------------

def core_memory(tokens: int, walls: int, seed: int) -> Result:
    """tracemalloc around loading the scene into a Core and computing its full matrix (the
    first subscription). Counts Python and numpy allocations; GEOS (Shapely) memory is not
    traced."""
    scene = generate(tokens, walls, seed)
    load = pack(scene.message)
    hello = pack(HELLO)
    subscribe = pack({"type": "subscribe", "scene": scene.scene_id, "id": "sub"})
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    core = Core()
    gm = core.connect()
    core.receive(gm, hello)
    core.drain(core.receive(gm, load))
    sub = core.connect()
    core.receive(sub, hello)
    outs = core.drain(core.receive(sub, subscribe))
    snapshot_bytes = sum(len(o.frame) for o in outs if isinstance(o, Send))
    del outs
    gc.collect()
    current, peak = tracemalloc.get_traced_memory()
    elapsed = time.perf_counter() - t0
    tracemalloc.stop()
    return {"tokens": tokens, "walls": walls, "peak_mb": peak / 2**20,
            "retained_mb": current / 2**20, "seconds_traced": elapsed,
            "snapshot_bytes": snapshot_bytes}


# -- the real server -----------------------------------------------------------------------------

def _limit_memory(gib: float | None) -> Callable[[], None] | None:
    if not gib:
        return None

    def apply() -> None:
        import resource

        cap = int(gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return apply


class ServerHandle:
    """The real server (server.app.run around a fresh Core), in a child process or a thread."""

    def __init__(self, in_thread: bool = False, mem_limit_gib: float | None = None) -> None:
        self.in_thread = in_thread
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        if in_thread:
            self._start_thread()
        else:
            self._start_process(mem_limit_gib)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def _start_process(self, mem_limit_gib: float | None) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bench.live", "serve"], cwd=REPO,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            preexec_fn=_limit_memory(mem_limit_gib))
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], 30)
        line = self._proc.stdout.readline().decode() if ready else ""
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"server did not start (said {line!r})")
        self.port = int(line.split()[1])

    def _start_thread(self) -> None:
        started = threading.Event()
        self._loop = asyncio.new_event_loop()
        loop = self._loop

        def ready(port: int) -> None:
            self.port = port
            started.set()

        def main() -> None:
            asyncio.set_event_loop(loop)
            self._task = loop.create_task(run(Core(), "127.0.0.1", 0, ready))
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(self._task)

        self._thread = threading.Thread(target=main, daemon=True, name="bench-server")
        self._thread.start()
        if not started.wait(30):
            raise RuntimeError("server thread did not start")

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the server process so far (None in thread mode)."""
        if self._proc is None:
            return None
        try:
            fields = Path(f"/proc/{self._proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def cpu_ns(self) -> int | None:
        """Nanoseconds the server process's threads have run on a CPU so far, from the
        scheduler's own accounting (/proc/<pid>/task/*/schedstat: fine enough to time one
        move; None in thread mode or where it is missing)."""
        if self._proc is None:
            return None
        total = 0
        try:
            for task in Path(f"/proc/{self._proc.pid}/task").iterdir():
                with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                    total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return total

    def stop(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(OSError):
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        if self._thread is not None:
            self._thread.join(10)


def serve_main() -> int:
    """The child side of ServerHandle: serve until stdin closes."""

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def ready(port: int) -> None:
            print(f"PORT {port}", flush=True)

        task = asyncio.create_task(run(Core(), "127.0.0.1", 0, ready))
        await loop.run_in_executor(None, sys.stdin.read)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    return 0


# -- end to end ----------------------------------------------------------------------------------

#: Moves sent (and timed) before the measured ones, reported apart from the percentiles.
WARMUP_MOVES = 5


class _StampingSelector(selectors.DefaultSelector):
    """The event loop's selector, noting when each wait for I/O ended."""

    woke = 0.0

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(timeout)
        self.woke = time.perf_counter()
        return ready


class _Stamped(ClientConnection):
    """A client connection recording, per message received, when the loop woke with the
    bytes that completed it (see the module header)."""

    selector: _StampingSelector | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stamps: deque[float] = deque()

    def process_event(self, event: Event) -> None:
        if (self.selector is not None and isinstance(event, Frame)
                and event.opcode in DATA_OPCODES and event.fin):
            self.stamps.append(self.selector.woke)
        super().process_event(event)


def _stamping_loop() -> asyncio.AbstractEventLoop:
    selector = _StampingSelector()
    _Stamped.selector = selector
    return asyncio.SelectorEventLoop(selector)


async def _connect(url: str, compression: str | None = None) -> ClientConnection:
    return await connect(url, max_size=None, compression=compression, proxy=None,
                         ping_interval=None, open_timeout=30, close_timeout=5,
                         create_connection=_Stamped)


async def _recv_type(ws: ClientConnection, typ: str, timeout: float = 60) -> dict[str, Any]:
    async def loop() -> dict[str, Any]:
        while True:
            msg = unpack(await ws.recv())
            if msg.get("type") == typ:
                return msg
            if msg.get("type") == "error":
                raise RuntimeError(f"server error: {msg}")

    return await asyncio.wait_for(loop(), timeout)


class _Hub:
    """Wakes the mover when every subscriber has a delta at or past a revision."""

    def __init__(self) -> None:
        self.readers: list[_Reader] = []
        self.target = 0
        self.event = asyncio.Event()

    def all_at(self, revision: int) -> bool:
        return all(r.latest >= revision for r in self.readers)

    def update(self) -> None:
        if self.all_at(self.target):
            self.event.set()

    async def wait_all(self, revision: int, timeout: float) -> bool:
        self.target = revision
        self.event.clear()
        if self.all_at(revision):
            return True
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            return False
        return True


class _Reader:
    """One subscriber: records when each delta (by revision) arrived."""

    def __init__(self, ws: ClientConnection, hub: _Hub) -> None:
        self.ws = ws
        self.hub = hub
        # By revision: when its bytes were in the socket, and when this client's task had
        # the decoded frame.
        self.arrivals: dict[int, float] = {}
        self.handled: dict[int, float] = {}
        self.latest = 0
        self.count = 0
        #: Bytes of each delta frame received.
        self.sizes: list[int] = []
        self.stamps = ws.stamps if isinstance(ws, _Stamped) else None
        if self.stamps is not None:
            self.stamps.clear()  # the snapshot's, already read

    async def run(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for frame in self.ws:
                t = time.perf_counter()
                arrived = self.stamps.popleft() if self.stamps else t
                typ, rev, full = peek(frame)
                if typ == "annotations" and not full and rev is not None:
                    self.count += 1
                    self.sizes.append(len(frame))
                    self.arrivals.setdefault(rev, arrived)
                    self.handled.setdefault(rev, t)
                    self.latest = max(self.latest, rev)
                    self.hub.update()

    def arrival(self, revision: int, handled: bool = False) -> float:
        times = self.handled if handled else self.arrivals
        if revision in times:
            return times[revision]
        return min(t for r, t in times.items() if r >= revision)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-len(ordered) * q // 100)))
    return ordered[int(rank) - 1]


def steadiness(samples: int = 100, pause_s: float = 0.005) -> Result:
    """How steady this machine's CPU is right now: one fixed pure-Python workload (about
    2 ms) timed `samples` times, with a pause between, as p50 and p99. On a shared or
    virtual machine the same work slows by tens of percent for stretches of a second; a
    latency percentile measured here carries that."""
    def work() -> int:
        total = 0
        for i in range(40_000):
            total += i * i % 7
        return total

    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
        time.sleep(pause_s)
    return {"p50_s": percentile(times, 50), "p99_s": percentile(times, 99),
            "samples": samples}


async def e2e(url: str, scene: BenchScene, clients: int, moves: int, seconds: float,
              server_cpu: Callable[[], float | None], warmup: int = WARMUP_MOVES,
              server_cpu_ns: Callable[[], int | None] = lambda: None,
              compact: bool = False, walking: bool = False) -> Result:
    out: Result = {"tokens": scene.tokens, "walls": scene.walls, "clients": clients,
                   "moves": moves, "warmup": warmup, "ruleset": scene.message["ruleset"],
                   "compact": compact}
    # The subscribers ask for the compact form or not (docs/protocol.md section 12).
    sub_hello = {**HELLO, "compact": True} if compact else HELLO
    mover_ws = await _connect(url)
    subs: list[ClientConnection] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        await mover_ws.send(pack(HELLO))
        await _recv_type(mover_ws, "welcome")
        await mover_ws.send(pack(scene.message))
        await _recv_type(mover_ws, "ack")
        subs = list(await asyncio.gather(*(_connect(url) for _ in range(clients))))
        for ws in subs:
            await ws.send(pack(sub_hello))
            await _recv_type(ws, "welcome")
        hub = _Hub()
        first: dict[str, Any] | None = None
        t0 = time.perf_counter()
        for k, ws in enumerate(subs):
            await ws.send(pack({"type": "subscribe", "scene": scene.scene_id, "id": k}))
            if first is None:
                first = await _recv_type(ws, "annotations", timeout=300)
            else:
                frame = await asyncio.wait_for(ws.recv(), 300)
                if peek(frame)[0] != "annotations":
                    raise RuntimeError(f"subscriber {k}: expected its snapshot")
        out["subscribe_all_s"] = time.perf_counter() - t0
        assert first is not None
        out["snapshot_bytes"] = len(msgpack.packb(first))
        mover: Move = pick_mover(scene, expand_plain(first)["annotations"])
        out["mover"] = mover[0]
        out["walking"] = walking
        places = path(scene, mover, warmup + moves, walking)
        # The clients' own heap (the decoded snapshot: 30,000 dicts) must not put garbage
        # collections of this process into the latencies measured: what is left is frozen.
        del first
        gc.collect()
        gc.freeze()
        readers = [_Reader(ws, hub) for ws in subs]
        hub.readers = readers
        tasks = [asyncio.create_task(r.run()) for r in readers]

        # Warm-up: the first moves after the subscriptions run through code and data the
        # full matrices did not (the incremental path, its caches), and take a few ms more
        # (measured: the first 1-3 moves); they are timed the same way and reported on
        # their own, not in the percentiles, as a benchmark's warm-up runs are.
        warm: list[float] = []
        for k in range(warmup):
            to = places[k]
            t_send = time.perf_counter()
            await mover_ws.send(pack(move_frame(scene, mover[0], to, k)))
            rev = int((await _recv_type(mover_ws, "ack", timeout=60))["revision"])
            if not await hub.wait_all(rev, 60):
                out["error"] = f"warm-up move {k}: not every subscriber got revision {rev}"
                return out
            warm.append(max(r.arrival(rev) for r in readers) - t_send)
        out["warmup_delivered_s"] = warm

        # Latency: one move at a time, each delivered to every subscriber before the next.
        per_client: list[float] = []
        all_delivered: list[float] = []
        all_handled: list[float] = []
        acks: list[float] = []
        cpu0 = server_cpu()
        client0 = time.process_time()
        # Server CPU of each move (read outside the timed window): tells a move that took
        # long because the server worked longer from one that waited.
        move_cpu: list[float] = []
        for k in range(warmup, warmup + moves):
            to = places[k]
            frame = pack(move_frame(scene, mover[0], to, k))
            ns0 = server_cpu_ns()
            t_send = time.perf_counter()
            await mover_ws.send(frame)
            ack = await _recv_type(mover_ws, "ack", timeout=60)
            acks.append(time.perf_counter() - t_send)
            rev = int(ack["revision"])
            if not await hub.wait_all(rev, 60):
                out["error"] = f"move {k}: not every subscriber got revision {rev} in 60 s"
                break
            lat = [r.arrival(rev) - t_send for r in readers]
            ns1 = server_cpu_ns()
            if ns0 is not None and ns1 is not None:
                move_cpu.append((ns1 - ns0) / 1e9)
            per_client += lat
            all_delivered.append(max(lat))
            all_handled.append(max(r.arrival(rev, handled=True) for r in readers) - t_send)
        cpu1 = server_cpu()
        client1 = time.process_time()
        done = len(all_delivered)
        out.update({
            "moves_done": done,
            "per_client_p50_s": percentile(per_client, 50),
            "per_client_p99_s": percentile(per_client, 99),
            "all_delivered_p50_s": percentile(all_delivered, 50),
            "all_delivered_p99_s": percentile(all_delivered, 99),
            "all_delivered_max_s": max(all_delivered, default=float("nan")),
            "all_handled_p50_s": percentile(all_handled, 50),
            "all_handled_p99_s": percentile(all_handled, 99),
            "ack_p50_s": percentile(acks, 50),
            "delta_bytes": statistics.median(readers[0].sizes) if readers[0].sizes else None,
            **({"move_cpu_p50_s": percentile(move_cpu, 50),
                "move_cpu_p99_s": percentile(move_cpu, 99),
                # The three slowest moves (the p99's neighbourhood) and their server CPU.
                "slowest": [(all_delivered[i], move_cpu[i]) for i in sorted(
                    range(len(move_cpu)), key=lambda i: -all_delivered[i])[:3]]}
               if len(move_cpu) == len(all_delivered) and move_cpu else {}),
            "client_cpu_per_move_s": (client1 - client0) / done if done else None,
            "server_cpu_per_move_s": ((cpu1 - cpu0) / done
                                      if cpu0 is not None and cpu1 is not None and done
                                      else None),
        })

        # Throughput: moves sent as fast as their acks come back, for `seconds`.
        if "error" not in out and seconds > 0:
            counts = [r.count for r in readers]
            sent = 0
            rev = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                to = mover[2] if sent % 2 == 0 else mover[1]
                await mover_ws.send(pack(move_frame(scene, mover[0], to, 10_000 + sent)))
                rev = int((await _recv_type(mover_ws, "ack", timeout=60))["revision"])
                sent += 1
            elapsed = time.perf_counter() - t0
            caught_up = await hub.wait_all(rev, 120)
            settle = time.perf_counter() - t0 - elapsed
            out.update({
                "throughput_seconds": elapsed,
                "moves_per_s": sent / elapsed,
                "deltas_per_client_per_s": statistics.fmean(
                    r.count - c for r, c in zip(readers, counts, strict=True)) / elapsed,
                "caught_up": caught_up, "catch_up_s": settle,
            })
    finally:
        gc.unfreeze()
        for ws in [mover_ws, *subs]:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 10)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return out


def run_e2e(scene: BenchScene, clients: int, moves: int, seconds: float,
            in_thread: bool, mem_limit_gib: float | None, compact: bool = False,
            walking: bool = False) -> Result:
    steady = steadiness()
    load = os.getloadavg()[0]
    server = ServerHandle(in_thread=in_thread, mem_limit_gib=mem_limit_gib)
    try:
        with asyncio.Runner(loop_factory=_stamping_loop) as runner:
            result = runner.run(e2e(server.url, scene, clients, moves, seconds,
                                    server.cpu_seconds, server_cpu_ns=server.cpu_ns,
                                    compact=compact, walking=walking))
    finally:
        _Stamped.selector = None
        server.stop()
    result["server"] = "thread" if in_thread else "process"
    result["steadiness"] = steady
    result["load_1min"] = load
    return result


def e2e_runs(tokens: int, walls: int, seed: int, ruleset: str, compact: bool, clients: int,
             moves: int, runs: int, in_thread: bool = False, walking: bool = False) -> Result:
    """`runs` end-to-end runs on fresh servers of one ruleset and one form; the run with the
    median p99 (until all subscribers have a move's delta) stands for them, with every run's
    p50 and p99, the machine's steadiness and load before each."""
    scene = generate(tokens, walls, seed)
    if ruleset != scene.message["ruleset"]:
        scene = replace(scene, message={**scene.message, "ruleset": ruleset})
    done = [run_e2e(scene, clients, moves, 0.0, in_thread, None, compact, walking)
            for _ in range(runs)]
    ok = [r for r in done if "all_delivered_p99_s" in r and "error" not in r]
    if not ok:
        return {"ruleset": ruleset, "compact": compact,
                "error": "; ".join(str(r.get("error")) for r in done)}
    ordered = sorted(ok, key=lambda r: r["all_delivered_p99_s"])
    out = dict(ordered[len(ordered) // 2])
    out["runs"] = len(done)
    out["runs_p50_s"] = [r["all_delivered_p50_s"] for r in ok]
    out["runs_p99_s"] = [r["all_delivered_p99_s"] for r in ok]
    out["runs_server_cpu_p50_s"] = [r.get("move_cpu_p50_s") for r in ok]
    out["runs_steadiness_p50_s"] = [r["steadiness"]["p50_s"] for r in ok]
    out["runs_load_1min"] = [r["load_1min"] for r in ok]
    return out


def e2e_matrix(tokens: int, walls: int, seed: int, rulesets: Sequence[str], clients: int,
               moves: int, runs: int, walking: bool = False) -> Result:
    """End to end for each ruleset, verbose and compact, `runs` times each on fresh servers,
    interleaved (run k of every ruleset and form before run k + 1 of any), so that a busy
    stretch of a shared machine falls on all of them alike; per ruleset and form, the run
    with the median p99 and every run's figures (as `e2e_runs`)."""
    done: dict[str, list[Result]] = {}
    for _ in range(runs):
        for ruleset in rulesets:
            for compact in (False, True):
                name = f"{ruleset} {'compact' if compact else 'verbose'}"
                done.setdefault(name, []).append(
                    e2e_runs(tokens, walls, seed, ruleset, compact, clients, moves, 1,
                             walking=walking))
    out: Result = {"tokens": tokens, "walls": walls, "clients": clients, "runs": runs,
                   "walking": walking, "results": {}}
    for name, results in done.items():
        ok = [r for r in results if "all_delivered_p99_s" in r]
        if not ok:
            out["results"][name] = {"error": "; ".join(str(r.get("error")) for r in results)}
            continue
        ordered = sorted(ok, key=lambda r: r["all_delivered_p99_s"])
        best = dict(ordered[len(ordered) // 2])
        for key in ("runs_p50_s", "runs_p99_s", "runs_server_cpu_p50_s",
                    "runs_steadiness_p50_s", "runs_load_1min"):
            best[key] = [r[key][0] for r in ok]
        best["runs"] = len(results)
        out["results"][name] = best
    return out


def e2e_markdown(matrix: Result) -> str:
    """The table of `e2e_matrix`'s results, for bench/RESULTS.md."""
    def ms(v: float | None) -> str:
        return "n/a" if v is None else f"{v * 1000:.1f}"

    lines = ["| ruleset, form | p99 until all have it (median run) | each run, p50 / p99 (ms) "
             "| server CPU per move, p50 (ms) | delta | load (1 min) | steadiness p50 (ms) |",
             "| --- | ---: | --- | --- | ---: | --- | --- |"]
    for name, r in matrix["results"].items():
        if "error" in r:
            lines.append(f"| {name} | not measured: {r['error']} | | | | | |")
            continue
        each = ", ".join(f"{ms(a)} / {ms(b)}" for a, b in zip(r["runs_p50_s"],
                                                              r["runs_p99_s"], strict=True))
        lines.append(
            f"| {name} | **{ms(r['all_delivered_p99_s'])} ms** | {each} | "
            f"{', '.join(ms(v) for v in r['runs_server_cpu_p50_s'])} | "
            f"{r.get('delta_bytes', 'n/a')} | "
            f"{', '.join(f'{v:.1f}' for v in r['runs_load_1min'])} | "
            f"{', '.join(ms(v) for v in r['runs_steadiness_p50_s'])} |")
    return "\n".join(lines)


# -- compact annotations: bytes per annotation ---------------------------------------------------

def _timed(fn: Callable[[], Any], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _expand_msgpack(frame: bytes) -> Annotations:
    return expand(msgspec.msgpack.decode(frame, type=CompactAnnotations))


def sizes(tokens: int, walls: int, seed: int, rulesets: Sequence[str],
          moves: int = 6) -> Result:
    """Bytes per annotation of `annotations` frames, verbose and compact, JSON and msgpack,
    for the full set of a subscription and for the deltas of moves (the same mover as the
    move benchmark), per ruleset; and what encoding and decoding a full set costs."""
    out: Result = {"tokens": tokens, "walls": walls, "rulesets": {}}
    forms = [(compact, binary) for compact in (False, True) for binary in (False, True)]
    for ruleset in rulesets:
        scene = generate(tokens, walls, seed)
        scene = replace(scene, message={**scene.message, "ruleset": ruleset})
        h = CoreHarness(scene)
        conns: dict[tuple[bool, bool], int] = {}
        for compact, binary in forms:
            conn = h.core.connect()
            hello = {**HELLO, "compact": compact}
            h.core.receive(conn, pack(hello) if binary else json.dumps(hello))
            conns[(compact, binary)] = conn
        sub = {"type": "subscribe", "scene": scene.scene_id, "id": 1}
        full: dict[tuple[bool, bool], bytes | str] = {}
        for form, conn in conns.items():
            frame = pack(sub) if form[1] else json.dumps(sub)
            (full[form],) = _sends_to(h.receive(conn, frame), conn)
        verbose_full = unpack(full[(False, True)])
        n_full = len(verbose_full["annotations"])
        mover = pick_mover(scene, verbose_full["annotations"])
        deltas: dict[tuple[bool, bool], list[int]] = {form: [] for form in forms}
        changed: list[int] = []
        for k in range(moves):
            to = mover[2] if k % 2 == 0 else mover[1]
            outs = h.receive(h.gm, pack(move_frame(scene, mover[0], to, k)))
            for form, conn in conns.items():
                (frame,) = _sends_to(outs, conn)
                deltas[form].append(len(frame))
                if form == (False, True):
                    changed.append(len(unpack(frame)["annotations"]))
        # Encoding the full set alone (the session's table, as `subscribe` sends it), and
        # the Python client's decoding into its Structs.
        table = list(h.core.tables.current(scene.scene_id, False).values())
        msg = Annotations(scene.scene_id, 1, True, table, [])
        enc = {f"{'compact' if c else 'verbose'}_{'msgpack' if b else 'json'}_s":
               _timed(functools.partial(encode_annotations, msg, b, c)) for c, b in forms}
        verbose_frame = encode_annotations(msg, True, False)
        compact_frame = encode_annotations(msg, True, True)
        assert isinstance(verbose_frame, bytes) and isinstance(compact_frame, bytes)
        dec = {"verbose_msgpack_s": _timed(functools.partial(
                   msgspec.msgpack.decode, verbose_frame, type=Annotations)),
               "compact_msgpack_s": _timed(functools.partial(_expand_msgpack, compact_frame))}
        per: Result = {}
        for (compact, binary), frame in full.items():
            name = f"{'compact' if compact else 'verbose'}_{'msgpack' if binary else 'json'}"
            delta = statistics.median(deltas[(compact, binary)])
            per[name] = {"full_bytes": len(frame), "full_per_annotation": len(frame) / n_full,
                         "delta_bytes": delta,
                         "delta_per_annotation": delta / statistics.median(changed)}
        out["rulesets"][ruleset] = {"annotations": n_full,
                                    "changed_median": statistics.median(changed),
                                    "forms": per, "encode_full": enc, "decode_full": dec}
    return out


# -- permessage-deflate --------------------------------------------------------------------------

def sample_frames(tokens: int, walls: int, seed: int,
                  moves: int = 10) -> tuple[bytes, list[bytes]]:
    """A subscriber's snapshot frame and the delta frames of `moves` moves, from the Core."""
    scene = generate(tokens, walls, seed)
    h = CoreHarness(scene)
    sub = h.connect()
    snapshot, decoded = h.subscribe(sub)
    mover = pick_mover(scene, decoded["annotations"])
    deltas: list[bytes] = []
    for k in range(moves):
        to = mover[2] if k % 2 == 0 else mover[1]
        outs = h.receive(h.gm, pack(move_frame(scene, mover[0], to, k)))
        frame = _sends_to([o for o in outs if isinstance(o, Send)
                           and peek(o.frame)[0] == "annotations"], sub)[0]
        assert isinstance(frame, bytes)
        deltas.append(frame)
    assert isinstance(snapshot, bytes)
    return snapshot, deltas


class _Broadcaster:
    """A bare websockets server in a thread that sends given frames to all its clients and
    measures the CPU time its thread spends doing so."""

    def __init__(self, compression: str | None) -> None:
        self.compression = compression
        self.conns: list[ServerConnection] = []
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self._stop: asyncio.Future[None] | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True, name="bench-deflate")
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("broadcaster did not start")

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        async def handler(ws: ServerConnection) -> None:
            self.conns.append(ws)
            await ws.wait_closed()

        self._stop = self.loop.create_future()
        async with serve(handler, "127.0.0.1", 0, compression=self.compression,
                         max_size=None) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            self._ready.set()
            await self._stop

    async def _broadcast(self, frame: bytes) -> float:
        t0 = time.thread_time()
        for ws in list(self.conns):
            await ws.send(frame)
        return time.thread_time() - t0

    async def broadcast(self, frame: bytes) -> float:
        fut = asyncio.run_coroutine_threadsafe(self._broadcast(frame), self.loop)
        return await asyncio.wrap_future(fut)

    def stop(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set_result, None)
        self._thread.join(10)


async def _deflate_run(compression: str | None, clients: int, snapshot: bytes,
                       deltas: Sequence[bytes], snapshot_repeats: int) -> Result:
    b = _Broadcaster(compression)
    conns: list[ClientConnection] = []
    received = [0] * clients
    tasks: list[asyncio.Task[None]] = []
    try:
        conns = [await _connect(f"ws://127.0.0.1:{b.port}", compression)
                 for _ in range(clients)]
        while len(b.conns) < clients:
            await asyncio.sleep(0.01)

        async def read(k: int, ws: ClientConnection) -> None:
            with contextlib.suppress(ConnectionClosed):
                async for _ in ws:
                    received[k] += 1

        tasks = [asyncio.create_task(read(k, ws)) for k, ws in enumerate(conns)]
        negotiated = any("permessage-deflate" in (ws.response.headers.get(
            "Sec-WebSocket-Extensions", "") if ws.response else "") for ws in conns)
        sent = 0

        async def one(frame: bytes) -> float:
            nonlocal sent
            cpu = await b.broadcast(frame)
            sent += 1
            for _ in range(6000):  # everything delivered before the next one (<= 60 s)
                if min(received) >= sent:
                    break
                await asyncio.sleep(0.01)
            return cpu

        delta_cpu = [await one(f) for f in deltas]
        snap_cpu = [await one(snapshot) for _ in range(snapshot_repeats)]
    finally:
        for ws in conns:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 10)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        b.stop()
    return {"negotiated": negotiated, "delta_cpu_median_s": statistics.median(delta_cpu),
            "delta_cpu_s": delta_cpu, "snapshot_cpu_median_s": statistics.median(snap_cpu),
            "snapshot_cpu_s": snap_cpu}


def compression(tokens: int, walls: int, seed: int, clients: int,
                snapshot_repeats: int = 3) -> Result:
    snapshot, deltas = sample_frames(tokens, walls, seed)

    def deflated(b: bytes) -> int:
        z = zlib.compressobj(wbits=-15)
        return len(z.compress(b) + z.flush(zlib.Z_SYNC_FLUSH))

    out: Result = {
        "tokens": tokens, "walls": walls, "clients": clients,
        "delta_bytes_median": statistics.median(len(d) for d in deltas),
        "delta_deflated_bytes_median": statistics.median(deflated(d) for d in deltas),
        "snapshot_bytes": len(snapshot), "snapshot_deflated_bytes": deflated(snapshot),
    }
    for name, mode in (("off", None), ("on", "deflate")):
        out[name] = asyncio.run(_deflate_run(mode, clients, snapshot, deltas,
                                             snapshot_repeats))
    return out


def fan_out(tokens: int, walls: int, seed: int, rulesets: Sequence[str], clients: int,
            moves: int = 30, warmup: int = 5) -> Result:
    """Where a move's time goes on its way to `clients` subscribers, through the Core (CPU
    time of this thread, median over the moves after `warmup`): the gm's token.update
    (`receive`), the first subscriber's delta (the incremental recomputation, the diff and
    the encoding of the frame), the other subscribers' deltas (the same frame, shared), and
    encoding the delta message again alone; verbose and compact."""
    out: Result = {"tokens": tokens, "walls": walls, "clients": clients, "rulesets": {}}
    for ruleset in rulesets:
        for compact in (False, True):
            scene = generate(tokens, walls, seed)
            scene = replace(scene, message={**scene.message, "ruleset": ruleset})
            h = CoreHarness(scene)
            subs = []
            for k in range(clients):
                conn = h.core.connect()
                h.core.receive(conn, pack({**HELLO, "compact": compact}))
                h.core.receive(conn, pack({"type": "subscribe", "scene": scene.scene_id,
                                           "id": k}))
                subs.append(conn)
            full = h.core.tables.current(scene.scene_id, False)
            mover = pick_mover(scene, [msgspec.to_builtins(a) for a in full.values()])
            rec: dict[str, list[float]] = {"receive_s": [], "first_s": [], "others_s": [],
                                           "encode_s": [], "bytes": []}
            for k in range(warmup + moves):
                to = mover[2] if k % 2 == 0 else mover[1]
                h.core.prepare(scene.scene_id)
                gc.collect()
                t0 = time.thread_time()
                h.core.receive(h.gm, pack(move_frame(scene, mover[0], to, k)))
                t1 = time.thread_time()
                frame = h.core.delta(subs[0], scene.scene_id)
                t2 = time.thread_time()
                for conn in subs[1:]:
                    h.core.delta(conn, scene.scene_id)
                t3 = time.thread_time()
                assert isinstance(frame, bytes)
                msg = (expand(msgspec.msgpack.decode(frame, type=CompactAnnotations))
                       if compact else msgspec.msgpack.decode(frame, type=Annotations))
                encode_s = _timed(functools.partial(encode_annotations, msg, True, compact))
                if k >= warmup:
                    for name, v in (("receive_s", t1 - t0), ("first_s", t2 - t1),
                                    ("others_s", t3 - t2), ("encode_s", encode_s),
                                    ("bytes", len(frame))):
                        rec[name].append(v)
            out["rulesets"][f"{ruleset} {'compact' if compact else 'verbose'}"] = {
                name: statistics.median(v) for name, v in rec.items()} | {
                "first_max_s": max(rec["first_s"])}
    return out


def sizes_markdown(result: Result) -> str:
    """The table of `sizes`' results, for bench/RESULTS.md."""
    lines = ["| ruleset | form | full set | per annotation | a move's delta | per annotation "
             "changed | verbose / compact, full set and delta |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for ruleset, d in result["rulesets"].items():
        forms = d["forms"]
        for enc in ("json", "msgpack"):
            verbose = forms[f"verbose_{enc}"]
            for form in ("verbose", "compact"):
                x = forms[f"{form}_{enc}"]
                ratio = "" if form == "verbose" else (
                    f"**{verbose['full_bytes'] / x['full_bytes']:.1f}x** / "
                    f"**{verbose['delta_bytes'] / x['delta_bytes']:.1f}x**")
                lines.append(f"| {ruleset} | {form} {enc} | {x['full_bytes'] / 1e6:.2f} MB | "
                             f"{x['full_per_annotation']:.1f} B | {x['delta_bytes']:.0f} B | "
                             f"{x['delta_per_annotation']:.1f} B | {ratio} |")
    return "\n".join(lines)


# -- worker entry points -------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.live")
    p.add_argument("what", choices=("move", "memory", "compression", "serve", "sizes", "e2e",
                                    "e2e-matrix", "fan-out"))
    p.add_argument("--tokens", type=int, default=100)
    p.add_argument("--walls", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--moves", type=int, default=20)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--ruleset", default="dnd35", help="for move, e2e: the scene's ruleset")
    p.add_argument("--rulesets", nargs="+", default=["dnd35", "pf2", "realms"],
                   help="for sizes, e2e-matrix")
    p.add_argument("--compact", action="store_true",
                   help="for e2e: the subscribers ask for the compact form")
    p.add_argument("--runs", type=int, default=3, help="for e2e: runs on fresh servers")
    p.add_argument("--walk", action="store_true",
                   help="for move, e2e, e2e-matrix: the mover walks to squares it has never "
                        "stood on, rather than one square right and back")
    p.add_argument("--out")
    args = p.parse_args(argv)
    tune_process()  # as the server runs (server/memory.py)
    if args.what == "serve":
        return serve_main()
    if args.what == "move":
        result = core_move(args.tokens, args.walls, args.seed, args.moves, args.ruleset,
                           args.walk)
    elif args.what == "memory":
        result = core_memory(args.tokens, args.walls, args.seed)
    elif args.what == "sizes":
        result = sizes(args.tokens, args.walls, args.seed, args.rulesets)
        print(sizes_markdown(result))
    elif args.what == "e2e":
        result = e2e_runs(args.tokens, args.walls, args.seed, args.ruleset, args.compact,
                          args.clients, args.moves, args.runs, walking=args.walk)
    elif args.what == "fan-out":
        result = fan_out(args.tokens, args.walls, args.seed, args.rulesets, args.clients)
    elif args.what == "e2e-matrix":
        result = e2e_matrix(args.tokens, args.walls, args.seed, args.rulesets, args.clients,
                            args.moves, args.runs, args.walk)
        print(e2e_markdown(result))
    else:
        result = compression(args.tokens, args.walls, args.seed, args.clients)
    if args.out:
        Path(args.out).write_text(json.dumps(result))
    else:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
