"""Unauthenticated work against the real server on 127.0.0.1 (issue 16, item 2): what a
connection may send before `welcome`, how long it has to say hello, how many connections
one address and everyone may hold, and a descriptor flood logged once, not per accept."""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from server.admission import Admission, EdgeLimits, Seldom, total_cap
from tests.conftest import LiveServer, Peer

TOKEN = "edge-secret"
HELLO: dict[str, Any] = {"type": "hello", "protocol": 1, "client": "pytest"}
SCENE: dict[str, Any] = {
    "_id": "s", "grid": {"type": 1, "size": 100, "distance": 5},
    "tokens": [{"_id": "a", "x": 0, "y": 0}, {"_id": "b", "x": 500, "y": 0}],
}


@pytest.fixture
def guarded() -> Iterator[LiveServer]:
    server = LiveServer(token=TOKEN).start()
    yield server
    server.stop()


def _closed(peer: Peer, timeout: float) -> ConnectionClosed:
    with pytest.raises(ConnectionClosed) as caught:
        peer.recv(timeout=timeout)
    return caught.value


def test_a_huge_frame_before_hello_is_closed_1009_and_never_decoded(
        guarded: LiveServer) -> None:
    """A 4 MB hello (four million nils under `client`) is refused on its length: the Core
    never sees it (no decoding, no worker time) and the close says 1009."""
    seen: list[int] = []
    receive = guarded.core.receive

    def counting(conn: int, frame: bytes | str, *ahead: Any) -> Any:
        seen.append(len(frame))
        return receive(conn, frame, *ahead)

    guarded.core.receive = counting  # type: ignore[method-assign, assignment]
    peer = Peer.open(guarded.url)
    frame = msgpack.packb({**HELLO, "token": TOKEN, "client": [None] * 4_000_000})
    assert len(frame) > 4_000_000
    t0 = time.perf_counter()
    with pytest.raises(ConnectionClosed):  # the server may close while the frame goes out
        peer.send_raw(frame)
        peer.recv(timeout=10)
    closed = peer.ws.protocol.close_rcvd
    assert closed is not None and closed.code == 1009, closed
    assert "before welcome" in closed.reason
    assert time.perf_counter() - t0 < 5
    assert seen == []
    # The server goes on: a well-behaved client is welcomed.
    gm = Peer.open(guarded.url)
    assert gm.hello(TOKEN)["type"] == "welcome"
    gm.close()


def test_a_client_that_waits_for_welcome_may_then_send_a_large_frame(
        guarded: LiveServer) -> None:
    """The pre-hello limit ends at welcome: the very next frame may be as large as the
    protocol allows (a scene of 6,000 walls, ~700 KB)."""
    peer = Peer.open(guarded.url)
    assert peer.hello(TOKEN)["type"] == "welcome"
    walls = [{"_id": f"w{k}", "c": [k, 1000, k, 1200]} for k in range(6000)]
    frame = msgpack.packb({"type": "scene.load", "id": 1, "scene": {**SCENE, "walls": walls}})
    assert len(frame) > 100_000
    peer.send_raw(frame)
    reply = peer.recv(timeout=30)
    assert reply["type"] == "ack", reply
    peer.close()


def test_hello_and_a_small_frame_sent_together_are_both_answered(
        guarded: LiveServer) -> None:
    """Pipelining a hello and a small request (within the few KiB before welcome) works."""
    peer = Peer.open(guarded.url)
    peer.send({**HELLO, "token": TOKEN})
    peer.send({"type": "scene.get", "id": 2, "scene": "nowhere"})
    assert peer.recv()["type"] == "welcome"
    reply = peer.recv()
    assert reply["type"] == "error" and reply["code"] == "unknown_scene", reply
    peer.close()


def test_a_connection_that_never_says_hello_is_closed_after_the_deadline(
        guarded: LiveServer) -> None:
    """The default deadline (5 s): a WebSocket that answers pings but never greets is
    closed with 1008, naming the deadline."""
    peer = Peer.open(guarded.url)
    t0 = time.perf_counter()
    _closed(peer, timeout=12)
    waited = time.perf_counter() - t0
    closed = peer.ws.protocol.close_rcvd
    assert closed is not None and closed.code == 1008, closed
    assert "no hello within 5 s" in closed.reason
    assert 4 < waited < 10


