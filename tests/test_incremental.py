"""Incremental recomputation equals full recomputation, change after change.

Random scenes take random changes (moves, new and removed tokens, resized tokens, new,
moved and removed walls, doors opened and closed) through the sans-I/O Core; after every
change the Core's annotations must equal a full evaluation of the scene, and a subscriber
that applies the deltas it receives must hold the same table.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import msgpack
import msgspec
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.session import Core, Send
from server.tables import annotation_out

Key = tuple[str, str, str]


def _scene(rng: random.Random, ruleset: str, grid: int = 1) -> dict[str, Any]:
    walls = []
    for k in range(14):
        x, y = rng.randrange(0, 12) * 100, rng.randrange(0, 12) * 100
        dx, dy = rng.choice([(300, 0), (0, 300), (200, 0), (0, 200), (150, 150), (200, -100)])
        wall: dict[str, Any] = {"id": f"w{k}", "c": [x, y, x + dx, y + dy]}
        if k % 5 == 1:
            wall.update(door=1, ds=rng.choice([0, 1]))
        if k % 7 == 2:
            wall["flags"] = {"covercast": {"cover": "low"}}
        walls.append(wall)
    cells = rng.sample([(x, y) for x in range(12) for y in range(12)], 9)
    tokens = []
    for k, (x, y) in enumerate(cells):
        tokens.append({"id": f"t{k}", "x": x * 100, "y": y * 100,
                       "disposition": rng.choice([-1, 1])})
    tokens[0].update(width=2, height=2, size="large")
    # A lake (surface 8 ft) over a third of the map: aquatic combat for `degrees`.
    lake = {"id": "lake", "kind": "water", "surface": 8,
            "points": [0, 0, 400, 0, 400, 1200, 0, 1200]}
    return {"type": "scene.load", "ruleset": ruleset, "options": {},
            "scene": {"id": "s", "grid": {"type": grid, "size": 100, "distance": 5},
                      "walls": walls, "tokens": tokens, "regions": [lake]}}


def _change(rng: random.Random, core: Any, step: int) -> dict[str, Any]:
    """A random change of scene "s" of `core` (anything holding `scenes`)."""
    scene = core.scenes["s"]
    tokens, walls = list(scene.tokens), list(scene.walls)
    kind = rng.choice(["move", "move", "move", "create", "delete", "resize", "wall",
                       "wall-move", "wall-delete", "door", "swim"])
    if kind == "move" or (kind == "delete" and len(tokens) < 4):
        t = rng.choice(tokens)
        return {"type": "token.update", "scene": "s",
                "tokens": [{"id": t, "x": rng.randrange(0, 12) * 100,
                            "y": rng.randrange(0, 12) * 100,
                            "elevation": rng.choice([0, 0, 5])}]}
    if kind == "swim":
        return {"type": "token.update", "scene": "s",
                "tokens": [{"id": rng.choice(tokens),
                            "flags": {"covercast": {"swim": rng.choice([True, False])}}}]}
    if kind == "create":
        return {"type": "token.create", "scene": "s",
                "tokens": [{"id": f"n{step}", "x": rng.randrange(0, 12) * 100,
                            "y": rng.randrange(0, 12) * 100,
                            "disposition": rng.choice([-1, 1])}]}
    if kind == "delete":
        return {"type": "token.delete", "scene": "s", "ids": [rng.choice(tokens)]}
    if kind == "resize":
        return {"type": "token.update", "scene": "s",
                "tokens": [{"id": rng.choice(tokens), "width": 2, "height": 2,
                            "size": "large"}]}
    if kind == "wall" or not walls:
        x, y = rng.randrange(0, 12) * 100, rng.randrange(0, 12) * 100
        return {"type": "wall.create", "scene": "s",
                "walls": [{"id": f"nw{step}", "c": [x, y, x + 200, y + 100]}]}
    if kind == "wall-move":
        x, y = rng.randrange(0, 12) * 100, rng.randrange(0, 12) * 100
        return {"type": "wall.update", "scene": "s",
                "walls": [{"id": rng.choice(walls), "c": [x, y, x, y + 300]}]}
    if kind == "wall-delete":
        return {"type": "wall.delete", "scene": "s", "ids": [rng.choice(walls)]}
    doors = [w for w in walls if scene.walls[w].door] or walls
    return {"type": "wall.update", "scene": "s",
            "walls": [{"id": rng.choice(doors), "door": 1, "ds": rng.choice([0, 1])}]}


def _full(core: Core) -> dict[Key, Any]:
    scene = core.scenes["s"]
    results = scene.ruleset.annotate(scene.geometry, scene.options)
    return {a.key(): msgspec.to_builtins(annotation_out(a)) for a in results}


def _send(core: Core, conn: int, message: dict[str, Any]) -> dict[int, list[Any]]:
    """Frames each connection gets for one message, deltas resolved at once."""
    out: dict[int, list[Any]] = {}
    for o in core.drain(core.receive(conn, msgpack.packb(message))):
        if isinstance(o, Send) and isinstance(o.frame, bytes):
            out.setdefault(o.conn, []).append(msgpack.unpackb(o.frame))
    return out


def hide_or_show(rng: random.Random, core: Core) -> dict[str, Any]:
    """A gm hiding or showing one of scene "s"'s tokens (maybe as it already is)."""
    token = rng.choice(list(core.scenes["s"].tokens))
    return {"type": "token.update", "scene": "s",
            "tokens": [{"id": token, "hidden": rng.choice([True, False])}]}


