"""Mounts and viewers: a visible rider on a hidden mount never gives the mount away."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tests.conftest import Peer
from tests.test_roles import GM, PLAYER, connect, server

__all__ = ["connect", "server"]  # fixtures used below

SCENE: dict[str, Any] = {
    "_id": "sky",
    "grid": {"type": 1, "size": 100, "distance": 5, "units": "ft"},
    "tokens": [
        {"_id": "griffon", "x": 0, "y": 0, "width": 2, "height": 2, "size": "large",
         "disposition": -1, "hidden": True},
        {"_id": "rider", "x": 0, "y": 0, "disposition": -1,
         "flags": {"covercast": {"mount": "griffon"}}},
        {"_id": "archer", "x": 200, "y": 100, "disposition": 1},
    ],
}


def test_visible_rider_on_a_hidden_mount(connect: Callable[..., Peer]) -> None:
    gm = connect(GM)
    assert gm.request({"type": "scene.load", "scene": copy.deepcopy(SCENE),
                       "ruleset": "pf2"})["type"] == "ack"
    viewer = connect(PLAYER)
    seen = viewer.request({"type": "scene.get", "scene": "sky"})["scene"]
    rider = next(t for t in seen["tokens"] if t["id"] == "rider")
    assert "griffon" not in repr(seen)
    assert rider["flags"]["covercast"].get("mount") is None
    full = gm.request({"type": "scene.get", "scene": "sky"})["scene"]
    assert next(t for t in full["tokens"] if t["id"] == "rider")["flags"]["covercast"][
        "mount"] == "griffon"
    # The gm sees the rider on the griffon's squares, next to the archer; the viewer sees
    # the rider's own square, 10 ft away, and no mounted flags.
    ask = {"type": "cover.query", "scene": "sky", "attacker": "archer", "target": "rider",
           "attack": "melee"}
    by_gm = gm.request(ask)
    by_viewer = viewer.request(ask)
    assert by_gm["annotation"]["flags"]["in_reach"] is True
    assert by_viewer["annotation"]["flags"]["in_reach"] is False
    assert by_viewer["distance"] == 10.0
    assert all(m["stat"] != "reflex" for m in by_viewer["annotation"]["modifiers"])
