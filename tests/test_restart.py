"""Scenes survive a restart of the real server process (issue 17 item 1): `covercast serve`
on 127.0.0.1 with a temporary state file takes a scene and changes to it, is killed with
SIGKILL right after an ack, and once started again on the same file answers a new
subscriber with the same revision and the same annotations, byte for byte. A damaged state
file stops the server at start-up with one clear line, never a traceback."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from bench.scenes import generate, move_frame
from tests.conftest import Peer, close_all


class Server:
    """`covercast serve` in a subprocess on a free port of 127.0.0.1."""

    def __init__(self, state: Path, *extra: str) -> None:
        """`extra`: more options; "--demo" (no such option) leaves --no-demo out."""
        demo = "--demo" in extra
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "covercast.cli", "serve", "--host", "127.0.0.1",
             "--port", "0", *([] if demo else ["--no-demo"]), "--state", str(state),
             *(x for x in extra if x != "--demo")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "COVERCAST_TOKEN": ""})
        assert self.proc.stdout is not None
        self.banner: list[str] = []
        while True:
            line = self.proc.stdout.readline()
            assert line, f"the server did not start: {self.proc.communicate()[1]}"
            self.banner.append(line)
            if line.startswith("state store:"):
                break
        self.url = next(x.split()[-1] for x in self.banner if "listening on" in x)
        #: The connections `peer` opened (closed by the `servers` fixture).
        self.peers: list[Peer] = []

    def peer(self) -> Peer:
        peer = Peer.open(self.url)
        self.peers.append(peer)
        assert peer.hello()["type"] == "welcome"
        return peer

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for s in started:
        close_all(s.peers)
        if s.proc.poll() is None:
            s.kill()


def raw(peer: Peer, message: dict[str, Any]) -> bytes:
    """The reply's frame exactly as the server sent it."""
    peer.send(message)
    frame = peer.ws.recv(30)
    assert isinstance(frame, bytes)
    return frame


def view(peer: Peer, sid: str) -> tuple[bytes, bytes]:
    """What a client that (re)connects sees of a scene: its `scene.get` reply and its
    subscription's full set (with lines), as frames."""
    state = raw(peer, {"type": "scene.get", "scene": sid, "id": "g"})
    full = raw(peer, {"type": "subscribe", "scene": sid, "lines": True, "id": "s"})
    assert msgpack.unpackb(full)["full"] is True
    return state, full


@pytest.mark.parametrize("sync", ["full", "normal"])
def test_a_killed_server_comes_back_with_every_acknowledged_change(
        tmp_path: Path, servers: list[Server], sync: str) -> None:
    state = tmp_path / "state.sqlite3"
    bench = generate(30, 400, seed=3)
    sid = bench.scene_id
    server = Server(state, "--state-sync", sync)
    servers.append(server)
    gm, watcher = server.peer(), server.peer()
    assert gm.request({**bench.message, "id": 0})["type"] == "ack"
    # A subscriber while the changes happen: its tables are patched revision by revision.
    assert watcher.request({"type": "subscribe", "scene": sid})["type"] == "annotations"
    scene = gm.request({"type": "scene.get", "scene": sid})["scene"]
    tokens = [t["id"] for t in scene["tokens"]]
    doors = [w["id"] for w in scene["walls"] if w.get("door")]
    changes: list[dict[str, Any]] = []
    for k in range(12):
        changes.append(move_frame(bench, tokens[k], (100.0 * (k + 2), 100.0 * (k % 5 + 1)),
                                  k + 1))
    changes += [
        {"type": "wall.update", "scene": sid, "walls": [{"_id": doors[0], "ds": 1}]},
        {"type": "token.create", "scene": sid,
         "tokens": [{"id": "newcomer", "x": 300, "y": 300, "disposition": 1}]},
        {"type": "token.delete", "scene": sid, "ids": [tokens[-1]]},
        {"type": "wall.create", "scene": sid, "walls": [{"id": "fresh", "c": [0, 0, 700, 0]}]},
        {"type": "wall.delete", "scene": sid, "ids": [doors[1]]},
    ]
    revision = 1
    for change in changes:
        got = gm.request(change)
        assert got["type"] == "ack", (change, got)
        revision = got["revision"]
    air = gm.request({"type": "turn.end", "scene": sid, "token": tokens[0],
                      "breathing": False, "seed": 7})
    assert air["type"] == "breath", air
    before = view(server.peer(), sid)
    # One more change, and the kill right after its ack: nothing may be lost.
    last = gm.request(move_frame(bench, tokens[1], (500.0, 500.0), 99))
    assert last == {"type": "ack", "scene": sid, "revision": revision + 1, "id": 99}
    before_last = view(server.peer(), sid)
    server.kill()

    server = Server(state, "--state-sync", sync)
    servers.append(server)
    assert f"(1 scene restored: {sid})" in server.banner[-1], server.banner
    after = view(server.peer(), sid)
    assert msgpack.unpackb(after[0])["revision"] == revision + 1
    assert after == before_last  # the same scene and annotations, byte for byte
    assert after != before
    # The client goes on where it left off; the revisions go on counting.
    gm = server.peer()
    got = gm.request(move_frame(bench, tokens[2], (600.0, 600.0), 100))
    assert got["revision"] == revision + 2
    assert gm.request({"type": "breath.get", "scene": sid,
                       "token": tokens[0]})["breath"] == air["breath"]


