"""Flanking geometry in arrays (geometry/flanking.py): the opposite-faces test made on
many segments at once gives, segment by segment, the scalar test's answer, corners and
edges included (big creatures flank from any of their squares: two 2 x 100 allies are
40,000 segments, 145 ms of the worker one call at a time)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.dressing import dress
from bench.hexscenes import HEX_KINDS, on_hex
from bench.scenes import generate
from geometry import flanking
from geometry import hex as hexgrid
from geometry.flanking import (
    any_crosses_opposite_faces,
    any_crosses_opposite_prism_sides,
    crosses_opposite_faces,
    crosses_opposite_faces_many,
    crosses_opposite_prism_sides,
    crosses_opposite_prism_sides_many,
)
from geometry.model import GridKind
from rulesets import REGISTRY
from rulesets.degrees import CoverDegrees, DegreesOptions, _Context

# Coordinates on a coarse lattice, so that segments often run along borders and through
# corners exactly (where the rules' "a corner belongs to both its borders" decides).
coord = st.integers(-2, 6).map(lambda k: k * 50.0)
height = st.sampled_from([-5.0, 0.0, 2.5, 5.0, 7.5, 10.0, 15.0])
point = st.tuples(coord, coord, height)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(point, point), min_size=1, max_size=60),
       st.sampled_from([(100.0, 100.0, 200.0, 200.0), (0.0, 50.0, 100.0, 300.0),
                        (50.0, 50.0, 75.0, 75.0)]),
       st.sampled_from([(0.0, 5.0), (0.0, 10.0), (2.5, 7.5), (5.0, 5.0 + 1e-7)]))
def test_many_segments_at_once_are_each_segment_alone(
        segments: list[tuple[tuple[float, float, float], tuple[float, float, float]]],
        box: tuple[float, float, float, float], zs: tuple[float, float]) -> None:
    p = np.array([s[0] for s in segments])
    q = np.array([s[1] for s in segments])
    got = crosses_opposite_faces_many(p, q, box, *zs)
    want = [crosses_opposite_faces(a, b, box, *zs) for a, b in segments]
    assert got.tolist() == want


def test_two_big_allies_flank_when_any_of_their_squares_do() -> None:
    box = (100.0, 100.0, 200.0, 200.0)
    west = [(50.0, 150.0 + 100 * k, 2.5) for k in range(50)]
    east = [(250.0, 150.0 + 100 * k, 2.5) for k in range(50)]
    assert any_crosses_opposite_faces(west, east, box, 0.0, 5.0)  # the first row does
    # Only squares far to the south: no line between them enters the target.
    assert not any_crosses_opposite_faces(west[1:], east[1:], box, 0.0, 5.0)
    # The one crossing pair found in a late block.
    assert any_crosses_opposite_faces(west[::-1], east[::-1], box, 0.0, 5.0)
    assert not any_crosses_opposite_faces([], east, box, 0.0, 5.0)


# And a hair off the lattice, within the tolerance the tests give a face.
near = st.one_of(coord, st.tuples(coord, st.sampled_from([-1e-5, -2e-6, 2e-6, 1e-5])).map(sum))
near_point = st.tuples(near, near, height)


@settings(max_examples=500, deadline=None)
@given(st.lists(near_point, min_size=11, max_size=30),
       st.lists(near_point, min_size=11, max_size=30),
       st.sampled_from([(100.0, 100.0, 200.0, 200.0), (0.0, 50.0, 100.0, 300.0),
                        (50.0, 50.0, 75.0, 75.0), (100.0, 100.0, 100.0 + 1e-7, 200.0)]),
       st.sampled_from([(0.0, 5.0), (0.0, 10.0), (2.5, 7.5), (5.0, 5.0 + 1e-7)]))
def test_the_pairs_left_untested_are_pairs_that_cannot_cross(
        ps: list[tuple[float, float, float]], qs: list[tuple[float, float, float]],
        box: tuple[float, float, float, float], zs: tuple[float, float]) -> None:
    """Over a hundred pairs, only those that may cross are tested (by where their points
    lie against the faces): the answer is the scalar test's over every pair."""
    want = any(crosses_opposite_faces(p, q, box, *zs) for p in ps for q in qs)
    assert any_crosses_opposite_faces(ps, qs, box, *zs) == want