def gm_and_viewer(rng: random.Random, ruleset: str) -> tuple[Core, int, int, dict[int, list[Any]]]:
    """A Core with a random scene "s" loaded by a gm, and a player (viewer) too, both
    subscribed to it: the core, the gm's and the viewer's connections, and the frames each
    got from subscribing."""
    core = Core(access_token="g", player_token="p")
    gm = core.connect()
    _send(core, gm, {"type": "hello", "protocol": 1, "client": "t", "token": "g"})
    assert _send(core, gm, _scene(rng, ruleset))[gm][0]["type"] == "ack"
    viewer = core.connect()
    _send(core, viewer, {"type": "hello", "protocol": 1, "client": "t", "token": "p"})
    snapshots = {conn: _send(core, conn, {"type": "subscribe", "scene": "s"})[conn]
                 for conn in (gm, viewer)}
    return core, gm, viewer, snapshots


@pytest.mark.parametrize(("ruleset", "grid"), [
    ("dnd35", 1), ("pf1", 1), ("degrees", 1), ("realms", 1), ("pf2", 1), ("dnd5e", 1),
    # Hex grids (tokens off the hex centres are snapped by Foundry's own offsets).
    ("degrees", 2), ("realms", 3), ("realms", 4), ("degrees", 5), ("pf2", 3)])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_incremental_matches_full(ruleset: str, grid: int, seed: int,
                                  options: dict[str, Any] | None = None) -> None:
    rng = random.Random(seed)
    core = Core()
    gm, viewer = core.connect(), core.connect()
    for conn in (gm, viewer):
        _send(core, conn, {"type": "hello", "protocol": 1, "client": "t"})
    load = _scene(rng, ruleset, grid)
    load["options"] = options or {}
    assert _send(core, gm, load)[gm][0]["type"] == "ack"
    (full,) = _send(core, viewer, {"type": "subscribe", "scene": "s"})[viewer]
    held = {(a["attacker"], a["target"], a["mode"]): a for a in full["annotations"]}
    for step in range(25):
        frames = _send(core, gm, _change(rng, core, step))
        assert frames[gm][0]["type"] == "ack", frames[gm][0]
        current = {k: msgspec.to_builtins(v) for k, v in core.tables.current("s", False).items()}
        assert current == _full(core), f"step {step}"
        # What the viewer was pushed, applied to what it held, is the whole truth too.
        for delta in frames.get(viewer, []):
            assert delta["type"] == "annotations" and not delta["full"]
            assert delta["revision"] == core.scenes["s"].revision
            apply(held, delta)
        assert held == current, f"viewer after step {step}"


@pytest.mark.parametrize("options", [
    {"flanking": True}, {"creatureCover": "half"}, {"creatureCover": "none", "flanking": True}])
@pytest.mark.parametrize("seed", [1, 2])
def test_incremental_matches_full_dnd5e_options(options: dict[str, Any], seed: int) -> None:
    # Flanking (adjacent allies), creatures capped at half cover, and creatures that never
    # count (no mode where creatures in the way count) change what a change can touch.
    test_incremental_matches_full("dnd5e", 1, seed, options)


def apply(held: dict[Key, Any], delta: dict[str, Any]) -> None:
    for key in delta["removed"]:
        held.pop((key[0], key[1], key[2]), None)
    for a in delta["annotations"]:
        held[(a["attacker"], a["target"], a["mode"])] = a


def test_a_bug_while_computing_a_delta_is_reported_not_fatal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    core = Core()
    gm, viewer = core.connect(), core.connect()
    for conn in (gm, viewer):
        _send(core, conn, {"type": "hello", "protocol": 1, "client": "t"})
    _send(core, gm, _scene(random.Random(5), "dnd35"))
    _send(core, viewer, {"type": "subscribe", "scene": "s"})
    ruleset = core.scenes["s"].ruleset

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(type(ruleset), "evaluate", broken)
    frames = _send(core, gm, {"type": "token.update", "scene": "s",
                              "tokens": [{"id": "t1", "x": 0, "y": 0}]})
    assert frames[gm][0]["type"] == "ack"
    (err,) = frames[viewer]
    assert err["type"] == "error" and err["code"] == "internal"
    monkeypatch.undo()
    frames = _send(core, gm, {"type": "token.update", "scene": "s",
                              "tokens": [{"id": "t1", "x": 100, "y": 0}]})
    (delta,) = frames[viewer]
    assert delta["type"] == "annotations" and delta["revision"] == core.scenes["s"].revision


