"""The long fuzz run against a real server (`make fuzz`; FRAMES=1000000 by default).

    python -m tests.fuzz_long [--frames N] [--workers K] [--seed S] [--url ws://...]

Without --url it starts `covercast serve` in a subprocess on a free port of 127.0.0.1 (gm and
player tokens, a state file in a temporary folder) and watches its memory. K fuzz workers
(one in four a player, the rest gm) each own two scenes and send hostile frames from the
mutation fuzzer of tests/fuzzing.py; after each one a worker sends `scene.get` of both its
scenes (pipelined, tagged ids), so the frames in between are the replies to the fuzzed frame
and any pushes, and the scenes before and after can be compared: a refused request (an
`error` reply), and anything a player sent, must leave them byte for byte as they were. A
prober opens fresh connections whose first frame is a fuzzed hello or junk; a sampler sends
a `cover.query` on a scene of its own every 20 ms and times it (in a process of its own in
the long run: the fuzzers' event loop, reading megabyte replies, must not be in its
timings).

It reports frames sent (fuzzed, and in all), server crashes (the process died), 1011
closes, `internal` errors (replies and the server log's "bug while" lines), state changes on
refused requests, player writes accepted, other closes by code, peak server memory (RSS:
VmHWM of the front process and its workers, each one's peak, summed) and the cover.query
latency (max, p99, p50), as JSON on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from server.messages import request_id
from tests.fuzzing import (
    WRITES,
    Mutator,
    Tally,
    decode,
    hello,
    load_hex,
    load_square,
    type_of,
)

GM, PLAYER = "fuzz-gm-token", "fuzz-player-token"
#: Refused frames between two looks at a worker's scenes.
CHECK_EVERY = 16
REPLY_TIMEOUT_S = 60
LIGHT = {"_id": "light", "grid": {"type": 1, "size": 100, "distance": 5},
         "walls": [{"_id": "w", "c": [200, 0, 200, 150]}],
         "tokens": [{"_id": "a", "x": 0, "y": 0, "disposition": 1},
                    {"_id": "b", "x": 400, "y": 0, "disposition": -1},
                    {"_id": "c", "x": 200, "y": 300}]}


@dataclass
class Report:
    tally: Tally = field(default_factory=Tally)
    frames_total: int = 0
    #: Closes of the fuzzing (greeted) connections, by code; and of the prober's.
    closes: Counter[int] = field(default_factory=Counter)
    probe_closes: Counter[int] = field(default_factory=Counter)
    reconnects: int = 0
    #: Replies read for a frame that carry another request's id (a reply the reader
    #: misplaced: what follows it on that connection is judged against the wrong frame).
    misread: int = 0
    probes: int = 0
    latencies: list[float] = field(default_factory=list)
    rss_peak_kb: int | None = None
    rss_start_kb: int | None = None
    rss_end_kb: int | None = None
    log_bugs: int = 0
    server_died: bool = False
    seconds: float = 0.0
    generator_errors: int = 0
    #: Progress lines shown, and findings told, so far.
    shown: int = 0
    told: int = 0

    def progress(self, every: int = 50_000) -> None:
        """A line on stderr every `every` fuzzed frames."""
        if self.tally.frames // every > self.shown:
            self.shown = self.tally.frames // every
            # The sampler in a process of its own sends its latencies at the end only.
            latency = (f", max latency {max(self.latencies) * 1000:.0f} ms"
                       if self.latencies else "")
            print(f"{time.strftime('%H:%M:%S')} {self.tally.frames} frames, bad "
                  f"{self.tally.bad}{latency}, rss peak {_mb(self.rss_peak_kb)} MB",
                  file=sys.stderr, flush=True)
        while len(self.tally.examples) > self.told:
            print("  found:", self.tally.examples[self.told][:600], file=sys.stderr,
                  flush=True)
            self.told += 1

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies)

        def q(p: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 1) if lat else None

        return {
            **self.tally.summary(),
            "frames_total_with_checks": self.frames_total,
            "server_crashes": int(self.server_died) + self.tally.crashes,
            "internal_in_server_log": self.log_bugs,
            "closes_by_code": dict(sorted(self.closes.items())),
            "hello_probe_closes_by_code": dict(sorted(self.probe_closes.items())),
            "reconnects": self.reconnects, "hello_probes": self.probes,
            "replies_misread": self.misread,
            "fuzzer_errors": self.generator_errors,
            "cover_query_samples": len(lat),
            "cover_query_ms_max": q(1.0), "cover_query_ms_p99": q(0.99),
            "cover_query_ms_p50": q(0.5),
            "cover_query_ms_mean": round(statistics.fmean(lat) * 1000, 2) if lat else None,
            "rss_start_mb": _mb(self.rss_start_kb), "rss_peak_mb": _mb(self.rss_peak_kb),
            "rss_end_mb": _mb(self.rss_end_kb),
            "seconds": round(self.seconds, 1),
            "examples": self.tally.examples,
        }


def _mb(kb: int | None) -> float | None:
    return None if kb is None else round(kb / 1024, 1)


async def _request(ws: ClientConnection, msg: dict[str, Any]) -> dict[str, Any]:
    """Send one request and wait for the reply carrying its id (pushes skipped)."""
    await ws.send(msgpack.packb(msg))
    while True:
        got = decode(await ws.recv())
        if got.get("id") == msg.get("id"):
            return got


class Worker:
    """One fuzzing connection with two scenes of its own."""

    def __init__(self, url: str, k: int, seed: int, viewer: bool, report: Report,
                 heavy: float) -> None:
        self.url = url
        self.viewer = viewer
        self.report = report
        self.sq, self.hx = f"w{k}-sq", f"w{k}-hx"
        self.mut = Mutator(random.Random(seed * 1000 + k), self.sq, self.hx, heavy=heavy)
        self.ws: ClientConnection | None = None
        self.known: dict[str, bytes | None] = {}
        self.n = 0
        #: Frames since the scenes were last looked at, all refused.
        self.since = 0
        #: Each scene's revision when last looked at or acknowledged.
        self.revisions: dict[str, int | None] = {}
        #: The frames since the last look, each with what was read as its reply: the
        #: evidence printed when a look finds a scene changed.
        self.recent: list[tuple[bytes | str, str]] = []

    async def open(self) -> None:
        self.ws = await connect(self.url, max_size=None, open_timeout=30,
                                ping_interval=None)
        welcome = await _request(self.ws, hello(PLAYER if self.viewer else GM))
        assert welcome["type"] == "welcome", welcome

    async def setup(self) -> None:
        """(Re)load the worker's scenes as the corpus has them, through a gm connection."""
        async with connect(self.url, max_size=None, open_timeout=30) as gm:
            assert (await _request(gm, hello(GM)))["type"] == "welcome"
            for msg in (load_square(self.sq, "ls"), load_hex(self.hx, "lh")):
                got = await _request(gm, msg)
                assert got["type"] == "ack", got
        self.known = {}

    async def run(self, frames: int) -> None:
        await self.setup()
        await self.open()
        await self.check_scenes(refused=False)
        for k in range(frames):
            if k and k % 500 == 0:
                await self.setup()
                await self.check_scenes(refused=False)
            try:
                frame, kind = self.mut.next_frame()
            except Exception as exc:  # a bug of the fuzzer itself: noted, not the server's
                self.report.generator_errors += 1
                if self.report.generator_errors <= 3:
                    self.report.tally.examples.append(f"fuzzer bug: {exc!r}")
                continue
            await self.fuzz(frame, kind)
            self.report.progress()

    async def check_scenes(self, refused: bool, frame: bytes | str = b"",
                           changed: str | None = None) -> None:
        """scene.get of both scenes; compare with what they were (refused: each must be
        equal, but `changed`, which an accepted request just changed)."""
        assert self.ws is not None
        self.n += 1
        ids = [f"s{self.n}-{sid}" for sid in (self.sq, self.hx)]
        for rid, sid in zip(ids, (self.sq, self.hx), strict=True):
            await self.ws.send(msgpack.packb({"type": "scene.get", "scene": sid, "id": rid}))
        self.report.frames_total += 2
        for rid, sid in zip(ids, (self.sq, self.hx), strict=True):
            while True:
                got = decode(await self.ws.recv())
                self._look(got, frame)
                if got.get("id") == rid:
                    break
            now = (msgpack.packb(got["scene"]) if got.get("type") == "scene"
                   else None)
            self.revisions[sid] = got.get("revision") if now is not None else None
            if (sid in self.known and now != self.known[sid] and (refused or self.viewer)
                    and sid != changed):
                self.report.tally.state_changes += 1
                self.report.tally.note(f"scene {sid} changed by a refused request", frame)
                self.report.tally.examples.append(
                    f"  what changed in {sid}: {scene_diff(self.known[sid], now)}; the frames "
                    "since the last look, each with the reply read for it: "
                    + "; ".join(f"{f[:200]!r} -> {r}" for f, r in self.recent))
            self.known[sid] = now
        self.recent = []
        if None in self.known.values() and not self.viewer:
            await self.setup()  # a scene was unloaded (an accepted scene.unload)
            await self.check_scenes(refused=False)

    def _look(self, got: dict[str, Any], frame: bytes | str) -> None:
        if got.get("type") == "error" and got.get("code") == "internal":
            self.report.tally.internal += 1
            self.report.tally.note("internal", frame)

    async def fuzz(self, frame: bytes | str, kind: str | None) -> None:
        t = self.report.tally
        assert self.ws is not None
        try:
            if isinstance(frame, str):
                try:
                    frame.encode()
                    await self.ws.send(frame)
                except UnicodeEncodeError:  # a raw surrogate: not UTF-8, as a text frame
                    await self.ws.send(frame.encode("utf-8", "surrogatepass"), text=True)
            else:
                await self.ws.send(frame)
            t.frames += 1
            self.report.frames_total += 1
            await self._after(frame)
        except ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else 1006
            self.report.closes[code] += 1
            if code == 1011:
                t.closes_1011 += 1
                t.note("1011", frame)
            self.report.reconnects += 1
            await self.open()
            await self.check_scenes(refused=False)

    async def _after(self, frame: bytes | str) -> None:
        """Read the fuzzed frame's reply (pushes skipped). After an accepted request, take
        the scenes as they are now; after refused ones, compare them with what they were,
        every CHECK_EVERY frames (each frame since the last look was refused, so any change
        is a refused request's)."""
        assert self.ws is not None
        try:
            msg: Any = decode(frame)
        except Exception:
            msg = None
        kind = type_of(msg)
        while True:
            try:
                raw = await asyncio.wait_for(self.ws.recv(), REPLY_TIMEOUT_S)
            except TimeoutError:
                self.report.tally.note("no reply", frame)
                self.report.tally.crashes += 1
                return
            try:
                got = decode(raw)
            except Exception:
                self.report.tally.undecodable += 1
                self.report.tally.note("undecodable reply", frame)
                return
            self._look(got, frame)
            if got.get("type") == "annotations" and (got.get("full") is False
                                                     or ("id" not in got
                                                         and kind != "subscribe")):
                # A push: a delta, or the last (empty) full set of a scene unloaded, which
                # follows the unload's own ack when this connection was subscribed.
                continue
            if got.get("type") == "focus":
                continue  # a push too (after a subscription, when the gm set a focus)
            if got.get("type") == "error" and got.get("code") == "internal" and "id" not in got:
                continue  # a push's failure (counted)
            break
        sent = request_id(msg)  # the id the server echoes, if any
        if sent is not None and "id" in got and got["id"] != sent:
            self.report.misread += 1
            self.report.tally.note(f"reply with id {short(got.get('id'))} read for", frame)
            self.report.tally.examples.append(
                "  the frames before it on that connection, each with the reply read for "
                "it: " + "; ".join(f"{f[:120]!r} -> {r}" for f, r in self.recent[-4:]))
        refused = got.get("type") == "error"
        self.recent.append((frame, f"{got.get('type')} {got.get('code', '')} "
                                   f"id={short(got.get('id'))} rev={got.get('revision')} "
                                   f"{short(got.get('message', ''))}"))
        t = self.report.tally
        t.refused += refused
        t.accepted += not refused
        if self.viewer and not refused and kind in WRITES and got.get("type") in ("ack",
                                                                                 "breath"):
            t.viewer_writes_accepted += 1
            t.note("player write accepted", frame)
        changed = (got.get("type") == "ack" and got.get("scene") in self.known
                   and kind in WRITES)
        if changed:
            # An accepted change: one revision on from the last known, or a refused request
            # before it changed the scene too.
            sid = got["scene"]
            last = self.revisions.get(sid)
            if last is not None and got.get("revision") != last + 1 and kind != "scene.unload":
                t.state_changes += 1
                t.note(f"scene {sid} revision {last} -> {got.get('revision')} in one change",
                       frame)
        self.since += 1
        if changed or self.since >= CHECK_EVERY:
            # After a change, the frames before it since the last look were refused: the
            # other scene must be as it was, the changed one one revision on (above).
            await self.check_scenes(refused=True, frame=frame,
                                    changed=got["scene"] if changed else None)
            self.since = 0


