"""Hex-grid geometry (geometry/hex.py) against Foundry's HexagonalGrid and BaseToken: fixed
points worked out by hand from Foundry's formulas, and hypothesis properties for all four
layouts (round trips, neighbours, distances, footprints)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st

from geometry import hex as hexgrid
from geometry.hex import HexLayout
from geometry.model import CreatureGeom, Grid, GridKind, Size

LAYOUTS = [GridKind.HEXODDR, GridKind.HEXEVENR, GridKind.HEXODDQ, GridKind.HEXEVENQ]
S3 = math.sqrt(3)


def layout(kind: GridKind, size: float = 100) -> HexLayout:
    return HexLayout.of(Grid(kind, size, 5, "ft"))


def one(v: np.ndarray) -> float:
    return float(np.asarray(v).reshape(-1)[0])


# -- fixed points from Foundry's formulas --------------------------------------------------

@pytest.mark.parametrize(("kind", "cell", "centre"), [
    # Rows (pointy): y = (0.75 i + 0.5) * size * 2/sqrt3; odd layout shifts odd rows right.
    (GridKind.HEXODDR, (1, 2), (250.0, 1.25 * 200 / S3)),
    (GridKind.HEXODDR, (0, 2), (200.0, 0.5 * 200 / S3)),
    (GridKind.HEXEVENR, (1, 2), (200.0, 1.25 * 200 / S3)),
    (GridKind.HEXEVENR, (0, 2), (250.0, 0.5 * 200 / S3)),
    # Columns (flat): x = (0.75 j + 0.5) * size * 2/sqrt3; odd layout shifts odd columns down.
    (GridKind.HEXODDQ, (1, 2), (2.0 * 200 / S3, 100.0)),
    (GridKind.HEXODDQ, (1, 1), (1.25 * 200 / S3, 150.0)),
    (GridKind.HEXEVENQ, (1, 2), (2.0 * 200 / S3, 150.0)),
    (GridKind.HEXEVENQ, (1, 1), (1.25 * 200 / S3, 100.0)),
])
def test_centres_match_foundry(kind: GridKind, cell: tuple[int, int],
                               centre: tuple[float, float]) -> None:
    lay = layout(kind)
    x, y = hexgrid.centre_point(lay, np.array([cell[0]]), np.array([cell[1]]))
    assert (one(x), one(y)) == pytest.approx(centre)


@pytest.mark.parametrize("kind", LAYOUTS)
def test_size_is_the_distance_between_adjacent_centres(kind: GridKind) -> None:
    lay = layout(kind, 140)
    columns = kind in (GridKind.HEXODDQ, GridKind.HEXEVENQ)
    assert (lay.size_x, lay.size_y) == pytest.approx(
        (140 * 2 / S3, 140) if columns else (140, 140 * 2 / S3))
    cx, cy = hexgrid.centre_point(lay, np.array([3]), np.array([3]))
    for n in hexgrid.neighbours(lay, (3, 3)):
        nx, ny = hexgrid.centre_point(lay, np.array([n[0]]), np.array([n[1]]))
        assert math.hypot(one(nx) - one(cx), one(ny) - one(cy)) == pytest.approx(140)


def test_vertices_match_foundry_get_vertices() -> None:
    # HEXODDR, cell (1, 2): y = 3i, x = 4j (odd row: no shift), scale size/4, sizeY/4.
    sy = 200 / S3 / 4
    want = [(250, 3 * sy), (300, 4 * sy), (300, 6 * sy), (250, 7 * sy), (200, 6 * sy),
            (200, 4 * sy)]
    got = hexgrid.vertices(layout(GridKind.HEXODDR), 1, 2).reshape(-1).tolist()
    assert got == pytest.approx([v for p in want for v in p])


@pytest.mark.parametrize(("kind", "width", "shape", "cells"), [
    # Foundry's RECTANGLE_1 2x2 on rows: rows 0 (two cells) and 1 (one cell).
    (GridKind.HEXODDR, 2, hexgrid.RECTANGLE_1, {(1, 2), (1, 3), (2, 3)}),
    (GridKind.HEXEVENR, 2, hexgrid.RECTANGLE_1, {(1, 2), (1, 3), (2, 2)}),
    (GridKind.HEXODDQ, 2, hexgrid.RECTANGLE_1, {(1, 2), (2, 2), (1, 3)}),
    (GridKind.HEXEVENQ, 2, hexgrid.RECTANGLE_1, {(1, 2), (2, 2), (2, 3)}),
    (GridKind.HEXODDR, 1, hexgrid.ELLIPSE_1, {(1, 2)}),
])
def test_token_cells_follow_foundry_shapes(kind: GridKind, width: int, shape: int,
                                           cells: set[tuple[int, int]]) -> None:
    lay = layout(kind)
    x, y = hexgrid.top_left_point(lay, np.array([1]), np.array([2]))
    got = hexgrid.token_cells(lay, round(one(x)), round(one(y)), width, width, shape)
    assert set(got) == cells


@pytest.mark.parametrize("kind", LAYOUTS)
@pytest.mark.parametrize(("width", "count"), [(1, 1), (2, 3), (3, 7), (4, 12)])
def test_ellipse_sizes(kind: GridKind, width: int, count: int) -> None:
    """Foundry's ELLIPSE_1 hex shapes: 1, 3, 7 and 12 hexes."""
    lay = layout(kind)
    cells = hexgrid.token_cells(lay, 300, 300, width, width, hexgrid.ELLIPSE_1)
    assert len(set(cells)) == count


