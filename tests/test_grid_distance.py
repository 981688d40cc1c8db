"""The low obstacle's distance on the grid (geometry.square.segment_grid_feet): squares from
a creature's space to the nearest square a wall touches, diagonals alternating 5/10 ft, held
to a brute-force count over the squares around it (Shapely: the closed squares the segment
meets)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import shapely

from geometry.square import feet_many, segment_grid_feet

SIZE = 100.0


def brute(box: tuple[float, float, float, float], seg: tuple[float, float, float, float],
          reach: int = 12) -> float:
    """The smallest grid distance from the space to a closed square the segment meets:
    0 for the space's own squares, otherwise the squares across and down counted as moves
    (the adjacent square is 1)."""
    line = shapely.LineString([seg[0:2], seg[2:4]])
    x0, y0, x1, y1 = box
    best = np.inf
    for i in range(int(x0 // SIZE) - reach, int(x1 // SIZE) + reach):
        for j in range(int(y0 // SIZE) - reach, int(y1 // SIZE) + reach):
            sq = shapely.box(i * SIZE, j * SIZE, (i + 1) * SIZE, (j + 1) * SIZE)
            if not line.intersects(sq):
                continue
            gx = max(0.0, i * SIZE - x1, x0 - (i + 1) * SIZE) / SIZE
            gy = max(0.0, j * SIZE - y1, y0 - (j + 1) * SIZE) / SIZE
            inside_x = i * SIZE < x1 and (i + 1) * SIZE > x0
            inside_y = j * SIZE < y1 and (j + 1) * SIZE > y0
            sx = 0 if inside_x else round(gx) + 1
            sy = 0 if inside_y else round(gy) + 1
            best = min(best, float(feet_many(np.array([sx]), np.array([sy]))[0]))
    return best


def test_known_cases() -> None:
    box = np.array([[0.0, 0.0, 100.0, 100.0]] * 5)
    segs = np.array([
        [700, 200, 700, 600],   # six across, one down: 30 ft
        [100, -50, 100, 50],    # on the space's own border: 0 ft
        [150, 0, 150, 100],     # through the next square: 5 ft
        [620, 420, 420, 620],   # slanted, nearest square five diagonals away: 35 ft
        [500, 500, 500, 500.5],  # four diagonals away (the square at 400..500): 30 ft
    ], dtype=np.float64)
    assert segment_grid_feet(box, segs, SIZE, 7).tolist() == [30.0, 0.0, 5.0, 35.0, 30.0]


@pytest.mark.parametrize("seed", range(4))
def test_matches_brute_force_on_random_walls(seed: int) -> None:
    rng = random.Random(seed)
    boxes, segs = [], []
    for _ in range(60):
        x, y = rng.randint(-3, 3) * SIZE, rng.randint(-3, 3) * SIZE
        w = rng.choice([1, 2, 3]) * SIZE  # spaces on the grid (a Tiny one counts from its own)
        boxes.append((x, y, x + w, y + w))
        # Ends on the grid, on half squares, or anywhere: grid-aligned walls are the
        # common case and the one where rounding matters.
        def coord() -> float:
            k = rng.random()
            if k < 0.4:
                return rng.randint(-9, 9) * SIZE
            if k < 0.7:
                return rng.randint(-18, 18) * SIZE / 2
            return rng.uniform(-900, 900)
        segs.append((coord(), coord(), coord(), coord()))
    got = segment_grid_feet(np.array(boxes), np.array(segs), SIZE, 7)
    for box, seg, g in zip(boxes, segs, got.tolist(), strict=True):
        want = brute(box, seg)
        if want <= 35.0:  # exact up to 7 squares; beyond, a bound that is beyond too
            assert g == want, (box, seg, g, want)
        else:
            assert g > 30.0, (box, seg, g, want)


def test_big_maps_find_the_same_distances(monkeypatch: pytest.MonkeyPatch) -> None:
    """`CornerEngine._distances` finds its distinct (creature, wall) keys by marking a table
    of every slot on small maps, by sorting on big ones (1,000 creatures x 20,000 walls):
    the same feet either way, for every paired key, in its place."""
    from bench.dressing import dress
    from bench.scenes import generate
    from geometry.model import FEET_PER_SQUARE
    from rulesets import corner
    from rulesets.corner import CornerEngine, CornerOptions

    geom = dress(generate(30, 300, 2).geom, 2)
    engine = CornerEngine(geom, CornerOptions())
    rng = np.random.default_rng(5)
    n = 400
    att = rng.integers(0, len(geom.creatures), n)
    tgt = rng.integers(0, len(geom.creatures), n)
    walls = rng.integers(0, len(engine.tracer.walls), n)
    dense = engine._distances(att, tgt, walls)
    monkeypatch.setattr(corner, "_DENSE_DISTANCE_SLOTS", 0)
    sorted_ = engine._distances(att, tgt, walls)
    for d, s in zip(dense, sorted_, strict=True):
        np.testing.assert_array_equal(d, s)
    # And against the distance measured one key at a time.
    steps = int(corner.LOW_OBSTACLE_RANGE_FT // FEET_PER_SQUARE) + 1
    tr = engine.tracer
    for k in range(0, n, 37):
        one = segment_grid_feet(tr.boxes[att[k:k + 1]], tr.wall_xy[walls[k:k + 1]], SIZE,
                                steps)
        assert sorted_[0][k] == one[0]
