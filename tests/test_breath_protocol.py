"""Drowning over the wire, against a real server on 127.0.0.1: `turn.end` replies and the
`breath` entries subscribers get, breathing computed from water, server rolls replayable from
their seed, bad input leaving the state as it was, and the state surviving a reconnect and a
server restart on the same store file. Also the water region's validation."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from covercast.cli import default_state_path
from server.store import Store, StoreError
from tests.conftest import LiveServer, Peer

PeerFactory = Callable[..., Peer]


def lake_scene(scene_id: str = "lake") -> dict[str, Any]:
    """A lake 10 ft deep (surface at elevation 10); a diver on its bottom without a swim
    Speed, a Constitution of +1 (6 rounds) and Fortitude +4; a ranger on the shore."""
    return {
        "id": scene_id, "grid": {"type": 1, "size": 100, "distance": 5, "units": "ft"},
        "regions": [{"id": "water", "kind": "water", "surface": 10,
                     "points": [0, 0, 1000, 0, 1000, 1000, 0, 1000]}],
        "tokens": [
            {"id": "diver", "x": 300, "y": 300, "disposition": 1,
             "flags": {"covercast": {"con": 1, "fortitude": 4}}},
            {"id": "ranger", "x": 1200, "y": 300, "disposition": 1},
        ],
    }


def load(peer: Peer, scene: dict[str, Any] | None = None) -> None:
    reply = peer.request({"type": "scene.load", "ruleset": "degrees",
                          "scene": scene or lake_scene()})
    assert reply["type"] == "ack", reply


def turn_end(peer: Peer, token: str = "diver", scene: str = "lake",
             **what: Any) -> dict[str, Any]:
    reply = peer.request({"type": "turn.end", "scene": scene, "token": token, **what})
    assert reply["type"] == "breath", reply
    (entry,) = reply["breath"]
    assert entry["token"] == token
    out: dict[str, Any] = entry
    return out


def air_of(peer: Peer, token: str = "diver", scene: str = "lake") -> dict[str, Any]:
    reply = peer.request({"type": "breath.get", "scene": scene, "token": token})
    assert reply["type"] == "breath", reply
    out: dict[str, Any] = reply["breath"][0]
    return out


def test_turn_end_replies_with_the_new_air_and_subscribers_get_it(
        peer_factory: PeerFactory) -> None:
    gm, watcher = peer_factory(), peer_factory()
    load(gm)
    full = watcher.request({"type": "subscribe", "scene": "lake"})
    assert full["full"] and "breath" not in full  # nobody has spent air yet
    entry = turn_end(gm, attacked=True, id=7)
    assert (entry["air"], entry["maxAir"], entry["suffocating"]) == (4, 6, False)
    assert [s["event"] for s in entry["steps"]] == ["end_of_turn"]
    push = watcher.recv()
    assert push["type"] == "annotations" and not push["full"], push
    assert push["annotations"] == [] and push["breath"] == [entry]
    # The next turn end pushes only the token that changed again.
    entry = turn_end(gm, spoke=True, rolls={"d20": 16})
    assert [s["event"] for s in entry["steps"]] == ["spoke", "out_of_air", "save"]
    assert entry["steps"][-1]["degree"] == "success"  # 16 + 4 against DC 20
    assert (entry["air"], entry["unconscious"], entry["nextDc"], entry["nextDice"]) == (
        0, True, 25, 2)
    assert watcher.recv()["breath"] == [entry]


def test_breathing_is_computed_from_the_water(peer_factory: PeerFactory) -> None:
    gm = peer_factory()
    load(gm)
    assert turn_end(gm)["air"] == 5  # under water: holding its breath
    ranger = turn_end(gm, token="ranger")  # on the shore: breathing, air simply full
    assert (ranger["air"], [s["event"] for s in ranger["steps"]]) == (5, ["breathe"])
    # The diver swims up until its head is above the surface: it breathes again.
    assert gm.request({"type": "token.update", "scene": "lake",
                       "tokens": [{"id": "diver", "elevation": 5}]})["type"] == "ack"
    entry = turn_end(gm)
    assert (entry["air"], entry["steps"][0]["event"]) == (6, "breathe")
    # The client's word wins over the water.
    assert turn_end(gm, breathing=False)["air"] == 5


def test_server_rolls_are_replayable_from_the_reported_seed(peer_factory: PeerFactory) -> None:
    gm = peer_factory()
    load(gm)
    entry = turn_end(gm, spoke=True, fortitude=0)  # out of air, saves at once: no dice given
    seed = entry["seed"]
    save = entry["steps"][-1]
    rng = random.Random(seed)
    assert save["d20"] == rng.randint(1, 20)
    if save["degree"] == "failure":
        assert save["dice"] == [rng.randint(1, 10)]
    # The same seed given back in another scene gives the same outcome.
    load(gm, lake_scene("again"))
    replay = turn_end(gm, scene="again", spoke=True, fortitude=0, seed=seed)
    assert replay["steps"] == entry["steps"] and replay["seed"] == seed
    # Dice the client rolled: no seed reported.
    assert "seed" not in turn_end(gm, rolls={"d20": 20}, fortitude=0)


def _suffocating(gm: Peer) -> dict[str, Any]:
    load(gm)
    turn_end(gm, spoke=True, rolls={"d20": 20})
    return air_of(gm)


@pytest.mark.parametrize(("message", "code", "path"), [
    ({"scene": "nowhere"}, "unknown_scene", "$.scene"),
    ({"token": "ghost"}, "unknown_token", "$.token"),
    ({"attacked": 1}, "invalid", "$.attacked"),
    ({"criticalHits": -1}, "invalid", "$.criticalHits"),
    ({"rolls": {"d20": 21}}, "invalid", "$.rolls.d20"),
    ({"rolls": {"d20": 0}}, "invalid", "$.rolls.d20"),
    ({"rolls": {"d20": 5, "d10": [11]}}, "invalid", "$.rolls.d10[0]"),
    ({"rolls": {"d20": 15, "d10": [3]}}, "invalid", "$.rolls.d10"),  # 19 vs DC 25: 2d10
    ({"con": 99}, "invalid", "$.con"),
    ({"hp": -3}, "invalid", "$.hp"),
    ({"breath": True}, "invalid", "$.breath"),
    ({"seed": -1}, "invalid", "$.seed"),
])
def test_bad_turn_end_is_an_error_and_changes_nothing(
        peer_factory: PeerFactory, message: dict[str, Any], code: str, path: str) -> None:
    gm, watcher = peer_factory(), peer_factory()
    before = _suffocating(gm)
    watcher.request({"type": "subscribe", "scene": "lake"})
    request = {"type": "turn.end", "scene": "lake", "token": "diver", "id": "x", **message}
    reply = gm.request(request)
    assert (reply["type"], reply["code"], reply["path"], reply["id"]) == (
        "error", code, path, "x"), reply
    assert air_of(gm) == before
    assert gm.request({"type": "breath.get", "scene": "lake"})["breath"] == [before]
    with pytest.raises(TimeoutError):
        watcher.recv(timeout=0.3)  # nothing changed, nothing pushed


def test_breath_get(peer_factory: PeerFactory) -> None:
    gm = peer_factory()
    load(gm)
    fresh = air_of(gm)  # never spent: full air from its Constitution flag, not stored
    assert (fresh["air"], fresh["maxAir"], fresh.get("steps", [])) == (
        6, 6, [])
    assert gm.request({"type": "breath.get", "scene": "lake"})["breath"] == []
    entry = turn_end(gm)
    assert gm.request({"type": "breath.get", "scene": "lake"})["breath"] == [entry]
    err = gm.request({"type": "breath.get", "scene": "lake", "token": "nobody"})
    assert (err["type"], err["code"], err["path"]) == ("error", "unknown_token", "$.token")
    err = gm.request({"type": "breath.get", "scene": "elsewhere"})
    assert (err["type"], err["code"]) == ("error", "unknown_scene")


def test_reconnect_keeps_the_air(peer_factory: PeerFactory) -> None:
    first = peer_factory()
    load(first)
    entry = turn_end(first, attacked=True)
    first.close()
    second = peer_factory()
    assert air_of(second) == entry
    full = second.request({"type": "subscribe", "scene": "lake"})
    assert full["breath"] == [entry]


def test_server_restart_keeps_the_air(tmp_path: Path) -> None:
    state = str(tmp_path / "state.sqlite3")
    server = LiveServer(state=state).start()
    try:
        peer = Peer.open(server.url)
        peer.hello()
        load(peer)
        entry = turn_end(peer, attacked=True, criticalHits=1)
        assert entry["air"] == 3
        peer.close()
    finally:
        server.stop()
    server = LiveServer(state=state).start()
    try:
        peer = Peer.open(server.url)
        peer.hello()
        load(peer)  # the VTT streams its scene again; the air was waiting for it
        assert air_of(peer) == entry
        assert peer.request({"type": "subscribe", "scene": "lake"})["breath"] == [entry]
        assert turn_end(peer)["air"] == 2
        peer.close()
    finally:
        server.stop()


def test_store_refuses_a_file_that_is_no_store(tmp_path: Path) -> None:
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot use as a state store"):
        Store(junk)


def test_default_state_path_follows_xdg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", "/somewhere/state")
    assert default_state_path() == "/somewhere/state/covercast/state.sqlite3"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_state_path().endswith("/.local/state/covercast/state.sqlite3")


@pytest.mark.parametrize(("region", "path"), [
    ({"id": "w", "kind": "water", "points": [0, 0, 100, 0, 100, 100]},
     "$.scene.regions[0].surface"),
    ({"id": "w", "kind": "cover", "surface": 3, "points": [0, 0, 100, 0, 100, 100]},
     "$.scene.regions[0].surface"),
    ({"id": "w", "kind": "water", "surface": "deep", "points": [0, 0, 100, 0, 100, 100]},
     "$.scene.regions[0].surface"),
    ({"id": "w", "shapes": [{"type": "rectangle", "width": 100, "height": 100}],
      "flags": {"covercast": {"kind": "water"}}},
     "$.scene.regions[0].flags.covercast.surface"),
    ({"id": "w", "surface": 4, "shapes": [{"type": "rectangle", "width": 100, "height": 100}],
      "flags": {"covercast": {"kind": "water", "surface": 4}}},
     "$.scene.regions[0].surface"),
])
def test_bad_water_regions(peer_factory: PeerFactory, region: dict[str, Any],
                           path: str) -> None:
    gm = peer_factory()
    scene = lake_scene()
    scene["regions"] = [region]
    reply = gm.request({"type": "scene.load", "ruleset": "degrees", "scene": scene})
    assert (reply["type"], reply["code"], reply["path"]) == ("error", "invalid", path), reply
    assert gm.request({"type": "scene.get", "scene": "lake"})["code"] == "unknown_scene"


@pytest.mark.parametrize(("patch", "path"), [
    ({"flags": {"covercast": {"underwater": "yes"}}}, "$.scene.flags.covercast.underwater"),
    ({"tokens": [{"id": "t", "x": 0, "y": 0, "flags": {"covercast": {"swim": 30}}}]},
     "$.scene.tokens[0].flags.covercast.swim"),
    ({"tokens": [{"id": "t", "x": 0, "y": 0, "flags": {"covercast": {"con": 1.5}}}]},
     "$.scene.tokens[0].flags.covercast.con"),
])
def test_bad_aquatic_flags(peer_factory: PeerFactory, patch: dict[str, Any],
                           path: str) -> None:
    gm = peer_factory()
    reply = gm.request({"type": "scene.load", "ruleset": "degrees",
                        "scene": {**lake_scene(), **patch}})
    assert (reply["type"], reply["code"], reply["path"]) == ("error", "invalid", path), reply


def test_underwater_scene_flag_over_the_wire(peer_factory: PeerFactory) -> None:
    gm = peer_factory()
    scene = {**lake_scene(), "regions": [], "flags": {"covercast": {"underwater": True},
                                                      "other-module": {"x": 1}}}
    load(gm, scene)
    reply = gm.request({"type": "cover.query", "scene": "lake", "attacker": "diver",
                        "target": "ranger", "attack": "ranged"})
    assert reply["annotation"]["flags"]["ranged_auto_miss_slashing_bludgeoning"] is True
    mods = reply["annotation"]["modifiers"]
    assert {"stat": "resistance", "value": 5, "kind": "environment",
            "reason": "in water: resistance 5 to fire", "damage": ["fire"]} in mods
    assert turn_end(gm, token="ranger")["air"] == 4  # nobody breathes in an underwater scene
    state = gm.request({"type": "scene.get", "scene": "lake"})["scene"]
    assert state["flags"] == {"covercast": {"underwater": True}}  # other modules' not kept


def test_welcome_says_which_rulesets_are_aquatic(peer_factory: PeerFactory) -> None:
    peer = peer_factory(greet=False)
    welcome = peer.hello()
    aquatic = {r["name"]: r["aquatic"] for r in welcome["rulesets"]}
    assert (aquatic["degrees"], aquatic["dnd35"], aquatic["pf1"]) == (True, False, False)


def test_client_library_turn_end_and_breath(live_server: LiveServer) -> None:
    import asyncio

    from covercast.client import Client, CovercastError

    async def run() -> None:
        async with await Client.open(live_server.url) as client:
            await client.load_scene(lake_scene(), ruleset="degrees")
            entry = await client.turn_end("lake", "diver", cast_spell=True)
            assert entry.air == 4
            assert await client.breath("lake", "diver") == [entry]
            assert await client.breath("lake") == [entry]
            with pytest.raises(CovercastError, match="unknown_token"):
                await client.turn_end("lake", "nobody")

    asyncio.run(run())


def test_serve_refuses_a_state_file_that_is_no_store(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from covercast.cli import main

    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"not a database, not at all" * 100)
    assert main(["serve", "--no-demo", "--port", "0", "--state", str(junk)]) == 1
    assert "cannot use as a state store" in capsys.readouterr().err
