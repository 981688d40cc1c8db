"""Tracing groups of blocks of different shapes in one call (geometry/trace.py,
`Tracer.trace_block_groups`): small groups are cut into blocks of the largest group's shape
and traced with it; every hit must come back on its own line exactly once, as if each group
had been traced alone. And the reductions that read traced lines back per probe and per row
(rulesets/corner.py, `reduce_segments`) equal numpy's reduceat."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.hexscenes import on_hex
from bench.scenes import generate
from geometry import kernel, trace
from geometry.model import (
    Direction,
    GridKind,
    RegionGeom,
    RegionKind,
    SceneGeom,
    WallCover,
    WallGeom,
)
from geometry.square import space
from geometry.trace import BlockGroup, LineHits, Tracer, concat_hits


def _scene(hexes: bool) -> SceneGeom:
    geom = generate(30, 300, 7).geom
    # One wall in four an arrow slit: a level-only trace lists them on lines a plain wall
    # stops, and a cut of a block may be sealed where the block is not.
    geom = replace(geom, walls=tuple(replace(w, cover=WallCover.IMPROVED) if k % 4 == 1 else w
                                     for k, w in enumerate(geom.walls)))
    side = max(w for wall in geom.walls for w in (wall.x0, wall.x1, wall.y0, wall.y1))
    regions = tuple(
        RegionGeom(f"r{k}", kind, ((x, y), (x + 300, y), (x + 300, y + 200), (x, y + 250)))
        for k, (kind, x, y) in enumerate([(RegionKind.COVER, side * 0.2, side * 0.3),
                                          (RegionKind.BLOCKING, side * 0.6, side * 0.5),
                                          (RegionKind.OBSCURING, side * 0.4, side * 0.7)]))
    geom = replace(geom, regions=regions)
    return on_hex(geom, GridKind.HEXODDR) if hexes else geom


def _groups(geom: SceneGeom, shapes: list[tuple[int, int, int]],
            rng: np.random.Generator) -> tuple[list[BlockGroup], int]:
    """Groups of blocks of the given (blocks, P, Q), numbered one after the other: start and
    end points near creatures (so lines meet walls, spaces and regions), the points for
    walls a hair inside those for spaces, as the corner engine's are."""
    boxes = np.array([space(c, geom.grid) for c in geom.creatures])
    centres = (boxes[:, :2] + boxes[:, 2:]) / 2
    groups: list[BlockGroup] = []
    first = 0
    for b, p, q in shapes:
        s_raw = centres[rng.integers(0, len(centres), b)][:, None] + rng.uniform(
            -60, 60, (b, p, 2))
        e_raw = centres[rng.integers(0, len(centres), b)][:, None] + rng.uniform(
            -60, 60, (b, q, 2))
        groups.append((first, s_raw + 0.25, e_raw - 0.25, s_raw, e_raw))
        first += b * p * q
    return groups, first


def _rows(hits: LineHits) -> dict[str, list[tuple[int, ...]]]:
    """Every hit as sorted tuples (duplicates kept: a padding line's hits must be dropped,
    not merged)."""
    sides: Any = hits.wall_side if hits.wall_side is not None else [None] * len(
        hits.wall_line)
    return {
        "walls": sorted(zip(hits.wall_line.tolist(), hits.wall_idx.tolist(),
                            list(sides if isinstance(sides, list) else sides.tolist()),
                            strict=True)),
        "creatures": sorted(zip(hits.creature_line.tolist(), hits.creature_idx.tolist(),
                                strict=True)),
        "regions": sorted(zip(hits.region_line.tolist(), hits.region_idx.tolist(),
                              strict=True)),
    }


@pytest.mark.parametrize("hexes", [False, True])
@pytest.mark.parametrize("every_wall", [True, False])
@pytest.mark.parametrize("shapes", [
    # The move of a Medium creature among Large and Huge ones: one big group, small ones
    # of other shapes (wider, taller, both, smaller than the cut: 1 x 1).
    [(40, 4, 4), (2, 9, 4), (1, 4, 9), (3, 16, 9), (2, 1, 1)],
    # A small group larger than the rider limit stays alone; the biggest group is not the
    # first.
    [(3, 9, 9), (trace.MERGE_MAX_BLOCKS + 1, 4, 9), (30, 4, 4), (1, 4, 16)],
    # Nothing to merge.
    [(25, 4, 4)],
])
def test_merged_groups_equal_each_group_traced_alone(hexes: bool, every_wall: bool,
                                                     shapes: list[tuple[int, int, int]],
                                                     ) -> None:
    geom = _scene(hexes)
    groups, n = _groups(geom, shapes, np.random.default_rng(len(shapes)))
    want = concat_hits([(g[0], Tracer(geom).trace_blocks(*g[1:], every_wall))
                        for g in groups], n)
    got = Tracer(geom).trace_block_groups(groups, n, every_wall)
    assert got.n == want.n == n
    rows_got, rows_want = _rows(got), _rows(want)
    assert rows_want["walls"] and rows_want["creatures"] and rows_want["regions"]
    assert rows_got == rows_want


