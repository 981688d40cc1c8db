"""Flanking geometry in arrays (geometry/flanking.py): the opposite-faces test made on
many segments at once gives, segment by segment, the scalar test's answer, corners and
edges included (big creatures flank from any of their squares: two 2 x 100 allies are
40,000 segments, 145 ms of the worker one call at a time)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from geometry.flanking import (
    any_crosses_opposite_faces,
    crosses_opposite_faces,
    crosses_opposite_faces_many,
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
