"""Exact line of effect through openings (geometry/openings.py): slits and gaps narrower
than the rules' sample lines, gaps closed at a point, offset gaps, one-way, limited and
banded walls; and, over random scenes, that a line found free by dense sampling is never
missed and that the quick proofs (sealed, chains) never contradict the exact search."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import shapely
from hypothesis import example, given, settings
from hypothesis import strategies as st

from geometry import kernel, openings
from geometry.kernel import IntArray
from geometry.model import (
    CreatureGeom,
    Direction,
    Grid,
    GridKind,
    RegionGeom,
    RegionKind,
    SceneGeom,
    Size,
    WallCover,
    WallGeom,
)
from geometry.square import INSET_PX
from geometry.trace import Tracer
from geometry.vertical import band_meets, sheet, wall_crossing

GRID = Grid(GridKind.SQUARE, 100, 5.0, "ft")


def _wall(k: int, c: tuple[float, float, float, float], *, limited: bool = False,
          direction: Direction = Direction.BOTH, cover: WallCover = WallCover.SOLID,
          top: float | None = None) -> WallGeom:
    return WallGeom(f"w{k}", *c, active=True, limited=limited, direction=direction,
                    cover=cover, bottom=None, top=top)


def _scene(walls: Sequence[tuple[float, float, float, float] | WallGeom],
           boxes: Sequence[tuple[float, float, int]]) -> SceneGeom:
    ws = tuple(w if isinstance(w, WallGeom) else _wall(k, w) for k, w in enumerate(walls))
    cs = tuple(CreatureGeom(f"c{k}", x, y, size, size,
                            Size.MEDIUM if size == 1 else Size.LARGE, 5.0,
                            6.0 if size == 1 else 10.0, 0.0, 1, False)
               for k, (x, y, size) in enumerate(boxes))
    return SceneGeom(GRID, ws, cs, (), (), False)


def _loe(scene: SceneGeom, a: int = 0, t: int = 1) -> bool:
    tr = Tracer(scene)
    sp = openings.spaces_of(tr, INSET_PX)
    return bool(openings.pairs_line_of_effect(tr, sp, np.array([a]), np.array([t]))[0])


A_B = [(0, 200, 1), (1000, 200, 1)]


def test_no_walls_sees() -> None:
    assert _loe(_scene([], A_B))


def test_whole_wall_stops() -> None:
    assert not _loe(_scene([(500, -1000, 500, 1000)], A_B))


def test_slit_narrower_than_the_corners_spacing_passes() -> None:
    # A 2 px slit off the centre line, both creatures in line with it.
    assert _loe(_scene([(500, -1000, 500, 219), (500, 221, 500, 1000)], A_B))


def test_gap_closed_by_two_walls_meeting_at_a_point_stops() -> None:
    assert not _loe(_scene([(500, -1000, 500, 220), (500, 220, 500, 1000)], A_B))
    # ...and two walls meeting at a point at an angle (a room's corner seen across).
    assert not _loe(_scene([(500, -1000, 500, 220), (500, 220, 700, 1000)], A_B))


def test_offset_gaps_no_straight_line_stops() -> None:
    walls = [(500, -1000, 500, 219), (500, 221, 500, 1000),
             (700, -1000, 700, 100), (700, 102, 700, 1000)]
    assert not _loe(_scene(walls, A_B))


def test_aligned_gaps_pass() -> None:
    walls = [(500, -1000, 500, 219), (500, 221, 500, 1000),
             (700, -1000, 700, 219), (700, 221, 700, 1000)]
    assert _loe(_scene(walls, A_B))


def test_gap_seen_from_a_corner_only() -> None:
    # Lines from (0..100, 500..600) to (1000..1100, 100..200) cross x = 500 between
    # y = 300 and 440 (the highest from the attacker's lower right corner to the target's
    # lower right): a gap at 437-439 is reached only from near those corners, one at
    # 442-444 not at all.
    boxes = [(0, 500, 1), (1000, 100, 1)]
    assert _loe(_scene([(500, -1000, 500, 437), (500, 439, 500, 1000)], boxes))
    assert not _loe(_scene([(500, -1000, 500, 442), (500, 444, 500, 1000)], boxes))


def test_big_creatures_through_a_slit() -> None:
    walls = [(500, -1000, 500, 319), (500, 321, 500, 1000)]
    assert _loe(_scene(walls, [(0, 200, 2), (1000, 200, 2)]))


def test_one_way_wall_stops_one_direction() -> None:
    # Foundry's one-way wall: sight passes from one side only.
    walls = [_wall(0, (500, -1000, 500, 1000), direction=Direction.LEFT)]
    scene = _scene(walls, A_B)
    assert _loe(scene, 0, 1) != _loe(scene, 1, 0)


def test_limited_walls_stop_from_the_second() -> None:
    one = [_wall(0, (500, -1000, 500, 1000), limited=True)]
    assert _loe(_scene(one, A_B))
    two = [*one, _wall(1, (700, -1000, 700, 1000), limited=True)]
    assert not _loe(_scene(two, A_B))


def test_low_wall_and_arrow_slit_never_stop() -> None:
    low = [_wall(0, (500, -1000, 500, 1000), cover=WallCover.LOW)]
    assert _loe(_scene(low, A_B))
    slit = [_wall(0, (500, -1000, 500, 1000), cover=WallCover.IMPROVED)]
    assert _loe(_scene(slit, A_B))


def test_banded_walls() -> None:
    # A 3 ft wall leaves the sheet between two Medium creatures open above it; a band from
    # the floor to 20 ft fills it.
    short = [_wall(0, (500, -1000, 500, 1000), top=3.0)]
    assert _loe(_scene(short, A_B))
    tall = [_wall(0, (500, -1000, 500, 1000), top=20.0)]
    assert not _loe(_scene(tall, A_B))


def test_origin_point_through_a_slit() -> None:
    tr = Tracer(_scene([(500, -1000, 500, 219), (500, 221, 500, 1000)], A_B))
    sp = openings.spaces_of(tr, INSET_PX)
    rings = sp.rings[1:2]
    zero = np.zeros(1)
    for origin, seen in (((60.0, 220.0), True), ((60.0, 100.0), False)):
        point = np.broadcast_to(np.array(origin), rings.shape).copy()
        got = openings.line_of_effect(tr, point, rings, zero, zero, tr.elev[1:2],
                                      tr.tall[1:2])
        assert bool(got[0]) is seen
        # The same pair the other way round (the point as the second ring).
        fwd, back = openings.line_of_effect_both(tr, rings, point, tr.elev[1:2],
                                                 tr.tall[1:2], zero, zero)
        assert bool(back[0]) is seen and bool(fwd[0]) is seen


def _dense_free(tr: Tracer, a: np.ndarray, b: np.ndarray, k: int) -> bool:
    """Some line between k x k points spread over the two rings' boxes is free of every
    wall (all plain here)."""
    def spread(ring: np.ndarray) -> np.ndarray:
        lo, hi = ring.min(axis=0), ring.max(axis=0)
        u = np.linspace(0.0, 1.0, k)
        gx, gy = np.meshgrid(u, u)
        return np.column_stack([lo[0] + gx.ravel() * (hi[0] - lo[0]),
                                lo[1] + gy.ravel() * (hi[1] - lo[1])])
    p, q = spread(a), spread(b)
    s = np.repeat(p, len(q), axis=0)
    e = np.tile(q, (len(p), 1))
    wl, _ = kernel.segments_cross_walls(s, e, tr.wall_xy)
    return len(np.unique(wl)) < len(s)


def _rows(blk: openings.Blockers, ar: np.ndarray, br: np.ndarray,
          ext: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The walls near the pairs of rings as `line_of_effect_both` hands them to the search:
    (pair, wall) rows, those whose band never fills the sheet where lines cross them left
    out, and whether each one's fills it wherever they do."""
    bi, wi = kernel.block_candidates(ar, br, blk.xy)
    whole, never = openings._band_fill(blk, ar, br, ext, bi, wi)  # type: ignore[arg-type]
    return bi[~never], wi[~never], whole[~never]


walls_st = st.lists(st.tuples(st.integers(2, 9), st.integers(-2, 8), st.integers(-2, 8),
                              st.booleans()), min_size=1, max_size=7)


