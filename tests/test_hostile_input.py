"""Hostile input on the sans-I/O Core (issue 16): lone UTF-16 surrogates anywhere in a JSON
message, integers beyond what any field takes, out-of-range ruleset options, a viewer's
write that is also malformed, and a state store that cannot be written (disk full). Each
is refused with a clear error naming the path, never `internal`, and changes nothing; the
replies can always be encoded, in JSON and in msgpack."""

from __future__ import annotations

import copy
import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import msgpack
import pytest

from server.session import Close, Core, Send
from server.store import Store, StoreError

MAX_INT = 2 ** 63 - 1  # the largest integer of a message

LAKE: dict[str, Any] = {
    "_id": "lake",
    "grid": {"type": 1, "size": 100, "distance": 5, "units": "ft"},
    "walls": [{"_id": "w0", "c": [0, 300, 300, 300]}],
    "tokens": [
        {"_id": "diver", "name": "Diver", "x": 100, "y": 100},
        {"_id": "shark", "name": "Shark", "x": 300, "y": 100},
        {"_id": "gull", "name": "Gull \U0001F426", "x": 500, "y": 500},
    ],
    "regions": [{"id": "water", "kind": "water", "surface": 10,
                 "points": [0, 0, 400, 0, 400, 200, 0, 200]}],
}


def new_core(store: Store | None = None, **tokens: Any) -> Core:
    return Core(store=store, seed=1, **tokens)


def frame(message: dict[str, Any], binary: bool) -> bytes | str:
    if binary:
        data: bytes = msgpack.packb(message)
        return data
    return json.dumps(message)


def reply(core: Core, conn: int, data: bytes | str) -> dict[str, Any]:
    """The one reply to a frame, decoded (also proving it could be encoded)."""
    out = core.drain(core.receive(conn, data))
    sends = [o for o in out if isinstance(o, Send) and o.conn == conn]
    assert sends, out
    got = sends[0].frame
    decoded: dict[str, Any] = (json.loads(got) if isinstance(got, str)
                               else msgpack.unpackb(got, raw=False))
    return decoded


def greet(core: Core, binary: bool = False, token: str | None = None,
          role: str | None = None) -> int:
    conn = core.connect()
    hello: dict[str, Any] = {"type": "hello", "protocol": 1, "client": "pytest"}
    if token is not None:
        hello["token"] = token
    if role is not None:
        hello["role"] = role
    assert reply(core, conn, frame(hello, binary))["type"] == "welcome"
    return conn


def loaded(store: Store | None = None, ruleset: str = "pf2", **tokens: str) -> tuple[Core, int]:
    core = new_core(store, **tokens)
    conn = greet(core, token=tokens.get("access_token"))
    msg = {"type": "scene.load", "scene": copy.deepcopy(LAKE), "ruleset": ruleset, "id": 1}
    assert reply(core, conn, frame(msg, False))["type"] == "ack"
    return core, conn


def snapshot(core: Core) -> bytes:
    data: bytes = msgpack.packb({sid: s.snapshot() for sid, s in sorted(core.scenes.items())})
    return data


def every_reader_works(core: Core, conn: int) -> None:
    """scene.get, subscribe and area.query answer in both encodings (nothing poisoned)."""
    for binary in (False, True):
        for msg, kind in (
                ({"type": "scene.get", "scene": "lake"}, "scene"),
                ({"type": "subscribe", "scene": "lake"}, "annotations"),
                ({"type": "area.query", "scene": "lake",
                  "template": {"t": "circle", "x": 100, "y": 100, "distance": 20}},
                 "area.result"),
                ({"type": "unsubscribe", "scene": "lake"}, "ack")):
            got = reply(core, conn, frame(msg, binary))
            assert got["type"] == kind, got


# -- lone surrogates ----------------------------------------------------------------------

