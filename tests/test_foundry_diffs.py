"""Foundry-shaped changes through the real server: deletion keys, overrides, hello errors."""

from __future__ import annotations

from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from tests.conftest import LiveServer, Peer

SCENE: dict[str, Any] = {
    "id": "s", "grid": {"type": 1, "size": 100, "distance": 5},
    "tokens": [{"_id": "a", "x": 0, "y": 0, "disposition": 1},
               {"_id": "b", "x": 300, "y": 0,
                "flags": {"covercast": {"cover": "cover"}, "other-module": {"x": 1}}}],
}


def _peer(server: LiveServer) -> Peer:
    peer = Peer.open(server.url)
    assert peer.hello()["type"] == "welcome"
    assert peer.request({"type": "scene.load", "scene": SCENE})["type"] == "ack"
    return peer


def _cover(peer: Peer) -> str:
    reply = peer.request({"type": "cover.query", "scene": "s", "attacker": "a",
                          "target": "b", "attack": "ranged"})
    cover: str = reply["annotation"]["cover"]
    return cover


def test_unset_flag_diff_removes_the_override(live_server: LiveServer) -> None:
    peer = _peer(live_server)
    assert _cover(peer) == "cover"  # the GM's override, in the open
    # Foundry's token.unsetFlag("covercast", "cover") sends this diff:
    ack = peer.request({"type": "token.update", "scene": "s",
                        "tokens": [{"_id": "b", "flags": {"covercast": {"-=cover": None}}}]})
    assert ack["type"] == "ack"
    assert _cover(peer) == "none"
    ack = peer.request({"type": "token.update", "scene": "s",
                        "tokens": [{"_id": "b", "flags": {"covercast": {"cover": "improved"}}}]})
    assert _cover(peer) == "improved"
    # ...and removing the whole namespace works too.
    peer.request({"type": "token.update", "scene": "s",
                  "tokens": [{"_id": "b", "flags": {"-=covercast": None}}]})
    assert _cover(peer) == "none"


def test_override_error_names_the_batch_item(live_server: LiveServer) -> None:
    peer = _peer(live_server)
    before = live_server.core.scenes["s"].snapshot()
    reply = peer.request({"type": "token.update", "scene": "s", "id": 4, "tokens": [
        {"_id": "a", "x": 100},
        {"_id": "b", "flags": {"covercast": {"cover": "greater"}}}]})
    assert reply["type"] == "error" and reply["id"] == 4
    assert reply["path"] == "$.tokens[1].flags.covercast.cover"
    assert "'greater'" in reply["message"] and "dnd35" in reply["message"]
    assert "none" not in reply["message"].split("valid:")[1].split("(")[0]
    assert live_server.core.scenes["s"].snapshot() == before
    reply = peer.request({"type": "token.create", "scene": "s", "tokens": [
        {"_id": "c", "x": 500, "y": 0, "flags": {"covercast": {"cover": "lesser"}}}]})
    assert reply["path"] == "$.tokens[0].flags.covercast.cover"


def test_replies_omit_a_missing_id(live_server: LiveServer) -> None:
    peer = _peer(live_server)
    reply = peer.request({"type": "token.update", "scene": "s",
                          "tokens": [{"_id": "a", "x": 100}]})
    assert reply["type"] == "ack" and "id" not in reply


def test_a_broken_hello_is_closed_with_the_reason(live_server: LiveServer) -> None:
    peer = Peer.open(live_server.url)
    peer.send({"type": "hello", "protocol": "one", "client": "x"})
    with pytest.raises(ConnectionClosed) as info:
        peer.recv()
    assert info.value.rcvd is not None and info.value.rcvd.code == 1008
    assert "$.protocol" in info.value.rcvd.reason