@settings(max_examples=60, deadline=None)
@given(walls_st, st.integers(0, 5), st.integers(0, 5))
def test_never_misses_a_free_line_and_proofs_agree(
        spec: list[tuple[int, int, int, bool]], ya: int, yb: int) -> None:
    # Walls on grid lines between two creatures 10 squares apart, with gaps of a few
    # pixels between collinear pieces (the openings dense sampling can still find).
    walls = []
    for col, y0, y1, vertical in spec:
        lo, hi = sorted((y0, y1))
        if vertical:
            walls.append((col * 100.0, lo * 100.0 + 3, col * 100.0, hi * 100.0 + 100))
        else:
            walls.append((lo * 100.0 + 103, col * 100.0 - 300, hi * 100.0 + 200,
                          col * 100.0 - 300))
    scene = _scene(walls, [(0, ya * 100, 1), (1000, yb * 100, 1)])
    tr = Tracer(scene)
    sp = openings.spaces_of(tr, INSET_PX)
    ar, br = sp.rings[0:1], sp.rings[1:2]
    got = _loe(scene)
    if _dense_free(tr, ar[0], br[0], 12):
        assert got
    # The exact search alone (no sealed or chain proof) gives the same answer.
    blk = openings.blockers(tr)
    ext = (tr.elev[:1], tr.tall[:1], tr.elev[1:2], tr.tall[1:2])
    bi, wi, whole = _rows(blk, ar, br, ext)
    if len(bi):
        searched, _ = openings._search(blk, ar, br, ext, bi, wi, whole, np.array([0]))
        assert bool(searched[0]) == got
        # And in rounds, as a search too large for one round is made, each round in
        # chunks of a few units (of up to four lines).
        one_round, chunk = openings._ONE_ROUND, openings._TRY_UNITS
        try:
            openings._ONE_ROUND, openings._TRY_UNITS = 0, 3
            searched, back = openings._search(blk, ar, br, ext, bi, wi, whole, np.array([0]))
        finally:
            openings._ONE_ROUND, openings._TRY_UNITS = one_round, chunk
        assert bool(searched[0]) == got
        assert bool(back[0]) == _loe(scene, 1, 0)


HEX = Grid(GridKind.HEXODDR, 100, 5.0, "ft")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(-3, 8), st.integers(-3, 8),
                          st.sampled_from(list(Direction))), min_size=1, max_size=8),
       st.integers(0, 4), st.integers(0, 4))
def test_big_hex_creatures_answer_as_the_pairs_of_their_hexes(
        spec: list[tuple[int, int, int, Direction]], ya: int, yb: int) -> None:
    """Two creatures of several hexes each, walls (some one-way) between them: the answer,
    each way, is whether some pair of their hexes has a free line that way. The search
    stops looking at a pair of creatures once it has a free line each way (`group`), so
    this is what it must still give."""
    walls = [_wall(k, (col * 100.0 + 7, lo * 100.0 + 3, col * 100.0 + 7, hi * 100.0 + 60),
                   direction=d)
             for k, (col, y0, y1, d) in enumerate(spec)
             for lo, hi in [sorted((y0, y1))]]
    cs = tuple(CreatureGeom(f"c{k}", x, y * 100.0, 3, 3, Size.HUGE, 5.0, 15.0, 0.0, 1, False)
               for k, (x, y) in enumerate([(0.0, ya), (900.0, yb)]))
    scene = SceneGeom(HEX, tuple(walls), cs, (), (), False)
    tr = Tracer(scene)
    sp = openings.spaces_of(tr, INSET_PX)
    assert sp.count.min() > 1
    ra = np.repeat(np.arange(sp.first[0], sp.first[0] + sp.count[0]), sp.count[1])
    rt = np.tile(np.arange(sp.first[1], sp.first[1] + sp.count[1]), sp.count[0])
    n = len(ra)
    f, b = openings.line_of_effect_both(
        tr, sp.rings[ra], sp.rings[rt], np.full(n, tr.elev[0]), np.full(n, tr.tall[0]),
        np.full(n, tr.elev[1]), np.full(n, tr.tall[1]))
    got = openings.pairs_line_of_effect(tr, sp, np.array([0, 1]), np.array([1, 0]))
    assert got.tolist() == [bool(f.any()), bool(b.any())]


def _big_hexes(walls: Sequence[tuple[float, float, float, float] | WallGeom],
               regions: tuple[RegionGeom, ...] = ()) -> tuple[Tracer, bool, bool, bool]:
    """Two creatures of three hexes (at x 0 and 1,000 px) among these walls: whether
    `walled_apart` (on their hulls) and the sealing walk (one plain wall or run) find
    them walled apart, and whether either has a line of effect to the other."""
    ws = tuple(w if isinstance(w, WallGeom) else _wall(k, w) for k, w in enumerate(walls))
    cs = tuple(CreatureGeom(f"c{k}", x, 0.0, 2, 2, Size.LARGE, 5.0, 10.0, 0.0, 1, False)
               for k, x in enumerate([0.0, 1000.0]))
    tr = Tracer(SceneGeom(HEX, ws, cs, regions, (), False))
    sp = openings.spaces_of(tr, INSET_PX)
    assert sp.count.min() == 3
    rings, corners = openings.hull_rings(sp)
    a, t = np.array([0, 1]), np.array([1, 0])
    apart = openings.walled_apart(tr, rings, corners, a, t)
    assert apart[0] == apart[1]
    walked = openings.sealed_pairs(tr, rings, corners, a, t)
    loe = openings.pairs_line_of_effect(tr, sp, a, t)
    return tr, bool(apart[0]), walked is not None and bool(walked[0]), bool(loe.any())


def test_creatures_walled_apart_by_a_corner_of_two_walls() -> None:
    """Two walls meeting at a corner between two big hex creatures (a bent wall, a
    room's corner): neither alone separates them (the sealing walk finds nothing), the
    two together do (`walled_apart`); with a gap at the corner, or with one of the two
    walls low, limited or one-way, they do not. Blocking terrain is never taken as
    walling apart (its borders are left to the exact test)."""
    bent = [(500.0, -600.0, 500.0, 100.0), (500.0, 100.0, 450.0, 800.0)]
    _, apart, walked, loe = _big_hexes(bent)
    assert apart and not walked and not loe
    _, apart, _, loe = _big_hexes([bent[0], (500.0, 101.0, 450.0, 800.0)])
    assert not apart and loe  # (through the gap at the corner)
    for wall in (_wall(1, bent[1], cover=WallCover.LOW), _wall(1, bent[1], limited=True),
                 _wall(1, bent[1], direction=Direction.LEFT), _wall(1, bent[1], top=2.0)):
        _, apart, _, _ = _big_hexes([bent[0], wall])
        assert not apart
    rock = RegionGeom("rock", RegionKind.BLOCKING,
                      ((450.0, -600.0), (550.0, -600.0), (550.0, 800.0), (450.0, 800.0)))
    _, apart, _, loe = _big_hexes([(0.0, 1500.0, 100.0, 1500.0)], (rock,))
    assert not apart and not loe


_POINT = st.tuples(st.integers(2, 8), st.integers(-4, 9))


@settings(max_examples=80, deadline=None)
# (A fence 45 ft high near a creature flying at 40 ft: the sheet rises above it near the
# flyer, so it stops no line; read from the other creature's end it would fill it.)
@example((3, [], 3, 45.0, False), [], [40, 0, 0])
@given(st.tuples(st.integers(3, 7), st.lists(_POINT, max_size=2), st.integers(3, 7),
                 st.sampled_from([None, 2.0, 30.0, 45.0]), st.booleans()),
       st.lists(st.tuples(st.lists(_POINT, min_size=2, max_size=4),
                          st.sampled_from([None, 2.0, 30.0, 45.0]), st.booleans()),
                max_size=3),
       st.lists(st.integers(0, 40), min_size=3, max_size=3))
def test_creatures_walled_apart_have_no_line_of_effect(
        fence: tuple[int, list[tuple[int, int]], int, float | None, bool],
        spec: list[tuple[list[tuple[int, int]], float | None, bool]],
        elevations: list[int]) -> None:
    """Whatever the walls (a bent fence from above the creatures to below them, walls
    meeting end to end as chains do, and others; some banded, some limited) and the
    creatures' sizes (three hexes, seven, one) and heights: two creatures `walled_apart`
    finds walled apart have no line of effect either way, as the exact test finds it hex
    by hex. Every pair of the three is asked at once, so pairs of different sizes go
    through one call padded to the largest, each with its own creatures' heights."""
    top_x, bends, bottom_x, fence_top, fence_limited = fence
    spec = [([(top_x, -6), *bends, (bottom_x, 10)], fence_top, fence_limited), *spec]
    walls = [_wall(k, (x0 * 100.0 + 3, y0 * 100.0 + 7, x1 * 100.0 + 3, y1 * 100.0 + 7),
                   top=top, limited=lim)
             for k, (points, top, lim) in enumerate(spec)
             for (x0, y0), (x1, y1) in itertools.pairwise(points)
             if (x0, y0) != (x1, y1)]
    walls = [replace(w, id=f"w{k}") for k, w in enumerate(walls)]
    cs = tuple(CreatureGeom(f"c{k}", x, y, size, size, Size.LARGE, 5.0, 5.0 * size + 5,
                            float(e), 1, False)
               for k, ((x, y, size), e) in enumerate(zip(
                   [(0.0, 0.0, 2), (1000.0, 0.0, 3), (500.0, 1100.0, 1)], elevations,
                   strict=True)))
    tr = Tracer(SceneGeom(HEX, tuple(walls), cs, (), (), False))
    sp = openings.spaces_of(tr, INSET_PX)
    a, t = (x.astype(np.intp) for x in np.nonzero(~np.eye(3, dtype=bool)))
    apart = openings.walled_apart(tr, *openings.hull_rings(sp), a, t)
    if apart.any():
        assert not openings.pairs_line_of_effect(tr, sp, a[apart], t[apart]).any()


