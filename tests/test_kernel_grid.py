"""The uniform grid over the walls (geometry/kernel.py): it only prunes, so every wall that
blocks a line of a block must survive it, on the awkward cases a grid has (walls and lines
along cell lines, ends on cell corners, long walls across many cells, walls of almost no
length, lines of no length); and the kernels built on it give what the brute prune gives.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.scenes import generate
from geometry import kernel
from geometry.kernel import FloatArray, IntArray
from rulesets.base import AttackMode
from rulesets.corner import CornerEngine, CornerOptions
from rulesets.dnd35 import Dnd35

Pairs = set[tuple[int, int]]

# Coordinates on a lattice of half cells (cells of side 1 or 2 from the walls' lowest
# corner, itself on the lattice: many points on cell lines and corners), and off it.
_lattice = st.integers(0, 16).map(lambda k: k / 2)
_coord = st.one_of(_lattice, st.floats(-1.0, 9.0, allow_nan=False, width=32).map(float))


@st.composite
def _wall(draw: st.DrawFn) -> tuple[float, float, float, float]:
    kind = draw(st.sampled_from(["any", "axis", "tiny", "long"]))
    x0, y0 = draw(_coord), draw(_coord)
    if kind == "axis":
        length = draw(_coord)
        return (x0, y0, x0 + length, y0) if draw(st.booleans()) else (x0, y0, x0, y0 + length)
    if kind == "tiny":
        # Almost no length (a rounding-error wall), on the lattice or off it.
        eps = draw(st.sampled_from([1e-12, 1e-9, 1e-6]))
        return (x0, y0, x0 + eps * draw(st.integers(-1, 1)), y0 + eps)
    if kind == "long":
        return (-1.0, draw(_coord), 9.0, draw(_coord))
    return (x0, y0, draw(_coord), draw(_coord))


@st.composite
def _blocks(draw: st.DrawFn) -> tuple[FloatArray, FloatArray]:
    """Blocks of P x Q lines: corners of squares (a corner engine's blocks, lines along
    cell lines when they are aligned), or loose points (single lines, P = Q = 1)."""
    b = draw(st.integers(1, 12))
    if draw(st.booleans()):
        side = draw(st.sampled_from([0.5, 1.0, 2.0]))
        unit = np.array([[0, 0], [side, 0], [side, side], [0, side]], dtype=np.float64)
        a = np.array(draw(st.lists(st.tuples(_coord, _coord), min_size=b, max_size=b)))
        t = np.array(draw(st.lists(st.tuples(_coord, _coord), min_size=b, max_size=b)))
        return a[:, None, :] + unit[None], t[:, None, :] + unit[None]
    s = np.array(draw(st.lists(st.tuples(_coord, _coord), min_size=b, max_size=b)))
    e = np.array(draw(st.lists(st.tuples(_coord, _coord), min_size=b, max_size=b)))
    return s[:, None, :].astype(np.float64), e[:, None, :].astype(np.float64)


def _exact(starts: FloatArray, ends: FloatArray, walls: FloatArray) -> Pairs:
    """(block, wall) where the wall blocks at least one of the block's lines, by the
    row-paired exact test on every line and every wall."""
    b, p_n, q_n = len(starts), starts.shape[1], ends.shape[1]
    flat_s = np.repeat(starts, q_n, axis=1).reshape(-1, 2)
    flat_e = np.tile(ends, (1, p_n, 1)).reshape(-1, 2)
    li = np.repeat(np.arange(len(flat_s)), len(walls))
    wi = np.tile(np.arange(len(walls)), len(flat_s))
    hit = kernel.cross_paired(flat_s[li], flat_e[li], walls[wi])
    assert b * p_n * q_n == len(flat_s)
    return set(zip((li[hit] // (p_n * q_n)).tolist(), wi[hit].tolist(), strict=True))


@settings(max_examples=300, deadline=None)
@given(blocks=_blocks(), walls=st.lists(_wall(), min_size=1, max_size=40),
       cell=st.sampled_from([None, 0.5, 1.0, 2.0]))
def test_grid_candidates_keep_every_blocking_wall(blocks: tuple[FloatArray, FloatArray],
                                                  walls: list[tuple[float, ...]],
                                                  cell: float | None) -> None:
    starts, ends = blocks
    w = np.array(walls, dtype=np.float64)
    parts = list(kernel._grid_candidates(kernel._hulls(starts, ends), w, None, cell))
    bi = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, dtype=np.intp)
    wi = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, dtype=np.intp)
    found = set(zip(bi.tolist(), wi.tolist(), strict=True))
    assert _exact(starts, ends, w) <= found
    # Each (block, wall) once, blocks ascending (readers OR runs of a block's rows).
    assert len(found) == len(bi)
    assert np.all(np.diff(bi) >= 0)


@settings(max_examples=200, deadline=None)
@given(blocks=_blocks(), walls=st.lists(_wall(), min_size=1, max_size=40),
       alike=st.lists(st.booleans(), min_size=40, max_size=40),
       cell=st.sampled_from([None, 0.5, 1.0, 2.0]))
def test_crossed_any_marks_exactly_the_crossed_lines(blocks: tuple[FloatArray, FloatArray],
                                                     walls: list[tuple[float, ...]],
                                                     alike: list[bool],
                                                     cell: float | None) -> None:
    starts, ends = blocks
    w = np.array(walls, dtype=np.float64)
    which = np.flatnonzero(np.array(alike[:len(w)]))
    out = np.zeros((len(starts), starts.shape[1], ends.shape[1]), dtype=bool)
    kernel._crossed_any(starts, ends, w, which, out, 3, None, cell)
    li, wi, _ = kernel.blocks_cross_walls(starts, ends, w)
    # blocks_cross_walls here is the brute prune (fewer walls than GRID_MIN_WALLS).
    assert len(w) < kernel.GRID_MIN_WALLS
    want = np.zeros(out.size, dtype=bool)
    want[li[np.isin(wi, which)]] = True
    assert np.array_equal(out.reshape(-1), want)


@settings(max_examples=300, deadline=None)
@given(blocks=_blocks(), walls=st.lists(_wall(), min_size=1, max_size=40),
       plain=st.lists(st.booleans(), min_size=40, max_size=40),
       chunk=st.sampled_from([1, 3, kernel.CHUNK_CELLS]),
       step=st.sampled_from([1, 20, kernel.SEAL_STEP_LINES]))
def test_sealed_blocks_are_those_one_run_crosses_every_line_of(
        blocks: tuple[FloatArray, FloatArray], walls: list[tuple[float, ...]],
        plain: list[bool], chunk: int, step: int) -> None:
    """`sealed_blocks` tests only the walls crossing two of a block's lines (the furthest
    to either side) against all of them, each block's first before its others, in chunks:
    it must find every block one plain wall, or one run of them end to end, crosses every
    line of, and no other, whatever the chunks (a block's walls split between two)."""
    starts, ends = blocks
    w = np.array(walls, dtype=np.float64)
    which = np.flatnonzero(np.array(plain[:len(w)]))
    saved = kernel.CHUNK_CELLS, kernel.SEAL_STEP_LINES
    try:
        kernel.CHUNK_CELLS, kernel.SEAL_STEP_LINES = chunk, step
        got = kernel.sealed_blocks(starts, ends, w, which)
    finally:
        kernel.CHUNK_CELLS, kernel.SEAL_STEP_LINES = saved
    runs = kernel.merged_runs(w, which) if len(which) else np.empty((0, 4))
    per = starts.shape[1] * ends.shape[1]
    crossed = _exact(starts, ends, runs) if len(runs) else set()
    want = np.zeros(len(starts), dtype=bool)
    for k in range(len(starts)):
        for r in range(len(runs)):
            flat_s = np.repeat(starts[k:k + 1], ends.shape[1], axis=1).reshape(-1, 2)
            flat_e = np.tile(ends[k:k + 1], (1, starts.shape[1], 1)).reshape(-1, 2)
            if (k, r) in crossed and kernel.cross_paired(
                    flat_s, flat_e, np.repeat(runs[r:r + 1], per, axis=0)).all():
                want[k] = True
    assert got.tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(a=st.tuples(_coord, _coord), b=st.tuples(_coord, _coord),
       r=st.tuples(st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.sampled_from([0.0, 0.5, 1.5])),
       t=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=8),
       cell=st.sampled_from([0.5, 1.0, 2.0]))
