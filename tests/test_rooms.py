"""Rooms (geometry.rooms): spaces in two rooms of the plain walls are walled off, and the
rulesets answer such pairs without tracing them, exactly as tracing would.

Pure geometry and rules: no sockets. The scenes are Foundry documents read by the server's
own loader, on a grid of 100 px squares."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from geometry import openings, rooms
from geometry.square import INSET_PX
from geometry.trace import Tracer
from rulesets import REGISTRY, forget_kept
from rulesets.corner import CornerEngine
from server import messages
from server import scene as scenes
from server.messages import parse_request
from tests.conftest import banded_walks, heads_level_with_a_band

Doc = dict[str, Any]
SIZE = 100


def _walls(*segments: tuple[int, int, int, int], **extra: Any) -> list[Doc]:
    """Wall documents for segments given in squares."""
    return [{"id": f"w{k}-{x0}-{y0}", "c": [x0 * SIZE, y0 * SIZE, x1 * SIZE, y1 * SIZE],
             **extra} for k, (x0, y0, x1, y1) in enumerate(segments)]


def _box(x0: int, y0: int, x1: int, y1: int) -> list[tuple[int, int, int, int]]:
    """A closed room's four sides, each side drawn as one-square segments (as a map's
    walls often are)."""
    out = []
    for x in range(x0, x1):
        out += [(x, y0, x + 1, y0), (x, y1, x + 1, y1)]
    for y in range(y0, y1):
        out += [(x0, y, x0, y + 1), (x1, y, x1, y + 1)]
    return out


@pytest.fixture(autouse=True)
def _build_for_any_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """These scenes are small: their rooms are built for however few pairs are asked."""
    monkeypatch.setattr(rooms, "BUILD_PAIRS", 0)


def _scene(walls: list[Doc], tokens: list[tuple[float, float, float]],
           ruleset: str = "dnd35") -> scenes.Scene:
    """tokens: (x, y, size in squares)."""
    doc = {"id": "s", "grid": {"type": 1, "size": SIZE, "distance": 5, "units": "ft"},
           "width": 2000, "height": 2000, "walls": walls,
           "tokens": [{"id": f"t{k}", "x": x * SIZE, "y": y * SIZE, "width": n, "height": n,
                       "disposition": 1 if k % 2 else -1}
                      for k, (x, y, n) in enumerate(tokens)]}
    req = parse_request({"type": "scene.load", "scene": doc, "options": {},
                         "ruleset": ruleset})
    assert isinstance(req, messages.SceneLoad)
    return scenes.load(req.scene, req.ruleset, req.options, None)


def _rooms(scene: scenes.Scene) -> np.ndarray:
    tracer = Tracer(scene.geometry)
    return rooms.rooms_of(tracer, openings.box_rings(tracer.boxes, INSET_PX), 1)


def _off(room: np.ndarray, a: int, b: int) -> bool:
    return bool(rooms.walled_off(room[[a]], room[[b]])[0])


def test_two_rooms_and_the_outside_are_walled_off_from_one_another() -> None:
    # Room A: squares 1-3; room B: squares 4-6 (sharing the wall x = 4); the outside.
    scene = _scene(_walls(*_box(1, 1, 4, 4), *_box(4, 1, 7, 4)),
                   [(2, 2, 1), (5, 2, 1), (1, 1, 1), (10, 10, 1), (12, 3, 1)])
    room = _rooms(scene)
    assert room[0] == room[2] != rooms.NO_ROOM
    assert room[1] not in (room[0], rooms.NO_ROOM)
    assert room[3] == room[4]
    assert _off(room, 0, 1) and _off(room, 1, 0)   # room A, room B
    assert _off(room, 0, 3) and _off(room, 1, 4)   # a room, the outside
    assert not _off(room, 0, 2)                    # two in room A
    assert not _off(room, 3, 4)                    # two outside


def test_a_gap_in_a_room_joins_it_to_the_outside() -> None:
    # Room A with its top side missing one square: A is the outside now; B stays closed.
    sides = [s for s in _box(1, 1, 4, 4) if s != (2, 1, 3, 1)]
    scene = _scene(_walls(*sides, *_box(4, 1, 7, 4)), [(2, 2, 1), (5, 2, 1), (10, 10, 1)])
    room = _rooms(scene)
    assert room[0] == room[2]
    assert not _off(room, 0, 2)
    assert _off(room, 0, 1) and _off(room, 2, 1)


@pytest.mark.parametrize("kind", [{"dir": 1}, {"sight": 10}, {"door": 1, "ds": 1},
                                  {"flags": {"wall-height": {"top": 3}}},
                                  {"flags": {"covercast": {"cover": "low"}}}])
def test_walls_that_may_let_a_line_pass_close_no_room(kind: Doc) -> None:
    """A one-way, limited, open-door, banded or low wall does not stop every line: a room
    closed by one is no room."""
    sides = _box(1, 1, 4, 4)
    walls = _walls(*sides[1:]) + _walls(sides[0], **kind)
    scene = _scene(walls, [(2, 2, 1), (10, 10, 1)])
    assert not _off(_rooms(scene), 0, 1)


def test_a_creature_across_a_wall_is_in_no_room() -> None:
    # A Large creature standing across the wall between A and B.
    scene = _scene(_walls(*_box(1, 1, 4, 4), *_box(4, 1, 7, 4)),
                   [(3, 2, 2), (5, 2, 1), (2, 2, 1)])
    room = _rooms(scene)
    assert room[0] == rooms.NO_ROOM
    assert not _off(room, 0, 1) and not _off(room, 0, 2)
    assert _off(room, 1, 2)


def test_a_room_inside_a_hall() -> None:
    # A hall of 10 x 10 squares, a closed closet of 2 x 2 inside it.
    scene = _scene(_walls(*_box(1, 1, 11, 11), *_box(5, 5, 7, 7)),
                   [(5, 5, 1), (2, 2, 1), (9, 9, 1), (15, 15, 1)])
    room = _rooms(scene)
    assert _off(room, 0, 1) and _off(room, 0, 3) and _off(room, 1, 3)
    assert not _off(room, 1, 2)


def test_tangled_walls_have_no_rooms() -> None:
    # 20 long walls across 20 others: each meets 20.
    lattice = [(0, k, 19, k) for k in range(20)] + [(k, 0, k, 19) for k in range(20)]
    scene = _scene(_walls(*lattice), [(0, 0, 1), (5, 5, 1)])
    assert rooms.rooms(Tracer(scene.geometry)) is None
    assert (_rooms(scene) == rooms.NO_ROOM).all()


def test_walled_off_rows_are_neither_planned_nor_traced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A creature in a closed room and one outside past its corner: no one wall stops
    every line between them (each side stops some), so the trace would need every wall.
    The rows are total without being planned, as they are when traced."""
    walls = _walls(*_box(1, 1, 4, 4))
    scene = _scene(walls, [(3, 3, 1), (6, 6, 1), (2, 2, 1)])
    planned: list[set[tuple[int, int]]] = []
    original = CornerEngine._planned

    def spy(self: CornerEngine, rows: Any) -> Any:
        a, t, _ = self._row_arrays(rows)
        planned.append(set(zip(a.tolist(), t.tolist(), strict=True)))
        return original(self, rows)

    monkeypatch.setattr(CornerEngine, "_planned", spy)
    rules = scene.ruleset
    with_rooms = rules.annotate(scene.geometry, scene.options)
    seen = set().union(*planned)
    assert (0, 1) not in seen and (1, 0) not in seen and (1, 2) not in seen
    assert (0, 2) in seen
    totals = {(a.attacker, a.target) for a in with_rooms if a.cover.value == "total"}
    assert {("t0", "t1"), ("t1", "t0"), ("t1", "t2"), ("t2", "t1")} <= totals
    monkeypatch.setattr(rooms, "rooms", lambda tracer, build=True, max_walls=None: None)
    planned.clear()
    assert rules.annotate(scene.geometry, scene.options) == with_rooms
    assert (0, 1) in set().union(*planned)