@pytest.mark.parametrize("chunk", [1 << 14, 1])
def test_a_group_is_searched_until_it_has_a_free_line_each_way(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """Two pairs of one group (as two hex pairs of two creatures): the first runs free
    one way only, at once (a one-way wall); the second the other way only, through two
    slits two pixels wide that few of its lines pass. The group sees both ways: the second
    pair is still searched once the first is found free. (A first round of one unit, four
    lines, per pair: the second pair's free line is found in the next; and the same with
    each round tried in chunks of one unit.)"""
    monkeypatch.setattr(openings, "_ROUNDS", (1,))
    monkeypatch.setattr(openings, "_ONE_ROUND", 0)
    monkeypatch.setattr(openings, "_TRY_UNITS", chunk)
    walls: list[tuple[float, float, float, float] | WallGeom] = [
             _wall(0, (500, -1000, 500, 1000), direction=Direction.LEFT),
             _wall(1, (500, 2000, 500, 4400), direction=Direction.RIGHT),
             (600, 2000, 600, 3219), (600, 3221, 600, 4400),
             (800, 2000, 800, 3214), (800, 3216, 800, 4400)]
    scene = _scene(walls, [(0, 200, 1), (1000, 200, 1), (0, 3200, 1), (1000, 3200, 1)])
    tr = Tracer(scene)
    rings = openings.spaces_of(tr, INSET_PX).rings
    a, t = np.array([0, 2]), np.array([1, 3])
    alone = [openings.line_of_effect_both(tr, rings[a[k:k + 1]], rings[t[k:k + 1]],
                                          tr.elev[a[k:k + 1]], tr.tall[a[k:k + 1]],
                                          tr.elev[t[k:k + 1]], tr.tall[t[k:k + 1]])
             for k in range(2)]
    ways = [(bool(f[0]), bool(b[0])) for f, b in alone]
    assert sorted(ways) == [(False, True), (True, False)], ways
    f, b = openings.line_of_effect_both(tr, rings[a], rings[t], tr.elev[a], tr.tall[a],
                                        tr.elev[t], tr.tall[t], group=np.array([0, 0]))
    assert f.any() and b.any()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50), st.integers(1, 30),
                          st.integers(1, 30), st.integers(-60, 60), st.integers(-60, 60),
                          st.integers(-9, 9), st.integers(-9, 9)), min_size=1, max_size=20))
def test_clipping_by_the_axes_is_clipping_by_the_sides(
        rows: list[tuple[int, int, int, int, int, int, int, int]]) -> None:
    """A square grid's spaces are boxes: the search clips its lines to them by the axes
    (`_clip_boxes`), which must give the interval the general clip by the ring's sides
    gives (`_clip`), empty or not, lines along a side included."""
    boxes = np.array([[x, y, x + w, y + h] for x, y, w, h, *_ in rows], dtype=np.float64)
    p0 = np.array([[px, py] for *_, px, py, _, _ in rows], dtype=np.float64)
    d = np.array([[dx, dy] for *_, dx, dy in rows], dtype=np.float64)
    keep = np.hypot(d[:, 0], d[:, 1]) > 0
    boxes, p0, d = boxes[keep], p0[keep], d[keep]
    if not len(boxes):
        return
    rings = openings.box_rings(boxes, 0.0)
    as_boxes = openings._as_boxes(rings)
    assert as_boxes is not None
    normal, offset = openings._sides(rings)
    lo, hi = openings._clip(p0, d, normal, offset)
    blo, bhi = openings._clip_boxes(p0, d, as_boxes)
    assert ((lo <= hi) == (blo <= bhi)).all()
    inside = lo <= hi
    assert np.allclose(lo[inside], blo[inside]) and np.allclose(hi[inside], bhi[inside])


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 3), st.lists(st.tuples(st.floats(-300, 900), st.floats(-300, 900),
                                             st.floats(-1, 1), st.floats(-1, 1)),
                                   min_size=1, max_size=30))
def test_hexes_clipped_by_their_shared_sides_as_by_their_own(
        layout: int, lines: list[tuple[float, float, float, float]]) -> None:
    """A hex grid's hexes, each a hair inside, share their sides' directions: the search
    clips its lines to them by those shared sides (`_clip_shared`, `_clip_slabs`), as by
    each hex's own (`_clip`)."""
    kind = [GridKind.HEXODDR, GridKind.HEXEVENR, GridKind.HEXODDQ, GridKind.HEXEVENQ][layout]
    cs = tuple(CreatureGeom(f"c{k}", x, y, w, w, Size.HUGE if w == 3 else Size.MEDIUM, 5.0,
                            6.0, 0.0, 1, False)
               for k, (x, y, w) in enumerate([(0.0, 0.0, 1), (300.0, 200.0, 3),
                                              (600.0, 500.0, 2)]))
    tr = Tracer(SceneGeom(Grid(kind, 100, 5.0, "ft"), (), cs, (), (), False))
    rings = openings.spaces_of(tr, INSET_PX).rings
    shared = openings._shared_sides(rings)
    assert shared is not None
    p0 = np.array([[x, y] for x, y, _, _ in lines])
    d = np.array([[dx, dy] for _, _, dx, dy in lines])
    keep = np.hypot(d[:, 0], d[:, 1]) > 1e-3
    p0, d = p0[keep], d[keep]
    li = np.arange(len(p0)) % len(rings)
    normal, offset = openings._sides(rings)
    lo, hi = openings._clip(p0, d, normal[li], offset[li])
    slo, shi = openings._clip_shared(p0, d, shared[0], shared[1][li].T)
    inside = lo <= hi - 1e-6
    assert (slo <= shi)[inside].all()
    assert np.allclose(lo[inside], slo[inside], rtol=0, atol=1e-6)
    assert np.allclose(hi[inside], shi[inside], rtol=0, atol=1e-6)
    assert not (slo <= shi - 1e-6)[lo > hi].any()
    # A hexagon's sides come in opposite pairs: clipped a strip at a time
    # (`_clip_slabs`), the very same intervals, lines along a side included (through
    # two corners of it, or moved off it a hair either way).
    assert openings._in_slabs(shared[0])
    side = rings[li, 1] - rings[li, 0]
    p0 = np.concatenate([p0, rings[li, 0], rings[li, 0] + 1e-9, rings[li, 0] - 1e-9])
    d = np.concatenate([d, side, side, side])
    li = np.concatenate([li, li, li, li])
    both = [clip(p0, d, shared[0], shared[1][li].T)
            for clip in (openings._clip_shared, openings._clip_slabs)]
    assert np.array_equal(both[0][0], both[1][0]) and np.array_equal(both[0][1], both[1][1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-20, 20), st.integers(-20, 20), st.integers(1, 15),
                          st.integers(1, 15), st.integers(-20, 20), st.integers(-20, 20),
                          st.integers(1, 15), st.integers(1, 15)), min_size=1, max_size=20),
       st.sampled_from([1.0, 1 / 64, 100.0 + 1 / 64]))
def test_boxes_overlap_by_the_axes_as_by_their_sides(
        rows: list[tuple[int, int, int, int, int, int, int, int]], unit: float) -> None:
    """Square spaces are boxes: whether two of them meet (step 1: they see each other) is
    read on the axes, as the general test reads it on the rings' sides; boxes that only
    touch along a side or at a corner meet."""
    # On the grid's scale and a square's inset (1/64 px): coordinates a map has.
    a = openings.box_rings(unit * np.array([[x, y, x + w, y + h] for x, y, w, h, *_ in rows],
                                           dtype=np.float64), 0.0)
    b = openings.box_rings(unit * np.array([[x, y, x + w, y + h] for *_, x, y, w, h in rows],
                                           dtype=np.float64), 0.0)
    assert (openings._overlap(a, b) == openings._overlap_sides(a, b)).all()
    assert (openings._overlap(b, a) == openings._overlap(a, b)).all()


_coord = st.integers(-6, 6)
# Walls of some length: a chain is made of walls that cross lines, which a wall of no
# length never does.
_segment = st.tuples(_coord, _coord, _coord, _coord).filter(lambda w: w[:2] != w[2:])


@given(st.lists(st.tuples(_segment, _segment), min_size=1, max_size=40))
@settings(max_examples=200, deadline=None)
# Walls along one line: one within the other either way, overlapping, end to end, apart.
@example([((0, 0, 4, 0), (-1, 0, 5, 0)), ((-1, 0, 5, 0), (1, 0, 2, 0)),
          ((0, 0, 4, 4), (2, 2, 6, 6)), ((0, 0, 0, 3), (0, 3, 0, 5)),
          ((0, 0, 1, 1), (2, 2, 3, 3)), ((3, 0, 0, 0), (4, 0, 1, 0))])
