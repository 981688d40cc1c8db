"""Water geometry (geometry/water.py) and the aquatic layer (rulesets/aquatic.py), without
sockets: who is submerged, which 3D lines pass through water, and how the layer composes
with a ruleset's own annotations."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from geometry.model import CreatureGeom, Grid, GridKind, RegionGeom, RegionKind, SceneGeom, Size
from geometry.water import pair_segments, submerged, through_water
from rulesets.aquatic import TABLE, Situation, with_aquatic
from rulesets.base import Annotation, AttackMode, Degree, Flag, Modifier, ModKind, Stat

GRID = Grid(GridKind.SQUARE, 100, 5, "ft")
POND = ((0.0, 0.0), (1000.0, 0.0), (1000.0, 1000.0), (0.0, 1000.0))


def creature(cid: str, x: float, y: float, elevation: float = 0.0, size: Size = Size.MEDIUM,
             swim: bool = False) -> CreatureGeom:
    side = max(1.0, size.space / 5)
    return CreatureGeom(cid, x, y, side, side, size, size.reach, size.height, elevation, 1,
                        False, swim=swim)


def scene(*cs: CreatureGeom, surface: float | None = 10.0,
          underwater: bool = False) -> SceneGeom:
    water = () if surface is None else (RegionGeom("pond", RegionKind.WATER, POND, surface),)
    return SceneGeom(GRID, (), tuple(cs), (), water, underwater)


@pytest.mark.parametrize(("elevation", "surface", "expected"), [
    (0.0, 10.0, True),    # 6 ft tall under 10 ft of water
    (4.0, 10.0, True),    # top exactly at the surface: wholly under water
    (4.5, 10.0, False),   # head above the surface
    (0.0, 3.0, False),    # wading in 3 ft of water
    (-20.0, -10.0, True),  # a surface below the map's ground level still works
])
def test_submerged_means_wholly_below_the_surface(elevation: float, surface: float,
                                                  expected: bool) -> None:
    s = scene(creature("a", 300, 300, elevation), surface=surface)
    assert submerged(s).tolist() == [expected]


def test_submerged_needs_the_centre_inside_the_water() -> None:
    # Space 950..1050: centre at 1000, on the border (not inside); 850..950: inside.
    s = scene(creature("edge", 950, 300), creature("in", 850, 300), creature("out", 1100, 300))
    assert submerged(s).tolist() == [False, True, False]


def test_underwater_scene_submerges_everyone_everywhere() -> None:
    s = scene(creature("a", 5000, 5000, elevation=100), surface=None, underwater=True)
    assert submerged(s).tolist() == [True]
    starts, ends = np.array([[5000.0, 0, 100]]), np.array([[6000.0, 0, 100]])
    assert through_water(s, starts, ends).tolist() == [True]


def test_dry_scene_has_no_water() -> None:
    s = scene(creature("a", 0, 0), creature("b", 500, 0), surface=None)
    assert submerged(s).tolist() == [False, False]
    starts, ends = pair_segments(s, [(0, 1)])
    assert through_water(s, starts, ends).tolist() == [False]


def test_a_line_is_wet_only_where_it_runs_below_the_surface_inside_the_water() -> None:
    s = scene(surface=10.0)
    # From x=-1000 at z=20 down to x=2000 at z=-10: inside the pond (x 0..1000) z runs from
    # 10 down to 0, so it is below 10 from just inside the pond on.
    starts = np.array([[-1000.0, 500, 20], [-1000.0, 500, 40], [-500.0, 500, 0],
                       [-500.0, 1500, 0], [500.0, 500, 30]])
    ends = np.array([[2000.0, 500, -10], [2000.0, 500, 10], [-100.0, 500, 0],
                     [1500.0, 1500, 0], [500.0, 500, 5]])
    # 2nd: z inside the pond runs 33.3 -> 20, never below 10. 3rd: stops before the pond.
    # 4th: passes beside it. 5th: a vertical line dipping to 5 ft inside it.
    assert through_water(s, starts, ends).tolist() == [True, False, False, False, True]


def test_pair_segments_run_centre_to_centre_at_mid_height() -> None:
    s = scene(creature("a", 0, 0, elevation=2), creature("b", 300, 100, size=Size.LARGE))
    starts, ends = pair_segments(s, [(0, 1)])
    assert starts.tolist() == [[50.0, 50.0, 5.0]]
    assert ends.tolist() == [[400.0, 200.0, 6.0]]


def _bare(a: str, t: str, mode: AttackMode, flags: frozenset[Flag] = frozenset(),
          mods: tuple[Modifier, ...] = ()) -> Annotation:
    return Annotation(a, t, mode, True, Degree.NONE, mods, flags)


def test_off_guard_does_not_stack_with_off_guard_from_the_ruleset() -> None:
    s = scene(creature("a", 1200, 300), creature("t", 300, 300))
    flanked = Modifier(Stat.AC, -2, ModKind.CIRCUMSTANCE, "flanked: off-guard")
    (ann,) = with_aquatic(s, [_bare("a", "t", AttackMode.MELEE, frozenset({Flag.OFF_GUARD}),
                                    (flanked,))])
    assert [m for m in ann.modifiers if m.stat is Stat.AC] == [flanked]
    assert Flag.TARGET_SUBMERGED in ann.flags
    (plain,) = with_aquatic(s, [_bare("a", "t", AttackMode.MELEE)])
    assert [m.value for m in plain.modifiers if m.stat is Stat.AC] == [-2]


def test_layer_adds_exactly_the_table_rows() -> None:
    s = scene(creature("a", 300, 600), creature("t", 300, 300))
    (ann,) = with_aquatic(s, [_bare("a", "t", AttackMode.RANGED)])
    rows = (Situation.TARGET_WITHOUT_SWIM, Situation.TARGET_IN_WATER,
            Situation.TARGET_SUBMERGED, Situation.ATTACKER_SUBMERGED, Situation.THROUGH_WATER,
            Situation.RANGED_UNDERWATER)
    assert ann.modifiers == tuple(m for r in rows for m in TABLE[r][0])
    assert ann.flags == frozenset().union(*(TABLE[r][1] for r in rows))


def test_dry_scene_returns_the_same_annotations() -> None:
    s = scene(creature("a", 0, 0), creature("t", 500, 0), surface=None)
    anns = [_bare("a", "t", AttackMode.MELEE)]
    assert with_aquatic(s, anns)[0] is anns[0]
    s2 = replace(s, water=(RegionGeom("p", RegionKind.WATER, POND, 10.0),))
    moved = replace(s2, creatures=(creature("a", 5000, 0), creature("t", 5500, 0)))
    assert with_aquatic(moved, anns)[0] is anns[0]  # far from the water: untouched
