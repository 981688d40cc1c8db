"""Square-grid facts (geometry.square) and flanking geometry (geometry.flanking)."""

from __future__ import annotations

import pytest

from geometry.flanking import crosses_opposite_borders
from geometry.model import CreatureGeom, Grid, GridKind, Size
from geometry.square import (
    Box,
    adjacent,
    centre,
    corners,
    distance_feet,
    grid_steps,
    space,
    squares,
    within_reach,
)

GRID = Grid(GridKind.SQUARE, 100.0, 5.0, "ft")


def creature(x: float, y: float, width: float = 1, size: Size = Size.MEDIUM) -> CreatureGeom:
    return CreatureGeom(id="c", x=x, y=y, width=width, height=width, size=size,
                        reach=size.reach, tall=size.height, elevation=0.0, disposition=1,
                        hidden=False)


def sq(col: int, row: int, n: int = 1) -> Box:
    """The space of an n-by-n creature whose top-left square is (col, row)."""
    return (col * 100.0, row * 100.0, (col + n) * 100.0, (row + n) * 100.0)


# -- spaces and squares ----------------------------------------------------------------------

def test_large_token_occupies_four_squares() -> None:
    big = creature(200, 300, width=2, size=Size.LARGE)
    assert space(big, GRID) == (200, 300, 400, 500)
    assert sorted(squares(big, GRID)) == sorted([sq(2, 3), sq(3, 3), sq(2, 4), sq(3, 4)])


def test_huge_token_occupies_nine_squares() -> None:
    huge = creature(0, 0, width=3, size=Size.HUGE)
    got = squares(huge, GRID)
    assert len(got) == 9 and len(set(got)) == 9
    assert {sq(c, r) for c in range(3) for r in range(3)} == set(got)


def test_medium_and_tiny_tokens_have_one_square() -> None:
    assert squares(creature(100, 100), GRID) == [sq(1, 1)]
    tiny = creature(150, 100, width=0.5, size=Size.TINY)
    assert squares(tiny, GRID) == [(150, 100, 200, 150)]


def test_corners_and_centre() -> None:
    box = sq(1, 2)
    assert corners(box).tolist() == [[100, 200], [200, 200], [200, 300], [100, 300]]
    assert centre(box) == (150, 250)
    assert centre(sq(0, 0, 2)) == (100, 100)


# -- distances -----------------------------------------------------------------------------

@pytest.mark.parametrize(("other", "steps", "feet"), [
    (sq(1, 0), (1, 0), 5),       # adjacent straight
    (sq(1, 1), (1, 1), 5),       # 1 diagonal = 5
    (sq(2, 2), (2, 2), 15),      # 2 diagonals = 5 + 10
    (sq(3, 3), (3, 3), 20),      # 3 diagonals = 5 + 10 + 5
    (sq(4, 4), (4, 4), 30),      # 4 diagonals = 5 + 10 + 5 + 10
    (sq(3, 0), (3, 0), 15),      # 3 straight
    (sq(2, 1), (2, 1), 10),      # 1 diagonal + 1 straight
    (sq(3, 2), (3, 2), 20),      # 2 diagonals + 1 straight
    (sq(0, 0), (0, 0), 0),       # same square
])
def test_distance_feet_alternating_diagonals(other: Box, steps: tuple[int, int],
                                             feet: float) -> None:
    me = sq(0, 0)
    assert grid_steps(me, other, GRID.size) == steps
    assert distance_feet(me, other, GRID) == feet
    assert distance_feet(other, me, GRID) == feet


def test_distance_between_big_creatures_uses_nearest_squares() -> None:
    big = sq(0, 0, 2)  # squares (0..1, 0..1)
    assert distance_feet(big, sq(2, 0), GRID) == 5
    assert distance_feet(big, sq(3, 3), GRID) == 15
    assert distance_feet(big, sq(2, 2, 2), GRID) == 5


