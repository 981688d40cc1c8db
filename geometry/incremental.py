"""Which pairs a change can affect: the spatial side of incremental recomputation.

Rule of this module: compare two snapshots of a scene and return every ordered pair of
creatures whose annotation may differ, erring only on the side of too many. Every ruleset
draws its lines inside the convex hull of the two creatures' spaces, so a pair can change
only when one of its creatures changed, when something that changed (a creature's old or
new space, a wall's old or new segment) meets that hull, or through flanking, which depends
on who threatens the target. A ruleset that says where its lines start and end (its sight
points) gets the exact test for creatures instead of the hull: does one of those lines
enter the old or new space. Pairs reached only that way are told apart (`Affected`), since
a creature in the way changes only what creatures in the way count for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from geometry.caches import changed_positions
from geometry.columns import columns, has_riders, ids_of, upper_pairs
from geometry.kernel import (
    BoolArray,
    FloatArray,
    IntArray,
    enter_paired,
    take_rows,
    within_runs,
)
from geometry.model import FEET_PER_SQUARE, CreatureGeom, Grid, SceneGeom, WallGeom
from geometry.square import grid_steps_many, space, within_reach_many

Pair = tuple[str, str]

# Pixels of slack on the slanted separating axis (rounding must never drop a pair).
_SLACK = 1e-6


#: For creatures with these ids, in this order: an (n, n) array, [i, j] true when a creature
#: stepping into or out of the way of the lines from ids[i] to ids[j] can change that
#: annotation at all.
MayChange = Callable[[Sequence[str]], BoolArray]

#: Where a ruleset's lines between two creatures may start and end: every line it draws
#: between a and t runs between one of a's points and one of t's (None: anywhere in the
#: hull of their spaces).
SightPoints = Callable[[CreatureGeom, Grid], FloatArray]


@dataclass(frozen=True, slots=True)
class Affected:
    """Pairs a change may affect: `whole`, in every respect; `in_the_way`, only because a
    creature that moved, appeared or vanished may now stand, or no longer stand, in the way
    of their lines (so only what creatures in the way count for can differ)."""

    whole: frozenset[Pair]
    in_the_way: frozenset[Pair]

    def all(self) -> set[Pair]:
        return set(self.whole | self.in_the_way)


def affected_pairs(old: SceneGeom, new: SceneGeom,
                   sight_points: SightPoints | None = None) -> set[Pair] | None:
    """Ordered (attacker, target) id pairs of `new` whose annotations may differ from
    `old`'s; None when everything may (grid, regions or water changed). See `affected`."""
    found = affected(old, new, sight_points)
    return None if found is None else found.all()


