"""Bad input against a real server on 127.0.0.1.

Every rejected frame must (a) be answered with an `error` carrying a code and a message that
names the field path and the offending value (and the request's id, when it has one),
(b) leave the connection open (the next valid request works) and (c) leave every scene
byte-for-byte as it was (compared through `Scene.snapshot()`)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import pytest
from websockets.exceptions import ConnectionClosed

from tests.conftest import LiveServer, Peer
from tests.test_protocol import arena, assert_quiet, load, ok, query, subscribe

PeerFactory = Callable[..., Peer]

MESSAGE_TOO_BIG = 1009
MAX_FRAME = 4 * 1024 * 1024


# -- helpers ------------------------------------------------------------------------------

def mp(obj: Any) -> bytes:
    frame: bytes = msgpack.packb(obj)
    return frame


def js(obj: Any) -> str:
    return json.dumps(obj)


def state(server: LiveServer) -> bytes:
    """Every scene the server holds, serialized (for byte-for-byte comparison)."""
    snaps = {sid: scene.snapshot() for sid, scene in sorted(server.core.scenes.items())}
    return mp(snaps)


@dataclass(frozen=True)
class Bad:
    """One bad frame and the error it must get."""

    name: str
    frame: bytes | str
    code: str | frozenset[str]
    path: str | None = None  # None: the frame as a whole is bad, no field to name
    values: tuple[str, ...] = ()  # each must appear in the message (case-insensitive)
    rid: str | int | None = None  # the id the error must echo


def check_rejected(server: LiveServer, peer: Peer, bad: Bad,
                   scene: str = "arena") -> dict[str, Any]:
    """Send `bad.frame`; check the error, that nothing changed and that the connection
    still works."""
    before = state(server)
    peer.send_raw(bad.frame)
    reply = peer.recv()
    assert reply["type"] == "error", reply
    codes = {bad.code} if isinstance(bad.code, str) else bad.code
    assert reply["code"] in codes, reply
    message: str = reply["message"]
    assert message.strip(), reply
    assert not re.search(r"(''|\"\"|:)\s*$", message), f"empty explanation: {message!r}"
    if bad.path is not None:
        assert reply.get("path") == bad.path, reply
        assert bad.path in message, f"message does not name {bad.path}: {message!r}"
    for value in bad.values:
        assert value.lower() in message.lower(), f"{value!r} not in {message!r}"
    assert reply.get("id") == bad.rid, reply
    assert state(server) == before, "a rejected frame changed a scene"
    query(peer, "a", "b", scene=scene)  # the connection is still open and served
    assert state(server) == before
    return reply


def update(tokens: list[Any], rid: str | int = "u", **extra: Any) -> dict[str, Any]:
    return {"type": "token.update", "scene": "arena", "tokens": tokens, "id": rid, **extra}


def create(tokens: list[Any], rid: str | int = "c") -> dict[str, Any]:
    return {"type": "token.create", "scene": "arena", "tokens": tokens, "id": rid}


def reload(rid: str | int = "l", ruleset: str = "dnd35", options: dict[str, Any] | None = None,
           **changes: Any) -> dict[str, Any]:
    """A scene.load of the arena (already loaded: rejecting it must keep the old one)."""
    scene = {**arena(), **changes}
    return {"type": "scene.load", "scene": scene, "ruleset": ruleset,
            "options": options or {}, "id": rid}


def cover(rid: str | int = "q", **fields: Any) -> dict[str, Any]:
    return {"type": "cover.query", "scene": "arena", "attacker": "a", "target": "b",
            "id": rid, **fields}


def area(rid: str | int = "ar", **template: Any) -> dict[str, Any]:
    """An area.query on the arena: a 10-ft burst, with `template`'s fields added."""
    return {"type": "area.query", "scene": "arena", "id": rid,
            "template": {"t": "circle", "x": 50, "y": 50, "distance": 10, **template}}


