"""Slow subscribers against a real server on 127.0.0.1: one that stops reading never delays
the others, the server keeps a bounded amount for it (its deltas coalesce: latest state
wins), and once it reads again it catches up to the scene's current annotations."""

from __future__ import annotations

import socket
import time
from typing import Any

import msgpack
import pytest
from websockets.sync.client import connect

from tests.conftest import LiveServer, Peer

Key = tuple[str, str, str]

# A row of tokens with one wall in the middle: moving the first token changes pairs with
# every other, and with lines on, each delta carries every line of each changed pair.
TOKENS = 16
SCENE: dict[str, Any] = {
    "_id": "slow",
    "grid": {"type": 1, "size": 100, "distance": 5},
    "width": 3000, "height": 3000,
    "walls": [{"_id": "w", "c": [1250, 650, 1250, 950]}],
    "tokens": [{"_id": f"t{k}", "x": 200 + 150 * k if k else 0, "y": 800} for k in range(TOKENS)],
}
MOVES = 120


def _greet(peer: Peer) -> None:
    assert peer.hello()["type"] == "welcome"


def _table(annotations: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    return {(a["attacker"], a["target"], a["mode"]): a for a in annotations}


def _apply(view: dict[Key, dict[str, Any]], delta: dict[str, Any]) -> None:
    view.update(_table(delta["annotations"]))
    for key in delta["removed"]:
        view.pop((key[0], key[1], key[2]), None)


def test_a_subscriber_that_stops_reading_neither_slows_the_others_nor_piles_up(
        live_server: LiveServer) -> None:
    gm = Peer.open(live_server.url)
    fast = Peer.open(live_server.url)
    # The slow one's socket takes little before the server must hold data for it, and its
    # client library stops reading after one frame it was not asked for.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", live_server.port))
    slow = Peer(connect(live_server.url, sock=sock, max_size=None, max_queue=1).__enter__())
    try:
        for p in (gm, fast, slow):
            _greet(p)
        assert gm.request({"type": "scene.load", "scene": SCENE})["type"] == "ack"
        views = []
        for p in (fast, slow):
            snap = p.request({"type": "subscribe", "scene": "slow", "lines": True})
            assert snap["type"] == "annotations" and snap["full"], snap
            views.append(_table(snap["annotations"]))
        fast_view, slow_view = views
        conn = max(live_server.core.connections)  # the slow subscriber connected last
        sub = live_server.core.connections[conn].subscriptions["slow"]

        revision = 0
        for k in range(MOVES):
            x = 0 if k % 2 else 100
            ack = gm.request({"type": "token.update", "scene": "slow",
                              "tokens": [{"_id": "t0", "x": x, "y": 800 + 100 * (k % 3)}]})
            assert ack["type"] == "ack", ack
            revision = ack["revision"]
            # The reader keeps getting every change promptly while the other one sleeps.
            delta = fast.recv(timeout=10)
            assert delta["type"] == "annotations" and delta["revision"] == revision, delta
            _apply(fast_view, delta)
        # The server did not build (nor keep) a delta for each revision the slow one missed.
        behind = sub.revision
        assert behind < revision - MOVES // 2, (behind, revision)

        # Reading again, it is brought to the current state in fewer frames than changes.
        frames = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            delta = slow.recv(timeout=10)
            assert delta["type"] == "annotations", delta
            frames += 1
            _apply(slow_view, delta)
            if delta["revision"] == revision:
                break
        assert delta["revision"] == revision
        assert frames < MOVES // 2, frames
        assert slow_view == fast_view
        assert sub.revision == revision
    finally:
        for p in (gm, fast, slow):
            p.close()


def test_every_subscriber_of_a_change_gets_the_same_delta(live_server: LiveServer) -> None:
    """Many subscribers with one view share one frame: each gets the change once, at the
    change's revision, with the same content."""
    gm = Peer.open(live_server.url)
    subs = [Peer.open(live_server.url) for _ in range(12)]
    try:
        for p in (gm, *subs):
            _greet(p)
        assert gm.request({"type": "scene.load", "scene": SCENE})["type"] == "ack"
        for p in subs:
            assert p.request({"type": "subscribe", "scene": "slow"})["full"]
        for k in range(5):
            ack = gm.request({"type": "token.update", "scene": "slow",
                              "tokens": [{"_id": "t0", "x": 0, "y": 900 + 100 * (k % 2)}]})
            raw = [p.ws.recv(10) for p in subs]
            assert len(set(raw)) == 1 and isinstance(raw[0], bytes)
            delta = msgpack.unpackb(raw[0], raw=False)
            assert delta["revision"] == ack["revision"] and not delta["full"]
            assert delta["annotations"]
    finally:
        for p in (gm, *subs):
            p.close()


def test_a_fan_out_writing_as_it_goes_gives_each_view_its_own_frame(
        live_server: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """With every delta handed to the loop as soon as it is built (as before a table is
    computed for another view), gm and viewer subscribers still get their own view's delta,
    once, at the change's revision, and a viewer's never names a hidden token."""
    from tests.test_roles import HIDDEN, SCENE, VISIBLE, names

    monkeypatch.setattr(live_server.core, "computed", lambda conn, sid: False)
    gm = Peer.open(live_server.url)
    subs = [(Peer.open(live_server.url), role) for role in ("gm", "overlay", "gm", "player")]
    try:
        _greet(gm)
        for p, role in subs:
            assert p.hello(role=role)["type"] == "welcome"
        assert gm.request({"type": "scene.load", "scene": SCENE})["type"] == "ack"
        held = [_table(p.request({"type": "subscribe", "scene": "keep"})["annotations"])
                for p, _ in subs]
        for k, x in enumerate((100, 0, 100)):
            ack = gm.request({"type": "token.update", "scene": "keep",
                              "tokens": [{"_id": "archer", "x": x, "y": 100 * (k % 2)}]})
            for (p, role), view in zip(subs, held, strict=True):
                delta = p.recv()
                assert delta["type"] == "annotations" and delta["revision"] == ack["revision"]
                _apply(view, delta)
                if role != "gm":
                    assert all(names(a) <= VISIBLE for a in delta["annotations"]), delta
        for (p, role), view in zip(subs, held, strict=True):
            fresh = _table(p.request({"type": "subscribe", "scene": "keep"})["annotations"])
            assert view == fresh
            assert any(HIDDEN & names(a) for a in view.values()) is (role == "gm")
    finally:
        for p in (gm, *(p for p, _ in subs)):
            p.close()
