"""The third dimension and mounts, without sockets: vertical steps and 3D distance, flanking
through the faces of a cube, the sheet of sight against height bands, rider geometry, and
incremental recomputation with elevations and mounts."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import numpy as np
import pytest

from geometry import hex as hexgrid
from geometry.flanking import (
    crosses_opposite_borders,
    crosses_opposite_faces,
    crosses_opposite_prism_sides,
    crosses_opposite_sides,
)
from geometry.model import CreatureGeom, Grid, GridKind, Size
from geometry.square import feet_many, vertical_steps_many
from geometry.vertical import band_meets, flank_height, sheet, wall_crossing
from rulesets.pf2 import mounted_scene, rider_reach
from server.session import Core
from tests.test_incremental import Key, _full, _send, apply


def steps(a_elev: float, b_elev: float, a_side: float = 5, b_side: float = 5) -> int:
    return int(vertical_steps_many(np.array([a_elev]), np.array([a_side]),
                                   np.array([b_elev]), np.array([b_side]))[0])


@pytest.mark.parametrize(("a", "b", "expected"), [
    (0, 0, 0), (0, 5, 1), (5, 0, 1), (0, 10, 2), (0, 15, 3), (0, 2, 0), (0, 7, 1),
    (10, 0, 2),
])
def test_vertical_steps_between_5ft_cubes(a: float, b: float, expected: int) -> None:
    assert steps(a, b) == expected


def test_vertical_steps_large_cube() -> None:
    # A Large creature's cube is 10 ft high: a flyer at 10 ft is right on top of it.
    assert steps(0, 10, a_side=10) == 1
    assert steps(0, 15, a_side=10) == 2


@pytest.mark.parametrize(("xyz", "feet"), [
    ((1, 0, 0), 5), ((1, 1, 0), 5), ((1, 1, 1), 5), ((2, 2, 2), 15), ((0, 0, 3), 15),
    ((1, 0, 2), 10), ((2, 1, 1), 10), ((3, 3, 3), 20), ((4, 2, 0), 25),
])
def test_3d_alternating_diagonals(xyz: tuple[int, int, int], feet: int) -> None:
    sx, sy, sz = (np.array([v]) for v in xyz)
    assert int(feet_many(sx, sy, sz)[0]) == feet


BOX = (100.0, 100.0, 200.0, 200.0)


def test_faces_level_line_is_the_flat_test() -> None:
    p, q = (50.0, 150.0), (250.0, 150.0)
    assert crosses_opposite_faces((*p, 2.5), (*q, 2.5), BOX, 0, 5) is True
    assert crosses_opposite_borders(p, q, BOX) is True
    p2 = (50.0, 150.0)
    q2 = (150.0, 250.0)  # west to south: adjacent sides
    assert crosses_opposite_faces((*p2, 2.5), (*q2, 2.5), BOX, 0, 5) is False


def test_faces_above_and_below() -> None:
    assert crosses_opposite_faces((150, 150, 12.5), (150, 150, -2.5), BOX, 5, 10)
    # Above and beside: top face, then a side.
    assert not crosses_opposite_faces((150, 150, 12.5), (250, 150, 2.5), BOX, 5, 10)
    # Diagonal through opposite edges (top-west edge to bottom-east edge) counts.
    assert crosses_opposite_faces((50, 150, 15), (250, 150, 0), BOX, 5, 10)


def _hex_ring() -> list[tuple[float, float]]:
    layout = hexgrid.HexLayout.of(Grid(GridKind.HEXODDR, 100, 5, "ft"))
    return [(float(x), float(y)) for x, y in hexgrid.vertices(layout, 2, 2).tolist()]


def test_hex_prism_faces_above_below_and_level() -> None:
    ring = _hex_ring()
    cx = sum(v[0] for v in ring) / 6
    cy = sum(v[1] for v in ring) / 6
    # Straight down through the top and the bottom faces.
    assert crosses_opposite_prism_sides((cx, cy, 12.5), (cx, cy, -2.5), ring, 5, 10)
    # Above, then out through a side: not opposite faces.
    assert not crosses_opposite_prism_sides((cx, cy, 12.5), (cx + 100, cy, 2.5), ring, 5, 10)
    # Level lines are the flat test, whichever hex neighbours they join.
    for dx, dy in ((100, 0), (50, 86.6), (-50, 86.6), (60, 20)):
        p, q = (cx - dx, cy - dy), (cx + dx, cy + dy)
        assert crosses_opposite_prism_sides((*p, 7.5), (*q, 7.5), ring, 5, 10) \
            == crosses_opposite_sides(p, q, ring)
    assert crosses_opposite_sides((cx - 100, cy), (cx + 100, cy), ring)
    assert not crosses_opposite_sides((cx - 100, cy), (cx + 50, cy + 86.6), ring)


def test_a_square_prism_is_the_cube_test() -> None:
    """crosses_opposite_prism_sides on a square ring agrees with crosses_opposite_faces on
    random segments (grid-aligned ends included, so corners and edges are met exactly)."""
    rng = random.Random(3)
    ring = [(BOX[0], BOX[1]), (BOX[2], BOX[1]), (BOX[2], BOX[3]), (BOX[0], BOX[3])]
    for _ in range(3000):
        p = (rng.choice([0, 50, 100, 150, 200, 250, 300]), rng.choice([0, 50, 150, 250, 300]),
             rng.choice([-5, 0, 2.5, 5, 7.5, 10, 15]))
        q = (rng.choice([0, 50, 100, 150, 200, 250, 300]), rng.choice([0, 50, 150, 250, 300]),
             rng.choice([-5, 0, 2.5, 5, 7.5, 10, 15]))
        assert crosses_opposite_prism_sides(p, q, ring, 5, 10) \
            == crosses_opposite_faces(p, q, BOX, 5, 10), (p, q)


def test_flank_height_on_flat_ground_is_the_target_middle() -> None:
    assert flank_height(0, 5, 0, 5) == 2.5
    assert flank_height(0, 10, 0, 5) == 2.5  # a Large flanker beside a Medium target
    assert flank_height(10, 5, 0, 5) == 12.5  # a flyer above: its own centre


def test_sheet_and_bands() -> None:
    s = np.array([0.0, 0.5, 1.0])
    lo, hi = sheet(s, np.zeros(3), np.full(3, 6.0), np.full(3, 20.0), np.full(3, 6.0))
    assert lo.tolist() == [0, 10, 20] and hi.tolist() == [6, 16, 26]
    meets, whole = band_meets(np.full(3, np.nan), np.full(3, 10.0), lo, hi)
    assert meets.tolist() == [True, False, False]  # touching the span's edge is not meeting
    assert whole.tolist() == [True, False, False]
    meets, whole = band_meets(np.full(3, 12.0), np.full(3, np.nan), lo, hi)
    assert meets.tolist() == [False, True, True] and whole.tolist() == [False, False, True]


def test_wall_crossing_fraction() -> None:
    starts = np.array([[0.0, 50.0], [0.0, 0.0]])
    ends = np.array([[400.0, 50.0], [400.0, 400.0]])
    walls = np.array([[100.0, -100.0, 100.0, 200.0], [300.0, 0.0, 300.0, 500.0]])
    assert wall_crossing(starts, ends, walls).tolist() == [0.25, 0.75]


def creature(cid: str, x: float, size: Size, reach: float | None = None,
             mount: str | None = None, width: float = 1) -> CreatureGeom:
    return CreatureGeom(cid, x, 0, width, width, size, size.reach if reach is None else reach,
                        size.height, 0.0, 1, False, mount=mount)


@pytest.mark.parametrize(("size", "reach", "expected"), [
    (Size.MEDIUM, 10, 10), (Size.SMALL, 5, 5), (Size.LARGE, 5, 5), (Size.LARGE, 10, 5),
    (Size.LARGE, 15, 10), (Size.HUGE, 10, 5), (Size.HUGE, 15, 10), (Size.LARGE, 20, 15),
])
def test_rider_reach(size: Size, reach: float, expected: float) -> None:
    assert rider_reach(reach, creature("m", 0, size)) == expected


def test_mounted_scene_puts_the_rider_on_its_mount() -> None:
    from geometry.model import Grid, GridKind, SceneGeom
    horse = creature("h", 300, Size.LARGE, width=2)
    rider = creature("r", 0, Size.MEDIUM, mount="h")
    geom, mounts = mounted_scene(SceneGeom(Grid(GridKind.SQUARE, 100, 5, "ft"), (),
                                           (horse, rider)))
    placed = geom.creatures[1]
    assert (placed.x, placed.width, placed.height, placed.reach) == (300, 2, 2, 5)
    assert placed.tall == 12  # half the horse's 12 ft plus the rider's 6, at least the horse
    assert mounts == {"r": horse}


def _scene(rng: random.Random, ruleset: str = "pf2") -> dict[str, Any]:
    walls = []
    for k in range(10):
        x, y = rng.randrange(0, 10) * 100, rng.randrange(0, 10) * 100
        wall: dict[str, Any] = {"id": f"w{k}", "c": [x, y, x + 300, y]}
        if k % 3 == 0:
            wall["flags"] = {"wall-height": {"top": rng.choice([3, 6, 10])}}
        if k % 4 == 1:
            wall["flags"] = {"wall-height": {"bottom": 10}}
        walls.append(wall)
    cells = rng.sample([(x, y) for x in range(10) for y in range(10)], 7)
    tokens: list[dict[str, Any]] = [
        {"id": f"t{k}", "x": x * 100, "y": y * 100, "disposition": rng.choice([-1, 1]),
         "elevation": rng.choice([0, 0, 5, 10, 20])} for k, (x, y) in enumerate(cells)]
    tokens[0].update(width=2, height=2, size="large", elevation=0)
    tokens[1].update(x=tokens[0]["x"], y=tokens[0]["y"], elevation=0,
                     flags={"covercast": {"mount": "t0"}})
    return {"type": "scene.load", "ruleset": ruleset, "options": {},
            "scene": {"id": "s", "grid": {"type": 1, "size": 100, "distance": 5},
                      "walls": walls, "tokens": tokens}}


def _change(rng: random.Random, core: Core) -> dict[str, Any]:
    tokens = list(core.scenes["s"].tokens)
    kind = rng.choice(["move", "lift", "mount", "cover"])
    t = "t0" if kind == "mount" else rng.choice(tokens)
    if kind == "lift":
        return {"type": "token.update", "scene": "s",
                "tokens": [{"id": t, "elevation": rng.choice([0, 5, 10, 15, 30])}]}
    if kind == "cover":
        return {"type": "token.update", "scene": "s",
                "tokens": [{"id": t, "flags": {"covercast": {"takeCover": rng.random() < .5}}}]}
    return {"type": "token.update", "scene": "s",
            "tokens": [{"id": t, "x": rng.randrange(0, 9) * 100,
                        "y": rng.randrange(0, 9) * 100}]}


@pytest.mark.parametrize("ruleset", ["pf2", "dnd35", "pf1"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_incremental_matches_full_in_3d_with_a_mount(seed: int, ruleset: str) -> None:
    """Moving only the mount moves its rider's fighting space (pf2), a rider and its mount
    never give each other soft cover (dnd35, pf1: only pairs a creature in the way can
    still change are recomputed for it): every change's annotations (recomputed for the
    pairs it can touch) equal a full evaluation."""
    rng = random.Random(seed)
    core = Core()
    gm, viewer = core.connect(), core.connect()
    for conn in (gm, viewer):
        _send(core, conn, {"type": "hello", "protocol": 1, "client": "t"})
    assert _send(core, gm, _scene(rng, ruleset))[gm][0]["type"] == "ack"
    (full,) = _send(core, viewer, {"type": "subscribe", "scene": "s"})[viewer]
    held: dict[Key, Any] = {(a["attacker"], a["target"], a["mode"]): a
                            for a in full["annotations"]}
    for step in range(20):
        frames = _send(core, gm, _change(rng, core))
        assert frames[gm][0]["type"] == "ack", frames[gm][0]
        current = {k: msgspec.to_builtins(v) for k, v in core.tables.current("s", False).items()}
        assert current == _full(core), f"step {step}"
        for delta in frames.get(viewer, []):
            apply(held, delta)
        assert held == current, f"viewer after step {step}"