def test_cover_cells_hold_every_point_of_the_widened_segment(
        a: tuple[float, float], b: tuple[float, float], r: tuple[float, float],
        t: list[float], cell: float) -> None:
    grid = kernel._Grid(-1.0, -1.0, cell, int(12 // cell), int(12 // cell),
                        np.zeros(1, dtype=np.intp), np.zeros(0, dtype=np.intp))
    pa, pb = np.array([a], dtype=np.float64), np.array([b], dtype=np.float64)
    item, cells = kernel._cover_cells(pa, pb, np.array([r[0]]), np.array([r[1]]), grid)
    assert np.all(item == 0) and len(set(cells.tolist())) == len(cells)
    got = set(cells.tolist())
    # Points along the segment, pushed to the corners and sides of their box: each lies in
    # the cell its coordinates floor to (on a cell line, the cell after it).
    tt = np.array(t)
    pts = pa + (pb - pa) * tt[:, None]
    for dx in (-r[0], 0.0, r[0]):
        for dy in (-r[1], 0.0, r[1]):
            p = pts + np.array([dx, dy])
            ix = np.floor((p[:, 0] + 1.0) / cell).astype(int)
            iy = np.floor((p[:, 1] + 1.0) / cell).astype(int)
            inside = (ix >= 0) & (ix < grid.nx) & (iy >= 0) & (iy < grid.ny)
            assert {int(c) for c in (ix * grid.ny + iy)[inside]} <= got


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_kernels_agree_with_and_without_the_grid(monkeypatch: pytest.MonkeyPatch,
                                                       seed: int) -> None:
    # Square blocks over a 30 x 30 board and 400 walls (more than GRID_MIN_WALLS), some
    # along lattice lines, some long: the grid and the brute prune give the same hits.
    rng = np.random.default_rng(seed)
    unit = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], dtype=np.float64)
    starts = rng.integers(0, 30, size=(300, 1, 2)) + unit[None]
    ends = rng.integers(0, 30, size=(300, 1, 2)) + unit[None]
    walls = rng.integers(0, 31, size=(400, 4)).astype(np.float64)
    walls[:100, 3] = walls[:100, 1]  # horizontal, along lattice lines
    walls[100:150] = np.column_stack([rng.integers(0, 31, 50), np.zeros(50),
                                      rng.integers(0, 31, 50), np.full(50, 30)])
    alike = rng.random(len(walls)) < 0.8
    assert len(walls) >= kernel.GRID_MIN_WALLS
    monkeypatch.setattr(kernel, "GRID_MIN_WORK", 0)
    grid = [kernel.blocks_cross_walls_any(starts, ends, walls, alike),
            kernel.blocks_cross_walls_any(starts, ends, walls, None)]
    monkeypatch.setattr(kernel, "GRID_MIN_WALLS", 10 ** 9)
    brute = [kernel.blocks_cross_walls_any(starts, ends, walls, alike),
             kernel.blocks_cross_walls_any(starts, ends, walls, None)]
    for got, want in zip(grid, brute, strict=True):
        key_got = sorted(zip(*(x.tolist() for x in got[:3]), strict=True))
        key_want = sorted(zip(*(x.tolist() for x in want[:3]), strict=True))
        assert key_got == key_want and key_want
        assert np.array_equal(got[3], want[3])
    assert grid[0][3].size


