"""Adjacent squares of two big creatures found at once (geometry.square.adjacent_pairs): the
pairs the one-at-a-time test `adjacent` finds, in the same order, whatever the boxes (on the
grid or off it, a Tiny creature's half square, overlapping), and for two 20 x 20 creatures
side by side without testing their 160,000 pairs one by one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geometry import square
from geometry.model import Grid, GridKind
from geometry.square import Box, adjacent, adjacent_pairs

GRID = Grid(GridKind.SQUARE, 100, 5, "ft")

# Corners on a lattice of quarter squares, and a hair off it, so that boxes often touch at
# exactly one square's gap (where `adjacent` says no) or just under it.
coord = st.integers(-8, 16).map(lambda k: k * 25.0) | st.integers(-8, 16).map(
    lambda k: k * 25.0 + 1e-7)
box = st.tuples(coord, coord, st.sampled_from([50.0, 100.0, 100.0 + 1e-7, 200.0]),
                st.sampled_from([50.0, 100.0, 300.0])).map(
    lambda b: (b[0], b[1], b[0] + b[2], b[1] + b[3]))


@settings(max_examples=300, deadline=None)
@given(st.lists(box, max_size=25), st.lists(box, max_size=25))
def test_the_pairs_are_the_pairs_adjacent_finds_in_its_order(a: list[Box],
                                                             b: list[Box]) -> None:
    want = [(i, j) for i, x in enumerate(a) for j, y in enumerate(b) if adjacent(x, y, GRID)]
    ii, jj = adjacent_pairs(a, b, GRID)
    assert list(zip(ii.tolist(), jj.tolist(), strict=True)) == want


def test_two_20_by_20_creatures_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """Their touching columns: 20 squares, each next to two or three of the other's; only
    the squares near each other along x are measured (not 160,000 pairs)."""
    west = [(i * 100.0, j * 100.0, i * 100.0 + 100, j * 100.0 + 100) for j in range(20)
            for i in range(20)]
    east = [(x0 + 2000, y0, x1 + 2000, y1) for x0, y0, x1, y1 in west]
    measured: list[int] = []
    steps = square.grid_steps_many

    def counting(p: np.ndarray, q: np.ndarray, size: float) -> tuple[np.ndarray, np.ndarray]:
        measured.append(len(p))
        return steps(p, q, size)

    monkeypatch.setattr(square, "grid_steps_many", counting)
    ii, jj = adjacent_pairs(west, east, GRID)
    assert len(ii) == 20 + 2 * 19
    assert all(west[i][2] == east[j][0] for i, j in zip(ii.tolist(), jj.tolist(), strict=True))
    assert sum(measured) < 40 * len(east)  # a window of columns each, not all 400
