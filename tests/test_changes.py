"""server/changes.py alone: `SceneChanges` on a state file, without a Core or a
connection. A change is in the store before it is installed; one the check refuses, or the
store cannot take, leaves the scene (and the file) as they were; the scene built ahead is
taken only when it was built from the very value held; an unknown scene is named with the
loaded ones; an unloaded scene is gone from the file too."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgpack
import pytest

from server import ahead as ahead_reading
from server import durable
from server import scene as scenes
from server.changes import SceneChanges
from server.errors import ClientError, ErrorCode
from server.messages import SceneLoad, parse_request
from server.roles import WRITE_TYPES
from server.store import Store
from tests.test_hostile_input import fill
from tests.test_incremental import _change, _scene


def _nothing(scene: scenes.Scene) -> None:
    pass


def _request(message: dict[str, Any]) -> Any:
    return parse_request(message)


def _batch(changes: SceneChanges, message: dict[str, Any]) -> scenes.Scene:
    request = _request(message)
    build, kind, field_name = ahead_reading.BATCHES[type(request)]
    items = getattr(request, field_name)
    return changes.change(request.scene, lambda s: build(s, kind, items), (kind, items),
                          _nothing)


def _stored(path: Path, sid: str = "s") -> scenes.Scene:
    store = Store(path)
    try:
        return durable.restore(store, sid)
    finally:
        store.close()


def test_every_change_is_stored_before_it_is_installed(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    changes = SceneChanges(Store(path))
    rng = random.Random(1)
    load = _request(_scene(rng, "dnd35"))
    assert isinstance(load, SceneLoad)
    assert changes.load(load, _nothing) is changes.scenes["s"]
    for step in range(20):
        message = _change(rng, changes, step)
        if message["type"] == "scene.load":
            continue
        after = _batch(changes, message)
        assert after is changes.scenes["s"] and after.revision == step + 2
        assert _stored(path) == after, step


def test_a_refused_change_leaves_the_scene_and_the_file_as_they_were(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    changes = SceneChanges(Store(path))
    rng = random.Random(2)
    changes.load(_request(_scene(rng, "pf2")), _nothing)
    before = changes.scenes["s"]

    def refuse(scene: scenes.Scene) -> None:
        raise ClientError(ErrorCode.TOO_LARGE, "$: no")

    move = {"type": "token.update", "scene": "s", "tokens": [{"id": "t1", "x": 0}]}
    request = _request(move)
    with pytest.raises(ClientError, match="no"):
        changes.change("s", lambda s: scenes.update(s, "tokens", request.tokens),
                       ("tokens", request.tokens), refuse)
    assert changes.scenes["s"] is before and _stored(path) == before
    fill(changes.store)  # the disk is full
    many = {"type": "token.create", "scene": "s",  # more than the free space in its pages
            "tokens": [{"id": f"n{k}", "x": 0, "y": 0, "name": "x" * 250} for k in range(50)]}
    with pytest.raises(ClientError) as refused:
        _batch(changes, many)
    assert refused.value.code is ErrorCode.UNAVAILABLE
    assert "disk full" in refused.value.message
    assert changes.scenes["s"] is before and _stored(path) == before


def test_the_scene_built_ahead_is_taken_only_from_its_very_base(tmp_path: Path) -> None:
    changes = SceneChanges(Store(tmp_path / "s.sqlite3"))
    rng = random.Random(3)
    changes.load(_request(_scene(rng, "dnd35")), _nothing)
    move = {"type": "token.update", "scene": "s", "tokens": [{"id": "t1", "x": 300}]}
    read = ahead_reading.read(msgpack.packb(move), False, WRITE_TYPES, dict(changes.scenes),
                              changes.stager(), rows=changes.keep)
    assert read.built and read.rows is not None
    changes.begin(read)
    taken = _batch(changes, move)
    changes.end(read)
    assert taken is read.scene  # the value built ahead, not a second build
    # Built ahead from a value another change has replaced since: built again.
    read = ahead_reading.read(msgpack.packb(move), False, WRITE_TYPES, dict(changes.scenes))
    _batch(changes, {"type": "token.update", "scene": "s", "tokens": [{"id": "t2", "x": 0}]})
    changes.begin(read)
    again = _batch(changes, move)
    changes.end(read)
    assert again is not read.scene and again.revision == 4
    assert again.tokens["t2"].x == 0 and again.tokens["t1"].x == 300


def test_an_unknown_scene_is_named_with_the_loaded_ones(tmp_path: Path) -> None:
    changes = SceneChanges(Store(tmp_path / "s.sqlite3"))
    changes.load(_request(_scene(random.Random(4), "dnd35")), _nothing)
    with pytest.raises(ClientError) as refused:
        changes.get("elsewhere")
    assert refused.value.code is ErrorCode.UNKNOWN_SCENE
    assert refused.value.message == "$.scene: no scene 'elsewhere' is loaded (loaded: s)"


def test_an_unloaded_scene_is_gone_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    changes = SceneChanges(Store(path))
    changes.load(_request(_scene(random.Random(5), "dnd35")), _nothing)
    gone = changes.unload("s")
    assert gone.id == "s" and "s" not in changes.scenes
    assert Store(path).scene_ids() == []
    assert SceneChanges(Store(path)).restore() == []


def test_a_store_in_memory_keeps_no_scene() -> None:
    changes = SceneChanges(Store())
    assert not changes.keep and changes.stager() is None
    changes.load(_request(_scene(random.Random(6), "dnd35")), _nothing)
    assert changes.store.scene_ids() == []