def test_two_huge_allies_on_one_side_of_the_target_are_answered_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two 100 x 100 allies west of a Medium target: 10^8 pairs of squares' centres, none
    able to enter its square (10 s when each pair was tested); and the same two allies,
    one across the target from the other, flank."""
    box = (10_000.0, 10_000.0, 10_100.0, 10_100.0)
    west = [(50.0 + 100 * i, 5_050.0 + 100 * j, 2.5) for i in range(100) for j in range(100)]
    south_west = [(x - 200.0, y + 10_100.0, z) for x, y, z in west]
    east = [(x + 10_100.0, y, z) for x, y, z in west]
    tested: list[int] = []
    many = flanking.crosses_opposite_faces_many

    def counting(p: np.ndarray, q: np.ndarray, *args: float) -> np.ndarray:
        tested.append(len(p))
        return many(p, q, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(flanking, "crosses_opposite_faces_many", counting)
    assert not any_crosses_opposite_faces(west, south_west, box, 0.0, 5.0)
    assert tested == []
    assert any_crosses_opposite_faces(west, east, box, 0.0, 5.0)
    assert sum(tested) <= 10 * 2**16  # found in the first blocks, of 10^8 pairs


def test_a_line_from_a_hair_inside_a_corner_counts_through_that_corner() -> None:
    """A point a hair (within the faces' tolerance) inside the target's west border, next
    to its north-west corner: the line from it to a point east enters through that corner
    and leaves through the east border, so it crosses opposite borders. The pre-filter must
    keep such pairs (it judges "near a face" with a tolerance too)."""
    box = (100.0, 100.0, 200.0, 200.0)
    p, q = (100.00001, 99.99999, 2.5), (300.0, 150.0, 2.5)
    assert crosses_opposite_faces(p, q, box, 0.0, 5.0)
    # Filler that cannot cross, to take the pairs past the scalar path's few.
    ps = [p] + [(50.0, 50.0 - 10 * k, 2.5) for k in range(20)]
    qs = [q] + [(300.0, 50.0 - 10 * k, 2.5) for k in range(20)]
    assert any_crosses_opposite_faces(ps, qs, box, 0.0, 5.0)


#: A hex of side 50 around (100, 100), flat on top: its corners on the lattice's half steps.
HEX = [(150.0, 100.0), (125.0, 143.30127018922192), (75.0, 143.30127018922192),
       (50.0, 100.0), (75.0, 56.69872981077807), (125.0, 56.69872981077807)]


@settings(max_examples=150, deadline=None)
@given(st.lists(near_point, min_size=11, max_size=20),
       st.lists(near_point, min_size=11, max_size=20),
       st.sampled_from([(0.0, 5.0), (2.5, 7.5), (5.0, 5.0 + 1e-7)]))
def test_on_a_hex_the_pairs_left_untested_are_pairs_that_cannot_cross(
        ps: list[tuple[float, float, float]], qs: list[tuple[float, float, float]],
        zs: tuple[float, float]) -> None:
    """The same pre-filter for a hex prism (its six sides, bottom and top): the answer is
    the scalar test's over every pair."""
    want = any(crosses_opposite_prism_sides(p, q, HEX, *zs) for p in ps for q in qs)
    assert any_crosses_opposite_prism_sides(ps, qs, HEX, *zs) == want


def test_two_big_allies_on_one_side_of_a_hex_are_answered_without_testing_a_pair(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two 100 x 100 allies west of a target's hex (10^8 pairs, each a Shapely test of
    about 50 us before: hours); and across it from each other, they flank."""
    west = [(-10_000.0 + 100 * i, -5_000.0 + 100 * j, 2.5) for i in range(100)
            for j in range(100)]
    south_west = [(x - 200.0, y + 10_200.0, z) for x, y, z in west]
    east = [(x + 10_250.0, y, z) for x, y, z in west]
    tested: list[int] = []
    scalar = flanking.crosses_opposite_prism_sides

    def counting(*args: Any) -> bool:
        tested.append(1)
        return scalar(*args)

    monkeypatch.setattr(flanking, "crosses_opposite_prism_sides", counting)
    assert not any_crosses_opposite_prism_sides(west, south_west, HEX, 0.0, 5.0)
    assert tested == []
    assert any_crosses_opposite_prism_sides(west, east, HEX, 0.0, 5.0)


# -- many targets at once ------------------------------------------------------------------

#: Three hexes of other sizes, sides and orientations (pointy on top), for segments each
#: against its own.
RINGS = [HEX,
         [(100.0, 0.0), (186.60254037844388, 50.0), (186.60254037844388, 150.0),
          (100.0, 200.0), (13.397459621556135, 150.0), (13.397459621556135, 50.0)],
         [(250.0, 200.0), (225.0, 243.30127018922192), (175.0, 243.30127018922192),
          (150.0, 200.0), (175.0, 156.69872981077808), (225.0, 156.69872981077808)]]
BOXES = [(100.0, 100.0, 200.0, 200.0), (0.0, 50.0, 100.0, 300.0), (50.0, 50.0, 75.0, 75.0)]
ZS = [(0.0, 5.0), (0.0, 10.0), (2.5, 7.5), (5.0, 5.0 + 1e-7)]
# Points on a lattice of quarter steps, so that many segments run through the hexes'
# corners (at whole and half steps) and along their sides, and a hair off it.
hex_coord = st.one_of(st.integers(-4, 12).map(lambda k: k * 25.0),
                      st.tuples(st.integers(-4, 12).map(lambda k: k * 25.0),
                                st.sampled_from([-1e-5, 2e-6, 1e-5, -1e-10, 1e-10])).map(sum))
hex_point = st.tuples(hex_coord, hex_coord, height)


Segment = tuple[tuple[float, float, float], tuple[float, float, float], int, int]


def _each_against_its_own(segments: list[Segment], shapes: list[Any],
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                     np.ndarray]:
    """The segments (p, q, shape, heights) as the `_many` tests take them: their ends, each
    one's shape (a box or a ring of `shapes`) and its z0 and z1."""
    return (np.array([s[0] for s in segments]), np.array([s[1] for s in segments]),
            np.array([shapes[s[2]] for s in segments]),
            np.array([ZS[s[3]][0] for s in segments]), np.array([ZS[s[3]][1] for s in segments]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(hex_point, hex_point, st.integers(0, len(RINGS) - 1),
                          st.integers(0, len(ZS) - 1)), min_size=1, max_size=60))
def test_prism_segments_each_against_its_own_hex_are_each_segment_alone(
        segments: list[Segment]) -> None:
    """`crosses_opposite_prism_sides_many`, each segment against its own hex and heights
    (the flanking lines around many targets in one call), gives the scalar test's answer
    segment by segment: on the flat map Shapely's (`crosses_opposite_sides`), above or
    below it the prism's."""
    got = crosses_opposite_prism_sides_many(*_each_against_its_own(segments, RINGS))
    want = [crosses_opposite_prism_sides(a, b, RINGS[r], *ZS[z]) for a, b, r, z in segments]
    assert got.tolist() == want


def test_prism_segments_between_hex_centres_are_each_segment_alone() -> None:
    """Every line between the centres of the hexes around a target's hex (the lines
    flanking is drawn on; many through its corners), on Foundry's hex layouts, on the flat
    map and across heights: the one call answers as the scalar test, line by line, and
    finds the crossings."""
    found = 0
    for columns in (False, True):
        for even in (False, True):
            lay = hexgrid.HexLayout(columns, even, 100.0)
            ring = hexgrid.vertices(lay, 4, 3)
            ii, jj = np.meshgrid(np.arange(1, 8), np.arange(0, 7))
            cx, cy = hexgrid.centre_point(lay, ii.ravel(), jj.ravel())
            i, j = np.triu_indices(len(cx), 1)
            # (A hair off: lines through a corner pass it by less than the tolerance
            # that puts them through it.)
            for zp, zq, zs, hair in ((2.5, 2.5, (0.0, 5.0), 0.0), (2.5, 2.5, (0.0, 5.0), 1e-5),
                                     (2.5, 2.5, (0.0, 5.0), -2e-6),
                                     (12.5, -2.5, (0.0, 10.0), 0.0),
                                     (7.5, 2.5, (0.0, 5.0), 1e-5)):
                p = np.column_stack([cx[i], cy[i], np.full(len(i), zp)])
                q = np.column_stack([cx[j] + hair, cy[j], np.full(len(i), zq)])
                got = crosses_opposite_prism_sides_many(p, q, ring, *zs)
                scalar_ring = [tuple(v) for v in ring.tolist()]
                want = [crosses_opposite_prism_sides(tuple(a), tuple(b), scalar_ring, *zs)
                        for a, b in zip(p.tolist(), q.tolist(), strict=True)]
                assert got.tolist() == want
                found += sum(want)
    assert found > 800


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(near_point, near_point, st.integers(0, len(BOXES) - 1),
                          st.integers(0, len(ZS) - 1)), min_size=1, max_size=60))
