"""Flanking geometry: does the line between two allies' centres cross a space from one
border to the opposite one (a square's, or a hex's opposite sides)?

Rule of this module: pure geometry on boxes and points; which creatures may flank, and
what flanking is worth, is the ruleset's business.
"""

from __future__ import annotations

from collections.abc import Sequence

import shapely

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


def crosses_opposite_sides(p: tuple[float, float], q: tuple[float, float],
                           ring: Sequence[tuple[float, float]]) -> bool:
    """crosses_opposite_borders for a convex polygon with an even number of sides (a hex):
    segment p-q enters through one side and leaves through the opposite one (side k and
    side k + n/2), a corner belonging to both its sides; both ends outside the polygon and
    the segment through its interior."""
    n = len(ring)
    poly = shapely.Polygon(ring)
    line = shapely.LineString([p, q])
    if poly.intersects(shapely.Point(p)) or poly.intersects(shapely.Point(q)):
        return False
    if not shapely.relate_pattern(line, poly, "T********"):
        return False
    part = line.intersection(poly)
    if part.geom_type != "LineString":
        return False
    entry, exit_ = part.coords[0], part.coords[-1]
    tol = 1e-6 * max(1.0, poly.length)
    sides = [shapely.LineString([ring[k], ring[(k + 1) % n]]) for k in range(n)]

    def touching(pt: tuple[float, ...]) -> set[int]:
        point = shapely.Point(pt)
        return {k for k, s in enumerate(sides) if s.distance(point) <= tol}

    a, b = touching(entry), touching(exit_)
    return any((j - i) % n == n // 2 for i in a for j in b)