# -- properties ------------------------------------------------------------------------------

cells_st = st.tuples(st.integers(-40, 40), st.integers(-40, 40))
kinds_st = st.sampled_from(LAYOUTS)
sizes_st = st.sampled_from([50.0, 100.0, 140.0, 71.5])


@given(kinds_st, sizes_st, st.lists(cells_st, min_size=1, max_size=30))
def test_cell_cube_pixel_round_trips(kind: GridKind, size: float,
                                     cells: list[tuple[int, int]]) -> None:
    lay = layout(kind, size)
    i = np.array([c[0] for c in cells])
    j = np.array([c[1] for c in cells])
    q, r = hexgrid.offset_to_cube(lay, i, j)
    assert (np.array(hexgrid.cube_to_offset(lay, q, r)) == np.array([i, j])).all()
    x, y = hexgrid.centre_point(lay, i, j)
    fq, fr = hexgrid.point_to_cube(lay, x, y)
    assert np.allclose(fq, q) and np.allclose(fr, r)
    assert np.allclose(hexgrid.cube_to_point(lay, q, r), (x, y))
    assert (np.array(hexgrid.point_to_offset(lay, x, y)) == np.array([i, j])).all()


@given(kinds_st, sizes_st, st.floats(-3000, 3000), st.floats(-3000, 3000))
def test_a_point_lies_in_the_cell_it_maps_to(kind: GridKind, size: float, x: float,
                                             y: float) -> None:
    lay = layout(kind, size)
    i, j = (int(v[0]) for v in hexgrid.point_to_offset(lay, np.array([x]), np.array([y])))
    poly = hexgrid.polygon(lay, i, j)
    assert poly.distance(shapely.Point(x, y)) <= 1e-6 * size


@given(kinds_st, cells_st)
def test_neighbours_are_symmetric_distinct_and_one_step(kind: GridKind,
                                                        cell: tuple[int, int]) -> None:
    lay = layout(kind)
    ns = hexgrid.neighbours(lay, cell)
    assert len(set(ns)) == 6 and cell not in ns
    me = hexgrid.polygon(lay, *cell)
    for n in ns:
        assert cell in hexgrid.neighbours(lay, n)
        assert hexgrid.distance(lay, cell, n) == 1
        # Neighbours share a whole side (side length = size / sqrt 3).
        shared = me.intersection(hexgrid.polygon(lay, *n))
        assert shared.length == pytest.approx(lay.size / S3, rel=1e-6)


@given(kinds_st, cells_st, cells_st)
def test_distance_is_cube_distance_and_a_metric(kind: GridKind, a: tuple[int, int],
                                                b: tuple[int, int]) -> None:
    lay = layout(kind)
    qa, ra = hexgrid.offset_to_cube(lay, np.array([a[0]]), np.array([a[1]]))
    qb, rb = hexgrid.offset_to_cube(lay, np.array([b[0]]), np.array([b[1]]))
    d = hexgrid.distance(lay, a, b)
    assert d == max(abs(one(qa) - one(qb)), abs(one(ra) - one(rb)),
                    abs(one(qa) + one(ra) - one(qb) - one(rb)))
    assert d == hexgrid.distance(lay, b, a) and (d == 0) == (a == b)
    # One step to a neighbour changes the distance by at most one.
    for n in hexgrid.neighbours(lay, a):
        assert abs(hexgrid.distance(lay, n, b) - d) <= 1