def nested_msgpack(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"  # [[[...[nil]...]]]


INVALID = "invalid"
SIZE = frozenset({"invalid", "too_large"})
FRAME_SIZE = frozenset({"bad_frame", "too_large"})

CASES = [
    # -- frames that are not messages
    Bad("malformed-msgpack", b"\xc1", "bad_frame", values=("msgpack",)),
    Bad("truncated-msgpack", b"\x82\xa4type", "bad_frame", values=("msgpack",)),
    Bad("msgpack-trailing-bytes", mp(cover()) + b"\x01", "bad_frame", values=("msgpack",)),
    Bad("invalid-json", "{not json", "bad_frame", values=("JSON",)),
    Bad("json-trailing-garbage", js(cover()) + " x", "bad_frame", values=("JSON",)),
    Bad("msgpack-non-map", mp([1, 2, 3]), INVALID, values=("[1, 2, 3]",)),
    Bad("json-non-map", js("just a string"), INVALID, values=("'just a string'",)),
    Bad("msgpack-no-type", mp({"scene": "arena", "id": 5}), INVALID, "$.type",
        ("None",), 5),
    Bad("unknown-type", mp({"type": "teleport", "id": 6}), INVALID, "$.type",
        ("'teleport'", "cover.query"), 6),
    Bad("unknown-type-json", js({"type": "teleport", "id": "t"}), INVALID, "$.type",
        ("'teleport'",), "t"),
    # -- unknown fields
    Bad("unknown-top-level-field", mp(update([{"id": "a", "x": 1}], bogus="zzz")), INVALID,
        "$.bogus", ("'zzz'",), "u"),
    Bad("unknown-field-in-created-token",
        mp(create([{"id": "e", "x": 1, "y": 1, "bogus": "zzz"}])), INVALID,
        "$.tokens[0].bogus", ("'zzz'",), "c"),
    Bad("unknown-field-in-token-update", mp(update([{"id": "a", "bogus": "zzz"}])), INVALID,
        "$.tokens[0].bogus", ("'zzz'",), "u"),
    Bad("unknown-field-in-loaded-token",
        mp(reload(tokens=[{"id": "a", "x": 0, "y": 0}, {"id": "b", "x": 0, "y": 0,
                                                          "bogus": "zzz"}])),
        INVALID, "$.scene.tokens[1].bogus", ("'zzz'",), "l"),
    Bad("unknown-field-in-covercast-flags",
        mp({"type": "wall.create", "scene": "arena", "id": 1,
            "walls": [{"id": "n", "c": [0, 0, 1, 1],
                       "flags": {"covercast": {"cover": "low", "glass": True}}}]}),
        INVALID, "$.walls[0].flags.covercast.glass", ("True",), 1),
    # -- wrong types and values
    Bad("x-as-string-create", mp(create([{"id": "e", "x": "12", "y": 1}])), INVALID,
        "$.tokens[0].x", ("'12'",), "c"),
    Bad("x-as-string-update", mp(update([{"id": "a", "x": "12"}])), INVALID,
        "$.tokens[0].x", ("'12'",), "u"),
    Bad("x-as-string-json", js(update([{"id": "a", "x": "12"}])), INVALID,
        "$.tokens[0].x", ("'12'",), "u"),
    Bad("x-null-update", mp(update([{"id": "a", "x": None}])), INVALID,
        "$.tokens[0].x", ("None",), "u"),
    Bad("disposition-out-of-enum", mp(update([{"id": "a", "disposition": 5}])), INVALID,
        "$.tokens[0].disposition", ("5",), "u"),
    Bad("wall-c-too-short", mp({"type": "wall.update", "scene": "arena", "id": 2,
                                "walls": [{"id": "w", "c": [1, 2]}]}), INVALID,
        "$.walls[0].c", ("[1, 2]",), 2),
    Bad("missing-required-field", mp(create([{"id": "e", "y": 1}])), INVALID,
        "$.tokens[0]", ("x",), "c"),
    Bad("lines-not-bool", mp(cover(lines=3)), INVALID, "$.lines", ("3",), "q"),
    Bad("attack-mode-unknown", mp(cover(attack="laser")), INVALID, "$.attack",
        ("'laser'",), "q"),
    Bad("empty-batch", mp(update([])), INVALID, "$.tokens", ("[]",), "u"),
    # -- non-finite numbers
    Bad("nan-in-json", '{"type": "token.update", "scene": "arena", "id": "nan", '
                       '"tokens": [{"id": "a", "x": NaN}]}', INVALID,
        "$.tokens[0].x", ("NaN",), "nan"),
    Bad("infinity-in-json", '{"type": "token.create", "scene": "arena", "id": "inf", '
                            '"tokens": [{"id": "e", "x": 1, "y": -Infinity}]}', INVALID,
        "$.tokens[0].y", ("Infinity",), "inf"),
    Bad("nan-in-msgpack", mp(update([{"id": "a", "x": math.nan}], rid="nan")), INVALID,
        "$.tokens[0].x", ("nan",), "nan"),
    # -- unknown scenes and documents
    Bad("unknown-scene-update", mp(update([{"id": "a", "x": 1}]) | {"scene": "nowhere"}),
        "unknown_scene", "$.scene", ("'nowhere'",), "u"),
    Bad("unknown-scene-query", mp(cover(scene="nowhere")), "unknown_scene", "$.scene",
        ("'nowhere'",), "q"),
    Bad("unknown-scene-subscribe", mp({"type": "subscribe", "scene": "nowhere", "id": 3}),
        "unknown_scene", "$.scene", ("'nowhere'",), 3),
    Bad("unsubscribe-without-subscription", mp({"type": "unsubscribe", "scene": "arena",
                                                "id": 4}),
        "unknown_scene", "$.scene", ("'arena'",), 4),
    Bad("unknown-token-update", mp(update([{"id": "ghost", "x": 1}])), "unknown_token",
        "$.tokens[0].id", ("'ghost'",), "u"),
    Bad("unknown-token-delete", mp({"type": "token.delete", "scene": "arena",
                                    "ids": ["ghost"], "id": "d"}),
        "unknown_token", "$.ids[0]", ("'ghost'",), "d"),
    Bad("unknown-token-delete-after-a-good-one",
        mp({"type": "token.delete", "scene": "arena", "ids": ["d", "ghost"], "id": "d"}),
        "unknown_token", "$.ids[1]", ("'ghost'",), "d"),
    Bad("unknown-wall-update", mp({"type": "wall.update", "scene": "arena", "id": "w",
                                   "walls": [{"id": "ghost", "ds": 1}]}),
        "unknown_wall", "$.walls[0].id", ("'ghost'",), "w"),
    Bad("unknown-wall-delete", mp({"type": "wall.delete", "scene": "arena", "id": "w",
                                   "ids": ["ghost"]}),
        "unknown_wall", "$.ids[0]", ("'ghost'",), "w"),
    Bad("update-id-of-wrong-type-list", mp(update([{"id": [1, 2], "x": 1}])),
        frozenset({"invalid", "unknown_token"}), "$.tokens[0].id", ("[1, 2]",), "u"),
    Bad("update-id-of-wrong-type-map", mp(update([{"id": {"k": 1}, "x": 1}])),
        frozenset({"invalid", "unknown_token"}), "$.tokens[0].id", ("{'k': 1}",), "u"),
    # -- duplicate ids
    Bad("duplicate-id-existing-token", mp(create([{"id": "a", "x": 1, "y": 1}])),
        "duplicate_id", "$.tokens[0].id", ("'a'",), "c"),
    Bad("duplicate-id-within-batch",
        mp(create([{"id": "e", "x": 1, "y": 1}, {"_id": "e", "x": 2, "y": 2}])),
        "duplicate_id", "$.tokens[1].id", ("'e'",), "c"),
    Bad("duplicate-id-existing-wall",
        mp({"type": "wall.create", "scene": "arena", "id": 9,
            "walls": [{"id": "w", "c": [0, 0, 5, 5]}]}),
        "duplicate_id", "$.walls[0].id", ("'w'",), 9),
    Bad("duplicate-id-in-scene-load",
        mp(reload(tokens=[{"id": "a", "x": 0, "y": 0}, {"_id": "a", "x": 0, "y": 0}])),
        "duplicate_id", "$.scene.tokens[1].id", ("'a'",), "l"),
    Bad("id-and-_id-disagree", mp(create([{"_id": "n1", "id": "n2", "x": 1, "y": 1}])),
        INVALID, "$.tokens[0].id", ("'n1'", "'n2'"), "c"),
    # -- batches whose last item is bad
    Bad("batch-third-update-bad-type",
        mp(update([{"id": "a", "x": 300}, {"id": "b", "x": 300}, {"id": "c", "x": "far"}])),
        INVALID, "$.tokens[2].x", ("'far'",), "u"),
    Bad("batch-third-update-unknown",
        mp(update([{"id": "a", "x": 300}, {"id": "b", "x": 300}, {"id": "ghost", "x": 1}])),
        "unknown_token", "$.tokens[2].id", ("'ghost'",), "u"),
    Bad("batch-third-wall-degenerate",
        mp({"type": "wall.create", "scene": "arena", "id": 8,
            "walls": [{"id": "n1", "c": [0, 0, 5, 5]}, {"id": "n2", "c": [0, 0, 5, 6]},
                      {"id": "n3", "c": [7, 7, 7, 7]}]}),
        INVALID, "$.walls[2].c", ("[7.0, 7.0, 7.0, 7.0]",), 8),
    Bad("wall-update-degenerate",  # "low" is the scene's 2nd wall, the batch's 1st
        mp({"type": "wall.update", "scene": "arena", "id": 8,
            "walls": [{"id": "low", "c": [7, 7, 7, 7]}]}),
        INVALID, "$.walls[0].c", ("[7.0, 7.0, 7.0, 7.0]",), 8),
    # -- scenes and rulesets the server does not do
    Bad("hex-grid", mp(reload(grid={"type": 2, "size": 100})), "unsupported",
        "$.scene.grid.type", ("2", "hex", "square"), "l"),
    Bad("gridless", mp(reload(grid={"type": 0})), "unsupported", "$.scene.grid.type",
        ("0", "gridless", "square"), "l"),
    Bad("unknown-ruleset", mp(reload(ruleset="pathfinder9")), "unknown_ruleset", "$.ruleset",
        ("'pathfinder9'", "dnd35"), "l"),
    Bad("unknown-ruleset-option", mp(reload(options={"flankingBonus": 4})), INVALID,
        "$.options.flankingBonus", ("4",), "l"),
    Bad("ruleset-option-wrong-type", mp(reload(options={"bigCreaturesRanged": "yes"})),
        INVALID, "$.options.bigCreaturesRanged", ("'yes'",), "l"),
    Bad("ruleset-option-bad-value", mp(reload(options={"lowObstacleRangeFrom": "moon"})),
        INVALID, "$.options.lowObstacleRangeFrom", ("'moon'",), "l"),
    # -- absurd sizes
    Bad("scene-width-1e9", mp(reload(width=1e9)), SIZE, "$.scene.width",
        ("1000000000.0",), "l"),
    Bad("token-x-1e12", mp(update([{"id": "a", "x": 1e12}])), SIZE, "$.tokens[0].x",
        ("1000000000000.0",), "u"),
    Bad("wall-c-1e12", mp({"type": "wall.create", "scene": "arena", "id": 7,
                           "walls": [{"id": "n", "c": [0, 0, 1e12, 0]}]}),
        SIZE, "$.walls[0].c[2]", ("1000000000000.0",), 7),
    Bad("origin-1e12", mp(cover(origin={"x": 1e12, "y": 0})), SIZE, "$.origin.x",
        ("1000000000000.0",), "q"),
    Bad("token-width-1e9-squares", mp(update([{"id": "a", "width": 1e9}])), SIZE,
        "$.tokens[0].width", ("1000000000.0",), "u"),
    # A side past the largest creature's (maxTokenSquares): a pair of two such creatures
    # costs the fourth power of the side.
    Bad("token-larger-than-a-colossus", mp(create([{"id": "ship", "x": 0, "y": 900,
                                                     "width": 7, "height": 7}])),
        SIZE, "$.tokens[0].width", ("7", "6"), "c"),
    Bad("id-of-10000-chars", mp(create([{"id": "x" * 10000, "x": 1, "y": 1}])), SIZE,
        "$.tokens[0].id", ("256",), "c"),
    Bad("more-tokens-than-the-scene-limit",
        mp(create([{"id": f"t{k}", "x": k % 100 * 100, "y": k // 100 * 100 + 1000}
                   for k in range(1000)])),
        "too_large", "$.tokens", ("1004", "1000"), "c"),
    Bad("list-of-100k-ids-msgpack",
        mp({"type": "token.delete", "scene": "arena", "ids": ["ghost"] * 100_000, "id": 1}),
        SIZE, "$.ids", ("5000",), 1),
    Bad("list-of-100k-ids-json",
        js({"type": "token.delete", "scene": "arena", "ids": ["ghost"] * 100_000, "id": 1}),
        SIZE, "$.ids", ("5000",), 1),
    # -- nesting and bombs
    Bad("msgpack-nested-100000", nested_msgpack(100_000), "bad_frame", values=("nest",)),
    Bad("json-nested-100000", "[" * 100_000 + "]" * 100_000, "bad_frame", values=("nest",)),
    Bad("json-nested-100000-inside-a-message",
        '{"type": "token.update", "scene": "arena", "id": 1, "tokens": [{"id": "a", '
        '"texture": ' + "[" * 100_000 + "]" * 100_000 + "}]}", "bad_frame", values=("nest",)),
    Bad("msgpack-array32-bomb", b"\xdd\xff\xff\xff\xff", FRAME_SIZE, values=("4294967295",)),
    Bad("msgpack-map32-bomb", b"\xdf\xff\xff\xff\xff", FRAME_SIZE, values=("4294967295",)),
    # (msgpack sees this one is truncated before it looks at the length: either is fine)
    Bad("msgpack-str32-bomb", b"\xdb\xff\xff\xff\xff", FRAME_SIZE, values=("msgpack",)),
    Bad("msgpack-array32-bomb-inside-a-message",
        b"\x84" + b"".join(map(mp, ["type", "token.delete", "scene", "arena", "id", 1, "ids"]))
        + b"\xdd\xff\xff\xff\xff",
        FRAME_SIZE, values=("4294967295",)),
    # -- mounts and Take Cover (flags.covercast.mount / takeCover)
    Bad("mount-unknown-token",
        mp(update([{"id": "a", "flags": {"covercast": {"mount": "ghost"}}}])),
        "unknown_token", "$.tokens[0].flags.covercast.mount", ("'ghost'",), "u"),
    Bad("mount-itself", mp(update([{"id": "a", "flags": {"covercast": {"mount": "a"}}}])),
        INVALID, "$.tokens[0].flags.covercast.mount", ("'a'", "itself"), "u"),
    Bad("mount-not-larger",
        mp(update([{"id": "a", "flags": {"covercast": {"mount": "c"}}}])),
        INVALID, "$.tokens[0].flags.covercast.mount", ("'c'", "medium", "one size larger"),
        "u"),
    Bad("mount-smaller-than-rider",
        mp(update([{"id": "a", "flags": {"covercast": {"mount": "b"}}}])),
        INVALID, "$.tokens[0].flags.covercast.mount", ("'b'", "small"), "u"),
    Bad("mount-chain-in-a-batch",
        mp(create([{"id": "g", "x": 0, "y": 600, "width": 3, "height": 3, "size": "huge"},
                   {"id": "h", "x": 0, "y": 600, "width": 2, "height": 2, "size": "large",
                    "flags": {"covercast": {"mount": "g"}}},
                   {"id": "p", "x": 0, "y": 600, "size": "small",
                    "flags": {"covercast": {"mount": "h"}}}])),
        INVALID, "$.tokens[2].flags.covercast.mount", ("'h'", "'g'"), "c"),
    Bad("mount-unknown-in-scene-load",
        mp(reload(tokens=[{"id": "a", "x": 0, "y": 0},
                          {"id": "b", "x": 100, "y": 0, "size": "small",
                           "flags": {"covercast": {"mount": "pony"}}}])),
        "unknown_token", "$.scene.tokens[1].flags.covercast.mount", ("'pony'",), "l"),
    Bad("mount-not-a-string", mp(update([{"id": "a", "flags": {"covercast": {"mount": 7}}}])),
        INVALID, "$.tokens[0].flags.covercast.mount", ("7",), "u"),
    Bad("take-cover-not-bool",
        mp(update([{"id": "a", "flags": {"covercast": {"takeCover": "yes"}}}])),
        INVALID, "$.tokens[0].flags.covercast.takeCover", ("'yes'",), "u"),
    # -- queries that make no sense
    Bad("query-attacker-is-target", mp(cover(target="a")), INVALID, "$.target",
        ("'a'",), "q"),
    Bad("query-unknown-attacker", mp(cover(attacker="ghost")), "unknown_token",
        "$.attacker", ("'ghost'",), "q"),
    Bad("query-unknown-target", mp(cover(target="ghost")), "unknown_token", "$.target",
        ("'ghost'",), "q"),
    # -- an area template's elevation
    Bad("template-elevation-as-string", mp(area(elevation="high")), INVALID,
        "$.template.elevation", ("'high'",), "ar"),
    Bad("template-elevation-absurd", mp(area(elevation=1e12)), INVALID,
        "$.template.elevation", ("1000000000000.0", "10000000"), "ar"),
    Bad("template-elevation-nan", '{"type": "area.query", "scene": "arena", "id": "ar", '
                                  '"template": {"t": "circle", "x": 50, "y": 50, '
                                  '"distance": 10, "elevation": NaN}}', INVALID,
        "$.template.elevation", ("NaN",), "ar"),
    Bad("template-elevation-null", mp(area(elevation=None)), INVALID,
        "$.template.elevation", ("None",), "ar"),
]


@pytest.fixture
def peer(peer_factory: PeerFactory) -> Peer:
    """A greeted connection with the arena loaded."""
    p = peer_factory()
    load(p)
    return p


# -- tests --------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_rejected_and_changes_nothing(live_server: LiveServer, peer: Peer,
                                                   bad: Bad) -> None:
    check_rejected(live_server, peer, bad)


def test_the_bomb_frame_really_is_the_shape_it_claims() -> None:
    bomb = next(c for c in CASES if c.name == "msgpack-array32-bomb-inside-a-message")
    assert isinstance(bomb.frame, bytes)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(bomb.frame)
    assert unpacker.read_map_header() == 4
    # the first three entries are intact; the fourth claims 2**32 - 1 ids
    assert {unpacker.unpack(): unpacker.unpack() for _ in range(3)} == {
        "type": "token.delete", "scene": "arena", "id": 1}
    assert unpacker.unpack() == "ids"
    assert unpacker.read_array_header() == 2**32 - 1


def test_every_bad_input_in_a_row_on_one_connection(live_server: LiveServer,
                                                    peer: Peer) -> None:
    """The connection survives all of them back to back, and still changes scenes."""
    before = state(live_server)
    for bad in CASES:
        peer.send_raw(bad.frame)
        reply = peer.recv()
        assert reply["type"] == "error", (bad.name, reply)
    assert state(live_server) == before
    assert ok(peer, {"type": "token.update", "scene": "arena",
                     "tokens": [{"id": "a", "x": 100}]})["revision"] == 2


def test_rejected_batch_applies_none_of_its_items(live_server: LiveServer,
                                                  peer: Peer) -> None:
    bad = next(c for c in CASES if c.name == "batch-third-update-bad-type")
    check_rejected(live_server, peer, bad)
    tokens = {t["id"]: t for t in live_server.core.scenes["arena"].snapshot()["tokens"]}
    assert tokens["a"]["x"] == 0 and tokens["b"]["x"] == 100
    assert live_server.core.scenes["arena"].revision == 1
    # the same batch without its bad item goes through whole
    ok(peer, update([{"id": "a", "x": 300}, {"id": "b", "x": 300}]))
    tokens = {t["id"]: t for t in live_server.core.scenes["arena"].snapshot()["tokens"]}
    assert tokens["a"]["x"] == 300 and tokens["b"]["x"] == 300


def test_rejected_changes_push_nothing_to_subscribers(live_server: LiveServer, peer: Peer,
                                                      peer_factory: PeerFactory) -> None:
    watcher = peer_factory()
    subscribe(watcher)
    for bad in CASES:
        peer.send_raw(bad.frame)
        assert peer.recv()["type"] == "error", bad.name
    assert_quiet(watcher)


def test_bad_input_never_affects_another_connections_scene(
        live_server: LiveServer, peer: Peer, peer_factory: PeerFactory) -> None:
    other = peer_factory()
    load(other, arena("other"))
    subscribe(other, "other")
    theirs = mp(live_server.core.scenes["other"].snapshot())
    for bad in CASES:  # aimed at our scene
        peer.send_raw(bad.frame)
        assert peer.recv()["type"] == "error", bad.name
    for bad in CASES:  # and the same aimed at theirs
        frame = retarget(bad.frame, "other")
        peer.send_raw(frame)
        assert peer.recv()["type"] == "error", bad.name
    assert mp(live_server.core.scenes["other"].snapshot()) == theirs
    assert_quiet(other, "other")
    ok(other, {"type": "token.update", "scene": "other", "tokens": [{"id": "a", "x": 100}]})


def retarget(frame: bytes | str, scene: str) -> bytes | str:
    """The same bad frame aimed at another scene (where it names one)."""
    if isinstance(frame, str):
        return frame.replace('"arena"', json.dumps(scene))
    return frame.replace(b"\xa5arena", mp(scene))


def test_oversized_frame_closes_1009_and_the_server_survives(
        live_server: LiveServer, peer: Peer, peer_factory: PeerFactory) -> None:
    bystander = peer_factory()
    before = state(live_server)
    frame = mp(update([{"id": "a", "x": 1, "name": "x" * MAX_FRAME}]))
    assert len(frame) > MAX_FRAME
    peer.send_raw(frame)
    with pytest.raises(ConnectionClosed) as info:
        got = peer.recv(timeout=10)
        pytest.fail(f"expected a close, got {got}")
    assert info.value.rcvd is not None and info.value.rcvd.code == MESSAGE_TOO_BIG
    assert state(live_server) == before
    # the server is still there: the bystander is served and a new connection works
    query(bystander, "a", "b")
    fresh = peer_factory()
    query(fresh, "a", "b")
    ok(fresh, update([{"id": "a", "x": 100}]))


def test_frame_just_under_the_limit_is_decoded(live_server: LiveServer, peer: Peer) -> None:
    """A big but legal frame is read and judged on its content (a name too long)."""
    filler = "x" * (MAX_FRAME - 200)
    bad = Bad("big-name", mp(update([{"id": "a", "name": filler}])), SIZE,
              "$.tokens[0].name", ("256",), "u")
    check_rejected(live_server, peer, bad)


def test_deeply_nested_value_in_an_ignored_foundry_field(live_server: LiveServer,
                                                         peer: Peer) -> None:
    """A token whose ignored `texture` holds 1000 nested arrays: the server may reject it,
    but if it accepts it the token must stay usable (updatable, deletable, snapshotable)."""
    token = (b"\x84" + b"".join(map(mp, ["id", "deep", "x", 300, "y", 300, "texture"]))
             + nested_msgpack(1000))
    frame = (b"\x84" + b"".join(map(mp, ["type", "token.create", "scene", "arena",
                                          "id", "deep", "tokens"]))
             + b"\x91" + token)
    before = state(live_server)
    peer.send_raw(frame)
    reply = peer.recv()
    if reply["type"] == "error":
        assert reply["code"] in {"bad_frame", "invalid", "too_large"}, reply
        assert state(live_server) == before
        return
    assert reply["type"] == "ack", reply
    moved = peer.request(update([{"id": "deep", "x": 400}]))
    assert moved["type"] == "ack", moved
    state(live_server)  # the scene can still be serialized
    ok(peer, {"type": "token.delete", "scene": "arena", "ids": ["deep"]})


def test_bad_hello_after_greeting_is_an_error_not_a_close(peer: Peer) -> None:
    peer.send({"type": "hello", "protocol": 2, "client": "x", "id": 1})
    reply = peer.recv()
    assert reply["type"] == "error" and reply["id"] == 1
    query(peer, "a", "b")


def test_new_connection_after_bad_input_is_fine(live_server: LiveServer, peer: Peer,
                                                peer_factory: PeerFactory) -> None:
    for bad in CASES[:10]:
        peer.send_raw(bad.frame)
        peer.recv()
    peer.close()
    fresh = peer_factory()
    assert query(fresh, "a", "c")["cover"] == "total"



def test_scene_limit(live_server: LiveServer, peer: Peer) -> None:
    for k in range(1, 64):
        ok(peer, {"type": "scene.load", "scene": {"id": f"s{k}", "grid": {"type": 1}}})
    assert len(live_server.core.scenes) == 64
    bad = Bad("65th-scene", mp({"type": "scene.load", "id": "l",
                                "scene": {"id": "s64", "grid": {"type": 1}}}),
              "too_large", "$.scene.id", ("64",), "l")
    check_rejected(live_server, peer, bad)
    assert "s64" not in live_server.core.scenes
    # a scene already held can still be reloaded
    assert ok(peer, {"type": "scene.load", "scene": arena()})["revision"] == 2


def test_ridden_mount_cannot_vanish_or_shrink(live_server: LiveServer, peer: Peer) -> None:
    """A rider's mount is part of the scene's consistency: deleting it, or making it no
    larger than its rider, is rejected naming the batch item, and changes nothing."""
    ok(peer, create([{"id": "h", "x": 0, "y": 600, "width": 2, "height": 2, "size": "large"},
                     {"id": "k", "x": 0, "y": 600, "size": "medium",
                      "flags": {"covercast": {"mount": "h"}}}]))
    check_rejected(live_server, peer, Bad(
        "delete-ridden-mount",
        mp({"type": "token.delete", "scene": "arena", "ids": ["h"], "id": "d"}),
        INVALID, "$.ids[0]", ("'h'", "'k'"), "d"))
    check_rejected(live_server, peer, Bad(
        "shrink-ridden-mount", mp(update([{"id": "h", "size": "medium"}])),
        INVALID, "$.tokens[0]", ("'h'", "'k'", "medium"), "u"))
    # Dismounting first makes both fine.
    ok(peer, update([{"id": "k", "flags": {"covercast": {"-=mount": None}}}]))
    ok(peer, {"type": "token.delete", "scene": "arena", "ids": ["h"]})
