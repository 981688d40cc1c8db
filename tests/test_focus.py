"""scene.focus against the real server: the gm points the table at a pair, every subscriber
is pushed its view of it, and a viewer's view never names a hidden token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import LiveServer, Peer

GM, OVERLAY = "gm-f", "overlay-f"
SCENE: dict[str, Any] = {
    "id": "s", "grid": {"type": 1, "size": 50, "distance": 5},
    "tokens": [{"id": "archer", "x": 0, "y": 50, "disposition": 1},
               {"id": "goblin", "x": 250, "y": 50, "disposition": -1},
               {"id": "spy", "x": 250, "y": 200, "disposition": -1, "hidden": True}],
}


@pytest.fixture
def server() -> Iterator[LiveServer]:
    live = LiveServer(token=GM, overlay_token=OVERLAY).start()
    yield live
    live.stop()


def _peer(server: LiveServer, token: str) -> Peer:
    peer = Peer.open(server.url)
    assert peer.hello(token)["type"] == "welcome"
    return peer


def _subscribed(server: LiveServer, token: str) -> Peer:
    peer = _peer(server, token)
    assert peer.request({"type": "subscribe", "scene": "s", "modes": ["ranged"],
                         "id": 1})["full"] is True
    return peer


def _focus(gm: Peer, **fields: Any) -> dict[str, Any]:
    """Send scene.focus; return its ack, skipping the gm's own focus push (it subscribes
    in some tests)."""
    gm.send({"type": "scene.focus", "scene": "s", "id": "f", **fields})
    while True:
        got = gm.recv()
        if got.get("id") == "f":
            return got


def _next(peer: Peer, kind: str) -> dict[str, Any]:
    while True:
        got = peer.recv(5)
        if got["type"] == kind:
            return got


def test_subscribers_follow_the_focus(server: LiveServer) -> None:
    gm = _peer(server, GM)
    assert gm.request({"type": "scene.load", "scene": SCENE})["revision"] == 1
    overlay = _subscribed(server, OVERLAY)
    ack = _focus(gm, attacker="archer", target="goblin", mode="ranged")
    assert ack == {"type": "ack", "scene": "s", "revision": 1, "id": "f"}  # no new revision
    assert _next(overlay, "focus") == {"type": "focus", "scene": "s", "attacker": "archer",
                                       "target": "goblin", "mode": "ranged"}
    # A subscriber arriving later gets it right after its full set.
    late = _peer(server, OVERLAY)
    assert late.request({"type": "subscribe", "scene": "s", "id": 2})["full"] is True
    assert late.recv()["attacker"] == "archer"
    # Cleared: both sides null.
    _focus(gm)
    assert _next(overlay, "focus")["attacker"] is None


def test_a_viewer_never_sees_a_hidden_token_in_the_focus(server: LiveServer) -> None:
    gm = _peer(server, GM)
    gm.request({"type": "scene.load", "scene": SCENE})
    watcher = _subscribed(server, GM)
    overlay = _subscribed(server, OVERLAY)
    _focus(gm, attacker="archer", target="spy", mode="ranged")
    assert _next(watcher, "focus")["target"] == "spy"  # the gm's view is whole
    seen = _next(overlay, "focus")
    assert seen["attacker"] == "archer" and seen["target"] is None
    assert "spy" not in repr(seen)
    # The spy steps out: the overlay is told, with the deltas that show the spy.
    gm.request({"type": "token.update", "scene": "s", "tokens": [{"id": "spy",
                                                                  "hidden": False}]})
    assert _next(overlay, "focus")["target"] == "spy"
    # And hides again: gone from the overlay's focus; the gm's view did not change.
    gm.request({"type": "token.update", "scene": "s", "tokens": [{"id": "spy",
                                                                  "hidden": True}]})
    assert _next(overlay, "focus")["target"] is None
    # A hidden token cannot be probed through focus either: the overlay may not set it.
    overlay.send({"type": "scene.focus", "scene": "s", "attacker": "spy", "id": 9})
    refused = overlay.recv()
    while refused.get("id") != 9:
        refused = overlay.recv()
    assert refused["code"] == "forbidden" and refused["path"] == "$.type"


def test_a_deleted_token_leaves_the_focus(server: LiveServer) -> None:
    gm = _peer(server, GM)
    gm.request({"type": "scene.load", "scene": SCENE})
    overlay = _subscribed(server, OVERLAY)
    _focus(gm, attacker="archer", target="goblin")
    assert _next(overlay, "focus")["target"] == "goblin"
    gm.request({"type": "token.delete", "scene": "s", "ids": ["goblin"]})
    gone = _next(overlay, "focus")
    assert gone["attacker"] == "archer" and gone["target"] is None


def test_focus_names_tokens_of_the_scene(server: LiveServer) -> None:
    gm = _peer(server, GM)
    gm.request({"type": "scene.load", "scene": SCENE})
    wrong = _focus(gm, attacker="archer", target="nobody")
    assert wrong["code"] == "unknown_token" and wrong["path"] == "$.target"
    bad = _focus(gm, attacker="archer", mode="thrown")
    assert bad["code"] == "invalid" and bad["path"] == "$.mode"
    gone = gm.request({"type": "scene.focus", "scene": "elsewhere", "id": 3})
    assert gone["code"] == "unknown_scene"
