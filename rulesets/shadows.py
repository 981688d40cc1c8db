"""Shadows that walls and region sides cast from a viewpoint, for many viewpoints at once.

Rule of this module: the geometry the shadow rulesets (pf1's visible fraction, realms'
covered fraction) share, as whole-array operations over every (viewpoint, segment) pair of
a batch: the shadow rings (numpy), the segments that can shade a body at all (the walls
meeting the hull of the viewpoint and the body, found in a wall index built once per wall
tuple), and the union of each viewpoint's shadows (one GEOS call for the whole batch). What
a shadow means in a game stays in the rulesets.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import shapely

from geometry import kernel
from geometry.caches import drop_oldest
from geometry.kernel import BoolArray, FloatArray, IntArray, take_rows
from geometry.model import SceneGeom, WallGeom
from geometry.trace import Tracer


def shadow_polygons(p: FloatArray, a: FloatArray, b: FloatArray,
                    reach: float | FloatArray) -> FloatArray:
    """Rings (N, 6, 2) of the shadows segments a-b cast from point p (one point (2,), or one
    per segment (N, 2)), out to `reach` (one, or (N, 1): at least as far as anything that
    matters). Each runs a, b, b's far point, a far point on the bisector, a's far point: with
    the bisector point the far side never cuts into a shadow that spans a wide angle (at
    most 90 degrees per far edge, so at 2x the distance it stays beyond `reach`). A segment
    seen edge-on gives an empty (invalid) ring."""
    ua, ub = a - p, b - p
    la = np.hypot(ua[:, 0], ua[:, 1])[:, None]
    lb = np.hypot(ub[:, 0], ub[:, 1])[:, None]
    ua, ub = ua / np.maximum(la, 1e-12), ub / np.maximum(lb, 1e-12)
    far = 2.0 * reach
    mid = ua + ub
    norm = np.hypot(mid[:, 0], mid[:, 1])[:, None]
    # Seen from a point on the segment itself the bisector vanishes: use the normal.
    normal = np.column_stack([-ua[:, 1], ua[:, 0]])
    mid = np.where(norm > 1e-9, mid / np.maximum(norm, 1e-12), normal)
    # An end already beyond `far` is its own far point (recomputing it as p + u * |a - p|
    # lands a rounding error away and makes the ring cross itself).
    a_far = np.where(la >= far, a, p + ua * far)
    b_far = np.where(lb >= far, b, p + ub * far)
    m_far = p + mid * np.maximum(far, np.maximum(la, lb)) * 2.0
    rings: FloatArray = np.stack([a, b, b_far, m_far, a_far, a], axis=1)
    return rings


def repaired(shadows: npt.NDArray[np.object_]) -> npt.NDArray[np.object_]:
    """The shadows (polygons) with every invalid one repaired by GEOS, in place: rings
    from walls seen edge-on have no area; any other invalid ring is repaired, never
    dropped (a dropped shadow would show a hidden target)."""
    bad = ~shapely.is_valid(shadows)
    if bad.any():
        shadows[bad] = shapely.make_valid(shadows[bad])
    return shadows


def near_edges(p: FloatArray, a: FloatArray, b: FloatArray,
               s1: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The near edge of each truncated shadow (`truncated_shadows`): segment a-b scaled from
    p by 1 / s1. An open-ended one (`open_ended`) is this edge's whole shadow."""
    near = 1.0 / s1[:, None]
    return p + (a - p) * near, p + (b - p) * near


def _open_ended(p: FloatArray, a: FloatArray, b: FloatArray, s0: FloatArray,
                reach: FloatArray) -> tuple[BoolArray, FloatArray]:
    """Per truncated shadow: whether it reaches `reach` (no far edge before it), and its
    far scale (1 / s0, capped)."""
    ua = a - p
    # How far from p the segment passes: its scaled copy at 1 / s0 is beyond `reach` when
    # that distance times 1 / s0 is.
    d = b - a
    length2 = np.maximum(np.einsum("ij,ij->i", d, d), 1e-24)
    u = np.clip(np.einsum("ij,ij->i", -ua, d) / length2, 0.0, 1.0)
    closest = ua + d * u[:, None]
    gap = np.hypot(closest[:, 0], closest[:, 1])
    # The far scale is capped: a far edge that far out is beyond `reach` unless p is on
    # the wall's line, where the shadow has no area anyway.
    with np.errstate(divide="ignore", over="ignore"):
        far = np.minimum(np.where(s0 > 0, 1.0 / s0, np.inf), 1e6)
    open_end: BoolArray = (s0 <= 0) | (far * gap >= reach)
    return open_end, far


def open_ended(p: FloatArray, a: FloatArray, b: FloatArray, s0: FloatArray,
               reach: FloatArray) -> BoolArray:
    """Per truncated shadow (`truncated_shadows`, p one per segment): whether it has no
    far edge before `reach`, so that it is the plain shadow of its near edge (`near_edges`)."""
    return _open_ended(p, a, b, s0, reach)[0]


def truncated_shadows(p: FloatArray, a: FloatArray, b: FloatArray, s0: FloatArray,
                      s1: FloatArray, reach: float | FloatArray) -> npt.NDArray[np.object_]:
    """Polygons of the parts of the shadows segments a-b cast from p (one point, or one per
    segment) that lie where the segment is crossed between s0 and s1 of the way from p
    (0 < s1 <= 1): the points q whose line p-q crosses the segment at a fraction s of its
    length in [s0, s1], between the segment scaled from p by 1 / s1 and by 1 / s0 (to
    `reach`, one or one per segment, when s0 is 0 or the far edge lies beyond it)."""
    p = np.broadcast_to(p, a.shape)
    reach_each = np.broadcast_to(np.asarray(reach, dtype=np.float64).reshape(-1), (len(a),))
    ua, ub = a - p, b - p
    na, nb = near_edges(p, a, b, s1)
    open_end, far = _open_ended(p, a, b, s0, reach_each)
    out = np.empty(len(a), dtype=object)
    if open_end.any():
        out[open_end] = shapely.polygons(shadow_polygons(
            p[open_end], na[open_end], nb[open_end], reach_each[open_end][:, None]))
    closed = ~open_end
    if closed.any():
        f = far[closed][:, None]
        fa, fb = p[closed] + ua[closed] * f, p[closed] + ub[closed] * f
        rings = np.stack([na[closed], nb[closed], fb, fa, na[closed]], axis=1)
        out[closed] = shapely.polygons(rings)
    return out


