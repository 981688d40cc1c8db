"""Legal requests that would stall everyone (issue 16, item 3), against the real server: a
heavy request in one scene delays another scene's `cover.query` by at most 100 ms (its
table is computed in slices, other requests served between them), keepalive pings are
answered meanwhile, and a table past what the server can do is refused up front. The heavy
client reads its answer in a process of its own, and the test's heap is frozen while it
measures, so that what is measured is the server's delay, not the test process's."""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.synchronize import Event as ProcessEvent
from pathlib import Path
from typing import Any

import msgpack
import pytest
from websockets.sync.client import connect

from bench.scenes import generate
from server.messages import LIMITS
from tests.conftest import LiveServer, Peer

LIGHT: dict[str, Any] = {
    "_id": "light", "grid": {"type": 1, "size": 100, "distance": 5},
    "walls": [{"_id": "w", "c": [250, 0, 250, 300]}],
    "tokens": [{"_id": "a", "x": 0, "y": 100}, {"_id": "b", "x": 500, "y": 100}],
}
QUERY: dict[str, Any] = {"type": "cover.query", "scene": "light", "attacker": "a",
                         "target": "b", "attack": "ranged"}
BUDGET_S = 0.100


def _latencies(peer: Peer, seconds: float | None = None, count: int | None = None,
               stop: threading.Event | ProcessEvent | None = None) -> list[float]:
    out: list[float] = []
    end = time.monotonic() + seconds if seconds is not None else float("inf")
    k = 0
    while time.monotonic() < end and (count is None or len(out) < count) and not (
            stop is not None and stop.is_set()):
        k += 1
        t0 = time.perf_counter()
        reply = peer.request({**QUERY, "id": k})
        out.append(time.perf_counter() - t0)
        assert reply["type"] == "cover.result", reply
        time.sleep(0.005)
    return out


def _heavy(url: str, request: dict[str, Any], ready: Any, go: Any, done: Any,
           out: Any) -> None:
    """In a process of its own: connect, say hello, and once told, send `request` and read
    its answer; then report (seconds it took, the answer's type, whether it is a full set,
    how many annotations it holds). Reading tens of MB in the test's own process held the
    light client's thread for up to 100 ms more (the GIL, in a process grown over the whole
    suite), counted as the server's delay."""
    with connect(url, max_size=None) as ws:
        ws.send(msgpack.packb({"type": "hello", "protocol": 1, "client": "pytest"}))
        assert msgpack.unpackb(ws.recv(timeout=60))["type"] == "welcome"
        ready.set()
        go.wait(600)
        t0 = time.perf_counter()
        ws.send(msgpack.packb(request))
        frame = ws.recv(timeout=600)
        took = time.perf_counter() - t0
        done.set()
        reply = msgpack.unpackb(frame)
        out.send((took, reply.get("type"), reply.get("full"),
                  len(reply.get("annotations", ()))))


def _beside(light: Peer, url: str, request: dict[str, Any]
            ) -> tuple[float, tuple[Any, ...], list[float]]:
    """A client in another process sends `request` and waits for its answer (its time and
    what it was), while `light` queries its small scene (their latencies) until the answer
    is in."""
    spawn = multiprocessing.get_context("spawn")
    ready, go, done = spawn.Event(), spawn.Event(), spawn.Event()
    receive, send = spawn.Pipe(duplex=False)
    child = spawn.Process(target=_heavy, args=(url, request, ready, go, done, send))
    child.start()
    try:
        assert ready.wait(60), "the heavy client did not connect"
        go.set()
        time.sleep(0.05)
        busy = _latencies(light, stop=done, seconds=600)
        assert receive.poll(600), "the heavy request was not answered"
        took, *what = receive.recv()
    finally:
        child.join(60)
        if child.is_alive():
            child.kill()
    return took, tuple(what), busy


