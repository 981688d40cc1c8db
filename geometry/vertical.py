"""The third dimension of a sight line: where along it a wall or a creature is met, and how
high the line's sheet of sight is there.

Rule of this module: rulesets trace lines on the map (2D); each traced line between two
creatures stands for the vertical *sheet* of 3D lines between the two creatures' vertical
extents [elevation, elevation + tall] above its two ends. At a fraction s of the way from the
attacker the sheet spans [lo(s), hi(s)], both linear in s. An obstacle with a height band
[bottom, top] meets the line only where the band overlaps that span (touching its edge is not
meeting it, as a token corner on a wall is not crossing it); a band that spans it whole hides
every 3D line there. Everything is vectorised over hits; when no hit wall has a height band
and no creature stands at another elevation, nothing here changes the flat result.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from geometry.kernel import BoolArray, FloatArray, IntArray
from geometry.model import SceneGeom


def wall_crossing(starts: FloatArray, ends: FloatArray, walls: FloatArray) -> FloatArray:
    """Row-paired lines and walls that cross: the fraction of the way from the line's start
    to where it meets the wall's line."""
    px, py, qx, qy = starts[:, 0], starts[:, 1], ends[:, 0], ends[:, 1]
    ax, ay, bx, by = walls[:, 0], walls[:, 1], walls[:, 2], walls[:, 3]
    o3 = (bx - ax) * (py - ay) - (by - ay) * (px - ax)
    o4 = (bx - ax) * (qy - ay) - (by - ay) * (qx - ax)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(o3 == o4, 0.5, o3 / (o3 - o4))
    out: FloatArray = np.clip(s, 0.0, 1.0)
    return out


