"""Scenes survive a restart (issue 17 item 1), on the sans-I/O Core: every accepted change
is in the state store before its ack, a Core built on the same file has every scene back at
the same revision with the same documents in the same order (so the same annotations), a
move writes one document's row, a store that cannot be written refuses the change and
leaves the scene as it was, `scene.unload` deletes the scene for good and the file
shrinks, a damaged file is refused at start-up with a clear error. The real server process
killed with SIGKILL is in tests/test_restart.py."""

from __future__ import annotations

import json
import os
import random
import sqlite3
from pathlib import Path
from typing import Any

import msgpack
import pytest

from server.messages import SceneLoad, parse_request
from server.session import Core
from server.store import SCHEMA_VERSION, Store, StoreError
from tests.test_hostile_input import fill, frame, greet, reply
from tests.test_incremental import _change, _scene


def table(core: Core, sid: str = "s") -> list[dict[str, Any]]:
    """The scene's annotations as a new subscriber gets them (its full set), in order."""
    conn = greet(core, binary=True)
    full = reply(core, conn, frame({"type": "subscribe", "scene": sid, "lines": True}, True))
    assert full["type"] == "annotations" and full["full"], full
    core.disconnect(conn)
    return list(full["annotations"])


def send(core: Core, gm: int, message: dict[str, Any]) -> dict[str, Any]:
    return reply(core, gm, frame(message, True))


def started(path: Path, **kw: Any) -> tuple[Core, int]:
    core = Core(store=Store(path), seed=1, **kw)
    return core, greet(core, binary=True)


def test_every_change_is_stored_and_a_restart_brings_the_scene_back(tmp_path: Path) -> None:
    """Random changes of every kind (moves, new, resized and deleted tokens, new, moved and
    deleted walls, doors, reloads): after each ack a Core built on the file holds the same
    scene, documents in the same order, at the same revision."""
    for seed in (1, 2, 3):
        path = tmp_path / f"state{seed}.sqlite3"
        rng = random.Random(seed)
        core, gm = started(path)
        assert send(core, gm, _scene(rng, "dnd35"))["type"] == "ack"
        for step in range(40):
            message = _change(rng, core, step) if step % 13 != 12 else _scene(rng, "pf2")
            got = send(core, gm, message)
            assert got["type"] == "ack", (seed, step, got)
            live = core.scenes["s"]
            other = Store(path)  # another reader of the same file, as after a restart
            back = Core(store=other).scenes["s"]
            other.close()
            assert back == live, (seed, step, message)
            assert back.revision == got["revision"]
            assert list(back.tokens) == list(live.tokens)  # the order clients see
            assert list(back.walls) == list(live.walls)
            assert json.dumps(back.snapshot()) == json.dumps(live.snapshot())
        before = table(core)
        core.store.close()
        again, _ = started(path)
        assert table(again) == before, seed
        again.store.close()


