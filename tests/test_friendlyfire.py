"""Enchanted Realms' friendly-fire rule: the pure procedure (rulesets/friendlyfire.py), its
d10 mapping as a hypothesis property, and `friendlyfire.resolve` against a real server,
bad input included (rejected with the field named, scene unchanged, connection kept)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geometry import hex as hexgrid
from geometry.hex import HexLayout
from geometry.model import CreatureGeom, Grid, GridKind, SceneGeom, Size
from rulesets import friendlyfire as ff
from server.session import Core
from tests.conftest import LiveServer, Peer
from tests.test_bad_input import Bad, check_rejected, mp
from tests.test_protocol import load, ok

PeerFactory = Callable[..., Peer]
LAYOUTS = [GridKind.HEXODDR, GridKind.HEXEVENR, GridKind.HEXODDQ, GridKind.HEXEVENQ]


def creature(cid: str, kind: GridKind, cell: tuple[int, int], width: int = 1,
             shape: int = hexgrid.RECTANGLE_1) -> CreatureGeom:
    lay = HexLayout.of(Grid(kind, 100, 5, "ft"))
    x, y = hexgrid.token_position(lay, cell, width, width, shape)
    return CreatureGeom(cid, round(x), round(y), width, width, Size.MEDIUM, 5, 6, 0, -1,
                        False, shape=shape)


def geom(kind: GridKind, *cs: CreatureGeom) -> SceneGeom:
    return SceneGeom(Grid(kind, 100, 5, "ft"), (), cs)


def centre(kind: GridKind, cell: tuple[int, int]) -> tuple[float, float]:
    lay = HexLayout.of(Grid(kind, 100, 5, "ft"))
    x, y = hexgrid.centre_point(lay, np.array([cell[0]]), np.array([cell[1]]))
    return float(x[0]), float(y[0])


def _struck(cands: tuple[ff.Candidate, ...], face: int) -> str | None:
    chosen = ff.pick(cands, face)
    return None if chosen is None else chosen.token


def _cell(cands: tuple[ff.Candidate, ...], face: int) -> tuple[int, int] | None:
    chosen = ff.pick(cands, face)
    return None if chosen is None else chosen.cell


# -- candidates ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", LAYOUTS)
@pytest.mark.parametrize("target_cell", [(4, 4), (5, 5), (4, 5), (5, 4)])  # odd/even offsets
def test_candidates_single_hex(kind: GridKind, target_cell: tuple[int, int]) -> None:
    lay = HexLayout.of(Grid(kind, 100, 5, "ft"))
    scene = geom(kind, creature("a", kind, (0, 1)), creature("t", kind, target_cell))
    cands = ff.candidates(scene, "a", "t")
    assert [c.slot for c in cands] == list(range(1, 9))
    assert [c.role for c in cands] == ["around"] * 6 + ["front", "behind"]
    assert {c.cell for c in cands[:6]} == set(hexgrid.neighbours(lay, target_cell))
    assert len({c.cell for c in cands}) == 8
    for c in cands[6:]:
        assert hexgrid.distance(lay, c.cell, target_cell) == 2
    pa, pt = centre(kind, (0, 1)), centre(kind, target_cell)
    front, behind = cands[6].centre, cands[7].centre
    assert math.dist(front, pa) < math.dist(pt, pa) < math.dist(behind, pa)
    # Slot 1 is the neighbour toward the attacker; then clockwise on screen (y down).
    toward = math.atan2(pa[1] - pt[1], pa[0] - pt[0])
    angles = [math.degrees(math.atan2(c.centre[1] - pt[1], c.centre[0] - pt[0]) - toward)
              % 360 for c in cands[:6]]
    assert angles[0] < 30 + 1e-6 or angles[0] >= 330 - 1e-6
    turned = [(a + 30) % 360 for a in angles]
    assert turned == sorted(turned)


def test_front_is_toward_the_attacker_even_when_adjacent() -> None:
    kind = GridKind.HEXODDR
    scene = geom(kind, creature("a", kind, (2, 3)), creature("t", kind, (2, 4)))
    cands = ff.candidates(scene, "a", "t")
    # Attacker due west: front two hexes west (past the attacker), behind two hexes east.
    assert cands[6].cell == (2, 2) and cands[7].cell == (2, 6)
    assert cands[0].cell == (2, 3) and cands[0].token is None
    assert "attacker" in cands[0].note


@pytest.mark.parametrize("kind", LAYOUTS)
def test_a_big_creature_counts_once_per_candidate_hex_it_fills(kind: GridKind) -> None:
    lay = HexLayout.of(Grid(kind, 100, 5, "ft"))
    target = (6, 6)
    ring = hexgrid.neighbours(lay, target)
    # A 3-hex creature placed so that it fills two of the hexes around the target.
    for cell in ring:
        big = creature("big", kind, cell, width=2)
        fp = hexgrid.footprint(big, Grid(kind, 100, 5, "ft")).cells
        if target not in fp and len(set(fp) & set(ring)) == 2:
            break
    else:
        pytest.fail("no placement fills two ring hexes")
    scene = geom(kind, creature("a", kind, (0, 0)), creature("t", kind, target), big)
    cands = ff.candidates(scene, "a", "t")
    slots = [c.slot for c in cands if c.token == "big"]
    assert len(slots) == 2
    assert sum(_struck(cands, face) == "big" for face in range(1, 11)) == 2


@pytest.mark.parametrize("kind", LAYOUTS)
def test_candidates_around_a_multi_hex_target(kind: GridKind) -> None:
    """Every hex around the whole footprint is a candidate (12 around a 7-hex creature),
    then front and behind two hexes out; the die grows to match (two empty slots)."""
    lay = HexLayout.of(Grid(kind, 100, 5, "ft"))
    grid = Grid(kind, 100, 5, "ft")
    big = creature("t", kind, (5, 5), width=3, shape=hexgrid.ELLIPSE_1)
    scene = geom(kind, creature("a", kind, (0, 0)), big)
    own = hexgrid.footprint(big, grid).cells
    assert len(own) == 7
    cands = ff.candidates(scene, "a", "t")
    around = {n for c in own for n in hexgrid.neighbours(lay, c)} - set(own)
    assert len(around) == 12
    assert [c.role for c in cands] == ["around"] * 12 + ["front", "behind"]
    assert {c.cell for c in cands[:12]} == around
    assert len({c.cell for c in cands}) == 14
    for c in cands[12:]:
        assert hexgrid.cells_distance(lay, [c.cell], own) == 2
    assert ff.faces(cands) == 16


def square(cid: str, col: int, row: int, width: int = 1) -> CreatureGeom:
    return CreatureGeom(cid, col * 100, row * 100, width, width, Size.MEDIUM, 5, 6, 0, -1,
                        False)


def test_candidates_around_a_square() -> None:
    """On squares: the eight squares around, clockwise on screen from the one toward the
    attacker, then the squares two out in front and behind; a d12."""
    scene = SceneGeom(Grid(GridKind.SQUARE, 100, 5, "ft"), (),
                      (square("a", 0, 3), square("t", 5, 3)))
    cands = ff.candidates(scene, "a", "t")
    assert [c.cell for c in cands] == [(3, 4), (2, 4), (2, 5), (2, 6), (3, 6), (4, 6),
                                       (4, 5), (4, 4), (3, 3), (3, 7)]
    assert [c.role for c in cands] == ["around"] * 8 + ["front", "behind"]
    assert ff.faces(cands) == 12 and ff.pick(cands, 11) is None and ff.pick(cands, 12) is None
    with pytest.raises(ValueError, match=r"1\.\.12"):
        ff.pick(cands, 13)
    # Attacker on a diagonal: slot 1 is the diagonal neighbour toward it, the line's squares
    # two out are on the diagonal.
    diag = SceneGeom(Grid(GridKind.SQUARE, 100, 5, "ft"), (),
                     (square("a", 1, 1), square("t", 5, 5)))
    cands = ff.candidates(diag, "a", "t")
    assert cands[0].cell == (4, 4) and cands[8].cell == (3, 3) and cands[9].cell == (7, 7)


def test_candidates_around_a_large_square_target() -> None:
    """A 2x2 target: the twelve squares around its whole space."""
    scene = SceneGeom(Grid(GridKind.SQUARE, 100, 5, "ft"), (),
                      (square("a", 0, 4), square("t", 5, 4, width=2)))
    cands = ff.candidates(scene, "a", "t")
    around = {(r, c) for r in range(3, 7) for c in range(4, 8)} - {
        (4, 5), (4, 6), (5, 5), (5, 6)}
    assert {c.cell for c in cands[:12]} == around and len(cands) == 14
    assert cands[12].cell == (4, 3) or cands[12].cell == (5, 3)  # the line runs between
    assert cands[13].cell in ((4, 8), (5, 8))


# -- the d10 mapping is uniform over the candidates ---------------------------------------

@settings(max_examples=80, deadline=None)
@given(st.sampled_from(LAYOUTS), st.tuples(st.integers(0, 12), st.integers(0, 12)),
       st.tuples(st.integers(0, 12), st.integers(0, 12)), st.sampled_from([1, 2, 3]))
def test_d10_is_uniform_over_the_candidates(kind: GridKind, a: tuple[int, int],
                                            t: tuple[int, int], width: int) -> None:
    """Each candidate cell gets exactly one face of the friendly-fire die and two faces hit
    nothing (a d10 for a one-hex target): every candidate is struck with the same
    probability, and every cell around the footprint is one."""
    grid = Grid(kind, 100, 5, "ft")
    lay = HexLayout.of(grid)
    attacker = creature("a", kind, a)
    target = creature("t", kind, t, width=width, shape=hexgrid.ELLIPSE_1)
    fa = hexgrid.footprint(attacker, grid)
    ft = hexgrid.footprint(target, grid)
    if set(fa.cells) & set(ft.cells) or math.dist(fa.centre, ft.centre) < 1:
        return
    cands = ff.candidates(geom(kind, attacker, target), "a", "t")
    n = ff.faces(cands)
    faces = Counter(_cell(cands, face) for face in range(1, n + 1))
    assert faces[None] == 2
    assert len(faces) == n - 1 and all(k == 1 for cell, k in faces.items() if cell is not None)
    assert all(c.cell not in ft.cells for c in cands)
    around = {m for c in ft.cells for m in hexgrid.neighbours(lay, c)} - set(ft.cells)
    assert {c.cell for c in cands if c.role == "around"} == around
    if len(ft.cells) == 1:
        assert n == 10


def test_seeded_d10_rolls_are_uniform() -> None:
    """The server's own d10 (random.Random(seed).randint) over 2000 fixed seeds: every face
    within 25% of its expected 200."""
    core = Core()
    core.scenes["f"] = _loaded(core)
    counts: Counter[int] = Counter()
    for seed in range(2000):
        res = core._friendly_fire(_resolve(seed=seed, attacks=[{"target": "b", "dice": [2]}]))
        counts[res.attacks[0].d10 or 0] += 1
    assert set(counts) == set(range(1, 11))
    assert all(150 <= n <= 250 for n in counts.values()), counts


# -- dice ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "moved", "natural"), [
    (1, 3, False), (10, 12, False), (17, 19, False), (18, 20, True), (19, 20, True),
    (20, 20, True)])
def test_dice_move_forward_by_two(raw: int, moved: int, natural: bool) -> None:
    die = ff.judge_forward(raw, 0, 100)
    assert (die.raw, die.natural20, die.hit) == (moved, natural, natural)


def test_a_natural_one_misses_the_target_but_not_the_stray_target() -> None:
    assert not ff.judge(1, 30, 10).hit
    assert ff.judge_forward(1, 30, 10).hit  # a raw 3 + 30 against 10


def _shot(defense: int = 15, modifier: int = 0, full: bool = False) -> ff.Shot:
    return ff.Shot("t", defense, modifier, full)


def _cands(token: str | None = "b") -> tuple[ff.Candidate, ...]:
    return tuple(ff.Candidate(k, (0, k), (0.0, 0.0), "around", token if k == 3 else None)
                 for k in range(1, 9))


def test_a_pool_hits_if_any_die_hits_and_never_rolls_the_d10() -> None:
    def no_d10() -> int:
        raise AssertionError("the d10 is rolled only after a miss")

    out = ff.resolve(_shot(), [3, 15], no_d10, _cands(), {"b": 10})
    assert out.hit_target and not out.friendly_fire and out.d10 is None


def test_a_pool_that_misses_moves_every_die_against_one_new_target() -> None:
    out = ff.resolve(_shot(defense=19, modifier=2), [16, 9], lambda: 3, _cands(), {"b": 12})
    assert not out.hit_target and out.friendly_fire
    assert (out.d10, out.slot, out.struck) == (3, 3, "b")
    assert [d.raw for d in out.moved] == [18, 11]
    assert [d.hit for d in out.moved] == [True, True] and out.hit_struck is True
    assert any("moved forward" in s for s in out.steps)


@pytest.mark.parametrize("face", [9, 10, 1])
def test_empty_slots_and_unoccupied_hexes_hit_nothing(face: int) -> None:
    out = ff.resolve(_shot(), [2], lambda: face, _cands(), {"b": 1})
    assert out.friendly_fire and out.struck is None and out.hit_struck is None


def test_full_cover_cannot_be_struck_even_by_a_natural_20() -> None:
    out = ff.resolve(_shot(full=True), [20], lambda: 3, _cands(), {"b": 30})
    assert not out.hit_target and out.struck == "b" and out.moved[0].natural20
    assert out.hit_struck is True


def test_a_struck_creature_without_a_defense_is_left_to_the_gm() -> None:
    out = ff.resolve(_shot(), [5], lambda: 3, _cands(), {})
    assert out.struck == "b" and out.hit_struck is None and out.defense_struck is None


# -- friendlyfire.resolve through the core and over the wire -----------------------------

def hexfield() -> dict[str, Any]:
    """HEXODDR, size 100: archer a at (0,1), bandit b at (0,6) behind a wall hiding all of
    it, ally c at (0,7) just behind b, fog over (0,3)."""
    return {"id": "hexfield", "grid": {"type": 2, "size": 100, "distance": 5},
            "walls": [{"id": "w", "c": [540, 0, 540, 120]}],
            "regions": [{"id": "fog", "kind": "obscuring", "penalty": 3,
                         "points": [250, 0, 350, 0, 350, 120, 250, 120]}],
            "tokens": [{"id": "a", "x": 50, "y": 0, "disposition": 1},
                       {"id": "b", "x": 550, "y": 0, "disposition": -1},
                       {"id": "c", "x": 650, "y": 0, "disposition": 1}]}


def _loaded(core: Core) -> Any:
    from server.messages import SceneLoad, parse_request
    from server.scene import load as load_scene
    req = parse_request({"type": "scene.load", "scene": {**hexfield(), "id": "f"},
                         "ruleset": "realms"})
    assert isinstance(req, SceneLoad)
    return load_scene(req.scene, req.ruleset, req.options, None)


def _resolve(**fields: Any) -> Any:
    from server.messages import FriendlyFireResolve, parse_request
    msg = {"type": "friendlyfire.resolve", "scene": "f", "attacker": "a",
           "defense": {"b": 14, "c": 12}, **fields}
    req = parse_request(msg)
    assert isinstance(req, FriendlyFireResolve)
    return req


@pytest.fixture
def field_peer(peer_factory: PeerFactory) -> Peer:
    p = peer_factory()
    load(p)  # the square arena, for check_rejected's closing query
    assert ok(p, {"type": "scene.load", "scene": hexfield(), "ruleset": "realms"})["type"] \
        == "ack"
    return p


def test_resolve_with_client_dice_lists_every_step(field_peer: Peer) -> None:
    reply = ok(field_peer, {"type": "friendlyfire.resolve", "scene": "hexfield",
                            "attacker": "a", "bonus": 4, "defense": {"b": 14, "c": 12},
                            "attacks": [{"target": "b", "dice": [17, 6], "d10": 4}],
                            }, "friendlyfire.result")
    assert reply["seed"] is None and reply["attacker"] == "a"
    (attack,) = reply["attacks"]
    assert attack["cover"] == "total" and attack["trigger"] == "full cover"
    assert attack["modifier"] == 4 - 3  # the fog's penalty is on the attacker
    assert not attack["hitTarget"] and attack["friendlyFire"] and attack["rolled"] == []
    slot4 = attack["candidates"][3]
    assert (attack["slot"], attack["struck"]) == (4, slot4.get("token"))
    assert slot4["token"] == "c"  # the hex east of b, clockwise from the attacker's west
    assert [d["raw"] for d in attack["moved"]] == [19, 8]
    assert [d["total"] for d in attack["moved"]] == [20, 9]
    assert attack["hitStruck"] is True and attack["defenseStruck"] == 12
    assert len(attack["steps"]) >= 5 and "Defense 14" in attack["steps"][0]


def test_resolve_with_a_seed_replays_exactly(field_peer: Peer) -> None:
    msg = {"type": "friendlyfire.resolve", "scene": "hexfield", "attacker": "a",
           "defense": {"b": 30, "c": 30}, "seed": 12345,
           "attacks": [{"target": "b", "count": 3}, {"target": "c", "count": 2}]}
    first = ok(field_peer, msg, "friendlyfire.result")
    again = ok(field_peer, msg, "friendlyfire.result")
    assert first["attacks"] == again["attacks"] and first["seed"] == again["seed"] == 12345
    # Split dice: two attacks, each resolved on its own (its own d10 when it missed).
    assert [a["target"] for a in first["attacks"]] == ["b", "c"]
    assert first["attacks"][0]["rolled"][:3] == ["d20"] * 3
    unseeded = ok(field_peer, {**msg, "seed": None}, "friendlyfire.result")
    assert isinstance(unseeded["seed"], int)
    replay = ok(field_peer, {**msg, "seed": unseeded["seed"]}, "friendlyfire.result")
    assert replay["attacks"] == unseeded["attacks"]


def _ff(rid: str, **fields: Any) -> bytes:
    msg = {"type": "friendlyfire.resolve", "scene": "hexfield", "attacker": "a",
           "defense": {"b": 14}, "attacks": [{"target": "b", "dice": [5]}], "id": rid}
    msg.update(fields)
    return mp(msg)


BAD = [
    Bad("ff-die-zero", _ff("d0", attacks=[{"target": "b", "dice": [0]}]), "invalid",
        "$.attacks[0].dice[0]", ("0",), "d0"),
    Bad("ff-die-21", _ff("d21", attacks=[{"target": "b", "dice": [21]}]), "invalid",
        "$.attacks[0].dice[0]", ("21",), "d21"),
    Bad("ff-d10-11", _ff("d10", attacks=[{"target": "b", "dice": [5], "d10": 11}]),
        "invalid", "$.attacks[0].d10", ("11", "10 faces"), "d10"),
    Bad("ff-d10-0", _ff("d0x", attacks=[{"target": "b", "dice": [5], "d10": 0}]),
        "invalid", "$.attacks[0].d10", ("0",), "d0x"),
    Bad("ff-too-many-dice", _ff("many", attacks=[{"target": "b", "dice": [5] * 11}]),
        "invalid", "$.attacks[0].dice", (), "many"),
    Bad("ff-count-mismatch", _ff("cm", attacks=[{"target": "b", "dice": [5, 6], "count": 3}]),
        "invalid", "$.attacks[0].count", ("3", "2"), "cm"),
    Bad("ff-no-dice", _ff("nd", attacks=[{"target": "b"}]), "invalid", "$.attacks[0].dice",
        ("count",), "nd"),
    Bad("ff-unknown-attacker", _ff("ua", attacker="ghost"), "unknown_token", "$.attacker",
        ("'ghost'",), "ua"),
    Bad("ff-unknown-target", _ff("ut", attacks=[{"target": "ghost", "dice": [5]}]),
        "unknown_token", "$.attacks[0].target", ("'ghost'",), "ut"),
    Bad("ff-self", _ff("self", attacks=[{"target": "a", "dice": [5]}]), "invalid",
        "$.attacks[0].target", ("'a'",), "self"),
    Bad("ff-no-defense", _ff("nodef", defense={"c": 10}), "invalid", "$.defense",
        ("'b'",), "nodef"),
    Bad("ff-defense-unknown", _ff("dx", defense={"b": 10, "ghost": 3}), "unknown_token",
        "$.defense", ("'ghost'",), "dx"),
    Bad("ff-seed-negative", _ff("sn", seed=-1), "invalid", "$.seed", ("-1",), "sn"),
    Bad("ff-seed-too-big", _ff("sb", seed=2 ** 53), "invalid", "$.seed", (), "sb"),
    Bad("ff-square-scene", _ff("sq", scene="arena", attacker="a",
                               attacks=[{"target": "b", "dice": [5]}]),
        "unsupported", "$.scene", ("realms",), "sq"),
    Bad("ff-unknown-scene", _ff("us", scene="nowhere"), "unknown_scene", "$.scene",
        ("'nowhere'",), "us"),
    Bad("ff-unknown-field", _ff("uf", advantage=True), "invalid", "$.advantage", (), "uf"),
]


@pytest.mark.parametrize("bad", BAD, ids=[b.name for b in BAD])
def test_bad_friendly_fire_is_rejected_and_changes_nothing(live_server: LiveServer,
                                                           field_peer: Peer,
                                                           bad: Bad) -> None:
    check_rejected(live_server, field_peer, bad, scene="hexfield")


def squarefield() -> dict[str, Any]:
    """Square grid, size 100: archer a at column 0, row 3, due west of bandit b at column 5;
    d north of b, c east of it, e two squares east (behind)."""
    return {"id": "flat", "grid": {"type": 1, "size": 100, "distance": 5},
            "tokens": [{"id": "a", "x": 0, "y": 300, "disposition": 1},
                       {"id": "b", "x": 500, "y": 300, "disposition": -1},
                       {"id": "d", "x": 500, "y": 200, "disposition": 1},
                       {"id": "c", "x": 600, "y": 300, "disposition": 1},
                       {"id": "e", "x": 700, "y": 300, "disposition": 0}]}


def test_friendly_fire_on_a_square_realms_scene(live_server: LiveServer,
                                                field_peer: Peer) -> None:
    """Over the wire on a square grid: ten candidate squares (the eight around, front,
    behind), a d12 (two empty slots), the client's die checked against it."""
    ok(field_peer, {"type": "scene.load", "scene": squarefield(), "ruleset": "realms"})
    base = {"type": "friendlyfire.resolve", "scene": "flat", "attacker": "a",
            "defense": {"b": 30, "c": 10, "d": 10, "e": 10}}
    struck = {}
    for face in (1, 3, 5, 10, 11, 12):
        reply = ok(field_peer, {**base, "attacks": [{"target": "b", "dice": [4], "d10": face}]},
                   "friendlyfire.result")
        (attack,) = reply["attacks"]
        assert attack["faces"] == 12 and len(attack["candidates"]) == 10
        struck[face] = attack["struck"]
    assert [c.get("token") for c in attack["candidates"]] == [
        None, None, "d", None, "c", None, None, None, None, "e"]
    assert [c["role"] for c in attack["candidates"]] == ["around"] * 8 + ["front", "behind"]
    assert struck == {1: None, 3: "d", 5: "c", 10: "e", 11: None, 12: None}
    rolled = ok(field_peer, {**base, "seed": 7, "attacks": [{"target": "b", "count": 1}]},
                "friendlyfire.result")["attacks"][0]
    assert rolled["rolled"] == ["d20", "d12"] and 1 <= rolled["d10"] <= 12
    check_rejected(live_server, field_peer,
                   Bad("ff-square-d13", _ff("s13", scene="flat", defense={"b": 30},
                                            attacks=[{"target": "b", "dice": [4], "d10": 13}]),
                       "invalid", "$.attacks[0].d10", ("12", "13"), "s13"), scene="flat")


def test_hex_scene_refused_by_corner_rulesets_names_them(live_server: LiveServer,
                                                         field_peer: Peer) -> None:
    for ruleset in ("dnd35", "pf1"):
        frame = mp({"type": "scene.load", "scene": {**hexfield(), "id": "x"},
                    "ruleset": ruleset, "id": "hx"})
        check_rejected(live_server, field_peer,
                       Bad(f"hex-{ruleset}", frame, "unsupported", "$.scene.grid.type",
                           (f"'{ruleset}'", "2", "HEXODDR", "corners"), "hx"))