# -- the walls near a sight ----------------------------------------------------------------------

#: Per wall tuple (by identity: token-only changes keep it): the walls as Shapely lines in
#: an STRtree, so a batch of viewpoints finds the walls near each sight without a test of
#: every wall against every sight.
_WALL_TREES: dict[int, tuple[tuple[WallGeom, ...], npt.NDArray[np.object_], shapely.STRtree]] = {}
_WALL_TREES_KEPT = 8


def wall_lines(walls: tuple[WallGeom, ...], xy: FloatArray,
               ) -> tuple[npt.NDArray[np.object_], shapely.STRtree]:
    """The walls (rows x0, y0, x1, y1 of `xy`) as Shapely lines and their STRtree, built
    once per wall tuple."""
    held = _WALL_TREES.get(id(walls))
    if held is not None and held[0] is walls:
        return held[1], held[2]
    lines = shapely.linestrings(xy.reshape(-1, 2, 2)) if len(xy) else np.empty(0, dtype=object)
    tree = shapely.STRtree(lines)
    if len(_WALL_TREES) >= _WALL_TREES_KEPT:
        drop_oldest(_WALL_TREES)
    _WALL_TREES[id(walls)] = (walls, lines, tree)
    return lines, tree


def warm_wall_lines(scene: SceneGeom) -> None:
    """`wall_lines` of the scene's walls built now (a ruleset's `warm`): 6 ms for 20,000
    walls, otherwise paid by the first request that measures a shadow."""
    if scene.walls:
        tracer = Tracer(scene)
        wall_lines(tracer.walls, tracer.wall_xy)


def hulls(points: FloatArray, corners: FloatArray,
          counts: IntArray | None = None) -> npt.NDArray[np.object_]:
    """Per row: the convex hull of a viewpoint (R, 2) and a body's convex ring (R, V, 2,
    either way round; its first counts[k] corners, the rest repeating the last), the only
    place a segment can stand to shade that body from that point. Built as the ring with
    the sides the point sees (it lies strictly outside them) replaced by the lines from the
    point to their ends, without a geometry per point (one Shapely hull per sight, of every
    cell corner, was 50 ms of a 200-token hex table). The corners are the ring's and the
    point as they are: the region is Shapely's hull of them, up to rounding where the point
    lies within a few ulps of a side's line (Shapely decides that side exactly; here it
    may be taken as seen, adding a sliver of that width, or not). A body of no area (a
    point, a line) has Shapely's hull."""
    n, v = corners.shape[0], corners.shape[1]
    out = np.empty(n, dtype=object)
    if n == 0:
        return out
    if counts is None:
        counts = np.full(n, v, dtype=np.intp)
    col = np.arange(v)[None, :]
    own = col < counts[:, None]
    nxt = np.where(col + 1 < counts[:, None], col + 1, 0)
    prv = np.where(col > 0, col - 1, counts[:, None] - 1)
    x, y = corners[..., 0], corners[..., 1]
    x1, y1 = np.take_along_axis(x, nxt, axis=1), np.take_along_axis(y, nxt, axis=1)
    twice_area = np.where(own, x * y1 - x1 * y, 0.0).sum(axis=1)
    flat = np.flatnonzero(twice_area == 0)
    if len(flat):
        pts = np.concatenate([corners[flat], points[flat][:, None, :]], axis=1)
        out[flat] = shapely.convex_hull(shapely.multipoints(pts))
    # Side k (corner k to the next) is seen from p when p lies strictly outside it: to its
    # right on a counterclockwise ring, to its left on a clockwise one.
    side = (x1 - x) * (points[:, 1:2] - y) - (y1 - y) * (points[:, 0:1] - x)
    body = np.flatnonzero(twice_area != 0)
    own &= (twice_area != 0)[:, None]
    seen = own & (np.where(twice_area[:, None] > 0, side, -side) < 0)
    seen_before = np.take_along_axis(seen, prv, axis=1)
    # A corner between two seen sides is inside the hull; the point comes after the corner
    # where the seen sides start (the ring's own order, either way round).
    keep = own & ~(seen & seen_before)
    start = seen & ~seen_before
    rows, cols = np.nonzero(keep)
    p_rows, p_cols = np.nonzero(start)
    which = np.concatenate([rows, p_rows])
    order = np.lexsort((np.concatenate([2 * cols, 2 * p_cols + 1]), which))
    coords = np.concatenate([corners[rows, cols], points[p_rows]])[order]
    if len(body):
        out[body] = shapely.polygons(shapely.linearrings(
            coords, indices=np.searchsorted(body, which[order])))
    return out


def meeting(tree: shapely.STRtree, areas: npt.NDArray[np.object_],
            sights: tuple[FloatArray, FloatArray, FloatArray] | None = None,
            counts: IntArray | None = None) -> tuple[IntArray, IntArray]:
    """(row, item) pairs of the tree's items that meet each area, sorted by row then item
    (the order a per-row computation sees them in); the areas are prepared first.

    With `sights` (each area's viewpoint (R, 2) and body's convex ring (R, V, 2), its first
    counts[k] corners, as `hulls` takes them (each area their hull), and the items' ends
    as rows x0, y0, x1, y1; the items segments): the same answer, found by arithmetic.
    The items in an area's box wholly outside the narrowest angle at its viewpoint that
    holds its body (`wedges`) are left out first (the box of a far sight's long thin hull
    holds five or six walls for each that meets it), then the others are decided by
    separating axes (`_meets_hull`), GEOS deciding those within a hair of touching. On
    realms' dressed hex scene: 107,600 boxes met, 18,873 walls meeting; GEOS's prepared
    query took 40-70 ms."""
    if len(areas) == 0:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty
    shapely.prepare(areas)
    if sights is None:
        row, item = tree.query(areas, predicate="intersects")
    else:
        row, item = tree.query(areas)
        p, corners, xy = sights
        left, right = wedges(p, corners, counts)
        near = ~_outside_wedge(row, item, p, left, right, xy)
        row, item = row[near], item[near]
        # The others by the separating axes of a segment and a convex ring, GEOS
        # deciding only those within a hair of touching: the same answers, at a fifth
        # of the cost (GEOS's prepared test costs about a microsecond a pair that meets).
        met, unsure = _meets_hull(row, item, p, left, right, corners, xy)
        if unsure.any():
            met[unsure] = shapely.intersects(areas[row[unsure]],
                                             tree.geometries[item[unsure]])
        row, item = row[met], item[met]
    order = np.lexsort((item, row))
    return row[order].astype(np.intp), item[order].astype(np.intp)