def test_cube_segments_each_against_its_own_box_are_each_segment_alone(
        segments: list[Segment]) -> None:
    """`crosses_opposite_faces_many` with a box and heights per segment answers as the
    scalar test does for that segment's own."""
    got = crosses_opposite_faces_many(*_each_against_its_own(segments, BOXES))
    want = [crosses_opposite_faces(a, b, BOXES[k], *ZS[z]) for a, b, k, z in segments]
    assert got.tolist() == want


def _crowded_board(seed: int) -> Any:
    """49 dressed creatures of two sides alternating on a board two squares apart (allies
    crowd each target), big and small ones, some flying or under water and every fifth a
    step higher."""
    base = dress(generate(49, 0, seed).geom, seed)
    g = base.grid.size
    return replace(base, creatures=tuple(
        replace(c, x=g * (10 + 2 * (k % 7)), y=g * (10 + 2 * (k // 7)),
                disposition=1 if (k % 7 + k // 7) % 2 else -1,
                elevation=c.elevation + (10.0 if k % 5 == 0 else 0.0))
        for k, c in enumerate(base.creatures)))


@pytest.mark.parametrize("kind", [GridKind.SQUARE, *HEX_KINDS], ids=lambda k: k.name)
def test_partners_of_every_target_at_once_are_each_targets_own(kind: GridKind) -> None:
    """The degrees procedure's flanking partners, matched around every target at once
    (`_partners_many`, one array computation for all the allies' lines), are those of
    `_partners`, target by target, pair by pair (the reference's): the same bonus, the
    same partners in the same order. 49 creatures of two sides alternate on a board two
    squares apart (allies crowd each target), big and small ones, some flying or under
    water (bench/dressing.py) and some a step higher."""
    base = _crowded_board(3)
    geom = base if kind is GridKind.SQUARE else on_hex(base, kind, 3)
    rules = REGISTRY.get("degrees")
    assert isinstance(rules, CoverDegrees)
    ctx = _Context(geom, DegreesOptions(), rules)
    n = len(geom.creatures)
    groups = []
    for t in range(n):
        for side in sorted({c.disposition for c in geom.creatures}):
            who = [b for b in range(n) if b != t and geom.creatures[b].disposition == side
                   and ctx.in_reach(b, t, 15.0)]
            groups.append((t, who))
    many = ctx._partners_many(groups)
    one_by_one = [ctx._partners(t, who) for t, who in groups]
    assert many == one_by_one
    assert sum(1 for bonus, _ in many if bonus) >= 15
    assert sum(1 for bonus, _ in many if bonus >= 2) >= 3


@pytest.mark.parametrize("seed", [3, 4])
def test_corner_flankers_of_many_rows_are_each_rows_own(seed: int) -> None:
    """The corner engine's flanking allies of many rows at once (`flankers_many`, every
    ally's lines in one array test) are `flankers`' row by row: the same allies in the same
    order. 49 creatures of two sides alternate on a board two squares apart, big and small
    ones (some Colossal: their lines go one ally at a time), some flying, some a step
    higher; the rows are every ordered pair, each target threatened by those in reach."""
    from geometry.model import Size
    from rulesets.corner import FLANK_LINES, CornerEngine, CornerOptions

    geom = _crowded_board(seed)
    g = geom.grid.size
    # Two Colossal allies (6 x 6 squares: 1,296 lines between them) across one target.
    cs = list(geom.creatures)
    for k in (16, 30):
        cs[k] = replace(cs[k], size=Size.COLOSSAL, width=6.0, height=6.0, disposition=1,
                        elevation=0.0)
    cs[23] = replace(cs[23], disposition=-1, elevation=0.0, x=g * 16, y=g * 15)
    geom = replace(geom, creatures=tuple(cs))
    engine = CornerEngine(geom, CornerOptions())
    n = len(geom.creatures)
    pairs = np.array([(a, t) for a in range(n) for t in range(n) if a != t], dtype=np.intp)
    near = [(b, t) for b, t in pairs.tolist()
            if abs(geom.creatures[b].x - geom.creatures[t].x) <= 3 * g
            and abs(geom.creatures[b].y - geom.creatures[t].y) <= 3 * g]
    who = np.array([b for b, _ in near], dtype=np.intp)
    whom = np.array([t for _, t in near], dtype=np.intp)
    threatens = dict.fromkeys(near, True)
    many = engine.flankers_many(pairs[:, 0], pairs[:, 1], who, whom)
    one_by_one = [engine.flankers(a, t, threatens) for a, t in pairs.tolist()]
    assert many == one_by_one
    assert sum(1 for f in many if f) >= 50
    # Both ways are taken: allies' lines in arrays, and a big pair's one ally at a time.
    sizes = sorted(len(sq) for sq in engine.squares)
    assert sizes[0] * sizes[1] <= FLANK_LINES < sizes[-1] * sizes[-2]
