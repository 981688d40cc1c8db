"""Rules-rich variants of the benchmark scenes, for equality checks and the degrees figures.

`dress(geom, seed)` returns the generated scene (bench/scenes.py) with, derived from
`random.Random(seed)` only: tokens gathered around others (so that they flank), at several
elevations and heights, with other reaches,
GM cover floors, Take Cover, swim Speeds and riders on mounts; walls with Wall Height bands
(bottoms, tops or both); terrain regions of every obstacle kind; bodies of water. Nothing is
checked for plausibility (a rider's token may stand anywhere: the rules move it onto its
mount), so the scenes also reach odd cases real tables rarely draw.
"""

from __future__ import annotations

import random
from dataclasses import replace

from geometry.model import CreatureGeom, RegionGeom, RegionKind, SceneGeom, Size, WallGeom

ELEVATIONS = (0.0, 0.0, 0.0, 0.0, 5.0, 10.0, 20.0, -5.0)
STEPS = (-2, -1, -1, -1, 0, 1, 1, 1, 2)
FLOORS = (None, None, None, None, None, None, "lesser", "standard", "greater")
OBSTACLE_KINDS = (RegionKind.BLOCKING, RegionKind.COVER, RegionKind.IMPROVED,
                  RegionKind.OBSCURING)


def dress(geom: SceneGeom, seed: int, regions: int = 3, water: bool = True) -> SceneGeom:
    """The scene with the third dimension, terrain, water, mounts and token flags added."""
    rng = random.Random(f"covercast-dress:{seed}")
    size = geom.grid.size
    side_px = max((max(c.x, c.y) for c in geom.creatures), default=0.0) + 2 * size
    creatures = [_creature(rng, c) for c in geom.creatures]
    _crowd(rng, creatures, size)
    _mount_some(rng, creatures)
    walls = tuple(_wall(rng, w) for w in geom.walls)
    obstacles = tuple(_region(rng, f"r{k}", rng.choice(OBSTACLE_KINDS), side_px, size)
                      for k in range(regions))
    bodies: tuple[RegionGeom, ...] = ()
    if water:
        body = _region(rng, "pool", RegionKind.WATER, side_px, size)
        bodies = (replace(body, surface=rng.choice((3.0, 8.0, 30.0))),)
    return replace(geom, creatures=tuple(creatures), walls=walls, regions=obstacles,
                   water=bodies, underwater=rng.random() < 0.05)


def _creature(rng: random.Random, c: CreatureGeom) -> CreatureGeom:
    changes: dict[str, object] = {}
    if rng.random() < 0.35:
        changes["elevation"] = rng.choice(ELEVATIONS)
    if rng.random() < 0.15:
        changes["tall"] = rng.choice((2.0, 4.0, 6.0, 12.0, 30.0))
    if rng.random() < 0.2:
        changes["reach"] = rng.choice((0.0, 5.0, 10.0, 15.0, 20.0))
    changes["cover_floor"] = rng.choice(FLOORS)
    changes["take_cover"] = rng.random() < 0.1
    changes["swim"] = rng.random() < 0.3
    if rng.random() < 0.1:
        changes["size"] = rng.choice(tuple(Size))
    return replace(c, **changes)  # type: ignore[arg-type]


def _crowd(rng: random.Random, creatures: list[CreatureGeom], size: float) -> None:
    """Gather a few tokens around others (so that they flank), on the grid or not."""
    order = list(range(len(creatures)))
    rng.shuffle(order)
    while len(order) >= 3:
        target = creatures[order.pop()]
        side = rng.choice((1, -1, 1, -1, 0))
        dx, dy = 0, 0
        for j in range(rng.randint(2, 4)):
            if not order:
                break
            k = order.pop()
            if j == 1 and rng.random() < 0.9:
                dx, dy = -dx, -dy  # across the target from the first: a flanking pair
            else:
                dx, dy = rng.choice(STEPS), rng.choice(STEPS)
                if (dx, dy) == (0, 0):
                    dx = 1
            creatures[k] = replace(creatures[k], x=target.x + dx * size,
                                   y=target.y + dy * size,
                                   disposition=side if rng.random() < 0.8 else -side,
                                   elevation=(target.elevation if rng.random() < 0.8
                                              else creatures[k].elevation))


def _mount_some(rng: random.Random, creatures: list[CreatureGeom]) -> None:
    """Some tokens ride others (never a chain: a mount rides nothing, a rider is no mount)."""
    order = list(range(len(creatures)))
    rng.shuffle(order)
    used: set[int] = set()
    for k in range(0, len(order) - 1, 2):
        if rng.random() >= 0.25:
            continue
        rider, steed = order[k], order[k + 1]
        if rider in used or steed in used:
            continue
        used |= {rider, steed}
        creatures[rider] = replace(creatures[rider], mount=creatures[steed].id)


def _wall(rng: random.Random, w: WallGeom) -> WallGeom:
    if rng.random() >= 0.3:
        return w
    bottom = rng.choice((None, None, 0.0, 4.0, 10.0))
    top = rng.choice((None, 3.0, 6.0, 12.0, 30.0))
    if bottom is not None and top is not None and bottom >= top:
        bottom = None
    return replace(w, bottom=bottom, top=top)


def _region(rng: random.Random, rid: str, kind: RegionKind, side_px: float,
            size: float) -> RegionGeom:
    """A rectangle or a triangle of a few squares somewhere on the map."""
    x0 = rng.uniform(0, max(size, side_px - 3 * size))
    y0 = rng.uniform(0, max(size, side_px - 3 * size))
    w, h = rng.uniform(0.5, 3) * size, rng.uniform(0.5, 3) * size
    x0, y0, w, h = (round(v, 2) for v in (x0, y0, w, h))
    points: tuple[tuple[float, float], ...]
    if rng.random() < 0.5:
        points = ((x0, y0), (x0 + w, y0), (x0 + w, y0 + h), (x0, y0 + h))
    else:
        points = ((x0, y0), (x0 + w, y0 + h / 2), (x0, y0 + h))
    return RegionGeom(rid, kind, points)
