"""Hex scenes against a real server on 127.0.0.1: every layout loads for the rulesets that
support it, subscriptions follow moves, queries from a chosen point and area queries work,
token shapes and tiny tokens are accepted, and corner rulesets refuse hex grids."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import Peer
from tests.test_protocol import ok

PeerFactory = Callable[..., Peer]


def hex_scene(sid: str, grid: int) -> dict[str, Any]:
    return {"id": sid, "grid": {"type": grid, "size": 100, "distance": 5},
            "walls": [{"id": "w", "c": [500, -50, 500, 150]}],
            "regions": [{"id": "fog", "kind": "obscuring", "penalty": 2,
                         "points": [200, 0, 300, 0, 300, 100, 200, 100]}],
            "tokens": [{"id": "a", "x": 50, "y": 0, "disposition": 1},
                       {"id": "b", "x": 550, "y": 0, "disposition": -1},
                       {"id": "big", "x": 200, "y": 260, "width": 2, "height": 2, "shape": 0,
                        "disposition": 1}]}


@pytest.mark.parametrize("grid", [2, 3, 4, 5])
@pytest.mark.parametrize("ruleset", ["degrees", "realms"])
def test_hex_scene_subscribe_move_query(peer_factory: PeerFactory, grid: int,
                                        ruleset: str) -> None:
    p = peer_factory()
    sid = f"hex{grid}"
    ok(p, {"type": "scene.load", "scene": hex_scene(sid, grid), "ruleset": ruleset})
    full = ok(p, {"type": "subscribe", "scene": sid}, "annotations")
    assert full["full"] and len(full["annotations"]) == 3 * 2 * 3
    before = {(x["attacker"], x["target"], x["mode"]): x for x in full["annotations"]}
    # The wall hides b from a; b steps out from behind it: a delta follows the ack.
    ack = ok(p, {"type": "token.update", "scene": sid, "tokens": [{"id": "b", "y": 400}]})
    delta = p.recv()
    assert delta["type"] == "annotations" and delta["revision"] == ack["revision"]
    changed = {(x["attacker"], x["target"], x["mode"]): x for x in delta["annotations"]}
    assert before[("a", "b", "ranged")]["cover"] != changed[("a", "b", "ranged")]["cover"]
    result = ok(p, {"type": "cover.query", "scene": sid, "attacker": "a", "target": "b",
                    "origin": {"x": 300, "y": 300}, "lines": True}, "cover.result")
    assert result["annotation"]["lines"][0]["start"] == pytest.approx([300.0, 300.0], abs=1e-3)
    area = ok(p, {"type": "area.query", "scene": sid,
                  "template": {"t": "circle", "x": 300, "y": 300, "distance": 15}},
              "area.result")
    assert "big" in {h["token"] for h in area["affected"]}
    ok(p, {"type": "token.create", "scene": sid,
           "tokens": [{"id": "mouse", "x": 120, "y": 200, "width": 0.2, "height": 0.2}]})
    p.recv()  # its delta
    snapshot = ok(p, {"type": "scene.get", "scene": sid}, "scene")
    shapes = {t["id"]: t.get("shape") for t in snapshot["scene"]["tokens"]}
    assert shapes["big"] == 0


@pytest.mark.parametrize("grid", [2, 3, 4, 5])
@pytest.mark.parametrize("ruleset", ["dnd35", "pf1", "dnd5e"])
def test_corner_rulesets_refuse_every_hex_layout(peer_factory: PeerFactory, grid: int,
                                                 ruleset: str) -> None:
    p = peer_factory()
    reply = p.request({"type": "scene.load", "scene": hex_scene("x", grid),
                       "ruleset": ruleset, "id": 1})
    assert reply["type"] == "error" and reply["code"] == "unsupported"
    assert reply["path"] == "$.scene.grid.type"
    assert f"'{ruleset}'" in reply["message"] and f"grid type {grid}" in reply["message"]
    assert "corners of squares" in reply["message"]


def test_welcome_lists_each_rulesets_grids(peer_factory: PeerFactory) -> None:
    p = peer_factory(greet=False)
    welcome = p.hello()
    grids = {r["name"]: r["grids"] for r in welcome["rulesets"]}
    assert grids == {"dnd35": [1], "pf1": [1], "degrees": [1, 2, 3, 4, 5],
                     "realms": [1, 2, 3, 4, 5], "pf2": [1, 2, 3, 4, 5], "dnd5e": [1]}


def test_realms_cached_measures_do_not_cross_grids() -> None:
    """Two wall-less scenes share the empty wall tuple: the same tokens and region on a
    square and on a hex grid must still be measured on their own grid, in any order."""
    from tests.golden_runner import evaluate_case

    region = [{"id": "r", "kind": "blocking", "points": [300, -100, 320, -100, 320, 80, 300, 80]}]

    def visible(grid: int) -> float:
        case = {"ruleset": "realms", "scene": {
            "id": "s", "grid": {"type": grid, "size": 100}, "regions": region,
            "tokens": [{"id": "a", "x": 0, "y": 0}, {"id": "t", "x": 400, "y": 50}]},
            "queries": [{"attacker": "a", "target": "t"}]}
        ((_, annotation),) = evaluate_case(case)
        return float(annotation["visible"])

    first = [visible(1), visible(2)]
    assert first[0] != first[1]
    assert [visible(2), visible(1)] == first[::-1]
