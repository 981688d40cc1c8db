"""The numpy crossing kernels: the documented crossing convention case by case, agreement
with Shapely's DE-9IM on degenerate integer lattices, chunking, and Foundry's side test."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st

from geometry import kernel
from geometry.kernel import BoolArray, FloatArray, IntArray

Seg = tuple[float, float, float, float]


def _arr(rows: list[tuple[float, float]]) -> FloatArray:
    return np.array(rows, dtype=np.float64).reshape(-1, 2)


def blocks(line: Seg, wall: Seg) -> bool:
    """Whether the kernel says `wall` blocks `line` (one line, one wall)."""
    li, wi = kernel.segments_cross_walls(
        _arr([line[:2]]), _arr([line[2:]]), np.array([wall], dtype=np.float64))
    assert li.shape == wi.shape
    return bool(li.size)


def enters(line: Seg, box: Seg) -> bool:
    li, bi = kernel.segments_enter_boxes(
        _arr([line[:2]]), _arr([line[2:]]), np.array([box], dtype=np.float64))
    assert li.shape == bi.shape
    return bool(li.size)


def _pairs(li: IntArray, wi: IntArray) -> list[tuple[int, int]]:
    return sorted(zip(li.tolist(), wi.tolist(), strict=True))


# -- the crossing convention, case by case -------------------------------------------------

H: Seg = (0, 0, 10, 0)  # a horizontal line from (0, 0) to (10, 0)


@pytest.mark.parametrize("wall", [(5, -5, 5, 5), (2, -3, 8, 3), (9, 5, 1, -5)])
def test_proper_crossing_blocks(wall: Seg) -> None:
    assert blocks(H, wall)
    assert blocks((10, 0, 0, 0), wall)


@pytest.mark.parametrize("wall", [(5, 0, 5, 5), (5, -5, 5, 0), (5, 0, 9, 7), (1, -1, 5, 0)])
def test_wall_endpoint_touching_line_interior_blocks(wall: Seg) -> None:
    assert blocks(H, wall)
    # Either orientation of the wall, either direction of the line.
    assert blocks(H, (wall[2], wall[3], wall[0], wall[1]))
    assert blocks((10, 0, 0, 0), wall)


@pytest.mark.parametrize("line", [
    (5, 0, 5, 10),    # line starts on the wall's interior
    (5, 10, 5, 0),    # line ends on the wall's interior
    (0, 0, 5, 5),     # line starts on the wall's endpoint
    (-5, 5, 10, 0),   # line ends on the wall's endpoint
    (3, 0, 7, -4),    # line starts on the wall, leaves on the other side
])
def test_line_endpoint_on_wall_does_not_block(line: Seg) -> None:
    assert not blocks(line, H)


@pytest.mark.parametrize("wall", [
    (5, 0, 15, 0),    # overlaps the line's second half
    (-5, 0, 15, 0),   # contains the whole line
    (2, 0, 8, 0),     # lies inside the line
    (0, 0, 10, 0),    # the very same segment
    (10, 0, 0, 0),    # the same segment reversed
    (10, 0, 20, 0),   # collinear, touching the line's end
    (12, 0, 20, 0),   # collinear, apart
])
def test_collinear_wall_never_blocks(wall: Seg) -> None:
    assert not blocks(H, wall)
    assert not blocks((10, 0, 0, 0), wall)


def test_corridor_along_a_wall_gives_nothing() -> None:
    # A line running along a wall and then crossing another one: only the crossing counts.
    starts, ends = _arr([(0, 0)]), _arr([(10, 0)])
    walls = np.array([[-5, 0, 20, 0], [6, -1, 6, 1]], dtype=np.float64)
    li, wi = kernel.segments_cross_walls(starts, ends, walls)
    assert _pairs(li, wi) == [(0, 1)]


def test_line_through_joint_of_collinear_walls_is_blocked_by_both() -> None:
    walls = np.array([[0, 0, 5, 0], [5, 0, 10, 0]], dtype=np.float64)
    li, wi = kernel.segments_cross_walls(_arr([(5, -5)]), _arr([(5, 5)]), walls)
    assert _pairs(li, wi) == [(0, 0), (0, 1)]
    # Slanted line through the joint too.
    li, wi = kernel.segments_cross_walls(_arr([(2, -3)]), _arr([(8, 3)]), walls)
    assert _pairs(li, wi) == [(0, 0), (0, 1)]


@pytest.mark.parametrize("line", [(5, 0, 5, 10), (0, 5, 10, 5), (2, 10, 8, 0)])
def test_line_through_joint_of_angled_walls_is_blocked(line: Seg) -> None:
    # A "V" with its apex at (5, 5): a line through the apex touches both walls' ends with
    # its interior (even the horizontal line that only grazes the apex).
    walls = np.array([[0, 0, 5, 5], [5, 5, 10, 0]], dtype=np.float64)
    li, _ = kernel.segments_cross_walls(_arr([line[:2]]), _arr([line[2:]]), walls)
    assert sorted(li.tolist()) == [0, 0]


@pytest.mark.parametrize("wall", [(0, 1, 10, 1), (-5, -2, 20, -2), (0, 1, 10, 1.5)])
def test_parallel_or_apart_does_not_block(wall: Seg) -> None:
    assert not blocks(H, wall)


@pytest.mark.parametrize("point", [(5, 0), (0, 0), (10, 0), (5, 3), (-1, -1)])
def test_zero_length_line_is_never_blocked(point: tuple[float, float]) -> None:
    line: Seg = (*point, *point)
    for wall in [H, (5, -5, 5, 5), (0, 0, 0, 10), (5, 0, 5, 5)]:
        assert not blocks(line, wall)


def test_empty_inputs() -> None:
    none = np.empty((0, 2))
    walls = np.array([H], dtype=np.float64)
    for li, wi in (kernel.segments_cross_walls(none, none, walls),
                   kernel.segments_cross_walls(_arr([(0, 0)]), _arr([(1, 1)]),
                                               np.empty((0, 4))),
                   kernel.segments_enter_boxes(none, none, walls),
                   kernel.segments_enter_boxes(_arr([(0, 0)]), _arr([(1, 1)]),
                                               np.empty((0, 4)))):
        assert li.size == 0 and wi.size == 0
        assert li.dtype == np.intp and wi.dtype == np.intp


# -- agreement with Shapely ------------------------------------------------------------------

def shapely_blocks(lines: FloatArray, walls: FloatArray) -> BoolArray:
    """The convention in DE-9IM terms, for every (line, wall): the closed wall meets the
    interior of the line (II or IB not F) and they do not share a piece of line (neither II
    nor IB is of dimension 1)."""
    ls = shapely.linestrings(lines.reshape(-1, 2, 2))
    ws = shapely.linestrings(walls.reshape(-1, 2, 2))
    matrix = shapely.relate(ls[:, None], ws[None, :])
    ii = np.vectorize(lambda m: m[0])(matrix)
    ib = np.vectorize(lambda m: m[1])(matrix)
    out: BoolArray = ((ii != "F") | (ib != "F")) & (ii != "1") & (ib != "1")
    return out


def _dense(li: IntArray, wi: IntArray, n: int, m: int) -> BoolArray:
    out: BoolArray = np.zeros((n, m), dtype=bool)
    out[li, wi] = True
    return out


def _lattice_segments(size: int) -> FloatArray:
    pts = list(itertools.product(range(size), repeat=2))
    return np.array([(*p, *q) for p, q in itertools.permutations(pts, 2)], dtype=np.float64)


def test_shapely_agrees_exhaustively_on_3x3_lattice() -> None:
    # Every ordered non-degenerate segment of a 3x3 lattice against every other: all the
    # touching, collinear and joint configurations a small lattice has.
    segs = _lattice_segments(3)
    li, wi = kernel.segments_cross_walls(segs[:, :2], segs[:, 2:], segs)
    mine = _dense(li, wi, len(segs), len(segs))
    theirs = shapely_blocks(segs, segs)
    bad = np.argwhere(mine != theirs)
    assert bad.size == 0, [(segs[i].tolist(), segs[j].tolist(), bool(mine[i, j]))
                           for i, j in bad[:10]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shapely_agrees_on_random_lattice_segments(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lines = rng.integers(0, 6, size=(500, 4)).astype(np.float64)
    walls = rng.integers(0, 6, size=(300, 4)).astype(np.float64)
    lines = lines[(lines[:, 0] != lines[:, 2]) | (lines[:, 1] != lines[:, 3])]
    walls = walls[(walls[:, 0] != walls[:, 2]) | (walls[:, 1] != walls[:, 3])]
    li, wi = kernel.segments_cross_walls(lines[:, :2], lines[:, 2:], walls)
    mine = _dense(li, wi, len(lines), len(walls))
    theirs = shapely_blocks(lines, walls)
    assert theirs.any() and not theirs.all()
    bad = np.argwhere(mine != theirs)
    assert bad.size == 0, [(lines[i].tolist(), walls[j].tolist(), bool(mine[i, j]))
                           for i, j in bad[:10]]
    # Scaled to pixels and shifted off the origin the answer is the same.
    li2, wi2 = kernel.segments_cross_walls(lines[:, :2] * 50 + 7, lines[:, 2:] * 50 + 7,
                                           walls * 50 + 7)
    assert _pairs(li2, wi2) == _pairs(li, wi)


def shapely_enters(lines: FloatArray, boxes: FloatArray) -> BoolArray:
    ls = shapely.linestrings(lines.reshape(-1, 2, 2))
    bs = shapely.box(boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3])
    out: BoolArray = np.asarray(shapely.relate_pattern(ls[:, None], bs[None, :], "T********"),
                               dtype=bool)
    return out


def _random_boxes(rng: np.random.Generator, n: int, size: int) -> FloatArray:
    a = rng.integers(0, size, size=(n, 2))
    b = rng.integers(0, size, size=(n, 2))
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keep = (lo[:, 0] < hi[:, 0]) & (lo[:, 1] < hi[:, 1])
    return np.concatenate([lo, hi], axis=1)[keep].astype(np.float64)


def test_boxes_agree_with_shapely_exhaustively_on_lattice() -> None:
    segs = _lattice_segments(4)
    boxes = np.array([(x0, y0, x1, y1)
                      for x0, x1 in itertools.combinations(range(4), 2)
                      for y0, y1 in itertools.combinations(range(4), 2)], dtype=np.float64)
    li, bi = kernel.segments_enter_boxes(segs[:, :2], segs[:, 2:], boxes)
    mine = _dense(li, bi, len(segs), len(boxes))
    theirs = shapely_enters(segs, boxes)
    bad = np.argwhere(mine != theirs)
    assert bad.size == 0, [(segs[i].tolist(), boxes[j].tolist(), bool(mine[i, j]))
                           for i, j in bad[:10]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_boxes_agree_with_shapely_on_random_lattice(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lines = rng.integers(0, 8, size=(600, 4)).astype(np.float64)
    lines = lines[(lines[:, 0] != lines[:, 2]) | (lines[:, 1] != lines[:, 3])]
    boxes = _random_boxes(rng, 200, 8)
    li, bi = kernel.segments_enter_boxes(lines[:, :2], lines[:, 2:], boxes)
    mine = _dense(li, bi, len(lines), len(boxes))
    theirs = shapely_enters(lines, boxes)
    assert theirs.any() and not theirs.all()
    bad = np.argwhere(mine != theirs)
    assert bad.size == 0, [(lines[i].tolist(), boxes[j].tolist(), bool(mine[i, j]))
                           for i, j in bad[:10]]


@pytest.mark.parametrize(("line", "expected"), [
    ((0, 50, 300, 50), True),        # straight through the middle
    ((0, 0, 300, 0), False),         # along the top edge
    ((0, 100, 300, 100), False),     # along the bottom edge
    ((50, -50, 250, 150), True),     # corner to corner, through the interior
    ((0, 100, 150, -50), False),     # grazing the top-left corner only
    ((150, 50, 300, 50), True),      # starting inside
    ((50, 50, 100, 50), False),      # ending on the left edge
    ((200, 100, 300, 200), False),   # starting at a corner, going away
])
def test_box_cases(line: Seg, expected: bool) -> None:
    assert enters(line, (100, 0, 200, 100)) is expected


# -- chunking ------------------------------------------------------------------------------

@pytest.mark.parametrize("cells", [1, 2, 7, 64])
def test_chunking_does_not_change_results(monkeypatch: pytest.MonkeyPatch, cells: int) -> None:
    rng = np.random.default_rng(5)
    lines = rng.integers(0, 6, size=(120, 4)).astype(np.float64)
    walls = rng.integers(0, 6, size=(40, 4)).astype(np.float64)
    boxes = _random_boxes(rng, 40, 6)
    ref_w = kernel.segments_cross_walls(lines[:, :2], lines[:, 2:], walls)
    ref_b = kernel.segments_enter_boxes(lines[:, :2], lines[:, 2:], boxes)
    assert ref_w[0].size and ref_b[0].size
    monkeypatch.setattr(kernel, "CHUNK_CELLS", cells)
    got_w = kernel.segments_cross_walls(lines[:, :2], lines[:, 2:], walls)
    got_b = kernel.segments_enter_boxes(lines[:, :2], lines[:, 2:], boxes)
    for ref, got in ((ref_w, got_w), (ref_b, got_b)):
        assert _pairs(*got) == _pairs(*ref)
        # Not only the same set: the same order, chunk by chunk.
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1])


# -- Foundry's side of a wall ----------------------------------------------------------------

def orient2d_fast(a: tuple[float, float], b: tuple[float, float],
                  c: tuple[float, float]) -> float:
    """foundry.utils.orient2dFast, transcribed."""
    return (a[1] - c[1]) * (b[0] - c[0]) - (a[0] - c[0]) * (b[1] - c[1])


def orient_point(wall: Seg, point: tuple[float, float]) -> int:
    """Foundry's Wall#orientPoint / Edge#orientPoint: CONST.WALL_DIRECTIONS."""
    o = orient2d_fast((wall[0], wall[1]), (wall[2], wall[3]), point)
    if o == 0:
        return 0  # BOTH
    return 1 if o < 0 else 2  # LEFT : RIGHT


