"""`covercast serve --workers 2`: scenes in two processes behind one front process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from server.routing import owner
from tests.conftest import Peer, close_all

TOKEN = "gm-secret"
PLAYER = "player-secret"
HELLO = {"type": "hello", "protocol": 1, "client": "pytest", "token": TOKEN}


def _scene(sid: str, tokens: int = 3) -> dict[str, Any]:
    return {"id": sid, "grid": {"type": 1, "size": 100, "distance": 5, "units": "ft"},
            "width": 2000, "height": 2000,
            "walls": [{"id": "w1", "c": [350, 0, 350, 1000]}],
            "tokens": [{"id": f"t{k}", "x": 100 * k, "y": 100 * k,
                        "disposition": 1 if k % 2 else -1} for k in range(tokens)]}


def _on(worker: int, workers: int = 2, prefix: str = "scene") -> str:
    return next(s for s in (f"{prefix}-{k}" for k in range(1000)) if owner(s, workers) == worker)


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and b"spawn_main" in cmd:
            kids.append(int(entry.name))
    return sorted(kids)


class Served:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url
        #: The connections `peer` opened in the test running (closed after it: the
        #: `served` fixture).
        self.peers: list[Peer] = []

    def peer(self, **hello: Any) -> Peer:
        p = Peer(connect(self.url, max_size=None).__enter__())
        self.peers.append(p)
        p.send({**HELLO, **hello})
        assert p.recv()["type"] == "welcome"
        return p

    def workers(self) -> list[int]:
        """The worker pids, in start order (a pid that is started again sorts anywhere)."""
        deadline = time.monotonic() + 30
        while len(kids := _children(self.proc.pid)) < 2:
            assert time.monotonic() < deadline, kids
            time.sleep(0.1)
        return kids


@pytest.fixture
def served(shared_server: Served) -> Iterator[Served]:
    """The module's server, the connections each test opens closed after it."""
    yield shared_server
    close_all(shared_server.peers)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for the module's tests (each uses scenes of its own)."""
    tmp_path = tmp_path_factory.mktemp("workers")
    with open(tmp_path / "server.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "covercast.cli", "serve", "--port", "0", "--no-demo",
             "--workers", "2", "--token", TOKEN, "--player-token", PLAYER,
             "--state", str(tmp_path / "state.sqlite3")],
            stdout=subprocess.PIPE, stderr=log, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"ws://127\.0\.0\.1:(\d+)", line)
        assert found, line + (tmp_path / "server.log").read_text()
        yield Served(proc, f"ws://127.0.0.1:{found.group(1)}")
    finally:
        kids = _children(proc.pid)
        proc.terminate()
        proc.wait(20)
        time.sleep(0.2)
        # The workers went with the front.
        assert not [k for k in kids if Path(f"/proc/{k}").exists()
                    and "Z" not in Path(f"/proc/{k}/stat").read_text().split()[2]]


def _move(gm: Peer, sid: str, rid: int, x: float) -> dict[str, Any]:
    return gm.request({"type": "token.update", "scene": sid, "id": rid,
                       "tokens": [{"id": "t0", "x": x}]})


def test_one_connection_uses_scenes_of_both_workers(served: Served) -> None:
    """A gm loads a scene on each worker through one connection; a subscriber of each
    (another connection) gets the deltas of the gm's moves, with revisions as today."""
    a, b = _on(0, prefix="t0"), _on(1, prefix="t0")
    gm = served.peer()
    for k, sid in enumerate((a, b)):
        reply = gm.request({"type": "scene.load", "id": k, "scene": _scene(sid)})
        assert reply == {"type": "ack", "scene": sid, "revision": 1, "id": k}
    watcher = served.peer()
    for sid in (a, b):
        full = watcher.request({"type": "subscribe", "scene": sid, "id": sid})
        assert full["type"] == "annotations" and full["full"] and full["revision"] == 1
    for rev in range(2, 5):
        for sid in (a, b):
            assert _move(gm, sid, rev, 100 + rev)["revision"] == rev
            delta = watcher.recv()
            assert delta["type"] == "annotations" and delta["scene"] == sid
            assert delta["revision"] == rev and not delta["full"]
    # A scene's error names that scene; the connection stays up on both workers.
    err = gm.request({"type": "cover.query", "scene": "nowhere", "id": 9, "attacker": "t0",
                      "target": "t1"})
    assert err["type"] == "error" and err["code"] == "unknown_scene", err
    assert gm.request({"type": "scene.get", "scene": b, "id": 10})["revision"] == 4


