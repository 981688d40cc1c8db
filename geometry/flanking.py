"""Flanking geometry: does the line between two allies' centres cross a space from one
border to the opposite one?

Rule of this module: pure geometry on boxes and points; which creatures may flank, and
what flanking is worth, is the ruleset's business.
"""

from __future__ import annotations

from geometry.square import Box

_EPS = 1e-9


def crosses_opposite_borders(p: tuple[float, float], q: tuple[float, float], box: Box) -> bool:
    """True when segment p-q enters the box through one border and leaves through the opposite
    one (a corner belongs to both its borders, so corner-to-opposite-corner counts).

    Both ends must lie outside the box, and the segment must pass through its interior:
    grazing a corner or running along a border is not flanking.
    """
    x0, y0, x1, y1 = box
    dx, dy = q[0] - p[0], q[1] - p[1]
    t0, t1 = 0.0, 1.0
    for start, d, lo, hi in ((p[0], dx, x0, x1), (p[1], dy, y0, y1)):
        if d == 0:
            if not lo < start < hi:
                return False
            continue
        ta, tb = (lo - start) / d, (hi - start) / d
        t0, t1 = max(t0, min(ta, tb)), min(t1, max(ta, tb))
    if t1 - t0 <= _EPS or t0 <= _EPS or t1 >= 1 - _EPS:
        return False
    entry = (p[0] + t0 * dx, p[1] + t0 * dy)
    exit_ = (p[0] + t1 * dx, p[1] + t1 * dy)

    def borders(pt: tuple[float, float]) -> set[str]:
        tol = 1e-6 * max(1.0, x1 - x0)
        found = set()
        if abs(pt[0] - x0) <= tol:
            found.add("w")
        if abs(pt[0] - x1) <= tol:
            found.add("e")
        if abs(pt[1] - y0) <= tol:
            found.add("n")
        if abs(pt[1] - y1) <= tol:
            found.add("s")
        return found

    a, b = borders(entry), borders(exit_)
    return (("w" in a and "e" in b) or ("e" in a and "w" in b)
            or ("n" in a and "s" in b) or ("s" in a and "n" in b))


def crosses_opposite_faces(p: tuple[float, float, float], q: tuple[float, float, float],
                           box: Box, z0: float, z1: float) -> bool:
    """crosses_opposite_borders in three dimensions: the segment p-q (x, y in pixels, z in
    feet) enters the target's cube (box on the map, z0..z1 in feet) through one face and
    leaves through the opposite one (an edge or corner belongs to each of its faces), so a
    flyer above and an ally below flank too. A segment that stays strictly between z0 and
    z1 is judged exactly as on the flat map."""
    if z0 < p[2] < z1 and z0 < q[2] < z1:
        return crosses_opposite_borders((p[0], p[1]), (q[0], q[1]), box)
    x0, y0, x1, y1 = box
    # Work in one unit: feet scaled to the box's pixels per foot are irrelevant to which
    # faces are crossed, so each axis keeps its own unit.
    lows, highs = (x0, y0, z0), (x1, y1, z1)
    d = tuple(q[k] - p[k] for k in range(3))
    t0, t1 = 0.0, 1.0
    for k in range(3):
        if d[k] == 0:
            if not lows[k] < p[k] < highs[k]:
                return False
            continue
        ta, tb = (lows[k] - p[k]) / d[k], (highs[k] - p[k]) / d[k]
        t0, t1 = max(t0, min(ta, tb)), min(t1, max(ta, tb))
    if t1 - t0 <= _EPS or t0 <= _EPS or t1 >= 1 - _EPS:
        return False

    def faces(t: float) -> set[tuple[int, int]]:
        found = set()
        for k in range(3):
            v = p[k] + t * d[k]
            tol = 1e-6 * max(1.0, highs[k] - lows[k])
            if abs(v - lows[k]) <= tol:
                found.add((k, 0))
            if abs(v - highs[k]) <= tol:
                found.add((k, 1))
        return found

    a, b = faces(t0), faces(t1)
    return any((k, 1 - side) in b for k, side in a)