def short(value: Any) -> str:
    return repr(value)[:40]


def scene_diff(old: bytes | None, new: bytes | None) -> str:
    """What differs between two `scene.get` snapshots (msgpack), by document id."""
    if old is None or new is None:
        return f"{'none' if old is None else 'a scene'} -> {'none' if new is None else 'a scene'}"
    a, b = msgpack.unpackb(old), msgpack.unpackb(new)
    out = [f"{k}: {short(a.get(k))} -> {short(b.get(k))}" for k in sorted(set(a) | set(b))
           if not isinstance(a.get(k), list) and a.get(k) != b.get(k)]
    for k in sorted(set(a) | set(b)):
        if not isinstance(a.get(k), list):
            continue
        da = {str(d.get("id", d.get("_id"))): d for d in a.get(k) or [] if isinstance(d, dict)}
        db = {str(d.get("id", d.get("_id"))): d for d in b.get(k) or [] if isinstance(d, dict)}
        for i in sorted(set(da) | set(db)):
            if da.get(i) != db.get(i):
                x, y = da.get(i, {}), db.get(i, {})
                keys = sorted(f for f in {*x, *y} if x.get(f) != y.get(f))
                what = ("added" if i not in da else "removed" if i not in db
                        else "fields " + ",".join(map(str, keys)))
                out.append(f"{k}[{i}] {what}")
        if list(da) != list(db) and set(da) == set(db):
            out.append(f"{k}: same documents in another order")
    return ", ".join(out) or "the same values, encoded differently"


