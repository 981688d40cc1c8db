"""What a wall is to a given target, shared by every ruleset.

Rule of this module: one vectorised classification of wall hits into solid walls, low
obstacles and improved-cover features (arrow slits), from the wall's cover hint and, through
Wall Height, from how high it reaches on the target.
"""

from __future__ import annotations

import numpy as np

from geometry.kernel import BoolArray, FloatArray, IntArray, run_starts
from geometry.trace import IMPROVED_CODE, LOW_CODE, SOLID_CODE, LineHits, Tracer
from geometry.vertical import band_meets, creature_hits_meet, sheet, wall_crossing


def wall_roles(tracer: Tracer, tall: FloatArray, elevation: FloatArray, walls: IntArray,
               targets: IntArray) -> tuple[BoolArray, BoolArray, BoolArray]:
    """For paired (wall, target) indices: (solid, low, improved).

    A wall is a low obstacle when marked low, or when its top is at most half the target's
    height above the target's feet (a wall up to the waist); otherwise a solid wall blocks
    and an improved one (arrow slit) lets lines through with improved cover.
    """
    cover = tracer.wall_cover_code[walls]
    # Only hits on walls with a top can be low by height (most walls have none).
    topped = np.flatnonzero(np.isfinite(tracer.wall_top)[walls])
    by_height = np.zeros(len(walls), dtype=bool)
    if topped.size:
        tops, tg = tracer.wall_top[walls[topped]], targets[topped]
        by_height[topped] = tops - elevation[tg] <= tall[tg] / 2
    # Any wall topping out at the waist is a low obstacle, arrow slits included.
    low = (cover == LOW_CODE) | by_height
    improved = (cover == IMPROVED_CODE) & ~by_height
    solid = (cover == SOLID_CODE) & ~low
    return solid, low, improved


def wall_roles_3d(tracer: Tracer, walls: IntArray, lines: IntArray, att: IntArray,
                  tgt: IntArray, starts: FloatArray, ends: FloatArray,
                  origin: tuple[float, float] | None = None,
                  ) -> tuple[BoolArray, BoolArray, BoolArray, BoolArray]:
    """wall_roles for wall hits (hit k: wall walls[k] on line lines[k], the line running from
    creature att[line] to tgt[line] between starts and ends), in three dimensions, plus a
    fourth role, partial; `origin` (elevation, height in feet) replaces the attacker for an
    area effect's point of origin. Returns (solid, low, improved, partial).

    Walls without a height band are what wall_roles says (never partial). A banded wall
    meets the line only where its band overlaps the sheet of sight between the two
    creatures' vertical extents (geometry.vertical); one that does not is nothing to this
    line (a flyer above a low wall, a line under a hanging wall). One that meets it is a low
    obstacle when its band hides at most half the target's height (wall_roles' waist rule,
    for hanging walls too) and the target is not wholly above or below it; otherwise an
    improved one stays improved; a wall (not marked low or improved) whose band spans the
    whole sheet there stops the line (solid); and one that meets the sheet but leaves part of
    it open (a 4 ft wall between two Medium fighters, a chest-high parapet) is partial: it
    gives cover and never stops the line ("se non avete alcuna linea di visuale": total
    cover needs no line at all)."""
    tall, elev = tracer.tall, tracer.elev
    t = tgt[lines]
    solid, low, improved = wall_roles(tracer, tall, elev, walls, t)
    partial = np.zeros(len(walls), dtype=bool)
    banded = tracer.wall_banded[walls]
    if not banded.any():
        return solid, low, improved, partial
    k = np.nonzero(banded)[0]
    w, ln = walls[k], lines[k]
    s = wall_crossing(starts[ln], ends[ln], tracer.wall_xy[w])
    tt = tgt[ln]
    a_elev, a_tall = _attacker_extent(tracer, att[ln], origin)
    lo, hi = sheet(s, a_elev, a_tall, elev[tt], tall[tt])
    bottom, top = tracer.wall_bottom[w], tracer.wall_top[w]
    meets, whole = band_meets(bottom, top, lo, hi)
    b = np.where(np.isnan(bottom), -np.inf, bottom)
    tp = np.where(np.isnan(top), np.inf, top)
    hidden = np.minimum(tp, elev[tt] + tall[tt]) - np.maximum(b, elev[tt])
    # Wall Height's low obstacle, both ways up: the band hides at most half the target.
    by_height = hidden <= tall[tt] / 2
    code = tracer.wall_cover_code[w]
    fills = meets & whole & (code == SOLID_CODE)
    solid[k] = fills
    low[k] = ((code == LOW_CODE) | by_height) & meets & (hidden > 0) & ~fills
    improved[k] = (code == IMPROVED_CODE) & ~by_height & meets
    partial[k] = (code == SOLID_CODE) & ~by_height & meets & ~fills
    return solid, low, improved, partial