@pytest.mark.parametrize("seed", [4, 5])
def test_shared_delta_frames_fit_every_subscriber(seed: int) -> None:
    # Subscribers at different revisions and with different modes each get a delta that
    # brings exactly their own table to the current one (frames are shared only between
    # subscribers that hold the same table).
    rng = random.Random(seed)
    core = Core()
    gm = core.connect()
    viewers = [core.connect() for _ in range(4)]
    for conn in (gm, *viewers):
        _send(core, conn, {"type": "hello", "protocol": 1, "client": "t"})
    _send(core, gm, _scene(rng, "dnd35"))
    held: dict[int, dict[Key, Any]] = {}
    modes = {viewers[0]: ["melee", "reach", "ranged"], viewers[1]: ["melee", "reach", "ranged"],
             viewers[2]: ["ranged"], viewers[3]: ["melee", "reach", "ranged"]}
    for step in range(12):
        for v in viewers:
            # The last viewer subscribes late, at a different revision from the others.
            if v not in held and (v != viewers[3] or step == 5):
                (full,) = _send(core, v, {"type": "subscribe", "scene": "s",
                                          "modes": modes[v]})[v]
                held[v] = {(a["attacker"], a["target"], a["mode"]): a
                           for a in full["annotations"]}
        # The second viewer reads only every other change (a slow reader): it catches up
        # from an older revision than the first one.
        outputs = core.receive(gm, msgpack.packb(_change(rng, core, step)))
        if step % 2 == 0:
            outputs = [o for o in outputs if getattr(o, "conn", None) != viewers[1]]
        frames: dict[int, list[Any]] = {}
        for o in core.drain(outputs):
            if isinstance(o, Send) and isinstance(o.frame, bytes):
                frames.setdefault(o.conn, []).append(msgpack.unpackb(o.frame))
        current = {k: msgspec.to_builtins(v) for k, v in core.tables.current("s", False).items()}
        for v, table in held.items():
            if v == viewers[1] and step % 2 == 0:
                continue
            for delta in frames.get(v, []):
                apply(table, delta)
            assert table == {k: a for k, a in current.items() if k[2] in modes[v]}, (step, v)
        if step % 2 == 1 and viewers[0] in frames and viewers[3] in frames:
            assert frames[viewers[0]] == frames[viewers[3]]
        # Shared frames lead only to the current state: nothing older is kept alive.
        assert all(held[0] is core.scenes[sid] and len(held[1]) <= 3
                   for sid, held in core._deltas.held.items())


def test_in_the_way_pairs_are_only_those_whose_lines_meet_the_mover() -> None:
    # A creature stepping between two others is in the way of their lines. One stepping
    # onto the corner of their hull (inside the hull bound, on none of the corner lines)
    # is not, with the corner rule's points; without them, the hull bound keeps the pair.
    from dataclasses import replace

    from geometry.incremental import affected
    from geometry.model import CreatureGeom, Grid, GridKind, SceneGeom, Size
    from rulesets.corner import sight_points

    grid = Grid(GridKind.SQUARE, 100, 5, "ft")

    def c(cid: str, col: int, row: int) -> CreatureGeom:
        return CreatureGeom(cid, col * 100, row * 100, 1, 1, Size.MEDIUM, 5.0, 6.0, 0.0, 1,
                            False)

    a, b, far = c("a", 0, 0), c("b", 3, 3), c("far", 0, 9)
    old = SceneGeom(grid, (), (a, b, far, c("m", 8, 8)))
    between = replace(old, creatures=(a, b, far, c("m", 1, 1)))
    corner = replace(old, creatures=(a, b, far, c("m", 2, 0)))
    pair = {("a", "b"), ("b", "a")}
    got = affected(old, between, sight_points)
    assert got is not None and pair <= got.in_the_way and not pair & got.whole
    got = affected(old, corner, sight_points)
    assert got is not None and not pair & (got.whole | got.in_the_way)
    hull = affected(old, corner)
    assert hull is not None and pair <= hull.in_the_way
    # A pair whose annotations no creature in the way can change (already at a degree
    # creatures cannot raise) is left out untested, unless it can change one way round.
    asked: list[list[str]] = []

    def never(ids: Sequence[str]) -> npt.NDArray[np.bool_]:
        asked.append(list(ids))
        return np.zeros((len(ids), len(ids)), dtype=bool)

    def one_way(ids: Sequence[str]) -> npt.NDArray[np.bool_]:
        return np.array([[(p, q) == ("b", "a") for q in ids] for p in ids], dtype=bool)

    got = affected(old, between, sight_points, never)
    assert got is not None and not pair & got.in_the_way
    assert asked == [[c.id for c in between.creatures]]
    got = affected(old, between, sight_points, one_way)
    assert got is not None and pair <= got.in_the_way


def test_shared_delta_frames_carry_each_subscribers_air() -> None:
    # Air changes at a turn end without a new revision, and each subscriber's record of the
    # air it was sent is its own: one that catches up after a turn end must get the air
    # with the annotations even when another subscriber at its revision caught up before
    # it (the frame that one got carried no air), and never get it twice.
    core = Core()
    gm, first, second = core.connect(), core.connect(), core.connect()
    for conn in (gm, first, second):
        _send(core, conn, {"type": "hello", "protocol": 1, "client": "t"})
    _send(core, gm, _scene(random.Random(6), "degrees"))
    for conn in (first, second):
        _send(core, conn, {"type": "subscribe", "scene": "s"})
    move = core.receive(gm, msgpack.packb({"type": "token.update", "scene": "s",
                                           "tokens": [{"id": "t1", "x": 0, "y": 0}]}))
    # Only the first subscriber reads the move's delta now.
    frames = _frames(core.drain([o for o in move if getattr(o, "conn", None) != second]))
    (moved,) = frames[first]
    assert moved["annotations"] and not moved.get("breath")
    turn = core.receive(gm, msgpack.packb({"type": "turn.end", "scene": "s", "token": "t2",
                                           "spoke": True}))
    frames = _frames(core.drain(turn))
    (air,) = frames[first]
    assert [b["token"] for b in air["breath"]] == ["t2"] and not air["annotations"]
    (late,) = frames[second]
    assert [b["token"] for b in late["breath"]] == ["t2"]
    assert late["annotations"] == moved["annotations"]
    # Both have the air now: the next move's frames carry none, and are the same frame.
    frames = _send(core, gm, {"type": "token.update", "scene": "s",
                              "tokens": [{"id": "t1", "x": 100, "y": 0}]})
    assert not frames[first][0].get("breath") and frames[first] == frames[second]