@pytest.fixture(autouse=True)
def quiet_client_heap() -> Iterator[None]:
    """The test process's heap frozen while it measures: the light client lives in it, and
    a collection of everything earlier tests left (millions of objects by the end of the
    suite) held its thread for 100 ms and more, counted as the server's delay (worst
    107-173 ms with 3 million objects left in the process, 32 ms with them frozen)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture
def server_process(tmp_path: Path) -> Iterator[str]:
    """`covercast serve` in a process of its own (the test's clients decode their replies
    in this one, and must not hold the server's interpreter lock): its URL."""
    with open(tmp_path / "server.log", "w") as log:
        proc = subprocess.Popen(
            # One worker: both scenes in one process, so the slices are what is tested
            # (with several, the two scenes may be on different workers anyway).
            [sys.executable, "-m", "covercast.cli", "serve", "--port", "0", "--no-demo",
             "--workers", "1", "--state", str(tmp_path / "state.sqlite3")],
            stdout=subprocess.PIPE, stderr=log, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        found = re.search(r"ws://127\.0\.0\.1:(\d+)", proc.stdout.readline())
        assert found
        yield f"ws://127.0.0.1:{found.group(1)}"
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_heavy_subscription_delays_another_scenes_cover_query_by_at_most_100_ms(
        server_process: str) -> None:
    """A realms subscription to 200 tokens and 1,000 walls (about a second of geometry
    here: 39,800 pairs, a 53 MB full set) runs beside a player querying one pair of a
    small scene. The player's queries while the table is computed, encoded and sent come
    back within 100 ms of the same query's median without it (measured first, in this run),
    all but the worst, and that one within 200 ms; before, the first query waited for
    the whole table, and later for the full set's encoding (70 ms in one call) and its
    writing as one frame (p99 140-200 ms over the median)."""
    gm, light = (Peer(connect(server_process, max_size=None).__enter__()) for _ in range(2))
    for p in (gm, light):
        assert p.hello()["type"] == "welcome"
    tokens = 200
    load: dict[str, Any] = {**generate(tokens, 1000, 1).message, "ruleset": "realms", "id": 1}
    sid = load["scene"]["_id"]
    assert gm.request(load)["type"] == "ack"
    assert gm.request({"type": "scene.load", "id": 2, "scene": LIGHT})["type"] == "ack"
    baseline = _latencies(light, count=40)
    quiet = statistics.median(baseline)

    took, reply, busy = _beside(light, server_process,
                                {"type": "subscribe", "id": 3, "scene": sid})
    assert reply == ("annotations", True, 3 * tokens * (tokens - 1)), reply
    # The heavy request really was heavy (done in one go, it would hold every query
    # several budgets long), and the light one was asked all along.
    assert took > 5 * BUDGET_S, took
    assert len(busy) >= 10, len(busy)
    worst = max(busy)
    p95 = sorted(busy)[int(0.95 * len(busy))]
    print(f"cover.query alone: median {quiet * 1000:.1f} ms; beside the subscription "
          f"({took:.1f} s): median {statistics.median(busy) * 1000:.1f} ms, p95 "
          f"{p95 * 1000:.0f} ms, worst {worst * 1000:.0f} ms over {len(busy)} queries")
    # The budget holds for 99 queries in 100. A run asks 45-80, so its 99th percentile is
    # its worst: the budget is asked of every query but the worst, the worst of twice it.
    # The worst is printed: 30-55 ms over the median. Until the full set's encoded parts
    # were written as they are (server/frames.py), about one full test run in three had a
    # query at 109-166 ms: the trip joining them into one 53 MB frame, 27 ms alone, far
    # longer late in a full run, where fresh memory is slow to come by. Before the
    # slices, every query waited for the whole table.
    second = sorted(busy)[-2]
    assert second - quiet < BUDGET_S, (
        f"two cover.queries waited {second * 1000:.0f} ms or more beside the subscription "
        f"({took:.1f} s), {quiet * 1000:.1f} ms alone")
    assert worst - quiet < 2 * BUDGET_S, f"worst {worst * 1000:.0f} ms"
    # Keepalive pings were answered meanwhile too (the loop was never starved).
    pong = light.ws.ping()
    assert pong.wait(1)
    for p in (gm, light):
        p.close()


def test_a_subscription_past_the_table_limit_is_refused_up_front(
        live_server: LiveServer) -> None:
    """Past maxTablePairs (welcome.limits) a subscription is refused with too_large naming
    the size and what to do, in no time; the scene stays loaded and queryable, and a
    subscribed scene may not grow past it either."""
    gm = Peer.open(live_server.url)
    welcome = gm.hello()
    assert welcome["limits"]["maxTablePairs"] == LIMITS.max_table_pairs
    n = 400
    tokens = [{"_id": f"t{k}", "x": 100 * (k % 40), "y": 100 * (k // 40)} for k in range(n)]
    scene = {"_id": "crowd", "grid": {"type": 1, "size": 100, "distance": 5},
             "tokens": tokens}
    assert gm.request({"type": "scene.load", "id": 1, "scene": scene})["type"] == "ack"
    t0 = time.perf_counter()
    reply = gm.request({"type": "subscribe", "id": 2, "scene": "crowd"})
    assert time.perf_counter() - t0 < 1
    assert reply["type"] == "error" and reply["code"] == "too_large", reply
    assert "400 tokens" in reply["message"] and "159600 pairs" in reply["message"]
    assert "cover.query" in reply["message"]
    query = gm.request({**QUERY, "id": 3, "scene": "crowd", "attacker": "t0", "target": "t1"})
    assert query["type"] == "cover.result", query
    # A scene with a subscriber may not grow past the limit.
    small = {**scene, "tokens": tokens[:100]}
    assert gm.request({"type": "scene.load", "id": 4, "scene": small})["type"] == "ack"
    gm.send({"type": "subscribe", "id": 5, "scene": "crowd"})
    sub = gm.recv(timeout=300)
    assert sub["type"] == "annotations", sub.get("type")
    grow = gm.request({"type": "token.create", "id": 6, "scene": "crowd",
                       "tokens": tokens[100:]})
    assert grow["type"] == "error" and grow["code"] == "too_large", grow
    state = gm.request({"type": "scene.get", "id": 7, "scene": "crowd"})
    assert len(state["scene"]["tokens"]) == 100
    gm.close()


def _core_with(load: dict[str, Any]) -> tuple[Any, int]:
    """A sans-I/O Core with a greeted connection that loaded `load`: the Core and the
    connection."""
    import msgpack

    from server.session import Core

    core = Core()
    conn = core.connect()
    core.receive(conn, msgpack.packb({"type": "hello", "protocol": 1, "client": "t"}))
    core.receive(conn, msgpack.packb(load))
    return core, conn


@pytest.mark.parametrize("ruleset", ["dnd35", "realms"])
def test_a_table_computed_in_slices_equals_the_one_computed_at_once(
        ruleset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sliced computation (what the server does) gives the very table the direct one
    does, for a first table and for a change touching most pairs."""
    import msgpack

    from server import tables as annotation_tables

    bench = generate(30, 300, 2)
    load = {**bench.message, "ruleset": ruleset}
    tables = []
    # Small slices, so that even this scene takes many.
    monkeypatch.setattr(annotation_tables, "SLICE_S", 0.002)
    for sliced in (False, True):
        core, conn = _core_with(load)
        sid = load["scene"]["_id"]
        out = []
        for step in range(2):
            if sliced:
                yields = sum(1 for _ in core.warm([(sid, False, False)]))
                assert yields > 1  # it was computed in several slices
                cached = core.tables.cache[(sid, False, False)]
                assert cached.revision == core.scenes[sid].revision
            out.append(dict(core.tables.current(sid, False)))
            if step == 0:
                moved = [{"_id": t["_id"], "x": t["x"] + 100} for t in load["scene"]["tokens"]]
                core.receive(conn, msgpack.packb({"type": "token.update", "scene": sid,
                                                  "tokens": moved[:20]}))
        tables.append(out)
    assert tables[0] == tables[1]


def test_a_whole_table_is_installed_a_chunk_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole table computed in slices is also installed in steps of INSTALL_CHUNK
    entries (installing 200 tokens' 119,400 at once held the worker 28-56 ms), with the
    answer of the direct computation; a change coming in between two
    steps is not lost: the table is installed for the revision it was computed for, then
    brought to the new one."""
    import msgpack

    from server import tables as annotation_tables

    bench = generate(30, 300, 2)
    load = {**bench.message, "ruleset": "realms"}
    sid = load["scene"]["_id"]
    key = (sid, False, False)
    move = msgpack.packb({"type": "token.update", "scene": sid, "tokens": [
        {"_id": t["_id"], "x": t["x"] + 100} for t in load["scene"]["tokens"][:3]]})
    # One slice for the whole table: every step after it is an install step.
    monkeypatch.setattr(annotation_tables, "SLICE_S", 60.0)
    monkeypatch.setattr(annotation_tables, "FIRST_SLICE", 10**9)
    monkeypatch.setattr(annotation_tables, "INSTALL_CHUNK", 500)
    pairs = 30 * 29
    chunks = -(-pairs * 3 // 500)

    def warmed(interrupt: bool) -> tuple[Any, int, dict[Any, Any]]:
        core, conn = _core_with(load)
        yields = 0
        for _ in core.warm([key]):
            yields += 1
            if interrupt and yields == 2:
                core.receive(conn, move)
        return core, yields, dict(core.tables.current(sid, False))

    _, yields, table = warmed(False)
    assert yields == chunks
    direct, direct_conn = _core_with(load)
    assert table == dict(direct.tables.current(sid, False))
    core, yields, table = warmed(True)
    assert core.tables.cache[key].revision == core.scenes[sid].revision
    assert yields >= chunks
    direct.receive(direct_conn, move)
    assert table == dict(direct.tables.current(sid, False))


def _heavy_scene() -> dict[str, Any]:
    """The largest scene the limits allow: 1,000 tokens and 20,000 walls."""
    load: dict[str, Any] = {**generate(LIMITS.max_tokens, LIMITS.max_walls, 1).message,
                            "id": 1}
    return load


def test_a_scene_at_the_limits_loads_and_changes_without_holding_the_worker(
        server_process: str) -> None:
    """A `scene.load` of 1,000 tokens and 20,000 walls, a `wall.update` of 5,000 of its
    walls and the first `cover.query` on it (each several hundred ms of reading, building
    and indexing) run beside a player querying one pair of a small scene: the player keeps
    being answered meanwhile (before, each heavy request held the worker for its whole
    length: four queries got through in the whole run), none delayed by more than the
    100 ms budget. The server keeps its scenes in a state file, as by default: the load's
    documents are written ahead of the Core thread (server/store.py, `Backstage`), and the
    thread reading ahead gives way to the Core's (server/giveway.py). Worst delays
    measured in four quiet runs: 27-39 ms over the median (before those two: 90-370 ms)."""
    gm, light = (Peer(connect(server_process, max_size=None).__enter__()) for _ in range(2))
    for p in (gm, light):
        assert p.hello()["type"] == "welcome"
    assert gm.request({"type": "scene.load", "id": 2, "scene": LIGHT})["type"] == "ack"
    quiet = statistics.median(_latencies(light, count=40))
    load = _heavy_scene()
    sid = load["scene"]["_id"]
    walls = load["scene"]["walls"][:5000]
    update = {"type": "wall.update", "id": 3, "scene": sid,
              "walls": [{"_id": w["_id"], "c": [w["c"][0] + 1, w["c"][1], w["c"][2] + 1,
                                                w["c"][3]]} for w in walls]}
    tokens = load["scene"]["tokens"]
    query = {"type": "cover.query", "id": 4, "scene": sid, "attacker": tokens[0]["_id"],
             "target": tokens[1]["_id"], "attack": "ranged"}
    frames = [msgpack.packb(m) for m in (load, update, query)]
    took: list[float] = []
    done = threading.Event()

    def heavy() -> None:
        for frame in frames:
            t0 = time.perf_counter()
            gm.ws.send(frame)
            reply = msgpack.unpackb(gm.ws.recv(timeout=600))
            took.append(time.perf_counter() - t0)
            assert reply["type"] in ("ack", "cover.result"), reply
        done.set()

    worker = threading.Thread(target=heavy)
    worker.start()
    busy = _latencies(light, stop=done, seconds=600)
    worker.join(600)
    assert len(took) == 3, "the heavy requests were not all answered"
    p95 = sorted(busy)[int(0.95 * len(busy))]
    worst = max(busy)
    print(f"cover.query alone: median {quiet * 1000:.1f} ms; beside load / update / first "
          f"query ({', '.join(f'{t:.2f}' for t in took)} s): median "
          f"{statistics.median(busy) * 1000:.1f} ms, p95 {p95 * 1000:.0f} ms, worst "
          f"{worst * 1000:.0f} ms over {len(busy)} queries")
    assert sum(took) > 0.3, took  # the heavy requests really were heavy
    assert len(busy) >= 10, len(busy)
    assert worst - quiet < BUDGET_S, (
        f"a cover.query waited {worst * 1000:.0f} ms beside the heavy requests, "
        f"{quiet * 1000:.1f} ms alone")
    assert light.ws.ping().wait(1)
    for p in (gm, light):
        p.close()


def test_a_table_of_big_creatures_is_sliced_a_pair_at_a_time(server_process: str) -> None:
    """Twelve Colossal (6 x 6) creatures, the largest a token may be: a pair of them costs
    the corner engine about as much as 150 pairs of Medium creatures (its lines run from
    every corner of its squares), so a slice holds one such pair, not sixteen (a first slice
    of 16 took 0.3-0.4 s, and a light query waited as long). A player's query of a small
    scene beside the subscription stays within the 100 ms budget of its quiet median."""
    gm, light = (Peer(connect(server_process, max_size=None).__enter__()) for _ in range(2))
    for p in (gm, light):
        assert p.hello()["type"] == "welcome"
    side = LIMITS.max_token_squares
    tokens = [{"_id": f"c{k}", "x": (k % 4) * (side + 2) * 100, "y": (k // 4) * (side + 2) * 100,
               "width": side, "height": side, "disposition": 1 if k % 2 else -1}
              for k in range(12)]
    big = {"_id": "colossi", "grid": {"type": 1, "size": 100, "distance": 5},
           "walls": [{"_id": "w", "c": [700, 0, 700, 300]}], "tokens": tokens}
    assert gm.request({"type": "scene.load", "id": 1, "scene": big})["type"] == "ack"
    assert gm.request({"type": "scene.load", "id": 2, "scene": LIGHT})["type"] == "ack"
    quiet = statistics.median(_latencies(light, count=40))
    took, reply, busy = _beside(light, server_process,
                                {"type": "subscribe", "id": 3, "scene": "colossi"})
    assert reply == ("annotations", True, 3 * 12 * 11), reply
    assert took > 0.5, took  # 132 pairs of Colossi: heavy
    assert len(busy) >= 10, len(busy)
    worst = max(busy)
    print(f"cover.query alone: median {quiet * 1000:.1f} ms; beside the Colossi "
          f"({took:.1f} s): median {statistics.median(busy) * 1000:.1f} ms, worst "
          f"{worst * 1000:.0f} ms over {len(busy)} queries")
    assert worst - quiet < BUDGET_S, f"worst {worst * 1000:.0f} ms, {quiet * 1000:.1f} alone"
    for p in (gm, light):
        p.close()