def _attacker_extent(tracer: Tracer, att: IntArray,
                     origin: tuple[float, float] | None) -> tuple[FloatArray, FloatArray]:
    if origin is None:
        return tracer.elev[att], tracer.tall[att]
    return np.full(len(att), origin[0]), np.full(len(att), origin[1])


def creature_hits(tracer: Tracer, hits: LineHits, att: IntArray, tgt: IntArray,
                  starts: FloatArray, ends: FloatArray,
                  origin: tuple[float, float] | None = None) -> BoolArray:
    """Per creature hit: does the creature's cube meet the sheet of sight between the two
    creatures' cubes where the line passes its space (always, when every creature stands at
    one elevation and no origin is raised above them)?"""
    if not tracer.raised and (origin is None or not len(tracer.elev)
                              or origin[0] == tracer.elev[0]):
        return np.ones(len(hits.creature_line), dtype=bool)
    line = hits.creature_line
    # Creatures meet creatures cube to cube (the space each controls, as for distances), so
    # a flyer stacked 5 ft above another is not in the way of lines to it.
    a = att[line]
    a_elev, a_side = (tracer.elev[a], tracer.side[a]) if origin is None else (
        np.full(len(a), origin[0]), np.full(len(a), origin[1]))
    return creature_hits_meet(starts, ends, tracer.boxes, line, hits.creature_idx,
                              a_elev, a_side, tgt, tracer.elev, tracer.side)


def limited_blocked(tracer: Tracer, line: IntArray, wall: IntArray, mask: BoolArray,
                    starts: FloatArray, ends: FloatArray, n: int) -> BoolArray:
    """Per line: blocked by limited (terrain) walls, which stop a line only from the second
    one it crosses. Hits are counted by where they touch the line, so a limited wall drawn
    as several segments counts once where the line passes through a joint."""
    sel = mask & tracer.wall_limited[wall]
    if not sel.any():
        return np.zeros(n, dtype=bool)
    ln, w = line[sel], wall[sel]
    p, q = starts[ln], ends[ln]
    a, b = tracer.wall_xy[w, 0:2], tracer.wall_xy[w, 2:4]
    o3 = (b[:, 0] - a[:, 0]) * (p[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (p[:, 0] - a[:, 0])
    o4 = (b[:, 0] - a[:, 0]) * (q[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (q[:, 0] - a[:, 0])
    # Where along the line it meets the wall's line (o3, o4 have opposite signs on a hit).
    where = np.round(o3 / (o3 - o4), 9)
    # Distinct (line, where) pairs by sorting the two keys (np.unique over rows sorts them
    # as opaque records, many times slower); where is never NaN (o3 and o4 have opposite
    # signs on a hit).
    order = np.lexsort((where, ln))
    ln, where = ln[order], where[order]
    new = run_starts((ln[1:] != ln[:-1]) | (where[1:] != where[:-1]))
    counts = np.bincount(ln[new], minlength=n)
    blocked: BoolArray = counts >= 2
    return blocked
