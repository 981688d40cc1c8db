"""Regions of many sides (issue 16, item 3): indexed once per region, the work a region
adds per pair bounded by the sides near the sight, and the answers exactly GEOS's."""

from __future__ import annotations

import math
import random
from typing import Any

import msgpack
import numpy as np
import pytest
import shapely

from geometry import kernel
from server.session import Core

SIDES = 2000


def _star(cx: float, cy: float, r: float, n: int) -> list[float]:
    """A jagged ring of n sides (every other vertex drawn in): nothing to simplify."""
    pts: list[float] = []
    for k in range(n):
        a = 2 * math.pi * k / n
        rr = r * (0.7 + 0.3 * (k % 2))
        pts += [cx + rr * math.cos(a), cy + rr * math.sin(a)]
    return pts


def _core(ruleset: str, sides: int) -> tuple[Core, int]:
    core = Core()
    conn = core.connect()
    core.receive(conn, msgpack.packb({"type": "hello", "protocol": 1, "client": "t"}))
    tokens = [{"_id": f"t{k}", "x": 300 * (k % 5), "y": 800 * (k // 5)} for k in range(10)]
    scene = {"_id": "s", "grid": {"type": 1, "size": 100, "distance": 5}, "width": 2000,
             "height": 2000, "tokens": tokens,
             "regions": [{"id": "brush", "kind": "cover", "points": _star(700, 400, 300, sides)}]}
    (ack,) = core.receive(conn, msgpack.packb({"type": "scene.load", "id": 1,
                                               "ruleset": ruleset, "scene": scene}))
    assert msgpack.unpackb(ack.frame)["type"] == "ack"  # type: ignore[union-attr]
    return core, conn


def _subscribe(core: Core, conn: int) -> dict[str, Any]:
    (out,) = core.receive(conn, msgpack.packb({"type": "subscribe", "id": 2, "scene": "s"}))
    reply: dict[str, Any] = msgpack.unpackb(out.frame)  # type: ignore[union-attr]
    assert reply["type"] == "annotations"
    return reply


def test_lines_through_a_region_of_2000_sides_are_mostly_settled_by_the_index(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """dnd35's lines against a 2,000-side cover region: GEOS's relate (whose cost grows
    with the sides, for every line) settles at most a few lines in a hundred; the rest
    are settled by the prepared polygon and the side index (before: every line)."""
    traced = [0]
    related = [0]
    enter = kernel.segments_enter_polygons
    relate = shapely.relate_pattern

    def counting_enter(starts: Any, ends: Any, polygons: Any) -> Any:
        traced[0] += len(starts) * len(polygons)
        return enter(starts, ends, polygons)

    def counting_relate(a: Any, b: Any, pattern: str, **kw: Any) -> Any:
        related[0] += int(np.size(a))
        return relate(a, b, pattern, **kw)

    monkeypatch.setattr(kernel, "segments_enter_polygons", counting_enter)
    monkeypatch.setattr(shapely, "relate_pattern", counting_relate)
    core, conn = _core("dnd35", SIDES)
    _subscribe(core, conn)
    assert traced[0] > 500
    assert related[0] <= 0.05 * traced[0], (related[0], traced[0])


@pytest.mark.parametrize("ruleset", ["realms", "pf1"])
def test_shadows_of_a_region_are_cast_only_by_the_sides_near_the_sight(
        ruleset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shadow rulesets cast shadows from the region's sides that meet the hull of
    viewpoint and target, not from all of them (before: 600 shadows per viewpoint). The
    shadows of many viewpoints are measured in one batch (rulesets.shadows.hidden_areas):
    counted per viewpoint."""
    import rulesets.corner as corner
    import rulesets.realms as realms

    module = realms if ruleset == "realms" else corner
    calls: list[int] = []
    measure = module.hidden_areas

    def counting(p: Any, body: Any, seg_req: Any, *rest: Any) -> Any:
        calls.extend(np.bincount(seg_req, minlength=len(p)).tolist())
        return measure(p, body, seg_req, *rest)

    monkeypatch.setattr(module, "hidden_areas", counting)
    core, conn = _core(ruleset, 600)
    _subscribe(core, conn)
    assert calls
    assert np.mean(calls) < 0.25 * 600, (np.mean(calls), max(calls))


@pytest.mark.parametrize("seed", range(6))
def test_the_indexed_region_test_is_exactly_geos(seed: int) -> None:
    """Against GEOS's relate on every line: lines through vertices, along sides, ending on
    the boundary, inside, outside and across, for jagged rings and grid-aligned ones."""
    rng = random.Random(seed)
    if seed % 2:
        ring = _star(50, 50, 40, rng.choice([6, 40, 400]))
        poly = shapely.Polygon(np.array(ring).reshape(-1, 2))
    else:
        # A staircase on a 10-px grid: many lines run along its sides or through corners.
        steps = [(0.0, 0.0)]
        x = y = 0.0
        for _ in range(rng.randint(3, 12)):
            x += 10 * rng.randint(1, 3)
            steps.append((x, y))
            y += 10 * rng.randint(1, 3)
            steps.append((x, y))
        poly = shapely.Polygon([*steps, (0.0, y)])
    coords = np.asarray(poly.exterior.coords)
    grid = [float(10 * k) for k in range(-2, 13)]
    pts = [(rng.choice(grid), rng.choice(grid)) for _ in range(300)]
    pts += [tuple(coords[rng.randrange(len(coords))]) for _ in range(100)]
    pts += [(rng.uniform(-20, 120), rng.uniform(-20, 120)) for _ in range(100)]
    starts = np.array([pts[rng.randrange(len(pts))] for _ in range(3000)], dtype=np.float64)
    ends = np.array([pts[rng.randrange(len(pts))] for _ in range(3000)], dtype=np.float64)
    keep = np.any(starts != ends, axis=1)
    starts, ends = starts[keep], ends[keep]
    lines = shapely.linestrings(np.stack([starts, ends], axis=1))
    want = np.flatnonzero(shapely.relate_pattern(lines, poly, "T********"))
    got, which = kernel.segments_enter_polygons(starts, ends, [poly])
    assert np.array_equal(np.sort(got), want)
    assert set(which.tolist()) <= {0}
