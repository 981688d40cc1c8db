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
    low = (cover == LOW_CODE) | ((cover == SOLID_CODE) & by_height)
    improved = (cover == IMPROVED_CODE) & ~by_height
    solid = (cover == SOLID_CODE) & ~low
    return solid, low, improved
