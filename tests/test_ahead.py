"""Frames read ahead of the Core (server/ahead.py): what the Core does with a frame read on
another thread is exactly what it does reading it itself, and a change built ahead from a
scene value that is no longer current is built again from the current one, so changes
keep the Core's order."""

from __future__ import annotations

import gc
from typing import Any

import msgpack

from server.session import Core

HELLO = {"type": "hello", "protocol": 1, "client": "t"}
SCENE: dict[str, Any] = {
    "_id": "s", "grid": {"type": 1, "size": 100, "distance": 5},
    "walls": [{"_id": "w", "c": [250, 0, 250, 300]}],
    "tokens": [{"_id": "a", "x": 0, "y": 100}, {"_id": "b", "x": 500, "y": 100}],
}


def _core() -> tuple[Core, int]:
    core = Core()
    conn = core.connect()
    core.receive(conn, msgpack.packb(HELLO))
    core.receive(conn, msgpack.packb({"type": "scene.load", "id": 1, "scene": SCENE}))
    return core, conn


def _replies(out: list[Any]) -> list[Any]:
    return [msgpack.unpackb(o.frame) for o in out if hasattr(o, "frame")]


def test_a_change_read_ahead_is_the_change_read_by_the_core() -> None:
    frame = msgpack.packb({"type": "token.update", "id": 2, "scene": "s",
                           "tokens": [{"_id": "a", "x": 100}]})
    plain, conn = _core()
    expected = _replies(plain.receive(conn, frame))
    core, conn = _core()
    ahead = core.ahead(conn, frame)
    assert ahead is not None and ahead.scene is not None
    assert _replies(core.receive(conn, frame, ahead)) == expected
    assert core.scenes["s"] is ahead.scene  # the scene built ahead was taken as it is
    assert core.scenes["s"].snapshot() == plain.scenes["s"].snapshot()


def test_a_change_built_ahead_of_another_change_is_built_again_in_order() -> None:
    """Two clients: the second moves `a` while the first's update is read ahead; the
    first's update then applies to the moved scene (both changes kept, revision 3)."""
    core, conn = _core()
    other = core.connect()
    core.receive(other, msgpack.packb(HELLO))
    first = msgpack.packb({"type": "wall.update", "id": 2, "scene": "s",
                           "walls": [{"_id": "w", "c": [350, 0, 350, 300]}]})
    ahead = core.ahead(conn, first)
    assert ahead is not None and ahead.scene is not None
    core.receive(other, msgpack.packb({"type": "token.update", "id": 3, "scene": "s",
                                       "tokens": [{"_id": "a", "x": 100}]}))
    (reply,) = _replies(core.receive(conn, first, ahead))
    assert reply["type"] == "ack" and reply["revision"] == 3, reply
    state = core.scenes["s"]
    assert state.tokens["a"].x == 100 and state.walls["w"].c[0] == 350
    assert state is not ahead.scene


def test_a_refused_change_read_ahead_is_refused_the_same_way() -> None:
    frame = msgpack.packb({"type": "token.update", "id": 2, "scene": "s",
                           "tokens": [{"_id": "nobody", "x": 100}]})
    plain, conn = _core()
    expected = _replies(plain.receive(conn, frame))
    core, conn = _core()
    before = core.scenes["s"]
    ahead = core.ahead(conn, frame)
    assert ahead is not None and ahead.refused is not None
    got = _replies(core.receive(conn, frame, ahead))
    assert got == expected and got[0]["code"] == "unknown_token", got
    assert core.scenes["s"] is before


def test_a_viewers_write_read_ahead_is_forbidden_before_anything_else() -> None:
    core = Core(access_token="gm", player_token="pl")
    gm, player = core.connect(), core.connect()
    core.receive(gm, msgpack.packb({**HELLO, "token": "gm"}))
    core.receive(player, msgpack.packb({**HELLO, "token": "pl"}))
    core.receive(gm, msgpack.packb({"type": "scene.load", "id": 1, "scene": SCENE}))
    frame = msgpack.packb({"type": "token.update", "id": 2, "scene": "s",
                           "tokens": [{"_id": "a", "x": 100, "bogus": {"x": 1}}]})
    ahead = core.ahead(player, frame)
    assert ahead is not None and ahead.scene is None
    (reply,) = _replies(core.receive(player, frame, ahead))
    assert reply["code"] == "forbidden", reply
    assert core.scenes["s"].tokens["a"].x == 0


def test_a_frame_read_ahead_for_another_frame_is_not_used() -> None:
    core, conn = _core()
    a = msgpack.packb({"type": "token.update", "id": 2, "scene": "s",
                       "tokens": [{"_id": "a", "x": 100}]})
    b = msgpack.packb({"type": "token.update", "id": 3, "scene": "s",
                       "tokens": [{"_id": "a", "x": 200}]})
    ahead = core.ahead(conn, a)
    (reply,) = _replies(core.receive(conn, b, ahead))
    assert reply["id"] == 3 and core.scenes["s"].tokens["a"].x == 200


def test_a_refused_frame_read_ahead_leaves_no_garbage_for_the_collector() -> None:
    """A refused request is freed as soon as it is answered: nothing it made is left for
    the garbage collector, which may not run for a minute (the heap is frozen after large
    reads). Raising the error read ahead once put it in a reference cycle with the frame
    holding it, which kept a refused 5,000-token batch alive until then."""
    many = [{"_id": f"t{k}", "x": 0, "y": 0} for k in range(2000)]
    frames = [
        msgpack.packb({"type": "token.create", "id": 2, "scene": "s", "tokens": many,
                       "bogus": 1}),  # refused by the schema
        msgpack.packb({"type": "token.create", "id": 3, "scene": "s",
                       "tokens": [*many, many[0]]}),  # refused while building the scene
        msgpack.packb({"type": "token.update", "id": 4, "scene": "s",
                       "tokens": [{"_id": "nobody", "x": 1}]}),
        b"\xa2\xed\xa0",  # not UTF-8
    ]
    core, conn = _core()
    for frame in frames:  # warm: first calls fill caches
        core.receive(conn, frame, core.ahead(conn, frame))
    gc.unfreeze()  # a large read freezes the heap (server/ahead.py): look at all of it
    gc.collect()
    gc.disable()
    try:
        for frame in frames:
            ahead = core.ahead(conn, frame)
            assert ahead is not None and (ahead.error or ahead.refused) is not None
            (reply,) = _replies(core.receive(conn, frame, ahead))
            assert reply["type"] == "error", reply
            del ahead
        gc.unfreeze()
        found = gc.collect()
    finally:
        gc.enable()
    assert found == 0, f"{found} objects were left in reference cycles"