def test_walls_of_a_chain_meet_as_shapely_says(
        pairs: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> None:
    """Two walls of a chain meet (closed segments, touching, crossing or overlapping
    along a line, or at a point) exactly when Shapely says they intersect, at a point of
    both."""
    a = np.array([p[0] for p in pairs], dtype=float)
    b = np.array([p[1] for p in pairs], dtype=float)
    met, point = openings._meeting(np.ascontiguousarray(a.T), np.ascontiguousarray(b.T))
    pa = shapely.linestrings(a.reshape(-1, 2, 2))
    pb = shapely.linestrings(b.reshape(-1, 2, 2))
    expected = shapely.intersects(pa, pb)
    assert met.tolist() == expected.tolist()
    at = shapely.points(point[met])
    assert (shapely.distance(at, pa[met]) <= 1e-9).all()
    assert (shapely.distance(at, pb[met]) <= 1e-9).all()
    assert np.isnan(point[~met]).all()


@given(st.lists(st.integers(0, 12), min_size=1, max_size=12))
@settings(max_examples=100, deadline=None)
def test_lines_tried_pass_by_every_two_event_points_of_an_item(counts: list[int]) -> None:
    """The search tries, for every two event points of an item, four lines, each through
    points a hair to either side of the two (`_candidate_lines`): each pair of points
    once, whatever the number of points each item has."""
    rng = np.random.default_rng(len(counts))
    n = len(counts)
    ev_item = np.repeat(np.arange(n), counts)
    # Points on a coarse lattice, so that no two lie within a hair of each other.
    ev_pt = rng.permutation(np.array([(x, y) for x in range(40) for y in range(40)],
                                     dtype=float))[:len(ev_item)] * 10
    rings = rng.random((n, 4, 2)) * 400
    lines = openings._candidate_lines(rings, rings + 500, ev_item, ev_pt, np.arange(n))
    # Every unit made into its lines, in two calls (units are made lines when tried).
    units = np.arange(len(lines.items))
    made = [lines.of(units[:len(units) // 2]), lines.of(units[len(units) // 2:])]
    li, p0, p1 = (np.concatenate([m[k] for m in made]) for k in range(3))
    assert set(li.tolist()) <= set(lines.items.tolist())
    first = np.cumsum(counts) - np.array(counts)
    seen: dict[tuple[int, int, int], int] = {}
    for item, p, q in zip(li.tolist(), p0, p1, strict=True):
        own = ev_pt[first[item]:first[item] + counts[item]]
        near_p = np.flatnonzero(np.hypot(*(own - p).T) <= 2 * openings.EPSILON_PX)
        near_q = np.flatnonzero(np.hypot(*(own - q).T) <= 2 * openings.EPSILON_PX)
        assert len(near_p) == 1 and len(near_q) == 1
        key = (item, *sorted((int(near_p[0]), int(near_q[0]))))
        assert key[1] != key[2]
        seen[key] = seen.get(key, 0) + 1
    expected = {(item, i, j) for item, c in enumerate(counts)
                for i in range(c) for j in range(i + 1, c)}
    assert set(seen) == expected
    assert set(seen.values()) <= {4}


def _random_walls(rng: np.random.Generator, one_way: float) -> list[WallGeom]:
    """Between 2 and 24 walls in the band between x = 300 and 1,400: on the grid or off
    it, along the axes or at any angle, some short, a tenth limited, `one_way` of them
    one-way and then with height bands of every kind (walls of rooms and rubble, closing
    gaps or leaving slits)."""
    walls = []
    for k in range(int(rng.integers(2, 25))):
        x0 = float(rng.integers(3, 14) * 100 + (rng.integers(0, 100) if rng.random() < 0.25
                                                else 0))
        y0 = float(rng.integers(-2, 6) * 100 + (rng.integers(0, 100) if rng.random() < 0.33
                                                else 0))
        angle = [0.0, np.pi / 2, float(rng.uniform(0, np.pi))][int(rng.integers(3))]
        length = [100.0, 200.0, 300.0, float(rng.uniform(20, 400))][int(rng.integers(4))]
        direction = (Direction.BOTH if rng.random() >= one_way
                     else list(Direction)[int(rng.integers(len(Direction)))])
        wall = _wall(k, (x0, y0, x0 + np.cos(angle) * length, y0 + np.sin(angle) * length),
                     limited=bool(rng.random() < 0.1), direction=direction)
        if one_way:
            # Height bands too (creatures stand 0 to 6 ft): the whole reach, above it,
            # below it, or part of it.
            bottom, top = [(None, None), (None, 10.0), (8.0, None), (None, -1.0),
                           (None, 3.0), (2.0, 4.0)][int(rng.integers(6))]
            wall = replace(wall, bottom=bottom, top=top)
        walls.append(wall)
    return walls


@pytest.mark.parametrize("seed", range(4))
def test_shifted_lines_find_what_turned_lines_find(seed: int) -> None:
    """Between rings apart along their axis, the search tries only the two shifted lines
    through every two event points (`_apart`): it finds a free line each way exactly when
    trying the turned ones as well does, among walls at any angle (a wall whose stop
    varies within a cell, `_varies`, brings the turned lines back). 150 random scenes a
    seed, about half of their pairs with no line of effect."""
    rng = np.random.default_rng(seed)
    outcomes = set()
    for _ in range(150):
        size = int(rng.integers(1, 3))
        ya, yb = float(rng.integers(-1, 5) * 100), float(rng.integers(-1, 5) * 100)
        walls = _random_walls(rng, 0.0 if seed < 2 else 0.2)
        scene = _scene(walls, [(0, ya, size), (1600, yb, size)])
        tr = Tracer(scene)
        sp = openings.spaces_of(tr, INSET_PX)
        ar, br = sp.rings[0:1], sp.rings[1:2]
        assert openings._apart(ar, br).all()
        blk = openings.blockers(tr)
        ext = (tr.elev[:1], tr.tall[:1], tr.elev[1:2], tr.tall[1:2])
        bi, wi, whole = _rows(blk, ar, br, ext)
        if len(bi) == 0:
            continue
        got = openings._search(blk, ar, br, ext, bi, wi, whole, np.array([0]))
        apart = openings._apart
        try:
            openings._apart = lambda a, b: np.zeros(len(a), dtype=bool)  # type: ignore[assignment]
            want = openings._search(blk, ar, br, ext, bi, wi, whole, np.array([0]))
        finally:
            openings._apart = apart
        assert (bool(got[0][0]), bool(got[1][0])) == (bool(want[0][0]), bool(want[1][0]))
        outcomes.add((bool(want[0][0]), bool(want[1][0])))
    assert {(True, True), (False, False)} <= outcomes


@pytest.mark.parametrize("seed", range(4))
def test_events_on_the_rings_backs_change_no_answer(seed: int) -> None:
    """The search leaves out the events on each ring's back (corners between two sides
    the other ring lies wholly inside of, walls' crossings of those sides: `_events`'
    `lean`): it finds a free line each way exactly when it does with them. Two creatures
    anywhere about random walls (of every angle and kind: limited, one-way, with height
    bands), on a square grid and a hex grid, every pair of their spaces; 120 scenes a
    seed. (Pairs near a wall whose stop varies within a cell keep every event: there the
    cells decide nothing, and fewer events would mean fewer lines tried. Leaving them
    lean too changed no answer in 1,500 scenes with more bands and heights, so no test
    here can tell; the choice rests on the argument.)"""
    rng = np.random.default_rng(100 + seed)
    grid = GRID if seed % 2 == 0 else HEX
    outcomes: set[tuple[bool, bool]] = set()
    dropped = 0
    full_events = openings._events

    def every_event(ar: np.ndarray, br: np.ndarray, xy: np.ndarray, bi: np.ndarray,
                    wi: np.ndarray, items: np.ndarray,
                    lean: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        return full_events(ar, br, xy, bi, wi, items)

    for _ in range(120):
        walls = _random_walls(rng, 0.2 if rng.random() < 0.5 else 0.0)
        cs = []
        for k in range(2):
            size = int(rng.integers(1, 3)) if grid is GRID else int(rng.integers(1, 4))
            x = float(rng.integers(0, 17) * 100 + (rng.integers(0, 100) if k else 0))
            y = float(rng.integers(-2, 7) * 100)
            cs.append(CreatureGeom(f"c{k}", x, y, size, size,
                                   [Size.MEDIUM, Size.LARGE, Size.HUGE][size - 1], 5.0,
                                   float(rng.choice([6.0, 10.0])),
                                   float(rng.choice([0.0, 0.0, 4.0])), 1, False))
        tr = Tracer(SceneGeom(grid, tuple(walls), tuple(cs), (), (), False))
        sp = openings.spaces_of(tr, INSET_PX)
        ra = np.repeat(np.arange(sp.first[0], sp.first[0] + sp.count[0]), sp.count[1])
        rt = np.tile(np.arange(sp.first[1], sp.first[1] + sp.count[1]), sp.count[0])
        ar, br = sp.rings[ra], sp.rings[rt]
        keep = ~openings._overlap(ar, br)
        ar, br = ar[keep], br[keep]
        if len(ar) == 0:
            continue
        n = len(ar)
        blk = openings.blockers(tr)
        ext = (np.full(n, tr.elev[0]), np.full(n, tr.tall[0]), np.full(n, tr.elev[1]),
               np.full(n, tr.tall[1]))
        bi, wi, whole = _rows(blk, ar, br, ext)
        if len(bi) == 0:
            continue
        items = np.arange(n)
        got = openings._search(blk, ar, br, ext, bi, wi, whole, items)
        try:
            openings._events = every_event
            want = openings._search(blk, ar, br, ext, bi, wi, whole, items)
        finally:
            openings._events = full_events
        assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()
        outcomes |= set(zip(want[0].tolist(), want[1].tolist(), strict=True))
        lean = np.ones(n, dtype=bool)
        lean[bi[openings._varies(blk, ar, br, bi, wi, whole)]] = False
        dropped += len(every_event(ar, br, blk.xy, bi, wi, items)[0]) - len(
            full_events(ar, br, blk.xy, bi, wi, items, lean)[0])
    assert {(True, True), (False, False)} <= outcomes
    assert dropped > 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-8, 8), st.integers(-8, 8), st.integers(1, 4),
                          st.integers(-8, 8), st.integers(-8, 8), st.integers(1, 4)),
                min_size=1, max_size=20))
def test_rings_overlap_as_their_sides_say(
        spec: list[tuple[int, int, int, int, int, int]]) -> None:
    """Hexes whose boxes are apart are apart: the sides' test is left to the rings whose
    boxes meet, and to flat ones (points, segments), with the same answers, touching ones
    included."""
    angle = np.arange(6) * np.pi / 3

    def hexagon(x: int, y: int, r: int) -> np.ndarray:
        if r == 4:
            return np.tile([x * 5.0, y * 5.0], (6, 1))  # a point
        if r == 3:  # a segment along x
            return np.array([[x * 5.0, y * 5.0]] * 3 + [[x * 5.0 + 10, y * 5.0]] * 3)
        return np.column_stack([x * 5.0 + r * 5.0 * np.cos(angle),
                                y * 5.0 + r * 5.0 * np.sin(angle)])

    a = np.stack([hexagon(x, y, r) for x, y, r, _, _, _ in spec])
    b = np.stack([hexagon(x, y, r) for _, _, _, x, y, r in spec])
    assert openings._overlap(a, b).tolist() == openings._overlap_sides(a, b).tolist()


def test_walls_whose_stop_varies_within_a_cell() -> None:
    """`_band_fill` and `_varies`, between a 6 ft creature on the ground and one 20 ft up
    1,500 px away (the sheet runs from 0-6 ft to 20-26 ft): a band up to 30 ft fills it
    everywhere; one from 30 ft, nowhere; one up to 15 ft fills it only in the first
    0.45 of the way: wholly where lines cross it near the ground creature, nowhere near the
    flyer, and in part halfway (there it varies: where a line crosses it decides). A one-way
    wall varies only when its line passes through either creature's space."""
    walls = [
        _wall(0, (500.0, 0.0, 500.0, 300.0), top=30.0),  # the whole sheet
        replace(_wall(1, (600.0, 0.0, 600.0, 300.0)), bottom=30.0),  # above both heads
        _wall(2, (700.0, 0.0, 700.0, 300.0), top=15.0),  # part of it, halfway
        _wall(3, (200.0, 0.0, 200.0, 300.0), top=15.0),  # the same band near the ground
        _wall(4, (1300.0, 0.0, 1300.0, 300.0), top=15.0),  # ...and near the flyer
        _wall(5, (800.0, 0.0, 800.0, 300.0), direction=Direction.LEFT),  # x = 800: no space
        _wall(6, (300.0, 150.0, 400.0, 150.0), direction=Direction.LEFT),  # y = 150: both
        _wall(7, (900.0, 0.0, 900.0, 300.0)),  # plain
    ]
    scene = _scene(walls, [(0, 100, 1), (1500, 100, 1)])
    scene = replace(scene, creatures=(scene.creatures[0],
                                      replace(scene.creatures[1], elevation=20.0)))
    tr = Tracer(scene)
    sp = openings.spaces_of(tr, INSET_PX)
    ar, br = sp.rings[0:1], sp.rings[1:2]
    blk = openings.blockers(tr)
    wi = np.arange(len(blk.xy))  # the blockers' own order: plain runs first
    bi = np.zeros(len(wi), dtype=np.intp)
    ext = (tr.elev[:1], tr.tall[:1], tr.elev[1:2], tr.tall[1:2])
    whole, never = openings._band_fill(blk, ar, br, ext, bi, wi)
    got = openings._varies(blk, ar, br, bi, wi, whole) & ~never
    x = blk.xy[:, 0].tolist()
    assert dict(zip(x, got.tolist(), strict=True)) == {
        500.0: False, 600.0: False, 700.0: True, 200.0: False, 1300.0: False, 800.0: False,
        300.0: True, 900.0: False}
    assert {v for v, n in zip(x, never.tolist(), strict=True) if n} == {600.0, 1300.0}
    assert {v for v, w in zip(x, whole.tolist(), strict=True) if w} >= {500.0, 200.0, 900.0}
    # Seen whole from near the ground, the band seals the pair: the wall at 200 alone,
    # its band counted at the fractions its lines cross it.
    solo = _scene([walls[3]], [(0, 100, 1), (1500, 100, 1)])
    solo = replace(solo, creatures=(solo.creatures[0],
                                    replace(solo.creatures[1], elevation=20.0)))
    assert not _loe(solo)
    tr = Tracer(solo)
    blk = openings.blockers(tr)
    bi, wi = kernel.block_candidates(ar, br, blk.xy)
    whole, never = openings._band_fill(blk, ar, br, ext, bi, wi)
    sealed, _ = openings._sealed(blk, ar, br, bi[~never], wi[~never], whole[~never])
    assert sealed[0]  # sealed by the band, not found by the search
    high = replace(solo, walls=(replace(walls[3], top=5.0),))
    assert _loe(high)


@pytest.mark.parametrize("seed", range(4))
def test_bands_decided_over_the_fractions_their_lines_cross_them_at(seed: int) -> None:
    """`_band_fill` decides a band for all of a pair's lines from bounds on the fractions
    of the way at which they cross the wall (`_crossing_fractions`). Over random scenes of
    two creatures at different elevations and heights among banded walls (some through or
    beside their spaces, some limited or one-way; a fifth of the time the first space an
    area's origin, one point): every line drawn between the two spaces that crosses a wall does
    so within the bounds; the band fills the sheet there on every such line where it is
    'whole', on none where 'never'; and line of effect is the same as with bands judged
    against the sheet's whole reach only."""
    rng = np.random.default_rng(100 + seed)
    decided = {"whole": 0, "never": 0, "varies": 0, "point": 0}
    outcomes = set()
    for _ in range(60):
        size = int(rng.integers(1, 3))
        ya, yb = float(rng.integers(-1, 5) * 100), float(rng.integers(-1, 5) * 100)
        xb = float(rng.integers(3, 17) * 100)
        walls = []
        for k in range(int(rng.integers(1, 16))):
            x0 = float(rng.uniform(-100, xb + 200))
            y0 = float(rng.uniform(-200, 600))
            angle = float(rng.uniform(0, np.pi))
            length = float(rng.choice([100.0, 300.0, rng.uniform(20, 500)]))
            bottom, top = [(None, None), (None, 15.0), (10.0, None), (None, 4.0),
                           (3.0, 22.0), (-2.0, 8.0)][int(rng.integers(6))]
            direction = (Direction.BOTH if rng.random() < 0.8
                         else list(Direction)[int(rng.integers(len(Direction)))])
            walls.append(replace(_wall(k, (x0, y0, x0 + np.cos(angle) * length,
                                           y0 + np.sin(angle) * length),
                                       limited=bool(rng.random() < 0.15), direction=direction),
                                 bottom=bottom, top=top))
        scene = _scene(walls, [(0, ya, size), (xb, yb, size)])
        heights = [(float(rng.choice([0.0, 0.0, 5.0, 20.0, -5.0])),
                    float(rng.choice([6.0, 2.0, 12.0]))) for _ in range(2)]
        scene = replace(scene, creatures=tuple(
            replace(c, elevation=e, tall=h)
            for c, (e, h) in zip(scene.creatures, heights, strict=True)))
        tr = Tracer(scene)
        sp = openings.spaces_of(tr, INSET_PX)
        ar, br = sp.rings[0:1], sp.rings[1:2]
        if rng.random() < 0.2:
            # An area's origin: a ring of one point.
            ar = np.broadcast_to(ar[0].mean(axis=0), ar.shape).copy()
        blk = openings.blockers(tr)
        ext = (tr.elev[:1], tr.tall[:1], tr.elev[1:2], tr.tall[1:2])
        bi, wi = kernel.block_candidates(ar, br, blk.xy)
        whole, never = openings._band_fill(blk, ar, br, ext, bi, wi)
        g_whole, g_never = openings._band_reach(blk, ext, bi, wi)
        assert (whole >= g_whole).all() and (never >= g_never).all()
        assert not (whole & never).any()
        part = ~g_whole & ~g_never
        decided["whole"] += int((whole & part).sum())
        decided["never"] += int((never & part).sum())
        decided["varies"] += int((part & ~whole & ~never).sum())
        decided["point"] += int(openings._degenerate(ar)[0] and bool((part & never).any()))
        # Lines from random points of one space to random points of the other, each
        # stretch from where it leaves the first to where it enters the second.
        def inside(ring: np.ndarray, k: int) -> np.ndarray:
            w = rng.dirichlet(np.ones(len(ring)), size=k)
            out: np.ndarray = w @ ring
            return out

        p, q = inside(ar[0], 400), inside(br[0], 400)
        d = q - p
        items = np.zeros(len(p), dtype=np.intp)
        clip_a, clip_b = openings._Clipper.of(ar), openings._Clipper.of(br)
        _, a_hi = clip_a.clip(p, d, items)
        b_lo, _ = clip_b.clip(p, d, items)
        if openings._degenerate(ar)[0]:
            a_hi = np.zeros(len(p))  # from the point itself, as the search draws them
        ok = a_hi < b_lo
        starts, ends = (p + a_hi[:, None] * d)[ok], (p + b_lo[:, None] * d)[ok]
        for r in range(len(bi)):
            wall = np.broadcast_to(blk.xy[wi[r]], (len(starts), 4))
            hit = kernel.cross_paired(starts, ends, wall)
            if not hit.any():
                continue
            frac = wall_crossing(starts[hit], ends[hit], wall[hit])
            s0, s1 = openings._crossing_fractions(ar, br, blk.xy[wi[r:r + 1]])
            assert (frac >= s0[0]).all() and (frac <= s1[0]).all(), (frac.min(), frac.max(),
                                                                      s0, s1)
            lo, hi = sheet(frac, *(e[0] for e in ext))
            _, fills = band_meets(blk.bottom[wi[r:r + 1]], blk.top[wi[r:r + 1]], lo, hi)
            if whole[r]:
                assert fills.all()
            if never[r]:
                assert not fills.any()
        fwd, back = openings.line_of_effect_both(tr, ar, br, *ext)
        band_fill = openings._band_fill
        try:
            # Bands judged against the sheet's whole reach only, as before.
            openings._band_fill = (
                lambda blk, ar, br, ext, bi, wi: openings._band_reach(blk, ext, bi, wi))
            want = openings.line_of_effect_both(tr, ar, br, *ext)
        finally:
            openings._band_fill = band_fill
        assert (bool(fwd[0]), bool(back[0])) == (bool(want[0][0]), bool(want[1][0]))
        outcomes.add(bool(fwd[0]))
    assert outcomes == {True, False}
    assert min(decided.values()) > 0, decided


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-4, 4), st.integers(-4, 4), st.integers(-4, 4),
                          st.integers(-4, 4)), min_size=1, max_size=14),
       st.sampled_from([1.0, 100.0, 1.0 / 3.0, 12345.678]),
       st.sampled_from([0.0, 98765.4321]))