@pytest.mark.parametrize("cells", [1, 500, 7000])
def test_grid_chunking_does_not_change_results(monkeypatch: pytest.MonkeyPatch,
                                               cells: int) -> None:
    rng = np.random.default_rng(7)
    unit = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], dtype=np.float64)
    starts = rng.integers(0, 30, size=(120, 1, 2)) + unit[None]
    ends = rng.integers(0, 30, size=(120, 1, 2)) + unit[None]
    walls = rng.integers(0, 31, size=(300, 4)).astype(np.float64)
    monkeypatch.setattr(kernel, "GRID_MIN_WORK", 0)
    want = kernel.blocks_cross_walls(starts, ends, walls)
    monkeypatch.setattr(kernel, "CHUNK_CELLS", cells)
    monkeypatch.setattr(kernel, "_DEDUPE_CELLS", cells)
    got = kernel.blocks_cross_walls(starts, ends, walls)
    assert sorted(zip(*(x.tolist() for x in got), strict=True)) == sorted(
        zip(*(x.tolist() for x in want), strict=True))
    assert want[0].size


@pytest.mark.parametrize("seed", [1, 2])
def test_engine_with_the_grid_equals_reference(monkeypatch: pytest.MonkeyPatch,
                                               seed: int) -> None:
    # A bench scene small enough for the reference, with the grid forced on.
    monkeypatch.setattr(kernel, "GRID_MIN_WALLS", 1)
    monkeypatch.setattr(kernel, "GRID_MIN_WORK", 0)
    geom = generate(12, 150, seed).geom
    engine = CornerEngine(geom, CornerOptions())
    n = len(geom.creatures)
    rows = [(a, t, m) for a in range(n) for t in range(n) if a != t for m in AttackMode]
    assert engine.evaluate(rows, True) == engine.reference(rows, True)
    # And through the ruleset, as the server calls it.
    fast = Dnd35().evaluate(geom, CornerOptions())
    monkeypatch.setattr(kernel, "GRID_MIN_WALLS", 10 ** 9)
    assert fast == Dnd35().evaluate(geom, CornerOptions())


