"""The wire protocol against a real server on 127.0.0.1: handshake, encodings, scene changes,
cover queries and subscriptions (pushes of changed annotations only)."""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest
from websockets.exceptions import ConnectionClosed

from tests.conftest import LiveServer, Peer

PeerFactory = Callable[..., Peer]
Key = tuple[str, str, str]

MODES = ("melee", "reach", "ranged")
POLICY_VIOLATION = 1008

# A small arena (100 px squares of 5 ft). "a" is adjacent to "b", two squares from "d"
# (reach), and behind wall "w" from "c" (which "b" also stands in front of).
ARENA: dict[str, Any] = {
    "_id": "arena",
    "name": "arena",
    "grid": {"type": 1, "size": 100, "distance": 5, "units": "ft"},
    "width": 1000,
    "height": 1000,
    "walls": [
        {"_id": "w", "c": [400, -300, 400, 300]},
        {"_id": "low", "c": [0, 450, 300, 450],
         "flags": {"covercast": {"cover": "low"}, "wall-height": {"bottom": 0, "top": 2}}},
    ],
    "tokens": [
        {"_id": "a", "name": "Fighter", "x": 0, "y": 0, "disposition": 1, "size": "medium"},
        {"_id": "b", "name": "Goblin", "x": 100, "y": 0, "size": "small"},
        {"_id": "c", "name": "Archer", "x": 600, "y": 0},
        {"_id": "d", "name": "Orc", "x": 0, "y": 200},
    ],
}
TOKENS = ("a", "b", "c", "d")
_ids = itertools.count(1000)


# -- helpers ------------------------------------------------------------------------------

def arena(scene_id: str = "arena") -> dict[str, Any]:
    scene = copy.deepcopy(ARENA)
    scene["_id"] = scene_id
    return scene


