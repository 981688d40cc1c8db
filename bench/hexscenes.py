"""Benchmark scenes on Foundry's hex grids: a square benchmark scene (bench/scenes.py,
optionally dressed by bench/dressing.py) laid on one of the four hex layouts.

Walls and regions stay where they are (axis-aligned rooms and angled walls then cross the hex
rows at every angle); each token is snapped to the hex under its centre, as Foundry snaps a
dropped token, and some become multi-hex (width 2 or 3, every token shape) or Tiny (half a
hex). Seeded: the same arguments give the same scene.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np

from geometry import hex as hexgrid
from geometry.model import CreatureGeom, Grid, GridKind, SceneGeom, Size

#: Foundry's hex grid types, in order (2: odd rows ... 5: even columns).
HEX_KINDS = (GridKind.HEXODDR, GridKind.HEXEVENR, GridKind.HEXODDQ, GridKind.HEXEVENQ)

#: (width, share): a token's hex size; the rest keep their square size (capped at 3).
_SIZES = ((0.5, 0.1), (2.0, 0.15), (3.0, 0.05))
_SIZE_OF = {0.5: Size.TINY, 1.0: Size.MEDIUM, 2.0: Size.LARGE, 3.0: Size.HUGE}


def on_hex(geom: SceneGeom, kind: GridKind, seed: int = 1) -> SceneGeom:
    """The scene on a hex grid of this layout (same pixel size), tokens snapped to hexes."""
    rng = random.Random(f"covercast-hex:{seed}:{int(kind)}")
    grid = Grid(kind, geom.grid.size, geom.grid.distance, geom.grid.units)
    layout = hexgrid.HexLayout.of(grid)
    by_id: dict[str, CreatureGeom] = {}
    for c in geom.creatures:
        by_id[c.id] = _snap(rng, c, layout)
    # A mount must stay larger than its rider.
    for c in geom.creatures:
        if c.mount is not None and c.mount in by_id:
            rider, steed = by_id[c.id], by_id[c.mount]
            if steed.width <= rider.width:
                by_id[c.id] = _snap_size(rider, layout, min(rider.width, 1.0))
                by_id[c.mount] = _snap_size(steed, layout, max(2.0, steed.width))
    return replace(geom, grid=grid, creatures=tuple(by_id[c.id] for c in geom.creatures))


def _snap(rng: random.Random, c: CreatureGeom, layout: hexgrid.HexLayout) -> CreatureGeom:
    roll, width = rng.random(), min(3.0, max(1.0, round(c.width)))
    for w, share in _SIZES:
        if roll < share:
            width = w
            break
        roll -= share
    c = replace(c, shape=rng.choice((0, 1, 2, 3, 4, 5)) if width > 1 else c.shape)
    return _snap_size(c, layout, width)


def _snap_size(c: CreatureGeom, layout: hexgrid.HexLayout, width: float) -> CreatureGeom:
    """c at this width (a size to match), its top-left hex the one under its old centre."""
    cx = c.x + c.width * layout.size / 2
    cy = c.y + c.height * layout.size / 2
    i, j = hexgrid.point_to_offset(layout, np.array([cx]), np.array([cy]))
    cell = (int(i[0]), int(j[0]))
    x, y = hexgrid.token_position(layout, cell, width, width, c.shape)
    # A size the dressing chose stays; a token's own size follows its new width.
    size = _SIZE_OF[width] if c.size in (Size.MEDIUM, _SIZE_OF.get(c.width)) else c.size
    return replace(c, x=round(x, 3), y=round(y, 3), width=width, height=width, size=size)