def _frames(outputs: list[Any]) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for o in outputs:
        if isinstance(o, Send) and isinstance(o.frame, bytes):
            out.setdefault(o.conn, []).append(msgpack.unpackb(o.frame))
    return out


@pytest.mark.parametrize("ruleset", ["dnd35", "pf1", "degrees", "realms", "pf2", "dnd5e"])
@pytest.mark.parametrize("seed", [1, 2])
def test_viewers_tables_match_the_visible_scene_change_after_change(ruleset: str,
                                                                     seed: int) -> None:
    """With tokens hidden, a viewer's table is computed partly from the gm's (pairs the
    hidden tokens cannot touch): after every change, hiding and showing included, the gm's
    and a player's pushes leave them holding full evaluations of the scene and of the scene
    without its hidden tokens, and the player's never name a hidden token."""
    from dataclasses import replace

    rng = random.Random(seed)
    core = Core()
    gm, sub_gm, player, lines_player = (core.connect() for _ in range(4))
    _send(core, gm, {"type": "hello", "protocol": 1, "client": "t"})
    _send(core, sub_gm, {"type": "hello", "protocol": 1, "client": "t"})
    for conn in (player, lines_player):
        _send(core, conn, {"type": "hello", "protocol": 1, "client": "t", "role": "player"})
    load = _scene(rng, ruleset)
    for k, token in enumerate(load["scene"]["tokens"]):
        token["hidden"] = k % 3 == 1
    assert _send(core, gm, load)[gm][0]["type"] == "ack"
    held: dict[int, dict[Key, Any]] = {}
    # The player subscribes first, so its table is sometimes wanted before the gm's.
    for conn, lines in ((player, False), (sub_gm, False), (lines_player, True)):
        (full,) = _send(core, conn, {"type": "subscribe", "scene": "s", "lines": lines})[conn]
        held[conn] = {(a["attacker"], a["target"], a["mode"]): a for a in full["annotations"]}

    def truth(hidden_out: bool, lines: bool) -> dict[Key, Any]:
        scene = core.scenes["s"]
        geom = scene.geometry
        if hidden_out:
            geom = replace(geom, creatures=tuple(c for c in geom.creatures if not c.hidden))
        results = scene.ruleset.annotate(geom, scene.options, lines=lines)
        # As the wire carries them (msgpack: a line's ends arrive as lists).
        return {a.key(): msgspec.msgpack.decode(msgspec.msgpack.encode(annotation_out(a)))
                for a in results}

    for step in range(20):
        if rng.random() < 0.3:
            tid = rng.choice(list(core.scenes["s"].tokens))
            change = {"type": "token.update", "scene": "s",
                      "tokens": [{"id": tid, "hidden": not core.scenes["s"].tokens[tid].hidden}]}
        else:
            change = _change(rng, core, step)
        frames = _send(core, gm, change)
        assert frames[gm][0]["type"] == "ack", frames[gm][0]
        hidden = {t.id for t in core.scenes["s"].tokens.values() if t.hidden}
        for conn, hidden_out, lines in ((sub_gm, False, False), (player, True, False),
                                        (lines_player, True, True)):
            for delta in frames.get(conn, []):
                assert delta["type"] == "annotations" and not delta["full"], delta
                if hidden_out:
                    for a in delta["annotations"]:
                        met = {t for line in a.get("lines") or [] for t in line.get("tokens", [])}
                        assert not hidden & ({a["attacker"], a["target"], *a.get("flankers", [])}
                                             | met), (step, a)
                apply(held[conn], delta)
            assert held[conn] == truth(hidden_out, lines), f"{conn} after step {step}"


def test_computed_says_whether_a_subscribers_annotations_wait_to_be_computed() -> None:
    # What the server's fan-out asks before each delta: the gm's table is computed by the
    # first gm subscriber's delta; a player's, with a token hidden, only by a player's.
    core = Core()
    gm, sub, other, player = (core.connect() for _ in range(4))
    for conn in (gm, sub, other):
        _send(core, conn, {"type": "hello", "protocol": 1, "client": "t"})
    _send(core, player, {"type": "hello", "protocol": 1, "client": "t", "role": "player"})
    load = _scene(random.Random(1), "dnd35")
    load["scene"]["tokens"][1]["hidden"] = True
    _send(core, gm, load)
    for conn in (sub, other, player):
        _send(core, conn, {"type": "subscribe", "scene": "s"})
    assert core.computed(gm, "s")  # not subscribed: no delta to get
    out = core.receive(gm, msgpack.packb({"type": "token.update", "scene": "s",
                                          "tokens": [{"id": "t0", "x": 1100, "y": 1100}]}))
    assert [c for c in (sub, other, player) if not core.computed(c, "s")] == [sub, other,
                                                                              player]
    assert core.delta(sub, "s") is not None
    assert core.computed(sub, "s") and core.computed(other, "s")
    assert not core.computed(player, "s")
    assert core.delta(player, "s") is not None and core.computed(player, "s")
    assert len(out) == 4  # the ack and three notices


