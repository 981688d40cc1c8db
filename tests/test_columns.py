"""A scene's creature columns (geometry/columns.py): patched from a recent snapshot when few
creatures differ, they must always equal the columns read afresh from the creatures, and
nobody may write to them (they are shared by every reader of a snapshot)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from geometry import columns as cols_mod
from geometry.columns import columns, upper_pairs
from geometry.model import CreatureGeom, Grid, GridKind, Size
from geometry.square import space, vertical_side

GRID = Grid(GridKind.SQUARE, 100.0, 5.0, "ft")
HEX = Grid(GridKind.HEXODDR, 100.0, 5.0, "ft")


def _creature(k: int, x: int, y: int, squares: int, elev: int) -> CreatureGeom:
    size = {1: Size.MEDIUM, 2: Size.LARGE, 3: Size.HUGE}[squares]
    return CreatureGeom(f"c{k}", x * 100.0, y * 100.0, squares, squares, size,
                        5.0 * squares, 5.0 * squares, 5.0 * elev, 0, False)


def _fresh(cs: tuple[CreatureGeom, ...], grid: Grid) -> dict[str, np.ndarray]:
    return {"spaces": np.array([space(c, grid) for c in cs], dtype=np.float64).reshape(-1, 4),
            "reach": np.array([c.reach for c in cs], dtype=np.float64),
            "elev": np.array([c.elevation for c in cs], dtype=np.float64),
            "tall": np.array([c.tall for c in cs], dtype=np.float64),
            "side": np.array([vertical_side(c) for c in cs], dtype=np.float64)}


def _assert_fresh(cs: tuple[CreatureGeom, ...], grid: Grid) -> None:
    got = columns(cs, grid)
    assert got.creatures is cs
    assert got.ids == tuple(c.id for c in cs)
    assert got.index == {c.id: k for k, c in enumerate(cs)}
    for name, want in _fresh(cs, grid).items():
        array = getattr(got, name)
        assert np.array_equal(array, want), name
        assert not array.flags.writeable, name


_step = st.tuples(st.sampled_from(["move", "rise", "grow", "add", "drop", "swap", "same"]),
                  st.integers(0, 10_000), st.integers(0, 30), st.integers(0, 30))


def _apply(cs: tuple[CreatureGeom, ...], step: tuple[str, int, int, int],
           made: int) -> tuple[tuple[CreatureGeom, ...], int]:
    """The creatures after one `_step` (and how many were ever made)."""
    what, pick, x, y = step
    items = list(cs)
    k = pick % len(items) if items else 0
    if what == "move" and items:
        c = items[k]
        items[k] = _creature(int(c.id[1:]), x, y, int(c.width), int(c.elevation // 5))
    elif what == "rise" and items:
        c = items[k]
        items[k] = _creature(int(c.id[1:]), int(c.x // 100), int(c.y // 100),
                             int(c.width), x)
    elif what == "grow" and items:
        c = items[k]
        items[k] = _creature(int(c.id[1:]), int(c.x // 100), int(c.y // 100),
                             1 + y % 3, int(c.elevation // 5))
    elif what == "add":
        items.insert(k, _creature(made, x, y, 1 + x % 3, y % 4))
        made += 1
    elif what == "drop" and items:
        del items[k]
    elif what == "swap" and len(items) > 1:
        items[0], items[-1] = items[-1], items[0]
    return tuple(items), made


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 12), steps=st.lists(_step, max_size=12),
       grid=st.sampled_from([GRID, HEX]))
def test_columns_always_equal_a_fresh_read(n: int, steps: list[tuple[str, int, int, int]],
                                           grid: Grid) -> None:
    cols_mod._RECENT.clear()
    cs = tuple(_creature(k, k, 0, 1, 0) for k in range(n))
    _assert_fresh(cs, grid)
    made = n
    for step in steps:
        cs, made = _apply(cs, step, made)
        _assert_fresh(cs, grid)


def test_same_snapshot_same_columns_and_a_move_patches_one_row() -> None:
    cols_mod._RECENT.clear()
    cs = tuple(_creature(k, k, k, 1, 0) for k in range(40))
    first = columns(cs, GRID)
    assert columns(cs, GRID) is first
    moved = (*cs[:7], _creature(7, 30, 2, 2, 3), *cs[8:])
    second = columns(moved, GRID)
    assert second is not first and second.index is first.index  # same ids, same order
    assert np.array_equal(second.spaces[7], [3000.0, 200.0, 3200.0, 400.0])
    assert np.array_equal(np.delete(second.spaces, 7, axis=0), np.delete(first.spaces, 7, axis=0))
    # The earlier snapshot's arrays were not touched by the patch.
    assert np.array_equal(first.spaces[7], [700.0, 700.0, 800.0, 800.0])
    with pytest.raises(ValueError):
        second.spaces[0, 0] = 1.0
    # Another grid is another set of columns, even for the same creatures.
    assert columns(cs, Grid(GridKind.SQUARE, 50.0, 5.0, "ft")).spaces[1, 2] == 150.0


def test_upper_pairs() -> None:
    a, t = upper_pairs(5)
    want_a, want_t = np.triu_indices(5, k=1)
    assert np.array_equal(a, want_a) and np.array_equal(t, want_t)
    assert upper_pairs(5)[0] is a
    assert not a.flags.writeable


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(1, 3),
                          st.integers(0, 2)), min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(0, 7), st.integers(0, 9), st.integers(0, 9)),
                max_size=6))
def test_per_creature_values_equal_fresh_ones_and_build_only_new_creatures(
        start: list[tuple[int, int, int, int]], moves: list[tuple[int, int, int]]) -> None:
    """Values per creature (hex footprints here) for snapshot after snapshot of moves: each
    list equals the values built afresh; only the creatures that are new objects are
    built; the same tuple gets the same list back."""
    from geometry import hex as hexgrid
    from geometry.columns import hex_footprints, per_creature

    cs = tuple(_creature(k, x, y, s, e) for k, (x, y, s, e) in enumerate(start))
    built: list[int] = []

    def build(todo: list[int]) -> list[tuple[float, float, float]]:
        built.extend(todo)
        return [(cs_now[k].x, cs_now[k].y, cs_now[k].elevation) for k in todo]

    for x, y, e in [(0, 0, 0), *moves]:
        k = x % len(cs)
        changed = cs[k] if (x, y, e) == (0, 0, 0) else _creature(
            k, y, e, int(cs[k].width), 0)
        cs_now = tuple(changed if j == k else c for j, c in enumerate(cs))
        built.clear()
        got = per_creature("test values", cs_now, HEX, build)
        assert got == [(c.x, c.y, c.elevation) for c in cs_now]
        assert set(built) <= {j for j, c in enumerate(cs_now) if c is not cs[j]} or \
            len(built) == len(cs_now)
        assert per_creature("test values", cs_now, HEX, build) is got
        assert [fp.cells for fp in hex_footprints(cs_now, HEX)] == \
            [hexgrid.footprint(c, HEX).cells for c in cs_now]
        cs = cs_now


def test_a_tuple_longer_or_shorter_than_a_recent_one_builds_only_what_it_does_not_share(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A rules engine looks at a snapshot with the moved creatures' old states added at the
    end (realms' `widen`): the tuple is longer than every recent one, yet shares all but
    those objects with the snapshot. Only they are built, for columns and per-creature
    values alike, and both equal a fresh read."""
    from geometry.columns import per_creature

    cols_mod._RECENT.clear()
    cols_mod._PER_CREATURE.clear()
    rows_built: list[int] = []
    real_rows = cols_mod._rows

    def counting_rows(cs, grid):  # type: ignore[no-untyped-def]
        rows_built.append(len(cs))
        return real_rows(cs, grid)

    monkeypatch.setattr(cols_mod, "_rows", counting_rows)
    built: list[int] = []

    def values(cs: tuple[CreatureGeom, ...]) -> list[tuple[float, float]]:
        def build(todo: list[int]) -> list[tuple[float, float]]:
            built.extend(todo)
            return [(cs[k].x, cs[k].y) for k in todo]
        got = per_creature("test tails", cs, HEX, build)
        assert got == [(c.x, c.y) for c in cs]
        return got

    cs = tuple(_creature(k, k, 2 * k, 1 + k % 2, 0) for k in range(40))
    for grid in (GRID, HEX):
        _assert_fresh(cs, grid)
    values(cs)
    rows_built.clear()
    built.clear()
    old = cs[7]
    after = (*cs[:7], _creature(7, 33, 1, 1, 2), *cs[8:])
    wider = (*after, old)
    for tup, new in ((after, [7]), (wider, [40]), (wider[:39], []), (wider[:20], [])):
        rows_built.clear()
        built.clear()
        for grid in (GRID, HEX):
            _assert_fresh(tup, grid)
        values(tup)
        assert sorted(built) == new, (len(tup), built)
        assert rows_built in ([len(new)] * 2, []), (len(tup), rows_built)