def test_grid_kept_for_the_same_walls_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # The grid is kept by the walls' coordinates: walls changed in place (or new walls at a
    # reused address) get a grid of their own, and the hits follow the walls.
    monkeypatch.setattr(kernel, "GRID_MIN_WALLS", 1)
    monkeypatch.setattr(kernel, "GRID_MIN_WORK", 0)
    rng = np.random.default_rng(11)
    unit = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], dtype=np.float64)
    starts = rng.integers(0, 20, size=(80, 1, 2)) + unit[None]
    ends = rng.integers(0, 20, size=(80, 1, 2)) + unit[None]
    walls = rng.integers(0, 21, size=(60, 4)).astype(np.float64)

    def brute() -> list[tuple[int, int, int]]:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(kernel, "GRID_MIN_WALLS", 10 ** 9)
            got = kernel.blocks_cross_walls(starts, ends, walls)
        return sorted(zip(*(x.tolist() for x in got), strict=True))

    first = kernel.blocks_cross_walls(starts, ends, walls)
    again = kernel.blocks_cross_walls(starts, ends, walls)
    assert sorted(zip(*(x.tolist() for x in first), strict=True)) == sorted(
        zip(*(x.tolist() for x in again), strict=True)) == brute()
    walls[:, [0, 2]] = 20 - walls[:, [0, 2]]  # mirrored in place
    moved = kernel.blocks_cross_walls(starts, ends, walls)
    assert sorted(zip(*(x.tolist() for x in moved), strict=True)) == brute()
    assert brute() != sorted(zip(*(x.tolist() for x in first), strict=True))


def _hit_set(got: tuple[np.ndarray, ...]) -> set[tuple[int, ...]]:
    return set(zip(*(x.tolist() for x in got), strict=True))


@settings(max_examples=200, deadline=None)
@given(blocks=_blocks(), walls=st.lists(_wall(), min_size=1, max_size=40),
       alike=st.lists(st.booleans(), min_size=40, max_size=40),
       still=st.lists(st.booleans(), min_size=40, max_size=40),
       use_grid=st.booleans())