@settings(max_examples=60)
@given(kinds_st, st.sampled_from([1, 2, 3, 4]), st.sampled_from(range(6)),
       st.integers(0, 20), st.integers(0, 20))
def test_token_footprints_are_connected_and_hold_the_centre(
        kind: GridKind, width: int, shape: int, i: int, j: int) -> None:
    lay = layout(kind)
    x, y = hexgrid.token_position(lay, (i, j), width, width, shape)
    token = CreatureGeom("t", round(x), round(y), width, width, Size.MEDIUM, 5, 6,
                         0, 0, False, shape=shape)
    fp = hexgrid.footprint(token, Grid(kind, 100, 5, "ft"))
    assert fp.polygon.geom_type == "Polygon"  # one piece
    assert fp.polygon.area == pytest.approx(len(fp.cells) * 0.75 * lay.size_x * lay.size_y)
    assert fp.polygon.buffer(1e-6).contains(shapely.Point(fp.centre))
    # Inside the token's own rectangle (BaseToken#getSize), give or take Foundry's rounding.
    w, h = hexgrid.token_size(lay, width, width)
    rect = shapely.box(token.x, token.y, token.x + w, token.y + h).buffer(1.0)
    assert rect.contains(fp.polygon)


@given(kinds_st, st.tuples(st.floats(0, 1500), st.floats(0, 1500)),
       st.tuples(st.floats(0, 1500), st.floats(0, 1500)))
def test_cells_on_a_segment_are_those_it_enters(kind: GridKind, p: tuple[float, float],
                                                q: tuple[float, float]) -> None:
    lay = layout(kind)
    cells = hexgrid.cells_on_segment(lay, p, q)
    line = shapely.LineString([p, q])
    for c in cells:
        assert shapely.relate_pattern(line, hexgrid.polygon(lay, *c), "T********")
    # Consecutive cells along a line are neighbours (cells only touching at a corner
    # are still neighbours on a hex grid), unless the line runs along a side.
    if line.length > 0:
        start = hexgrid.point_to_offset(lay, np.array([p[0]]), np.array([p[1]]))
        first = (int(start[0][0]), int(start[1][0]))
        assert not cells or hexgrid.distance(lay, first, cells[0]) <= 1


@settings(max_examples=40, deadline=None)
@given(kinds_st, st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8),
                                    st.sampled_from([1, 2, 3]), st.sampled_from(range(6))),
                          min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 5),
                          st.integers(0, 8), st.integers(0, 8), st.integers(0, 5)),
                min_size=1, max_size=40))
def test_tracer_footprint_test_equals_shapely(kind: GridKind,
                                              tokens: list[tuple[int, int, int, int]],
                                              segs: list[tuple[int, ...]]) -> None:
    """The vectorised line-enters-footprint test agrees with Shapely's DE-9IM `T********` on
    lines between hex corners and centres (the degenerate cases: along sides, through
    corners, along sides shared inside a big creature)."""
    from geometry.model import SceneGeom
    from geometry.trace import Tracer

    grid = Grid(kind, 100, 5, "ft")
    lay = HexLayout.of(grid)
    cs = []
    for k, (i, j, w, shape) in enumerate(tokens):
        x, y = hexgrid.token_position(lay, (i, j), w, w, shape)
        cs.append(CreatureGeom(f"c{k}", round(x), round(y), w, w, Size.MEDIUM, 5, 6, 0, 0,
                               False, shape=shape))
    tracer = Tracer(SceneGeom(grid, (), tuple(cs)))

    def point(i: int, j: int, corner: int) -> tuple[float, float]:
        if corner == 5:
            x, y = hexgrid.centre_point(lay, np.array([i]), np.array([j]))
            return one(x), one(y)
        v = hexgrid.vertices(lay, i, j)[corner]
        return float(v[0]), float(v[1])

    starts = np.array([point(s[0], s[1], s[2]) for s in segs])
    ends = np.array([point(s[3], s[4], s[5]) for s in segs])
    keep = np.hypot(*(ends - starts).T) > 0
    starts, ends = starts[keep], ends[keep]
    if not len(starts):
        return
    hits = tracer.trace(starts, ends)
    got = set(zip(hits.creature_line.tolist(), hits.creature_idx.tolist(), strict=True))
    lines = shapely.linestrings(np.stack([starts, ends], axis=1))
    want, unsure = set(), set()
    for c, fp in enumerate(tracer.creature_polys or []):
        inside = shapely.relate_pattern(lines, fp, "T********")
        # Shapely's own rounding puts a line through a corner, or along a side, a hair
        # inside: only what lies clearly off the boundary is a sure hit.
        clear = shapely.difference(shapely.intersection(lines, fp),
                                   shapely.buffer(fp.boundary, 1e-6))
        sure = inside & (shapely.length(clear) > 1e-6)
        want |= {(ln, c) for ln in np.nonzero(sure)[0].tolist()}
        unsure |= {(ln, c) for ln in np.nonzero(inside & ~sure)[0].tolist()}
    assert got - unsure == want - unsure and want <= got