# -- filtered tables --------------------------------------------------------------------

SIDE_NAMES = {"friendly": 1, "hostile": -1}
_ask = st.fixed_dictionaries({}, optional={
    "attackers": st.lists(st.sampled_from([f"t{k}" for k in range(9)]), min_size=1,
                          max_size=3),
    "targets": st.lists(st.sampled_from([f"t{k}" for k in range(9)]), min_size=1, max_size=4),
    "sides": st.lists(st.sampled_from(sorted(SIDE_NAMES)), min_size=1, max_size=1),
    "modes": st.lists(st.sampled_from(["melee", "reach", "ranged"]), min_size=1, max_size=3,
                      unique=True),
})


def _selected(ask: dict[str, Any], geom: Any, table: dict[Key, Any]) -> dict[Key, Any]:
    """What a subscriber with this ask should hold of a whole table of `geom`."""
    side = {c.id: c.disposition for c in geom.creatures}
    sides = {SIDE_NAMES[s] for s in ask.get("sides", SIDE_NAMES)}
    return {k: v for k, v in table.items()
            if (k[0] in ask.get("attackers", side)) and k[1] in ask.get("targets", side)
            and side[k[0]] in sides and k[2] in ask.get("modes", ("melee", "reach", "ranged"))}


@pytest.mark.parametrize(("ruleset", "grid"), [
    ("dnd35", 1), ("pf1", 1), ("degrees", 1), ("realms", 1), ("pf2", 1), ("dnd5e", 1),
    ("degrees", 2), ("realms", 3), ("pf2", 4), ("degrees", 5)])
@settings(max_examples=5, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.integers(0, 2**31), asks=st.lists(st.tuples(_ask, st.booleans()), min_size=1,
                                                  max_size=3),
       unfiltered=st.booleans())
def test_filtered_tables_match_full_recomputation(ruleset: str, grid: int, seed: int,
                                                  asks: list[tuple[dict[str, Any], bool]],
                                                  unfiltered: bool) -> None:
    """Subscribers with filters (gm or viewer; beside an unfiltered one or not), change
    after change (moves, tokens created and deleted, changing side, hidden and shown),
    hold what a full evaluation of the scene they see selects for them; the table the Core
    keeps holds only what they follow unless someone follows everything."""
    rng = random.Random(seed)
    core = Core(access_token="g", player_token="p")
    gm = core.connect()
    _send(core, gm, {"type": "hello", "protocol": 1, "client": "t", "token": "g"})
    assert _send(core, gm, _scene(rng, ruleset, grid))[gm][0]["type"] == "ack"
    held: dict[int, tuple[dict[str, Any], bool, dict[Key, Any]]] = {}
    for ask, as_viewer in [*asks, *([({}, False)] if unfiltered else [])]:
        conn = core.connect()
        _send(core, conn, {"type": "hello", "protocol": 1, "client": "t",
                           "token": "p" if as_viewer else "g"})
        (full,) = _send(core, conn, {"type": "subscribe", "scene": "s", **ask})[conn]
        assert full["type"] == "annotations", full
        held[conn] = (ask, as_viewer, {(a["attacker"], a["target"], a["mode"]): a
                                       for a in full["annotations"]})
    for step in range(12):
        tokens = list(core.scenes["s"].tokens)
        kind = step % 4
        if kind == 1:
            message = hide_or_show(rng, core)
        elif kind == 3:
            message = {"type": "token.update", "scene": "s",
                       "tokens": [{"id": rng.choice(tokens), "disposition": rng.choice([-1, 1])}]}
        else:
            message = _change(rng, core, step)
        frames = _send(core, gm, message)
        assert frames[gm][0]["type"] == "ack", frames[gm][0]
        scene = core.scenes["s"]
        for conn, (ask, as_viewer, table) in held.items():
            for delta in frames.get(conn, []):
                apply(table, delta)
            geom = core.tables.visible_geometry(scene) if as_viewer else scene.geometry
            whole = {a.key(): msgspec.to_builtins(annotation_out(a))
                     for a in scene.ruleset.annotate(geom, scene.options)}
            assert table == _selected(ask, geom, whole), (step, ask, as_viewer)
        if not unfiltered and not any(v for _, v, _ in held.values()):
            # Only what the gm's filters select is kept.
            (_, _, cached), = [(k, None, c) for k, c in core.tables.cache.items() if k[0] == "s"]
            union = set().union(*({(k[0], k[1]) for k in _selected(
                {**ask, "modes": ["melee"]}, scene.geometry,
                {(a, t, "melee"): None for a in scene.tokens for t in scene.tokens if a != t})}
                for ask, _, _ in held.values()))
            assert cached.revision < scene.revision or {(k[0], k[1]) for k in cached.table} \
                <= union