@pytest.mark.parametrize(("wall", "point", "side"), [
    ((0, 0, 10, 0), (5, 5), 1),      # wall pointing east, point below (y down): LEFT
    ((0, 0, 10, 0), (5, -5), 2),     # point above: RIGHT
    ((10, 0, 0, 0), (5, 5), 2),      # reversed wall swaps the sides
    ((0, 0, 10, 0), (20, 0), 0),     # collinear: BOTH
    ((0, 0, 10, 0), (0, 0), 0),      # on the endpoint: BOTH
    ((0, 0, 0, 10), (5, 5), 2),      # wall pointing south, point east: RIGHT
    ((0, 0, 0, 10), (-5, 5), 1),
])
def test_foundry_side_hand_cases(wall: Seg, point: tuple[float, float], side: int) -> None:
    assert orient_point(wall, point) == side
    got = kernel.foundry_side(np.array([wall], dtype=np.float64), _arr([point]))
    assert got.dtype == np.int8
    assert got.tolist() == [side]


def test_foundry_side_matches_orient2d_fast_on_random_points() -> None:
    rng = np.random.default_rng(11)
    walls = rng.integers(-20, 20, size=(400, 4)).astype(np.float64)
    points = rng.integers(-20, 20, size=(400, 2)).astype(np.float64)
    got = kernel.foundry_side(walls, points).tolist()
    want = [orient_point((w[0], w[1], w[2], w[3]), (p[0], p[1]))
            for w, p in zip(walls.tolist(), points.tolist(), strict=True)]
    assert got == want
    assert {0, 1, 2} <= set(got)


