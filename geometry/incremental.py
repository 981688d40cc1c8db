"""Which pairs a change can affect: the spatial side of incremental recomputation.

Rule of this module: compare two snapshots of a scene and return every ordered pair of
creatures whose annotation may differ, erring only on the side of too many. Every ruleset
draws its lines inside the convex hull of the two creatures' spaces, so a pair can change
only when one of its creatures changed, when something that changed (a creature's old or
new space, a wall's old or new segment) meets that hull, or through flanking, which depends
on who threatens the target.
"""

from __future__ import annotations

import numpy as np

from geometry.kernel import BoolArray, FloatArray, enter_paired
from geometry.model import CreatureGeom, SceneGeom
from geometry.square import grid_steps_many, space, within_reach_many

Pair = tuple[str, str]


def affected_pairs(old: SceneGeom, new: SceneGeom) -> set[Pair] | None:
    """Ordered (attacker, target) id pairs of `new` whose annotations may differ from
    `old`'s; None when everything may (grid, regions or water changed)."""
    if (old.grid != new.grid or old.regions != new.regions or old.water != new.water
            or old.underwater != new.underwater):
        return None
    grid = new.grid
    before = {c.id: c for c in old.creatures}
    after = {c.id: c for c in new.creatures}
    changed = {i for i in before.keys() | after.keys() if before.get(i) != after.get(i)}
    # A rider fights from its mount's squares: it changes whenever its mount does.
    changed |= {c.id for c in new.creatures if c.mount is not None and c.mount in changed}
    old_walls = {w.id: w for w in old.walls}
    new_walls = {w.id: w for w in new.walls}
    walls = [w for i in old_walls.keys() | new_walls.keys()
             for w in (old_walls.get(i), new_walls.get(i))
             if old_walls.get(i) != new_walls.get(i) and w is not None]
    ids = [c.id for c in new.creatures]
    n = len(ids)
    out: set[Pair] = set()
    if n < 2 or (not changed and not walls):
        return out
    # Obstacles that moved, appeared or vanished: boxes (creatures, walls' bounding boxes).
    boxes = [space(c, grid) for i in changed for c in (before.get(i), after.get(i))
             if c is not None]
    boxes += [(min(w.x0, w.x1), min(w.y0, w.y1), max(w.x0, w.x1), max(w.y0, w.y1))
              for w in walls]
    spaces = np.array([space(c, grid) for c in new.creatures], dtype=np.float64)
    a_idx, t_idx = np.triu_indices(n, k=1)
    hit = _hulls_meet(spaces, a_idx, t_idx, np.array(boxes, dtype=np.float64))
    for a, t in zip(a_idx[hit].tolist(), t_idx[hit].tolist(), strict=True):
        out.add((ids[a], ids[t]))
        out.add((ids[t], ids[a]))
    for i in changed & after.keys():
        out.update((i, j) for j in ids if j != i)
        out.update((j, i) for j in ids if j != i)
    # Flanking: attacks on a target whose threats may have changed (a pair above in which
    # the attacker can reach the target), or near a changed creature's old or new place,
    # by anyone who can reach that target.
    targets = _threatened(new, out)
    targets |= _near(new.creatures, [c for i in changed for c in (before.get(i), after.get(i))
                                     if c is not None], new)
    out |= _reaching(new, targets)
    return out


def _threatened(scene: SceneGeom, pairs: set[Pair]) -> set[str]:
    """Targets of those pairs whose attacker is within twice its natural reach of them: the
    only pairs whose change can change who flanks."""
    if not pairs:
        return set()
    grid = scene.grid
    index = {c.id: k for k, c in enumerate(scene.creatures)}
    spaces = np.array([space(c, grid) for c in scene.creatures], dtype=np.float64)
    reach = np.array([c.reach for c in scene.creatures], dtype=np.float64)
    ordered = sorted(pairs)
    a = np.array([index[p[0]] for p in ordered], dtype=np.intp)
    t = np.array([index[p[1]] for p in ordered], dtype=np.intp)
    sx, sy = grid_steps_many(spaces[a], spaces[t], grid.size)
    near = within_reach_many(sx, sy, 2 * reach[a])
    return {p[1] for p, ok in zip(ordered, near.tolist(), strict=True) if ok}


def _hulls_meet(spaces: FloatArray, a: np.ndarray, t: np.ndarray,
                boxes: FloatArray) -> BoolArray:
    """Per pair (a[k], t[k]): may the convex hull of the two spaces meet any of the boxes?

    The hull lies within the segment between the spaces' centres swept by a square as big
    as the larger space, so the test is that segment against each box grown by that much
    (closed: touching counts).
    """
    if len(a) == 0 or len(boxes) == 0:
        return np.zeros(len(a), dtype=bool)
    sa, st = spaces[a], spaces[t]
    ca = np.column_stack([(sa[:, 0] + sa[:, 2]) / 2, (sa[:, 1] + sa[:, 3]) / 2])
    ct = np.column_stack([(st[:, 0] + st[:, 2]) / 2, (st[:, 1] + st[:, 3]) / 2])
    half = np.maximum(np.maximum(sa[:, 2] - sa[:, 0], sa[:, 3] - sa[:, 1]),
                      np.maximum(st[:, 2] - st[:, 0], st[:, 3] - st[:, 1])) / 2
    out = np.zeros(len(a), dtype=bool)
    for x0, y0, x1, y1 in boxes:
        # Grow each box by the pair's half-size (and a pixel, so touching counts).
        grown = np.column_stack([x0 - half - 1, y0 - half - 1, x1 + half + 1, y1 + half + 1])
        # A segment meets a box if an end is inside or it passes through the interior.
        inside = ((ca[:, 0] > grown[:, 0]) & (ca[:, 0] < grown[:, 2])
                  & (ca[:, 1] > grown[:, 1]) & (ca[:, 1] < grown[:, 3]))
        out |= inside | enter_paired(ca, ct, grown)
    return out


def _near(creatures: tuple[CreatureGeom, ...], movers: list[CreatureGeom],
          scene: SceneGeom) -> set[str]:
    """Creatures a mover (at its old or new place) could threaten or be adjacent to."""
    if not movers or not creatures:
        return set()
    grid = scene.grid
    spaces = np.array([space(c, grid) for c in creatures], dtype=np.float64)
    found: set[str] = set()
    for m in movers:
        ms = np.repeat(np.array([space(m, grid)], dtype=np.float64), len(creatures), axis=0)
        sx, sy = grid_steps_many(ms, spaces, grid.size)
        reach = np.full(len(creatures), max(m.reach * 2, 10.0))
        near = within_reach_many(sx, sy, reach)
        found.update(c.id for c, ok in zip(creatures, near.tolist(), strict=True) if ok)
    return found


def _reaching(scene: SceneGeom, targets: set[str]) -> set[Pair]:
    """(a, t) for each target and every creature within twice its natural reach of it."""
    if not targets:
        return set()
    grid = scene.grid
    cs = scene.creatures
    spaces = np.array([space(c, grid) for c in cs], dtype=np.float64)
    reach = np.array([c.reach for c in cs], dtype=np.float64)
    out: set[Pair] = set()
    for t in targets:
        k = next((i for i, c in enumerate(cs) if c.id == t), None)
        if k is None:
            continue
        ts = np.repeat(spaces[k:k + 1], len(cs), axis=0)
        sx, sy = grid_steps_many(spaces, ts, grid.size)
        near = within_reach_many(sx, sy, 2 * reach)
        out.update((c.id, t) for c, ok in zip(cs, near.tolist(), strict=True)
                   if ok and c.id != t)
    return out