def test_the_walls_a_chain_looks_at_hold_every_wall_its_wall_meets(
        ends: list[tuple[int, int, int, int]], scale: float, shift: float) -> None:
    """`_chains` links two walls of a pair only if `_near_walls` names them neighbours:
    every two segments `_meeting` finds to meet (touching end to end, crossing, along one
    line, at scales and offsets where the meeting point is rounded) are neighbours, each
    of the other, and a segment is never its own."""
    xy = np.array(ends, dtype=float) * scale + shift
    xy = xy[np.hypot(xy[:, 2] - xy[:, 0], xy[:, 3] - xy[:, 1]) > 0]
    if len(xy) == 0:
        return
    openings._NEAR_WALLS.clear()
    near_walls = openings._near_walls(xy)
    assert near_walls is not None
    indptr, nbrs = near_walls
    near = {(i, int(j)) for i in range(len(xy)) for j in nbrs[indptr[i]:indptr[i + 1]]}
    assert all(i != j for i, j in near)
    i, j = np.triu_indices(len(xy), k=1)
    met, _ = openings._meeting(np.ascontiguousarray(xy[i].T), np.ascontiguousarray(xy[j].T))
    for a, b in zip(i[met].tolist(), j[met].tolist(), strict=True):
        assert (a, b) in near and (b, a) in near


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 12), st.integers(-3, 12), st.integers(1, 3)),
                min_size=2, max_size=2),
       st.lists(st.tuples(st.integers(-40, 160), st.integers(-40, 160)), max_size=25))