@pytest.mark.parametrize("kind", [GridKind.HEXODDR, GridKind.HEXEVENR, GridKind.HEXODDQ,
                                  GridKind.HEXEVENQ])
def test_a_line_along_a_hex_side_does_not_enter_it(kind: GridKind) -> None:
    """The crossing convention on hexes: a line running along a side of a creature's hex
    (extended well past both corners, so its direction comes out of rounding) only touches
    the footprint; moved a hundredth of a pixel inwards it enters. Found by hypothesis on
    HEXODDQ, where a line between two far grid corners ran along a side."""
    from geometry.model import SceneGeom
    from geometry.trace import Tracer

    grid = Grid(kind, 100, 5, "ft")
    lay = HexLayout.of(grid)
    x, y = hexgrid.token_position(lay, (5, 2), 1, 1, 0)
    tracer = Tracer(SceneGeom(grid, (), (
        CreatureGeom("c", x, y, 1, 1, Size.MEDIUM, 5, 6, 0, 0, False, shape=0),)))
    assert tracer.creature_polys is not None
    ring = np.array(tracer.creature_polys[0].exterior.coords)[:-1]
    centre = ring.mean(axis=0)
    for k in range(6):
        a, b = ring[k], ring[(k + 1) % 6]
        starts, ends = np.array([a - 3.7 * (b - a)]), np.array([b + 5.3 * (b - a)])
        assert tracer.trace(starts, ends).creature_line.size == 0, (kind, k)
        inward = 0.01 * (centre - (a + b) / 2) / np.hypot(*(centre - (a + b) / 2))
        assert tracer.trace(starts + inward, ends + inward).creature_line.size == 1, (kind, k)


def _all_pairs_distance(lay: HexLayout, footprints: list[list[tuple[int, int]]]) -> np.ndarray:
    n = len(footprints)
    return np.array([[hexgrid.cells_distance(lay, footprints[a], footprints[b]) if a != b
                      else 0 for b in range(n)] for a in range(n)])


@settings(max_examples=200, deadline=None)
@given(kinds_st, st.lists(st.lists(st.tuples(st.integers(-4, 8), st.integers(-4, 8)),
                                   min_size=1, max_size=25, unique=True),
                          min_size=1, max_size=6))