def test_a_move_writes_one_row_and_the_revision(tmp_path: Path) -> None:
    """A move on a 20,000-wall scene writes the moved token's document and the scene's
    revision, never the scene."""
    core, gm = started(tmp_path / "s.sqlite3")
    walls = [{"id": f"w{k}", "c": [k % 200 * 20, k // 200 * 20, k % 200 * 20 + 10,
                                   k // 200 * 20]} for k in range(20000)]
    scene = {"id": "big", "grid": {"type": 1}, "walls": walls,
             "tokens": [{"id": "a", "x": 0, "y": 0}, {"id": "b", "x": 500, "y": 500}]}
    assert send(core, gm, {"type": "scene.load", "scene": scene})["type"] == "ack"
    db = core.store._db
    writes = db.total_changes
    got = send(core, gm, {"type": "token.update", "scene": "big",
                          "tokens": [{"id": "a", "x": 100}]})
    assert got == {"type": "ack", "scene": "big", "revision": 2}, got
    assert db.total_changes - writes == 2  # the token's row, the scene's revision
    rows = db.execute("SELECT id, body FROM doc WHERE scene = 'big' AND kind = 'tokens' "
                      "ORDER BY seq").fetchall()
    assert [(i, json.loads(b)["x"]) for i, b in rows] == [("a", 100), ("b", 500)]
    writes = db.total_changes
    got = send(core, gm, {"type": "wall.delete", "scene": "big", "ids": ["w7", "w9"]})
    assert got["revision"] == 3 and db.total_changes - writes == 3


def test_a_full_disk_refuses_the_change_and_keeps_the_scene(tmp_path: Path) -> None:
    """The in-memory scene never runs ahead of the store: a change the store cannot take
    is refused `unavailable`, the scene (and the file) stay as they were, subscribers hear
    nothing, and once space returns the same change is accepted at the next revision."""
    path = tmp_path / "s.sqlite3"
    core, gm = started(path)
    rng = random.Random(4)
    assert send(core, gm, _scene(rng, "dnd35"))["type"] == "ack"
    watcher = greet(core, binary=True)
    assert send(core, watcher, {"type": "subscribe", "scene": "s"})["type"] == "annotations"
    before = core.scenes["s"]
    reload = _scene(rng, "pf2")
    reload["scene"]["walls"] += [{"id": f"x{k}", "c": [k, 0, k, 9]} for k in range(400)]
    fill(core.store)
    changes = [
        # Batches larger than any free space left in the file's pages.
        {"type": "token.create", "scene": "s",
         "tokens": [{"id": f"new{k}", "x": 0, "y": 0, "name": "x" * 250} for k in range(50)]},
        {"type": "wall.create", "scene": "s",
         "walls": [{"id": f"nw{k}", "c": [k, 0, k, 900]} for k in range(400)]},
        reload,
    ]
    for change in changes:
        out = core.drain(core.receive(gm, frame({**change, "id": 5}, True)))
        assert [o.conn for o in out] == [gm], out  # no delta for the watcher
        got = msgpack.unpackb(out[0].frame)  # type: ignore[union-attr]
        assert (got["type"], got["code"], got["id"]) == ("error", "unavailable", 5), got
        assert got["message"].startswith("the state store cannot be written: disk full")
        assert core.scenes["s"] is before
        assert Core(store=Store(path)).scenes["s"] == before
    core.store._db.execute("PRAGMA max_page_count = 1073741823")
    got = send(core, gm, changes[0])
    assert got == {"type": "ack", "scene": "s", "revision": before.revision + 1}
    assert "new49" in Core(store=Store(path)).scenes["s"].tokens


def test_a_read_only_store_refuses_loads_changes_and_unloads(tmp_path: Path) -> None:
    """The file turned read-only (permissions do not stop root: the connection is
    reopened read-only): every write is `unavailable`, naming why, nothing changes."""
    path = tmp_path / "s.sqlite3"
    core, gm = started(path)
    assert send(core, gm, _scene(random.Random(5), "dnd35"))["type"] == "ack"
    before = core.scenes["s"]
    writable = core.store._db
    core.store._db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None,
                                     check_same_thread=False)
    for change, what in (
            ({"type": "token.update", "scene": "s", "tokens": [{"id": "t1", "x": 0}]},
             "the change was not applied"),
            ({"type": "scene.unload", "scene": "s"}, "the scene stays loaded"),
            (_scene(random.Random(6), "pf2"), "the scene was not loaded")):
        got = send(core, gm, change)
        assert (got["type"], got["code"]) == ("error", "unavailable"), got
        assert "read-only (SQLITE_READONLY)" in got["message"], got
        assert f"{what}, try again later" in got["message"], got
        assert core.scenes["s"] is before
    core.store._db.close()
    core.store._db = writable
    assert send(core, gm, {"type": "scene.unload", "scene": "s"})["type"] == "ack"


def test_unload_forgets_the_scene_for_good_and_the_file_shrinks(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    core, gm = started(path)
    walls = [{"id": f"w{k}", "c": [k, 0, k, 50], "flags": {"covercast": {"cover": "low"}}}
             for k in range(5000)]
    small = {"id": "keep", "grid": {"type": 1}, "tokens": [{"id": "a", "x": 0, "y": 0}]}
    for scene in ({"id": "big", "grid": {"type": 1}, "walls": walls,
                   "tokens": [{"id": "diver", "x": 0, "y": 0}]}, small):
        assert send(core, gm, {"type": "scene.load", "scene": scene})["type"] == "ack"
    assert send(core, gm, {"type": "turn.end", "scene": "big", "token": "diver",
                           "breathing": False})["type"] == "breath"
    core.store.compact()
    full = os.path.getsize(path)
    got = send(core, gm, {"type": "scene.unload", "scene": "big"})
    assert got == {"type": "ack", "scene": "big", "revision": 1}
    assert os.path.getsize(path) < full / 4, (os.path.getsize(path), full)
    assert os.path.getsize(f"{path}-wal") == 0  # folded into the file and truncated
    db = core.store._db
    for t in ("doc", "scene", "breath"):
        assert db.execute(f"SELECT count(*) FROM {t} WHERE scene = 'big'").fetchone() == (0,)
    core.store.close()
    again, gm = started(path)
    assert sorted(again.scenes) == ["keep"]
    # Loaded again, the scene starts over at revision 1 with full air.
    reloaded = send(again, gm, {"type": "scene.load", "scene": {**small, "id": "big"}})
    assert reloaded["revision"] == 1
    assert again.store.scene_breath("big") == {}


DEMO = {"type": "scene.load", "ruleset": "dnd35",
        "scene": {"id": "demo", "grid": {"type": 1},
                  "tokens": [{"id": "goblin", "x": 0, "y": 0}]}}


def test_the_preloaded_demo_keeps_the_stored_one(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    core, gm = started(path)
    demo: SceneLoad = parse_request(DEMO)  # type: ignore[assignment]
    assert core.preload(demo) is True
    send(core, gm, {"type": "token.update", "scene": "demo",
                    "tokens": [{"id": "goblin", "x": 300}]})
    core.store.close()
    core, gm = started(path)
    assert core.preload(demo) is False  # the gm's changes are kept
    assert core.scenes["demo"].revision == 2 and core.scenes["demo"].tokens["goblin"].x == 300
    assert core.preload(demo, keep_stored=False) is True  # --fresh-demo
    assert core.scenes["demo"].revision == 3 and core.scenes["demo"].tokens["goblin"].x == 0


def test_a_torn_file_is_refused_at_start_up(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    core, gm = started(path)
    walls = [{"id": f"w{k}", "c": [k, 0, k, 50]} for k in range(3000)]
    send(core, gm, {"type": "scene.load", "scene": {"id": "s", "grid": {"type": 1},
                                                    "walls": walls}})
    core.store.close()  # the WAL folded into the file
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])  # torn: its last third never written
    with pytest.raises(StoreError) as info:
        Store(path)
    assert "the state file is damaged (torn or corrupt)" in str(info.value), info.value
    assert "move it away" in str(info.value)


def test_a_damaged_scene_row_is_refused_at_start_up_naming_the_scene(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    core, gm = started(path)
    send(core, gm, _scene(random.Random(7), "dnd35"))
    core.store._db.execute("UPDATE doc SET body = '{\"id\": \"t1\", \"x\": \"far\"}' "
                           "WHERE kind = 'tokens' AND id = 't1'")
    core.store.close()
    with pytest.raises(StoreError, match=r"stored scene 's' is damaged: .*\$\[.*\]\.x"):
        Core(store=Store(path))


def test_a_scene_another_process_wrote_is_not_overwritten(tmp_path: Path) -> None:
    """Two servers on one file (each scene must have one owner; if two think they own
    it): the second writer's change is refused rather than overwriting the first's."""
    path = tmp_path / "s.sqlite3"
    one, gm1 = started(path)
    send(one, gm1, _scene(random.Random(8), "dnd35"))
    two, gm2 = started(path)
    move = {"type": "token.update", "scene": "s", "tokens": [{"id": "t1", "x": 0}]}
    assert send(one, gm1, move)["revision"] == 2
    got = send(two, gm2, move)
    assert got["code"] == "unavailable", got
    assert "is at revision 2 in the store, not 1 as this server holds it" in got["message"]
    assert two.scenes["s"].revision == 1


def test_a_version_1_store_is_upgraded_keeping_the_air(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE breath (scene TEXT NOT NULL, token TEXT NOT NULL, "
               "state TEXT NOT NULL, PRIMARY KEY (scene, token))")
    db.execute("INSERT INTO breath VALUES ('lake', 'diver', '{\"air\": 3}')")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    store = Store(path)
    assert store.get_breath("lake", "diver") == '{"air": 3}'
    assert store._db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    assert store._db.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # incremental
    assert store._db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert store.scene_ids() == []


def test_the_durable_bench_runs_and_restores_its_scene() -> None:
    """bench/durable.py on a small scene: every configuration moves, the file's scene comes
    back equal, unload shrinks the file (the figures themselves are the bench's)."""
    from bench.durable import CONFIGS, report, run

    result = run(tokens=8, walls=40, moves=4, seed=2)
    assert set(result["configs"]) == set(CONFIGS)
    assert result["restored_equal"] is True
    assert result["file_bytes_after_unload"] < result["file_bytes"]
    assert "| full |" in report(result)


def test_air_is_fsynced_even_when_scene_changes_are_not(tmp_path: Path) -> None:
    """With the default `normal` sync a scene change commits to the WAL, while a token's
    air (state only Covercast holds) is committed with synchronous=FULL."""
    store = Store(tmp_path / "s.sqlite3")
    assert store.sync == "normal"
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    store.put_breath("lake", "diver", "{}")
    begin = statements.index("BEGIN IMMEDIATE")
    assert "PRAGMA synchronous = FULL" in statements[:begin], statements
    assert statements[-1] == "PRAGMA synchronous = NORMAL", statements
    assert store._db.execute("PRAGMA synchronous").fetchone() == (1,)
    statements.clear()
    store.put_scene("s", 1, "{}", {"tokens": [("a", "{}")]}, None)
    assert not any("synchronous" in s for s in statements), statements


def test_a_core_may_bring_back_only_the_scenes_it_owns(tmp_path: Path) -> None:
    """A worker sharing the file with others (`restore=False`, then `restore(ids)`)."""
    path = tmp_path / "s.sqlite3"
    core, gm = started(path)
    for sid in ("a", "b", "c"):
        scene = {"id": sid, "grid": {"type": 1}, "tokens": [{"id": "t", "x": 0, "y": 0}]}
        assert send(core, gm, {"type": "scene.load", "scene": scene})["type"] == "ack"
    worker = Core(store=Store(path), restore=False)
    assert worker.scenes == {}
    assert worker.restore(["c", "a"]) == ["c", "a"]
    assert sorted(worker.scenes) == ["a", "c"] and worker.scenes["a"] == core.scenes["a"]
    with pytest.raises(ValueError, match="already loaded: 'a'"):
        worker.restore(["a"])
    with pytest.raises(StoreError, match="no stored scene 'nowhere'"):
        worker.restore(["nowhere"])


def _walled(sid: str, walls: int, shift: int = 0) -> dict[str, Any]:
    return {"type": "scene.load", "scene": {
        "id": sid, "grid": {"type": 1},
        "walls": [{"id": f"w{k}", "c": [k % 200 * 20 + shift, k // 200 * 20,
                                        k % 200 * 20 + 10 + shift, k // 200 * 20]}
                  for k in range(walls)],
        "tokens": [{"id": "a", "x": 0, "y": 0}, {"id": "b", "x": 500, "y": 500}]}}


def _sent_ahead(core: Core, gm: int, data: bytes | str) -> tuple[dict[str, Any], Any]:
    """A frame read ahead (as the server does for large ones), then handled: the reply
    and what was read ahead."""
    read = core.ahead(gm, data)
    assert read is not None
    out = core.drain(core.receive(gm, data, read))
    got: dict[str, Any] = msgpack.unpackb(out[0].frame)  # type: ignore[union-attr]
    return got, read


def _rows(store: Store, sid: str) -> dict[int, int]:
    """How many document rows each generation of a scene has in the file."""
    return {int(g): int(n) for g, n in store._db.execute(
        "SELECT gen, count(*) FROM doc WHERE scene = ? GROUP BY gen", (sid,))}


def test_a_large_load_is_written_ahead_and_the_core_thread_writes_one_row(
        tmp_path: Path) -> None:
    """A 20,000-wall `scene.load` read ahead has its documents written ahead too, as a
    generation nobody reads; the Core's thread then writes the scene's row only (one short
    transaction, whatever the size). The scene comes back after a restart; a load that
    replaces it leaves the old generation to the sweep, which deletes it."""
    path = tmp_path / "s.sqlite3"
    core, gm = started(path)
    statements: list[str] = []
    core.store._db.set_trace_callback(statements.append)
    got, read = _sent_ahead(core, gm, frame(_walled("big", 20000), True))
    assert got["type"] == "ack" and read.staged is not None, got
    assert not [s for s in statements if "INTO doc" in s], statements
    assert [s for s in statements if s.startswith("INSERT INTO scene")]
    core.store._db.set_trace_callback(None)
    assert Core(store=Store(path)).scenes["big"] == core.scenes["big"]
    first = read.staged
    got, read = _sent_ahead(core, gm, frame(_walled("big", 20000, shift=1), True))
    assert got == {"type": "ack", "scene": "big", "revision": 2}, got
    assert _rows(core.store, "big") == {first: 20002, read.staged: 20002}
    assert Core(store=Store(path)).scenes["big"] == core.scenes["big"]  # the new one only
    core.sweep()
    assert _rows(core.store, "big") == {read.staged: 20002}
    back = Core(store=Store(path)).scenes["big"]
    assert back == core.scenes["big"] and back.revision == 2
    move = {"type": "token.update", "scene": "big", "tokens": [{"id": "a", "x": 100}]}
    assert send(core, gm, move)["revision"] == 3
    assert Core(store=Store(path)).scenes["big"] == core.scenes["big"]


def test_a_load_written_ahead_from_a_scene_changed_meanwhile_is_not_taken(
        tmp_path: Path) -> None:
    """The scene moved on between the frame's reading ahead and its handling: the Core
    loads it again itself (the order of changes is the Core's), writes it inline, and the
    generation written ahead is swept, never read."""
    path = tmp_path / "s.sqlite3"
    core, gm = started(path)
    assert send(core, gm, _walled("big", 3000))["type"] == "ack"
    data = frame(_walled("big", 3000, shift=2), True)
    read = core.ahead(gm, data)
    assert read is not None and read.staged is not None
    move = {"type": "token.update", "scene": "big", "tokens": [{"id": "a", "x": 100}]}
    assert send(core, gm, move)["revision"] == 2
    out = core.drain(core.receive(gm, data, read))
    assert msgpack.unpackb(out[0].frame)["revision"] == 3  # type: ignore[union-attr]
    assert read.staged in _rows(core.store, "big")
    assert Core(store=Store(path)).scenes["big"] == core.scenes["big"]
    core.sweep()
    assert _rows(core.store, "big") == {0: 3002}
    back = Core(store=Store(path)).scenes["big"]
    assert back == core.scenes["big"] and back.walls["w0"].c[0] == 2


def test_a_store_in_memory_holds_no_scene() -> None:
    """":memory:" keeps nothing after the process: scenes are not written to it (their
    cost would buy nothing), each token's air still is."""
    core = Core(store=Store(), seed=1)
    gm = greet(core, binary=True)
    assert send(core, gm, _walled("big", 50))["type"] == "ack"
    assert core.store._db.execute("SELECT count(*) FROM doc").fetchone() == (0,)
    assert core.store.scene_ids() == []
    assert core.ahead(gm, frame(_walled("big", 50, 1), True)).staged is None  # type: ignore[union-attr]


def test_a_version_2_store_is_upgraded_keeping_its_scenes(tmp_path: Path) -> None:
    path = tmp_path / "v2.sqlite3"
    core, gm = started(path)
    assert send(core, gm, _walled("old", 30))["type"] == "ack"
    assert send(core, gm, {"type": "token.update", "scene": "old",
                           "tokens": [{"id": "a", "x": 100}]})["revision"] == 2
    want = core.scenes["old"]
    core.store.close()
    # The same file as schema 2 wrote it: no generations, documents keyed by (scene, kind, id).
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript("""
        DROP TABLE stage;
        CREATE TABLE doc2 (scene TEXT NOT NULL, kind TEXT NOT NULL, id TEXT NOT NULL,
            seq INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (scene, kind, id))
            WITHOUT ROWID;
        INSERT INTO doc2 SELECT scene, kind, id, seq, body FROM doc;
        DROP TABLE doc; ALTER TABLE doc2 RENAME TO doc;
        CREATE TABLE scene2 (scene TEXT PRIMARY KEY, revision INTEGER NOT NULL,
            head TEXT NOT NULL);
        INSERT INTO scene2 SELECT scene, revision, head FROM scene;
        DROP TABLE scene; ALTER TABLE scene2 RENAME TO scene;
        PRAGMA user_version = 2;
    """)
    db.close()
    again, gm = started(path)
    assert again.scenes["old"] == want and again.scenes["old"].revision == 2
    assert again.store._db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    assert send(again, gm, {"type": "token.update", "scene": "old",
                            "tokens": [{"id": "b", "x": 0}]})["revision"] == 3
    assert Core(store=Store(path)).scenes["old"] == again.scenes["old"]