async def prober(url: str, seed: int, report: Report, stop: asyncio.Event) -> None:
    """Fresh connections whose first frame is a fuzzed hello or junk: a welcome or a
    close, never a 1011."""
    mut = Mutator(random.Random(seed + 7), "p-sq", "p-hx")
    while not stop.is_set():
        with contextlib.suppress(OSError, asyncio.TimeoutError, ConnectionClosed):
            async with connect(url, max_size=None, open_timeout=30) as ws:
                first = mut.frame(mut.mutate(hello(GM))) if mut.rng.random() < 0.7 \
                    else mut.next_frame()[0]
                report.probes += 1
                report.tally.frames += 1
                report.frames_total += 1
                try:
                    if isinstance(first, str):
                        await ws.send(first.encode("utf-8", "surrogatepass"), text=True)
                    else:
                        await ws.send(first)
                    await asyncio.wait_for(ws.recv(), 10)
                except ConnectionClosed as exc:
                    code = exc.rcvd.code if exc.rcvd is not None else 1006
                    report.probe_closes[code] += 1
                    if code == 1011:
                        report.tally.closes_1011 += 1
                        report.tally.note("1011 before hello", first)
        await asyncio.sleep(0.2)


async def sampler(url: str, report: Report, stop: asyncio.Event) -> None:
    """A light request in a scene of its own, every 20 ms, timed."""
    async with connect(url, max_size=None, open_timeout=30) as ws:
        assert (await _request(ws, hello(GM)))["type"] == "welcome"
        got = await _request(ws, {"type": "scene.load", "scene": LIGHT, "ruleset": "dnd35",
                                  "id": "light"})
        assert got["type"] == "ack", got
        k = 0
        while not stop.is_set():
            k += 1
            t0 = time.perf_counter()
            got = await _request(ws, {"type": "cover.query", "scene": "light", "attacker": "a",
                                      "target": "b", "id": k})
            report.latencies.append(time.perf_counter() - t0)
            if got.get("type") != "cover.result":
                report.tally.internal += got.get("code") == "internal"
            await asyncio.sleep(0.02)