#: Pixels: how clearly both ends of a segment must lie beyond a side of a wedge for the
#: segment to be taken as outside it (a hair, so that rounding never leaves out a segment
#: that touches the hull).
_WEDGE_SLACK = 1e-6


def wedges(points: FloatArray, corners: FloatArray, counts: IntArray | None = None,
           ) -> tuple[FloatArray, FloatArray]:
    """Per row (a viewpoint (R, 2) and a body's convex ring (R, V, 2), its first counts[k]
    corners, the rest repeating the last, as `hulls` takes them): the directions from the
    viewpoint to the body's two outermost corners, left then right, seen from the
    viewpoint (the sides of the narrowest angle at the viewpoint that holds the body, and
    so its hull). NaN directions where the viewpoint is not strictly outside the body, or
    the body has no area (no such angle: nothing is left out there, GEOS decides)."""
    n, v = corners.shape[0], corners.shape[1]
    nan = np.full((n, 2), np.nan)
    if n == 0:
        return nan, nan.copy()
    if counts is None:
        counts = np.full(n, v, dtype=np.intp)
    d = corners - points[:, None, :]
    own = np.arange(v)[None, :] < counts[:, None]
    nxt = np.where(np.arange(v)[None, :] + 1 < counts[:, None], np.arange(v)[None, :] + 1, 0)
    dn = np.take_along_axis(d, nxt[..., None], axis=1)
    # Twice the ring's signed area, and each side's cross with the viewpoint: the
    # viewpoint is strictly outside a convex ring when it is strictly outside a side.
    cross = d[..., 0] * dn[..., 1] - d[..., 1] * dn[..., 0]
    twice_area = np.where(own, cross, 0.0).sum(axis=1)
    outside = (np.where(own, np.where(twice_area[:, None] > 0, cross, -cross), np.inf)
               < 0).any(axis=1) & (twice_area != 0)
    # Angles about the direction to the corners' mean (inside the angle, as the
    # viewpoint is outside): the largest is the left side, the smallest the right.
    c = d.mean(axis=1)
    phi = np.arctan2(c[:, None, 0] * d[..., 1] - c[:, None, 1] * d[..., 0],
                     c[:, None, 0] * d[..., 0] + c[:, None, 1] * d[..., 1])
    rows = np.arange(n)
    left = d[rows, phi.argmax(axis=1)]
    right = d[rows, phi.argmin(axis=1)]
    left[~outside] = np.nan
    right[~outside] = np.nan
    return left, right


def _outside_wedge(row: IntArray, item: IntArray, p: FloatArray, left: FloatArray,
                   right: FloatArray, xy: FloatArray) -> BoolArray:
    """Per (row, item): whether segment xy[item] (x0, y0, x1, y1) lies wholly beyond one
    side of the wedge at p[row] between directions left[row] and right[row]
    (counterclockwise from right to left), both its ends more than `_WEDGE_SLACK` beyond
    that side's line. False where the wedge is NaN."""
    # Per row, each side's line as a x + b y > c (beyond it), the slack in c; gathered
    # once per candidate as one table (numpy's cost is per call and per gathered row).
    lx, ly, rx, ry = left[:, 0], left[:, 1], right[:, 0], right[:, 1]
    table = np.column_stack([
        -ly, lx, lx * p[:, 1] - ly * p[:, 0] + _WEDGE_SLACK * np.hypot(lx, ly),
        ry, -rx, ry * p[:, 0] - rx * p[:, 1] + _WEDGE_SLACK * np.hypot(rx, ry)])
    t = np.take(table, row, axis=0)
    e = np.take(xy, item, axis=0)
    out: BoolArray = (((t[:, 0] * e[:, 0] + t[:, 1] * e[:, 1] > t[:, 2])
                       & (t[:, 0] * e[:, 2] + t[:, 1] * e[:, 3] > t[:, 2]))
                      | ((t[:, 3] * e[:, 0] + t[:, 4] * e[:, 1] > t[:, 5])
                         & (t[:, 3] * e[:, 2] + t[:, 4] * e[:, 3] > t[:, 5])))
    return out


#: Candidates looked at together by `_meets_hull` (its arrays hold a row per side of a
#: ring for each: bounded memory however many walls a table's sights meet).
_HULL_CHUNK = 65536