# Raw JSON texts: json.dumps would escape a lone surrogate the same way, but written out
# the cases read as what a client sends. `\\ud83d` alone is what JavaScript's slice leaves
# of an emoji.
SURROGATES = [
    ('{"type": "scene.get", "scene": "lake", "id": "q\\ud800"}', "$.id"),
    ('{"type": "scene.get", "scene": "la\\udc00ke"}', "$.scene"),
    ('{"type": "scene.get", "scene": "lake", "\\ud800": 1}', '$["\\ud800"]'),
    ('{"type": "sce\\ud800ne.get", "scene": "lake"}', "$.type"),
    ('{"type": "cover.query", "scene": "lake", "attacker": "diver", "target": "shark\\udfff"}',
     "$.target"),
    ('{"type": "token.update", "scene": "lake", "tokens": [{"_id": "diver", "x": 0},'
     ' {"_id": "shark", "name": "Shark \\ud83d"}]}', "$.tokens[1].name"),
    ('{"type": "token.update", "scene": "lake", "tokens": [{"_id": "diver", '
     '"flags": {"other-module": {"a\\ud800b": 1}}}]}',
     '$.tokens[0].flags.other-module["a\\ud800b"]'),
    ('{"type": "token.create", "scene": "lake", "tokens": [{"_id": "x", "x": 0, "y": 0,'
     ' "texture": {"src": ["ok", "\\udc00"]}}]}', "$.tokens[0].texture.src[1]"),
    ('{"type": "scene.load", "ruleset": "realms", "options": {"obscuredPenalty\\ud800": 1},'
     ' "scene": {"_id": "lake", "grid": {"type": 1}}}', '$.options["obscuredPenalty\\ud800"]'),
    ('{"type": "turn.end", "scene": "lake", "token": "diver\\ud800"}', "$.token"),
]


@pytest.mark.parametrize(("text", "path"), SURROGATES)
def test_a_lone_surrogate_is_refused_as_invalid_naming_the_path(text: str, path: str) -> None:
    core, conn = loaded()
    before = snapshot(core)
    got = reply(core, conn, text)
    assert got["type"] == "error", got
    assert got["code"] == "invalid", got
    assert got["path"] == path, got
    assert got["message"].startswith(path), got
    assert "surrogate" in got["message"]
    assert "id" not in got  # an id with a surrogate cannot be echoed; the others had none
    assert snapshot(core) == before
    every_reader_works(core, conn)


def test_a_gm_load_whose_token_name_ends_in_half_an_emoji_leaves_the_scene_as_it_was() -> None:
    core, conn = loaded()
    before = snapshot(core)
    scene = copy.deepcopy(LAKE)
    scene["tokens"][2]["name"] = "Gull \ud83d"  # "Gull 🐦".slice(0, -1) in JavaScript
    scene["tokens"][2]["x"] = 0
    text = json.dumps({"type": "scene.load", "scene": scene, "ruleset": "pf2", "id": "l"})
    assert "\\ud83d" in text
    got = reply(core, conn, text)
    assert (got["code"], got["path"], got["id"]) == ("invalid", "$.scene.tokens[2].name", "l")
    assert snapshot(core) == before
    every_reader_works(core, conn)


def test_a_surrogate_before_hello_closes_with_a_policy_violation_not_a_crash() -> None:
    core = new_core()
    conn = core.connect()
    out = core.receive(conn, '{"type": "hello", "protocol": 1, "client": "x\\ud800"}')
    assert len(out) == 1 and isinstance(out[0], Close), out
    assert out[0].code == 1008
    assert "$.client" in out[0].reason and "surrogate" in out[0].reason
    out[0].reason.encode()  # a close reason is UTF-8 on the wire


def test_msgpack_text_that_is_not_utf8_is_a_bad_frame() -> None:
    """msgpack `str` is UTF-8: the bytes of a surrogate (CESU-8 ED A0 80) do not decode."""
    core, conn = loaded()
    msg = msgpack.packb({"type": "scene.get", "scene": "lake"})
    bad = msg.replace(b"\xa4lake", b"\xa7la\xed\xa0\x80ke")
    assert bad != msg
    got = reply(core, conn, bad)
    assert got["code"] == "bad_frame", got


# -- numbers beyond every field's range -------------------------------------------------

BIG = [  # msgpack carries integers down to -2**63 and up to 2**64 - 1; JSON any
    ({"type": "scene.get", "scene": "lake", "id": 2 ** 64 - 1}, "$.id", (False, True)),
    ({"type": "scene.get", "scene": "lake", "id": MAX_INT + 1}, "$.id", (False, True)),
    ({"type": "token.update", "scene": "lake",
      "tokens": [{"_id": "diver", "sort": 2 ** 63}]}, "$.tokens[0].sort", (False, True)),
    ({"type": "token.update", "scene": "lake",
      "tokens": [{"_id": "diver", "flags": {"m": {"n": -(2 ** 63) - 1}}}]},
     "$.tokens[0].flags.m.n", (False,)),
    ({"type": "scene.load", "ruleset": "pf2",
      "scene": {**LAKE, "grid": {"type": 1, "alpha": 2 ** 64 - 1}}}, "$.scene.grid.alpha",
     (False, True)),
    ({"type": "scene.load", "ruleset": "pf2",
      "scene": {**LAKE, "regions": [{**LAKE["regions"][0], "elevation": 10 ** 30}]}},
     "$.scene.regions[0].elevation", (False,)),
]


