"""Filtered subscriptions against a real server on 127.0.0.1: `subscribe` with `attackers`,
`targets` and `sides` gets the full set and every delta limited to the pairs they select;
bad filters are refused naming the field and the value, nothing changed; a scene too big
for an unfiltered table stays live for a filtered one."""

from __future__ import annotations

from typing import Any

import pytest

from server.messages import LIMITS
from tests.conftest import LiveServer, Peer
from tests.test_protocol import (
    MODES,
    TOKENS,
    PeerFactory,
    all_keys,
    assert_quiet,
    load,
    ok,
    subscribe,
    table,
)

Key = tuple[str, str, str]


def keys(annotations: list[dict[str, Any]]) -> set[Key]:
    return set(table(annotations))


def pairs(attackers: tuple[str, ...], targets: tuple[str, ...] = TOKENS,
          modes: tuple[str, ...] = MODES) -> set[Key]:
    return {(a, t, m) for a in attackers for t in targets if a != t for m in modes}


def apply(held: dict[Key, dict[str, Any]], push: dict[str, Any]) -> None:
    assert push["type"] == "annotations" and not push["full"], push
    for k in push["removed"]:
        held.pop((k[0], k[1], k[2]), None)
    held.update(table(push["annotations"]))


def move(gm: Peer, tid: str, x: int, y: int, scene: str = "arena") -> None:
    ok(gm, {"type": "token.update", "scene": scene, "tokens": [{"id": tid, "x": x, "y": y}]})


def viewer(peer_factory: PeerFactory) -> Peer:
    p = peer_factory(greet=False)
    assert p.hello(role="player")["role"] == "player"
    return p


def test_attackers_filter_limits_the_full_set_and_every_delta(
        peer_factory: PeerFactory) -> None:
    gm = peer_factory()
    load(gm)
    everything, mine = peer_factory(), peer_factory()
    whole = table(subscribe(everything)["annotations"])
    full = subscribe(mine, attackers=["a"])
    assert keys(full["annotations"]) == pairs(("a",))
    assert table(full["annotations"]) == {k: v for k, v in whole.items() if k[0] == "a"}
    # "c" steps out from behind the wall: a's attacks on it change, and so do others'.
    move(gm, "c", 300, 300)
    apply(whole, everything.recv())
    push = mine.recv()
    assert push["annotations"] and {a["attacker"] for a in push["annotations"]} == {"a"}
    held = table(full["annotations"])
    apply(held, push)
    assert held == {k: v for k, v in whole.items() if k[0] == "a"}
    # A change touching none of a's pairs pushes only the new revision.
    ok(gm, {"type": "wall.create", "scene": "arena", "walls": [{"id": "far",
                                                                "c": [900, 800, 900, 900]}]})
    push = mine.recv()
    assert push["annotations"] == [] and push["removed"] == [], push
    assert_quiet(mine)


def test_one_pair_and_targets_filters(peer_factory: PeerFactory) -> None:
    gm = peer_factory()
    load(gm)
    pair, targeted = peer_factory(), peer_factory()
    one = subscribe(pair, attackers=["c"], targets=["a"], modes=["ranged"])
    assert keys(one["annotations"]) == {("c", "a", "ranged")}
    hit = subscribe(targeted, targets=["b", "d"])
    assert keys(hit["annotations"]) == pairs(TOKENS, ("b", "d"))
    move(gm, "c", 300, 0)
    push = pair.recv()
    assert keys(push["annotations"]) == {("c", "a", "ranged")}
    push = targeted.recv()
    assert {a["target"] for a in push["annotations"]} <= {"b", "d"}


def test_sides_filter_follows_tokens_joining_and_leaving_the_side(
        peer_factory: PeerFactory) -> None:
    gm = peer_factory()
    load(gm)  # "a" is friendly (1), the others hostile (the default, -1)
    bot = peer_factory()
    full = subscribe(bot, sides=["friendly"])
    assert keys(full["annotations"]) == pairs(("a",))
    held = table(full["annotations"])
    # A new friendly token joins the side: its attacks come in a delta; a new hostile one
    # only as a target.
    ok(gm, {"type": "token.create", "scene": "arena",
            "tokens": [{"id": "e", "x": 500, "y": 500, "disposition": 1},
                       {"id": "f", "x": 700, "y": 700}]})
    apply(held, bot.recv())
    five = (*TOKENS, "e", "f")
    assert set(held) == pairs(("a", "e"), five)
    # "b" turns friendly: it joins; "a" turns neutral: it leaves.
    ok(gm, {"type": "token.update", "scene": "arena",
            "tokens": [{"id": "b", "disposition": 1}, {"id": "a", "disposition": 0}]})
    apply(held, bot.recv())
    assert set(held) == pairs(("b", "e"), five)
    # What it holds is what a fresh subscription gets.
    fresh = subscribe(peer_factory(), sides=["friendly"])
    assert held == table(fresh["annotations"])