def test_still_walls_alone_are_listed_on_crossed_lines(
        blocks: tuple[FloatArray, FloatArray], walls: list[tuple[float, ...]],
        alike: list[bool], still: list[bool], use_grid: bool) -> None:
    # With `still`, a line that crosses an alike wall lists the hits of the still walls
    # and nothing else (whole blocks of such lines are skipped for the other walls); lines
    # that cross none list every hit, as without it. Grid and brute prune alike.
    starts, ends = blocks
    w = np.array(walls, dtype=np.float64)
    al, st_ = np.array(alike[:len(w)]), np.array(still[:len(w)])
    every = kernel.blocks_cross_walls(starts, ends, w)  # every hit, brute prune
    crossed = np.unique(every[0][al[every[1]]])
    on_crossed = np.isin(every[0], crossed)
    listed = ~al[every[1]] & (~on_crossed | st_[every[1]])
    with pytest.MonkeyPatch.context() as mp:
        if use_grid:
            mp.setattr(kernel, "GRID_MIN_WALLS", 1)
            mp.setattr(kernel, "GRID_MIN_WORK", 0)
        line, wall, side, got_crossed = kernel.blocks_cross_walls_any(starts, ends, w, al, st_)
    assert np.array_equal(got_crossed, crossed)
    assert _hit_set((line, wall, side)) == _hit_set(tuple(x[listed] for x in every))
    assert len(line) == int(listed.sum())


@settings(max_examples=200, deadline=None)
@given(blocks=_blocks(), boxes=st.lists(st.tuples(_coord, _coord, st.sampled_from(
           [0.5, 1.0, 2.0])), min_size=1, max_size=20),
       skip=st.lists(st.booleans(), min_size=12 * 16, max_size=12 * 16),
       whole=st.lists(st.booleans(), min_size=12, max_size=12))
def test_skipped_lines_enter_no_boxes(blocks: tuple[FloatArray, FloatArray],
                                      boxes: list[tuple[float, float, float]],
                                      skip: list[bool], whole: list[bool]) -> None:
    # Skipped lines list no box, every other line lists what it lists without a skip, and
    # blocks whose lines are all skipped (tested on nothing) change nothing either.
    starts, ends = blocks
    b, n = len(starts), starts.shape[1] * ends.shape[1]
    bx = np.array([(x, y, x + s, y + s) for x, y, s in boxes], dtype=np.float64)
    mask = np.array(skip[:b * n]).reshape(b, starts.shape[1], ends.shape[1])
    mask[np.array(whole[:b])] = True
    want = kernel.blocks_enter_boxes(starts, ends, bx)
    keep = ~mask.reshape(-1)[want[0]]
    got = kernel.blocks_enter_boxes(starts, ends, bx, mask)
    assert _hit_set(got) == _hit_set((want[0][keep], want[1][keep]))
    assert len(got[0]) == int(keep.sum())


@st.composite
def _runs(draw: st.DrawFn) -> list[tuple[float, float, float, float]]:
    """Axis-parallel walls along a few shared lines, touching end to end, overlapping,
    nested, or apart (a room's side drawn as segments and doors), plus a few others."""
    walls: list[tuple[float, float, float, float]] = []
    for _ in range(draw(st.integers(1, 4))):
        at = draw(_coord)
        vertical = draw(st.booleans())
        cuts = sorted(draw(st.lists(_coord, min_size=2, max_size=8)))
        for a, b in itertools.pairwise(cuts):
            kind = draw(st.sampled_from(["touch", "touch", "overlap", "gap", "flip"]))
            lo = a - 0.25 if kind == "overlap" else a + 0.25 if kind == "gap" else a
            hi = b
            if kind == "flip":
                lo, hi = hi, lo
            walls.append((at, lo, at, hi) if vertical else (lo, at, hi, at))
    walls += draw(st.lists(_wall(), max_size=5))
    return walls