def test_meeting_points_inside_the_hull_as_every_hull_side_says(
        boxes: list[tuple[int, int, int]], pts: list[tuple[int, int]]) -> None:
    """`_in_hulls` (a box first, then each pair's few hull sides) keeps exactly the points
    on the inner side of, or on, every line through two corners of the two rings that has
    all of them on one side: the hull of the two rings, as a chain reads it."""
    from geometry.columns import upper_pairs

    (x0, y0, s0), (x1, y1, s1) = boxes
    ar = openings.box_rings(np.array([[x0 * 10.0, y0 * 10.0, (x0 + s0) * 10.0,
                                       (y0 + s0) * 10.0]]), 0.0)
    br = openings.box_rings(np.array([[x1 * 10.0, y1 * 10.0, (x1 + s1) * 10.0,
                                       (y1 + s1) * 10.0]]), 0.0)
    pts_all = np.concatenate([ar, br], axis=1)
    px, py = pts_all[..., 0], pts_all[..., 1]
    ii, jj = upper_pairs(pts_all.shape[1])
    hx, hy = px[:, ii], py[:, ii]
    hdx, hdy = px[:, jj] - hx, py[:, jj] - hy
    ho = (hdx[..., None] * (py[:, None, :] - hy[..., None])
          - hdy[..., None] * (px[:, None, :] - hx[..., None]))
    real = np.hypot(hdx, hdy) > 0
    h_left = (ho >= 0).all(axis=2) & real
    h_right = (ho <= 0).all(axis=2) & real & ~h_left
    point = np.array(pts, dtype=float).reshape(-1, 2)
    item = np.zeros(len(point), dtype=np.intp)
    got = openings._in_hulls(px, py, (hx, hy, hdx, hdy), h_left, h_right, item, point)
    po = (hdx[item] * (point[:, 1, None] - hy[item])
          - hdy[item] * (point[:, 0, None] - hx[item]))
    want = np.flatnonzero(~((h_left[item] & (po < 0)) | (h_right[item] & (po > 0))).any(axis=1))
    assert got.tolist() == want.tolist()


def _search_work(scene: SceneGeom) -> int:
    """The search work (candidate lines x walls near) of the scene's pair 0-1."""
    tr = Tracer(scene)
    sp = openings.spaces_of(tr, INSET_PX)
    blk = openings.blockers(tr)
    ar, br = sp.rings[:1], sp.rings[1:2]
    bi, wi = kernel.block_candidates(ar, br, blk.xy)
    items = np.array([0])
    ev_item, _ = openings._events(ar, br, blk.xy, bi, wi, items)
    e = len(ev_item)
    return (2 * e * (e - 1) + 1) * len(bi)