def test_deleted_and_recreated_filtered_token(peer_factory: PeerFactory) -> None:
    gm = peer_factory()
    load(gm)
    sub = peer_factory()
    held = table(subscribe(sub, attackers=["c"], targets=["a", "c", "d"])["annotations"])
    assert set(held) == pairs(("c",), ("a", "d"))
    ok(gm, {"type": "token.delete", "scene": "arena", "ids": ["c"]})
    push = sub.recv()
    assert {tuple(k) for k in push["removed"]} == pairs(("c",), ("a", "d"))
    apply(held, push)
    assert held == {}
    # The subscription keeps the id: a token made again with it is followed again.
    ok(gm, {"type": "token.create", "scene": "arena", "tokens": [{"id": "c", "x": 600, "y": 0}]})
    apply(held, sub.recv())
    assert set(held) == pairs(("c",), ("a", "d"))


def test_a_viewer_never_learns_of_a_hidden_filtered_token(peer_factory: PeerFactory) -> None:
    gm = peer_factory()
    load(gm)
    ok(gm, {"type": "token.update", "scene": "arena", "tokens": [{"id": "d", "hidden": True}]})
    player = viewer(peer_factory)
    # Naming a hidden token gets the very error an unknown id does.
    errors = []
    for tid in ("d", "nobody"):
        reply = player.request({"type": "subscribe", "scene": "arena", "attackers": ["a", tid],
                                "id": 1})
        assert reply["type"] == "error", reply
        errors.append({**reply, "message": reply["message"].replace(repr(tid), "ID")})
    assert errors[0] == errors[1]
    assert errors[0]["code"] == "unknown_token" and errors[0]["path"] == "$.attackers[1]"
    # The gm may name it.
    assert keys(subscribe(peer_factory(), attackers=["d"])["annotations"]) == pairs(("d",))
    # A viewer following "c": hiding it takes its pairs away as deleting it would.
    held = table(subscribe(player, attackers=["c"])["annotations"])
    assert set(held) == pairs(("c",), ("a", "b"))
    ok(gm, {"type": "token.update", "scene": "arena", "tokens": [{"id": "c", "hidden": True}]})
    push = player.recv()
    apply(held, push)
    assert held == {}
    assert all("d" not in k[:2] for k in push["removed"]), push
    ok(gm, {"type": "token.update", "scene": "arena", "tokens": [{"id": "c", "hidden": False}]})
    apply(held, player.recv())
    assert set(held) == pairs(("c",), ("a", "b"))


@pytest.mark.parametrize(("extra", "code", "path", "said"), [
    ({"attackers": []}, "invalid", "$.attackers", "empty list"),
    ({"targets": []}, "invalid", "$.targets", "empty list"),
    ({"sides": []}, "invalid", "$.sides", "empty list"),
    ({"attackers": [f"t{k}" for k in range(LIMITS.max_tokens + 1)]}, "invalid",
     "$.attackers", f"{LIMITS.max_tokens + 1} token ids"),
    ({"attackers": ["a", "ghost"]}, "unknown_token", "$.attackers[1]", "'ghost'"),
    ({"targets": ["ghost"]}, "unknown_token", "$.targets[0]", "'ghost'"),
    ({"attackers": "a"}, "invalid", "$.attackers", "'a'"),
    ({"attackers": [7]}, "invalid", "$.attackers[0]", "7"),
    ({"sides": ["ally"]}, "invalid", "$.sides[0]", "'ally'"),
    ({"sides": [1]}, "invalid", "$.sides[0]", "1"),
])
def test_bad_filters_are_refused_and_change_nothing(
        peer_factory: PeerFactory, extra: dict[str, Any], code: str, path: str,
        said: str) -> None:
    gm = peer_factory()
    load(gm)
    sub = peer_factory()
    before = subscribe(sub, attackers=["a"], modes=["ranged"])
    reply = sub.request({"type": "subscribe", "scene": "arena", **extra, "id": 5})
    assert reply["type"] == "error" and reply["code"] == code, reply
    assert reply["path"] == path and reply["id"] == 5, reply
    assert reply["message"].startswith(path) and said in reply["message"], reply
    # The connection is up and its subscription is the one it had.
    move(gm, "c", 300, 300)
    push = sub.recv()
    assert keys(push["annotations"]) <= keys(before["annotations"])
    unsub = peer_factory()
    bad = unsub.request({"type": "subscribe", "scene": "arena", **extra, "id": 6})
    assert bad["type"] == "error"
    gone = unsub.request({"type": "unsubscribe", "scene": "arena", "id": 7})
    assert gone["code"] == "unknown_scene", "a refused subscribe subscribed nothing"


