"""Memory held per connection against the real server (issue 16, item 4): what clients push
while the worker is busy is bounded in bytes per connection, so forty of them leave the
server's resident memory flat, and a welcomed client that runs ahead is closed with 1013."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
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
        outcome.append("sent all")
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
        assert outcome.count("closed 1009") == CLIENTS, outcome
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

        def slow(conn: int, frame: bytes | str) -> Any:
            if server.core.connections[conn].greeted:
                gate.wait(20)  # the worker is busy with something else
            return receive(conn, frame)

        server.core.receive = slow  # type: ignore[method-assign]
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