def test_a_damaged_state_file_stops_the_server_with_one_clear_line(
        tmp_path: Path, servers: list[Server]) -> None:
    state = tmp_path / "state.sqlite3"
    server = Server(state)
    servers.append(server)
    bench = generate(10, 2000, seed=1)
    assert server.peer().request(bench.message)["type"] == "ack"
    server.kill()
    # A document the store holds that no longer reads as one.
    db = sqlite3.connect(state)
    db.execute("UPDATE doc SET body = '{\"id\": 5' WHERE kind = 'walls' "
               "AND id = (SELECT min(id) FROM doc WHERE kind = 'walls')")
    db.commit()
    db.close()
    for damage in ("row", "torn"):
        if damage == "torn":
            db = sqlite3.connect(state)
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.close()
            data = state.read_bytes()
            state.write_bytes(data[: len(data) // 2])
        done = subprocess.run(
            [sys.executable, "-m", "covercast.cli", "serve", "--host", "127.0.0.1", "--port",
             "0", "--no-demo", "--state", str(state)],
            capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, (damage, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        expected = (f"stored scene {bench.scene_id!r} is damaged" if damage == "row"
                    else "the state file is damaged (torn or corrupt)")
        assert last.startswith(f"error: {state}: ") and expected in last, last


def test_make_run_keeps_the_stored_demo_scene(tmp_path: Path, servers: list[Server]) -> None:
    """`covercast serve` (what `make run` runs) preloads the demo; once the store holds it,
    a restart keeps the stored one with the gm's changes, and --fresh-demo replaces it."""
    state = tmp_path / "state.sqlite3"

    def serve(*extra: str) -> Server:
        server = Server(state, *extra)
        servers.append(server)
        assert server.proc.stdout is not None
        while "demo scene" not in server.banner[-1]:
            server.banner.append(server.proc.stdout.readline())
        return server

    server = serve("--demo")
    assert "demo scene 'demo' loaded (D&D 3.5)" in server.banner[-1], server.banner
    gm = server.peer()
    moved = gm.request({"type": "token.update", "scene": "demo",
                        "tokens": [{"id": "goblin", "x": 800, "y": 600}]})
    assert moved["revision"] == 2, moved
    server.kill()
    server = serve("--demo")
    assert "demo scene 'demo' restored at revision 2, as it was left" in server.banner[-1]
    goblin = next(t for t in server.peer().request({"type": "scene.get", "scene": "demo"})
                  ["scene"]["tokens"] if t["id"] == "goblin")
    assert (goblin["x"], goblin["y"]) == (800, 600)
    server.kill()
    server = serve("--demo", "--fresh-demo")
    assert "demo scene 'demo' loaded (D&D 3.5)" in server.banner[-1], server.banner
    state_now = server.peer().request({"type": "scene.get", "scene": "demo"})
    assert state_now["revision"] == 3