def _meets_hull(row: IntArray, item: IntArray, p: FloatArray, left: FloatArray,
                right: FloatArray, corners: FloatArray, xy: FloatArray,
                ) -> tuple[BoolArray, BoolArray]:
    """Per (row, item): whether segment xy[item] meets the hull of viewpoint p[row] and the
    convex ring corners[row] (the wedge's sides left[row] and right[row]: `wedges`), and
    whether that is unsure (decided within `_WEDGE_SLACK` pixels, or no wedge: the
    caller asks GEOS). Separating axes: the two don't meet when the segment lies beyond a
    side of the hull (a side of the wedge, or a side of the ring the viewpoint does not
    see) or the hull lies to one side of the segment's line."""
    m = len(row)
    met, unsure = np.zeros(m, dtype=bool), np.ones(m, dtype=bool)
    if m == 0:
        return met, unsure
    # Per ring, each side as a x + b y - c (distance beyond it, outwards), -inf for the
    # sides that are not the hull's (seen from p, or of no length).
    nxt = kernel.next_corners(corners)
    e = nxt - corners
    length = np.hypot(e[..., 0], e[..., 1])
    twice_area = (corners[..., 0] * nxt[..., 1] - nxt[..., 0] * corners[..., 1]).sum(axis=1)
    turn = np.where(twice_area >= 0, 1.0, -1.0)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        a, b = turn * e[..., 1] / length, -turn * e[..., 0] / length
    c = a * corners[..., 0] + b * corners[..., 1]
    seen = a * p[:, None, 0] + b * p[:, None, 1] - c > 0
    never = seen | ~(length > 0)
    a, b, c = np.where(never, 0.0, a), np.where(never, 0.0, b), np.where(never, np.inf, c)
    # The wedge's sides the same way (left: beyond it to its left; right: to its right).
    ll, lr = np.hypot(left[:, 0], left[:, 1]), np.hypot(right[:, 0], right[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        wa = np.column_stack([-left[:, 1] / ll, right[:, 1] / lr])
        wb = np.column_stack([left[:, 0] / ll, -right[:, 0] / lr])
    wc = wa * p[:, 0:1] + wb * p[:, 1:2]
    a, b, c = (np.concatenate([a, wa], axis=1), np.concatenate([b, wb], axis=1),
               np.concatenate([c, wc], axis=1))
    # The hull's corners among the viewpoint and the ring's corners.
    pts = np.concatenate([p[:, None, :], corners], axis=1)
    for lo in range(0, m, _HULL_CHUNK):
        r, w = row[lo:lo + _HULL_CHUNK], item[lo:lo + _HULL_CHUNK]
        ends = take_rows(xy, w)
        x0, y0, x1, y1 = (ends[:, k:k + 1] for k in range(4))
        ar, br, cr = take_rows(a, r), take_rows(b, r), take_rows(c, r)
        beyond = np.minimum(ar * x0 + br * y0, ar * x1 + br * y1) - cr
        with np.errstate(divide="ignore", invalid="ignore"):
            dx, dy = x1 - x0, y1 - y0
            span = np.hypot(dx, dy)
            q = take_rows(pts, r)
            d = (dx * (q[..., 1] - y0) - dy * (q[..., 0] - x0)) / span
        # The largest distance by which one axis parts them (NaN: no wedge, or a
        # segment of no length; then unsure).
        part = np.maximum(kernel.over_points(np.maximum, beyond),
                          np.maximum(kernel.over_points(np.minimum, d),
                                     kernel.over_points(np.minimum, -d)))
        met[lo:lo + _HULL_CHUNK] = part < -_WEDGE_SLACK
        unsure[lo:lo + _HULL_CHUNK] = ~(part < -_WEDGE_SLACK) & ~(part > _WEDGE_SLACK)
    return met, unsure


# -- unions per viewpoint ------------------------------------------------------------------------

def grouped_union(geoms: npt.NDArray[np.object_], group: IntArray, order: npt.NDArray[Any],
                  n_groups: int) -> npt.NDArray[np.object_]:
    """Per group g in range(n_groups): the union of the geometries of that group, taken in
    `order` (ascending) within it, as `shapely.union_all` of that list would give it; an
    empty collection for a group with none. One GEOS call over a padded table."""
    out = np.empty(n_groups, dtype=object)
    if n_groups == 0:
        return out
    if len(geoms) == 0:
        out[:] = shapely.union_all(np.empty((n_groups, 0), dtype=object), axis=1)
        return out
    sort = np.lexsort((order, group))
    g = group[sort]
    counts = np.bincount(g, minlength=n_groups)
    starts = np.cumsum(counts) - counts
    col = np.arange(len(g)) - starts[g]
    table = np.full((n_groups, int(counts.max())), None, dtype=object)
    table[g, col] = geoms[sort]
    out[:] = shapely.union_all(table, axis=1)
    return out


# -- hidden area, exactly, without polygon overlays ------------------------------------------------

def _cross(u: FloatArray, v: FloatArray) -> FloatArray:
    out: FloatArray = u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]
    return out


def _pairs_within(group: IntArray, block: IntArray, n_groups: int,
                  ) -> tuple[IntArray, IntArray]:
    """Every (i, j) of items of one group (items sorted by group) that are not both of one
    block (a block >= 0: sides of one ring, which never cross but at their ends)."""
    # Within each group, items by block, every item of no block (-1) a block of its own.
    own = np.where(block < 0, -1 - np.arange(len(group)), block)
    # By group, then by block: one stable sort of both in one integer (own + len(group)
    # is from 0 to len(group) + the largest block).
    span = len(group) + int(block.max(initial=-1)) + 1
    perm = np.argsort(group.astype(np.int64) * span + (own + len(group)), kind="stable")
    g, o = group[perm], own[perm]
    counts = np.bincount(g, minlength=n_groups)
    ends = np.cumsum(counts)
    # Where each item's block ends: the next item of another block or group.
    change = np.flatnonzero((g[1:] != g[:-1]) | (o[1:] != o[:-1])) + 1
    block_end = np.append(change, len(g))[np.searchsorted(change, np.arange(len(g)),
                                                          side="right")]
    after = ends[g] - block_end
    i = np.repeat(np.arange(len(g)), after)
    within = kernel.within_runs(after)
    j = np.repeat(block_end, after) + within
    return perm[i], perm[j]


def _ray_line(u: FloatArray, x: FloatArray, d: FloatArray) -> FloatArray:
    """Distance along unit rays u (from the origin) to the lines through x with direction
    d (rows paired)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = _cross(x, d) / _cross(u, d)
    return out


def hidden_areas(p: FloatArray, body: FloatArray, seg_req: IntArray, a: FloatArray,
                 b: FloatArray, weight: FloatArray, levels: FloatArray,
                 group: IntArray | None = None, far: FloatArray | None = None) -> FloatArray:
    """Per request r (viewpoint p[r], a convex body with vertices body[r] (R, K, 2), in ring
    order) and threshold levels[l] (descending): the area of the body hidden from p by the
    union of the shadows of the request's segments (rows of seg_req, a-b, weight) with a
    weight of at least levels[l]. Exact: seen from p, along each ray the union of shadows
    is the half-line beyond the nearest segment, so the body splits into angular intervals
    (between the angles of body corners, segment ends and the crossings of segments with
    each other and with the body's sides) in each of which the hidden part lies between two
    fixed lines, a sum of triangles. The caller keeps p outside each body and off every
    segment's line through it. Segments of one `group` (>= 0: the sides of one simple
    ring) meet only at their ends, which are breakpoints already: their crossings are not
    looked for.

    A segment with a finite `far` (> 1) casts a shadow that stops short: at its own copy
    scaled from p by that factor (a wall whose height band counts over a stretch of the
    way only, `truncated_shadows`). Its far edge is one more line: a breakpoint wherever it
    crosses a body side or another segment, and along each ray of a request with such a
    shadow the hidden part is the union of the stretches, added up piece by piece."""
    n, k = len(p), body.shape[1]
    n_levels = len(levels)
    out: FloatArray = np.zeros((n, n_levels))
    if n == 0 or len(seg_req) == 0:
        return out
    counts = np.bincount(seg_req, minlength=n)
    if counts.max() > MAX_SEGMENTS:
        # A request with more segments than any map puts near a sight (a field of
        # thousands of short walls) is added up by polygon union instead: the breakpoint
        # method pairs its segments two by two (20,000 of them: 200 million pairs, 4 GB).
        big = counts > MAX_SEGMENTS
        small = np.flatnonzero(~big)
        rows = ~big[seg_req]
        number = np.cumsum(~big) - 1
        out[small] = hidden_areas(p[small], body[small], number[seg_req[rows]], a[rows],
                                  b[rows], weight[rows], levels,
                                  None if group is None else group[rows],
                                  None if far is None else far[rows])
        for r in np.flatnonzero(big).tolist():
            mine = seg_req == r
            out[r] = _hidden_by_union(p[r], body[r], a[mine], b[mine], weight[mine], levels,
                                      None if far is None else far[mine])
        return out
    v = body - p[:, None, :]
    c = kernel.over_points(np.add, v) / k
    c = c / np.hypot(c[:, 0], c[:, 1])[:, None]
    cperp = np.column_stack([-c[:, 1], c[:, 0]])
    # Each request's axis and its normal, as one table: the rows of a set of requests are
    # gathered once (`axes`), for every angle or ray they are used for.
    axis_table = np.column_stack([c, cperp])

    def axes(r: IntArray) -> tuple[FloatArray, ...]:
        rows = np.take(axis_table, r, axis=0)
        return tuple(rows[:, j] for j in range(4))

    def angle(ax: tuple[FloatArray, ...], x: FloatArray) -> FloatArray:
        c0, c1, n0, n1 = ax
        out: FloatArray = np.arctan2(x[:, 0] * n0 + x[:, 1] * n1, x[:, 0] * c0 + x[:, 1] * c1)
        return out

    rr = np.repeat(np.arange(n), k)
    phi = angle(axes(rr), v.reshape(-1, 2)).reshape(n, k)
    lo, hi = kernel.over_points(np.minimum, phi), kernel.over_points(np.maximum, phi)
    p_seg = take_rows(p, seg_req)
    A = a - p_seg
    B = b - p_seg
    # Each segment's angular span within its body's cone (a segment passing behind p is
    # given the whole cone: the ray tests below settle it).
    seg_axes = axes(seg_req)
    aa, ab = angle(seg_axes, A), angle(seg_axes, B)
    s_lo, s_hi = np.minimum(aa, ab), np.maximum(aa, ab)
    behind = s_hi - s_lo > np.pi
    s_lo = np.where(behind, lo[seg_req], np.maximum(s_lo, lo[seg_req]))
    s_hi = np.where(behind, hi[seg_req], np.minimum(s_hi, hi[seg_req]))
    # A segment outside its body's cone, or wholly beyond the body's farthest corner,
    # shades none of it: left out before the breakpoints and crossings, which cost per
    # segment and per two segments of a request. (Its breakpoints would be clipped to the
    # cone's edges, already breakpoints, and it is never nearer than the body's far side
    # where it is the nearest segment: the area is the same.) A hex target's cells share
    # the segments found for the whole target, most of them off each cell.
    D = B - A
    reach2 = kernel.over_points(np.maximum, v[..., 0] * v[..., 0] + v[..., 1] * v[..., 1])
    u = np.clip(-np.einsum("ij,ij->i", A, D) / np.maximum(np.einsum("ij,ij->i", D, D), 1e-300),
                0.0, 1.0)
    closest = A + D * u[:, None]
    # (A segment passing behind p has the whole cone: s_lo < s_hi.)
    useful = (s_lo < s_hi) & (closest[:, 0] * closest[:, 0] + closest[:, 1] * closest[:, 1]
                              <= reach2[seg_req])
    if not useful.all():
        seg_req = seg_req[useful]
        A, B, D = (np.compress(useful, x, axis=0) for x in (A, B, D))
        weight, aa, ab = weight[useful], aa[useful], ab[useful]
        s_lo, s_hi = s_lo[useful], s_hi[useful]
        if group is not None:
            group = group[useful]
        if far is not None:
            far = far[useful]
        if len(seg_req) == 0:
            return out
    # Breakpoints: body corners, segment ends, segment x body side, segment x segment. A
    # shadow's far edge is one more segment (its ends are on its segment's rays): the
    # lines l_* are the segments, then the far edges.
    # A request none of whose segments is left shades nothing: its corners make no
    # breakpoints, and it has no intervals (its area stays 0). (A fifth of a hex scene's
    # cell requests: a target's cells share the segments found for the whole target.)
    has = np.zeros(n, dtype=bool)
    has[seg_req] = True
    bp_r = [np.repeat(np.flatnonzero(has), k), seg_req, seg_req]
    bp_t = [phi[has].reshape(-1), aa, ab]
    block = np.full(len(seg_req), -1, dtype=np.intp) if group is None else group
    cut = np.empty(0, dtype=np.intp) if far is None else np.flatnonzero(np.isfinite(far))
    if len(cut):
        assert far is not None
        scale = far[cut][:, None]
        l_req = np.concatenate([seg_req, seg_req[cut]])
        l_a, l_b = np.concatenate([A, A[cut] * scale]), np.concatenate([B, B[cut] * scale])
        l_d = np.concatenate([D, D[cut] * scale])
        l_lo, l_hi = np.concatenate([s_lo, s_lo[cut]]), np.concatenate([s_hi, s_hi[cut]])
        block = np.concatenate([block, np.full(len(cut), -1, dtype=np.intp)])
    else:
        l_req, l_a, l_b, l_d, l_lo, l_hi = seg_req, A, B, D, s_lo, s_hi
    edge0 = v
    edge_d = kernel.next_corners(v) - v
    # Only a segment whose box meets its body's box can cross one of the body's sides:
    # the others (most segments of a hex target's cells lie in front of the cell, between
    # it and the viewpoint) are not paired with the body's k sides. The boxes are grown
    # by _BOX_SLACK: the crossings are worked out from A + D, which is B up to rounding.
    body_lo = kernel.over_points(np.minimum, v)[l_req] - _BOX_SLACK
    body_hi = kernel.over_points(np.maximum, v)[l_req] + _BOX_SLACK
    meets = (np.minimum(l_a, l_b) <= body_hi) & (np.maximum(l_a, l_b) >= body_lo)
    near = np.flatnonzero(meets[:, 0] & meets[:, 1])
    sr = np.repeat(near, k)
    ke = np.tile(np.arange(k), len(near))
    req_e = l_req[sr]
    flat = req_e * k + ke  # (rows of the (request, corner) sides, whole rows by take)
    e0 = np.take(edge0.reshape(-1, 2), flat, axis=0)
    ed = np.take(edge_d.reshape(-1, 2), flat, axis=0)
    hit, pt = _segments_cross(take_rows(l_a, sr), take_rows(l_d, sr), e0, ed)
    bp_r.append(req_e[hit])
    bp_t.append(angle(axes(req_e[hit]), pt))
    i, j = _pairs_within(l_req, block, n)
    # Only segments whose spans overlap can cross where it matters.
    overlap = (l_lo[i] <= l_hi[j]) & (l_lo[j] <= l_hi[i])
    i, j = i[overlap], j[overlap]
    if len(i):
        hit, pt = _segments_cross(take_rows(l_a, i), take_rows(l_d, i), take_rows(l_a, j),
                                  take_rows(l_d, j))
        bp_r.append(l_req[i][hit])
        bp_t.append(angle(axes(l_req[i][hit]), pt))
    br = np.concatenate(bp_r)
    bt = np.clip(np.concatenate(bp_t), lo[br], hi[br])
    if int(br.max(initial=0)) < _RADIX_REQUESTS:
        # By angle, then by request: a stable sort of 16-bit keys is a radix sort, twice
        # as fast as lexsort here (breakpoints of one angle in one request, in any order,
        # make no interval).
        by_angle = np.argsort(bt)
        order = by_angle[np.argsort(br[by_angle].astype(np.uint16), kind="stable")]
    else:
        order = np.lexsort((bt, br))
    br, bt = br[order], bt[order]
    same = br[1:] == br[:-1]
    width = bt[1:] - bt[:-1]
    keep = same & (width > 1e-13)
    ir = br[:-1][keep]
    t0, t1 = bt[:-1][keep], bt[1:][keep]
    if len(ir) == 0:
        return out
    tm = (t0 + t1) / 2
    # Each segment against the intervals within its span (found by merging the spans'
    # ends into the sorted intervals): distance along each interval's middle ray.
    # (Both ends in one search: before s_lo strictly is not after the float below it.)
    first, last = np.split(_count_before(
        ir, tm, np.concatenate([seg_req, seg_req]),
        np.concatenate([np.nextafter(s_lo, -np.inf), s_hi])), 2)
    reps = np.maximum(last - first, 0)
    # Only the intervals some segment's span holds can be shaded: the others are left out
    # (each interval's sums are its own; their order is kept, renumbered).
    m_all = len(ir)
    spanned = reps > 0
    edge_n = np.bincount(first[spanned], minlength=m_all + 1) \
        - np.bincount(last[spanned], minlength=m_all + 1)
    held = np.cumsum(edge_n[:m_all]) > 0
    if not held.all():
        before = np.concatenate([[0], np.cumsum(held)])
        first, last = before[first], before[last]
        ir, t0, t1, tm = ir[held], t0[held], t1[held], tm[held]
        if len(ir) == 0:
            return out

    c0, c1, n0, n1 = axes(ir)

    def ray(t: FloatArray) -> FloatArray:
        ct, st = np.cos(t), np.sin(t)
        return np.column_stack([ct * c0 + st * n0, ct * c1 + st * n1])

    u0, u1, um = ray(t0), ray(t1), ray(tm)
    # The body's near and far sides along each interval (fixed within it).
    m = len(ir)
    ux = np.repeat(um, k, axis=0)
    ee0 = take_rows(edge0, ir).reshape(-1, 2)
    eed = take_rows(edge_d, ir).reshape(-1, 2)
    dist = _ray_line(ux, ee0, eed).reshape(m, k)
    # A side the ray meets from outside (p sees it) is a near side: the ray crosses its
    # line heading inwards. Orientation: the body's ring may run either way.
    ring_sign = np.sign(_cross(v, kernel.next_corners(v)).sum(axis=1))
    inward = (_cross(eed, ux) * np.repeat(ring_sign[ir], k)).reshape(m, k) > 0
    finite = np.isfinite(dist)
    near_d = np.where(inward & finite, dist, -np.inf)
    far_d = np.where(~inward & finite, dist, np.inf)
    near_e, far_e = near_d.argmax(axis=1), far_d.argmin(axis=1)
    # (Reduced column by column and gathered from the flattened sides: numpy's reduce
    # over a short last axis, and a gather by two index arrays, cost ten times as much.)
    rin = kernel.over_points(np.maximum, near_d)
    rout = kernel.over_points(np.minimum, far_d)
    side_rows = ir * k
    ne0, ned = (np.take(e.reshape(-1, 2), side_rows + near_e, axis=0) for e in (edge0, edge_d))
    fe0, fed = (np.take(e.reshape(-1, 2), side_rows + far_e, axis=0) for e in (edge0, edge_d))
    sg = np.repeat(np.arange(len(seg_req)), reps)
    it = np.repeat(first, reps) + kernel.within_runs(reps)
    u_it, a_sg, d_sg = np.take(um, it, axis=0), np.take(A, sg, axis=0), np.take(D, sg, axis=0)
    den = _cross(u_it, d_sg)
    with np.errstate(divide="ignore", invalid="ignore"):
        tt = _cross(a_sg, d_sg) / den
        ss = _cross(a_sg, u_it) / den
    spans = (den != 0) & (tt > 0) & (ss >= 0) & (ss <= 1)
    sin = np.sin(t1 - t0)
    far0, far1 = _ray_line(u0, fe0, fed), _ray_line(u1, fe0, fed)
    # The line the shadow starts on along an interval: its body's near side (row s) when
    # the nearest segment is in front of the body, else that segment (row m + w): one
    # gather from the two stacked.
    from_x0, from_xd = np.concatenate([ne0, A]), np.concatenate([ned, D])
    # Intervals of a request with a shadow that stops short are added up as unions of
    # stretches (`_stretches_area`); the others by their nearest segment.
    pieces = np.zeros(len(sg), dtype=bool)
    if len(cut):
        assert far is not None
        stops = np.zeros(n, dtype=bool)
        stops[seg_req[cut]] = True
        pieces = stops[ir][it]
        # The line the shadow ends on: the body's far side (row s) or the segment's far
        # edge (row m + w).
        scale = np.where(np.isfinite(far), far, 1.0)[:, None]
        to_x0, to_xd = np.concatenate([fe0, A * scale]), np.concatenate([fed, D * scale])
    # Levels descend: a row counts from the first level its segment's weight reaches on,
    # so the nearest segment of each interval at a level is the nearer of the one at the
    # level above and the nearest of the rows that count from this level on. Each row is
    # looked at once, and an interval's area worked out again only where its nearest
    # segment changed (realms' dressed scenes have eight levels).
    first_level = np.where(spans & ~pieces,
                           np.searchsorted(-levels, -weight, side="left")[sg], n_levels)
    nearest = np.full(m, np.inf)
    # Which segment is the nearest (ties: the last; they coincide along the ray).
    who = np.full(m, -1, dtype=np.intp)
    area = np.zeros(m)
    for level in range(n_levels):
        if len(cut):
            assert far is not None
            k = np.flatnonzero(spans & (weight[sg] >= levels[level]) & pieces)
            _stretches_area(out[:, level], k, it, sg, tt, far, rin, rout, ir, u0, u1, sin,
                            (from_x0, from_xd), (to_x0, to_xd))
        new = first_level == level
        if new.any():
            d = np.where(new, tt, np.inf)
            best = np.full(m, np.inf)
            np.minimum.at(best, it, d)
            at = new & (d == best[it])
            cand = np.full(m, -1, dtype=np.intp)
            cand[it[at]] = sg[at]
            moved = (best < nearest) | ((best == nearest) & (cand > who))
            changed = np.flatnonzero(moved)
            who[changed] = cand[changed]
            nearest[changed] = best[changed]
            s = changed[nearest[changed] < rout[changed]]
            w = who[s]
            start = np.where(nearest[s] <= rin[s], s, m + w)
            x0, xd = take_rows(from_x0, start), take_rows(from_xd, start)
            near0 = _ray_line(take_rows(u0, s), x0, xd)
            near1 = _ray_line(take_rows(u1, s), x0, xd)
            area[s] = 0.5 * sin[s] * (far0[s] * far1[s] - near0 * near1)
        shade = np.flatnonzero((who >= 0) & (nearest < rout))
        if len(shade):
            out[:, level] += np.bincount(ir[shade], weights=area[shade], minlength=n)
    return out


def _stretches_area(out: FloatArray, k: IntArray, it: IntArray, sg: IntArray,
                    tt: FloatArray, far: FloatArray, rin: FloatArray, rout: FloatArray,
                    ir: IntArray, u0: FloatArray, u1: FloatArray, sin: FloatArray,
                    start_lines: tuple[FloatArray, FloatArray],
                    end_lines: tuple[FloatArray, FloatArray]) -> None:
    """`hidden_areas`' sum over intervals where some shadow stops short, added into out
    (per request): rows k of the (interval it, segment sg) pairs, the segment tt along the
    interval's middle ray, its shadow from there to tt * far. Along the ray each shadow is
    a stretch, cut to the body (rin to rout); within the interval the order of every line
    is fixed, so the stretches that overlap along the middle ray make one piece, between
    the line its first one starts on and the line its farthest one ends on, whatever the
    ray. A piece is a difference of two triangles."""
    if len(k) == 0:
        return
    ik, sk = it[k], sg[k]
    near_t = tt[k]
    far_t = near_t * far[sk]
    start, end = np.maximum(near_t, rin[ik]), np.minimum(far_t, rout[ik])
    live = start < end
    ik, sk, near_t, far_t = ik[live], sk[live], near_t[live], far_t[live]
    start, end = start[live], end[live]
    if len(ik) == 0:
        return
    m = len(rin)
    start_id = np.where(near_t <= rin[ik], ik, m + sk)
    end_id = np.where(far_t >= rout[ik], ik, m + sk)
    # Stretches by interval, then start; the farthest end so far, within each interval,
    # as the running maximum of each end's rank among all ends sorted by (interval, end):
    # an earlier interval's ends rank below every end of a later one.
    order = np.lexsort((start, ik))
    by_end = np.lexsort((end, ik))
    rank = np.empty(len(ik), dtype=np.intp)
    rank[by_end] = np.arange(len(ik))
    running = np.maximum.accumulate(rank[order])
    reached = end[by_end[running]]
    io, so = ik[order], start[order]
    head = np.ones(len(io), dtype=bool)
    head[1:] = (io[1:] != io[:-1]) | (so[1:] > reached[:-1])
    heads = np.flatnonzero(head)
    tails = np.append(heads[1:], len(io)) - 1
    gi = io[heads]
    gs = start_id[order[heads]]
    ge = end_id[by_end[running[tails]]]
    u0g, u1g = take_rows(u0, gi), take_rows(u1, gi)
    s0, sd = take_rows(start_lines[0], gs), take_rows(start_lines[1], gs)
    e0, ed = take_rows(end_lines[0], ge), take_rows(end_lines[1], ge)
    near0, near1 = _ray_line(u0g, s0, sd), _ray_line(u1g, s0, sd)
    far0, far1 = _ray_line(u0g, e0, ed), _ray_line(u1g, e0, ed)
    np.add.at(out, ir[gi], 0.5 * sin[gi] * (far0 * far1 - near0 * near1))


#: Shadows `_hidden_by_union` unites at a time.
_UNION_CHUNK = 256
#: Segments of one request past which `hidden_areas` unites polygons instead (the densest
#: request of the benchmark scenes, 200 tokens among 5,000 walls, has 170).
MAX_SEGMENTS = 1024


def _hidden_by_union(p: FloatArray, body: FloatArray, a: FloatArray, b: FloatArray,
                     weight: FloatArray, levels: FloatArray,
                     far: FloatArray | None = None) -> FloatArray:
    """`hidden_areas` of one request by GEOS: each segment's shadow (`shadow_polygons`, or
    for one that stops short `truncated_shadows`: the segment its near edge, 1 / far the
    stretch's start) cut to the body, those of a weight of at least each level united, and
    measured."""
    reach = 2.0 * float(np.hypot(body[:, 0] - p[0], body[:, 1] - p[1]).max()) + 1.0
    shadows = shapely.polygons(shadow_polygons(p, a, b, reach))
    if far is not None:
        cut = np.flatnonzero(np.isfinite(far))
        shadows[cut] = truncated_shadows(p, a[cut], b[cut], 1.0 / far[cut],
                                         np.ones(len(cut)), reach)
    shadows = repaired(shadows)
    whole = shapely.Polygon(body)
    on = shapely.intersection(shadows, whole)
    area = shapely.area(on)
    full = float(whole.area) * (1 - 1e-12)
    out: FloatArray = np.zeros(len(levels))
    for level, value in enumerate(levels.tolist()):
        sel = np.flatnonzero((weight >= value) & (area > 0))
        # The largest shadows first, _UNION_CHUNK at a time, until they hide the whole
        # body (then so do all of them: a dense field hides it after a few hundred, and
        # uniting every one of thousands took 0.7 s).
        sel = sel[np.argsort(-area[sel], kind="stable")]
        hidden: shapely.Geometry = shapely.Polygon()
        for c0 in range(0, len(sel), _UNION_CHUNK):
            hidden = shapely.union(hidden, shapely.union_all(on[sel[c0:c0 + _UNION_CHUNK]]))
            if float(hidden.area) >= full:
                break
        out[level] = float(whole.area) if float(hidden.area) >= full else float(hidden.area)
    return out


#: Pixels the boxes of `hidden_areas`' segments and bodies are grown by before the test
#: that pairs a segment with its body's sides (rounding is some 1e-11 px at map scales).
_BOX_SLACK = 1e-6

#: Requests up to which `hidden_areas` sorts its breakpoints by request with a radix sort
#: (16-bit keys).
_RADIX_REQUESTS = 1 << 16


def _count_before(ir: IntArray, tm: FloatArray, q_req: IntArray, q_t: FloatArray,
                  ) -> IntArray:
    """For each query (request, angle): the number of intervals, sorted by (request, middle
    angle) as `ir`, `tm` are, that come before it: those of earlier requests, and those
    of its own whose middle is not after the angle (strictly before it: ask with the float
    below the angle). A binary search in each query's own request's run, all queries a
    step at a time (a sort of intervals and queries together cost about three times as
    much)."""
    lo, hi = np.searchsorted(ir, q_req, side="left"), np.searchsorted(ir, q_req, side="right")
    # Invariant: the intervals of the run before lo are before the query, those from hi
    # on are not.
    while True:
        open_ = np.flatnonzero(lo < hi)
        if len(open_) == 0:
            break
        mid = (lo[open_] + hi[open_]) // 2
        before = tm[mid] <= q_t[open_]
        lo[open_] = np.where(before, mid + 1, lo[open_])
        hi[open_] = np.where(before, hi[open_], mid)
    out: IntArray = lo
    return out


def _segments_cross(a0: FloatArray, ad: FloatArray, b0: FloatArray, bd: FloatArray,
                    ) -> tuple[BoolArray, FloatArray]:
    """Where segments a0 + s ad and b0 + u bd (rows paired) cross or touch (not parallel),
    and the point."""
    den = _cross(ad, bd)
    w = b0 - a0
    with np.errstate(divide="ignore", invalid="ignore"):
        s = _cross(w, bd) / den
        u = _cross(w, ad) / den
    hit = (den != 0) & (s >= 0) & (s <= 1) & (u >= 0) & (u <= 1)
    return hit, (np.compress(hit, a0, axis=0)
                 + np.compress(hit, ad, axis=0) * s[hit][:, None])


def front_sides(poly: shapely.Polygon, rows: IntArray, sides: FloatArray, p: FloatArray,
                ) -> BoolArray:
    """Per side of a region's polygon (rows paired with viewpoints p[rows]): whether p sees
    its outer face. Seen from a point outside the polygon every ray enters it through such a
    side before it leaves through any other, so the shadows of these sides alone are the
    shadows of all of them (a simple ring; any other keeps every side)."""
    if not (poly.is_valid and poly.geom_type == "Polygon" and not poly.interiors):
        return np.ones(len(rows), dtype=bool)
    turn = 1.0 if poly.exterior.is_ccw else -1.0
    d = sides[:, 2:4] - sides[:, 0:2]
    out: BoolArray = _cross(d, p[rows] - sides[:, 0:2]) * turn < 0
    return out

