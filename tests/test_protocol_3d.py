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
    assert {o["name"] for o in pf2["options"]} == {"lowWalls", "bigCreatureStandard", "reachWeapon"}
    assert pf2["degrees"] == ["none", "lesser", "standard", "greater", "total"]


def test_flying_over_the_wall_is_pushed_as_a_delta(peer_factory: PeerFactory) -> None:
    gm, viewer = peer_factory(), peer_factory()
    _load(gm)
    before = table(ok(viewer, {"type": "subscribe", "scene": "sky"}, "annotations")[
        "annotations"])
    # A 5-ft wall between two 6-ft creatures on foot: the sight passes over its top foot,
    # so standard cover, not "no line of effect" (docs/rulesets.md, Third dimension 13).
    assert before[("archer", "harpy", "ranged")]["cover"] == "standard"
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


def test_area_query_from_above_the_wall(peer_factory: PeerFactory) -> None:
    """A burst behind the 5-ft wall: from the ground it does not reach the harpy beyond it;
    from 10 ft up (the template's elevation) its line passes over the wall."""
    peer = peer_factory()
    _load(peer)

    def affected(elevation: float) -> dict[str, Any]:
        reply = ok(peer, {"type": "area.query", "scene": "sky", "id": "ar",
                          "template": {"t": "circle", "x": 300, "y": 50, "distance": 15,
                                       "elevation": elevation}}, "area.result")
        return {h["token"]: h for h in reply["affected"]}

    assert "harpy" not in affected(0)
    high = affected(10)
    assert high["harpy"]["cover"] == "none"
    # 30 ft up the 15-ft sphere no longer reaches the harpy's cube (top at 5 ft).
    assert "harpy" not in affected(30)


def test_area_elevation_is_in_scene_units(peer_factory: PeerFactory) -> None:
    """On a metric grid (1.5 m a square) a template at 3 m is 10 ft up, like a token at 3 m:
    the burst and the flyer level with it catch each other, the one 6 m up is out."""
    peer = peer_factory()
    scene = {"_id": "metric", "grid": {"type": 1, "size": 100, "distance": 1.5, "units": "m"},
             "tokens": [{"_id": "level", "x": 200, "y": 0, "elevation": 3},
                        {"_id": "up", "x": 0, "y": 300, "elevation": 9}]}
    ok(peer, {"type": "scene.load", "scene": scene, "ruleset": "dnd35"})
    reply = ok(peer, {"type": "area.query", "scene": "metric",
                      "template": {"t": "circle", "x": 50, "y": 50, "distance": 4.5,
                                   "elevation": 3}}, "area.result")
    # level: 2 squares across (10 ft, 3 m), its cube at the burst's height: in.
    # up: 3 squares across and 6 m (20 ft) above: 25 ft away, out of a 15-ft sphere.
    assert {h["token"] for h in reply["affected"]} == {"level"}