def test_a_pair_past_the_search_budget_keeps_its_sample_lines_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pair whose exact search would cost more than SEARCH_WORK_CAP (lines x walls) is
    not searched: no free line is found for it, so its sample lines decide (here, every
    one blocked: no line of effect), and the search's line test is never run for it. Just
    within the budget, the same slit is found. Decided per pair: beside a pair with
    little work, in one batch, each gets the answer it gets alone."""
    slit = _scene([(500, -1000, 500, 219), (500, 221, 500, 1000)], A_B)
    work = _search_work(slit)
    assert _loe(slit)
    tried: list[int] = []
    original = openings._try

    def spy(*args: object, **kw: object) -> None:
        tried.append(1)
        original(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(openings, "_try", spy)
    monkeypatch.setattr(openings, "SEARCH_WORK_CAP", work)
    assert _loe(slit) and tried
    tried.clear()
    monkeypatch.setattr(openings, "SEARCH_WORK_CAP", work - 1)
    assert not _loe(slit)
    assert not tried
    # The same slit again, with a second pair far off behind more walls (more events):
    # past the budget alone, and so in the batch; the slit's pair within it, alone and in
    # the batch.
    busy = [(500, -1000, 500, 219), (500, 221, 500, 1000),
            (5500, -1000, 5500, 219), (5500, 221, 5500, 1000),
            (5700, -1000, 5700, 219), (5700, 221, 5700, 1000),
            (5600, -1000, 5600, 219), (5600, 221, 5600, 1000)]
    both = _scene(busy, [*A_B, (5000, 200, 1), (6000, 200, 1)])
    far = _scene(busy[2:], [(5000, 200, 1), (6000, 200, 1)])
    assert _search_work(far) > work
    monkeypatch.setattr(openings, "SEARCH_WORK_CAP", work)
    tr = Tracer(both)
    sp = openings.spaces_of(tr, INSET_PX)
    got = openings.pairs_line_of_effect(tr, sp, np.array([0, 2]), np.array([1, 3]))
    assert got.tolist() == [True, False]
    assert not _loe(far)
    monkeypatch.setattr(openings, "SEARCH_WORK_CAP", 1 << 23)
    assert _loe(far)


def test_walls_too_tangled_for_chains_leave_them_to_the_search(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Past _NEAR_PAIRS_CAP neighbours (a lattice of walls crossing one another), the set
    of walls has no neighbour list (it is given up on before the list is built) and no
    chain is looked for: a gap closed by two walls meeting at a point is then proved shut
    by the search, with the same answer; a slit still passes."""
    shut = _scene([(500, -1000, 500, 220), (500, 220, 700, 1000)], A_B)
    slit = _scene([(500, -1000, 500, 219), (500, 221, 500, 1000)], A_B)
    chains: list[int] = []
    original = openings._chains

    def spy(*args: object) -> np.ndarray:
        out = original(*args)  # type: ignore[arg-type]
        chains.append(int(out.sum()))
        return out

    monkeypatch.setattr(openings, "_chains", spy)
    openings._NEAR_WALLS.clear()
    assert not _loe(shut) and chains == [1]
    monkeypatch.setattr(openings, "_NEAR_PAIRS_CAP", 1)
    openings._NEAR_WALLS.clear()
    # (The pair's answer is kept: forgotten, so that it is worked out again.)
    openings.blockers(Tracer(shut)).known.clear()
    chains.clear()
    assert not _loe(shut) and chains == [0]
    assert openings._near_walls(openings.blockers(Tracer(shut)).xy) is None
    assert _loe(slit)
    openings._NEAR_WALLS.clear()