# -- reach ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("other", "reach", "expected"), [
    (sq(1, 0), 5, True),
    (sq(1, 1), 5, True),          # 5-ft reach threatens diagonally adjacent squares
    (sq(2, 0), 5, False),
    (sq(2, 2), 5, False),
    (sq(2, 0), 10, True),
    (sq(2, 1), 10, True),
    (sq(2, 2), 10, True),         # 10-ft reach reaches the second diagonal (15 ft counted)
    (sq(3, 0), 10, False),
    (sq(3, 3), 10, False),
    (sq(3, 1), 10, False),
    (sq(2, 2), 15, True),
    (sq(3, 3), 15, False),        # 20 ft counted
    (sq(3, 3), 20, True),
    (sq(1, 0), 0, False),         # 0 reach: not even adjacent squares
    (sq(1, 1), 0, False),
])
def test_within_reach(other: Box, reach: float, expected: bool) -> None:
    assert within_reach(sq(0, 0), other, reach, GRID) is expected


def test_zero_reach_threatens_only_the_shared_space() -> None:
    tiny = (150.0, 150.0, 200.0, 200.0)   # a Tiny creature inside square (1, 1)
    assert within_reach(tiny, sq(1, 1), 0, GRID)
    assert within_reach(sq(1, 1), tiny, 0, GRID)
    assert not within_reach(tiny, sq(2, 1), 0, GRID)
    assert not within_reach(tiny, sq(0, 0), 0, GRID)


def test_large_creature_reach_from_any_square() -> None:
    big = sq(0, 0, 2)
    assert within_reach(big, sq(3, 0), 10, GRID)
    assert within_reach(big, sq(3, 3), 10, GRID)   # second diagonal from (1, 1)
    assert not within_reach(big, sq(4, 0), 10, GRID)


# -- adjacency -------------------------------------------------------------------------------

@pytest.mark.parametrize(("other", "expected"), [
    (sq(1, 0), True),
    (sq(0, 1), True),
    (sq(1, 1), True),             # diagonal: touching at a corner
    (sq(-1, -1), True),
    (sq(2, 0), False),
    (sq(2, 1), False),
    (sq(0, 0), True),             # the same space
    ((20.0, 20.0, 70.0, 70.0), True),  # a Tiny creature inside the square
])
def test_adjacent(other: Box, expected: bool) -> None:
    assert adjacent(sq(0, 0), other, GRID) is expected
    assert adjacent(other, sq(0, 0), GRID) is expected


def test_adjacent_to_a_large_creature() -> None:
    big = sq(1, 1, 2)
    assert adjacent(big, sq(3, 3), GRID)
    assert adjacent(big, sq(0, 2), GRID)
    assert not adjacent(big, sq(4, 2), GRID)


# -- flanking: crossing opposite borders -----------------------------------------------------

BOX: Box = (100.0, 100.0, 200.0, 200.0)


@pytest.mark.parametrize(("p", "q"), [
    ((50, 150), (250, 150)),      # west to east
    ((150, 50), (150, 250)),      # north to south
    ((50, 120), (250, 180)),      # west to east, slanted
    ((50, 50), (250, 250)),       # corner to opposite corner
    ((250, 50), (50, 250)),       # the other diagonal
    ((0, 300), (300, 0)),         # bottom-left corner to top-right corner
    ((0, 50), (300, 200)),        # corner (w and n) to the east side
])
def test_opposite_borders_flank(p: tuple[float, float], q: tuple[float, float]) -> None:
    assert crosses_opposite_borders(p, q, BOX)
    assert crosses_opposite_borders(q, p, BOX)


@pytest.mark.parametrize(("p", "q"), [
    ((50, 150), (150, 250)),      # west to south: adjacent sides
    ((150, 50), (250, 150)),      # north to east
    ((50, 150), (150, 50)),       # grazing the top-left corner
    ((50, 100), (250, 100)),      # running along the north border
    ((150, 150), (350, 150)),     # one end inside the box
    ((120, 120), (180, 180)),     # both ends inside
    ((100, 150), (300, 150)),     # one end on the border
    ((50, 50), (50, 250)),        # beside the box
])
def test_not_opposite_borders(p: tuple[float, float], q: tuple[float, float]) -> None:
    assert not crosses_opposite_borders(p, q, BOX)
    assert not crosses_opposite_borders(q, p, BOX)


def test_flanking_a_large_creature_between_centres() -> None:
    big = sq(1, 1, 2)  # 100..300
    assert crosses_opposite_borders(centre(sq(0, 1)), centre(sq(3, 2)), big)
    assert crosses_opposite_borders(centre(sq(0, 0)), centre(sq(3, 3)), big)
    assert not crosses_opposite_borders(centre(sq(0, 1)), centre(sq(1, 3)), big)