@pytest.mark.parametrize(("message", "path", "encodings"), BIG)
def test_integers_beyond_64_bits_are_refused_anywhere(message: dict[str, Any], path: str,
                                                      encodings: tuple[bool, ...]) -> None:
    """Also in the Foundry fields Covercast keeps without reading (a region's elevation, the
    grid's alpha): stored, they would make every msgpack `scene.get` fail to encode."""
    core, conn = loaded()
    before = snapshot(core)
    for binary in encodings:
        got = reply(core, conn, frame(message, binary))
        assert (got["code"], got["path"]) == ("invalid", path), got
        assert "64-bit" in got["message"]
    assert snapshot(core) == before
    every_reader_works(core, conn)


def test_ignored_fields_kept_by_the_scene_still_encode_at_the_bounds() -> None:
    core, conn = loaded()
    scene = {**copy.deepcopy(LAKE), "grid": {"type": 1, "alpha": -(2 ** 63)}}
    scene["regions"][0]["elevation"] = MAX_INT
    msg = {"type": "scene.load", "scene": scene, "ruleset": "pf2"}
    assert reply(core, conn, frame(msg, True))["type"] == "ack"
    every_reader_works(core, conn)


def test_the_largest_integer_still_works_as_an_id() -> None:
    core, conn = loaded()
    for binary in (False, True):
        got = reply(core, conn, frame({"type": "scene.get", "scene": "lake",
                                       "id": MAX_INT}, binary))
        assert got["type"] == "scene" and got["id"] == MAX_INT


@pytest.mark.parametrize(("options", "path"), [
    ({"obscuredPenalty": 10 ** 15}, "$.options.obscuredPenalty"),
    ({"obscuredPenalty": 101}, "$.options.obscuredPenalty"),
    ({"obscuredPenalty": -1}, "$.options.obscuredPenalty"),
    ({"vicinityFt": 1e29}, "$.options.vicinityFt"),
    ({"vicinityFt": -5}, "$.options.vicinityFt"),
])
def test_realms_numeric_options_have_a_range(options: dict[str, Any], path: str) -> None:
    core, conn = loaded(ruleset="realms")
    before = snapshot(core)
    msg = {"type": "scene.load", "scene": copy.deepcopy(LAKE), "ruleset": "realms",
           "options": options}
    for binary in (False, True):
        got = reply(core, conn, frame(msg, binary))
        assert (got["code"], got["path"]) == ("invalid", path), got
    assert snapshot(core) == before
    every_reader_works(core, conn)


def test_every_numeric_option_lists_its_range_in_welcome() -> None:
    core = new_core()
    conn = core.connect()
    welcome = reply(core, conn, json.dumps({"type": "hello", "protocol": 1, "client": "t"}))
    numeric = [o for r in welcome["rulesets"] for o in r["options"]
               if o["type"] in ("int", "float")]
    assert numeric
    for o in numeric:
        assert o["min"] <= o["default"] <= o["max"], o
    realms = next(r for r in welcome["rulesets"] if r["name"] == "realms")
    assert {o["name"]: (o["min"], o["max"]) for o in realms["options"] if "min" in o} == {
        "obscuredPenalty": (0, 100), "vicinityFt": (0, 1000)}


def test_hello_protocol_is_bounded() -> None:
    core = new_core()
    conn = core.connect()
    out = core.receive(conn, json.dumps({"type": "hello", "protocol": 70000, "client": "t"}))
    assert isinstance(out[0], Close) and "$.protocol" in out[0].reason, out


# -- the role check comes first -----------------------------------------------------------

@pytest.mark.parametrize("message", [
    {"type": "token.update", "scene": "lake", "tokens": [{"_id": "diver", "x": "far"}]},
    {"type": "token.update", "scene": "lake", "tokens": "not a list"},
    {"type": "scene.load", "scene": {"_id": "lake"}, "bogus": 1},
    {"type": "wall.delete", "scene": "nowhere", "ids": []},
    {"type": "turn.end", "scene": "lake", "token": "diver", "critical_hits": -1},
    {"type": "token.create", "scene": "lake", "tokens": [{"name": "x\ud800"}]},
])
def test_a_viewer_write_that_also_fails_the_schema_is_forbidden(message: dict[str, Any]) -> None:
    core, gm = loaded(access_token="g", player_token="p")
    viewer = greet(core, token="p")
    before = snapshot(core)
    for binary in (False, True):
        if binary and "\ud800" in json.dumps(message, ensure_ascii=False):
            continue  # msgpack cannot carry a lone surrogate
        got = reply(core, viewer, frame({**message, "id": "w"}, binary))
        assert (got["code"], got["path"], got["id"]) == ("forbidden", "$.type", "w"), got
        assert "'player'" in got["message"]
    assert snapshot(core) == before
    # The gm still gets the schema's answer.
    got = reply(core, gm, frame(message, False))
    assert got["code"] != "forbidden", got


