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


FOUNDRY_SCENE: dict[str, Any] = {
    # Shaped like Foundry's scene.toObject(): fields Covercast ignores, and regions of its own
    "_id": "keep", "name": "Keep", "active": True, "navigation": True, "background": {"src": ""},
    "grid": {"type": 1, "size": 100, "distance": 5, "units": "ft", "style": "solidLines",
             "thickness": 1, "color": "#000000", "alpha": 0.2},
    "width": 2000, "height": 1000, "padding": 0.25, "lights": [], "notes": [], "sounds": [],
    "tiles": [], "drawings": [], "templates": [], "flags": {}, "_stats": {},
    "walls": [], "tokens": [{"_id": "a", "x": 0, "y": 0}, {"_id": "b", "x": 500, "y": 0}],
    "regions": [
        {"_id": "trap", "name": "Pit trap", "shapes": [
            {"type": "rectangle", "x": 200, "y": 0, "width": 100, "height": 100,
             "rotation": 0, "hole": False}], "behaviors": [], "flags": {}},
        {"_id": "rubble", "name": "Rubble", "flags": {"covercast": {"kind": "cover"}},
         "shapes": [{"type": "rectangle", "x": 250, "y": -50, "width": 100, "height": 200,
                     "rotation": 0, "hole": False}], "elevation": {"bottom": None}},
    ],
}


def test_a_foundry_scene_object_is_accepted_and_its_marked_regions_read(
        live_server: LiveServer) -> None:
    peer = Peer.open(live_server.url)
    peer.hello()
    assert peer.request({"type": "scene.load", "scene": FOUNDRY_SCENE})["type"] == "ack"
    reply = peer.request({"type": "cover.query", "scene": "keep", "attacker": "a",
                          "target": "b", "attack": "ranged", "lines": True})
    ann = reply["annotation"]
    assert ann["cover"] == "cover"  # the rubble region; the pit trap region means nothing
    assert {r for line in ann["lines"] for r in line.get("regions", [])} == {"rubble"}


@pytest.mark.parametrize(("shape", "path"), [
    ({"type": "polygon", "points": [0, 0, 100, 0]}, "$.scene.regions[1].shapes[0].points"),
    ({"type": "rectangle", "x": 0, "y": 0, "width": 100, "height": 100, "hole": True},
     "$.scene.regions[1].shapes[0].hole"),
    ({"type": "cone", "x": 0, "y": 0}, "$.scene.regions[1].shapes[0].type"),
])
def test_bad_covercast_region_shapes_are_refused(live_server: LiveServer,
                                                 shape: dict[str, Any], path: str) -> None:
    peer = Peer.open(live_server.url)
    peer.hello()
    scene = {**FOUNDRY_SCENE, "regions": [FOUNDRY_SCENE["regions"][0],
                                          {**FOUNDRY_SCENE["regions"][1], "shapes": [shape]}]}
    reply = peer.request({"type": "scene.load", "scene": scene})
    assert reply["type"] == "error" and reply["path"] == path, reply
    assert "keep" not in live_server.core.scenes


def test_unload_frees_the_scene_and_tells_subscribers(live_server: LiveServer) -> None:
    gm = _peer(live_server)
    viewer = Peer.open(live_server.url)
    viewer.hello()
    assert viewer.request({"type": "subscribe", "scene": "s"})["full"] is True
    assert gm.request({"type": "scene.unload", "scene": "s", "id": "u"}) == {
        "type": "ack", "scene": "s", "revision": 1, "id": "u"}
    last = viewer.recv()
    assert last["type"] == "annotations" and last["full"] is True
    assert last["annotations"] == [] and last["revision"] == 2
    assert "s" not in live_server.core.scenes
    reply = gm.request({"type": "cover.query", "scene": "s", "attacker": "a", "target": "b"})
    assert reply["code"] == "unknown_scene"
    # Loading it again starts over.
    assert gm.request({"type": "scene.load", "scene": SCENE})["revision"] == 1


def test_a_foundry_v14_token_with_level_and_depth_is_accepted(live_server: LiveServer) -> None:
    """v14 adds `level` and `depth` to TokenDocument: a v14 client's creates and diffs are
    accepted, and the height stays the size table's (depth is not read)."""
    peer = _peer(live_server)
    v14 = {"_id": "c", "x": 600, "y": 0, "level": "defaultLevel0000", "depth": 1,
           "_movementHistory": [], "movementAction": "walk"}
    assert peer.request({"type": "token.create", "scene": "s", "tokens": [v14]})["type"] \
        == "ack"
    assert peer.request({"type": "token.update", "scene": "s",
                         "tokens": [{"_id": "c", "depth": 2, "level": "upper"}]})["type"] \
        == "ack"
    geom = live_server.core.scenes["s"].geometry.creature("c")
    assert geom.tall == 6.0  # a Medium creature's height, whatever its v14 depth
