"""The third dimension and mounts over the wire, against the real server on 127.0.0.1:
welcome lists pf2; elevations change reach and cover in pushed deltas; cover.query reports
the 3D distance; a rider follows its mount."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import Peer
from tests.test_protocol import ok, table

PeerFactory = Callable[..., Peer]

SKY: dict[str, Any] = {
    "_id": "sky",
    "grid": {"type": 1, "size": 100, "distance": 5, "units": "ft"},
    "walls": [{"_id": "low", "c": [350, -200, 350, 400],
               "flags": {"wall-height": {"top": 5}}}],
    "tokens": [
        {"_id": "archer", "x": 0, "y": 0, "disposition": 1},
        {"_id": "harpy", "x": 400, "y": 0, "elevation": 0},
        {"_id": "horse", "x": 0, "y": 500, "width": 2, "height": 2, "size": "large",
         "disposition": 1},
        {"_id": "knight", "x": 0, "y": 500, "disposition": 1,
         "flags": {"covercast": {"mount": "horse"}}},
        {"_id": "orc", "x": 200, "y": 700},
    ],
}


def _load(peer: Peer) -> None:
    ok(peer, {"type": "scene.load", "scene": SKY, "ruleset": "pf2"})


def test_welcome_lists_pf2_with_its_options(peer_factory: PeerFactory) -> None:
    welcome = peer_factory(greet=False).hello()
    pf2 = next(r for r in welcome["rulesets"] if r["name"] == "pf2")
    assert {o["name"] for o in pf2["options"]} == {"lowWalls", "bigCreatureStandard"}
    assert pf2["degrees"] == ["none", "lesser", "standard", "greater", "total"]


def test_flying_over_the_wall_is_pushed_as_a_delta(peer_factory: PeerFactory) -> None:
    gm, viewer = peer_factory(), peer_factory()
    _load(gm)
    before = table(ok(viewer, {"type": "subscribe", "scene": "sky"}, "annotations")[
        "annotations"])
    assert before[("archer", "harpy", "ranged")]["cover"] == "total"  # 5-ft wall, on foot
    ok(gm, {"type": "token.update", "scene": "sky",
            "tokens": [{"_id": "harpy", "elevation": 10}]})
    push = viewer.recv()
    assert push["type"] == "annotations" and push["full"] is False
    after = table(push["annotations"])
    assert after[("archer", "harpy", "ranged")]["cover"] == "none"
    assert after[("archer", "harpy", "ranged")]["loe"] is True


def test_cover_query_reports_3d_distance(peer_factory: PeerFactory) -> None:
    peer = peer_factory()
    _load(peer)
    ok(peer, {"type": "token.update", "scene": "sky",
              "tokens": [{"_id": "harpy", "x": 100, "elevation": 15}]})
    reply = ok(peer, {"type": "cover.query", "scene": "sky", "attacker": "archer",
                      "target": "harpy", "attack": "melee"}, "cover.result")
    assert reply["distance"] == 15.0
    assert reply["annotation"]["flags"]["in_reach"] is False


def test_rider_fights_from_its_mount(peer_factory: PeerFactory) -> None:
    peer = peer_factory()
    _load(peer)
    # The orc stands next to the horse's far (south-east) square, not the knight's token.
    reply = ok(peer, {"type": "cover.query", "scene": "sky", "attacker": "knight",
                      "target": "orc", "attack": "melee"}, "cover.result")
    ann = reply["annotation"]
    assert ann["flags"]["in_reach"] and ann["flags"]["shares_map"]
    assert ann["flags"]["dismount_only_move"]
    assert reply["distance"] == 5.0
    back = ok(peer, {"type": "cover.query", "scene": "sky", "attacker": "orc",
                     "target": "knight", "attack": "melee"}, "cover.result")["annotation"]
    assert back["cover"] == "lesser"
    assert {"stat": "reflex", "value": -2, "kind": "circumstance"} in [
        {k: m[k] for k in ("stat", "value", "kind")} for m in back["modifiers"]]
    # Dismounting (clearing the flag) puts the knight back on its own square.
    ok(peer, {"type": "token.update", "scene": "sky",
              "tokens": [{"_id": "knight", "flags": {"covercast": {"-=mount": None}}}]})
    alone = ok(peer, {"type": "cover.query", "scene": "sky", "attacker": "knight",
                      "target": "orc", "attack": "melee"}, "cover.result")
    assert alone["annotation"]["flags"]["in_reach"] is False
    assert alone["distance"] == 15.0  # two diagonals: 5 + 10