def affected(old: SceneGeom, new: SceneGeom,
             sight_points: SightPoints | None = None,
             may_change: MayChange | None = None,
             only: set[Pair] | None = None) -> Affected | None:
    """The pairs of `new` whose annotations may differ from `old`'s, split as `Affected`
    says; None when everything may (grid, regions or water changed). With `sight_points`, a
    creature that moved, appeared or vanished affects a pair of others only when one of the
    segments between their points enters its space (old or new), the exact test the rules
    apply to creatures in the way; otherwise when it meets the hull of their spaces.
    `may_change` says, for every pair at once, whether a creature stepping into or out of
    the way of the lines from a to t can change that annotation at all (one already at a
    degree creatures cannot raise): pairs it rules out both ways round are left out of
    `in_the_way` untested.
    With `only`, the answer is exact for those pairs and may miss others: the obstacle
    tests run on them (either way round) and on the pairs whose threats decide flanking
    (an attacker within twice its reach of the target), not on every pair of the scene."""
    if (old.grid != new.grid or old.regions != new.regions or old.water != new.water
            or old.underwater != new.underwater):
        return None
    grid = new.grid
    old_ids, new_ids = ids_of(old.creatures), ids_of(new.creatures)
    before = dict(zip(old_ids, old.creatures, strict=True))
    after = dict(zip(new_ids, new.creatures, strict=True))
    # A scene keeps the creature of every unchanged token (the same object): equality is
    # asked only of the few that are new objects.
    if old_ids == new_ids:
        # The same creatures in the same order (a move): the new objects found by position,
        # in C (a loop over a 1,000-creature scene's ids was a tenth of a millisecond).
        changed = {new_ids[k] for k in changed_positions(new.creatures, old.creatures)
                   if old.creatures[k] != new.creatures[k]}
    else:
        changed = {i for i in before.keys() | after.keys()
                   if (b := before.get(i)) is not (c := after.get(i)) and b != c}
    # A rider fights from its mount's squares: it changes whenever its mount does.
    if changed and has_riders(new.creatures):
        changed |= {c.id for c in new.creatures if c.mount is not None and c.mount in changed}
    present = changed & after.keys()
    if only and present and all(p[0] in present or p[1] in present for p in only):
        # Every pair asked about has a creature that changed (a filtered table of the one
        # attacker that moved): all of them are recomputed whole, and nothing else is asked.
        return Affected(frozenset(only), frozenset())
    walls: list[WallGeom] = []
    if old.walls is not new.walls:  # a token change keeps the walls' tuple
        old_walls = {w.id: w for w in old.walls}
        new_walls = {w.id: w for w in new.walls}
        walls = [w for i in old_walls.keys() | new_walls.keys()
                 for w in (old_walls.get(i), new_walls.get(i))
                 if old_walls.get(i) != new_walls.get(i) and w is not None]
    ids = new_ids
    n = len(ids)
    out: set[Pair] = set()
    in_the_way: set[Pair] = set()
    if n < 2 or (not changed and not walls):
        return Affected(frozenset(), frozenset())
    # Obstacles that moved, appeared or vanished: creatures' spaces (a line counts one only
    # when it enters its open interior) and walls' bounding boxes (touching counts).
    spaces_changed = [space(c, grid) for i in changed for c in (before.get(i), after.get(i))
                      if c is not None]
    boxes = [(min(w.x0, w.x1), min(w.y0, w.y1), max(w.x0, w.x1), max(w.y0, w.y1))
             for w in walls]
    cols = columns(new.creatures, grid)
    spaces, reach, index = cols.spaces, cols.reach, cols.index
    # Pairs with a changed creature are recomputed whole (below): test only the others.
    moved = np.zeros(n, dtype=bool)
    moved[[index[i] for i in changed if i in index]] = True
    if only is None:
        a_idx, t_idx = upper_pairs(n)
    else:
        # The pairs asked about and those close enough for threats, never every pair of
        # the scene: a filtered table of a 1,000-creature scene asks for a thousand pairs,
        # of half a million (found by sorting along x, not by testing them all).
        pairs = [(index[p], index[q]) for p, q in only if p in index and q in index]
        pa, pt = np.array(pairs, dtype=np.intp).reshape(-1, 2).T
        ca, ct = _close_pairs(spaces, reach, grid.size)
        sx, sy = grid_steps_many(take_rows(spaces, ca), take_rows(spaces, ct), grid.size)
        threat = (within_reach_many(sx, sy, 2 * reach[ca])
                  | within_reach_many(sx, sy, 2 * reach[ct]))
        code = np.unique(np.concatenate([np.minimum(pa, pt) * n + np.maximum(pa, pt),
                                         ca[threat] * n + ct[threat]]))
        a_idx, t_idx = code // n, code % n
    keep = ~moved[a_idx] & ~moved[t_idx]
    a_idx, t_idx = a_idx[keep], t_idx[keep]
    hit = _hulls_meet(spaces, a_idx, t_idx, np.array(boxes, dtype=np.float64).reshape(-1, 4))
    changed_boxes = np.array(spaces_changed, dtype=np.float64).reshape(-1, 4)
    # The hull test only for pairs a creature in the way can still change one way round.
    candidates = ~hit
    if may_change is not None:
        may = may_change(ids).reshape(-1)
        candidates &= np.take(may, a_idx * n + t_idx) | np.take(may, t_idx * n + a_idx)
    near = np.zeros(len(a_idx), dtype=bool)
    at = np.flatnonzero(candidates)
    near[at] = _hulls_enter(spaces, a_idx[at], t_idx[at], changed_boxes)
    if sight_points is not None and near.any():
        near[near] = _lines_enter(new.creatures, grid, a_idx[near], t_idx[near],
                                  changed_boxes, sight_points)
    for a, t in zip(a_idx[hit].tolist(), t_idx[hit].tolist(), strict=True):
        out.add((ids[a], ids[t]))
        out.add((ids[t], ids[a]))
    for a, t in zip(a_idx[near].tolist(), t_idx[near].tolist(), strict=True):
        in_the_way.add((ids[a], ids[t]))
        in_the_way.add((ids[t], ids[a]))
    if only is None:
        for i in present:
            out.update((i, j) for j in ids if j != i)
            out.update((j, i) for j in ids if j != i)
    else:
        out.update(p for p in only if p[0] in present or p[1] in present)
    # Flanking: attacks on a target whose threats may have changed (a pair above in which
    # the attacker can reach the target), or near a changed creature's old or new place,
    # by anyone who can reach that target.
    # The same pairs as `out | in_the_way` so far, as positions.
    rows = np.array([index[i] for i in present], dtype=np.intp)
    others = np.tile(np.arange(n), len(rows))
    mine = np.repeat(rows, n)
    keep = others != mine
    mine, others = mine[keep], others[keep]
    pa = np.concatenate([a_idx[hit], t_idx[hit], a_idx[near], t_idx[near], mine, others])
    pt = np.concatenate([t_idx[hit], a_idx[hit], t_idx[near], a_idx[near], others, mine])
    targets = _threatened(grid, spaces, reach, ids, pa, pt)
    targets |= _near(new.creatures, spaces,
                     [c for i in changed for c in (before.get(i), after.get(i))
                      if c is not None], grid)
    out |= _reaching(ids, spaces, reach, index, targets, grid)
    return Affected(frozenset(out), frozenset(in_the_way - out))