def _chains_calls(seed: int, monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """The calls of `_chains` that line of effect between every two creatures of a scene
    makes, and `walled_apart` between every two (square and hex rings, and the hulls of
    creatures of several hexes)."""
    from bench.hexscenes import on_hex
    from bench.scenes import generate

    calls: list[tuple[object, ...]] = []
    chains = openings._chains

    def recorded(*args: object) -> object:
        calls.append(args)
        return chains(*args)  # type: ignore[arg-type]

    with monkeypatch.context() as m:
        m.setattr(openings, "_chains", recorded)
        base = generate(30, 300, seed).geom
        for geom in (base, on_hex(base, GridKind.HEXEVENQ, seed)):
            tr = Tracer(geom)
            n = len(geom.creatures)
            a, t = np.nonzero(~np.eye(n, dtype=bool))
            a, t = a.astype(np.intp), t.astype(np.intp)
            spaces = openings.spaces_of(tr, INSET_PX)
            openings.pairs_line_of_effect(tr, spaces, a, t)
            openings.walled_apart(tr, *openings.hull_rings(spaces), a, t)
    assert calls
    return calls


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_chains_hull_sides_at_once_or_a_corner_at_a_time_agree(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_chains` tests the corners against the hull side lines all at once for a few
    pairs, a corner at a time for many: the same proofs, on a scene's calls."""
    proved = 0
    for args in _chains_calls(seed, monkeypatch):
        answers = []
        for cap in (0, 1 << 40):
            monkeypatch.setattr(openings, "_HULL_SIDES_AT_ONCE", cap)
            answers.append(openings._chains(*args))  # type: ignore[arg-type]
        assert np.array_equal(answers[0], answers[1])
        proved += int(answers[0].sum())
    assert proved > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_chains_test_only_lines_that_can_be_hull_sides(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_chains` tests as hull sides only the corner lines and each ring's own sides:
    the same proofs as testing the line through every two corners, on a scene's calls."""
    from geometry.columns import upper_pairs

    def every_line(v_n: int, w_n: int) -> tuple[IntArray, IntArray]:
        # The corner lines first, as `_chains` reads them, then every other two corners.
        p, q = np.divmod(np.arange(v_n * w_n), w_n)
        ii, jj = upper_pairs(v_n + w_n)
        other = ~((ii < v_n) & (jj >= v_n))
        return (np.concatenate([p, ii[other]]).astype(np.intp),
                np.concatenate([v_n + q, jj[other]]).astype(np.intp))

    proved = 0
    for args in _chains_calls(seed, monkeypatch):
        answers = [openings._chains(*args)]  # type: ignore[arg-type]
        with monkeypatch.context() as m:
            m.setattr(openings, "_hull_lines", every_line)
            answers.append(openings._chains(*args))  # type: ignore[arg-type]
        assert np.array_equal(answers[0], answers[1])
        proved += int(answers[0].sum())
    assert proved > 0


@pytest.mark.parametrize("seed", range(3))
def test_pairs_asked_again_are_read_back_as_searched(seed: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`line_of_effect_both` keeps each pair's answers with the walls' blockers, by the two
    rings and the four heights: a pair asked again is read back, never searched again, and
    reads what a search gives; a pair that differs in a height only (a wall band the
    taller creature sees over) or in how its numbers split into two rings is its own.
    Random walls with bands and one-way walls, creatures of three sizes at random places
    and heights, asked in one call, then again shuffled among new pairs."""
    rng = np.random.default_rng(seed)
    walls = _random_walls(rng, 0.3)
    # A wall 5 ft high between the first two: a 2-ft creature's lines are stopped, a
    # 10-ft one's pass over it; the same rings at two heights.
    walls.append(replace(_wall(99, (600.0, -400.0, 600.0, 900.0)), top=5.0))
    boxes = [(0.0, 200.0, 1), (1000.0, 200.0, 1)] + [
        (float(rng.integers(-2, 16) * 100), float(rng.integers(-4, 9) * 100),
         int(rng.integers(1, 4))) for _ in range(10)]
    scene = _scene(walls, boxes)
    tr = Tracer(scene)
    rings = openings.spaces_of(tr, INSET_PX).rings
    n = len(boxes)
    a, t = (x.ravel() for x in np.meshgrid(np.arange(n), np.arange(n)))
    a, t = a[a != t], t[a != t]
    elev = rng.choice([0.0, 0.0, 4.0, 12.0], n)
    tall = rng.choice([2.0, 6.0, 10.0], n)
    elev[:2], tall[:2] = 0.0, 2.0

    def ask(a: np.ndarray, t: np.ndarray, e: np.ndarray, h: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
        return openings.line_of_effect_both(tr, rings[a], rings[t], e[a], h[a], e[t], h[t])

    def search(a: np.ndarray, t: np.ndarray, e: np.ndarray, h: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
        return openings._line_of_effect_both(tr, rings[a], rings[t], e[a], h[a], e[t], h[t])

    first = ask(a, t, elev, tall)
    want = search(a, t, elev, tall)
    assert np.array_equal(first[0], want[0]) and np.array_equal(first[1], want[1])
    # Asked again, shuffled, with the same creatures at other heights too: only the new
    # pairs are searched.
    searched: list[int] = []
    inner = openings._line_of_effect_both

    def counting(tracer: Tracer, ar: np.ndarray, *rest: object, **kw: object
                 ) -> tuple[np.ndarray, np.ndarray]:
        searched.append(len(ar))
        return inner(tracer, ar, *rest, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(openings, "_line_of_effect_both", counting)
    taller = tall.copy()
    taller[:2] = 10.0
    order = rng.permutation(len(a))
    again = ask(a[order], t[order], elev, tall)
    assert searched == []
    assert np.array_equal(again[0], want[0][order]) and np.array_equal(again[1], want[1][order])
    raised = ask(a, t, elev, taller)
    moved = (a < 2) | (t < 2)
    assert searched == [int(moved.sum())]
    monkeypatch.setattr(openings, "_line_of_effect_both", inner)
    fresh = search(a, t, elev, taller)
    assert np.array_equal(raised[0], fresh[0]) and np.array_equal(raised[1], fresh[1])
    # The band makes the difference for the first two.
    ab = np.flatnonzero((a == 0) & (t == 1))
    assert not want[0][ab].any() and fresh[0][ab].all()
    # Two splits of the same numbers into two rings are two pairs.
    one = rings[:1]
    wide = np.concatenate([one, one], axis=1)
    split_a = openings._pair_keys(wide, one, *(np.zeros(1),) * 4)
    split_b = openings._pair_keys(one, wide, *(np.zeros(1),) * 4)
    assert split_a != split_b


@pytest.mark.parametrize("seed", range(2))
def test_sealed_rings_kept_are_read_back_as_found(seed: int) -> None:
    """`sealed_known` keeps whether one plain wall seals two rings, with the walls'
    blockers, for calls of few pairs: a pair asked again is read back (the walk is not
    run for it) and reads what the walk found; a call past SEALED_KEPT_CALL pairs is
    walked whole and keeps nothing; `forget_known` forgets it all."""
    rng = np.random.default_rng(seed)
    walls = _random_walls(rng, 0.0)
    boxes = [(float(rng.integers(-2, 16) * 100), float(rng.integers(-4, 9) * 100),
              int(rng.integers(1, 4))) for _ in range(12)]
    tr = Tracer(_scene(walls, boxes))
    rings = openings.box_rings(tr.boxes.reshape(-1, 4), 0.0)
    a, t = (x.ravel() for x in np.meshgrid(np.arange(12), np.arange(12)))
    a, t = a[a != t], t[a != t]
    plain = np.flatnonzero(tr.wall_plain)
    walked: list[int] = []

    def walk(ra: np.ndarray, rt: np.ndarray) -> np.ndarray:
        walked.append(len(ra))
        return kernel.sealed_blocks(ra, rt, tr.wall_xy, plain)

    want = kernel.sealed_blocks(rings[a], rings[t], tr.wall_xy, plain)
    assert want.any() and not want.all()
    openings.forget_known()
    got = openings.sealed_known(tr, rings[a], rings[t], walk)
    assert np.array_equal(got, want) and walked == [len(a)]
    walked.clear()
    order = rng.permutation(len(a))[:40]
    again = openings.sealed_known(tr, rings[a[order]], rings[t[order]], walk)
    assert np.array_equal(again, want[order]) and walked == []
    # Rings moved a square: other pairs, walked.
    moved = rings + np.array([100.0, 0.0])
    openings.sealed_known(tr, moved[a[:5]], rings[t[:5]], walk)
    assert walked == [5]
    openings.forget_known()
    walked.clear()
    openings.sealed_known(tr, rings[a[:3]], rings[t[:3]], walk)
    assert walked == [3]
    big = np.arange(openings.SEALED_KEPT_CALL + 1) % len(a)
    walked.clear()
    assert np.array_equal(openings.sealed_known(tr, rings[a[big]], rings[t[big]], walk),
                          want[big])
    assert walked == [len(big)]
    assert len(openings.blockers(tr).sealed) == 3


def _apart(scene: SceneGeom) -> bool:
    """`walled_apart` of the scene's pair 0-1, on their spaces' rings."""
    tr = Tracer(scene)
    rings, corners = openings.hull_rings(openings.spaces_of(tr, INSET_PX))
    return bool(openings.walled_apart(tr, rings, corners, np.array([0]), np.array([1]))[0])


def float_step_gap() -> tuple[tuple[float, float, float, float], float, float]:
    """Between A_B's creatures, the line from A's centre to B's upper right corner (a hair
    inside) crosses x = 500 at some y: a wall from the top down to the first float above
    the line there, and the first float below it (a wall may start there: the two miss
    each other by one float step, the line passing between them)."""
    p, q = np.array([50.0, 250.0]), np.array([1100 - INSET_PX, 200 + INSET_PX])

    def side(y: float) -> float:
        return float((q[0] - p[0]) * (y - p[1]) - (q[1] - p[1]) * (500.0 - p[0]))

    above = below = float(p[1] + (500 - p[0]) * (q[1] - p[1]) / (q[0] - p[0]))
    while side(below) <= 0:
        below = float(np.nextafter(below, np.inf))
    while side(above) >= 0:
        above = float(np.nextafter(above, -np.inf))
    return (500.0, -1000.0, 500.0, above), above, below


def test_a_chain_is_walls_that_meet_and_a_band_fills_a_sheet_of_some_height() -> None:
    """Proofs that skip every line of a pair (`walled_apart`, ahead of a hex creature's
    samples) hold only if every line is stopped. Two walls whose ends miss each other by
    one float step, where a line passes between them, are no chain (rounding in
    `_meeting` read them as met: with `robust`, GEOS decides the close calls); meeting
    exactly, they are one. A band from the feet up fills the sheet of two creatures 6 ft
    tall, not of two a hair tall (1e-16 ft: head and feet one number, a sheet no band
    meets)."""
    upper, above, below = float_step_gap()
    assert not _apart(_scene([upper, (500.0, below, 600.0, 1000.0)], A_B))
    assert _apart(_scene([upper, (500.0, above, 600.0, 1000.0)], A_B))
    a, b = np.array([[*upper]]).T, np.array([[500.0, below, 600.0, 1000.0]]).T
    # The arithmetic alone reads them as met; the robust reading does not.
    assert openings._meeting(a, b)[0].tolist() == [True]
    assert openings._meeting(a, b, robust=True)[0].tolist() == [False]
    band = replace(_wall(0, (500, -1000, 500, 1000)), bottom=10.0, top=20.0)
    for tall, apart in ((6.0, True), (1e-16, False)):
        scene = _scene([band], A_B)
        scene = replace(scene, creatures=tuple(replace(c, elevation=10.0, tall=tall)
                                               for c in scene.creatures))
        assert _apart(scene) is apart


def test_a_banded_wall_that_holds_both_creatures_seals_them_like_a_plain_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A wall whose height band holds the whole vertical reach of two creatures (from the
    lower feet to the higher head) stops every line between them, as a plain wall does:
    the sealing walk takes it with the plain walls for the pairs whose reach it holds,
    and there is then no line of effect. A band that leaves part of the reach open (it
    ends below the creatures' heads, or starts above their feet), or a wall that is
    one-way, limited or low, is left to the other proofs, and a line passes over, under
    or through it; and two tokens a hair tall are never sealed so. (A whole table's pairs
    only: monkeypatched here for two.)"""
    monkeypatch.setattr(openings, "BANDED_MIN_PAIRS", 0)
    line = (500.0, -1000.0, 500.0, 1000.0)

    def banded(bottom: float | None, top: float | None, **kw: Any) -> WallGeom:
        return replace(_wall(0, line, **kw), bottom=bottom, top=top)

    # The creatures: three hexes each, on the ground, 10 ft tall.
    for wall, sealed in ((banded(None, 20.0), True), (banded(-5.0, 10.0), True),
                         (banded(None, 9.0), False), (banded(1.0, 20.0), False),
                         (banded(None, 20.0, limited=True), False),
                         (banded(None, 20.0, direction=Direction.LEFT), False),
                         (banded(None, 20.0, cover=WallCover.LOW), False)):
        _, _, walked, loe = _big_hexes([wall])
        assert walked is sealed, wall
        if sealed:
            assert not loe
    # Two tokens a hair tall (1e-16 ft) at 10 ft behind a band from 10 ft up: their heads
    # round to their feet, and no band is taken as filling such a sheet by its reach
    # alone (`_band_reach`): not sealed by the walk, left to the exact test.
    scene = _scene([banded(10.0, 20.0)], A_B)
    scene = replace(scene, creatures=tuple(replace(c, elevation=10.0, tall=1e-16)
                                           for c in scene.creatures))
    tr = Tracer(scene)
    sp = openings.spaces_of(tr, INSET_PX)
    a, t = np.array([0, 1]), np.array([1, 0])
    tiny = openings.sealed_pairs(tr, sp.rings, np.full(2, 4), a, t)
    assert tiny is not None and not tiny.any()
    # Without the band's walk, the same wall is not taken by the sealing walk.
    monkeypatch.setattr(openings, "BANDED_MIN_PAIRS", 1 << 30)
    _, _, walked, loe = _big_hexes([banded(None, 20.0)])
    assert not walked and not loe


def test_answers_kept_for_the_exact_test_are_read_back_within_its_table(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Pairs of spaces a caller proved to have no line of effect are read back by the exact
    test (`remember_no_line`), without a search; a call of more pairs than the table holds
    keeps nothing (their keys would cost more than the searches they spare)."""
    tr = Tracer(_scene([(500, -1000, 500, 219), (500, 221, 500, 1000)], A_B))
    sp = openings.spaces_of(tr, INSET_PX)
    a, b = sp.rings[:1], sp.rings[1:2]
    heights = (tr.elev[:1], tr.tall[:1], tr.elev[1:], tr.tall[1:])
    openings.forget_known()
    assert openings.line_of_effect_both(tr, a, b, *heights)[0].tolist() == [True]
    monkeypatch.setattr(openings, "KNOWN_PAIRS", 0)
    openings.forget_known()
    openings.remember_no_line(tr, a, b, *heights)
    assert not openings.blockers(tr).known
    monkeypatch.setattr(openings, "KNOWN_PAIRS", 10)
    openings.remember_no_line(tr, a, b, *heights)
    # (Read back as kept: here a slit the search would have found.)
    assert openings.line_of_effect_both(tr, a, b, *heights)[0].tolist() == [False]
    openings.forget_known()
