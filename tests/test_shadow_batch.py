"""The shadow rulesets' batched measurements equal their pair-by-pair references (issue 15).

pf1's visible fraction and realms' covered fraction are measured for every pair at once:
the walls and region sides near each sight found in one index query, the hidden area summed
exactly by `rulesets.shadows.hidden_areas` (seen from a point, the union of the shadows along
each ray is the half-line beyond the nearest segment, or a union of stretches where a shadow
stops at a far edge). `Pf1.reference` and `Realms.reference`
are the computations they replaced (one Shapely union per viewpoint); both must give the same
annotations on seeded benchmark scenes (plain rooms and dressed ones with wall bands,
elevations, terrain, water and mounts), on hex layouts, on random small scenes (Hypothesis),
for every pair or a subset, with and without traced lines; and the kernel itself must equal
GEOS's union area on random segments, square and hex bodies.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import shapely
from hypothesis import given
from hypothesis import strategies as st

from bench.dressing import dress
from bench.hexscenes import HEX_KINDS, on_hex
from bench.scenes import generate
from geometry import kernel, openings
from geometry.columns import columns
from geometry.kernel import IntArray
from geometry.model import Direction, RegionGeom, RegionKind, SceneGeom
from rulesets import REGISTRY, realms
from rulesets.base import Annotation, AttackMode, Degree, Flag
from rulesets.corner import CornerEngine
from rulesets.pf1 import Pf1, Pf1Options
from rulesets.realms import Realms, RealmsOptions
from rulesets.shadows import hidden_areas, hulls, meeting, shadow_polygons
from tests.conftest import moves_warm_and_cold
from tests.test_degrees_fast import hex_scene_docs, mounted_scene_docs
from tests.test_properties import PROPS, Doc, load


def _no_floors(geom: SceneGeom) -> SceneGeom:
    # GM floors name one ruleset's degrees (the dressing's are degrees'): left out.
    return replace(geom, creatures=tuple(replace(c, cover_floor=None) for c in geom.creatures))


def _scene(tokens: int, walls: int, seed: int, dressed: bool) -> SceneGeom:
    geom = generate(tokens, walls, seed).geom
    return _no_floors(dress(geom, seed) if dressed else geom)


def assert_same(fast: list[Annotation], ref: list[Annotation]) -> None:
    assert len(fast) == len(ref)
    wrong = [(f, r) for f, r in zip(fast, ref, strict=True) if f != r]
    assert not wrong, f"{len(wrong)} of {len(ref)} differ, e.g. {wrong[0]}"


# -- the kernel ------------------------------------------------------------------------------

def _coord(lo: float, hi: float) -> st.SearchStrategy[float]:
    # Pixels to a millionth: a coordinate such as 3e-128 beside 0.0 makes GEOS's union of
    # the shadows (the reference) lose the shadow it crosses (found by Hypothesis: 0
    # against the exact 4949.49 px^2 of a triangle the union left out).
    return st.floats(lo, hi).map(lambda v: round(v, 6))


@st.composite
def shading_cases(draw: st.DrawFn) -> tuple[Any, ...]:
    """A viewpoint outside a body (a grid square or a hexagon), and segments around them:
    on the grid lines (rooms), through the body's corners, and anywhere."""
    hexagon = draw(st.booleans())
    if hexagon:
        cx, cy = draw(_coord(150, 350)), draw(_coord(150, 350))
        r = draw(_coord(10, 60))
        turn = draw(st.floats(0, 1))
        ang = np.arange(6) * np.pi / 3 + turn
        body = np.stack([cx + r * np.cos(ang), cy + r * np.sin(ang)], axis=1)
    else:
        x0, y0 = 100.0 * draw(st.integers(1, 3)), 100.0 * draw(st.integers(1, 3))
        body = np.array([[x0, y0], [x0 + 100, y0], [x0 + 100, y0 + 100], [x0, y0 + 100]])
    if draw(st.booleans()):
        body = body[::-1].copy()
    grid = st.integers(0, 5).map(lambda v: 100.0 * v)
    p = np.array([draw(_coord(0, 500)), draw(_coord(0, 500))])
    if shapely.Polygon(body).buffer(1.0).contains(shapely.Point(p)):
        p = np.array([draw(grid) - 0.25, -40.0])  # outside every body
    segs = []
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.integers(0, 2))
        if kind == 0:
            a = np.array([draw(grid), draw(grid)])
            b = a + np.array(draw(st.sampled_from([(100, 0), (0, 100), (200, 0), (0, 300)])))
        elif kind == 1:
            a = body[draw(st.integers(0, len(body) - 1))]
            b = np.array([draw(_coord(0, 500)), draw(_coord(0, 500))])
        else:
            a = np.array([draw(_coord(0, 500)), draw(_coord(0, 500))])
            b = np.array([draw(_coord(0, 500)), draw(_coord(0, 500))])
        if np.hypot(*(b - a)) < 1e-3:
            continue
        # The callers keep the viewpoint off every segment.
        if shapely.distance(shapely.LineString([a, b]), shapely.Point(p)) <= 1e-3:
            continue
        segs.append((a, b, draw(st.sampled_from([1.0, 0.9, 0.5, 0.25]))))
    return p, body, segs


@PROPS
@given(shading_cases())
def test_hidden_area_is_the_area_of_the_union_of_the_shadows(case: tuple[Any, ...]) -> None:
    p, body, segs = case
    levels = np.array([1.0, 0.9, 0.5, 0.25])
    a = np.array([s[0] for s in segs]).reshape(-1, 2)
    b = np.array([s[1] for s in segs]).reshape(-1, 2)
    w = np.array([s[2] for s in segs])
    got = hidden_areas(p[None, :], body[None, :, :], np.zeros(len(segs), dtype=np.intp), a, b,
                       w, levels)[0]
    poly = shapely.Polygon(body)
    for k, level in enumerate(levels):
        sel = w >= level
        want = 0.0
        if sel.any():
            shadows = shapely.polygons(shadow_polygons(p, a[sel], b[sel], 5000.0))
            shadows = shapely.make_valid(shadows)
            want = float(shapely.area(shapely.intersection(shapely.union_all(shadows), poly)))
        assert got[k] == pytest.approx(want, abs=1e-7 * poly.area), (k, got[k], want)