def test_only_the_pairs_followed_are_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    """With one filtered subscriber the ruleset is asked for its pairs only, at first and
    at every change, and the table kept holds nothing else; an unfiltered subscriber
    joining makes it whole (its full set is every pair)."""
    rng = random.Random(11)
    core = Core()
    gm, sub, whole = core.connect(), core.connect(), core.connect()
    for conn in (gm, sub, whole):
        _send(core, conn, {"type": "hello", "protocol": 1, "client": "t"})
    _send(core, gm, _scene(rng, "dnd35"))
    ruleset = type(core.scenes["s"].ruleset)
    asked: list[tuple[str, str] | None] = []
    annotate = ruleset.annotate

    def recording(self: Any, geom: Any, options: Any, pairs: Any = None,
                  **kw: Any) -> Any:
        asked.extend(pairs if pairs is not None else [None])
        return annotate(self, geom, options, pairs, **kw)

    monkeypatch.setattr(ruleset, "annotate", recording)
    (full,) = _send(core, sub, {"type": "subscribe", "scene": "s", "attackers": ["t1"]})[sub]
    assert {a["attacker"] for a in full["annotations"]} == {"t1"}
    assert asked and all(p is not None and p[0] == "t1" for p in asked), asked
    for step in range(8):
        asked.clear()
        frames = _send(core, gm, _change(rng, core, step))
        assert frames[gm][0]["type"] == "ack"
        assert all(p is not None and p[0] == "t1" for p in asked), (step, asked)
        (cached,) = [c for k, c in core.tables.cache.items() if k[0] == "s"]
        assert {k[0] for k in cached.table} <= {"t1"}
    (everything,) = _send(core, whole, {"type": "subscribe", "scene": "s"})[whole]
    tokens = list(core.scenes["s"].tokens)
    assert len(everything["annotations"]) == len(tokens) * (len(tokens) - 1) * 3


# -- the hull tests, block by block ---------------------------------------------------------

def _hulls_meet_per_box(spaces: Any, a: Any, t: Any, boxes: Any) -> Any:
    """geometry.incremental._hulls_meet as it was, one box at a time: the reference."""
    from geometry.kernel import enter_paired, take_rows

    sa, st_ = take_rows(spaces, a), take_rows(spaces, t)
    ca = np.column_stack([(sa[:, 0] + sa[:, 2]) / 2, (sa[:, 1] + sa[:, 3]) / 2])
    ct = np.column_stack([(st_[:, 0] + st_[:, 2]) / 2, (st_[:, 1] + st_[:, 3]) / 2])
    half = np.maximum(np.maximum(sa[:, 2] - sa[:, 0], sa[:, 3] - sa[:, 1]),
                      np.maximum(st_[:, 2] - st_[:, 0], st_[:, 3] - st_[:, 1])) / 2
    out = np.zeros(len(a), dtype=bool)
    for x0, y0, x1, y1 in boxes:
        grown = np.column_stack([x0 - half - 1, y0 - half - 1, x1 + half + 1, y1 + half + 1])
        inside = ((ca[:, 0] > grown[:, 0]) & (ca[:, 0] < grown[:, 2])
                  & (ca[:, 1] > grown[:, 1]) & (ca[:, 1] < grown[:, 3]))
        out |= inside | enter_paired(ca, ct, grown)
    return out


def _hulls_enter_per_box(spaces: Any, a: Any, t: Any, boxes: Any) -> Any:
    """geometry.incremental._hulls_enter as it was, one box at a time: the reference."""
    from geometry.incremental import _SLACK
    from geometry.kernel import take_rows

    out = np.zeros(len(a), dtype=bool)
    sa, st_ = take_rows(spaces, a), take_rows(spaces, t)
    hx0, hy0 = np.minimum(sa[:, 0], st_[:, 0]), np.minimum(sa[:, 1], st_[:, 1])
    hx1, hy1 = np.maximum(sa[:, 2], st_[:, 2]), np.maximum(sa[:, 3], st_[:, 3])
    d = np.column_stack([(st_[:, 0] + st_[:, 2] - sa[:, 0] - sa[:, 2]) / 2,
                         (st_[:, 1] + st_[:, 3] - sa[:, 1] - sa[:, 3]) / 2])
    length = np.hypot(d[:, 0], d[:, 1])
    nx = np.where(length > 0, -d[:, 1] / np.where(length > 0, length, 1.0), 0.0)
    ny = np.where(length > 0, d[:, 0] / np.where(length > 0, length, 1.0), 0.0)

    def extent(b: Any) -> Any:
        c = ((b[:, 0] + b[:, 2]) / 2) * nx + ((b[:, 1] + b[:, 3]) / 2) * ny
        h = (np.abs(b[:, 2] - b[:, 0]) * np.abs(nx) + np.abs(b[:, 3] - b[:, 1]) * np.abs(ny)) / 2
        return c - h, c + h

    a_lo, a_hi = extent(sa)
    t_lo, t_hi = extent(st_)
    lo, hi = np.minimum(a_lo, t_lo), np.maximum(a_hi, t_hi)
    for box in boxes:
        overlap = (box[0] < hx1) & (box[2] > hx0) & (box[1] < hy1) & (box[3] > hy0)
        b_lo, b_hi = extent(np.broadcast_to(box, (len(a), 4)))
        out |= overlap & (b_lo < hi + _SLACK) & (b_hi > lo - _SLACK)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(2, 40), st.integers(0, 300),
       st.sampled_from([4, 64, 1 << 18]))