# -- a state store that cannot be written -------------------------------------------------

def turn_end(core: Core, conn: int, binary: bool = False,
             token: str = "diver") -> dict[str, Any]:
    msg = {"type": "turn.end", "scene": "lake", "token": token, "breathing": False,
           "id": "t"}
    return reply(core, conn, frame(msg, binary))


def fill(store: Store) -> None:
    """Make the store's disk full for real: sqlite may not grow the file past its pages."""
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")
    # Fill the free space of the last pages too, so that any next write needs a new one.
    k = 0
    for size in (2000, 200, 20, 1):
        with pytest.raises(sqlite3.Error, match="full"):
            while True:
                k += 1
                store._db.execute("INSERT INTO breath VALUES ('filler', ?, ?)",
                                  (str(k), "x" * size))


def test_a_full_disk_answers_unavailable_logs_once_and_recovers(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = Store(tmp_path / "state.sqlite3")
    core, gm = loaded(store)
    watcher = greet(core)
    sub = reply(core, watcher, frame({"type": "subscribe", "scene": "lake"}, True))
    assert sub["type"] == "annotations"
    first = turn_end(core, gm)
    assert first["type"] == "breath", first
    air = first["breath"][0]["air"]
    core.drain([])
    fill(store)
    caplog.set_level(logging.INFO)
    caplog.clear()
    # The shark has no stored air yet: its first turn end needs a new row, and a page.
    for binary in (False, True, False):
        out = core.drain(core.receive(gm, frame({"type": "turn.end", "scene": "lake",
                                                "token": "shark", "breathing": False,
                                                "id": "t"}, binary)))
        assert [o.conn for o in out if isinstance(o, Send)] == [gm], out  # no push
        got = (msgpack.unpackb(out[0].frame) if binary  # type: ignore[union-attr]
               else json.loads(out[0].frame))  # type: ignore[union-attr]
        assert (got["code"], got["id"]) == ("unavailable", "t"), got
        assert got["message"].startswith("the state store cannot be written: disk full"), got
        assert "the turn end was not applied" in got["message"]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in caplog.records]
    assert "disk full" in errors[0].getMessage() and not errors[0].exc_info
    # Nothing was applied: the shark's air is still full.
    got = reply(core, gm, frame({"type": "breath.get", "scene": "lake", "token": "shark"},
                                False))
    assert got["breath"][0]["air"] == got["breath"][0]["maxAir"] == air + 1, got
    assert Store(tmp_path / "state.sqlite3").get_breath("lake", "shark") is None
    # Space returns: the next turn end is stored and pushed, and the recovery logged.
    store._db.execute("PRAGMA max_page_count = 1073741823")
    out = core.drain(core.receive(gm, frame({"type": "turn.end", "scene": "lake",
                                            "token": "shark", "breathing": False}, False)))
    assert [o.conn for o in out if isinstance(o, Send)] == [gm, watcher], out
    assert json.loads(out[0].frame)["breath"][0]["air"] == air  # type: ignore[union-attr]
    assert any("works again" in r.getMessage() for r in caplog.records)
    assert Store(tmp_path / "state.sqlite3").get_breath("lake", "shark") is not None


def test_a_store_whose_folder_became_a_file_answers_unavailable_plainly(
        tmp_path: Path) -> None:
    """The state file's folder is replaced by a file while the server runs: sqlite (in
    WAL mode) would go on writing to the moved file, which no restart would find."""
    folder = tmp_path / "state"
    store = Store(folder / "state.sqlite3")
    core, gm = loaded(store)
    assert turn_end(core, gm)["type"] == "breath"
    folder.rename(tmp_path / "moved")  # the file with its -wal and -shm
    folder.write_text("not a folder")
    got = turn_end(core, gm)
    assert got["code"] == "unavailable", got
    assert got["message"].startswith("the state store cannot be written: the state file "
                                     f"is no longer at {folder / 'state.sqlite3'}"), got
    assert "Errno" not in got["message"]
    folder.unlink()
    (tmp_path / "moved").rename(folder)
    assert turn_end(core, gm)["type"] == "breath"