def test_connections_past_the_per_address_cap_get_503_until_one_closes() -> None:
    server = LiveServer(token=TOKEN, limits=EdgeLimits(max_per_address=3)).start()
    try:
        peers = [Peer.open(server.url) for _ in range(3)]
        with pytest.raises(InvalidStatus) as refused:
            Peer.open(server.url)
        response = refused.value.response
        assert response.status_code == 503
        assert response.headers["Retry-After"]
        assert b"limit per address" in response.body
        for p in peers[:2]:
            assert p.hello(TOKEN)["type"] == "welcome"
        peers[0].close()
        deadline = time.monotonic() + 5
        while True:  # the close reaches the server's count a moment later
            try:
                again = Peer.open(server.url)
                break
            except InvalidStatus:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert again.hello(TOKEN)["type"] == "welcome"
        for p in (*peers[1:], again):
            p.close()
    finally:
        server.stop()


def test_connections_past_the_total_cap_get_503() -> None:
    server = LiveServer(token=TOKEN, limits=EdgeLimits(max_connections=2)).start()
    try:
        peers = [Peer.open(server.url) for _ in range(2)]
        with pytest.raises(InvalidStatus) as refused:
            Peer.open(server.url)
        assert refused.value.response.status_code == 503
        assert b"connections, its limit" in refused.value.response.body
        for p in peers:
            p.close()
    finally:
        server.stop()


def test_the_total_cap_stays_below_the_descriptor_limit() -> None:
    assert total_cap(4096, nofile=20_000) == 4096
    assert total_cap(4096, nofile=1024) == 1024 - 102
    assert total_cap(4096, nofile=100) == 100 - 64
    assert total_cap(50_000, nofile=20_000) == 18_000
    admission = Admission(total=2, per_address=1)
    assert admission.admit("1.2.3.4") is None
    assert admission.admit("1.2.3.4") is not None  # per address
    assert admission.admit("5.6.7.8") is None
    assert admission.admit("9.9.9.9") is not None  # in total
    admission.release("1.2.3.4")
    assert admission.admit("9.9.9.9") is None
    assert admission.open == 2


def test_a_repeated_resource_error_is_logged_once_per_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    say = Seldom(logging.getLogger("test.seldom"), interval=60)
    with caplog.at_level(logging.ERROR, logger="test.seldom"):
        said = [say(logging.ERROR, "cannot accept: %s", "EMFILE") for _ in range(1000)]
    assert said.count(True) == 1
    assert len(caplog.records) == 1


def _serve(tmp_path: Path, nofile: int, *args: str) -> tuple[subprocess.Popen[str], int]:
    """`covercast serve` in a process of its own with a descriptor limit of `nofile`."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with open(tmp_path / "server.log", "w") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "covercast.cli", "serve", "--port", "0", "--no-demo",
             "--token", TOKEN, "--state", ":memory:", *args],
            stdout=subprocess.PIPE, stderr=log, text=True, preexec_fn=limit,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"ws://127\.0\.0\.1:(\d+)", line)
    assert found, line
    return proc, int(found.group(1))


def test_a_descriptor_flood_is_refused_cleanly_and_logged_once(tmp_path: Path) -> None:
    """A server limited to 200 descriptors, flooded with 400 sockets that never finish a
    handshake and 50 WebSockets that never greet: the WebSockets past the cap are answered
    503, asyncio's accept failure is logged at most once a minute (not once per accept),
    and when the flood is gone a gm is welcomed."""
    proc, port = _serve(tmp_path, 200, "--hello-timeout", "30")
    raw: list[socket.socket] = []
    held = []
    try:
        refused = 0
        for _ in range(50):
            try:
                held.append(connect(f"ws://127.0.0.1:{port}", open_timeout=5).__enter__())
            except InvalidStatus as exc:
                assert exc.response.status_code == 503
                refused += 1
        # The cap (200 - 64 free) is below the descriptor limit: refusals are HTTP answers.
        assert len(held) == 50 and refused == 0
        for _ in range(400):
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            raw.append(s)
        time.sleep(3)  # asyncio retries a failed accept every second
        for s in raw:
            s.close()
        for ws in held:
            ws.close()
        deadline = time.monotonic() + 20
        while True:
            try:
                gm = connect(f"ws://127.0.0.1:{port}", open_timeout=5).__enter__()
                break
            except (InvalidStatus, OSError, TimeoutError):
                assert time.monotonic() < deadline
                time.sleep(0.2)
        gm.send(json.dumps({**HELLO, "token": TOKEN}))
        assert json.loads(gm.recv(timeout=10))["type"] == "welcome"
        gm.close()
    finally:
        proc.terminate()
        proc.wait(10)
    log = (tmp_path / "server.log").read_text()
    assert "socket.accept() out of system resource" not in log
    assert log.count("cannot accept connections") <= 1, log[-2000:]
    # Beyond websockets' own line per connection opened and closed, a handful of lines.
    other = [line for line in log.splitlines()
             if not line.endswith(("connection open", "connection closed"))]
    assert len(other) < 20, other[:40]