def _sampling_process(url: str, pipe: Any) -> None:
    """`sampler` in a process of its own, until told to stop through `pipe`; it sends back
    the latencies and the count of `internal` answers."""
    async def main() -> None:
        report, stop = Report(), asyncio.Event()
        asyncio.get_running_loop().add_reader(pipe.fileno(), stop.set)
        await sampler(url, report, stop)
        pipe.send((report.latencies, report.tally.internal))
    asyncio.run(main())


async def fuzz_server(url: str, frames: int, workers: int = 4, seed: int = 1,
                      heavy: float = 0.002, probe: bool = True, sample: bool = True,
                      report: Report | None = None, sample_apart: bool = False,
                      nice: int = 0) -> Report:
    """Fuzz the server at `url` (gm token GM, player token PLAYER) with `frames` frames;
    `sample_apart`: the sampler runs in a process of its own; `nice`: then this process,
    the load (the fuzzing connections and the prober), gives way to the server and the
    sampler by that much (os.nice)."""
    report = report or Report()
    stop = asyncio.Event()
    side = []
    apart = None
    if sample and sample_apart:
        # By its module's name: run as `python -m tests.fuzz_long`, this one is __main__,
        # which the new process cannot find the function in.
        from tests import fuzz_long

        ctx = multiprocessing.get_context("spawn")
        mine, theirs = ctx.Pipe()
        apart = (ctx.Process(target=fuzz_long._sampling_process, args=(url, theirs),
                             daemon=True), mine)
        apart[0].start()
        if nice:
            # On a machine of two cores the load would otherwise take one from the server,
            # which on a real table runs on a machine of its own: what is measured is the
            # server's slices, not the scheduler sharing the cores with the load.
            os.nice(nice)
    elif sample:
        side.append(asyncio.create_task(sampler(url, report, stop)))
    if probe:
        side.append(asyncio.create_task(prober(url, seed, report, stop)))
    share, extra = divmod(frames, workers)
    crew = [Worker(url, k, seed, viewer=(k % 4 == 3), report=report, heavy=heavy)
            for k in range(workers)]
    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(w.run(share + (k < extra)) for k, w in enumerate(crew)))
    finally:
        report.seconds = time.perf_counter() - t0
        stop.set()
        if apart is not None:
            process, pipe = apart
            pipe.send("stop")
            if pipe.poll(60):
                latencies, internal = pipe.recv()
                report.latencies.extend(latencies)
                report.tally.internal += internal
            process.join(15)
        for task in side:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 15)
        for w in crew:
            if w.ws is not None:
                with contextlib.suppress(Exception):
                    await w.ws.close()
    return report


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _rss(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _tree(pid: int) -> list[int]:
    """The process and its descendants (a front process and its workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        todo.extend(int(k) for k in kids)
    return out


def _tree_kb(pid: int, key: str) -> int | None:
    """`key` (VmRSS, VmHWM) summed over the server's processes: for VmHWM, each one's
    peak, so at most what they held at once."""
    found = [v for v in (_rss(p, key) for p in _tree(pid)) if v is not None]
    return sum(found) if found else None


async def _watch(proc: subprocess.Popen[bytes], report: Report, stop: asyncio.Event) -> None:
    while not stop.is_set():
        if proc.poll() is not None:
            report.server_died = True
            return
        hwm = _tree_kb(proc.pid, "VmHWM")
        if hwm is not None:
            report.rss_peak_kb = max(hwm, report.rss_peak_kb or 0)
        await asyncio.sleep(1)


async def run_with_server(frames: int, workers: int, seed: int, heavy: float,
                          nice: int = 0) -> Report:
    report = Report()
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = open(Path(tmp) / "server.log", "wb")  # noqa: SIM115 (closed below)
        exe = Path(sys.executable).with_name("covercast")
        proc = subprocess.Popen(
            [str(exe), "serve", "--host", "127.0.0.1", "--port", str(port), "--no-demo",
             "--token", GM, "--player-token", PLAYER, "--state", str(Path(tmp) / "s.sqlite3")],
            stdout=subprocess.PIPE, stderr=log)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().decode()
            if "listening" not in line:
                raise RuntimeError(f"server did not start: {line!r}")
            report.rss_start_kb = _tree_kb(proc.pid, "VmRSS")
            stop = asyncio.Event()
            watcher = asyncio.create_task(_watch(proc, report, stop))
            try:
                await fuzz_server(f"ws://127.0.0.1:{port}", frames, workers, seed, heavy,
                                  report=report, sample_apart=True, nice=nice)
            finally:
                stop.set()
                await watcher
            report.rss_end_kb = _tree_kb(proc.pid, "VmRSS")
            report.rss_peak_kb = max(_tree_kb(proc.pid, "VmHWM") or 0, report.rss_peak_kb or 0)
            if proc.poll() is not None:
                report.server_died = True
        finally:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
            log.close()
            text = (Path(tmp) / "server.log").read_text(errors="replace")
            report.log_bugs = text.count("bug while")
            if report.log_bugs:
                first = text.index("bug while")
                report.tally.examples.append("server log: " + text[first:first + 1500])
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=int(os.environ.get("FRAMES", 1_000_000)))
    p.add_argument("--workers", type=int, default=6)
    p.add_argument("--seed", type=int, default=int(os.environ.get("SEED", 1)))
    p.add_argument("--heavy", type=float, default=0.001,
                   help="fraction of frames that are huge batches (1000 to 5001 items)")
    p.add_argument("--nice", type=int, default=int(os.environ.get("NICE", 10)),
                   help="the load (fuzzing connections, prober) runs this much nicer than "
                   "the server and the sampler, once both are started (0: the same)")
    p.add_argument("--url", help="fuzz this server (gm token and player token as here) "
                   "instead of starting one")
    args = p.parse_args(argv)
    if args.url:
        report = asyncio.run(fuzz_server(args.url, args.frames, args.workers, args.seed,
                                         args.heavy, sample_apart=True, nice=args.nice))
    else:
        report = asyncio.run(run_with_server(args.frames, args.workers, args.seed, args.heavy,
                                             args.nice))
    out = report.summary()
    print(json.dumps(out, indent=2))
    bad = report.tally.bad + report.log_bugs + int(report.server_died)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