# -- grouped prune and the 4 x 4 block kernel ------------------------------------------------

def _random_groups(rng: np.random.Generator, n: int) -> IntArray:
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, n // 5), replace=False))
    return np.concatenate([[0], cuts]).astype(np.intp)


@pytest.mark.parametrize("seed", [0, 1])
def test_group_prune_does_not_change_results(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lines = rng.integers(0, 6, size=(300, 4)).astype(np.float64)
    walls = rng.integers(0, 6, size=(60, 4)).astype(np.float64)
    boxes = _random_boxes(rng, 60, 6)
    groups = _random_groups(rng, len(lines))
    for fn, items in ((kernel.segments_cross_walls, walls),
                      (kernel.segments_enter_boxes, boxes)):
        ref = fn(lines[:, :2], lines[:, 2:], items)
        got = fn(lines[:, :2], lines[:, 2:], items, groups)
        assert _pairs(*got) == _pairs(*ref)
        assert ref[0].size


def _random_blocks(rng: np.random.Generator, b: int, size: int) -> tuple[FloatArray, FloatArray]:
    starts = rng.integers(0, size, size=(b, 4, 2)).astype(np.float64)
    ends = rng.integers(0, size, size=(b, 4, 2)).astype(np.float64)
    return starts, ends


def _flatten_blocks(starts: FloatArray, ends: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Line block * 16 + 4 * start + end as flat start and end arrays."""
    flat_s = np.repeat(starts, 4, axis=1).reshape(-1, 2)
    flat_e = np.tile(ends, (1, 4, 1)).reshape(-1, 2)
    return flat_s, flat_e


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_kernel_matches_segment_kernel_and_shapely(seed: int) -> None:
    rng = np.random.default_rng(seed)
    starts, ends = _random_blocks(rng, 60, 5)
    walls = rng.integers(0, 5, size=(80, 4)).astype(np.float64)
    walls = walls[(walls[:, 0] != walls[:, 2]) | (walls[:, 1] != walls[:, 3])]
    li, wi, side = kernel.blocks_cross_walls(starts, ends, walls)
    flat_s, flat_e = _flatten_blocks(starts, ends)
    assert np.array_equal(flat_s[7], starts[0, 1]) and np.array_equal(flat_e[7], ends[0, 3])
    ref = kernel.segments_cross_walls(flat_s, flat_e, walls)
    assert _pairs(li, wi) == _pairs(*ref)
    # And with Shapely, for the non-degenerate lines.
    real = np.any(flat_s != flat_e, axis=1)
    theirs = shapely_blocks(np.concatenate([flat_s, flat_e], axis=1)[real], walls)
    mine = _dense(li, wi, len(flat_s), len(walls))[real]
    assert np.array_equal(mine, theirs)
    # Each hit's side is Foundry's side of the line's start, never "both".
    assert side.dtype == np.int8
    assert np.array_equal(side, kernel.foundry_side(walls[wi], flat_s[li]))
    assert set(side.tolist()) <= {1, 2}


def test_block_kernel_hand_case() -> None:
    # Two unit squares with a wall between them on x = 2, running from y = -1 to y = 0.25:
    # it blocks the lines between the squares' upper corners only.
    a = corners_of(0, 0)
    b = corners_of(3, 0)
    walls = np.array([[2, -1, 2, 0.25]], dtype=np.float64)
    li, _, side = kernel.blocks_cross_walls(a[None], b[None], walls)
    lines = sorted(li.tolist())
    # corners: 0 top-left, 1 top-right, 2 bottom-right, 3 bottom-left
    assert lines == sorted(4 * s + e for s in (0, 1) for e in (0, 1))
    # The wall points south (y down); the starts, west of it, are on Foundry's LEFT.
    assert side.tolist() == [1, 1, 1, 1]
    assert kernel.foundry_side(walls, a[:1]).tolist() == [1]
    # From the other side, the same lines have their start on the RIGHT.
    li2, _, side2 = kernel.blocks_cross_walls(b[None], a[None], walls)
    assert sorted(li2.tolist()) == lines and side2.tolist() == [2, 2, 2, 2]


def corners_of(x: float, y: float) -> FloatArray:
    return np.array([[x, y], [x + 1, y], [x + 1, y + 1], [x, y + 1]], dtype=np.float64)


@pytest.mark.parametrize("cells", [1, 16, 33])
def test_block_kernel_chunking(monkeypatch: pytest.MonkeyPatch, cells: int) -> None:
    rng = np.random.default_rng(9)
    starts, ends = _random_blocks(rng, 30, 5)
    walls = rng.integers(0, 5, size=(30, 4)).astype(np.float64)
    ref = kernel.blocks_cross_walls(starts, ends, walls)
    assert ref[0].size
    monkeypatch.setattr(kernel, "CHUNK_CELLS", cells)
    got = kernel.blocks_cross_walls(starts, ends, walls)
    key_ref = sorted(zip(*(a.tolist() for a in ref), strict=True))
    key_got = sorted(zip(*(a.tolist() for a in got), strict=True))
    assert key_got == key_ref


def test_block_kernel_empty() -> None:
    none = np.empty((0, 4, 2))
    li, wi, side = kernel.blocks_cross_walls(none, none, np.array([H], dtype=np.float64))
    assert li.size == wi.size == side.size == 0
    one = corners_of(0, 0)[None]
    li, wi, side = kernel.blocks_cross_walls(one, one + 5, np.empty((0, 4)))
    assert li.size == wi.size == side.size == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_box_kernel_matches_segment_kernel(seed: int) -> None:
    rng = np.random.default_rng(seed)
    starts, ends = _random_blocks(rng, 60, 6)
    boxes = _random_boxes(rng, 50, 6)
    li, bi = kernel.blocks_enter_boxes(starts, ends, boxes)
    flat_s, flat_e = _flatten_blocks(starts, ends)
    ref = kernel.segments_enter_boxes(flat_s, flat_e, boxes)
    assert ref[0].size
    assert _pairs(li, bi) == _pairs(*ref)


def _square_blocks(rng: np.random.Generator, b: int) -> tuple[FloatArray, FloatArray]:
    """Blocks between the corners of two unit squares anywhere on a 30 x 30 board: long
    thin hulls whose bounding boxes are mostly empty (what the normal-axis prune is for)."""
    a = rng.integers(0, 30, size=(b, 2)).astype(np.float64)
    t = rng.integers(0, 30, size=(b, 2)).astype(np.float64)
    unit = corners_of(0, 0)
    return a[:, None, :] + unit[None], t[:, None, :] + unit[None]


@pytest.mark.parametrize("seed", [3, 4])
def test_normal_axis_prune_keeps_every_hit(seed: int) -> None:
    # Walls and boxes placed on the hulls' edges and corners (the prune's closest calls),
    # checked against the unpruned per-line kernels; the prune must also actually prune.
    rng = np.random.default_rng(seed)
    starts, ends = _square_blocks(rng, 200)
    pts = np.concatenate([starts.reshape(-1, 2), ends.reshape(-1, 2)])
    pick = rng.integers(0, len(pts), size=(300, 2))
    walls = np.concatenate([pts[pick[:, 0]], pts[pick[:, 1]]], axis=1)
    walls = walls[np.any(walls[:, :2] != walls[:, 2:], axis=1)]
    boxes = np.concatenate([pts[pick[:, 0]], pts[pick[:, 0]] + 1.0], axis=1)
    flat_s, flat_e = _flatten_blocks(starts, ends)
    li, wi, _ = kernel.blocks_cross_walls(starts, ends, walls)
    assert li.size
    assert _pairs(li, wi) == _pairs(*kernel.segments_cross_walls(flat_s, flat_e, walls))
    lb, bb = kernel.blocks_enter_boxes(starts, ends, boxes)
    assert lb.size
    assert _pairs(lb, bb) == _pairs(*kernel.segments_enter_boxes(flat_s, flat_e, boxes))
    groups = np.arange(len(starts), dtype=np.intp) * 16
    assert _pairs(*kernel.segments_cross_walls(flat_s, flat_e, walls, groups)) == _pairs(li, wi)
    bbox_only = sum(len(g) for g, _ in kernel._candidates(
        np.minimum(starts.min(axis=1), ends.min(axis=1)),
        np.maximum(starts.max(axis=1), ends.max(axis=1)),
        np.ones(len(starts), dtype=np.intp), walls, None, True))
    pruned = sum(len(g) for g, _ in kernel._block_candidates(starts, ends, walls, True))
    assert pruned < bbox_only


@pytest.mark.parametrize("seed", [5, 6])
def test_alike_walls_collapse_to_one_mark_per_line(seed: int) -> None:
    rng = np.random.default_rng(seed)
    starts, ends = _square_blocks(rng, 120)
    walls = rng.integers(0, 31, size=(200, 4)).astype(np.float64)
    walls = walls[np.any(walls[:, :2] != walls[:, 2:], axis=1)]
    alike = rng.random(len(walls)) < 0.6
    li, wi, side = kernel.blocks_cross_walls(starts, ends, walls)
    al, aw, aside, crossed = kernel.blocks_cross_walls_any(starts, ends, walls, alike)
    keep = ~alike[wi]
    assert _pairs(al, aw) == _pairs(li[keep], wi[keep])
    assert sorted(zip(al.tolist(), aside.tolist(), strict=True)) == sorted(
        zip(li[keep].tolist(), side[keep].tolist(), strict=True))
    assert crossed.tolist() == sorted(set(li[~keep].tolist()))
    assert crossed.size and al.size


@given(st.lists(st.integers(0, 300), max_size=200), st.sampled_from([1, 1_000, 1 << 40]))
@settings(max_examples=200, deadline=None)
def test_dense_unique_is_numpys_unique(values: list[int], scale: int) -> None:
    """Outcome codes made unique by a table of those present, or by a sort when they
    spread too far for one: as `np.unique` with its inverse."""
    keys = np.array(values, dtype=np.int64) * scale
    uniq, inverse = kernel.dense_unique(keys)
    want_u, want_i = np.unique(keys, return_inverse=True)
    assert uniq.tolist() == want_u.tolist()
    assert inverse.tolist() == want_i.reshape(-1).tolist()


@given(st.lists(st.integers(0, 6), max_size=30))
@settings(max_examples=100, deadline=None)
def test_within_runs_counts_each_run_from_zero(counts: list[int]) -> None:
    """Runs of these lengths end to end: each element's place in its own run."""
    want = [k for c in counts for k in range(c)]
    assert kernel.within_runs(np.array(counts, dtype=np.intp)).tolist() == want


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(*[st.integers(-50, 50)] * 6), min_size=1, max_size=30))
def test_point_segment_distance_is_shapely_s(rows: list[tuple[int, ...]]) -> None:
    """`kernel.point_segment_distance`, the one the band bounds and pf1's visible fractions
    read, equals GEOS's distance from a point to a segment (of no length too)."""
    px, py, ax, ay, bx, by = (np.array(c, dtype=np.float64) for c in zip(*rows, strict=True))
    got = kernel.point_segment_distance(px, py, ax, ay, bx, by)
    want = shapely.distance(shapely.points(np.column_stack([px, py])),
                            shapely.linestrings(np.stack([np.column_stack([ax, ay]),
                                                          np.column_stack([bx, by])],
                                                         axis=1)))
    assert np.allclose(got, want, atol=1e-9)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=60))
