"""Memory held per connection against the real server (issue 16, item 4): what clients push
while the worker is busy is bounded in bytes per connection, so forty of them leave the
server's resident memory flat, and a welcomed client that runs ahead is closed with 1013."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgpack
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from bench.scenes import generate
from server.admission import INBOUND_BYTES
from tests.conftest import LiveServer, Peer

TOKEN = "memory-secret"
CLIENTS = 40
FRAMES = 17
#: Four million nils under a hello: a frame just under the protocol's 4 MiB.
BIG = msgpack.packb({"type": "hello", "protocol": 1, "client": [None] * 4_000_000})


def _rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmRSS:\s+(\d+) kB", text)
    assert found
    return int(found.group(1)) / 1024


def _push(url: str, done: threading.Event, outcome: list[str]) -> None:
    """A token-less client: connect and push big frames until closed (or told to stop)."""
    try:
        ws = connect(url, max_size=None, open_timeout=30).__enter__()
    except Exception as exc:  # a refusal counts as an outcome too
        outcome.append(type(exc).__name__)
        return
    try:
        for _ in range(FRAMES):
            if done.is_set():
                break
            ws.send(BIG)
        # The server discards what follows its close, so a client whose reader was slow to
        # see the close may get every frame out: the close is then waiting to be read.
        ws.recv(timeout=30)
        outcome.append("answered")
    except ConnectionClosed:
        rcvd = ws.protocol.close_rcvd
        outcome.append(f"closed {rcvd.code if rcvd else None}")
    except Exception as exc:
        outcome.append(type(exc).__name__)


def test_forty_token_less_clients_pushing_4_mib_frames_leave_the_rss_flat(
        tmp_path: Path) -> None:
    """A gm keeps the worker busy (a realms subscription to 100 tokens and 1,000 walls);
    meanwhile forty clients without the token each push seventeen 4 MiB frames. The
    server's resident memory, sampled from /proc, stays within 150 MB of where it was
    (before: +72 MB per client, 2.9 GB in all)."""
    with open(tmp_path / "server.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "covercast.cli", "serve", "--port", "0", "--no-demo",
             "--token", TOKEN, "--state", ":memory:"],
            stdout=subprocess.PIPE, stderr=log, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    threads: list[threading.Thread] = []
    done = threading.Event()
    try:
        assert proc.stdout is not None
        found = re.search(r"ws://127\.0\.0\.1:(\d+)", proc.stdout.readline())
        assert found
        url = f"ws://127.0.0.1:{found.group(1)}"
        gm = Peer(connect(url, max_size=None).__enter__())
        assert gm.hello(TOKEN)["type"] == "welcome"
        load: dict[str, Any] = generate(100, 1000, 1).message
        load = {**load, "ruleset": "realms", "id": 1}
        assert gm.request(load)["type"] == "ack"
        time.sleep(0.5)
        base = _rss_mb(proc.pid)
        gm.send({"type": "subscribe", "scene": load["scene"]["_id"], "id": 2})
        outcome: list[str] = []
        threads = [threading.Thread(target=_push, args=(url, done, outcome), daemon=True)
                   for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        peak = base
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (len(outcome) < CLIENTS
                                               or time.monotonic() < deadline - 15):
            peak = max(peak, _rss_mb(proc.pid))
            time.sleep(0.05)
        peak = max(peak, _rss_mb(proc.pid))
        assert peak - base < 150, (base, peak, outcome)
        assert outcome.count("closed 1009") == CLIENTS, Counter(outcome)
        # The gm's subscription was answered all the same.
        reply = gm.recv(timeout=120)
        assert reply["type"] == "annotations" and reply["full"], reply.get("type")
        gm.close()
    finally:
        done.set()
        proc.terminate()
        proc.wait(30)


def test_a_welcomed_client_that_runs_ahead_of_the_worker_is_closed_1013() -> None:
    """A gm that pushes 1 MiB frames while the worker is busy (its own scene.load of a
    realms scene's subscription) is closed with 1013 once more than the inbox's bytes
    wait; the server holds no more than that for it."""
    server = LiveServer(token=TOKEN).start()
    try:
        gate = threading.Event()
        receive = server.core.receive

        def slow(conn: int, frame: bytes | str, *ahead: Any) -> Any:
            if server.core.connections[conn].greeted:
                gate.wait(20)  # the worker is busy with something else
            return receive(conn, frame, *ahead)

        server.core.receive = slow  # type: ignore[method-assign, assignment]
        gm = Peer.open(server.url)
        assert gm.hello(TOKEN)["type"] == "welcome"
        junk = msgpack.packb({"type": "scene.get", "id": 1, "scene": "x" * 10,
                              "pad": b"\0" * (1 << 20)})
        sent = 0
        with pytest.raises(ConnectionClosed):
            for _ in range(64):
                gm.send_raw(junk)
                sent += 1
                time.sleep(0.01)
            gm.recv(timeout=10)
        closed = gm.ws.protocol.close_rcvd
        assert closed is not None and closed.code == 1013, closed
        assert sent * len(junk) <= INBOUND_BYTES + 8 * len(junk)  # closed soon past it
        gate.set()
    finally:
        server.stop()


def test_a_client_that_does_not_read_its_replies_is_closed_past_the_byte_budget() -> None:
    """Replies are counted in bytes: a client asking for a ~400 KB `scene.get` a hundred
    times without reading is closed once 8 MiB wait for it (before: it could hold 1,024
    replies of any size)."""
    server = LiveServer().start()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", server.port))
    lazy: Peer | None = None
    try:
        gm = Peer.open(server.url)
        assert gm.hello()["type"] == "welcome"
        walls = [{"_id": f"wall-{k:05d}", "c": [k, 1000, k, 1200]} for k in range(4000)]
        ack = gm.request({"type": "scene.load", "id": 1,
                          "scene": {"_id": "big", "grid": {"type": 1}, "walls": walls}})
        assert ack["type"] == "ack", ack
        lazy = Peer(connect(server.url, sock=sock, max_size=None, max_queue=1).__enter__())
        assert lazy.hello()["type"] == "welcome"
        conn = max(server.core.connections)
        for k in range(100):
            with contextlib.suppress(ConnectionClosed):
                lazy.send({"type": "scene.get", "id": k, "scene": "big"})
        deadline = time.monotonic() + 30
        while conn in server.core.connections:
            assert time.monotonic() < deadline, "the server still holds the lazy client"
            time.sleep(0.1)
        # The others are served as ever.
        assert gm.request({"type": "scene.get", "id": 2, "scene": "big"})["type"] == "scene"
        gm.close()
    finally:
        # (Its reading thread waits for the test to read the replies it holds: closed
        # here, it stops.)
        if lazy is not None:
            lazy.close()
        sock.close()
        server.stop()