def test_small_groups_ride_with_the_largest(monkeypatch: pytest.MonkeyPatch) -> None:
    # One call for the groups merged, one for a group too big to ride along.
    geom = _scene(False)
    shapes = [(30, 4, 4), (2, 9, 4), (1, 4, 9), (trace.MERGE_MAX_BLOCKS + 1, 4, 9)]
    groups, n = _groups(geom, shapes, np.random.default_rng(3))
    calls: list[tuple[int, int, int]] = []
    tracer = Tracer(geom)
    real = tracer.trace_blocks

    def counted(starts: Any, ends: Any, *rest: Any) -> LineHits:
        calls.append((len(starts), starts.shape[1], ends.shape[1]))
        return real(starts, ends, *rest)

    monkeypatch.setattr(tracer, "trace_blocks", counted)
    tracer.trace_block_groups(groups, n)
    # 30 blocks, then 2 blocks of 9 x 4 cut in 3 x 1 and one of 4 x 9 cut in 1 x 3.
    assert sorted(calls) == sorted([(30 + 6 + 3, 4, 4), (trace.MERGE_MAX_BLOCKS + 1, 4, 9)])


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.one_of(st.sampled_from([4, 8, 16]), st.integers(1, 9)),
                        min_size=1, max_size=40),
       seed=st.integers(0, 2**16))
def test_segment_reduction_equals_reduceat(lengths: list[int], seed: int) -> None:
    # The corner engine's probe and row reductions (rulesets/corner.py, `reduce_segments`): the
    # strided path for segments of whole fours, and the fallback, both give reduceat's
    # answer (lengths mostly multiples of four, as probes' lines come, and some not).
    from rulesets.corner import reduce_segments

    values = np.random.default_rng(seed).integers(-1, 5, sum(lengths)).astype(np.int8)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.intp)
    for op in (np.minimum, np.maximum):
        got = reduce_segments(op, values, starts)
        assert got.dtype == np.int8
        assert got.tolist() == op.reduceat(values, starts).tolist()


def test_a_sealed_cut_keeps_its_arrow_slits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A block one plain wall seals lists no arrow slits (no corner of it is partly
    blocked); a cut of a bigger block is not such a block. Here a Large creature's 9 x 4
    block rides with 30 blocks of 4 x 4: its first cut (start points 0-3) is sealed by a
    wall the other lines pass, with an arrow slit before the wall. The slit's hits must come
    back as when the block is traced whole, where a corner's lines run in both cuts."""
    monkeypatch.setattr(kernel, "GRID_MIN_WALLS", 1)
    monkeypatch.setattr(kernel, "GRID_MIN_WORK", 0)

    def wall(i: int, x0: float, y0: float, x1: float, y1: float,
             cover: WallCover = WallCover.SOLID) -> WallGeom:
        return WallGeom(f"w{i}", x0, y0, x1, y1, True, False, Direction.BOTH, cover, None,
                        None)

    walls = (wall(0, 500, -50, 500, 350), wall(1, 300, -100, 300, 400, WallCover.IMPROVED),
             *(wall(10 + k, 5000 + k, 5000, 5001 + k, 5001) for k in range(5)))
    geom = replace(generate(4, 10, 1).geom, walls=walls, regions=())
    big_s = np.array([[[0.0, 100.0 * k] for k in range(9)]])
    big_e = np.array([[[1000.0, 100.0 * k] for k in range(4)]])
    far_s = np.full((30, 4, 2), (0.0, 2000.0))
    far_e = np.full((30, 4, 2), (1000.0, 2000.0))
    groups: list[BlockGroup] = [(0, far_s, far_e, far_s, far_e),
                                (30 * 16, big_s, big_e, big_s, big_e)]
    n = 30 * 16 + 36
    want = concat_hits([(g[0], Tracer(geom).trace_blocks(*g[1:], False)) for g in groups], n)
    got = Tracer(geom).trace_block_groups(groups, n, False)
    # Every line of the first cut passes the slit, then the wall; the block is not sealed.
    slit = {r[0] for r in _rows(want)["walls"] if r[1] == 1}
    assert set(range(30 * 16, 30 * 16 + 16)) <= slit
    assert {r[0] for r in _rows(want)["walls"] if r[1] == 0} >= set(range(480, 496))
    assert _rows(got) == _rows(want)