def _close_pairs(spaces: FloatArray, reach: FloatArray,
                 size: float) -> tuple[IntArray, IntArray]:
    """Every unordered pair (i < j) of creatures whose spaces may lie within twice the
    larger natural reach of each other, erring only on the side of too many: a threat
    needs at most 2 x reach / 5 ft squares along x and along y (diagonals cost at least
    5 ft), so the gap between the spaces is below that many squares plus one, along
    both axes. Creatures sorted by the centre's x; each pairs with those ahead of it
    within reach along x, then the pairs too far along y are dropped."""
    n = len(spaces)
    if n < 2:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp)
    cx = (spaces[:, 0] + spaces[:, 2]) / 2
    cy = (spaces[:, 1] + spaces[:, 3]) / 2
    half = np.maximum(spaces[:, 2] - spaces[:, 0], spaces[:, 3] - spaces[:, 1]) / 2
    gap = (2 * float(reach.max(initial=0.0)) / FEET_PER_SQUARE + 2) * size
    span = gap + 2 * float(half.max()) + 1.0
    order = np.argsort(cx, kind="stable")
    xs = cx[order]
    ends = np.searchsorted(xs, xs + span, side="right")
    counts = ends - np.arange(n) - 1
    first = np.repeat(np.arange(n), counts)
    # Position k of the run of `first`: first + 1 + (k - the run's start).
    second = first + 1 + within_runs(counts)
    i, j = order[first], order[second]
    near = np.abs(cy[i] - cy[j]) <= span
    i, j = i[near], j[near]
    return np.minimum(i, j), np.maximum(i, j)


def _threatened(grid: Grid, spaces: FloatArray, reach: FloatArray, ids: Sequence[str],
                a: IntArray, t: IntArray) -> set[str]:
    """Targets of the pairs (a[k], t[k]) (positions in the scene's creatures, whose
    `spaces`, `reach` and `ids` these are) whose attacker is within twice its natural
    reach of them: the only pairs whose change can change who flanks."""
    if len(a) == 0:
        return set()
    sx, sy = grid_steps_many(take_rows(spaces, a), take_rows(spaces, t), grid.size)
    near = within_reach_many(sx, sy, 2 * reach[a])
    return {ids[k] for k in np.unique(t[near]).tolist()}


#: Pair-box tests one numpy operation makes at most (pairs x a block of boxes): the
#: tests below run on blocks of boxes, never a Python loop body per box (a `wall.create`
#: of 5,000 walls changes 5,000 boxes).
_BLOCK = 1 << 18


