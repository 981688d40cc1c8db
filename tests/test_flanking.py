"""Flanking geometry in arrays (geometry/flanking.py): the opposite-faces test made on
many segments at once gives, segment by segment, the scalar test's answer, corners and
edges included (big creatures flank from any of their squares: two 2 x 100 allies are
40,000 segments, 145 ms of the worker one call at a time)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geometry import flanking
from geometry.flanking import (
    any_crosses_opposite_faces,
    any_crosses_opposite_prism_sides,
    crosses_opposite_faces,
    crosses_opposite_faces_many,
    crosses_opposite_prism_sides,
)

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