def test_hull_tests_in_blocks_are_the_tests_box_by_box(seed: int, n: int, nboxes: int,
                                                       block: int) -> None:
    """The hull tests of `affected` run on blocks of boxes (no Python loop per changed
    wall: 1,000 walls created in a 6-token scene took 165 ms of the worker, box by box):
    each block size gives the answers of the test made one box at a time."""
    import geometry.incremental as inc

    rng = np.random.default_rng(seed)
    corner = rng.integers(0, 20, size=(n, 2)) * 50.0
    size = rng.choice([25.0, 50.0, 100.0, 150.0], size=n)
    spaces = np.column_stack([corner, corner + size[:, None]])
    a, t = (x.astype(np.intp) for x in np.triu_indices(n, 1))
    lo = rng.uniform(-50, 1000, size=(nboxes, 2))
    boxes = np.column_stack([lo, lo + rng.choice([0.0, 1.0, 10.0, 200.0], size=(nboxes, 2))])
    walls, creatures = boxes, np.column_stack([lo, lo + 50.0])
    old = inc._BLOCK
    inc._BLOCK = block
    try:
        assert np.array_equal(inc._hulls_meet(spaces, a, t, walls),
                              _hulls_meet_per_box(spaces, a, t, walls))
        assert np.array_equal(inc._hulls_enter(spaces, a, t, creatures),
                              _hulls_enter_per_box(spaces, a, t, creatures))
    finally:
        inc._BLOCK = old


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 12), st.integers(1, 40),
       st.sampled_from([0, 1, 3, 1 << 18]))
def test_lines_entering_boxes_in_blocks_are_the_tests_box_by_box(seed: int, n: int,
                                                                 nboxes: int,
                                                                 block: int) -> None:
    """`affected` asks whether a pair's sight lines enter a changed creature's space on
    blocks of those spaces at once: blocks of one space, of three, or of all of them give
    the answers of the test made one space at a time."""
    import geometry.incremental as inc
    from geometry.kernel import enter_paired
    from geometry.model import CreatureGeom, Grid, GridKind, Size
    from rulesets.corner import sight_points

    rng = np.random.default_rng(seed)
    grid = Grid(GridKind.SQUARE, 100, 5, "ft")
    cs = tuple(CreatureGeom(f"c{k}", float(x) * 100, float(y) * 100, int(w), int(w),
                            Size.LARGE if w == 2 else Size.MEDIUM, 5.0, 6.0, 0.0, 1, False)
               for k, (x, y, w) in enumerate(zip(rng.integers(0, 15, n), rng.integers(0, 15, n),
                                                 rng.integers(1, 3, n), strict=True)))
    a, t = (x.astype(np.intp) for x in np.triu_indices(n, 1))
    lo = rng.integers(0, 15, size=(nboxes, 2)) * 100.0
    boxes = np.column_stack([lo, lo + 100.0 * rng.integers(1, 3, size=(nboxes, 1))])
    want = np.zeros(len(a), dtype=bool)
    for k in range(len(a)):
        p, q = sight_points(cs[a[k]], grid), sight_points(cs[t[k]], grid)
        s = np.repeat(p, len(q), axis=0)
        e = np.tile(q, (len(p), 1))
        want[k] = any(enter_paired(s, e, np.broadcast_to(box, (len(s), 4))).any()
                      for box in boxes)
    # Blocks of one box, of three, of all (block: boxes a block holds; 0: the default).
    segments = sum(len(sight_points(cs[i], grid)) * len(sight_points(cs[j], grid))
                   for i, j in zip(a.tolist(), t.tolist(), strict=True))
    old = inc._BLOCK
    inc._BLOCK = segments * block if block else old
    try:
        got = inc._lines_enter(cs, grid, a, t, boxes, sight_points)
    finally:
        inc._BLOCK = old
    assert np.array_equal(got, want)


def test_realms_widen_for_followed_pairs_adds_exactly_those_it_would_add_among_them() -> None:
    """A filtered table asks `widen` for the pairs it follows only (`only`): the friendly-
    fire pairs a move adds are then the ones it adds unasked, among those followed, and no
    pair outside them is looked at (a subscriber following one attacker of a thousand
    creatures pays for its own pairs)."""
    from dataclasses import replace

    from bench.hexbench import moved
    from bench.scenes import generate
    from rulesets import REGISTRY

    ruleset = REGISTRY.get("realms")
    opts = ruleset.Options()
    rng = random.Random(3)
    outside = 0
    geom = generate(30, 150, 1).geom
    geom = replace(geom, creatures=tuple(replace(c, cover_floor=None)
                                         for c in geom.creatures))
    ids = [c.id for c in geom.creatures]
    for k in (0, 7, 14, 28):
        after = moved(geom, k)
        asked = {(ids[k], t) for t in ids if t != ids[k]}
        everything = ruleset.widen(geom, after, opts, set(asked))
        added = everything - asked
        assert added, k  # the move changes who stands near some targets
        for _ in range(4):
            only = {(a, t) for a in ids for t in ids if a != t and rng.random() < 0.5}
            got = ruleset.widen(geom, after, opts, set(asked), only)
            assert got == asked | (added & only), k
            outside += len(added - only)
        assert ruleset.widen(geom, after, opts, set(asked), set()) == asked
    assert outside  # some added pairs were not followed, and were left out


