"""What a wall is to a given target, shared by every ruleset.

Rule of this module: one vectorised classification of wall hits into solid walls, low
obstacles and improved-cover features (arrow slits), from the wall's cover hint and, through
Wall Height, from how high it reaches on the target.
"""

from __future__ import annotations

import numpy as np

from geometry.kernel import BoolArray, FloatArray, IntArray
from geometry.trace import IMPROVED_CODE, LOW_CODE, SOLID_CODE, Tracer


def wall_roles(tracer: Tracer, tall: FloatArray, elevation: FloatArray, walls: IntArray,
               targets: IntArray) -> tuple[BoolArray, BoolArray, BoolArray]:
    """For paired (wall, target) indices: (solid, low, improved).

    A wall is a low obstacle when marked low, or when its top is at most half the target's
    height above the target's feet (a wall up to the waist); otherwise a solid wall blocks
    and an improved one (arrow slit) lets lines through with improved cover.
    """
    cover = tracer.wall_cover_code[walls]
    tops = tracer.wall_top[walls]
    with np.errstate(invalid="ignore"):
        by_height = np.isfinite(tops) & (tops - elevation[targets] <= tall[targets] / 2)
    # Any wall topping out at the waist is a low obstacle, arrow slits included.
    low = (cover == LOW_CODE) | by_height
    improved = (cover == IMPROVED_CODE) & ~by_height
    solid = (cover == SOLID_CODE) & ~low
    return solid, low, improved


def limited_blocked(tracer: Tracer, line: IntArray, wall: IntArray, mask: BoolArray,
                    starts: FloatArray, ends: FloatArray, n: int) -> BoolArray:
    """Per line: blocked by limited (terrain) walls, which stop a line only from the second
    one it crosses. Hits are counted by where they touch the line, so a limited wall drawn
    as several segments counts once where the line passes through a joint."""
    sel = mask & tracer.wall_limited[wall]
    if not sel.any():
        return np.zeros(n, dtype=bool)
    ln, w = line[sel], wall[sel]
    p, q = starts[ln], ends[ln]
    a, b = tracer.wall_xy[w, 0:2], tracer.wall_xy[w, 2:4]
    o3 = (b[:, 0] - a[:, 0]) * (p[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (p[:, 0] - a[:, 0])
    o4 = (b[:, 0] - a[:, 0]) * (q[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (q[:, 0] - a[:, 0])
    # Where along the line it meets the wall's line (o3, o4 have opposite signs on a hit).
    where = np.round(o3 / (o3 - o4), 9)
    distinct = np.unique(np.column_stack([ln, where]), axis=0)
    counts = np.bincount(distinct[:, 0].astype(np.intp), minlength=n)
    blocked: BoolArray = counts >= 2
    return blocked