@settings(max_examples=300, deadline=None)
@given(blocks=_blocks(), walls=_runs(), cell=st.sampled_from([None, 0.5, 1.0, 2.0]))
def test_merged_runs_cross_the_lines_their_walls_cross(blocks: tuple[FloatArray, FloatArray],
                                                       walls: list[tuple[float, ...]],
                                                       cell: float | None) -> None:
    # `_crossed_any` merges axis-parallel walls that touch or overlap into runs: a line
    # crosses a run exactly when it crosses one of its walls (the row-paired exact test on
    # each wall, here), lines along the run, through its joints and past its ends included.
    starts, ends = blocks
    w = np.array(walls, dtype=np.float64)
    which = np.arange(len(w))
    out = np.zeros((len(starts), starts.shape[1], ends.shape[1]), dtype=bool)
    kernel._crossed_any(starts, ends, w, which, out, 3, None, cell)
    flat_s = np.repeat(starts, ends.shape[1], axis=1).reshape(-1, 2)
    flat_e = np.tile(ends, (1, starts.shape[1], 1)).reshape(-1, 2)
    li = np.repeat(np.arange(len(flat_s)), len(w))
    wi = np.tile(which, len(flat_s))
    hit = kernel.cross_paired(flat_s[li], flat_e[li], w[wi])
    want = np.zeros(len(flat_s), dtype=bool)
    want[li[hit]] = True
    assert np.array_equal(out.reshape(-1), want)
    assert len(kernel._merged_runs(w, which)) <= len(w)


def _sealed_fresh(starts: FloatArray, ends: FloatArray, w: FloatArray,
                  which: npt.NDArray[np.intp]) -> tuple[list[bool], list[bool], list[bool]]:
    """`sealed_blocks`, and `_crossed_any`'s marks and seals, with no hint held."""
    kernel._SEALERS.clear()
    sealed = kernel.sealed_blocks(starts, ends, w, which).tolist()
    out = np.zeros((len(starts), starts.shape[1], ends.shape[1]), dtype=bool)
    seals = np.zeros(len(starts), dtype=bool)
    kernel._crossed_any(starts, ends, w, which, out, 3, None, None, seals)
    kernel._SEALERS.clear()
    return sealed, out.reshape(-1).tolist(), seals.tolist()


@settings(max_examples=200, deadline=None)
@given(blocks=_blocks(), walls=st.lists(_wall(), min_size=1, max_size=40),
       plain=st.lists(st.booleans(), min_size=40, max_size=40),
       shift=st.tuples(_coord, _coord), junk=st.integers(0, 2 ** 32 - 1))
def test_hints_of_sealing_runs_change_no_answer(
        blocks: tuple[FloatArray, FloatArray], walls: list[tuple[float, ...]],
        plain: list[bool], shift: tuple[float, float], junk: int) -> None:
    """The run that last sealed a block with the same start or end points is tried first
    (`kernel._SEALERS`): after a first call (the hints it leaves), with the starts moved
    (a token's move, its targets' points kept), and with every hint replaced by a run that
    may seal nothing, the answers are those of a call holding no hint."""
    starts, ends = blocks
    w = np.array(walls, dtype=np.float64)
    which = np.flatnonzero(np.array(plain[:len(w)]))
    if len(which) == 0:
        return
    moved = starts + np.array(shift, dtype=np.float64) / 4
    want_here = _sealed_fresh(starts, ends, w, which)
    want_moved = _sealed_fresh(moved, ends, w, which)
    want_back = _sealed_fresh(ends, moved, w, which)
    # Hints left by the blocks where they were, read for the blocks moved (and reversed).
    _sealed_fresh(starts, ends, w, which)
    kernel.sealed_blocks(starts, ends, w, which)
    assert kernel._SEALERS or not any(want_here[0])
    got_moved = kernel.sealed_blocks(moved, ends, w, which).tolist()
    out = np.zeros((len(moved), moved.shape[1], ends.shape[1]), dtype=bool)
    seals = np.zeros(len(moved), dtype=bool)
    kernel._crossed_any(moved, ends, w, which, out, 3, None, None, seals)
    assert (got_moved, out.reshape(-1).tolist(), seals.tolist()) == want_moved
    got_back = kernel.sealed_blocks(ends, moved, w, which).tolist()
    assert got_back == want_back[0]
    # Every hint pointing at some run, sealing or not.
    runs = kernel.merged_runs(w, which)
    rng = np.random.default_rng(junk)
    for held_runs, table in kernel._SEALERS.values():
        for key in table:
            table[key] = int(rng.integers(0, len(held_runs)))
    keys = kernel._point_keys(starts).tolist() + kernel._point_keys(ends).tolist()
    kernel._SEALERS[id(runs)] = (runs, {k: int(rng.integers(0, len(runs))) for k in keys})
    got = kernel.sealed_blocks(starts, ends, w, which).tolist()
    out = np.zeros((len(starts), starts.shape[1], ends.shape[1]), dtype=bool)
    seals = np.zeros(len(starts), dtype=bool)
    kernel._crossed_any(starts, ends, w, which, out, 3, None, None, seals)
    assert (got, out.reshape(-1).tolist(), seals.tolist()) == want_here
    kernel._SEALERS.clear()