@st.composite
def stopping_cases(draw: st.DrawFn) -> tuple[Any, ...]:
    """Shading cases whose segments' shadows may stop short: each at its segment scaled
    from the viewpoint by a factor (a wall band counting over part of the way), or not."""
    p, body, segs = draw(shading_cases())
    centre = body.mean(axis=0)
    if draw(st.booleans()):
        # A screen across the way from the viewpoint to the body, whose shadow falls on
        # it unless it stops short.
        way = centre - p
        q = p + way * draw(st.floats(0.2, 0.7).map(lambda v: round(v, 3)))
        side = np.array([-way[1], way[0]]) / max(float(np.hypot(*way)), 1e-9)
        half = draw(_coord(20, 150))
        segs.append((q - side * half, q + side * half, draw(st.sampled_from([1.0, 0.5]))))
    far = []
    for a, b, _ in segs:
        kind = draw(st.integers(0, 2))
        if kind == 0:
            far.append(np.inf)
        elif kind == 1:
            far.append(draw(st.floats(1.01, 4.0).map(lambda v: round(v, 3))))
        else:
            # Most often the far edge crosses the body: about as far from the viewpoint
            # as the body's centre.
            gap = float(np.hypot(*((a + b) / 2 - p)))
            x = draw(st.floats(0.7, 1.3).map(lambda v: round(v, 3)))
            far.append(max(1.01, round(x * float(np.hypot(*(centre - p))) / max(gap, 1.0), 3)))
    return p, body, segs, np.array(far)


def _stopping_shadows(p: np.ndarray, a: np.ndarray, b: np.ndarray,
                      far: np.ndarray) -> np.ndarray:
    """The shadows as GEOS polygons: the plain ones to far away, the others to their far
    edge (the reference the exact sum must equal)."""
    out = shapely.polygons(shadow_polygons(p, a, b, 5000.0))
    for k in np.flatnonzero(np.isfinite(far)):
        f = far[k]
        out[k] = shapely.Polygon([a[k], b[k], p + (b[k] - p) * f, p + (a[k] - p) * f])
    valid: np.ndarray = shapely.make_valid(out)
    return valid


@PROPS
@given(stopping_cases())
def test_hidden_area_with_shadows_stopping_short_is_the_area_of_their_union(
        case: tuple[Any, ...]) -> None:
    """Shadows that stop at a far edge (pf1's walls with a height band between creatures at
    different heights) are summed exactly too: along a ray the hidden part is the union
    of stretches, not the half-line beyond the nearest segment."""
    p, body, segs, far = case
    levels = np.array([1.0, 0.9, 0.5, 0.25])
    a = np.array([s[0] for s in segs]).reshape(-1, 2)
    b = np.array([s[1] for s in segs]).reshape(-1, 2)
    w = np.array([s[2] for s in segs])
    got = hidden_areas(p[None, :], body[None, :, :], np.zeros(len(segs), dtype=np.intp), a, b,
                       w, levels, far=far)[0]
    poly = shapely.Polygon(body)
    shadows = _stopping_shadows(p, a, b, far)
    for k, level in enumerate(levels):
        sel = w >= level
        want = 0.0
        if sel.any():
            want = float(shapely.area(shapely.intersection(shapely.union_all(shadows[sel]),
                                                           poly)))
        assert got[k] == pytest.approx(want, abs=1e-7 * poly.area), (k, got[k], want)


@PROPS
@given(st.lists(stopping_cases(), min_size=1, max_size=8), st.booleans())
def test_shadows_stopping_short_in_a_batch_are_each_requests_own(
        cases: list[tuple[Any, ...]], union: bool) -> None:
    """Requests with and without shadows that stop short, computed together, each get what
    they get alone; so do those past the segment cap (half of them, when `union`), united
    by GEOS, beside the others summed."""
    from rulesets import shadows

    levels = np.array([1.0, 0.5])
    batch = _batch(cases)
    p, bodies, seg_req, a, b, w = batch
    far = np.concatenate([c[3] for c in cases])
    keep = shadows.MAX_SEGMENTS
    try:
        cap = int(np.median(np.bincount(seg_req, minlength=len(p))))
        shadows.MAX_SEGMENTS = cap if union else keep
        together = hidden_areas(p, np.stack(bodies), seg_req, a, b, w, levels, far=far)
    finally:
        shadows.MAX_SEGMENTS = keep
    for k in range(len(p)):
        sel = seg_req == k
        alone = hidden_areas(p[k:k + 1], bodies[k][None], np.zeros(int(sel.sum()), dtype=np.intp),
                             a[sel], b[sel], w[sel], levels, far=far[sel])[0]
        assert together[k] == pytest.approx(alone, abs=1e-7 * shapely.Polygon(bodies[k]).area)


# -- pf1 --------------------------------------------------------------------------------------

PF1_OPTIONS = [Pf1Options(), Pf1Options(partial_cover="lines", big_creatures_ranged=True,
                                        low_obstacle_range_from="target")]