def _engine_lists(cs: tuple[CreatureGeom, ...]) -> dict[str, list[object]]:
    """The corner engine's per creature lists for these creatures, as plain values."""
    from geometry.model import SceneGeom
    from rulesets.corner import CornerEngine, CornerOptions

    e = CornerEngine(SceneGeom(GRID, (), cs), CornerOptions())
    def plain(xs: Sequence[object]) -> list[object]:
        return [x.tolist() if isinstance(x, np.ndarray) else x for x in xs]
    return {"spaces": plain(e.spaces), "squares": plain(e.squares),
            "points": plain(e._points), "points_in": plain(e._points_in),
            "space_idx": plain(e._space_idx), "square_idx": plain(e._square_idx),
            "square_boxes": plain(e._square_boxes), "k": e._k.tolist(),
            "layouts": [id(x) for x in e._layouts]}


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 12), steps=st.lists(_step, max_size=12))
def test_the_corner_engines_lists_patched_from_the_last_equal_a_fresh_read(
        n: int, steps: list[tuple[str, int, int, int]]) -> None:
    """The corner engine copies the last engine's per creature lists (layouts, corners,
    squares) and replaces the moved creatures' entries: always what reading every
    creature again gives."""
    from rulesets import corner

    corner._LAST_STACKS.clear()
    cs = tuple(_creature(k, 2 * k, 0, 1, 0) for k in range(n))
    made = n
    for step in [("same", 0, 0, 0), *steps]:
        cs, made = _apply(cs, step, made)
        got = _engine_lists(cs)
        held = list(corner._LAST_STACKS)
        corner._LAST_STACKS.clear()
        assert got == _engine_lists(cs), step
        corner._LAST_STACKS[:] = held