def load(peer: Peer, scene: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    reply = peer.request({"type": "scene.load", "scene": scene or arena(), **extra})
    assert reply["type"] == "ack", reply
    return reply


def ok(peer: Peer, message: dict[str, Any], kind: str = "ack") -> dict[str, Any]:
    """Send a request with a fresh id; its reply must be `kind` and echo the id."""
    rid = next(_ids)
    reply = peer.request({**message, "id": rid})
    assert reply["type"] == kind, reply
    assert reply["id"] == rid, reply
    return reply


def query(peer: Peer, attacker: str, target: str, attack: str = "ranged",
          scene: str = "arena", **extra: Any) -> dict[str, Any]:
    reply = ok(peer, {"type": "cover.query", "scene": scene, "attacker": attacker,
                      "target": target, "attack": attack, **extra}, "cover.result")
    annotation: dict[str, Any] = reply["annotation"]
    return annotation


def subscribe(peer: Peer, scene: str = "arena", **extra: Any) -> dict[str, Any]:
    reply = ok(peer, {"type": "subscribe", "scene": scene, **extra}, "annotations")
    assert reply["full"] is True
    assert reply.get("removed", []) == []
    return reply


def key(annotation: dict[str, Any]) -> Key:
    return (annotation["attacker"], annotation["target"], annotation["mode"])


def table(annotations: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    out = {key(a): a for a in annotations}
    assert len(out) == len(annotations), "an annotation key was sent twice"
    return out


def all_keys(tokens: tuple[str, ...], modes: tuple[str, ...] = MODES) -> set[Key]:
    return {(a, t, m) for a in tokens for t in tokens if a != t for m in modes}


def assert_quiet(peer: Peer, scene: str = "arena", attacker: str = "a",
                 target: str = "b") -> None:
    """Nothing was pushed to `peer`: a request sent now is answered before anything else
    (the server handles frames one at a time and each connection's frames go out in
    order, so a push caused earlier would arrive first)."""
    rid = next(_ids)
    peer.send({"type": "cover.query", "scene": scene, "attacker": attacker,
               "target": target, "id": rid})
    reply = peer.recv(timeout=5)
    assert reply["type"] == "cover.result" and reply["id"] == rid, f"unexpected {reply}"


def expect_close(peer: Peer, code: int) -> None:
    """The server closes the connection with `code` before sending anything."""
    with pytest.raises(ConnectionClosed) as info:
        got = peer.recv(timeout=5)
        pytest.fail(f"expected a close, got {got}")
    assert info.value.rcvd is not None, "the server did not send a close frame"
    assert info.value.rcvd.code == code, info.value.rcvd


def hello_message(**extra: Any) -> dict[str, Any]:
    return {"type": "hello", "protocol": 1, "client": "pytest", **extra}


def tokens_of(server: LiveServer, scene: str = "arena") -> dict[str, dict[str, Any]]:
    snap = server.core.scenes[scene].snapshot()
    return {t["id"]: t for t in snap["tokens"]}


def walls_of(server: LiveServer, scene: str = "arena") -> dict[str, dict[str, Any]]:
    snap = server.core.scenes[scene].snapshot()
    return {w["id"]: w for w in snap["walls"]}


@pytest.fixture
def peer(peer_factory: PeerFactory) -> Peer:
    """A greeted connection with the arena loaded."""
    p = peer_factory()
    load(p)
    return p


@pytest.fixture
def token_server() -> Iterator[LiveServer]:
    server = LiveServer(token="s3cret").start()
    yield server
    server.stop()


def raw_peer(server: LiveServer) -> Peer:
    return Peer.open(server.url)


# -- handshake ----------------------------------------------------------------------------

@pytest.mark.parametrize("rid", ["hello-1", 7, 0])
def test_hello_gets_welcome_echoing_the_id(peer_factory: PeerFactory, rid: str | int) -> None:
    p = peer_factory(greet=False)
    welcome = p.request(hello_message(id=rid))
    assert welcome["type"] == "welcome"
    assert welcome["id"] == rid
    assert welcome["protocol"] == 1
    assert welcome["server"] == "covercast"
    assert isinstance(welcome["version"], str) and welcome["version"]


def test_welcome_lists_rulesets_with_option_defaults_and_limits(
        peer_factory: PeerFactory) -> None:
    p = peer_factory(greet=False)
    welcome = p.request(hello_message())
    rulesets = {r["name"]: r for r in welcome["rulesets"]}
    assert "dnd35" in rulesets
    dnd = rulesets["dnd35"]
    assert dnd["title"]
    options = {o["name"]: o for o in dnd["options"]}
    assert options["bigCreaturesRanged"]["default"] is False
    assert options["softCoverVsReach"]["default"] is True
    assert options["lowObstacleRangeFrom"]["default"] == "attacker"
    for option in options.values():
        assert {"name", "default", "type", "doc"} <= set(option)
    limits = welcome["limits"]
    assert limits["maxFrameBytes"] == 4 * 1024 * 1024
    for name in ("maxScenes", "maxTokens", "maxWalls", "maxBatch", "maxString",
                 "maxCoordinate", "maxSubscriptions"):
        assert isinstance(limits[name], int | float) and limits[name] > 0, name


@pytest.mark.parametrize("first", [
    {"type": "cover.query", "scene": "arena", "attacker": "a", "target": "b"},
    {"type": "subscribe", "scene": "arena"},
    {"type": "bogus"},
    b"\xc1 not msgpack",
    "{not json",
], ids=["query", "subscribe", "unknown-type", "garbage-bytes", "garbage-text"])
def test_first_message_other_than_hello_closes_1008(peer_factory: PeerFactory,
                                                    first: dict[str, Any] | bytes | str) -> None:
    p = peer_factory(greet=False)
    if isinstance(first, dict):
        p.send(first)
    else:
        p.send_raw(first)
    expect_close(p, POLICY_VIOLATION)


@pytest.mark.parametrize("protocol", [0, 2, 99])
def test_wrong_protocol_version_closes_1008(peer_factory: PeerFactory, protocol: int) -> None:
    p = peer_factory(greet=False)
    p.send(hello_message(protocol=protocol))
    expect_close(p, POLICY_VIOLATION)


def test_second_hello_is_an_error_and_the_connection_stays(peer: Peer) -> None:
    reply = peer.request(hello_message(id="again"))
    assert reply["type"] == "error" and reply["id"] == "again"
    assert reply["code"] == "protocol"
    query(peer, "a", "b")


@pytest.mark.parametrize("token", [None, "", "wrong", "S3CRET", "s3cret ", "s3cre"],
                         ids=["missing", "empty", "wrong", "case", "trailing-space", "prefix"])
def test_access_token_missing_or_wrong_closes_1008_without_welcome(
        token_server: LiveServer, token: str | None) -> None:
    p = raw_peer(token_server)
    try:
        extra = {} if token is None else {"token": token}
        p.send(hello_message(id=1, **extra))
        expect_close(p, POLICY_VIOLATION)
    finally:
        p.close()


def test_access_token_right_gets_welcome(token_server: LiveServer) -> None:
    p = raw_peer(token_server)
    try:
        welcome = p.request(hello_message(token="s3cret", id="t"))
        assert welcome["type"] == "welcome" and welcome["id"] == "t"
        load(p)
        assert query(p, "a", "b", "melee")["loe"] is True
    finally:
        p.close()


def test_access_token_right_but_wrong_protocol_closes_1008(token_server: LiveServer) -> None:
    p = raw_peer(token_server)
    try:
        p.send(hello_message(token="s3cret", protocol=2))
        expect_close(p, POLICY_VIOLATION)
    finally:
        p.close()


# -- encodings ----------------------------------------------------------------------------

def test_binary_frames_get_msgpack_binary_replies(peer: Peer) -> None:
    peer.send({"type": "cover.query", "scene": "arena", "attacker": "a", "target": "b",
               "id": "bin"})
    frame = peer.ws.recv(5)
    assert isinstance(frame, bytes)
    reply = msgpack.unpackb(frame, raw=False)
    assert reply["type"] == "cover.result" and reply["id"] == "bin"


def test_text_frames_get_json_text_replies_with_the_same_schema(peer: Peer) -> None:
    request = {"type": "cover.query", "scene": "arena", "attacker": "a", "target": "c",
               "attack": "ranged", "lines": True}
    peer.send({**request, "id": 1})
    binary_reply = peer.recv()
    peer.send_raw(json.dumps({**request, "id": 1}))
    frame = peer.ws.recv(5)
    assert isinstance(frame, str)
    text_reply = json.loads(frame)
    assert text_reply == binary_reply  # lists and tuples both arrive as lists


def test_json_hello_gets_json_welcome(peer_factory: PeerFactory) -> None:
    p = peer_factory(greet=False)
    p.send_raw(json.dumps(hello_message(id="j")))
    frame = p.ws.recv(5)
    assert isinstance(frame, str)
    welcome = json.loads(frame)
    assert welcome["type"] == "welcome" and welcome["id"] == "j"


@pytest.mark.parametrize("rid", ["abc", "", "x" * 256, 0, 1, 2**31, 2**63 - 1],
                         ids=["str", "empty-str", "long-str", "zero", "one", "2^31", "2^63-1"])
@pytest.mark.parametrize("text", [False, True], ids=["msgpack", "json"])
def test_request_id_is_echoed(peer: Peer, rid: str | int, text: bool) -> None:
    message = {"type": "token.update", "scene": "arena", "tokens": [{"id": "d", "x": 0}],
               "id": rid}
    if text:
        peer.send_raw(json.dumps(message))
    else:
        peer.send(message)
    reply = peer.recv()
    assert reply["type"] == "ack" and reply["id"] == rid


def test_request_without_id_gets_reply_without_id(peer: Peer) -> None:
    reply = peer.request({"type": "cover.query", "scene": "arena", "attacker": "a",
                          "target": "b"})
    assert reply["type"] == "cover.result"
    assert reply.get("id") is None


def test_subscription_made_over_json_gets_json_pushes(peer_factory: PeerFactory) -> None:
    changer = peer_factory()
    load(changer)
    watcher = peer_factory()
    watcher.send_raw(json.dumps({"type": "subscribe", "scene": "arena", "id": "s"}))
    first = watcher.ws.recv(5)
    assert isinstance(first, str) and json.loads(first)["full"] is True
    ok(changer, {"type": "token.update", "scene": "arena", "tokens": [{"id": "c", "y": 500}]})
    push = watcher.ws.recv(5)
    assert isinstance(push, str)
    assert json.loads(push)["type"] == "annotations"


# -- scene changes --------------------------------------------------------------------------

def test_scene_load_acks_with_scene_and_revision(peer_factory: PeerFactory) -> None:
    p = peer_factory()
    reply = ok(p, {"type": "scene.load", "scene": arena(), "ruleset": "dnd35", "options": {}})
    assert reply["scene"] == "arena" and reply["revision"] == 1


def test_scene_load_is_idempotent(peer_factory: PeerFactory, live_server: LiveServer) -> None:
    loader, watcher = peer_factory(), peer_factory()
    assert ok(loader, {"type": "scene.load", "scene": arena()})["revision"] == 1
    first = subscribe(watcher)
    snap1 = live_server.core.scenes["arena"].snapshot()

    assert ok(loader, {"type": "scene.load", "scene": arena()})["revision"] == 2
    push = watcher.recv()
    assert push["type"] == "annotations" and push["full"] is False
    assert push["revision"] == 2
    assert push["annotations"] == [] and push.get("removed", []) == []

    again = subscribe(peer_factory())
    assert again["revision"] == 2
    assert table(again["annotations"]) == table(first["annotations"])
    snap2 = live_server.core.scenes["arena"].snapshot()
    assert snap2["revision"] == 2
    assert {**snap1, "revision": 2} == snap2


def test_scene_load_replaces_documents(peer: Peer, live_server: LiveServer) -> None:
    scene = arena()
    scene["tokens"] = scene["tokens"][:2]
    scene["walls"] = []
    assert ok(peer, {"type": "scene.load", "scene": scene})["revision"] == 2
    assert set(tokens_of(live_server)) == {"a", "b"}
    assert walls_of(live_server) == {}


def test_scene_reload_without_some_tokens_pushes_their_keys_as_removed(
        peer_factory: PeerFactory) -> None:
    loader, watcher = peer_factory(), peer_factory()
    load(loader)
    subscribe(watcher)
    scene = arena()
    scene["tokens"] = [t for t in scene["tokens"] if t["_id"] != "b"]
    assert ok(loader, {"type": "scene.load", "scene": scene})["revision"] == 2
    push = watcher.recv()
    assert push["type"] == "annotations" and push["full"] is False and push["revision"] == 2
    assert {tuple(k) for k in push["removed"]} == all_keys(TOKENS) - all_keys(("a", "c", "d"))


def test_token_create_update_delete_ack(peer: Peer, live_server: LiveServer) -> None:
    created = ok(peer, {"type": "token.create", "scene": "arena",
                        "tokens": [{"id": "e", "x": 300, "y": 300},
                                   {"id": "f", "x": 300, "y": 400, "width": 2, "height": 2}]})
    assert created["scene"] == "arena" and created["revision"] == 2
    assert tokens_of(live_server)["f"]["width"] == 2
    updated = ok(peer, {"type": "token.update", "scene": "arena",
                        "tokens": [{"id": "e", "x": 500, "y": 600}]})
    assert updated["scene"] == "arena" and updated["revision"] == 3
    assert (tokens_of(live_server)["e"]["x"], tokens_of(live_server)["e"]["y"]) == (500, 600)
    deleted = ok(peer, {"type": "token.delete", "scene": "arena", "ids": ["e", "f"]})
    assert deleted["scene"] == "arena" and deleted["revision"] == 4
    assert set(tokens_of(live_server)) == set(TOKENS)


def test_wall_create_update_delete_ack(peer: Peer, live_server: LiveServer) -> None:
    created = ok(peer, {"type": "wall.create", "scene": "arena",
                        "walls": [{"id": "n", "c": [0, 700, 900, 700], "door": 1}]})
    assert created["scene"] == "arena" and created["revision"] == 2
    assert walls_of(live_server)["n"]["door"] == 1
    updated = ok(peer, {"type": "wall.update", "scene": "arena",
                        "walls": [{"id": "n", "ds": 1}]})
    assert updated["revision"] == 3
    assert walls_of(live_server)["n"]["ds"] == 1
    assert walls_of(live_server)["n"]["c"] == [0, 700, 900, 700]
    deleted = ok(peer, {"type": "wall.delete", "scene": "arena", "ids": ["n", "w"]})
    assert deleted["revision"] == 4
    assert set(walls_of(live_server)) == {"low"}
    # with "w" gone, "a" sees "c" (only "b" is in the way)
    assert query(peer, "a", "c")["loe"] is True


def test_partial_update_changes_only_the_fields_sent(peer: Peer,
                                                      live_server: LiveServer) -> None:
    before = tokens_of(live_server)["c"]
    ok(peer, {"type": "token.update", "scene": "arena", "tokens": [{"id": "c", "x": 700}]})
    after = tokens_of(live_server)["c"]
    assert after == {**before, "x": 700}


def test_partial_update_merges_nested_flags(peer: Peer, live_server: LiveServer) -> None:
    ok(peer, {"type": "wall.update", "scene": "arena",
              "walls": [{"_id": "low", "flags": {"wall-height": {"top": 3}}}]})
    flags = walls_of(live_server)["low"]["flags"]
    assert flags["wall-height"]["top"] == 3
    assert flags["wall-height"]["bottom"] == 0  # kept from the load
    assert flags["covercast"] == {"cover": "low"}  # another namespace, kept too

    ok(peer, {"type": "token.update", "scene": "arena",
              "tokens": [{"_id": "a", "flags": {"wall-height": {"tokenHeight": 2}}}]})
    ok(peer, {"type": "token.update", "scene": "arena",
              "tokens": [{"_id": "a", "flags": {"some-module": {"x": 1}}, "y": 10}]})
    a = tokens_of(live_server)["a"]
    assert a["flags"]["wall-height"]["tokenHeight"] == 2
    assert (a["x"], a["y"], a["name"]) == (0, 10, "Fighter")


def test_underscore_id_is_accepted_for_id(peer: Peer, live_server: LiveServer) -> None:
    ok(peer, {"type": "token.create", "scene": "arena",
              "tokens": [{"_id": "e", "x": 300, "y": 300}]})
    ok(peer, {"type": "token.update", "scene": "arena", "tokens": [{"_id": "e", "y": 500}]})
    assert tokens_of(live_server)["e"]["y"] == 500
    ok(peer, {"type": "wall.create", "scene": "arena",
              "walls": [{"_id": "n", "c": [0, 700, 900, 700]}]})
    ok(peer, {"type": "wall.update", "scene": "arena",
              "walls": [{"_id": "n", "id": "n", "c": [0, 800, 900, 800]}]})
    assert walls_of(live_server)["n"]["c"] == [0, 800, 900, 800]
    ok(peer, {"type": "token.delete", "scene": "arena", "ids": ["e"]})
    assert "e" not in tokens_of(live_server)


def test_foundry_fields_are_accepted_and_ignored(peer: Peer, live_server: LiveServer) -> None:
    ok(peer, {"type": "token.create", "scene": "arena",
              "tokens": [{"_id": "e", "x": 300, "y": 300, "texture": {"src": "e.png"},
                          "actorId": "xyz", "rotation": 90, "sort": 3}]})
    ok(peer, {"type": "wall.create", "scene": "arena",
              "walls": [{"_id": "n", "c": [0, 700, 900, 700], "light": 20, "sound": 20,
                         "threshold": {"light": None}}]})
    assert query(peer, "a", "e")["attacker"] == "a"


# -- cover queries ----------------------------------------------------------------------------

@pytest.mark.parametrize(("attacker", "target", "attack", "cover", "flags"), [
    ("a", "b", "melee", "none", {"adjacent": True, "in_reach": True, "can_target": True}),
    ("a", "d", "melee", "none", {"adjacent": False, "in_reach": False, "can_target": False}),
    ("a", "d", "reach", "none", {"adjacent": False, "in_reach": True, "can_target": True}),
    ("a", "b", "reach", "none", {"adjacent": True, "can_target": False}),
    ("a", "c", "ranged", "total", {"can_target": False}),
    ("c", "a", "ranged", "total", {"can_target": False}),
])
def test_cover_query(peer: Peer, attacker: str, target: str, attack: str, cover: str,
                     flags: dict[str, bool]) -> None:
    reply = ok(peer, {"type": "cover.query", "scene": "arena", "attacker": attacker,
                      "target": target, "attack": attack}, "cover.result")
    assert reply["scene"] == "arena" and reply["revision"] == 1
    annotation = reply["annotation"]
    assert key(annotation) == (attacker, target, attack)
    assert annotation["cover"] == cover
    assert annotation["loe"] is (cover != "total")
    for flag, value in flags.items():
        assert annotation["flags"][flag] is value, flag
    assert "lines" not in annotation or annotation["lines"] is None


def test_cover_query_defaults_to_ranged(peer: Peer) -> None:
    reply = ok(peer, {"type": "cover.query", "scene": "arena", "attacker": "a",
                      "target": "c"}, "cover.result")
    assert reply["annotation"]["mode"] == "ranged"


def test_cover_query_lines_name_the_walls_that_block(peer: Peer) -> None:
    annotation = query(peer, "a", "c", "ranged", lines=True)
    lines = annotation["lines"]
    assert lines, annotation
    for line in lines:
        assert len(line["start"]) == 2 and len(line["end"]) == 2
        assert line["blocked"] is True
        assert line.get("walls", []) == ["w"]
    # an open line names nothing that blocked it
    open_lines = query(peer, "a", "d", "reach", lines=True)["lines"]
    assert open_lines and not any(line["blocked"] for line in open_lines)
    assert all(line.get("walls", []) == [] for line in open_lines)


def test_cover_query_origin_moves_the_lines_start(peer: Peer) -> None:
    assert query(peer, "a", "c")["cover"] == "total"
    # from a point on c's side of the wall, nothing is in the way
    annotation = query(peer, "a", "c", origin={"x": 500, "y": 50}, lines=True)
    assert annotation["loe"] is True and annotation["cover"] == "none"
    for line in annotation["lines"]:
        assert line["start"] == pytest.approx([500, 50], abs=1)
        assert line["blocked"] is False
    # the scene itself did not move
    assert query(peer, "a", "c")["cover"] == "total"


def test_cover_query_reflects_changes(peer: Peer) -> None:
    assert query(peer, "a", "c")["cover"] == "total"
    reply = ok(peer, {"type": "wall.delete", "scene": "arena", "ids": ["w"]})
    result = ok(peer, {"type": "cover.query", "scene": "arena", "attacker": "a",
                       "target": "c"}, "cover.result")
    assert result["revision"] == reply["revision"]
    assert result["annotation"]["loe"] is True


# -- subscriptions ----------------------------------------------------------------------------

def test_subscribe_sends_every_ordered_pair_in_every_mode(peer: Peer) -> None:
    reply = subscribe(peer)
    assert reply["scene"] == "arena" and reply["revision"] == 1
    assert set(table(reply["annotations"])) == all_keys(TOKENS)
    assert len(reply["annotations"]) == 4 * 3 * 3


def test_subscribe_with_lines(peer: Peer) -> None:
    reply = subscribe(peer, lines=True)
    for annotation in reply["annotations"]:
        assert isinstance(annotation["lines"], list)


def test_change_by_another_connection_pushes_only_changed_pairs(
        peer_factory: PeerFactory) -> None:
    changer = peer_factory()
    load(changer)
    watcher = peer_factory()
    before = table(subscribe(watcher)["annotations"])

    ack = ok(changer, {"type": "token.update", "scene": "arena",
                       "tokens": [{"id": "c", "y": 500}]})
    push = watcher.recv()
    assert push["type"] == "annotations"
    assert push["scene"] == "arena" and push["full"] is False
    assert push["revision"] == ack["revision"] == 2
    assert push.get("id") is None
    assert push.get("removed", []) == []

    after = table(subscribe(peer_factory())["annotations"])
    assert set(after) == set(before)
    changed = {k for k in after if after[k] != before[k]}
    delta = table(push["annotations"])
    assert changed, "moving c should change some results"
    assert set(delta) == changed
    assert all(delta[k] == after[k] for k in delta)
    assert all("c" in k[:2] for k in delta)  # only pairs with the moved token


def test_change_that_alters_no_result_pushes_an_empty_delta(
        peer_factory: PeerFactory) -> None:
    changer = peer_factory()
    load(changer)
    watcher = peer_factory()
    subscribe(watcher)
    ok(changer, {"type": "token.update", "scene": "arena", "tokens": [{"id": "a", "name": "X"}]})
    push = watcher.recv()
    assert push["type"] == "annotations" and push["full"] is False
    assert push["revision"] == 2 and push["annotations"] == []


def test_the_changer_gets_its_ack_then_its_own_push(peer: Peer) -> None:
    subscribe(peer)
    ack = ok(peer, {"type": "token.update", "scene": "arena", "tokens": [{"id": "c", "y": 500}]})
    push = peer.recv()
    assert push["type"] == "annotations" and push["revision"] == ack["revision"]
    assert push["annotations"]


def test_token_delete_pushes_removed_keys(peer_factory: PeerFactory) -> None:
    changer = peer_factory()
    load(changer)
    watcher = peer_factory()
    subscribe(watcher)
    ok(changer, {"type": "token.delete", "scene": "arena", "ids": ["d"]})
    push = watcher.recv()
    assert push["type"] == "annotations" and push["full"] is False
    removed = {tuple(k) for k in push["removed"]}
    assert len(removed) == len(push["removed"])
    assert removed == all_keys(TOKENS) - all_keys(("a", "b", "c"))
    assert all("d" not in key(a)[:2] for a in push["annotations"])


def test_token_create_pushes_the_new_pairs(peer_factory: PeerFactory) -> None:
    changer = peer_factory()
    load(changer)
    watcher = peer_factory()
    subscribe(watcher)
    ok(changer, {"type": "token.create", "scene": "arena",
                 "tokens": [{"id": "e", "x": 300, "y": 800}]})
    push = watcher.recv()
    new = all_keys((*TOKENS, "e")) - all_keys(TOKENS)
    assert new <= set(table(push["annotations"]))


def test_unsubscribe_stops_pushes(peer_factory: PeerFactory) -> None:
    changer = peer_factory()
    load(changer)
    watcher = peer_factory()
    subscribe(watcher)
    reply = ok(watcher, {"type": "unsubscribe", "scene": "arena"})
    assert reply["scene"] == "arena"
    ok(changer, {"type": "token.update", "scene": "arena", "tokens": [{"id": "c", "y": 500}]})
    assert_quiet(watcher)


def test_subscription_to_ranged_only_gets_ranged_annotations(
        peer_factory: PeerFactory) -> None:
    changer = peer_factory()
    load(changer)
    watcher = peer_factory()
    full = subscribe(watcher, modes=["ranged"])
    assert set(table(full["annotations"])) == all_keys(TOKENS, ("ranged",))
    ok(changer, {"type": "token.update", "scene": "arena", "tokens": [{"id": "c", "y": 500}]})
    push = watcher.recv()
    assert push["annotations"], "ranged results involving c changed"
    assert {a["mode"] for a in push["annotations"]} == {"ranged"}
    ok(changer, {"type": "token.delete", "scene": "arena", "ids": ["d"]})
    push = watcher.recv()
    assert {tuple(k) for k in push["removed"]} == (
        all_keys(TOKENS, ("ranged",)) - all_keys(("a", "b", "c"), ("ranged",)))


def test_subscribers_of_another_scene_get_nothing(peer_factory: PeerFactory) -> None:
    changer = peer_factory()
    load(changer)
    load(changer, arena("other"))
    watcher = peer_factory()
    subscribe(watcher, "other")
    ok(changer, {"type": "token.update", "scene": "arena", "tokens": [{"id": "c", "y": 500}]})
    ok(changer, {"type": "scene.load", "scene": arena()})
    assert_quiet(watcher, "other")
    # and a change to "other" does reach it
    ok(changer, {"type": "token.update", "scene": "other", "tokens": [{"id": "c", "y": 500}]})
    push = watcher.recv()
    assert push["type"] == "annotations" and push["scene"] == "other"


def test_resubscribing_sends_the_full_set_again(peer: Peer) -> None:
    first = subscribe(peer)
    second = subscribe(peer, modes=["melee"])
    assert set(table(second["annotations"])) == all_keys(TOKENS, ("melee",))
    assert len(first["annotations"]) == 36