def test_a_full_set_written_from_its_parts_crosses_the_front_whole(served: Served) -> None:
    """A full set larger than one step of the encoder (80 tokens: 18,960 annotations, over
    ENCODE_CHUNK) is encoded ahead in parts by its worker and written from them to the
    front process, which passes it on: a client reads one whole message, in msgpack and in
    JSON, the same annotations both ways."""
    sid = _on(1, prefix="parts")
    scene = {**_scene(sid), "tokens": [{"id": f"t{k}", "x": 100 * (k % 10) + 400,
                                        "y": 100 * (k // 10), "disposition": 1 - 2 * (k % 2)}
                                       for k in range(80)]}
    gm = served.peer()
    assert gm.request({"type": "scene.load", "id": 1, "scene": scene})["type"] == "ack"
    full = gm.request({"type": "subscribe", "scene": sid, "id": 2})
    assert full["type"] == "annotations" and full["full"] and full["id"] == 2
    assert len(full["annotations"]) == 3 * 80 * 79
    with connect(served.url, max_size=None) as ws:
        ws.send(json.dumps(HELLO))
        assert json.loads(ws.recv(10))["type"] == "welcome"
        ws.send(json.dumps({"type": "subscribe", "scene": sid, "id": 3}))
        text = ws.recv(60)
        assert isinstance(text, str)
        again = json.loads(text)
    assert again["id"] == 3 and again["annotations"] == full["annotations"]
    gm.close()


def test_replies_come_back_in_the_order_the_requests_were_sent(served: Served) -> None:
    """Protocol section 3, "Ordering": a connection's replies come back in the order of
    its requests, even when they go to two workers and the first one is slow. A
    subscription to 60 tokens (its full set: 10,620 annotations, computed on worker 0)
    is pipelined with quick `scene.get`s of a scene on worker 1: without the front waiting
    for worker 0's reply, worker 1 answered first."""
    slow, quick = _on(0, prefix="order"), _on(1, prefix="order")
    gm = served.peer()
    big = _scene(slow, tokens=60)
    assert gm.request({"type": "scene.load", "id": 1, "scene": big})["type"] == "ack"
    assert gm.request({"type": "scene.load", "id": 2, "scene": _scene(quick)})["type"] == "ack"
    for round_ in range(2):  # the first subscription computes the table; then a reload
        gm.send({"type": "subscribe", "scene": slow, "id": f"sub{round_}"})
        for k in range(5):
            gm.send({"type": "scene.get", "scene": quick, "id": f"get{round_}-{k}"})
        got = [gm.recv() for _ in range(6)]
        assert [g.get("id") for g in got] == [f"sub{round_}"] + [f"get{round_}-{k}"
                                                                  for k in range(5)], [
            (g.get("type"), g.get("id")) for g in got]
        assert gm.request({"type": "unsubscribe", "scene": slow, "id": "u"})["type"] == "ack"
        big["walls"] = [{"id": "w2", "c": [650, 0, 650, 900]}]  # the table anew
        assert gm.request({"type": "scene.load", "id": 3, "scene": big})["type"] == "ack"


def test_a_frame_nested_too_deeply_is_refused_and_the_connection_stays(
        served: Served) -> None:
    """Found by make fuzz: the front could not read its scene (msgspec's RecursionError)
    and dropped the client; now a worker refuses it, as one server does."""
    gm = served.peer()
    gm.ws.send(b"\x83\xa4type\xa9scene.get\xa2id\x07\xa5scene"
               + b"\x81\xa1d\x91" * 3000 + b"\xa5arena")
    err = gm.recv()
    assert err["type"] == "error" and err["code"] in ("bad_frame", "invalid"), err
    assert gm.request({"type": "scene.get", "scene": "nowhere", "id": 8})["id"] == 8


def test_the_hello_said_once_holds_on_every_worker(served: Served) -> None:
    """A player's hello, replayed on the second worker it uses, keeps it a player there."""
    a, b = _on(0, prefix="t1"), _on(1, prefix="t1")
    gm = served.peer()
    for sid in (a, b):
        assert gm.request({"type": "scene.load", "id": 1, "scene": _scene(sid)})["type"] == "ack"
    player = served.peer(token=PLAYER)
    for sid in (b, a):
        q = player.request({"type": "cover.query", "scene": sid, "id": 2, "attacker": "t0",
                            "target": "t1"})
        assert q["type"] == "cover.result", q
        refused = player.request({"type": "token.update", "scene": sid, "id": 3,
                                  "tokens": [{"id": "t0", "x": 5}]})
        assert refused["type"] == "error" and refused["code"] == "forbidden", refused


def test_a_bad_hello_is_refused_as_by_one_server(served: Served) -> None:
    ws = connect(served.url).__enter__()
    ws.send(json.dumps({**HELLO, "token": "wrong"}))
    with pytest.raises(ConnectionClosed):
        ws.recv(timeout=10)
    assert ws.close_code == 1008 and ws.close_reason == "access denied"


def test_a_stopped_worker_stops_only_its_own_scenes(served: Served) -> None:
    """Each scene's worker is a process of its own: with one worker frozen (SIGSTOP), the
    other's scenes still answer at once to every other connection; the connection waiting
    for the frozen one gets its later replies after that one, in the order of its
    requests (protocol section 3), once the worker goes on."""
    a, b = _on(0, prefix="t3"), _on(1, prefix="t3")
    gm = served.peer()
    other = served.peer()
    for sid in (a, b):
        assert gm.request({"type": "scene.load", "id": 1, "scene": _scene(sid)})["type"] == "ack"
    # Which process holds `a`: freeze each in turn until a's requests stop answering.
    frozen = None
    for pid in served.workers():
        os.kill(pid, signal.SIGSTOP)
        gm.send({"type": "scene.get", "scene": a, "id": "probe"})
        try:
            reply = gm.recv(timeout=1.0)
        except TimeoutError:
            frozen = pid
            break
        assert reply["id"] == "probe"
        os.kill(pid, signal.SIGCONT)
    assert frozen is not None, "scene a answered with either worker stopped"
    try:
        gm.send({"type": "scene.get", "scene": b, "id": "behind"})  # waits for the probe
        for rev in range(2, 6):
            got = _move(other, b, rev, 50 + rev)
            assert got == {"type": "ack", "scene": b, "revision": rev, "id": rev}
        with pytest.raises(TimeoutError):
            gm.recv(timeout=0.5)
    finally:
        os.kill(frozen, signal.SIGCONT)
    late = gm.recv(timeout=10)
    assert late["id"] == "probe" and late["scene"]["id"] == a
    behind = gm.recv(timeout=10)
    assert behind["id"] == "behind" and behind["revision"] == 5


def test_a_worker_killed_is_started_again(served: Served) -> None:
    """SIGKILL of a worker: its clients are closed (1011) and reconnect; the worker is
    started again and its scenes come back to load; the other worker's clients never
    notice."""
    a, b = _on(0, prefix="t4"), _on(1, prefix="t4")
    gm_a, gm_b = served.peer(), served.peer()
    assert gm_a.request({"type": "scene.load", "id": 1, "scene": _scene(a)})["type"] == "ack"
    assert gm_b.request({"type": "scene.load", "id": 1, "scene": _scene(b)})["type"] == "ack"
    before = served.workers()
    victim = None
    for pid in before:
        os.kill(pid, signal.SIGSTOP)
        gm_a.send({"type": "scene.get", "scene": a, "id": "probe"})
        try:
            gm_a.recv(timeout=1.0)
        except TimeoutError:
            victim = pid
        os.kill(pid, signal.SIGCONT)
        if victim is not None:
            gm_a.recv(timeout=10)
            break
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    with pytest.raises(ConnectionClosed):
        gm_a.recv(timeout=10)
    assert gm_a.ws.close_code == 1011
    assert _move(gm_b, b, 2, 60)["revision"] == 2
    deadline = time.monotonic() + 60
    while True:
        after = served.workers()
        if victim not in after and len(after) == 2:
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    again = served.peer()
    deadline = time.monotonic() + 60
    while (reply := again.request({"type": "scene.load", "id": 2, "scene": _scene(a)})
           )["type"] != "ack":
        assert time.monotonic() < deadline, reply
        time.sleep(0.2)
    assert _move(gm_b, b, 3, 70)["revision"] == 3