def test_resubscribing_with_another_filter_switches_to_it(peer_factory: PeerFactory) -> None:
    gm = peer_factory()
    load(gm)
    sub = peer_factory()
    subscribe(sub, attackers=["a"])
    again = subscribe(sub, targets=["a"], modes=["melee"])
    assert keys(again["annotations"]) == pairs(("b", "c", "d"), ("a",), ("melee",))
    move(gm, "b", 0, 100)
    push = sub.recv()
    assert push["annotations"] and {(a["target"], a["mode"]) for a in push["annotations"]} \
        == {("a", "melee")}
    # And back to everything.
    assert keys(subscribe(sub)["annotations"]) == all_keys(TOKENS)


def crowd(n: int, scene_id: str = "crowd") -> dict[str, Any]:
    tokens = [{"_id": f"t{k}", "x": 100 * (k % 40), "y": 100 * (k // 40)} for k in range(n)]
    return {"_id": scene_id, "grid": {"type": 1, "size": 100, "distance": 5},
            "walls": [{"_id": "w", "c": [450, 0, 450, 900]}], "tokens": tokens}


def test_a_scene_past_the_table_limit_is_refused_unfiltered_and_live_filtered(
        live_server: LiveServer) -> None:
    """400 tokens (159,600 pairs, past maxTablePairs): an unfiltered subscription is
    refused with too_large naming the size and the filter to use; one attacker's works,
    and its deltas follow moves; the scene may grow while the filtered table stays in
    bounds."""
    gm = Peer.open(live_server.url)
    gm.hello()
    assert gm.request({"type": "scene.load", "id": 1, "scene": crowd(400)})["type"] == "ack"
    refused = gm.request({"type": "subscribe", "scene": "crowd", "id": 2})
    assert refused["type"] == "error" and refused["code"] == "too_large", refused
    for words in ("400 tokens", "159600 pairs", "100000", "attackers", "399 pairs"):
        assert words in refused["message"], refused["message"]
    too_many = gm.request({"type": "subscribe", "scene": "crowd", "sides": ["hostile"],
                           "id": 3})
    assert too_many["code"] == "too_large" and "sides ['hostile']" in too_many["message"]
    full = gm.request({"type": "subscribe", "scene": "crowd", "attackers": ["t0"], "id": 4})
    assert full["type"] == "annotations" and full["full"], full.get("message")
    assert keys(full["annotations"]) == {("t0", f"t{k}", m) for k in range(1, 400)
                                         for m in MODES}
    held = table(full["annotations"])
    # t1 steps behind the wall from t0; t399 moves far from it.
    assert gm.request({"type": "token.update", "scene": "crowd", "id": 5,
                       "tokens": [{"id": "t1", "x": 500, "y": 0}]})["type"] == "ack"
    push = gm.recv()
    apply(held, push)
    assert {a["attacker"] for a in push["annotations"]} == {"t0"}
    # Behind the wall now: not what it was beside t0.
    assert held[("t0", "t1", "ranged")] != table(full["annotations"])[("t0", "t1", "ranged")]
    fresh = Peer.open(live_server.url)
    fresh.hello()
    again = fresh.request({"type": "subscribe", "scene": "crowd", "attackers": ["t0"], "id": 6})
    assert held == table(again["annotations"])
    # Growing the scene: the filtered table stays within bounds, so it is allowed.
    grow = gm.request({"type": "token.create", "scene": "crowd", "id": 7,
                       "tokens": [{"id": "u1", "x": 3900, "y": 3900}]})
    assert grow["type"] == "ack", grow
    gm.close()
    fresh.close()