def box_passage(starts: FloatArray, ends: FloatArray,
                boxes: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Row-paired lines and boxes (x0, y0, x1, y1) they enter: the fractions of the way
    where the line enters and leaves the box."""
    lo = np.zeros(len(starts))
    hi = np.ones(len(starts))
    with np.errstate(divide="ignore", invalid="ignore"):
        for axis in (0, 1):
            p = starts[:, axis]
            d = ends[:, axis] - p
            ta, tb = (boxes[:, axis] - p) / d, (boxes[:, axis + 2] - p) / d
            moving = d != 0
            lo = np.where(moving, np.maximum(lo, np.minimum(ta, tb)), lo)
            hi = np.where(moving, np.minimum(hi, np.maximum(ta, tb)), hi)
    return np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)


def sheet(s: FloatArray, a_elev: FloatArray, a_tall: FloatArray, t_elev: FloatArray,
          t_tall: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The vertical span [lo, hi] (feet) of the sheet of sight between two creatures'
    vertical extents, a fraction s of the way from the first."""
    lo = a_elev + s * (t_elev - a_elev)
    hi = a_elev + a_tall + s * (t_elev + t_tall - a_elev - a_tall)
    return lo, hi


def band_meets(bottom: FloatArray, top: FloatArray, lo: FloatArray,
               hi: FloatArray) -> tuple[BoolArray, BoolArray]:
    """For height bands (NaN: unbounded) against sheet spans: (meets, spans_whole).

    meets: the band overlaps the open span; spans_whole: the band covers it from edge to
    edge, so every 3D line of the sheet there is stopped."""
    b = np.where(np.isnan(bottom), -np.inf, bottom)
    t = np.where(np.isnan(top), np.inf, top)
    meets: BoolArray = (b < hi) & (t > lo)
    whole: BoolArray = (b <= lo) & (t >= hi)
    return meets, whole


def creature_hits_meet(starts: FloatArray, ends: FloatArray, boxes: FloatArray,
                       line: IntArray, idx: IntArray, a_elev: FloatArray, a_tall: FloatArray,
                       tgt: IntArray, elev: FloatArray, tall: FloatArray) -> BoolArray:
    """Per creature hit (line, creature; a_elev, a_tall: the attacker's vertical extent per
    hit): whether the creature's vertical extent overlaps the sheet of sight where the line
    passes through its space (a creature on the ground does not stand between an archer and
    a flyer passing high above it)."""
    if line.size == 0:
        return np.zeros(0, dtype=bool)
    s0, s1 = box_passage(starts[line], ends[line], boxes[idx])
    t = tgt[line]
    lo0, hi0 = sheet(s0, a_elev, a_tall, elev[t], tall[t])
    lo1, hi1 = sheet(s1, a_elev, a_tall, elev[t], tall[t])
    lo, hi = np.minimum(lo0, lo1), np.maximum(hi0, hi1)
    meets: BoolArray = (elev[idx] < hi) & (elev[idx] + tall[idx] > lo)
    return meets


def flank_height(elev: float, side: float, target_elev: float, target_side: float) -> float:
    """The height of a flanker's centre for the flanking line, in feet: the middle of the
    target's cube when the flanker's own cube reaches it (flat ground, or a big creature
    beside a small one, so the line runs level through the target as on a flat map),
    otherwise the centre of the flanker's own cube."""
    middle = target_elev + target_side / 2
    if elev <= middle <= elev + side:
        return middle
    return elev + side / 2


def band_stretches(bottom: FloatArray, top: FloatArray, a_elev: float | FloatArray,
                   a_tall: float | FloatArray, t_elev: float | FloatArray,
                   t_tall: float | FloatArray) -> tuple[FloatArray, FloatArray, FloatArray,
                                                        FloatArray]:
    """For height bands (NaN: unbounded) and one pair of creatures' vertical extents (or
    one pair per band: arrays paired with the bands row by row): the stretches [s0, s1] of
    the way from the attacker (fractions in [0, 1]; empty when s0 >= s1) where a line
    crossing the band there meets it, and where the band spans the whole sheet
    (`band_meets`, solved for s: both spans are linear in s)."""
    b = np.where(np.isnan(bottom), -np.inf, bottom)
    t = np.where(np.isnan(top), np.inf, top)
    lo0, dlo = a_elev, t_elev - a_elev
    hi0, dhi = a_elev + a_tall, t_elev + t_tall - a_elev - a_tall
    meet = _where_positive([(hi0 - b, dhi), (t - lo0, -dlo)], strict=True)
    whole = _where_positive([(lo0 - b, dlo), (t - hi0, -dhi)], strict=False)
    return meet[0], meet[1], whole[0], whole[1]


def _where_positive(terms: list[tuple[FloatArray | float, FloatArray | float]], strict: bool
                    ) -> tuple[FloatArray, FloatArray]:
    """The stretch of s in [0, 1] where every alpha + beta * s is positive (`strict`) or
    not negative (beta one slope, or one per row). Its ends are included or not alike (the
    stretches measure areas, where ends weigh nothing); a term constant in s (beta 0) holds
    everywhere or nowhere, and there strictness decides (a band whose bottom is the feet of
    two creatures on one level spans their sheet: bottom <= lo)."""
    s0: FloatArray = np.zeros(np.shape(np.asarray(terms[0][0])))
    s1: FloatArray = np.ones_like(s0)
    with np.errstate(divide="ignore", invalid="ignore"):
        for alpha, beta in terms:
            a = np.asarray(alpha, dtype=np.float64)
            slope = np.asarray(beta, dtype=np.float64)
            ratio = -a / slope
            s0 = np.where(slope > 0, np.maximum(s0, ratio), s0)
            s1 = np.where(slope < 0, np.minimum(s1, ratio), s1)
            s1 = np.where((slope == 0) & ~((a > 0) if strict else (a >= 0)), -1.0, s1)
    return np.clip(s0, 0.0, 1.0), np.clip(s1, -1.0, 1.0)


def lowered(scene: SceneGeom, feet: float) -> SceneGeom:
    """The scene with every height lowered by `feet` (creatures' elevations, walls' height
    bands, water surfaces; regions have no height): the same battle seen from `feet` up,
    since nothing in the third dimension depends on where zero is."""
    def down(v: float | None) -> float | None:
        return None if v is None else v - feet

    return replace(
        scene,
        creatures=tuple(replace(c, elevation=c.elevation - feet) for c in scene.creatures),
        walls=tuple(replace(w, bottom=down(w.bottom), top=down(w.top)) for w in scene.walls),
        water=tuple(replace(r, surface=down(r.surface)) for r in scene.water))
