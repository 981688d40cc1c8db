"""Seams: where two creatures' spaces meet, so that a line running exactly there passes
between them with no gap.

Rule of this module: pure, vectorised facts about creatures' footprints, in pixels. A line
that runs along a creature's border does not enter its space (the kernel's convention,
`segments_enter_boxes`); but where two *different* creatures' spaces share that border (a
seam: two creatures side by side) the line runs through occupied ground all the way. Game
rules decide what such a line is worth (docs/rulesets.md, `degrees` choice 12); this module
only finds them. Two squares touching only at a corner share no seam (a line through that
point passes between them, as a creature may move diagonally between them).

- Square grids: seams are the stretches where two creatures' boxes share an edge (positive
  length).
- Hex grids: seams are sides shared by hexes of two different creatures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from geometry.kernel import FloatArray, IntArray, next_corners, within_runs

#: Pixels: how far from collinear (or from a corner) a line may be and still run along it
#: (coordinates are whole pixels or Foundry's hex formulas: far above rounding, far below
#: any real offset between a line and a border).
TOL = 1e-6


@dataclass(frozen=True, slots=True)
class Seams:
    """Seams: segments p -> q, each between the two creatures owners[k]."""

    p: FloatArray
    q: FloatArray
    owners: IntArray

    @property
    def empty(self) -> bool:
        return len(self.p) == 0


_NONE = Seams(np.zeros((0, 2)), np.zeros((0, 2)), np.zeros((0, 2), dtype=np.intp))


def _along(points: FloatArray, u: FloatArray) -> FloatArray:
    """Each point's (N, 2) coordinate along the direction u (2,): the product written out,
    not `points @ u`, which numpy hands to BLAS and its threads (docs/geometry.md)."""
    out: FloatArray = points[:, 0] * u[0] + points[:, 1] * u[1]
    return out


def box_seams(boxes: FloatArray) -> Seams:
    """Seams between creatures' boxes (n, 4: x0, y0, x1, y1) on a square grid,
    every pair at once (boxes that overlap share no seam: a rider on its mount). Only the
    pairs where an edge of one box lies on the line of the facing edge of the other are
    looked at, found by sorting the edges (a scene of 1,000 creatures has half a million
    pairs, and a few dozen seams); the seams come ordered by the pair's two creatures,
    vertical ones first, as `box_seams_reference` lists them."""
    n = len(boxes)
    if n < 2:
        return _NONE
    # Boxes of no area (an area's origin as a point creature) meet nothing along a seam.
    real = np.nonzero((boxes[:, 2] - boxes[:, 0] > TOL) & (boxes[:, 3] - boxes[:, 1] > TOL))[0]
    if len(real) < 2:
        return _NONE
    # Candidates: a box's right (bottom) edge within twice TOL of another's left (top)
    # edge, found by binary search in the sorted left (top) edges, and overlapping it by
    # more than TOL along that edge (a seam's length, as `_seams_of` requires: on a grid a
    # right edge lies on the line of every left edge of its column, 30,000 pairs of a
    # 1,000-creature scene for 64 seams); the exact tests below then decide, on these
    # pairs only, as on every pair.
    codes = []
    b = boxes[real]
    for axis in (0, 1):
        near_edge, far_edge = b[:, axis], b[:, axis + 2]
        order = np.argsort(near_edge, kind="stable")
        edges = near_edge[order]
        first = np.searchsorted(edges, far_edge - 2 * TOL, side="left")
        count = np.searchsorted(edges, far_edge + 2 * TOL, side="right") - first
        one = np.repeat(np.arange(len(real)), count)
        other = order[np.repeat(first, count) + within_runs(count)]
        lo, hi = 1 - axis, 3 - axis  # the other axis's sides
        along = np.minimum(b[one, hi], b[other, hi]) - np.maximum(b[one, lo], b[other, lo])
        one, other = one[along > TOL], other[along > TOL]
        codes.append(np.minimum(one, other) * len(real) + np.maximum(one, other))
    code = np.unique(np.concatenate(codes))
    ii, jj = code // len(real), code % len(real)
    keep = ii != jj
    return _seams_of(boxes, real[ii[keep]], real[jj[keep]])


def box_seams_reference(boxes: FloatArray) -> Seams:
    """`box_seams` by testing every pair of boxes (for tests)."""
    n = len(boxes)
    if n < 2:
        return _NONE
    real = np.nonzero((boxes[:, 2] - boxes[:, 0] > TOL) & (boxes[:, 3] - boxes[:, 1] > TOL))[0]
    if len(real) < 2:
        return _NONE
    ii, jj = np.triu_indices(len(real), 1)
    return _seams_of(boxes, real[ii], real[jj])


def _seams_of(boxes: FloatArray, i: IntArray, j: IntArray) -> Seams:
    """The seams between boxes i[k] and j[k] (i < j, pairs in ascending order)."""
    a, b = boxes[i], boxes[j]
    ox = np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0])  # overlap along x
    oy = np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1])
    # Which side touches: a's right edge on b's left (x = a.x1), or a's left on b's right.
    x_at = np.where(np.abs(a[:, 2] - b[:, 0]) <= TOL, a[:, 2],
                    np.where(np.abs(a[:, 0] - b[:, 2]) <= TOL, a[:, 0], np.nan))
    y_at = np.where(np.abs(a[:, 3] - b[:, 1]) <= TOL, a[:, 3],
                    np.where(np.abs(a[:, 1] - b[:, 3]) <= TOL, a[:, 1], np.nan))
    vertical = ~np.isnan(x_at) & (oy > TOL)
    horizontal = ~np.isnan(y_at) & (ox > TOL)
    y0 = np.maximum(a[:, 1], b[:, 1])
    x0 = np.maximum(a[:, 0], b[:, 0])
    p = np.concatenate([np.column_stack([x_at, y0])[vertical],
                        np.column_stack([x0, y_at])[horizontal]])
    q = np.concatenate([np.column_stack([x_at, y0 + oy])[vertical],
                        np.column_stack([x0 + ox, y_at])[horizontal]])
    owners = np.concatenate([np.column_stack([i, j])[vertical],
                             np.column_stack([i, j])[horizontal]]).astype(np.intp)
    return Seams(p.reshape(-1, 2), q.reshape(-1, 2), owners.reshape(-1, 2))


def hex_seams(cell_verts: FloatArray, cell_owner: IntArray) -> Seams:
    """Sides shared by hexes of two different creatures: `cell_verts` (K, 6, 2) the corners
    of every creature's hexes, `cell_owner` (K,) whose hex each is."""
    if len(cell_verts) < 2:
        return _NONE
    p = cell_verts.reshape(-1, 2)
    q = next_corners(cell_verts).reshape(-1, 2)
    owner = np.repeat(cell_owner, 6)
    # A side as an unordered pair of corners, rounded for matching (the two hexes compute
    # the same corners with the same formula, up to rounding), ordered on the rounded keys.
    kp = np.round(p / (TOL * 100)).astype(np.int64)
    kq = np.round(q / (TOL * 100)).astype(np.int64)
    swap = (kq[:, 0] < kp[:, 0]) | ((kq[:, 0] == kp[:, 0]) & (kq[:, 1] < kp[:, 1]))
    lo = np.where(swap[:, None], q, p)
    hi = np.where(swap[:, None], p, q)
    key = np.column_stack([np.where(swap[:, None], kq, kp), np.where(swap[:, None], kp, kq)])
    _, inverse, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    shared = counts[inverse] == 2
    idx = np.nonzero(shared)[0]
    if idx.size == 0:
        return _NONE
    order = idx[np.argsort(inverse[idx], kind="stable")]
    first, second = order[0::2], order[1::2]
    other = owner[first] != owner[second]
    first, second = first[other], second[other]
    owners = np.column_stack([owner[first], owner[second]]).astype(np.intp)
    return Seams(lo[first], hi[first], owners)


