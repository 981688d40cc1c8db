"""Seams between creatures' spaces (geometry/seams.py): which lines run between two
creatures side by side."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from geometry.seams import box_seams, box_seams_reference, seam_hits


def _boxes(cells: list[tuple[int, int]]) -> np.ndarray:
    return np.array([[c * 100, r * 100, c * 100 + 100, r * 100 + 100] for c, r in cells],
                    dtype=np.float64)


def test_side_by_side_squares_share_one_seam_and_a_line_along_it_hits_both() -> None:
    seams = box_seams(_boxes([(3, 0), (3, 1), (5, 5)]))
    assert seams.p.tolist() == [[300.0, 100.0]] and seams.q.tolist() == [[400.0, 100.0]]
    lines, who = seam_hits(seams, np.array([[100.0, 100.0]]), np.array([[700.0, 100.0]]))
    assert sorted(who.tolist()) == [0, 1] and lines.tolist() == [0, 0]


def test_a_line_along_one_creature_beside_empty_ground_or_off_the_seam_hits_nothing() -> None:
    seams = box_seams(_boxes([(3, 0), (3, 1)]))
    # Beside empty ground, a hair off the seam, a point, slanted, and on the seam's line but
    # stopping short of it (or only touching its end).
    starts = np.array([[100.0, 200.0], [100.0, 100.001], [350.0, 100.0], [100.0, 150.0],
                       [0.0, 100.0], [0.0, 100.0]])
    ends = np.array([[700.0, 200.0], [700.0, 100.001], [350.0, 100.0], [700.0, 50.0],
                     [250.0, 100.0], [300.0, 100.0]])
    lines, _ = seam_hits(seams, starts, ends)
    assert lines.size == 0


def test_squares_touching_at_a_corner_or_overlapping_share_no_seam() -> None:
    assert box_seams(_boxes([(0, 0), (1, 1)])).empty
    assert box_seams(np.array([[0, 0, 200, 200], [0, 0, 200, 200]], dtype=np.float64)).empty


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=2, max_size=8,
                unique=True),
       st.lists(st.tuples(st.integers(0, 14), st.integers(0, 14), st.integers(0, 14),
                          st.integers(0, 14)), min_size=1, max_size=12))
def test_seam_hits_do_not_depend_on_the_line_direction(
        cells: list[tuple[int, int]], segs: list[tuple[int, int, int, int]]) -> None:
    """A line and its reverse run along the same seams (half-grid endpoints: lines through
    centres and along grid lines both occur)."""
    seams = box_seams(_boxes(cells))
    p = np.array([[a * 50.0, b * 50.0] for a, b, _, _ in segs])
    q = np.array([[c * 50.0, d * 50.0] for _, _, c, d in segs])
    fwd = sorted(zip(*(x.tolist() for x in seam_hits(seams, p, q)), strict=True))
    back = sorted(zip(*(x.tolist() for x in seam_hits(seams, q, p)), strict=True))
    assert fwd == back
    # Every hit line lies on a grid line (seams are square borders) and is not a point.
    for line, _ in fwd:
        assert (p[line] != q[line]).any()
        assert (p[line][0] == q[line][0] and p[line][0] % 100 == 0) \
            or (p[line][1] == q[line][1] and p[line][1] % 100 == 0)


_EDGE = st.sampled_from([0.0, 1e-7, -1e-7, 3e-6, 0.5])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 3),
                          st.integers(0, 3), _EDGE, _EDGE), min_size=0, max_size=14))
def test_box_seams_by_sorted_edges_equal_every_pair_tested(
        specs: list[tuple[int, int, int, int, float, float]]) -> None:
    """The seams found from the sorted edges are the ones testing every pair finds, in the
    same order: boxes of 0-3 squares a side (0: a point, an area's origin), on the grid or
    off it by less than the tolerance, by a little more, or by half a square; overlapping,
    touching along an edge or at a corner, or apart."""
    boxes = np.array([[c * 100 + dx, r * 100 + dy, (c + w) * 100 + dx, (r + h) * 100]
                      for c, r, w, h, dx, dy in specs], dtype=np.float64).reshape(-1, 4)
    got, want = box_seams(boxes), box_seams_reference(boxes)
    assert got.p.tolist() == want.p.tolist()
    assert got.q.tolist() == want.q.tolist()
    assert got.owners.tolist() == want.owners.tolist()
