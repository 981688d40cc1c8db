"""server/drowning.py alone, without a Core: each token's air is read from the store once,
a turn end is stored before it is kept or returned (a store that fails leaves the air as it
was), and a viewer never sees a hidden token's air."""

from __future__ import annotations

import random

import pytest

from server import scene as scenes
from server.drowning import Air
from server.errors import ClientError
from server.messages import BreathGet, SceneLoad, TurnEnd, parse_request
from server.store import Store, StoreUnavailable

LOAD = parse_request({"type": "scene.load", "scene": {
    "_id": "lake", "grid": {"type": 1, "size": 100, "distance": 5},
    "tokens": [{"_id": "diver", "x": 0, "y": 0, "flags": {"covercast": {"con": 2}}},
               {"_id": "spy", "x": 200, "y": 0, "hidden": True}]}})
assert isinstance(LOAD, SceneLoad)
SCENE = scenes.load(LOAD.scene, "dnd35", {}, None)


class CountingStore(Store):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.failing = False

    def scene_breath(self, scene: str) -> dict[str, str]:
        self.reads += 1
        return super().scene_breath(scene)

    def put_breath(self, scene: str, token: str, state: str) -> None:
        if self.failing:
            raise StoreUnavailable("written", "disk full")
        super().put_breath(scene, token, state)


def test_a_turn_held_underwater_spends_air_and_is_stored() -> None:
    store = CountingStore()
    air = Air(store, random.Random(1))
    out = air.turn_end(SCENE, TurnEnd("lake", "diver", breathing=False))
    assert out.air == out.max_air - 1
    # Stored, so another Air on the same store (a restarted server) reads it back.
    again = Air(store, random.Random(2)).get(SCENE, BreathGet("lake", "diver"))
    assert again.breath[0].air == out.air
    assert store.reads == 2  # once per Air, not once per request
    air.get(SCENE, BreathGet("lake", "diver"))
    air.get(SCENE, BreathGet("lake"))
    assert store.reads == 2


def test_a_store_that_fails_leaves_the_air_as_it_was() -> None:
    store = CountingStore()
    air = Air(store, random.Random(1))
    first = air.turn_end(SCENE, TurnEnd("lake", "diver", breathing=False))
    store.failing = True
    with pytest.raises(ClientError) as err:
        air.turn_end(SCENE, TurnEnd("lake", "diver", breathing=False))
    assert err.value.code.value == "unavailable" and "disk full" in err.value.message
    assert air.get(SCENE, BreathGet("lake", "diver")).breath[0] is first


def test_a_viewer_never_sees_a_hidden_tokens_air() -> None:
    air = Air(CountingStore(), random.Random(1))
    air.turn_end(SCENE, TurnEnd("lake", "spy", breathing=False))
    assert [b.token for b in air.get(SCENE, BreathGet("lake")).breath] == ["spy"]
    assert air.get(SCENE, BreathGet("lake"), viewer=True).breath == []
    with pytest.raises(ClientError) as err:
        air.get(SCENE, BreathGet("lake", "spy"), viewer=True)
    assert err.value.code.value == "unknown_token"