def test_footprints_distance_is_the_nearest_cells_of_every_two(
        kind: GridKind, footprints: list[list[tuple[int, int]]]) -> None:
    """Measured on border cells only (as for many cells), the distance is every cell's
    against every cell's: footprints apart, touching, overlapping, one inside another, in
    pieces."""
    lay = layout(kind)
    full = _all_pairs_distance(lay, footprints)
    want = full.tolist()
    some = np.arange(0, len(footprints), 2)
    assert hexgrid.footprints_distance(lay, footprints).tolist() == want
    # Few cells, some columns: every cell against the columns' cells.
    assert (hexgrid.footprints_distance(lay, footprints, some).tolist()
            == full[:, some].tolist())
    # Very few cells: the first read measures every column at once.
    once = hexgrid.FootprintSteps(lay, footprints)
    assert once[0, len(footprints) - 1] == full[0, -1]
    assert once[:, :].tolist() == want
    few, one_call = hexgrid._ALL_CELLS, hexgrid._ONE_CALL_CELLS
    try:
        hexgrid._ALL_CELLS = 0  # the border cells' way, whatever the cells
        hexgrid._ONE_CALL_CELLS = 0  # and footprint by footprint, as read
        assert hexgrid.footprints_distance(lay, footprints).tolist() == want
        # Some columns only (every other footprint), and column by column as read.
        assert (hexgrid.footprints_distance(lay, footprints, some).tolist()
                == full[:, some].tolist())
        steps = hexgrid.FootprintSteps(lay, footprints)
        last = len(footprints) - 1
        everyone = np.arange(len(footprints))
        assert steps[everyone, last].tolist() == full[:, last].tolist()
        assert steps[last, 0] == full[last, 0]
        # One attacker against everyone: its row, measured as the footprint's distances.
        assert steps[np.zeros(len(footprints), dtype=np.int64), everyone].tolist() \
            == full[0].tolist()
        assert steps[:, :].tolist() == want
        hexgrid._ALL_CELLS = few  # the same reads, every cell against the columns' cells
        steps = hexgrid.FootprintSteps(lay, footprints)
        assert steps[np.full(len(footprints), last), everyone].tolist() == full[last].tolist()
        assert steps[everyone, 0].tolist() == full[:, 0].tolist()
        assert steps[:, :].tolist() == want
    finally:
        hexgrid._ALL_CELLS, hexgrid._ONE_CALL_CELLS = few, one_call


def test_two_huge_footprints_are_measured_on_their_borders() -> None:
    """Two 40 x 40 blocks of cells apart, and a small one inside the first."""
    lay = layout(GridKind.HEXODDR)
    west = [(i, j) for i in range(40) for j in range(40)]
    east = [(i, j + 43) for i in range(40) for j in range(40)]
    inner = [(i + 15, j + 15) for i in range(10) for j in range(10)]
    got = hexgrid.footprints_distance(lay, [west, east, inner])
    assert got.tolist() == _all_pairs_distance(lay, [west, east, inner]).tolist()
    assert got[0, 2] == 0 and got[0, 1] > 0


@settings(max_examples=100, deadline=None)
@given(kinds_st, st.lists(st.lists(st.tuples(st.integers(-4, 8), st.integers(-4, 8)),
                                   min_size=1, max_size=6, unique=True),
                          min_size=4, max_size=8),
       st.data())
def test_footprint_steps_taken_from_a_recent_table_are_measured_where_footprints_moved(
        kind: GridKind, footprints: list[list[tuple[int, int]]], data: st.DataObject) -> None:
    """A table built from a recent one (`FootprintSteps.of`: the same footprint objects
    but one moved, as after a move, or one more at the end) reads what a fresh table
    reads: the changed footprints' rows and columns measured again, the others taken as
    they were."""
    lay = layout(kind)
    hexgrid.forget_measured()
    old = hexgrid.FootprintSteps.of(lay, footprints)
    assert old[:, :].tolist() == _all_pairs_distance(lay, footprints).tolist()
    k = data.draw(st.integers(0, len(footprints) - 1))
    shift = data.draw(st.tuples(st.integers(-3, 3), st.integers(-3, 3)))
    moved = list(footprints)
    moved[k] = [(i + shift[0], j + shift[1]) for i, j in footprints[k]]
    new = hexgrid.FootprintSteps.of(lay, moved)
    assert new._done.all()  # taken from the old table, not left to the first read
    assert new[:, :].tolist() == _all_pairs_distance(lay, moved).tolist()
    assert old[:, :].tolist() == _all_pairs_distance(lay, footprints).tolist()  # unchanged
    # The moved footprint's old state added at the end (as a rules engine adds it): the
    # table is taken too, the end measured.
    longer = [*moved, footprints[k]]
    grown = hexgrid.FootprintSteps.of(lay, longer)
    assert grown._done.all()
    assert grown[:, :].tolist() == _all_pairs_distance(lay, longer).tolist()
    # Equal values in other objects are measured again: nothing is taken by equality.
    copies = [list(f) for f in moved]
    assert not hexgrid.FootprintSteps.of(lay, copies)._done.any()