def test_a_hint_spares_the_walk_when_a_token_moves(monkeypatch: pytest.MonkeyPatch) -> None:
    """One long wall between two rows of tokens seals every pair across it; the attacker
    moves a square along it: every block is sealed by its hint, none walks the grid's
    cells again, and a hint that no longer seals (the attacker now on the wall's side) is
    not trusted."""
    unit = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], dtype=np.float64)
    targets = np.array([[x, 10.0] for x in range(0, 40, 2)])[:, None, :] + unit[None]
    walls = np.array([[-5.0, 5.0, 45.0, 5.0]]
                     + [[x, 20.0, x + 1.0, 21.0] for x in range(0, 300, 2)])
    which = np.arange(len(walls))
    kernel._SEALERS.clear()

    def attacker(x: float, y: float) -> FloatArray:
        return np.repeat((np.array([[x, y]]) + unit)[None], len(targets), axis=0)

    first = kernel.sealed_blocks(attacker(10.0, 0.0), targets, walls, which)
    assert first.all()
    walked: list[int] = []
    real_walk = kernel._seal_walk

    def counting(starts: FloatArray, ends: FloatArray, runs: FloatArray) -> IntArray:
        walked.append(len(starts))
        return real_walk(starts, ends, runs)

    monkeypatch.setattr(kernel, "_seal_walk", counting)
    assert kernel.sealed_blocks(attacker(11.0, 0.0), targets, walls, which).all()
    assert walked == []
    # On the targets' side of the wall: the hint crosses no line now, nothing is sealed.
    assert not kernel.sealed_blocks(attacker(11.0, 7.0), targets, walls, which).any()
    assert walked == [len(targets)]
    kernel._SEALERS.clear()


def test_grid_of_merged_runs_found_by_identity() -> None:
    """Merged runs (read-only arrays owning their data) find their grid by identity, under
    the cell size asked for, on the second call already: their bytes are not hashed."""
    runs = np.array([[0.0, 0.0, 10.0, 0.0], [0.0, 5.0, 10.0, 5.0], [3.0, 0.0, 3.0, 9.0]])
    runs.flags.writeable = False
    first = kernel._wall_grid(runs)
    assert kernel._GRIDS_BY_ID[(id(runs), None)] == (runs, first)
    assert kernel._wall_grid(runs) is first
    # A writeable array is never found so: changed in place, it gets a grid of its own.
    loose = runs.copy()
    kernel._wall_grid(loose)
    assert (id(loose), None) not in kernel._GRIDS_BY_ID


def test_forget_kept_forgets_the_sealing_hints() -> None:
    """`rulesets.forget_kept` makes the next evaluation a first subscription's: the runs
    kept as the last to seal blocks (`kernel._SEALERS`) go too, so a timed first
    subscription does not try the walls an earlier run found."""
    from rulesets import forget_kept

    kernel._SEALERS.clear()
    # A square on each side of one long wall: the wall seals the block of corner lines.
    starts = np.array([[[0, 0], [10, 0], [10, 10], [0, 10]]], dtype=np.float64)
    ends = starts + np.array([40.0, 0.0])
    w = np.array([[25.0, -50.0, 25.0, 60.0]])
    assert kernel.sealed_blocks(starts, ends, w, np.array([0])).tolist() == [True]
    assert kernel._SEALERS, "the call left its hint"
    forget_kept()
    assert not kernel._SEALERS