def test_shuffled_ranks_number_each_groups_items_from_zero(groups: list[int]) -> None:
    """`kernel.shuffled_ranks`: within each group, the items' ranks are 0 .. n - 1, each
    once, whatever the order the items come in."""
    from geometry.kernel import shuffled_ranks

    g = np.array(groups, dtype=np.intp)
    rank = shuffled_ranks(g)
    for k in set(groups):
        assert sorted(rank[g == k].tolist()) == list(range(groups.count(k)))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=80), st.integers(1, 7), st.integers(0, 40),
       st.sets(st.integers(0, 5)))
def test_in_rounds_gives_each_item_once_first_a_few_of_every_group(
        groups: list[int], chunk: int, one_round: int, finished: set[int]) -> None:
    """`kernel.in_rounds`: every item once, in chunks of at most `chunk`; beyond
    `one_round` items, the first round holds at most firsts[0] items of each group; and
    once `done` says a group is finished (here: after its first item is given, for the
    groups in `finished`), none of its items comes again."""
    from geometry.kernel import in_rounds

    g = np.array(groups, dtype=np.intp)
    given_: list[int] = []
    closed: set[int] = set()

    def done(k: np.ndarray) -> np.ndarray:
        return np.array([int(g[i]) in closed for i in k], dtype=bool)

    chunks: list[np.ndarray] = []
    for part in in_rounds(g, (2,), one_round, chunk, done):
        assert 0 < len(part) <= chunk
        for i in part.tolist():
            assert int(g[i]) not in closed
            given_.append(i)
        closed |= {int(g[i]) for i in part.tolist()} & finished
        chunks.append(part)
    assert len(given_) == len(set(given_))
    left = {i for i in range(len(groups)) if i not in set(given_)}
    assert all(int(g[i]) in finished for i in left)
    if not finished:
        assert sorted(given_) == list(range(len(groups)))
    if len(groups) > one_round and not finished and chunk >= len(groups):
        first = chunks[0].tolist()
        assert all(sum(1 for i in first if g[i] == k) <= 2 for k in set(groups))