@pytest.mark.parametrize("dressed", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pf1_equals_its_reference_on_benchmark_scenes(seed: int, dressed: bool) -> None:
    geom = _scene(30, 200, seed, dressed)
    for options in PF1_OPTIONS:
        assert_same(Pf1().evaluate(geom, options), Pf1().reference(geom, options))


def test_pf1_equals_its_reference_on_subsets_and_with_lines() -> None:
    geom = _scene(24, 150, 4, True)
    ids = [c.id for c in geom.creatures]
    pairs = [(ids[a], ids[t]) for a in range(0, 24, 3) for t in range(24) if a != t]
    for modes in (tuple(AttackMode), (AttackMode.RANGED,)):
        for lines in (False, True):
            assert_same(Pf1().evaluate(geom, Pf1Options(), pairs, modes, lines),
                        Pf1().reference(geom, Pf1Options(), pairs, modes, lines))


@pytest.mark.parametrize("options", [
    Pf1Options(), Pf1Options(partial_cover="lines"),
    Pf1Options(soft_cover_vs_reach=False), Pf1Options(soft_cover_vs_reach=False,
                                                      partial_cover="lines")])
def test_pf1_rows_at_cover_read_from_the_one_trace(options: Pf1Options) -> None:
    """Rows at cover are looked at closer from the probes of the trace that gave their
    levels, as arrays (no second trace, no object per row). Reach rows read the probes of
    the ranged row they were traced with, creatures counting there or not (by option); a
    melee row against an adjacent target is measured from each corner of the attacker's
    squares next to it; a GM's floor is applied after. All as the reference does, row by
    row."""
    geom = generate(30, 200, 2).geom
    geom = dress(geom, 2)
    floors = ("partial", "cover", "improved")
    geom = replace(geom, creatures=tuple(
        replace(c, cover_floor=None if c.cover_floor is None else floors[k % 3])
        for k, c in enumerate(geom.creatures)))
    fast = Pf1().evaluate(geom, options)
    assert_same(fast, Pf1().reference(geom, options))
    floored = {c.id for c in geom.creatures if c.cover_floor is not None}
    at_cover = [a for a in fast if a.cover in (Degree.COVER, Degree.PARTIAL)]
    # Every kind of row the closer look reads is there.
    for mode in AttackMode:
        assert any(a.mode is mode for a in at_cover), mode
    assert any(a.mode is AttackMode.MELEE and Flag.ADJACENT in a.flags for a in at_cover)
    assert any(a.target in floored for a in at_cover)
    assert {a.cover for a in at_cover} == {Degree.COVER, Degree.PARTIAL}
    # Creatures bigger than one square are planned apart from the others (their rows
    # reordered, `_planned`): some are at cover, as attackers and as targets.
    big = {c.id for c in geom.creatures if c.width > 1 or c.height > 1}
    assert any(a.attacker in big for a in at_cover)
    assert any(a.target in big for a in at_cover)


def test_pf1_scenes_reach_partial_cover_and_truncated_shadows() -> None:
    # The scenes above are worth something only if pairs reach cover and are measured,
    # some with shadows cut by wall bands and most without.
    geom = _scene(30, 200, 1, True)
    anns = Pf1().evaluate(geom, Pf1Options())
    measured = [a.visible for a in anns if a.visible is not None]
    assert len(measured) > 20
    assert any(v > 0.5 for v in measured) and any(v <= 0.5 for v in measured)
    assert geom.walls and any(w.top is not None or w.bottom is not None for w in geom.walls)


def test_pf1_sums_shadows_that_stop_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """Walls whose height band counts over a stretch of the way only (creatures at
    different heights) cast shadows that stop at a far edge: the exact sum takes them,
    and GEOS unites only the few sights it cannot (a corner on a wall, or nearly on the
    square's border). Before, every sight with such a shadow went to GEOS."""
    stopping: list[int] = []
    united: list[int] = []
    union = CornerEngine._visible_by_union

    def counting_sum(*args: Any) -> Any:
        far = args[8] if len(args) > 8 else np.full(len(args[2]), np.inf)
        stopping.append(int(np.isfinite(far).sum()))
        return hidden_areas(*args)

    def counting_union(self: CornerEngine, *args: Any) -> Any:
        united.append(int(args[5].sum()))
        return union(self, *args)

    monkeypatch.setattr("rulesets.corner.hidden_areas", counting_sum)
    monkeypatch.setattr(CornerEngine, "_visible_by_union", counting_union)
    geom = _scene(100, 1000, 1, True)
    assert_same(Pf1().evaluate(geom, Pf1Options()), Pf1().reference(geom, Pf1Options()))
    assert sum(stopping) > 20
    assert sum(united) < sum(stopping) / 4


@pytest.mark.parametrize("objects", [20_000, 20], ids=["numbered", "restarting"])
def test_pf1_visible_fractions_kept_across_moves_equal_a_fresh_evaluation(
        objects: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A visible fraction depends on the two creatures, the walls, the terrain and the
    options alone, and is kept per pair of creature objects for later snapshots of the
    same walls (`rulesets.kept`). Move after move, the pairs a move asks for equal a fresh
    evaluation with nothing kept, and fewer fractions are measured (the pairs recomputed
    because the mover stood in their way are read back); other walls or other options
    start afresh. With room for few creature objects the table starts again."""
    from rulesets import forget_kept
    from rulesets import kept as kept_mod

    measured: list[int] = []
    real = CornerEngine.measure_visible_fractions

    def counting(self: CornerEngine, a: Any, *args: Any) -> Any:
        measured.append(len(a))
        return real(self, a, *args)

    monkeypatch.setattr(CornerEngine, "measure_visible_fractions", counting)
    monkeypatch.setattr(kept_mod, "OBJECTS", objects)
    geom = _scene(40, 300, 1, True)
    for options in (Pf1Options(), Pf1Options(big_creatures_ranged=True,
                                             low_obstacle_range_from="target")):
        forget_kept()
        Pf1().evaluate(geom, options)
        current, warm_measured, cold_measured = moves_warm_and_cold(
            Pf1(), geom, options, measured, 8, lambda m: 7 * m + 3, assert_same)
        if objects > 1_000:
            assert warm_measured < cold_measured, (warm_measured, cold_measured)
        else:
            assert warm_measured <= cold_measured, (warm_measured, cold_measured)
        # The same creature objects under other walls (every door shut, then no band) or
        # other options: a third of the attackers against every target.
        ids = [c.id for c in current.creatures]
        some = [(ids[a], ids[t]) for a in range(0, len(ids), 3) for t in range(len(ids))
                if a != t]
        for walls in (tuple(replace(w, active=True) for w in current.walls),
                      tuple(replace(w, top=None, bottom=None) for w in current.walls)):
            changed = replace(current, walls=walls)
            assert_same(Pf1().evaluate(changed, options, some),
                        Pf1().reference(changed, options, some))
        other = Pf1Options(low_obstacle_range_from="attacker"
                           if options.low_obstacle_range_from == "target" else "target")
        assert_same(Pf1().evaluate(current, other, some), Pf1().reference(current, other, some))


def test_pf1_measures_visible_fractions_in_one_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The full matrix measures no visible fraction pair by pair (before: one Shapely
    union per corner of every pair at cover) and makes one batch of all of them."""
    one_by_one: list[int] = []
    batches: list[int] = []
    single = CornerEngine.visible_fraction
    batch = CornerEngine.visible_fractions

    def counting_single(self: CornerEngine, *args: Any) -> float:
        one_by_one.append(1)
        return single(self, *args)

    def counting_batch(self: CornerEngine, a: Any, *args: Any) -> Any:
        batches.append(len(a))
        return batch(self, a, *args)

    monkeypatch.setattr(CornerEngine, "visible_fraction", counting_single)
    monkeypatch.setattr(CornerEngine, "visible_fractions", counting_batch)
    anns = Pf1().evaluate(_scene(30, 200, 1, False), Pf1Options())
    assert any(a.visible is not None for a in anns)
    assert not one_by_one
    assert len(batches) == 1 and batches[0] > 20


# -- realms -----------------------------------------------------------------------------------

def _realms_same(geom: SceneGeom, options: RealmsOptions, **kw: Any) -> None:
    realms._MEASURES.clear()
    fast = Realms().evaluate(geom, options, **kw)
    assert_same(fast, Realms().reference(geom, options, **kw))


@pytest.mark.parametrize("dressed", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_realms_equals_its_reference_on_benchmark_scenes(seed: int, dressed: bool) -> None:
    geom = _scene(30, 200, seed, dressed)
    _realms_same(geom, RealmsOptions())
    _realms_same(geom, RealmsOptions(low_cover_near_attacker=True))


def test_realms_visible_fraction_is_each_pairs_own() -> None:
    """Each annotation's `visible` is 1 minus its own pair's covered fraction, measured
    pair by pair (the reference's measure): the annotations loop shares outcomes between
    pairs of one degree, never their fractions. The reference runs the same loop, so the
    equality tests above cannot tell."""
    geom = _scene(30, 200, 1, True)
    options = RealmsOptions()
    realms._MEASURES.clear()
    anns = Realms().evaluate(geom, options)
    ctx = realms.RealmsContext(geom, options, reference=True)
    seen: set[tuple[Any, float | None]] = set()
    for ann in anns:
        m = ctx.best_measure(ctx.index[ann.attacker], ctx.index[ann.target], named=False)
        assert ann.visible == round(1.0 - m.covered, 6), ann
        seen.add((ann.cover, ann.visible))
    # Pairs of one degree with different fractions, so a fraction shared by degree shows.
    assert len(seen) > len({cover for cover, _ in seen}) + 3


@pytest.mark.parametrize("kind", HEX_KINDS)
def test_realms_equals_its_reference_on_hex_layouts(kind: Any) -> None:
    _realms_same(on_hex(_scene(24, 150, 2, True), kind, 2), RealmsOptions())


@pytest.mark.parametrize("kind", [None, *HEX_KINDS])
def test_realms_sight_blocked_is_every_line_stopped(kind: Any) -> None:
    """`sight_blocked` (a pair whose every line from its viewpoint may be stopped goes to
    the exact line of effect) is, per pair, whether each line from the viewpoint to the
    target's centre and to every corner of each of its spaces crosses a wall that can
    stop it or two limited walls: here each line's crossings are listed one by one. A
    pair it wrongly calls blocked would only be searched for nothing, so the equality
    tests cannot tell it from an exact one."""
    rng = np.random.default_rng(7)
    geom = _scene(30, 200, 4, True)
    # A third of the walls limited, some one way.
    walls = tuple(replace(w, limited=bool(rng.random() < 0.33),
                          direction=w.direction if rng.random() < 0.8 else Direction.LEFT)
                  for w in geom.walls)
    geom = replace(geom, walls=walls)
    if kind is not None:
        geom = on_hex(geom, kind, 4)
    ctx = realms.RealmsContext(geom, RealmsOptions())
    n = len(geom.creatures)
    pairs = np.array([(a, t) for a in range(n) for t in range(n) if a != t], dtype=np.intp)
    origins = np.array([ctx.viewpoints[a][-1] for a in pairs[:, 0]], dtype=np.float64)
    got = ctx.sight_blocked(pairs, origins)
    blk = openings.blockers(ctx.tracer)
    spaces = ctx.loe_spaces
    want = np.zeros(len(pairs), dtype=bool)
    by_limited = np.zeros(len(pairs), dtype=bool)
    for k, (_, t) in enumerate(pairs.tolist()):
        rings = spaces.rings[spaces.first[t]:spaces.first[t] + spaces.count[t]]
        ends = np.concatenate([np.array([ctx.centres[t]], dtype=np.float64),
                               rings.reshape(-1, 2)])
        line, wall = kernel.segments_cross_walls(np.repeat(origins[k:k + 1], len(ends), 0),
                                                 ends, blk.xy)
        solid = np.bincount(line[~blk.limited[wall]], minlength=len(ends))
        limited = np.bincount(line[blk.limited[wall]], minlength=len(ends))
        want[k] = bool(((solid > 0) | (limited >= 2)).all())
        by_limited[k] = want[k] and not (solid > 0).all()
    assert (got == want).all(), np.flatnonzero(got != want)
    # Both answers occur, and some pairs are blocked only where two limited walls are.
    assert 0 < want.sum() < len(want)
    assert by_limited.any()


def test_realms_equals_its_reference_on_subsets_and_with_lines() -> None:
    geom = _scene(24, 150, 3, True)
    ids = [c.id for c in geom.creatures]
    pairs = [(ids[a], ids[t]) for a in range(0, 24, 4) for t in range(24) if a != t]
    _realms_same(geom, RealmsOptions(), pairs=pairs)
    _realms_same(geom, RealmsOptions(), pairs=pairs, lines=True)
    # Measured without names first, then asked for lines: the names are measured then.
    realms._MEASURES.clear()
    Realms().evaluate(geom, RealmsOptions(), pairs)
    assert_same(Realms().evaluate(geom, RealmsOptions(), pairs, lines=True),
                Realms().reference(geom, RealmsOptions(), pairs, lines=True))


def test_realms_lines_are_each_pairs_measure() -> None:
    """With lines, each annotation carries one line: from the viewpoint its pair was
    measured from to the target's centre, blocked exactly when there is no line of
    effect, naming the walls and regions that cover the target and the regions that
    obscure the attack. The reference builds its lines the same way, so the equality
    tests above cannot tell."""
    geom = _scene(24, 150, 3, True)
    # Fog over the middle of the map, so that some lines are obscured.
    xs, ys = [c.x for c in geom.creatures], [c.y for c in geom.creatures]
    x0, x1 = min(xs) + (max(xs) - min(xs)) / 3, max(xs) - (max(xs) - min(xs)) / 3
    y0, y1 = min(ys) + (max(ys) - min(ys)) / 3, max(ys) - (max(ys) - min(ys)) / 3
    fog = RegionGeom("fog", RegionKind.OBSCURING, ((x0, y0), (x1, y0), (x1, y1), (x0, y1)))
    geom = replace(geom, regions=(*geom.regions, fog))
    options = RealmsOptions()
    realms._MEASURES.clear()
    anns = Realms().evaluate(geom, options, lines=True)
    ctx = realms.RealmsContext(geom, options, reference=True)
    blocked, open_, obscured = 0, 0, 0
    for ann in anns:
        a, t = ctx.index[ann.attacker], ctx.index[ann.target]
        m = ctx.best_measure(a, t)
        assert ann.lines is not None and len(ann.lines) == 1, ann
        (line,) = ann.lines
        penalty = ctx.obscurement(ctx.centres[a], ctx.centres[t])
        assert (line.start, line.end) == (m.origin, ctx.centres[t]), ann
        assert line.blocked is (not ann.loe), ann
        assert line.walls == m.walls and line.tokens == (), ann
        assert line.regions == tuple(sorted({*m.regions, *penalty[1]})), ann
        blocked += line.blocked
        open_ += not line.blocked
        obscured += bool(set(penalty[1]) - set(m.regions))
    # Both kinds of line, and regions named for obscuring alone, so each check can fail.
    assert blocked and open_ and obscured, (blocked, open_, obscured)


def test_realms_measures_covered_fractions_in_one_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The full matrix measures no pair on its own (before: `measure`, one Shapely overlay
    per viewpoint, for every pair)."""
    calls: list[int] = []
    measure = realms.RealmsContext.measure

    def counting(self: realms.RealmsContext, *args: Any, **kw: Any) -> Any:
        calls.append(1)
        return measure(self, *args, **kw)

    monkeypatch.setattr(realms.RealmsContext, "measure", counting)
    realms._MEASURES.clear()
    anns = Realms().evaluate(_scene(30, 200, 1, False), RealmsOptions())
    assert any(a.visible is not None and a.visible < 1 for a in anns)
    assert not calls


def _every_pair(seed: int, dressed: bool, kind: Any
                ) -> tuple[SceneGeom, realms.RealmsContext, IntArray]:
    """A scene of 24 tokens among 150 walls (on a hex layout unless `kind` is None), a
    reference context of it, and every ordered pair of its creatures (attacker, target)."""
    geom = _scene(24, 150, seed, dressed)
    if kind is not None:
        geom = on_hex(geom, kind, seed)
    ctx = realms.RealmsContext(geom, RealmsOptions(), reference=True)
    n = len(ctx.cs)
    a, t = (v.ravel() for v in np.meshgrid(np.arange(n), np.arange(n)))
    return geom, ctx, np.column_stack([a[a != t], t[a != t]])


@pytest.mark.parametrize("kind", [None, *HEX_KINDS])
def test_realms_sealed_pairs_are_at_full_cover_from_every_viewpoint(kind: Any) -> None:
    """Pairs one plain wall (or a run) separates are not measured: each must be at full
    cover, measured one by one from every viewpoint of the attacker, with no line of effect
    at all; their rings hold the whole body, border included; and most of a scene of rooms'
    pairs are found so (the reason for the step)."""
    geom, ctx, pairs = _every_pair(1, False, kind)
    sealed = ctx.sealed(pairs)
    assert sealed.mean() > 0.5, sealed.mean()
    rings, corners = ctx.seal_rings
    for k in range(len(ctx.cs)):
        assert shapely.covers(shapely.Polygon(rings[k, :corners[k]]), ctx.bodies[k]), k
    shut = pairs[sealed]
    assert not openings.pairs_line_of_effect(ctx.tracer, ctx.loe_spaces, shut[:, 0],
                                             shut[:, 1]).any()
    for p, q in shut[::7].tolist():
        for x, y in ctx.viewpoints[p]:
            assert ctx.measure((float(x), float(y)), q, attacker=p).covered >= realms._FULL
    # The batch then reads them back at full cover with nothing left to see.
    realms._MEASURES.clear()
    fast = realms.RealmsContext(geom, RealmsOptions())
    fast.measure_pairs([(int(p), int(q)) for p, q in shut.tolist()])
    assert all(fast.best_measure(int(p), int(q), named=False).covered == 1.0
               for p, q in shut.tolist())


@pytest.mark.parametrize("kind", [None, HEX_KINDS[0], HEX_KINDS[3]])
def test_realms_pairs_a_banded_wall_seals_are_at_full_cover_from_every_viewpoint(
        kind: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wall plain but for a height band holding both creatures' whole vertical reach
    seals them as a plain wall does (`openings.banded_walk`, for every call here): from
    every viewpoint of the attacker the target is at full cover, measured one by one
    (the band casts a shadow of full weight), with no line of effect; and the batch gives
    the reference's answers."""
    monkeypatch.setattr(openings, "BANDED_MIN_PAIRS", 0)
    geom, ctx, pairs = _every_pair(2, True, kind)
    sealed = ctx.sealed(pairs)
    monkeypatch.setattr(openings, "BANDED_MIN_PAIRS", 1 << 30)
    plain_only = realms.RealmsContext(geom, RealmsOptions(), reference=True).sealed(pairs)
    assert (plain_only <= sealed).all()
    by_band = pairs[sealed & ~plain_only]
    assert len(by_band) > 0
    assert not openings.pairs_line_of_effect(ctx.tracer, ctx.loe_spaces, by_band[:, 0],
                                             by_band[:, 1]).any()
    for p, q in by_band.tolist():
        for x, y in ctx.viewpoints[p]:
            assert ctx.measure((float(x), float(y)), q, attacker=p).covered >= realms._FULL
    monkeypatch.setattr(openings, "BANDED_MIN_PAIRS", 0)
    _realms_same(geom, RealmsOptions())


@pytest.mark.parametrize("kind", HEX_KINDS)
def test_realms_dark_viewpoints_are_at_full_cover_and_left_out_of_the_batch(
        kind: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A viewpoint `hidden_from_viewpoints` finds dark sees nothing of its target,
    measured one by one; the batch (`covered_many`) measures only the others of a pair
    left, works out no shadows for a cell wholly behind one plain wall, and gives what
    measuring every viewpoint gives. (On hex grids, where creatures of several hexes have
    a viewpoint and a cell in each.)"""
    geom = on_hex(_scene(24, 150, 1, False), kind, 1)
    ctx = realms.RealmsContext(geom, RealmsOptions(), reference=True)
    n = len(ctx.cs)
    a, t = (v.ravel() for v in np.meshgrid(np.arange(n), np.arange(n)))
    pairs = np.column_stack([a[a != t], t[a != t]])
    pairs = pairs[~ctx.sealed(pairs)]
    hidden, dark = ctx.hidden_from_viewpoints(pairs)
    counts = ctx.viewpoints.view_count[pairs[:, 0]]
    of_view = np.repeat(np.arange(len(pairs)), counts)
    views = ctx.viewpoints.views[np.repeat(ctx.viewpoints.view_start[pairs[:, 0]], counts)
                                 + kernel.within_runs(counts)]
    # Some pairs left have dark viewpoints beside others.
    mixed = np.flatnonzero(~hidden & (np.bincount(of_view, weights=dark,
                                                  minlength=len(pairs)) > 0))
    assert len(mixed) >= 3, len(mixed)
    for q in np.flatnonzero(dark)[::3].tolist():
        p, target = (int(v) for v in pairs[of_view[q]])
        x, y = views[q]
        assert ctx.measure((float(x), float(y)), target, attacker=p).covered == 1.0
    left = [(int(p), int(q)) for p, q in pairs[~hidden].tolist()]
    # One Measure made per viewpoint measured (and none else here: no pair is sealed or
    # hidden from every viewpoint).
    made: list[int] = []
    made_one = realms.Measure

    def counting(*args: Any, **kw: Any) -> Any:
        made.append(1)
        return made_one(*args, **kw)

    # The cells whose shadows are worked out: those of a target of several hexes wholly
    # behind one plain wall from their viewpoint are not.
    cells: list[int] = []

    def counting_cells(p: Any, *args: Any) -> Any:
        cells.append(len(p))
        return hidden_areas(p, *args)

    monkeypatch.setattr(realms, "Measure", counting)
    monkeypatch.setattr(realms, "hidden_areas", counting_cells)
    realms._MEASURES.clear()
    fast = realms.RealmsContext(geom, RealmsOptions())
    fast.measure_pairs(left)
    monkeypatch.undo()
    assert len(made) == int((~dark[~hidden[of_view]]).sum()) < len(dark[~hidden[of_view]])
    seen = ~dark & ~hidden[of_view]
    (asked,) = cells
    assert asked < int(fast._cell_count[pairs[of_view[seen], 1]].sum())
    for p, q in left:
        want = min(ctx.measure((float(x), float(y)), q, attacker=p).covered
                   for x, y in ctx.viewpoints[p])
        assert fast.best_measure(p, q, named=False).covered == pytest.approx(want, abs=1e-9)


# -- random small scenes ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["pf1", "realms"])
@PROPS
@given(doc=mounted_scene_docs(), lines=st.booleans())
def test_fast_equals_reference_on_random_scenes(name: str, doc: Doc, lines: bool) -> None:
    scene = load(doc, ruleset=name)
    ruleset = REGISTRY.get(name)
    realms._MEASURES.clear()
    fast = ruleset.evaluate(scene.geometry, scene.options, lines=lines)
    assert isinstance(ruleset, Pf1 | Realms)
    assert_same(fast, ruleset.reference(scene.geometry, scene.options, lines=lines))


@PROPS
@given(doc=hex_scene_docs())
def test_realms_fast_equals_reference_on_random_hex_scenes(doc: Doc) -> None:
    scene = load(doc, ruleset="realms")
    realms._MEASURES.clear()
    assert_same(Realms().evaluate(scene.geometry, scene.options),
                Realms().reference(scene.geometry, scene.options))



Batch = tuple[np.ndarray, list[np.ndarray], np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _batch(cases: list[tuple[Any, ...]]) -> Batch:
    """Shading cases as one batch of requests: viewpoints, bodies (padded to one number of
    corners), and each segment's request, ends and weight."""
    bodies = [c[1] for c in cases]
    if len({len(b) for b in bodies}) > 1:
        bodies = [b if len(b) == 6 else np.concatenate([b, b[-1:], b[-1:]]) for b in bodies]
    seg_req = np.array([k for k, c in enumerate(cases) for _ in c[2]], dtype=np.intp)
    a = np.array([s[0] for c in cases for s in c[2]]).reshape(-1, 2)
    b = np.array([s[1] for c in cases for s in c[2]]).reshape(-1, 2)
    w = np.array([s[2] for c in cases for s in c[2]])
    return np.stack([c[0] for c in cases]), bodies, seg_req, a, b, w


def _each_its_own(batch: Batch, together: np.ndarray, levels: np.ndarray,
                  rel: float) -> None:
    """Every request of the batch got what it gets alone."""
    p, bodies, seg_req, a, b, w = batch
    for k in range(len(p)):
        sel = seg_req == k
        alone = hidden_areas(p[k:k + 1], bodies[k][None], np.zeros(int(sel.sum()), dtype=np.intp),
                             a[sel], b[sel], w[sel], levels)[0]
        assert together[k] == pytest.approx(alone, abs=rel * shapely.Polygon(bodies[k]).area)


@PROPS
@given(st.lists(shading_cases(), min_size=1, max_size=8), st.booleans())
def test_hidden_areas_of_many_requests_are_each_ones_own(cases: list[tuple[Any, ...]],
                                                        radix: bool) -> None:
    """Requests computed together (their breakpoints sorted by request and angle, each
    span's intervals found by a search in its own request's run) give each request what it
    gives alone, whichever way the breakpoints are sorted."""
    from rulesets import shadows

    levels = np.array([1.0, 0.5])
    batch = _batch(cases)
    p, bodies, seg_req, a, b, w = batch
    keep = shadows._RADIX_REQUESTS
    try:
        shadows._RADIX_REQUESTS = 1 << 16 if radix else 0
        together = hidden_areas(p, np.stack(bodies), seg_req, a, b, w, levels)
    finally:
        shadows._RADIX_REQUESTS = keep
    _each_its_own(batch, together, levels, 1e-9)


@PROPS
@given(st.lists(shading_cases(), min_size=1, max_size=6), st.integers(0, 4))
def test_requests_past_the_segment_cap_are_united_by_polygons(
        cases: list[tuple[Any, ...]], cap: int) -> None:
    """A request with more than MAX_SEGMENTS segments (a field of thousands of short walls
    near one sight) is added up by uniting its shadows with GEOS (the largest first, until
    they hide the whole body), the others of the same batch by their breakpoints: each
    gets what the breakpoints give it alone."""
    from rulesets import shadows

    levels = np.array([1.0, 0.9, 0.5, 0.25])
    batch = _batch(cases)
    p, bodies, seg_req, a, b, w = batch
    keep = shadows.MAX_SEGMENTS, shadows._UNION_CHUNK
    try:
        # Shadows united one at a time, so that a request's union takes several steps.
        shadows.MAX_SEGMENTS, shadows._UNION_CHUNK = cap, 1
        together = hidden_areas(p, np.stack(bodies), seg_req, a, b, w, levels)
    finally:
        shadows.MAX_SEGMENTS, shadows._UNION_CHUNK = keep
    _each_its_own(batch, together, levels, 1e-7)


def test_realms_vicinities_measured_in_blocks_are_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Who stands near each target (friendly fire at three-quarters cover) is measured a
    block of targets at a time, so that a thousand targets of a thousand creatures do not
    hold one huge array: blocks of one target, or of a few, read what one block reads."""
    geom = on_hex(_scene(24, 150, 2, True), HEX_KINDS[0], 2)
    n = len(geom.creatures)
    a, t = (v.ravel() for v in np.meshgrid(np.arange(n), np.arange(n)))
    a, t = a[a != t], t[a != t]
    want = realms.RealmsContext(geom, RealmsOptions()).others_near_many(a, t)
    assert want.any() and not want.all()
    for block in (1, n + 1, 3 * n - 1):
        monkeypatch.setattr(realms, "FEET_BLOCK", block)
        ctx = realms.RealmsContext(geom, RealmsOptions())
        assert (ctx.others_near_many(a, t) == want).all(), block
        assert [ctx.feet(int(p), int(q)) for p, q in zip(a[:40], t[:40], strict=True)] == [
            realms.RealmsContext(geom, RealmsOptions()).feet(int(p), int(q))
            for p, q in zip(a[:40], t[:40], strict=True)]


@pytest.mark.parametrize("kind", [None, *HEX_KINDS])
@given(st.lists(st.sampled_from([-2.0, -1.0, 0.0, 0.25, 0.5, 1.0, 1.5, 3.0]), min_size=1,
                max_size=40), st.integers(0, 2**31))
def test_realms_view_hulls_are_shapelys_hulls(kind: Any, along: list[float],
                                              seed: int) -> None:
    """The hull of a viewpoint and its target's body, built from the target's hull ring
    (`rulesets.shadows.hulls` of `seal_rings`, as realms' `covered_many` builds it), is
    the region Shapely's hull of the point and every cell corner is (up to rounding):
    from each creature's viewpoints to random targets, and from points on the rings'
    corners, on their sides, inside them, and on their sides' lines beyond the corners."""
    geom = dress(generate(24, 120, 5).geom, 5)
    if kind is not None:
        geom = on_hex(geom, kind, 5)
    ctx = realms.RealmsContext(geom, RealmsOptions())
    ctx._prepared()
    rng = np.random.default_rng(seed)
    n = len(ctx.cs)
    views = ctx._shapes.views
    rings, counts = ctx.seal_rings
    t_side = rng.integers(0, n, len(along))
    corner = rng.integers(0, counts[t_side])
    nxt = np.where(corner + 1 < counts[t_side], corner + 1, 0)
    a, b = rings[t_side, corner], rings[t_side, nxt]
    inside = kernel.over_points(np.add, rings[t_side]) / rings.shape[1]
    p = np.concatenate([views, a + (b - a) * np.array(along)[:, None], inside])
    t = np.concatenate([rng.integers(0, n, len(views)), t_side, t_side])
    got = hulls(p, rings[t], counts[t])
    cells = [ctx._cells[ctx._cell_start[k]:ctx._cell_start[k] + ctx._cell_count[k]]
             .reshape(-1, 2) for k in range(n)]
    want = shapely.convex_hull(shapely.multipoints(
        np.concatenate([np.concatenate([cells[k], q[None]])
                        for k, q in zip(t, p, strict=True)]),
        indices=np.repeat(np.arange(len(p)), [len(cells[k]) + 1 for k in t])))
    # The same regions, up to rounding where a point lies on a side's line (as the hex
    # lattice puts many viewpoints): a sliver a few ulps wide at most.
    differ = shapely.area(shapely.symmetric_difference(got, want))
    assert (differ <= 1e-9 * shapely.area(want)).all(), differ.max()
    assert (shapely.hausdorff_distance(got, want) <= 1e-9).all()


@given(st.lists(st.tuples(st.integers(-20, 60), st.integers(-20, 60),
                          st.sampled_from([0, 1, 25, 50, 100, 250]),
                          st.sampled_from([0, 1, 50, 100, 300]),
                          st.floats(-3000, 9000), st.floats(-3000, 9000)),
                min_size=1, max_size=40), st.booleans())
def test_hulls_of_boxes_and_points_are_shapelys(rows: list[tuple[Any, ...]],
                                                on_grid: bool) -> None:
    """`hulls` of a viewpoint and a box (pf1's visible fraction: a box's corners either way
    round, boxes of no width or height too) is Shapely's hull of the five points: the
    same region, viewpoints on the grid's lines (the box's side lines) included."""
    from geometry.square import corners_many

    xy = np.array(rows, dtype=np.float64)
    boxes = np.column_stack([xy[:, 0] * 50, xy[:, 1] * 50, xy[:, 0] * 50 + xy[:, 2],
                             xy[:, 1] * 50 + xy[:, 3]])
    p = np.round(xy[:, 4:6] / 50) * 50 if on_grid else xy[:, 4:6]
    corners = corners_many(boxes)
    corners[1::2] = corners[1::2, ::-1]  # every other one clockwise
    want = shapely.convex_hull(shapely.multipoints(np.concatenate([corners, p[:, None]], 1)))
    assert shapely.equals(hulls(p, corners), want).all()


def _meeting_both_ways(p: np.ndarray, corners: np.ndarray, counts: np.ndarray | None,
                       xy: np.ndarray) -> None:
    """`meeting` by arithmetic (with `wedges`) finds exactly the walls GEOS's prepared
    query finds, in the same order."""
    tree = shapely.STRtree(shapely.linestrings(xy.reshape(-1, 2, 2)))
    hull = hulls(p, corners, counts)
    want = meeting(tree, hull)
    got = meeting(tree, hull, (p, corners, xy), counts)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (
        sorted(set(zip(*got, strict=True)) ^ set(zip(*want, strict=True)))[:5])


@given(st.lists(st.tuples(st.integers(-4, 8), st.integers(-4, 8), st.sampled_from([0, 1, 2]),
                          st.sampled_from([0, 1, 2]), st.integers(-8, 16),
                          st.integers(-8, 16)), min_size=1, max_size=12),
       st.lists(st.tuples(st.integers(-8, 16), st.integers(-8, 16), st.integers(-8, 16),
                          st.integers(-8, 16)), min_size=1, max_size=30),
       st.sampled_from([1.0, 0.5, 50.0, 1 / 3]))
def test_walls_meeting_a_sight_on_the_grid_are_geoss(rows: list[tuple[int, ...]],
                                                     walls: list[tuple[int, ...]],
                                                     scale: float) -> None:
    """The walls meeting the hull of a viewpoint and a box, found by separating axes
    (`meeting` with `wedges`), are GEOS's, where everything stands on a grid: walls along
    the boxes' sides, through their corners, ending on them, touching the hull's sides
    at a point, viewpoints on the sides' lines and on the corners, boxes of no width,
    either way round."""
    from geometry.square import corners_many

    r = np.array(rows, dtype=np.float64) * scale
    boxes = np.column_stack([r[:, 0], r[:, 1], r[:, 0] + r[:, 2], r[:, 1] + r[:, 3]])
    corners = corners_many(boxes)
    corners[1::2] = corners[1::2, ::-1]
    _meeting_both_ways(r[:, 4:6], corners, None, np.array(walls, dtype=np.float64) * scale)


@given(st.lists(st.tuples(*[_coord(-100, 300)] * 6), min_size=1, max_size=10),
       st.lists(st.tuples(*[_coord(-100, 300)] * 4), min_size=1, max_size=30),
       st.integers(3, 6), st.integers(0, 2**31))
def test_walls_meeting_a_sight_anywhere_are_geoss(rows: list[tuple[float, ...]],
                                                  walls: list[tuple[float, ...]],
                                                  sides: int, seed: int) -> None:
    """The same off the grid: viewpoints and walls anywhere, bodies regular rings of 3 to
    6 corners (hexes among them) padded as realms pads its hull rings, some walls through
    the rings' corners and along their sides."""
    r = np.array(rows, dtype=np.float64)
    rng = np.random.default_rng(seed)
    angle = np.arange(sides) * 2 * np.pi / sides + r[:, 4:5] / 100
    radius = np.abs(r[:, 5:6]) / 4 + 1
    ring = np.stack([r[:, 0:1] + radius * np.cos(angle), r[:, 1:2] + radius * np.sin(angle)],
                    axis=2)
    corners = np.concatenate([ring, np.repeat(ring[:, -1:], 2, axis=1)], axis=1)
    xy = np.array(walls, dtype=np.float64)
    k = rng.integers(0, sides, len(r))
    along = np.concatenate([ring[np.arange(len(r)), k],
                            ring[np.arange(len(r)), (k + 1) % sides]], axis=1)
    through = np.concatenate([ring[np.arange(len(r)), k],
                              xy[np.arange(len(r)) % len(xy), 2:4]], axis=1)
    _meeting_both_ways(r[:, 2:4], corners, np.full(len(r), sides),
                       np.concatenate([xy, along, through]))


@pytest.mark.parametrize("kind", [None, *HEX_KINDS])
def test_walls_meeting_realms_sights_are_geoss(kind: Any) -> None:
    """On a dressed benchmark scene (square and hex layouts): every viewpoint towards
    every target, against the scene's walls, as realms' `covered_many` asks."""
    geom = dress(generate(30, 200, 3).geom, 3)
    if kind is not None:
        geom = on_hex(geom, kind, 3)
    ctx = realms.RealmsContext(geom, RealmsOptions())
    views = ctx._shapes.views
    rings, counts = ctx.seal_rings
    v = np.repeat(np.arange(len(views)), len(rings))
    t = np.tile(np.arange(len(rings)), len(views))
    _meeting_both_ways(views[v], rings[t], counts[t], ctx.tracer.wall_xy)


@PROPS
@given(st.lists(st.lists(st.tuples(st.integers(0, 23), st.integers(-3, 3),
                                   st.sampled_from([None, 0.5, 1.0, 1.5, 2.0, 3.0])),
                         max_size=8), min_size=1, max_size=5))
def test_realms_bodies_and_viewpoints_patched_are_made_afresh(
        snapshots: list[list[tuple[int, int, float | None]]]) -> None:
    """A snapshot's bodies, centres and viewpoints on a square grid are patched from the
    last snapshot's where few creatures changed (a walking token's step): they equal those
    made afresh, to the last bit, through moves, resizes (a creature covering more or fewer
    squares moves every later creature's viewpoints), many creatures changed at once, and
    snapshots where none did."""
    geom = generate(24, 120, 7).geom
    options = RealmsOptions()
    size = geom.grid.size
    for changes in snapshots:
        cs = list(geom.creatures)
        for k, step, side in changes:
            c = cs[k]
            cs[k] = replace(c, x=c.x + step * size / 2, y=c.y - step * size / 3,
                            width=c.width if side is None else side,
                            height=c.height if side is None else side)
        geom = replace(geom, creatures=tuple(cs))
        got = realms.RealmsContext(geom, options)._shapes
        box = columns(geom.creatures, geom.grid).spaces
        want = realms._square_shapes(box, geom.creatures, size)
        assert shapely.equals_exact(got.bodies, want.bodies, tolerance=0).all()
        assert got.centres == want.centres
        assert np.array_equal(got.views, want.views)
        assert np.array_equal(got.view_start, want.view_start)
        assert np.array_equal(got.view_count, want.view_count)