def test_rooms_are_built_for_a_whole_table_and_used_by_a_move(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A few pairs (a move, a door opened) never wait for the rooms of new walls; once a
    whole table has built them, a few pairs use them."""
    monkeypatch.setattr(rooms, "BUILD_PAIRS", 10)
    scene = _scene(_walls(*_box(1, 20, 4, 23), *_box(4, 20, 7, 23)),
                   [(2, 21, 1), (5, 21, 1), (10, 10, 1)])
    tracer = Tracer(scene.geometry)
    rings = openings.box_rings(tracer.boxes, INSET_PX)
    assert (rooms.rooms_of(tracer, rings, 9) == rooms.NO_ROOM).all()
    assert rooms.rooms(tracer, build=False) is None
    assert _off(rooms.rooms_of(tracer, rings, 10), 0, 1)
    assert _off(rooms.rooms_of(tracer, rings, 1), 0, 1)


def test_many_walls_get_rooms_only_off_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ROOMS_MAX_WALLS plain walls the worker does not build the rooms itself (they
    would hold it past a slice of work); the edge's reading thread builds them up to
    ROOMS_MAX_WALLS_AHEAD (server/ahead.py), and the worker uses them; past that, none."""
    from server import ahead

    monkeypatch.setattr(rooms, "ROOMS_MAX_WALLS", 20)
    monkeypatch.setattr(rooms, "ROOMS_MAX_WALLS_AHEAD", 30)
    two = _walls(*_box(1, 1, 4, 4), *_box(4, 1, 7, 4))  # 24 walls
    scene = _scene(two, [(2, 2, 1), (5, 2, 1)])
    tracer = Tracer(scene.geometry)
    assert rooms.rooms(tracer) is None
    ahead._warm(scene)
    assert rooms.rooms(tracer, build=False) is not None
    assert _off(_rooms(scene), 0, 1)
    three = _walls(*_box(1, 1, 4, 4), *_box(4, 1, 7, 4), *_box(7, 1, 10, 4))  # 36 walls
    scene = _scene(three, [(2, 2, 1), (5, 2, 1)])
    ahead._warm(scene)
    assert rooms.rooms(Tracer(scene.geometry), build=False) is None


@pytest.mark.parametrize("ruleset", sorted(REGISTRY.names()))
def test_every_pair_walled_off(ruleset: str) -> None:
    """Two creatures in two rooms and no one else: nothing is planned or traced at all
    (pf1 then looks closer at no row at cover)."""
    scene = _scene(_walls(*_box(1, 1, 4, 4), *_box(4, 1, 7, 4)), [(2, 2, 1), (5, 2, 1)],
                   ruleset)
    out = scene.ruleset.annotate(scene.geometry, scene.options)
    assert out and all(a.cover.value == "total" for a in out)


@pytest.mark.parametrize("ruleset", ["dnd35", "pf1", "dnd5e"])
def test_a_token_of_one_and_a_half_squares_draws_lines_from_two(ruleset: str) -> None:
    """A token 1.5 squares wide stands in a 150 px space wholly inside the room, but the
    corner rules draw its lines from two whole squares, whose corners stick out past the
    room's wall: its pairs with the outside are not walled off (found by a review: the
    rooms were read from the space alone)."""
    doc_tokens = [{"id": "t0", "x": 240, "y": 240, "width": 1.5, "height": 1.5,
                   "disposition": -1},
                  {"id": "t1", "x": 500, "y": 240, "width": 1, "height": 1,
                   "disposition": 1}]
    req = parse_request({"type": "scene.load", "options": {}, "ruleset": ruleset,
                         "scene": {"id": "s", "grid": {"type": 1, "size": SIZE},
                                   "walls": _walls(*_box(1, 1, 4, 4)),
                                   "tokens": doc_tokens}})
    assert isinstance(req, messages.SceneLoad)
    scene = scenes.load(req.scene, req.ruleset, req.options, None)
    with_rooms = scene.ruleset.annotate(scene.geometry, scene.options)
    real = rooms.rooms
    try:
        rooms.rooms = lambda tracer, build=True, max_walls=None: None
        without = scene.ruleset.annotate(scene.geometry, scene.options)
    finally:
        rooms.rooms = real
    assert with_rooms == without
    melee = {(a.attacker, a.target, a.mode.value): a.cover.value for a in with_rooms}
    assert melee[("t0", "t1", "melee")] != "total"


def test_a_slanted_wall_a_hair_from_a_corner_is_no_border_to_trust() -> None:
    """A slanted wall passing 7e-15 px outside a space's inset corner: exactly, the space is
    inside the triangle; the kernel's floating-point test reads the wall as touching the
    corner (so stopping none of its lines). A space within CLEARANCE_PX of a room's border
    is in no room (found by a review)."""
    xb, ya = 407.4661047786078, 248.16632940537215
    walls = [{"id": f"w{k}", "c": list(c)} for k, c in enumerate(
        [(xb, 100.0, 100.0, ya), (100.0, 100.0, 100.0, ya), (100.0, 100.0, xb, 100.0)])]
    for ruleset in sorted(REGISTRY.names()):
        scene = _scene(walls, [(1, 1, 1), (2, 2, 1)], ruleset)
        assert _rooms(scene)[0] == rooms.NO_ROOM
        forget_kept()
        with_rooms = scene.ruleset.annotate(scene.geometry, scene.options)
        real = rooms.rooms
        try:
            rooms.rooms = lambda tracer, build=True, max_walls=None: None
            forget_kept()
            without = scene.ruleset.annotate(scene.geometry, scene.options)
        finally:
            rooms.rooms = real
        assert with_rooms == without, ruleset


@pytest.mark.parametrize("ruleset", ["dnd35", "pf1", "dnd5e"])
def test_a_pair_alone_reads_as_in_a_batch(ruleset: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens of 1.4 squares have a space wider than their one square. A plain wall
    crossing every line between the squares' corners need not separate the spaces: the
    kernel's seal is not taken for them, and the exact test decides, whatever rows are
    evaluated with the pair (found by a review: alone the pair read total, batched with
    others improved, its reference improved). Without rooms, so that the pair is traced."""
    monkeypatch.setattr(rooms, "rooms", lambda tracer, build=True, max_walls=None: None)
    walls = _walls((7, 2, 8, 2), (8, 2, 9, 2), (9, 2, 10, 2), (10, 2, 10, 7), (10, 7, 7, 7),
                   (7, 7, 7, 2))
    tokens = [{"id": "t0", "x": 100.015625, "y": 900.015625, "width": 0.25, "height": 0.25},
              {"id": "t1", "x": 1200, "y": 200, "width": 1.4, "height": 1.4},
              {"id": "t2", "x": 600, "y": 600, "width": 1.4, "height": 1.4},
              {"id": "t3", "x": 1000, "y": 200, "width": 1, "height": 1},
              {"id": "t4", "x": 700, "y": 600, "width": 1, "height": 1}]
    req = parse_request({"type": "scene.load", "options": {}, "ruleset": ruleset,
                         "scene": {"id": "s", "grid": {"type": 1, "size": SIZE},
                                   "walls": walls, "tokens": tokens}})
    assert isinstance(req, messages.SceneLoad)
    scene = scenes.load(req.scene, req.ruleset, req.options, None)
    rules = scene.ruleset
    every = {a.key(): a for a in rules.annotate(scene.geometry, scene.options)}
    alone = {a.key(): a for a in rules.annotate(scene.geometry, scene.options,
                                                pairs=[("t2", "t4")])}
    for key, a in alone.items():
        assert every[key] == a, key
    assert alone[("t2", "t4", "ranged")].cover.value != "total"


# -- every ruleset: the same answers with rooms as without ----------------------------------

cell = st.integers(0, 11)


@st.composite
def room_scenes(draw: st.DrawFn) -> tuple[list[Doc], list[tuple[float, float, float]]]:
    """Rooms of random sizes, square or with a slanted side (its end a third of a pixel
    off the grid), some sides left open, some drawn with a wall of another kind; loose
    walls; creatures of half a square to two and a half, on the grid or off it (the
    review's cases: a token of 1.5 squares draws its lines from two squares)."""
    walls: list[Doc] = []
    for r in range(draw(st.integers(1, 4))):
        x0, y0 = draw(cell), draw(cell)
        x1, y1 = x0 + draw(st.integers(1, 5)), y0 + draw(st.integers(1, 5))
        if draw(st.booleans()):
            sides = [tuple(float(v * SIZE) for v in s) for s in _box(x0, y0, x1, y1)]
        else:
            off = draw(st.sampled_from([0.0, 1 / 3, 100 / 3]))
            a, b, c = (x0 * SIZE, y0 * SIZE), (x1 * SIZE + off, y0 * SIZE), (x0 * SIZE,
                                                                            y1 * SIZE)
            sides = [(*a, *b), (*b, *c), (*c, *a)]
        gone = draw(st.sets(st.integers(0, len(sides) - 1), max_size=2))
        odd = draw(st.sets(st.integers(0, len(sides) - 1), max_size=2))
        kind: Doc = draw(st.sampled_from([{"dir": 1}, {"sight": 10}, {"door": 1, "ds": 0},
                                          {"flags": {"wall-height": {"top": 3}}}]))
        for k, side in enumerate(sides):
            if k in gone and draw(st.booleans()):
                continue
            walls += [{"id": f"r{r}-{k}", "c": list(side), **(kind if k in odd else {})}]
    for k in range(draw(st.integers(0, 3))):
        ends = [draw(cell) * SIZE + draw(st.sampled_from([0, 50])) for _ in range(4)]
        if ends[:2] != ends[2:]:
            walls.append({"id": f"x{k}", "c": ends})
    place = st.tuples(cell, st.sampled_from([0.0, 0.0, 0.4]))
    tokens = draw(st.lists(
        st.tuples(place, place, st.sampled_from([1, 1, 1, 2, 0.5, 1.4, 1.5, 2.5])),
        min_size=2, max_size=6, unique_by=lambda t: (t[0][0], t[1][0])))
    return walls, [(x + dx, y + dy, n) for (x, dx), (y, dy), n in tokens]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(room_scenes(), st.sampled_from(sorted(REGISTRY.names())))
# Realms reads the rooms from spaces a hair inside (a body flush against a room's wall is
# in the room): one that straddles the wall, most of it inside, is in no room.
@example((_walls(*_box(1, 1, 4, 4)), [(3.3, 2, 1), (5, 2, 1)]), "realms")
# ...and a token of 1.5 squares flush against the wall from inside shoots from the centre
# of a second square, on the wall: it sees out (found by a review).
@example((_walls(*_box(1, 1, 4, 4)), [(2.5, 2, 1.5), (5, 2, 1)]), "realms")
def test_rooms_change_no_answer(case: tuple[list[Doc], list[tuple[float, float, float]]],
                                ruleset: str) -> None:
    walls, tokens = case
    scene = _scene(walls, tokens, ruleset)
    rules = scene.ruleset
    forget_kept()
    with_rooms = rules.annotate(scene.geometry, scene.options)
    real = rooms.rooms
    try:
        rooms.rooms = lambda tracer, build=True, max_walls=None: None
        forget_kept()
        without = rules.annotate(scene.geometry, scene.options)
    finally:
        rooms.rooms = real
    assert with_rooms == without


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(room_scenes(), st.sampled_from(["dnd35", "pf1", "dnd5e"]))
# A token of 1.5 squares in a room, its squares' corners on the room's wall: the wall seals
# its space from the token outside, not the squares its lines start from.
@example((_walls(*_box(1, 1, 4, 4)), [(2.4, 2.4, 1.5), (5, 2.4, 1)]), "dnd35")
# A wall ending a pixel short of the line along two spaces' top sides: it seals the spaces
# drawn a hair inside, not the spaces.
@example(([{"id": "w", "c": [300, 101, 300, 300]}], [(1, 1, 1), (4, 1, 1)]), "pf1")
def test_rows_sealed_first_change_no_answer(
        case: tuple[list[Doc], list[tuple[float, float, float]]], ruleset: str) -> None:
    """The corner rulesets' rows whose two spaces one plain wall seals are answered total
    without planning or tracing them (`CornerEngine._sealed_rows`, asked when a call has
    many rows): the same answers as tracing every row, for tokens of every size (those of
    1.4 and 1.5 squares draw lines from squares outside their space), walls of every
    kind, with rooms and without."""
    walls, tokens = case
    scene = _scene(walls, tokens, ruleset)
    rules = scene.ruleset
    answers = []
    for first in (0, 10**9):
        for use_rooms in (True, False):
            real, held = rooms.rooms, CornerEngine.SEAL_FIRST_ROWS
            try:
                CornerEngine.SEAL_FIRST_ROWS = first
                if not use_rooms:
                    rooms.rooms = lambda tracer, build=True, max_walls=None: None
                forget_kept()
                answers.append(rules.annotate(scene.geometry, scene.options))
            finally:
                rooms.rooms, CornerEngine.SEAL_FIRST_ROWS = real, held
    assert answers[0] == answers[1] == answers[2] == answers[3]


def _walked_and_traced(rules: Any, geom: Any, options: Any,
                       monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """A whole table of the scene twice: with sealed rows and the banded walk on every call,
    and with every row traced (neither)."""
    answers = []
    for first, banded in ((0, 0), (10**9, 1 << 30)):
        monkeypatch.setattr(CornerEngine, "SEAL_FIRST_ROWS", first)
        monkeypatch.setattr(openings, "BANDED_MIN_PAIRS", banded)
        forget_kept()
        answers.append(rules.evaluate(geom, options))
    return answers[0], answers[1]


@pytest.mark.parametrize("ruleset", ["dnd35", "pf1", "dnd5e"])
def test_rows_a_banded_wall_seals_change_no_answer(
        ruleset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Walls plain but for a height band holding both creatures whole seal their rows too,
    for a whole table (`openings.banded_walk`; here for every call): on dressed scenes,
    whose walls have bands of every kind, the same answers as tracing every row. The
    pairs so sealed are kept as having no line of effect (`openings.remember_no_line`):
    a move after them, whose few pairs are not walked so, gives a fresh table's
    answers."""
    from dataclasses import replace

    from bench.dressing import dress
    from bench.hexbench import moved
    from bench.scenes import generate
    from geometry.incremental import affected_pairs

    rules = REGISTRY.get(ruleset)
    options = rules.Options()
    found = banded_walks(monkeypatch)
    for seed in (1, 2):
        geom = dress(generate(30, 120, seed).geom, seed)
        geom = replace(geom, creatures=tuple(replace(c, cover_floor=None)
                                             for c in geom.creatures))
        walked, traced = _walked_and_traced(rules, geom, options, monkeypatch)
        assert walked == traced
        # A move after the table (the walk on), its pairs too few for the walk.
        monkeypatch.setattr(CornerEngine, "SEAL_FIRST_ROWS", 0)
        monkeypatch.setattr(openings, "BANDED_MIN_PAIRS", 0)
        forget_kept()
        rules.evaluate(geom, options)
        after = moved(geom, 3)
        affected = affected_pairs(geom, after)
        assert affected is not None
        pairs = sorted(rules.widen(geom, after, options, set(affected)))
        monkeypatch.setattr(openings, "BANDED_MIN_PAIRS", 1 << 30)
        warm = rules.evaluate(after, options, pairs)
        forget_kept()
        assert warm == rules.evaluate(after, options, pairs)
    assert sum(found) > 0
    # Bands that hold no pair whole (every wall's top at 1 ft): the walk seals nothing,
    # and the table is what tracing every row gives.
    low = replace(geom, walls=tuple(replace(w, top=1.0) for w in geom.walls))
    walked, traced = _walked_and_traced(rules, low, options, monkeypatch)
    assert walked == traced


@pytest.mark.parametrize("ruleset", ["dnd35", "pf1", "dnd5e"])
def test_a_band_level_with_both_heads_seals_no_row(
        ruleset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The corner rules on the scene of a band exactly at both creatures' heads: a whole
    table with the banded walk gives what tracing every row gives (a line over the
    wall, cover), and the same as asking one pair."""
    rules = REGISTRY.get(ruleset)
    options = rules.Options()
    geom = heads_level_with_a_band()
    forget_kept()
    table = rules.evaluate(geom, options)
    monkeypatch.setattr(openings, "BANDED_MIN_PAIRS", 1 << 30)
    forget_kept()
    assert table == rules.evaluate(geom, options)
    one = rules.evaluate(geom, options, [("L0", "R0")])
    assert [a for a in table if (a.attacker, a.target) == ("L0", "R0")] == one
    assert all(a.loe for a in one)