def seam_hits(seams: Seams, starts: FloatArray, ends: FloatArray) -> tuple[IntArray, IntArray]:
    """(line, creature) pairs: the lines (starts -> ends, (L, 2)) that run along a seam for
    some length, with both creatures of each. Only lines parallel to a seam are compared
    with seams, and only with those on their own line (sorted offsets)."""
    lines: list[IntArray] = []
    who: list[IntArray] = []
    if len(seams.p) and len(starts):
        d = ends - starts
        length = np.hypot(d[:, 0], d[:, 1])
        u_s = seams.q - seams.p
        u_len = np.hypot(u_s[:, 0], u_s[:, 1])
        u_s = u_s / u_len[:, None]
        # Seam directions: a handful (2 on squares, 3 on hex grids), canonical sign.
        flip = (u_s[:, 0] < -TOL) | ((np.abs(u_s[:, 0]) <= TOL) & (u_s[:, 1] < 0))
        canon = np.where(flip[:, None], -u_s, u_s)
        _, group = np.unique(np.round(canon, 6), axis=0, return_inverse=True)
        group = group.reshape(-1)
        # Offsets are compared to within rounding at the scene's scale.
        tol = TOL * (1.0 + float(np.abs(seams.p).max()))
        for g in range(int(group.max()) + 1):  # per direction (at most three)
            sel_s = np.nonzero(group == g)[0]
            u = canon[sel_s].mean(axis=0)
            u = u / np.hypot(u[0], u[1])
            cross = np.abs(d[:, 0] * u[1] - d[:, 1] * u[0])
            sel_l = np.nonzero((length > 0) & (cross <= TOL * np.maximum(length, 1.0)))[0]
            if not sel_l.size:
                continue
            nrm = np.array([-u[1], u[0]])
            off_s = _along(seams.p[sel_s], nrm)
            order = np.argsort(off_s, kind="stable")
            sel_s, off_s = sel_s[order], off_s[order]
            off_l = _along(starts[sel_l], nrm)
            lo = np.searchsorted(off_s, off_l - tol, side="left")
            hi = np.searchsorted(off_s, off_l + tol, side="right")
            count = hi - lo
            if not count.any():
                continue
            ln = np.repeat(sel_l, count)
            k = sel_s[np.repeat(lo, count) + within_runs(count)]
            # Overlap along the direction, of positive length.
            a0, a1 = _along(starts[ln], u), _along(ends[ln], u)
            b0, b1 = _along(seams.p[k], u), _along(seams.q[k], u)
            overlap = (np.minimum(np.maximum(a0, a1), np.maximum(b0, b1))
                       - np.maximum(np.minimum(a0, a1), np.minimum(b0, b1)))
            ok = overlap > TOL
            for side in (0, 1):
                lines.append(ln[ok])
                who.append(seams.owners[k[ok], side])
    if not lines:
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty
    return np.concatenate(lines).astype(np.intp), np.concatenate(who).astype(np.intp)
