"""Water: which creatures are submerged, and which lines pass through water.

Rule of this module: pure, vectorised facts about a scene's bodies of water (polygons with a
surface elevation, `SceneGeom.water`) and its scene-wide `underwater` flag; heights are in
feet. Game rules (what being submerged means) live in `rulesets.aquatic`.

Conventions (docs/rulesets.md, "Aquatic combat"):
- A creature is submerged when the centre of its space lies inside a body of water and its
  whole height is at or below the surface (elevation + height <= surface): a Medium
  creature (6 ft) standing in 3 ft of water is not. In an underwater scene every creature is.
- A creature is in the water (swimming at the surface, or submerged) when it is submerged or
  afloat: the centre of its space inside a body of water, its feet below the surface and off
  the ground (elevation 0 is the ground, as everywhere in Covercast). Standing on the ground
  with its head above the surface it wades.
- A line is a 3D segment (x, y in pixels, z in feet); it passes through water when a part
  of it inside a water polygon lies strictly below that body's surface. Lines between two
  creatures run from centre to centre at mid-height (`pair_segments`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import shapely

from geometry.kernel import BoolArray, FloatArray
from geometry.model import SceneGeom
from geometry.square import creature_centre


def submerged(scene: SceneGeom) -> BoolArray:
    """Per creature (scene order): whether it is wholly under water."""
    n = len(scene.creatures)
    if scene.underwater:
        return np.ones(n, dtype=bool)
    out = np.zeros(n, dtype=bool)
    if n == 0 or not scene.water:
        return out
    # The centre of the space: on a hex grid Foundry's token centre.
    centres = np.array([creature_centre(c, scene.grid) for c in scene.creatures],
                       dtype=np.float64)
    cx, cy = centres[:, 0], centres[:, 1]
    top = np.array([c.elevation + c.tall for c in scene.creatures], dtype=np.float64)
    for body in scene.water:
        assert body.surface is not None
        inside = shapely.contains_xy(shapely.Polygon(body.points), cx, cy)
        out |= inside & (top <= body.surface)
    return out


def in_water(scene: SceneGeom) -> BoolArray:
    """Per creature (scene order): whether it is in the water, swimming at the surface or
    under it: submerged, or afloat (the centre of its space inside a body of water, its feet
    below the surface and off the ground, elevation not 0). A creature standing on the
    ground (elevation 0) with its head above the surface wades: it is not in the water."""
    under = submerged(scene)
    n = len(scene.creatures)
    if scene.underwater or n == 0 or not scene.water:
        return under
    centres = np.array([creature_centre(c, scene.grid) for c in scene.creatures],
                       dtype=np.float64)
    feet = np.array([c.elevation for c in scene.creatures], dtype=np.float64)
    out = under.copy()
    for body in scene.water:
        assert body.surface is not None
        inside = shapely.contains_xy(shapely.Polygon(body.points), centres[:, 0],
                                     centres[:, 1])
        out |= inside & (feet < body.surface) & (feet != 0)
    return out


def pair_segments(scene: SceneGeom, pairs: Sequence[tuple[int, int]]) -> tuple[FloatArray,
                                                                               FloatArray]:
    """3D attack lines for (attacker, target) creature indices: from the centre of the
    attacker's space at its mid-height to the target's, as (n, 3) start and end arrays."""
    mids = np.array([(*creature_centre(c, scene.grid), c.elevation + c.tall / 2)
                     for c in scene.creatures], dtype=np.float64).reshape(-1, 3)
    if not pairs:
        empty = np.zeros((0, 3), dtype=np.float64)
        return empty, empty
    idx = np.array(pairs, dtype=np.intp)
    return mids[idx[:, 0]], mids[idx[:, 1]]


def through_water(scene: SceneGeom, starts: FloatArray, ends: FloatArray) -> BoolArray:
    """Per 3D segment (n, 3) arrays: whether some part of it is under water. Vectorised per
    body of water (scenes hold few); the depth along a straight piece is linear, so it is
    lowest at one of the piece's ends, which are what Shapely's intersection returns."""
    n = len(starts)
    if scene.underwater:
        return np.ones(n, dtype=bool)
    out = np.zeros(n, dtype=bool)
    if n == 0 or not scene.water:
        return out
    d = ends[:, :2] - starts[:, :2]
    length2 = np.einsum("ij,ij->i", d, d)
    flat = length2 > 0
    lines = shapely.linestrings(np.stack([starts[:, :2], ends[:, :2]], axis=1)[flat])
    where = np.nonzero(flat)[0]
    low = np.minimum(starts[:, 2], ends[:, 2])
    for body in scene.water:
        assert body.surface is not None
        poly = shapely.Polygon(body.points)
        shapely.prepare(poly)
        # A vertical line (same x, y at both ends) is under water where it stands in it.
        vertical = ~flat & shapely.contains_xy(poly, starts[:, 0], starts[:, 1])
        out |= vertical & (low < body.surface)
        if not len(lines):
            continue
        pieces = shapely.intersection(lines, poly)
        coords, owner = shapely.get_coordinates(pieces, return_index=True)
        if not len(coords):
            continue
        k = where[owner]
        t = np.einsum("ij,ij->i", coords - starts[k, :2], d[k]) / length2[k]
        z = starts[k, 2] + np.clip(t, 0.0, 1.0) * (ends[k, 2] - starts[k, 2])
        np.logical_or.at(out, k[z < body.surface], True)
    return out