def test_a_state_path_under_a_file_is_reported_plainly(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file")
    with pytest.raises(StoreError) as info:
        Store(tmp_path / "notes.txt" / "covercast" / "state.sqlite3")
    message = str(info.value)
    assert f"{tmp_path / 'notes.txt'} is a file, not a folder" in message, message
    assert "Errno" not in message
    with pytest.raises(StoreError, match="is a folder"):
        Store(tmp_path)


def test_a_store_that_cannot_be_read_answers_unavailable(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "s.sqlite3")
    core, gm = loaded(store)

    class Broken:
        in_transaction = False

        def execute(self, *args: Any) -> Any:
            raise sqlite3.OperationalError("disk I/O error")

    real = store._db
    monkeypatch.setattr(store, "_db", Broken())
    got = reply(core, gm, frame({"type": "breath.get", "scene": "lake"}, True))
    assert got["code"] == "unavailable", got
    assert got["message"].startswith("the state store cannot be read: disk I/O error")
    monkeypatch.setattr(store, "_db", real)
    got = reply(core, gm, frame({"type": "breath.get", "scene": "lake"}, True))
    assert got["type"] == "breath", got


# -- regions that cross themselves (found by the long fuzz run) ---------------------------

BOWTIE = [0, 600, 300, 800, 300, 600, 0, 700]  # edges cross: no inside to compute with


@pytest.mark.parametrize(("region", "path"), [
    ({"id": "lake", "kind": "water", "surface": 5, "points": BOWTIE},
     "$.scene.regions[0].points"),
    ({"id": "rubble", "kind": "cover", "points": BOWTIE}, "$.scene.regions[0].points"),
    ({"_id": "fog", "shapes": [{"type": "rectangle", "x": 0, "y": 0, "width": 50, "height": 50},
                               {"type": "polygon", "points": BOWTIE}],
      "flags": {"covercast": {"kind": "obscuring", "penalty": 2}}},
     "$.scene.regions[0].shapes[1].points"),
])
def test_a_region_whose_edges_cross_is_refused_and_poisons_nothing(region: dict[str, Any],
                                                                    path: str) -> None:
    core, conn = loaded()
    watcher = greet(core)
    assert reply(core, watcher, frame({"type": "subscribe", "scene": "lake"}, True))[
        "type"] == "annotations"
    before = snapshot(core)
    scene = {**copy.deepcopy(LAKE), "regions": [region]}
    got = reply(core, conn, frame({"type": "scene.load", "scene": scene, "ruleset": "pf2",
                                   "id": "l"}, False))
    assert (got["code"], got["path"], got["id"]) == ("invalid", path, "l"), got
    assert "not simple" in got["message"] and "Self-intersection" in got["message"]
    assert snapshot(core) == before
    every_reader_works(core, conn)
    # The subscriber is told of nothing, and its next delta still computes.
    move = {"type": "token.update", "scene": "lake", "tokens": [{"_id": "shark", "x": 200}]}
    out = core.drain(core.receive(conn, frame(move, False)))
    pushed = [json.loads(o.frame) if isinstance(o.frame, str) else msgpack.unpackb(o.frame)
              for o in out if isinstance(o, Send) and o.conn == watcher]
    assert pushed and all(p["type"] == "annotations" for p in pushed), pushed


def test_tokens_created_in_a_scene_watched_while_empty_reach_its_subscriber() -> None:
    """Found by the long fuzz run: a subscription to a scene without tokens, then tokens
    created, made every later delta and subscription of the scene `internal`."""
    core, gm = loaded()
    watcher = greet(core)
    empty = {**copy.deepcopy(LAKE), "tokens": []}
    assert reply(core, gm, frame({"type": "scene.load", "scene": empty, "ruleset": "pf2"},
                                 False))["type"] == "ack"
    assert reply(core, watcher, frame({"type": "subscribe", "scene": "lake"}, False))[
        "annotations"] == []
    create = {"type": "token.create", "scene": "lake", "tokens": LAKE["tokens"][:2]}
    out = core.drain(core.receive(gm, frame(create, False)))
    pushed = [json.loads(o.frame) for o in out if isinstance(o, Send) and o.conn == watcher
              and isinstance(o.frame, str)]
    assert len(pushed) == 1 and pushed[0]["type"] == "annotations", pushed
    assert {(a["attacker"], a["target"]) for a in pushed[0]["annotations"]} == {
        ("diver", "shark"), ("shark", "diver")}
    other = greet(core)
    assert reply(core, other, frame({"type": "subscribe", "scene": "lake"}, True))[
        "type"] == "annotations"
