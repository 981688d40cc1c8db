"""Areas and pf1's partial-cover measure in three dimensions.

- template solids (geometry.templates.in_area_3d): with the creature's cube at the
  template's height the test is the flat one; a burst is a sphere, a cone a cone about its
  level axis, a ray a cylinder, a rect a box as high as its shorter side;
- the band stretches (geometry.vertical.band_stretches) are where band_meets holds along the
  way; a truncated shadow (rulesets.shadows.truncated_shadows) holds exactly the points whose
  line from the corner crosses the wall within the stretch;
- Hypothesis on random scenes: raising every token, every wall band and the template by the
  same amount changes no area hit in any ruleset, and creatures all at the template's height
  get the flat hits; pf1's measured share (cover and `visible`) is unchanged by raising
  everything, and with every token at one elevation and every band reaching below their feet
  it is the flat map's.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest
import shapely
from hypothesis import assume, given
from hypothesis import strategies as st

from geometry.model import CreatureGeom, Grid, GridKind, Size
from geometry.templates import Template, TemplateKind, in_area_3d, inside, shape
from geometry.vertical import band_meets, band_stretches, sheet
from rulesets import REGISTRY
from rulesets.base import AreaHit, AttackMode
from rulesets.shadows import truncated_shadows
from tests.test_properties import PROPS, Doc, evaluate, load, scene_docs
from tests.test_properties_3d import _raised, banded_scene_docs

GRID = Grid(GridKind.SQUARE, 100.0, 5.0, "ft")
RULESETS = REGISTRY.names()


def creature(x: float, y: float, elevation: float = 0.0, squares: float = 1) -> CreatureGeom:
    size = Size.MEDIUM if squares == 1 else Size.LARGE
    return CreatureGeom("c", x, y, squares, squares, size, 5.0, size.height, elevation, -1,
                        False)


def in3d(t: Template, c: CreatureGeom) -> bool:
    return in_area_3d(t, shape(t, GRID), c, GRID)


# -- template solids ------------------------------------------------------------------------

templates = st.builds(
    Template, st.sampled_from(list(TemplateKind)), st.integers(0, 20).map(lambda k: k * 50.0),
    st.integers(0, 20).map(lambda k: k * 50.0), st.sampled_from([5.0, 10.0, 15.0, 30.0]),
    st.integers(0, 23).map(lambda k: k * 15.0), st.sampled_from([53.13, 90.0]),
    st.sampled_from([None, 5.0, 15.0]), st.sampled_from([0.0, 10.0, -5.0]))


@given(t=templates, col=st.integers(0, 9), row=st.integers(0, 9), squares=st.sampled_from([1, 2]),
       below=st.sampled_from([0.0, 1.0, 2.5, 5.0]))
def test_a_cube_at_the_templates_height_is_tested_flat(t: Template, col: int, row: int,
                                                       squares: int, below: float) -> None:
    # The cube [elevation, elevation + side] holds the template's height (or, for a rect,
    # meets its box): the 3D test is the flat one.
    c = creature(col * 100.0, row * 100.0, t.elevation - below, squares)
    assert in3d(t, c) == inside(shape(t, GRID), c, GRID)


def test_a_burst_is_a_sphere() -> None:
    burst = Template(TemplateKind.CIRCLE, 500.0, 500.0, 20.0)
    # Square centre 12.75 ft across (255 px).
    assert in3d(burst, creature(700, 400))
    assert in3d(burst, creature(700, 400, elevation=15))  # 12.75 across, 15 up: 19.7 ft
    assert not in3d(burst, creature(700, 400, elevation=16))  # 16 up: 20.5 ft
    # Directly above the origin: in up to 20 ft, whatever the polygon's orientation.
    assert in3d(burst, creature(450, 450, elevation=19.5))
    assert not in3d(burst, creature(450, 450, elevation=20.5))
    # A burst high up reaches a creature below it whose cube top (5 ft) is 19.5 ft below
    # it, not one 20.5 ft below.
    def high(elevation: float) -> Template:
        return Template(TemplateKind.CIRCLE, 450.0, 450.0, 20.0, elevation=elevation)

    assert in3d(high(24.5), creature(400, 400))
    assert not in3d(high(25.5), creature(400, 400))


def test_a_cone_is_a_cone_about_its_level_axis() -> None:
    # 30 ft east from (500, 500) at 20 ft; a square centre 22.5 ft ahead on the axis.
    def cone(angle: float) -> Template:
        return Template(TemplateKind.CONE, 500.0, 500.0, 30.0, 0.0, angle, elevation=20.0)

    floor = creature(900, 450)  # cube top 15 ft below the axis: 33.7 degrees off it
    assert not in3d(cone(53.13), floor)
    assert in3d(cone(90.0), floor)
    assert in3d(cone(53.13), creature(900, 450, elevation=15))  # reaches the axis
    # Off to the side and below at once: 5 ft across, its cube's top 10 ft below the axis,
    # 22.5 ft ahead: 26.4 degrees off the axis, inside a 53.13-degree cone (26.57 each side),
    # outside a 52-degree one (26). Flat, it is 12.5 degrees off: inside both.
    side = creature(900, 350, elevation=5)
    off = math.degrees(math.atan2(math.hypot(5.0, 10.0), 22.5))
    assert 26.0 < off < 53.13 / 2
    assert in3d(cone(53.13), side)
    assert not in3d(cone(52.0), side)
    assert inside(shape(cone(52.0), GRID), side, GRID)


def test_a_ray_is_a_cylinder_and_a_rect_a_box() -> None:
    ray = Template(TemplateKind.RAY, 500.0, 550.0, 40.0, 0.0, width=5.0, elevation=10.0)
    assert not in3d(ray, creature(700, 500))  # cube 0-5: 5 ft below the axis, radius 2.5
    assert in3d(ray, creature(700, 500, elevation=7.5))
    assert in3d(ray, creature(700, 500, elevation=12.5))
    assert not in3d(ray, creature(700, 500, elevation=12.6))
    box = Template(TemplateKind.RECT, 500.0, 500.0, 15 * math.sqrt(2), 45.0, elevation=10.0)
    assert not in3d(box, creature(600, 600, elevation=4.9))  # box 10-25 ft
    assert in3d(box, creature(600, 600, elevation=5))  # its cube's top touches the box
    assert in3d(box, creature(600, 600, elevation=24.9))
    assert not in3d(box, creature(600, 600, elevation=25.1))


# -- band stretches and truncated shadows ---------------------------------------------------

heights = st.integers(-4, 8).map(lambda k: k * 2.5)


@given(bottom=st.one_of(st.none(), heights), top=st.one_of(st.none(), heights),
       ea=heights, ha=st.sampled_from([0.0, 3.0, 6.0]), et=heights,
       ht=st.sampled_from([3.0, 6.0, 12.0]), s=st.floats(0.0, 1.0))
def test_band_stretches_are_where_the_band_meets(bottom: float | None, top: float | None,
                                                 ea: float, ha: float, et: float, ht: float,
                                                 s: float) -> None:
    b = np.array([np.nan if bottom is None else bottom])
    t = np.array([np.nan if top is None else top])
    m0, m1, w0, w1 = band_stretches(b, t, ea, ha, et, ht)
    lo, hi = sheet(np.array([s]), np.array([ea]), np.array([ha]), np.array([et]),
                   np.array([ht]))
    meets, whole = band_meets(b, t, lo, hi)
    # Away from the stretches' ends (where strict and loose tests differ).
    for s0, s1, truth in ((m0, m1, meets), (w0, w1, whole)):
        assume(abs(s - s0[0]) > 1e-6 and abs(s - s1[0]) > 1e-6)
        assert bool(s0[0] < s < s1[0]) == bool(truth[0]), (s0, s1, lo, hi)


@given(p=st.tuples(st.integers(0, 10), st.integers(0, 10)),
       a=st.tuples(st.integers(0, 10), st.integers(0, 10)),
       b=st.tuples(st.integers(0, 10), st.integers(0, 10)),
       stretch=st.tuples(st.floats(0.0, 1.0), st.floats(0.05, 1.0)),
       q=st.tuples(st.floats(-30, 40), st.floats(-30, 40)))
def test_a_truncated_shadow_holds_the_points_crossing_within_the_stretch(
        p: tuple[int, int], a: tuple[int, int], b: tuple[int, int],
        stretch: tuple[float, float], q: tuple[float, float]) -> None:
    s0, s1 = min(stretch), max(stretch)
    assume(s1 - s0 > 1e-3 and a != b)
    pp, aa, bb, qq = (np.array(v, dtype=np.float64) for v in (p, a, b, q))
    cross = (bb[0] - aa[0]) * (pp[1] - aa[1]) - (bb[1] - aa[1]) * (pp[0] - aa[0])
    assume(abs(cross) > 1e-6)  # p not on the wall's line
    (poly,) = truncated_shadows(pp, aa[None, :], bb[None, :], np.array([s0]), np.array([s1]),
                                200.0)
    # Where the segment p-q crosses the wall's line, and whether within the wall.
    d, e = qq - pp, bb - aa
    den = d[0] * e[1] - d[1] * e[0]
    assume(abs(den) > 1e-6)
    s = ((aa[0] - pp[0]) * e[1] - (aa[1] - pp[1]) * e[0]) / den
    u = ((aa[0] - pp[0]) * d[1] - (aa[1] - pp[1]) * d[0]) / den
    assume(min(abs(s - s0), abs(s - s1), abs(u), abs(u - 1)) > 1e-3)
    expected = 0 < u < 1 and s0 < s < s1
    assume(float(shapely.distance(shapely.Point(qq), poly.boundary)) > 1e-6)
    assert bool(shapely.contains_xy(poly, qq[0], qq[1])) == expected


# -- properties: areas in every ruleset -----------------------------------------------------

def area_hits(doc: Doc, template: dict[str, Any], ruleset: str) -> list[AreaHit]:
    scene = load(doc, ruleset=ruleset)
    t = template
    grid = scene.geometry.grid
    tpl = Template(TemplateKind(t["t"]), t["x"], t["y"], t["distance"], t["direction"],
                   t["angle"], t.get("width"), grid.units_to_feet(t["elevation"]))
    return sorted(scene.ruleset.area_hits(scene.geometry, scene.options, tpl),
                  key=lambda h: h.target)


template_docs = st.fixed_dictionaries({
    "t": st.sampled_from(["circle", "cone", "rect", "ray"]),
    "x": st.integers(0, 20).map(lambda k: k * 50), "y": st.integers(0, 20).map(lambda k: k * 50),
    "distance": st.sampled_from([10, 15, 30]), "direction": st.integers(0, 7).map(lambda k: k * 45),
    "angle": st.sampled_from([53.13, 90]), "elevation": st.sampled_from([0, 5, 10, 20])})


@pytest.mark.parametrize("ruleset", RULESETS)
@PROPS
@given(doc=banded_scene_docs(), template=template_docs, by=st.sampled_from([5, 30, -15]))
def test_raising_everything_and_the_template_changes_no_area_hit(
        ruleset: str, doc: Doc, template: dict[str, Any], by: float) -> None:
    before = area_hits(doc, template, ruleset)
    after = area_hits(_raised(doc, by), {**template, "elevation": template["elevation"] + by},
                      ruleset)
    assert before == after


@pytest.mark.parametrize("ruleset", RULESETS)
@PROPS
@given(doc=scene_docs(), template=template_docs)
def test_all_at_the_templates_height_is_the_flat_area(ruleset: str, doc: Doc,
                                                      template: dict[str, Any]) -> None:
    flat = area_hits(doc, {**template, "elevation": 0}, ruleset)
    lifted = area_hits(_raised(doc, template["elevation"]), template, ruleset)
    assert flat == lifted


# -- properties: pf1's measured share ---------------------------------------------------------

def measured(doc: Doc) -> dict[Any, tuple[Any, float | None]]:
    anns = evaluate(doc, ruleset="pf1", modes=(AttackMode.RANGED,))
    return {k: (a.cover, a.visible) for k, a in anns.items()}


def same_measure(x: dict[Any, tuple[Any, float | None]],
                 y: dict[Any, tuple[Any, float | None]]) -> None:
    assert x.keys() == y.keys()
    for k in x:
        (cx, vx), (cy, vy) = x[k], y[k]
        assert cx == cy, (k, x[k], y[k])
        assert (vx is None) == (vy is None), (k, x[k], y[k])
        if vx is not None and vy is not None:
            assert vx == pytest.approx(vy, abs=1e-6), (k, x[k], y[k])


@PROPS
@given(doc=banded_scene_docs(), by=st.sampled_from([5, 40, -15]))
def test_pf1_share_unchanged_by_raising_everything(doc: Doc, by: float) -> None:
    same_measure(measured(doc), measured(_raised(doc, by)))


@PROPS
@given(doc=scene_docs(), at=st.sampled_from([5, 20]), reach_down=st.sampled_from([None, 0, 3]))
def test_pf1_share_on_one_level_is_the_flat_share(doc: Doc, at: float,
                                                  reach_down: float | None) -> None:
    # Flat: tokens at 0, walls at most topped. Lifted: tokens at `at`, every wall's band
    # reaching from at or below their feet to its top raised as much.
    lifted = copy.deepcopy(doc)
    for t in lifted["tokens"]:
        t["elevation"] = at
    for w in lifted["walls"]:
        band = w.setdefault("flags", {}).get("wall-height", {"top": None})
        top = band.get("top")
        w["flags"]["wall-height"] = {
            "bottom": None if reach_down is None else at - reach_down,
            "top": None if top is None else top + at}
    same_measure(measured(doc), measured(lifted))