def test_realms_widen_prepares_nothing_when_every_followed_pair_is_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A subscriber following one attacker that walks: every pair it follows is asked
    already, so `widen` can add none, and answers without preparing the scene (a snapshot
    of 1,000 creatures, 0.6 ms a step, and the friendly-fire degrees of the targets near
    the mover). With one followed pair not asked, it looks as before."""
    from dataclasses import replace

    from bench.hexbench import moved
    from bench.scenes import generate
    from rulesets import REGISTRY, realms

    ruleset = REGISTRY.get("realms")
    opts = ruleset.Options()
    geom = generate(30, 150, 1).geom
    geom = replace(geom, creatures=tuple(replace(c, cover_floor=None)
                                         for c in geom.creatures))
    ids = [c.id for c in geom.creatures]
    after = moved(geom, 7)
    mover = {(ids[7], t) for t in ids if t != ids[7]}
    everything = ruleset.widen(geom, after, opts, set(mover))
    assert everything - mover  # unasked, the move adds friendly-fire pairs
    prepared = []
    made = realms.RealmsContext

    def counted(*args: Any, **kwargs: Any) -> realms.RealmsContext:
        prepared.append(1)
        return made(*args, **kwargs)

    monkeypatch.setattr(realms, "RealmsContext", counted)
    assert ruleset.widen(geom, after, opts, set(mover), set(mover)) == mover
    assert not prepared
    extra = next(iter(everything - mover))
    assert ruleset.widen(geom, after, opts, set(mover), mover | {extra}) == mover | {extra}
    assert prepared


def test_realms_numbers_creature_states_alike_after_letting_go_of_their_objects() -> None:
    """A creature state keeps its number whichever object carries it, and the objects kept
    by identity are let go of past a bound (a token dragged to and fro makes a new object
    at every step): the numbers read after that are the ones given before."""
    from dataclasses import replace

    from bench.scenes import generate
    from rulesets import realms

    geom = generate(6, 20, 1).geom
    kept = realms._Kept(geom.walls, geom.regions, geom.grid, realms.RealmsOptions(),
                        {}, {}, {})
    first = realms._numbered(geom.creatures, kept.numbers, kept)
    bound = realms._BY_ID_KEPT
    try:
        realms._BY_ID_KEPT = 10
        for step in range(8):
            # Equal states carried by new objects, snapshot after snapshot.
            cs = tuple(replace(c) for c in geom.creatures)
            assert realms._numbered(cs, kept.numbers, kept) == first, step
            assert len(kept.by_id) <= 10 + len(cs)
        moved = (replace(geom.creatures[0], x=geom.creatures[0].x + 100),
                 *geom.creatures[1:])
        again = realms._numbered(moved, kept.numbers, kept)
        assert again[1:] == first[1:] and again[0] not in first
    finally:
        realms._BY_ID_KEPT = bound


def test_realms_starts_its_table_again_past_its_states(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table of measures numbers the creature states it sees (a pair's key holds two of
    those numbers, 32 bits each); past `_STATES` of them it is emptied and numbers from 0
    again, and what is measured after that is measured afresh: a token dragged about for
    days never overflows a key, nor finds another pair's measure."""
    from dataclasses import replace

    from bench.scenes import generate
    from rulesets import REGISTRY, forget_kept, realms

    forget_kept()
    monkeypatch.setattr(realms, "_STATES", 12)
    ruleset = REGISTRY.get("realms")
    assert isinstance(ruleset, realms.Realms)
    opts = realms.RealmsOptions()
    geom = generate(8, 60, 3).geom
    for step in range(20):  # each step a new state of the mover: 8 + 20 states in all
        c0 = geom.creatures[0]
        geom = replace(geom, creatures=(replace(c0, x=c0.x + 50 * (step % 3 + 1)),
                                        *geom.creatures[1:]))
        kept = realms._measure_cache(geom, opts)
        assert len(kept.numbers) <= 12 + len(geom.creatures)
        assert max(kept.numbers.values(), default=0) < 12 + len(geom.creatures)
        assert ruleset.evaluate(geom, opts) == ruleset.reference(geom, opts), step
    forget_kept()


def test_realms_context_from_before_a_full_table_keeps_its_own() -> None:
    """A context built before its table filled up (the ahead thread's, beside the Core's)
    goes on writing into the table it started with: the next one's numbers start from 0
    again, and its keys must never meet the older context's."""
    from dataclasses import replace

    from bench.scenes import generate
    from rulesets import forget_kept, realms
    from rulesets.base import pair_rows

    forget_kept()
    bound = realms._STATES
    try:
        realms._STATES = 3
        opts = realms.RealmsOptions()
        geom = generate(8, 60, 3).geom
        older = realms.RealmsContext(geom, opts)  # 8 states: the table is full
        turned = replace(geom, creatures=tuple(reversed(geom.creatures)))
        newer = realms.RealmsContext(turned, opts)  # a new table, numbered from 0
        rows = pair_rows(8, older.index, None)
        older.measures_of(rows)
        got = [m.covered for m in newer.measures_of(rows)]
        ref = realms.RealmsContext(turned, opts, reference=True)
        assert got == [ref.best_measure(a, t, named=False).covered for a, t in rows.tolist()]
    finally:
        realms._STATES = bound
        forget_kept()
