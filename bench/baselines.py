"""Baselines the engine is measured against, and the equality check against the reference.

Both baselines compute the D&D 3.5 *ranged* degree of every ordered pair (none, soft, cover,
improved, total) by the corner procedure of docs/rulesets.md: from each attacker corner, 4
lines to the target's corners; a corner whose every line is blocked sees nothing (total),
otherwise its worst line decides (a blocked line counts as cover); the attacker takes its
best corner. Lines meet walls a hair inside the spaces (geometry.square.INSET_PX), creatures
on the exact corner-to-corner lines; solid walls block, two limited walls block, one-way
walls count only from their closed side, low walls give cover within 30 ft of the attacker
(unless the attacker is closer to them than the target), arrow slits give improved cover,
other creatures' spaces give soft cover. Regions are not modelled (bench scenes have none).

Ranged only: the engine computes melee, reach and ranged (and flanking, and the annotation
objects) in the time it is measured against, so the ratios understate its lead.

- `naive_pairs`: the way a first version is written: Python loops over pairs, corners, lines
  and every wall (Shapely `LineString.intersects`), then every creature (`intersects` with
  its open box). Far too slow for a full matrix, so it is timed on a sample of pairs and
  extrapolated linearly.
- `brute_ranged`: numpy, the same 16 lines per *ordered* pair against *all* walls with the
  plain orientation test, in chunks; no spatial prune, no sharing of a pair's lines between
  its two directions.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import numpy as np
import numpy.typing as npt
from shapely.geometry import LineString, Polygon, box

from geometry import openings
from geometry.model import Direction, SceneGeom, WallCover
from geometry.square import INSET_PX, segment_grid_feet
from geometry.trace import Tracer
from rulesets import dnd35 as dnd35_module
from rulesets.base import Annotation, AttackMode, Degree
from rulesets.corner import CornerEngine, CornerOptions, PairFacts
from rulesets.dnd35 import Dnd35

NONE, SOFT, COVER, IMPROVED, TOTAL = 0, 1, 2, 3, 4
LEVEL_OF_DEGREE = {Degree.NONE: NONE, Degree.SOFT: SOFT, Degree.COVER: COVER,
                   Degree.IMPROVED: IMPROVED, Degree.TOTAL: TOTAL}
LOW_RANGE_FT = 30.0
BRUTE_CHUNK_CELLS = 1 << 17  # lines x walls per chunk (1 MB per float temporary)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]
Row = tuple[int, int, AttackMode]


# -- shared scene facts -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Facts:
    n: int
    spaces: FloatArray  # (n, 4) x0, y0, x1, y1
    corners: FloatArray  # (n, 4, 2) exact
    inset: FloatArray  # (n, 4, 2) a hair inside
    walls: FloatArray  # (W, 4) active walls, sorted by kind
    kind: npt.NDArray[np.int8]  # per wall: 0 solid, 1 one-way solid, 2 limited, 3 low, 4 slit
    direction: npt.NDArray[np.int8]
    low_dist_ft: FloatArray  # (n, W) creature to wall distance in feet (low walls only)


SOLID, ONE_WAY, LIMITED, LOW, SLIT = 0, 1, 2, 3, 4


def _facts(geom: SceneGeom) -> _Facts:
    size = geom.grid.size
    cs = geom.creatures
    spaces = np.array([(c.x, c.y, c.x + c.width * size, c.y + c.height * size) for c in cs],
                      dtype=np.float64).reshape(-1, 4)
    x0, y0, x1, y1 = spaces.T
    corners = np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1),
                        np.stack([x1, y1], 1), np.stack([x0, y1], 1)], axis=1)
    centre = np.stack([(x0 + x1) / 2, (y0 + y1) / 2], axis=1)[:, None, :]
    d = centre - corners
    inset = corners + np.sign(d) * np.minimum(INSET_PX, np.abs(d))
    rows: list[tuple[int, tuple[float, float, float, float], int]] = []
    for w in geom.walls:
        if not w.active:
            continue
        if w.cover is WallCover.LOW:
            k = LOW
        elif w.cover is WallCover.IMPROVED:
            k = SLIT
        elif w.limited:
            k = LIMITED
        elif w.direction is not Direction.BOTH:
            k = ONE_WAY
        else:
            k = SOLID
        rows.append((k, (w.x0, w.y0, w.x1, w.y1), int(w.direction)))
    rows.sort(key=lambda r: r[0])
    walls = np.array([r[1] for r in rows], dtype=np.float64).reshape(-1, 4)
    kind = np.array([r[0] for r in rows], dtype=np.int8)
    direction = np.array([r[2] for r in rows], dtype=np.int8)
    low_dist = np.full((len(cs), len(walls)), np.inf)
    low_cols = np.nonzero(kind == LOW)[0]
    if len(cs) and low_cols.size:
        # Squares on the grid, diagonals alternating 5/10 ft, as the engine counts the low
        # obstacle's 30 ft (exact up to 7 squares, a bound beyond).
        nc, nl = len(cs), low_cols.size
        feet = segment_grid_feet(np.repeat(spaces, nl, axis=0), np.tile(walls[low_cols], (nc, 1)),
                                 size, 7)
        low_dist[:, low_cols] = feet.reshape(nc, nl)
    return _Facts(len(cs), spaces, corners, inset, walls, kind, direction, low_dist)


def ordered_pairs(n: int) -> list[tuple[int, int]]:
    return [(a, t) for a in range(n) for t in range(n) if a != t]


# -- naive -------------------------------------------------------------------------------------

class Naive:
    """The first-version computation: Shapely objects and Python loops."""

    def __init__(self, geom: SceneGeom) -> None:
        self.f = _facts(geom)
        self.wall_lines = [LineString([(w[0], w[1]), (w[2], w[3])]) for w in self.f.walls]
        eps = 1e-6  # the open box: grazing a corner or running along an edge is not entering
        self.boxes: list[Polygon] = [box(s[0] + eps, s[1] + eps, s[2] - eps, s[3] - eps)
                                     for s in self.f.spaces]
        self.geom = geom

    def pair(self, a: int, t: int) -> int:
        f = self.f
        best = TOTAL
        for k in range(4):
            corner_level = NONE
            all_blocked = True
            for el in range(4):
                p, q = f.inset[a, k], f.inset[t, el]
                line = LineString([p, q])
                blocked = low = slit = False
                limited = 0
                # Every wall: a line's degree needs all it meets (an arrow slit before a
                # wall still counts), so there is no early exit.
                for w, wall in enumerate(self.wall_lines):
                    if not line.intersects(wall):
                        continue
                    kind = f.kind[w]
                    if kind == LOW:
                        da, dt = f.low_dist_ft[a, w], f.low_dist_ft[t, w]
                        if da <= LOW_RANGE_FT + 1e-9 and not da < dt - 1e-9:
                            low = True
                    elif kind == SLIT:
                        slit = True
                    elif kind == LIMITED:
                        limited += 1
                    elif kind == ONE_WAY:
                        ax, ay, bx, by = f.walls[w]
                        o = (ay - p[1]) * (bx - p[0]) - (ax - p[0]) * (by - p[1])
                        side = 1 if o < 0 else 2 if o > 0 else 0
                        if side != f.direction[w]:
                            blocked = True
                    else:
                        blocked = True
                blocked = blocked or limited >= 2
                level = NONE
                exact = LineString([f.corners[a, k], f.corners[t, el]])
                for c, space in enumerate(self.boxes):
                    if c not in (a, t) and exact.intersects(space):
                        level = SOFT
                        break
                if low:
                    level = COVER
                if slit:
                    level = IMPROVED
                if blocked:
                    corner_level = max(corner_level, level, COVER)
                else:
                    all_blocked = False
                    corner_level = max(corner_level, level)
            best = min(best, TOTAL if all_blocked else corner_level)
        if best == TOTAL:
            return int(open_total(self.geom, np.array([[a, t]]), np.array([best]))[0])
        return best


def naive_pairs(geom: SceneGeom, pairs: Sequence[tuple[int, int]]) -> list[int]:
    naive = Naive(geom)
    return [naive.pair(a, t) for a, t in pairs]


# -- brute-force numpy ---------------------------------------------------------------------------

def brute_ranged(geom: SceneGeom, chunk_cells: int = BRUTE_CHUNK_CELLS) -> npt.NDArray[np.int8]:
    """Ranged levels of every ordered pair, in `ordered_pairs` order."""
    f = _facts(geom)
    pairs = np.array(ordered_pairs(f.n), dtype=np.intp).reshape(-1, 2)
    out = np.empty(len(pairs), dtype=np.int8)
    if len(pairs) == 0:
        return out
    walls = f.walls
    nw = len(walls)
    ax, ay, bx, by = (walls[:, j][None, :] for j in range(4))
    kinds = f.kind
    sl = {k: slice(int(np.searchsorted(kinds, k, "left")),
                   int(np.searchsorted(kinds, k, "right"))) for k in range(5)}
    one_way_dir = f.direction[sl[ONE_WAY]][None, :]
    low_cols = sl[LOW]
    low_dist = f.low_dist_ft[:, low_cols]
    bx0, by0, bx1, by1 = (f.spaces[:, j][None, :] for j in range(4))
    step = max(1, chunk_cells // (16 * max(nw, f.n, 1)))
    corner_k = np.repeat(np.arange(4), 4)
    corner_l = np.tile(np.arange(4), 4)
    for p0 in range(0, len(pairs), step):
        pa, pt = pairs[p0:p0 + step, 0], pairs[p0:p0 + step, 1]
        la, lt = np.repeat(pa, 16), np.repeat(pt, 16)
        s = f.inset[pa][:, corner_k].reshape(-1, 2)
        e = f.inset[pt][:, corner_l].reshape(-1, 2)
        px, py = s[:, 0:1], s[:, 1:2]
        qx, qy = e[:, 0:1], e[:, 1:2]
        n_lines = len(s)
        if nw:
            # The plain orientation test, every line against every wall.
            o1 = (qx - px) * (ay - py) - (qy - py) * (ax - px)
            o2 = (qx - px) * (by - py) - (qy - py) * (bx - px)
            o3 = (bx - ax) * (py - ay) - (by - ay) * (px - ax)
            o4 = (bx - ax) * (qy - ay) - (by - ay) * (qx - ax)
            hit = (o1 * o2 <= 0) & (o3 * o4 < 0)
            blocked = hit[:, sl[SOLID]].any(axis=1)
            ow = sl[ONE_WAY]
            if ow.stop > ow.start:
                # Foundry's orientPoint of the line's start: 1 left, 2 right.
                o = (ay[:, ow] - py) * (bx[:, ow] - px) - (ax[:, ow] - px) * (by[:, ow] - py)
                side = np.where(o < 0, 1, np.where(o > 0, 2, 0))
                blocked |= (hit[:, ow] & (side != one_way_dir)).any(axis=1)
            blocked |= hit[:, sl[LIMITED]].sum(axis=1) >= 2
            if low_cols.stop > low_cols.start:
                da, dt = low_dist[la], low_dist[lt]
                active = (da <= LOW_RANGE_FT + 1e-9) & ~(da < dt - 1e-9)
                low = (hit[:, low_cols] & active).any(axis=1)
            else:
                low = np.zeros(n_lines, dtype=bool)
            slit = hit[:, sl[SLIT]].any(axis=1)
        else:
            blocked = low = slit = np.zeros(n_lines, dtype=bool)
        # Soft cover: the exact corner-to-corner line enters another creature's open box.
        es = f.corners[pa][:, corner_k].reshape(-1, 2)
        ee = f.corners[pt][:, corner_l].reshape(-1, 2)
        soft = _enter_any(es, ee, bx0, by0, bx1, by1, la, lt)
        level = np.zeros(n_lines, dtype=np.int8)
        level[soft] = SOFT
        level[low] = COVER
        level[slit] = IMPROVED
        out[p0:p0 + step] = _reduce(level, blocked)
    return open_total(geom, pairs, out)


def open_total(geom: SceneGeom, pairs: npt.NDArray[np.intp],
               level: npt.NDArray[np.int8]) -> npt.NDArray[np.int8]:
    """Pairs at TOTAL whose spaces still see each other through an opening no corner line
    passes (geometry.openings, as the engine decides it): improved cover, as the engine
    says (docs/rulesets.md, "Line of effect through openings")."""
    shut = np.flatnonzero(level == TOTAL)
    if len(shut) == 0:
        return level
    tracer = Tracer(geom)
    seen = openings.pairs_line_of_effect(tracer, openings.spaces_of(tracer, INSET_PX),
                                         pairs[shut, 0], pairs[shut, 1])
    out = level.copy()
    out[shut[seen]] = IMPROVED
    return out


def _reduce(level: npt.NDArray[np.int8], blocked: BoolArray) -> npt.NDArray[np.int8]:
    """Per-line levels of unblocked passage and blocked flags, 16 lines per pair in order
    (attacker corner, target corner) -> one level per pair."""
    lv = level.reshape(-1, 4, 4)
    bl = blocked.reshape(-1, 4, 4)
    partly = np.where(bl, np.maximum(lv, COVER), lv)
    corner = np.where(bl.all(axis=2), TOTAL, partly.max(axis=2))
    out: npt.NDArray[np.int8] = corner.min(axis=1).astype(np.int8)
    return out


def _enter_any(s: FloatArray, e: FloatArray, bx0: FloatArray, by0: FloatArray,
               bx1: FloatArray, by1: FloatArray, la: IntArray, lt: IntArray) -> BoolArray:
    """Per line: does it pass through the open interior of a creature other than its own
    two (slab test against every box)?"""
    with np.errstate(divide="ignore", invalid="ignore"):
        tlo = np.zeros((len(s), bx0.shape[1]))
        thi = np.ones((len(s), bx0.shape[1]))
        for p, q, b0, b1 in ((s[:, 0:1], e[:, 0:1], bx0, bx1), (s[:, 1:2], e[:, 1:2], by0, by1)):
            d = q - p
            ta, tb = (b0 - p) / d, (b1 - p) / d
            still = d == 0
            inside = (p > b0) & (p < b1)
            tlo = np.maximum(tlo, np.where(still, np.where(inside, -np.inf, np.inf),
                                           np.minimum(ta, tb)))
            thi = np.minimum(thi, np.where(still, np.where(inside, np.inf, -np.inf),
                                           np.maximum(ta, tb)))
    enter = thi - tlo > 1e-9
    rows = np.arange(len(s))
    enter[rows, la] = False
    enter[rows, lt] = False
    out: BoolArray = np.any(enter, axis=1)
    return out


# -- the engine's ranged degrees, for agreement figures -------------------------------------------

def engine_ranged(annotations: Sequence[Annotation], geom: SceneGeom,
                  pairs: Sequence[tuple[int, int]]) -> list[int]:
    """The ranged level of each (attacker, target) index pair in a Dnd35 result."""
    ids = [c.id for c in geom.creatures]
    by_key = {(a.attacker, a.target): a.cover for a in annotations
              if a.mode is AttackMode.RANGED}
    return [LEVEL_OF_DEGREE[by_key[(ids[a], ids[t])]] for a, t in pairs]


def agreement(xs: Sequence[int], ys: Sequence[int]) -> float:
    if not xs:
        return math.nan
    return sum(x == y for x, y in zip(xs, ys, strict=True)) / len(xs)


# -- the reference engine ----------------------------------------------------------------------

class ReferenceEngine(CornerEngine):
    """The corner engine with `evaluate` answered by the straightforward `reference`."""

    def evaluate(self, rows: Sequence[Row], want_lines: bool,
                 want_probes: bool = True) -> list[PairFacts]:
        return self.reference(rows, want_lines, want_probes)


@contextlib.contextmanager
def reference_engine() -> Iterator[None]:
    """Within this block, Dnd35 (and its variants) evaluate through `CornerEngine.reference`."""
    with mock.patch.object(dnd35_module, "CornerEngine", ReferenceEngine):
        yield


def sample_targets(geom: SceneGeom, count: int, seed: int) -> list[int]:
    """Target indices for an equality sample: every size present at least once (big
    creatures take the engine's general path), the rest at random."""
    rng = random.Random(seed)
    n = len(geom.creatures)
    by_size: dict[Any, list[int]] = {}
    for k, c in enumerate(geom.creatures):
        by_size.setdefault((c.width, c.height), []).append(k)
    chosen = {rng.choice(v) for v in by_size.values()}
    rest = [k for k in range(n) if k not in chosen]
    rng.shuffle(rest)
    return sorted(chosen | set(rest[:max(0, count - len(chosen))]))


@dataclass(frozen=True, slots=True)
class Mismatch:
    what: str
    row: Any
    fast: Any
    reference: Any


def compare_facts(geom: SceneGeom, rows: Sequence[Row], want_lines: bool,
                  options: CornerOptions | None = None) -> list[Mismatch]:
    """CornerEngine.evaluate against CornerEngine.reference, row by row."""
    engine = CornerEngine(geom, options or CornerOptions())
    fast = engine.evaluate(rows, want_lines)
    ref = engine.reference(rows, want_lines)
    if len(fast) != len(ref):
        return [Mismatch("row count", None, len(fast), len(ref))]
    return [Mismatch("facts", r, f, g) for r, f, g in zip(rows, fast, ref, strict=True)
            if f != g]


def compare_annotations(geom: SceneGeom, pairs: Sequence[tuple[str, str]] | None,
                        fast: Sequence[Annotation] | None = None,
                        options: CornerOptions | None = None,
                        lines: bool = False) -> tuple[int, list[Mismatch]]:
    """Dnd35 through the fast engine against Dnd35 through the reference, for `pairs` (None:
    all ordered pairs) and all three modes. `fast` may be a full-matrix result already
    computed. Returns (annotations compared, mismatches)."""
    opts = options or CornerOptions()
    if fast is None:
        fast = Dnd35().evaluate(geom, opts, pairs=pairs, lines=lines)
    with reference_engine():
        ref = Dnd35().evaluate(geom, opts, pairs=pairs, lines=lines)
    fast_by = {a.key(): a for a in fast}
    out: list[Mismatch] = []
    for a in ref:
        got = fast_by.get(a.key())
        if got != a:
            out.append(Mismatch("annotation", a.key(), got, a))
    return len(ref), out
