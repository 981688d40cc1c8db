"""Flanking geometry: does the line between two allies' centres cross a space from one
border to the opposite one (a square's, or a hex's opposite sides)?

Rule of this module: pure geometry on boxes and points; which creatures may flank, and
what flanking is worth, is the ruleset's business.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import shapely

from geometry.square import Box

_EPS = 1e-9
#: Distances to a polygon's side below this share of its coordinates are rounding: the
#: point is on the side.
_HAIR = 1e-14


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


#: Segments one numpy operation tests at most (`any_crosses_opposite_faces`), and below
#: how many the scalar test is quicker.
_BLOCK = 1 << 16
_FEW = 100


def any_crosses_opposite_faces(ps: Sequence[tuple[float, float, float]],
                               qs: Sequence[tuple[float, float, float]],
                               box: Box, z0: float, z1: float) -> bool:
    """Whether any segment from a point of `ps` to a point of `qs` crosses the target's
    cube from one face to the opposite one (`crosses_opposite_faces`, every pair of points
    at once): two big creatures flank when any of their squares' centres do.

    Only the pairs that can cross are tested (`_groups_that_may_cross`, on groups of
    points by where they lie against the cube's faces): two 100 x 100 allies west of a
    target are 10^8 pairs, none of which can enter it (10 s of the worker when each was
    tested)."""
    if len(ps) * len(qs) <= _FEW:
        # Creatures of a square or a few (most): the arrays cost more than they save.
        return any(crosses_opposite_faces(p, q, box, z0, z1) for p in ps for q in qs)
    p, q = np.asarray(ps, dtype=np.float64), np.asarray(qs, dtype=np.float64)
    x0, y0, x1, y1 = box
    lows, highs = np.array([x0, y0, z0]), np.array([x1, y1, z1])
    for ia, ib in _groups_that_may_cross(_sides(p, lows, highs), _sides(q, lows, highs), 6,
                                         _CUBE_OPPOSITE):
        a, b = p[ia], q[ib]
        step = max(1, _BLOCK // len(b))
        for k in range(0, len(a), step):
            part = a[k:k + step]
            if crosses_opposite_faces_many(np.repeat(part, len(b), axis=0),
                                           np.tile(b, (len(part), 1)), box, z0, z1).any():
                return True
    return False


#: The cube's faces as `_sides` numbers them (x low, x high, y low, y high, z low, z high),
#: each one's opposite.
_CUBE_OPPOSITE = np.array([1, 0, 3, 2, 5, 4])


def _sides(points: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """Per point, for each face of the cube (x low, x high, y low, y high, z low, z high):
    at or beyond it, then near enough it to enter or leave through it (ten times the
    tolerance the crossing tests give a face, so that no point they find on a face is
    missed)."""
    span = highs - lows
    tol = 1e-5 * np.maximum(1.0, np.array([max(span[0], span[1])] * 2 + [span[2]]))
    out, near = [], []
    for k in range(3):
        v = points[:, k]
        out += [v <= lows[k], v >= highs[k]]
        near += [v <= lows[k] + tol[k], v >= highs[k] - tol[k]]
    return np.stack(out + near, axis=1)


def _groups_that_may_cross(sides_p: np.ndarray, sides_q: np.ndarray, planes: int,
                           opposite: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The points of `ps` and of `qs` (as index arrays), group against group, between which
    a segment may cross a convex solid from a face to the opposite one. A point's row of
    `sides_*` holds, for each of `planes` support planes, whether it is at or beyond it,
    then for each face whether it is near it (`opposite[f]`: the face across from f).
    Groups whose points lie alike are left out where no segment between them can cross:
    - both ends at or beyond the same plane: the segment never enters the solid (each
      test clips it to an empty or one-point stretch inside);
    - no face with one end near it and the other near the face across: entering through
      a face and leaving through the opposite one takes that."""
    def groups(sides: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        # Rows as one integer each (at most 62 bits: a hexagon's 32 planes and 8 faces).
        assert sides.shape[1] <= 62
        key = (sides.astype(np.int64)
               << np.arange(sides.shape[1], dtype=np.int64)).sum(axis=1)
        _, first, group = np.unique(key, return_index=True, return_inverse=True)
        order = np.argsort(group, kind="stable")
        return sides[first], np.split(order, np.cumsum(np.bincount(group))[:-1])

    kinds_p, members_p = groups(sides_p)
    kinds_q, members_q = groups(sides_q)
    for i, a in enumerate(kinds_p):
        for j, b in enumerate(kinds_q):
            if (a[:planes] & b[:planes]).any() or not (a[planes:] & b[planes:][opposite]).any():
                continue
            yield members_p[i], members_q[j]


def crosses_opposite_faces_many(p: np.ndarray, q: np.ndarray, box: Box | np.ndarray,
                                z0: float | np.ndarray, z1: float | np.ndarray) -> np.ndarray:
    """`crosses_opposite_faces` for segments p[k]-q[k] (arrays (N, 3)), as one array
    computation; the same answer, segment by segment (tests/test_flanking.py). `box`, `z0`
    and `z1` are one cube for every segment, or one per segment ((N, 4) and (N,) arrays:
    the flanking lines around many targets at once)."""
    n = len(p)
    b = np.broadcast_to(np.asarray(box, dtype=np.float64), (n, 4))
    lo_z = np.broadcast_to(np.asarray(z0, dtype=np.float64), (n,))
    hi_z = np.broadcast_to(np.asarray(z1, dtype=np.float64), (n,))
    lows = np.stack([b[:, 0], b[:, 1], lo_z], axis=1)
    highs = np.stack([b[:, 2], b[:, 3], hi_z], axis=1)
    d = q - p
    # Segments strictly between z0 and z1 are judged as on the flat map (as the scalar test
    # does): no z faces, and y's tolerance taken from the box's width.
    flat = (lo_z < p[:, 2]) & (p[:, 2] < hi_z) & (lo_z < q[:, 2]) & (q[:, 2] < hi_z)
    ok = np.ones(n, dtype=bool)
    t0, t1 = np.zeros(n), np.ones(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(3):  # the three axes
            still = d[:, k] == 0
            ok &= ~still | ((lows[:, k] < p[:, k]) & (p[:, k] < highs[:, k])) | (flat & (k == 2))
            ta = (lows[:, k] - p[:, k]) / d[:, k]
            tb = (highs[:, k] - p[:, k]) / d[:, k]
            move = ~still & ~(flat & (k == 2))
            t0 = np.where(move, np.maximum(t0, np.minimum(ta, tb)), t0)
            t1 = np.where(move, np.minimum(t1, np.maximum(ta, tb)), t1)
    ok &= ~((t1 - t0 <= _EPS) | (t0 <= _EPS) | (t1 >= 1 - _EPS))
    tol = 1e-6 * np.maximum(1.0, highs - lows)
    tol_flat = 1e-6 * np.maximum(1.0, b[:, 2] - b[:, 0])
    found = np.zeros(n, dtype=bool)
    for k in range(3):
        if k == 2:
            use = ~flat
            tk = tol[:, 2]
        else:
            use = np.ones(n, dtype=bool)
            tk = np.where(flat, tol_flat, tol[:, k])
        at0 = p[:, k] + t0 * d[:, k]
        at1 = p[:, k] + t1 * d[:, k]
        # In through the low face and out through the high one, or the other way round.
        low_in, high_in = np.abs(at0 - lows[:, k]) <= tk, np.abs(at0 - highs[:, k]) <= tk
        low_out, high_out = np.abs(at1 - lows[:, k]) <= tk, np.abs(at1 - highs[:, k]) <= tk
        found |= use & ((low_in & high_out) | (high_in & low_out))
    crossed: np.ndarray = ok & found
    return crossed


def crosses_opposite_prism_sides_many(p: np.ndarray, q: np.ndarray, rings: np.ndarray,
                                      z0: float | np.ndarray,
                                      z1: float | np.ndarray) -> np.ndarray:
    """`crosses_opposite_prism_sides` for segments p[k]-q[k] (arrays (N, 3)) against the
    prism on rings[k] (an (N, n, 2) array, or one (n, 2) ring for every segment) from z0[k]
    to z1[k] feet, as array computations; the same answer, segment by segment
    (tests/test_flanking.py). A segment strictly between z0 and z1 is judged as
    `crosses_opposite_sides` judges it on the flat map: its ends outside the polygon, its
    stretch inside crossing the interior, each end of that stretch on the sides within
    a millionth of the perimeter (Shapely's distance to each side, here the same distance
    worked out for every side at once)."""
    n_seg = len(p)
    r = np.asarray(rings, dtype=np.float64)
    if r.ndim == 2:
        r = np.broadcast_to(r, (n_seg, *r.shape))
    n = r.shape[1]
    lo_z = np.broadcast_to(np.asarray(z0, dtype=np.float64), (n_seg,))
    hi_z = np.broadcast_to(np.asarray(z1, dtype=np.float64), (n_seg,))
    a, b = r, np.roll(r, -1, axis=1)
    centre = r.sum(axis=1) / n
    # Each side's inward unit normal and offset (n.x >= off inside), as the scalar test.
    nx, ny = -(b[..., 1] - a[..., 1]), b[..., 0] - a[..., 0]
    flip = nx * (centre[:, None, 0] - a[..., 0]) + ny * (centre[:, None, 1] - a[..., 1]) < 0
    nx, ny = np.where(flip, -nx, nx), np.where(flip, -ny, ny)
    norm = np.maximum(1e-12, np.sqrt(nx * nx + ny * ny))
    nx, ny = nx / norm, ny / norm
    off = nx * a[..., 0] + ny * a[..., 1]
    zeros, ones = np.zeros((n_seg, 1)), np.ones((n_seg, 1))
    px = np.concatenate([nx, zeros, zeros], axis=1)
    py = np.concatenate([ny, zeros, zeros], axis=1)
    pz = np.concatenate([np.zeros((n_seg, n)), ones, -ones], axis=1)
    po = np.concatenate([off, lo_z[:, None], -hi_z[:, None]], axis=1)
    flat = (lo_z < p[:, 2]) & (p[:, 2] < hi_z) & (lo_z < q[:, 2]) & (q[:, 2] < hi_z)
    # On the flat map the bottom and the top are no faces.
    use = np.ones((n_seg, n + 2), dtype=bool)
    use[:, n:] = ~flat[:, None]
    d = q - p
    along = px * d[:, 0, None] + py * d[:, 1, None] + pz * d[:, 2, None]
    gap = po - (px * p[:, 0, None] + py * p[:, 1, None] + pz * p[:, 2, None])
    # Parallel to a face and outside it or on it: never inside.
    ok = ~(use & (along == 0) & (gap >= 0)).any(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = gap / along
    t0 = np.where(use & (along > 0), t, 0.0).max(axis=1, initial=0.0)
    t1 = np.where(use & (along < 0), t, 1.0).min(axis=1, initial=1.0)
    # On the flat map Shapely's test asks only that both ends be outside the polygon (a
    # hair outside counts) and that the stretch inside cross its interior; above or below
    # it, the prism's test keeps the ends a fraction _EPS of the way from its faces.
    gap_q = po - (px * q[:, 0, None] + py * q[:, 1, None] + pz * q[:, 2, None])
    # (Outside by more than rounding: an end on a corner is on the polygon for Shapely.)
    hair = _HAIR * np.maximum(1.0, np.abs(r).max(axis=(1, 2)))[:, None]
    outside = ((use & (gap > hair)).any(axis=1) & (use & (gap_q > hair)).any(axis=1)
               & (t1 - t0 > _EPS))
    ok &= np.where(flat, outside, ~((t1 - t0 <= _EPS) | (t0 <= _EPS) | (t1 >= 1 - _EPS)))
    opposite = np.array([(k + n // 2) % n for k in range(n)] + [n + 1, n])
    # Three dimensions: each end of the stretch on a face's plane, within the scalar test's
    # tolerance for that face.
    span_xy = np.maximum(np.abs(r[..., 0] - centre[:, None, 0]),
                         np.abs(r[..., 1] - centre[:, None, 1])).max(axis=1)
    tol = np.concatenate([np.repeat((1e-6 * np.maximum(1.0, span_xy))[:, None], n, axis=1),
                          np.repeat((1e-6 * np.maximum(1.0, hi_z - lo_z))[:, None], 2,
                                    axis=1)], axis=1)
    # The flat map: each end's distance to each side's segment, within a millionth of the
    # perimeter.
    ab = b - a
    perimeter = np.sqrt((ab * ab).sum(axis=2)).sum(axis=1)
    tol_flat = 1e-6 * np.maximum(1.0, perimeter)
    length2 = np.maximum((ab * ab).sum(axis=2), 1e-300)

    def faces(at: np.ndarray) -> np.ndarray:
        pt = p + at[:, None] * d
        on_plane = np.abs(px * pt[:, 0, None] + py * pt[:, 1, None] + pz * pt[:, 2, None]
                          - po) <= tol
        w = pt[:, None, :2] - a
        u = np.clip((w * ab).sum(axis=2) / length2, 0.0, 1.0)
        gap_xy = w - u[..., None] * ab
        on_side = np.sqrt((gap_xy * gap_xy).sum(axis=2)) <= tol_flat[:, None]
        flat_faces = np.concatenate([on_side, np.zeros((n_seg, 2), dtype=bool)], axis=1)
        out: np.ndarray = np.where(flat[:, None], flat_faces, on_plane)
        return out

    found = (faces(t0) & faces(t1)[:, opposite]).any(axis=1)
    crossed: np.ndarray = ok & found
    return crossed


def crosses_opposite_prism_sides(p: tuple[float, float, float], q: tuple[float, float, float],
                                 ring: Sequence[tuple[float, float]], z0: float,
                                 z1: float) -> bool:
    """crosses_opposite_sides in three dimensions: the segment p-q (x, y in pixels, z in
    feet) enters the prism standing on the convex polygon `ring` (a hex) from z0 to z1 feet
    through one face and leaves through the opposite one: side k and side k + n/2, or the
    bottom and the top (an edge or corner belongs to each of its faces). A segment that stays
    strictly between z0 and z1 is judged exactly as on the flat map."""
    if z0 < p[2] < z1 and z0 < q[2] < z1:
        return crosses_opposite_sides((p[0], p[1]), (q[0], q[1]), ring)
    n = len(ring)
    cx = sum(v[0] for v in ring) / n
    cy = sum(v[1] for v in ring) / n
    d = (q[0] - p[0], q[1] - p[1], q[2] - p[2])
    # Cyrus-Beck clip against the prism's faces: each side's half-plane (inward normal) and
    # the slab z0..z1; faces are numbered 0..n-1 for the sides, n the bottom, n + 1 the top.
    planes: list[tuple[float, float, float, float]] = []  # (nx, ny, nz, offset): n.x >= off
    for k in range(n):
        ax, ay = ring[k]
        bx, by = ring[(k + 1) % n]
        nx, ny = -(by - ay), bx - ax
        if nx * (cx - ax) + ny * (cy - ay) < 0:
            nx, ny = -nx, -ny
        norm = max(1e-12, (nx * nx + ny * ny) ** 0.5)
        nx, ny = nx / norm, ny / norm
        planes.append((nx, ny, 0.0, nx * ax + ny * ay))
    planes.append((0.0, 0.0, 1.0, z0))
    planes.append((0.0, 0.0, -1.0, -z1))
    t0, t1 = 0.0, 1.0
    for nx, ny, nz, off in planes:
        a = nx * d[0] + ny * d[1] + nz * d[2]
        b = off - (nx * p[0] + ny * p[1] + nz * p[2])
        if a == 0:
            if b >= 0:
                return False  # parallel to the face and outside or on it
            continue
        t = b / a
        if a > 0:
            t0 = max(t0, t)
        else:
            t1 = min(t1, t)
    if t1 - t0 <= _EPS or t0 <= _EPS or t1 >= 1 - _EPS:
        return False
    span_xy = max(max(abs(v[0] - cx), abs(v[1] - cy)) for v in ring)

    def faces(t: float) -> set[int]:
        pt = (p[0] + t * d[0], p[1] + t * d[1], p[2] + t * d[2])
        found = set()
        for k, (nx, ny, nz, off) in enumerate(planes):
            tol = 1e-6 * (max(1.0, z1 - z0) if nz else max(1.0, span_xy))
            if abs(nx * pt[0] + ny * pt[1] + nz * pt[2] - off) <= tol:
                found.add(k)
        return found

    def opposite(k: int) -> int:
        if k >= n:
            return n + (1 - (k - n))
        return (k + n // 2) % n

    a_faces, b_faces = faces(t0), faces(t1)
    return any(opposite(k) in b_faces for k in a_faces)


def any_crosses_opposite_prism_sides(ps: Sequence[tuple[float, float, float]],
                                     qs: Sequence[tuple[float, float, float]],
                                     ring: Sequence[tuple[float, float]], z0: float,
                                     z1: float) -> bool:
    """Whether any segment from a point of `ps` to a point of `qs` crosses the prism on
    `ring` (z0..z1 feet) from a face to the opposite one (`crosses_opposite_prism_sides`):
    two big creatures flank a target on a hex grid when any of their squares' centres do.
    As `any_crosses_opposite_faces` does for a cube, only the pairs that can cross are
    tested: not both ends beyond one face, and one end near a face, the other near the
    opposite one."""
    if len(ps) * len(qs) <= _FEW:
        return any(crosses_opposite_prism_sides(p, q, ring, z0, z1) for p in ps for q in qs)
    p, q = np.asarray(ps, dtype=np.float64), np.asarray(qs, dtype=np.float64)
    n = len(ring)
    opposite = np.array([(k + n // 2) % n for k in range(n)] + [n + 1, n])
    for ia, ib in _groups_that_may_cross(_prism_sides(p, ring, z0, z1),
                                         _prism_sides(q, ring, z0, z1), n + _SUPPORTS + 2,
                                         opposite):
        for x in p[ia]:
            for y in q[ib]:
                if crosses_opposite_prism_sides(tuple(x), tuple(y), ring, z0, z1):
                    return True
    return False


def _prism_sides(points: np.ndarray, ring: Sequence[tuple[float, float]], z0: float,
                 z1: float) -> np.ndarray:
    """Per point: for each of the prism's support planes (its sides, the lines touching its
    ring in 24 directions, its bottom and top) whether it is at or beyond it (no segment
    between two such points enters the prism), then for each face (the sides, bottom and
    top) whether it is near enough to enter or leave through it (ten times the tolerance
    the crossing tests give a face)."""
    ring_a = np.asarray(ring, dtype=np.float64)
    centre = ring_a.mean(axis=0)
    a, b = ring_a, np.roll(ring_a, -1, axis=0)
    normal = np.stack([b[:, 1] - a[:, 1], -(b[:, 0] - a[:, 0])], axis=1)
    outward = ((a - centre) * normal).sum(axis=1) >= 0
    normal = np.where(outward[:, None], normal, -normal)
    normal /= np.maximum(1e-12, np.linalg.norm(normal, axis=1))[:, None]
    angles = np.arange(_SUPPORTS) * (2 * np.pi / _SUPPORTS)
    support = np.concatenate([normal, np.stack([np.cos(angles), np.sin(angles)], axis=1)])
    # Products written out, not `@`: numpy hands a matrix product to BLAS, whose threads
    # spin beside the server's worker for an inner size of 2 (docs/geometry.md).
    reach = (ring_a[:, 0, None] * support[:, 0]
             + ring_a[:, 1, None] * support[:, 1]).max(axis=0)  # each support line: u.x = reach
    beyond = (points[:, 0, None] * support[:, 0] + points[:, 1, None] * support[:, 1]
              - reach[None, :])  # >= 0: at or beyond it
    perimeter = float(np.linalg.norm(b - a, axis=1).sum())
    tol_xy = 1e-5 * max(1.0, perimeter)
    tol_z = 1e-5 * max(1.0, z1 - z0)
    zs = points[:, 2]
    side_depth = -beyond[:, :len(ring)]  # inside the side's half-plane by this much
    depth = np.concatenate([side_depth, (zs - z0)[:, None], (z1 - zs)[:, None]], axis=1)
    tol = np.array([tol_xy] * len(ring) + [tol_z, tol_z])
    out = np.concatenate([beyond >= 0, depth[:, -2:] <= 0], axis=1)
    return np.concatenate([out, depth <= tol], axis=1)


#: Directions of the support lines `_prism_sides` adds to the sides' own.
_SUPPORTS = 24