def _box_blocks(pairs: int, boxes: int) -> Iterator[slice]:
    """Slices of the boxes, each tested against every pair in one go."""
    step = max(1, _BLOCK // max(pairs, 1))
    return (slice(k, k + step) for k in range(0, boxes, step))


def _hulls_meet(spaces: FloatArray, a: np.ndarray, t: np.ndarray,
                boxes: FloatArray) -> BoolArray:
    """Per pair (a[k], t[k]): may the convex hull of the two spaces meet any of the boxes?

    The hull lies within the segment between the spaces' centres swept by a square as big
    as the larger space, so the test is that segment against each box grown by that much
    (closed: touching counts).
    """
    out = np.zeros(len(a), dtype=bool)
    if len(a) == 0 or len(boxes) == 0:
        return out
    sa, st = take_rows(spaces, a), take_rows(spaces, t)
    ca = np.column_stack([(sa[:, 0] + sa[:, 2]) / 2, (sa[:, 1] + sa[:, 3]) / 2])
    ct = np.column_stack([(st[:, 0] + st[:, 2]) / 2, (st[:, 1] + st[:, 3]) / 2])
    # Each box grown by the pair's half-size (and a pixel, so touching counts).
    grow = (np.maximum(np.maximum(sa[:, 2] - sa[:, 0], sa[:, 3] - sa[:, 1]),
                       np.maximum(st[:, 2] - st[:, 0], st[:, 3] - st[:, 1])) / 2 + 1)[:, None]
    cx, cy = ca[:, 0, None], ca[:, 1, None]
    for block in _box_blocks(len(a), len(boxes)):
        b = boxes[block]
        grown = np.stack([b[:, 0] - grow, b[:, 1] - grow, b[:, 2] + grow, b[:, 3] + grow],
                         axis=-1)  # (pairs, boxes, 4)
        # A segment meets a box if an end is inside or it passes through the interior.
        inside = ((cx > grown[..., 0]) & (cx < grown[..., 2])
                  & (cy > grown[..., 1]) & (cy < grown[..., 3]))
        out |= (inside | enter_paired(ca[:, None, :], ct[:, None, :], grown)).any(axis=1)
    return out


def _hulls_enter(spaces: FloatArray, a: IntArray, t: IntArray,
                 boxes: FloatArray) -> BoolArray:
    """Per pair (a[k], t[k]): does the open interior of any of the boxes (creatures' spaces)
    meet the convex hull of the two spaces? Only then can a line between them enter it.

    Separating axes: x, y, and the normal of the line between the spaces' centres. For two
    spaces of one size the hull is the bounding box cut by the strip along that line, so
    the three axes are exact; for different sizes the strip is wider than the hull (still
    never missing a box). A box that only touches the hull along x or y is not in it (a
    line along its edge does not enter it); on the slanted axis a hair of slack keeps
    rounding from dropping a box.
    """
    out = np.zeros(len(a), dtype=bool)
    if len(a) == 0 or len(boxes) == 0:
        return out
    sa, st = take_rows(spaces, a), take_rows(spaces, t)
    hx0, hy0 = np.minimum(sa[:, 0], st[:, 0])[:, None], np.minimum(sa[:, 1], st[:, 1])[:, None]
    hx1, hy1 = np.maximum(sa[:, 2], st[:, 2])[:, None], np.maximum(sa[:, 3], st[:, 3])[:, None]
    d = np.column_stack([(st[:, 0] + st[:, 2] - sa[:, 0] - sa[:, 2]) / 2,
                         (st[:, 1] + st[:, 3] - sa[:, 1] - sa[:, 3]) / 2])
    length = np.hypot(d[:, 0], d[:, 1])
    nx = np.where(length > 0, -d[:, 1] / np.where(length > 0, length, 1.0), 0.0)
    ny = np.where(length > 0, d[:, 0] / np.where(length > 0, length, 1.0), 0.0)

    def extent(b: FloatArray, nx: FloatArray, ny: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Where boxes `b` (broadcast against the normals) lie along each pair's normal."""
        c = ((b[..., 0] + b[..., 2]) / 2) * nx + ((b[..., 1] + b[..., 3]) / 2) * ny
        half = (np.abs(b[..., 2] - b[..., 0]) * np.abs(nx)
                + np.abs(b[..., 3] - b[..., 1]) * np.abs(ny)) / 2
        return c - half, c + half

    a_lo, a_hi = extent(sa, nx, ny)
    t_lo, t_hi = extent(st, nx, ny)
    lo, hi = np.minimum(a_lo, t_lo), np.maximum(a_hi, t_hi)
    for block in _box_blocks(len(a), len(boxes)):
        b = boxes[block]
        # The x and y axes first, for every pair: the slanted one only for the pairs whose
        # bounding box a box meets (most pairs of a big scene are far from a moved
        # creature).
        overlap = ((b[:, 0] < hx1) & (b[:, 2] > hx0) & (b[:, 1] < hy1) & (b[:, 3] > hy0))
        rows = np.flatnonzero(overlap.any(axis=1) & ~out)
        if rows.size == 0:
            continue
        b_lo, b_hi = extent(b[None, :, :], nx[rows, None], ny[rows, None])
        hit = (overlap[rows] & (b_lo < hi[rows, None] + _SLACK)
               & (b_hi > lo[rows, None] - _SLACK))
        out[rows] |= hit.any(axis=1)
    return out


def _lines_enter(creatures: tuple[CreatureGeom, ...], grid: Grid, a: IntArray, t: IntArray,
                 boxes: FloatArray, sight_points: SightPoints) -> BoolArray:
    """Per pair (a[k], t[k]): does any segment from a point of a to a point of t enter the
    open interior of any of the boxes (the kernel's own test for creatures' spaces)?"""
    used = np.union1d(a, t).tolist()
    pts = {k: sight_points(creatures[k], grid) for k in used}
    count = np.zeros(len(creatures), dtype=np.intp)
    count[used] = [len(p) for p in pts.values()]
    # Each count's points stacked once (creature k at row at[k]), gathered per group below.
    at = np.zeros(len(creatures), dtype=np.intp)
    stacks = {}
    for n_pts in set(count[used].tolist()):
        members = [k for k in used if count[k] == n_pts]
        at[members] = np.arange(len(members))
        stacks[n_pts] = np.stack([pts[k] for k in members])
    ka, kt = count[a], count[t]
    starts, ends, owner = [], [], []
    # Pairs grouped by how many points each side has: every segment of a group at once.
    for p_n, q_n in set(zip(ka.tolist(), kt.tolist(), strict=True)):
        sel = np.nonzero((ka == p_n) & (kt == q_n))[0]
        p = stacks[p_n][at[a[sel]]]  # (G, P, 2)
        q = stacks[q_n][at[t[sel]]]  # (G, Q, 2)
        starts.append(np.repeat(p, q_n, axis=1).reshape(-1, 2))
        ends.append(np.tile(q, (1, p_n, 1)).reshape(-1, 2))
        owner.append(np.repeat(sel, p_n * q_n))
    s, e, o = np.concatenate(starts), np.concatenate(ends), np.concatenate(owner)
    out = np.zeros(len(a), dtype=bool)
    # Every segment against a block of boxes (a move's two, old and new place: one block)
    # in one call.
    for block in _box_blocks(len(s), len(boxes)):
        entered = enter_paired(s[:, None, :], e[:, None, :], boxes[None, block, :])
        out[o[entered.any(axis=1)]] = True
    return out


def _near(creatures: tuple[CreatureGeom, ...], spaces: FloatArray,
          movers: list[CreatureGeom], grid: Grid) -> set[str]:
    """Creatures a mover (at its old or new place) could threaten or be adjacent to
    (`spaces`: the creatures' spaces, in order); every mover against every creature at
    once."""
    if not movers or not creatures:
        return set()
    n = len(creatures)
    ms = np.repeat(np.array([space(m, grid) for m in movers], dtype=np.float64), n, axis=0)
    sx, sy = grid_steps_many(ms, np.tile(spaces, (len(movers), 1)), grid.size)
    reach = np.repeat(np.array([max(m.reach * 2, 10.0) for m in movers]), n)
    near = within_reach_many(sx, sy, reach)
    return {creatures[k % n].id for k in np.flatnonzero(near).tolist()}


def _reaching(ids: Sequence[str], spaces: FloatArray, reach: FloatArray, index: dict[str, int],
              targets: set[str], grid: Grid) -> set[Pair]:
    """(a, t) for each target and every creature within twice its natural reach of it
    (every target against every creature at once)."""
    ks = [index[t] for t in targets if t in index]
    if not ks:
        return set()
    n = len(ids)
    t_idx = np.repeat(np.array(ks, dtype=np.intp), n)
    a_idx = np.tile(np.arange(n), len(ks))
    sx, sy = grid_steps_many(take_rows(spaces, a_idx), take_rows(spaces, t_idx), grid.size)
    near = within_reach_many(sx, sy, 2 * reach[a_idx]) & (a_idx != t_idx)
    hit = np.flatnonzero(near)
    return {(ids[a], ids[t]) for a, t in zip(a_idx[hit].tolist(), t_idx[hit].tolist(),
                                             strict=True)}
