"""Line of effect through openings, decided exactly: is there *any* straight line from one
creature's space to another's that nothing stops?

Rule of this module: pure, vectorised geometry over a Tracer's walls (and blocking terrain's
borders); rulesets ask it only about pairs their own sample lines found wholly blocked, and
keep their lines for the degree. Spaces are convex rings (a square creature's space a hair
inside its border, as the rules' lines start; an area's origin a ring of one repeated point).
The crossing convention is the kernel's (geometry/kernel.py), applied to each line tried.

How it is decided, in three steps (docs/geometry.md, 'Line of effect through openings'):

1. Spaces that overlap or touch see each other.
2. Sealed: one wall that stops every line of the pair (solid, both ways, not limited, and with
   no height band or one hiding both creatures whole; axis-parallel walls touching end to end
   merged into one, as a room's side drawn in segments and closed doors) crossing the lines
   between every corner of one ring and every corner of the other separates the two spaces
   wholly: every line from one to the other crosses it (the lines' crossings with its line
   run between those of the corner lines). Most blocked pairs end here, at P x Q crossing
   tests per wall near the pair.
3. Otherwise, the lines between the two spaces, taken as lines of the plane, fall into cells
   of the arrangement of the event points (ring corners, wall ends inside the pair's hull,
   walls' crossings of a ring's border; not those on a ring's back, where the line's part
   between the two spaces never starts: `_events`): within a cell, which walls a line's
   part between the two spaces crosses does not change, so a free line exists exactly
   when a free cell does, and every cell has such a point on its border. For every two
   event points, the four lines through points a hair (EPSILON_PX) to either side of each
   are tried, each clipped to the two rings and tested with the crossing convention; any
   free one is a witness. Between rings apart along their axis, the two lines shifted to
   either side meet every cell already, and the two turned ones are left out (`_apart`). A
   line found free is free (it is tested exactly); what the search could miss is an
   opening narrower than EPSILON_PX, and a line from a corner lying on a wall.

For two creatures of several hexes, step 2 can also be asked once for the two whole
creatures, on their hull rings (`walled_apart`), before their pairs of hexes are.

In three dimensions a banded wall counts, on each line tried, where its band fills the sheet
of sight at the line's crossing (geometry.vertical), one-way walls from the side the line
starts on, and limited walls from the second one crossed, as the rulesets read them. Before
steps 2 and 3, each band near a pair is judged over the fractions of the way at which the
pair's lines can cross its wall (`_band_fill`): filling the sheet there everywhere, nowhere
(the wall is left out), or in part."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt
import shapely

from geometry import kernel, rooms
from geometry.caches import drop_oldest
from geometry.kernel import BoolArray, FloatArray, IntArray, take_rows
from geometry.model import Direction, RegionKind
from geometry.trace import SOLID_CODE, Tracer
from geometry.vertical import band_meets, sheet, wall_crossing

#: Pixels: how far to either side of an event point the lines tried pass (far below the
#: rules' inset of 1/64 px, far above rounding at map scale).
EPSILON_PX = 2.0 ** -20
#: Rows (line tried x wall) per chunk of the search.
_CHUNK_ROWS = 2_000_000


@dataclass(frozen=True, slots=True)
class Blockers:
    """What can stop line of effect, as segments: solid walls (cover hint solid; low walls
    and arrow slits never stop it) and the borders of blocking terrain. `stops`: the segment
    stops every line it crosses, from either end, at any height, alone (plain walls merged
    into runs, terrain borders)."""

    xy: FloatArray
    stops: BoolArray
    limited: BoolArray
    direction: npt.NDArray[np.int8]
    bottom: FloatArray
    top: FloatArray
    #: The segment is a border of blocking terrain.
    border: BoolArray
    #: Line of effect of pairs of spaces asked before (`line_of_effect_both`): per pair's
    #: key (`_pair_keys`), its answers both ways.
    known: dict[bytes, tuple[bool, bool]] = field(default_factory=dict, compare=False)
    #: Whether one plain wall seals two rings from each other, per pair of rings asked
    #: before (`sealed_known`).
    sealed: dict[bytes, bool] = field(default_factory=dict, compare=False)


#: Pairs of spaces whose line of effect a Blockers keeps at most, before it starts again
#: (a key and its answers are about 200 bytes).
KNOWN_PAIRS = 20_000

# Per walls array (the tracer's, shared by every snapshot of the same walls: a token moving
# keeps it) and regions: the array is held, so its id stays unique.
_BLOCKERS: dict[int, tuple[FloatArray, tuple[object, ...], Blockers]] = {}
_BLOCKERS_KEPT = 8


def forget_known() -> None:
    """Forget what every kept `Blockers` holds of pairs of spaces (`line_of_effect_both`,
    `sealed_known`)."""
    for held in list(_BLOCKERS.values()):
        held[2].known.clear()
        held[2].sealed.clear()


#: Pairs of rings up to which `sealed_known` keeps them (past it, a first subscription's
#: whole table: no pair of it was asked before, and keys cost a microsecond a pair).
SEALED_KEPT_CALL = 512


def sealed_known(tracer: Tracer, a_ring: FloatArray, b_ring: FloatArray,
                 sealed: Callable[[FloatArray, FloatArray], BoolArray]) -> BoolArray:
    """Per pair of rings (a_ring[k], b_ring[k]): `sealed` of them (whether one plain wall
    separates them; it depends on the two rings and the walls alone), kept with the
    walls' blockers for a call of few pairs: a token moved back where it stood has its
    pairs' answers read back."""
    n = len(a_ring)
    if n == 0 or n > SEALED_KEPT_CALL:
        return sealed(a_ring, b_ring)
    zero = np.zeros(n)
    got = _read_back(blockers(tracer).sealed,
                     _pair_keys(a_ring, b_ring, zero, zero, zero, zero),
                     lambda at: cast("list[bool]", sealed(a_ring[at], b_ring[at]).tolist()))
    out: BoolArray = np.array(got, dtype=bool)
    return out


def blockers(tracer: Tracer) -> Blockers:
    """The tracer's `Blockers`, built once per set of walls and regions (kept for the last
    few)."""
    held = _BLOCKERS.get(id(tracer.wall_xy))
    if held is not None and held[0] is tracer.wall_xy and held[1] == tracer.regions:
        return held[2]
    solid = tracer.wall_cover_code == SOLID_CODE
    plain = np.flatnonzero(tracer.wall_plain)
    runs = (kernel.merged_runs(tracer.wall_xy, plain) if len(plain)
            else np.empty((0, 4)))
    other = np.flatnonzero(solid & ~tracer.wall_plain)
    sides = [np.asarray(p.exterior.coords, dtype=np.float64)
             for p, kind in zip(tracer.region_polys, tracer.region_kind, strict=True)
             if kind is RegionKind.BLOCKING]
    border = (np.concatenate([np.concatenate([r[:-1], r[1:]], axis=1) for r in sides])
              if sides else np.empty((0, 4)))
    n_runs, n_other, n_border = len(runs), len(other), len(border)
    nan = np.full(n_runs + n_border, np.nan)
    out = Blockers(
        xy=np.concatenate([runs, tracer.wall_xy[other], border]).reshape(-1, 4),
        stops=np.concatenate([np.ones(n_runs, dtype=bool), np.zeros(n_other, dtype=bool),
                              np.ones(n_border, dtype=bool)]),
        limited=np.concatenate([np.zeros(n_runs, dtype=bool), tracer.wall_limited[other],
                                np.zeros(n_border, dtype=bool)]),
        direction=np.concatenate([np.zeros(n_runs, dtype=np.int8), tracer.wall_dir[other],
                                  np.zeros(n_border, dtype=np.int8)]),
        bottom=np.concatenate([nan[:n_runs], tracer.wall_bottom[other], nan[n_runs:]]),
        top=np.concatenate([nan[:n_runs], tracer.wall_top[other], nan[n_runs:]]),
        border=np.concatenate([np.zeros(n_runs + n_other, dtype=bool),
                               np.ones(n_border, dtype=bool)]))
    if len(_BLOCKERS) >= _BLOCKERS_KEPT:
        drop_oldest(_BLOCKERS)
    _BLOCKERS[id(tracer.wall_xy)] = (tracer.wall_xy, tuple(tracer.regions), out)
    return out


def box_rings(boxes: FloatArray, inset_px: float) -> FloatArray:
    """Rings (N, 4, 2) of boxes (N, 4: x0, y0, x1, y1) moved `inset_px` inside, never past
    their centre (a box of no area is a ring of one point)."""
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    # Written into one array, corner by corner (nested stacks cost several times more for
    # the few rings of a move).
    out: FloatArray = np.empty((len(boxes), 4, 2))
    out[:, 0, 0] = out[:, 3, 0] = np.minimum(boxes[:, 0] + inset_px, cx)
    out[:, 1, 0] = out[:, 2, 0] = np.maximum(boxes[:, 2] - inset_px, cx)
    out[:, 0, 1] = out[:, 1, 1] = np.minimum(boxes[:, 1] + inset_px, cy)
    out[:, 2, 1] = out[:, 3, 1] = np.maximum(boxes[:, 3] - inset_px, cy)
    return out


def _inward(ring: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per ring (N, V, 2): each side's start point and inward normal (zero for a side of no
    length), whichever way the ring runs."""
    nxt = kernel.next_corners(ring)
    edge = nxt - ring
    area = np.sum(ring[..., 0] * nxt[..., 1] - nxt[..., 0] * ring[..., 1], axis=1)
    sign = np.where(area >= 0, 1.0, -1.0)[:, None]
    normal = np.stack([-edge[..., 1] * sign, edge[..., 0] * sign], axis=-1)
    return ring, normal


def _overlap(a: FloatArray, b: FloatArray) -> BoolArray:
    """Per pair of convex rings: do they overlap or touch (no side's line, of either,
    separates them strictly)?"""
    box_a, box_b = _as_boxes(a), _as_boxes(b)
    if box_a is not None and box_b is not None:
        # Boxes along the axes (a square grid's spaces): their sides' lines are the axes'.
        meet: BoolArray = ((box_a[:, 0] <= box_b[:, 2]) & (box_b[:, 0] <= box_a[:, 2])
                           & (box_a[:, 1] <= box_b[:, 3]) & (box_b[:, 1] <= box_a[:, 3]))
        return meet
    # Rings whose boxes are apart are apart (the sides' test would find a side between
    # them): only the others are tested by their sides. Flat rings (points, segments,
    # which have no side across their own line) are left to it too, as it has always
    # read them.
    lo_a, hi_a = kernel.over_points(np.minimum, a), kernel.over_points(np.maximum, a)
    lo_b, hi_b = kernel.over_points(np.minimum, b), kernel.over_points(np.maximum, b)
    near = ((lo_a <= hi_b) & (lo_b <= hi_a)).all(axis=1)
    near |= (lo_a == hi_a).any(axis=1) | (lo_b == hi_b).any(axis=1)
    out = np.zeros(len(a), dtype=bool)
    k = np.flatnonzero(near)
    if len(k):
        out[k] = _overlap_sides(a[k], b[k])
    return out


def _side_offsets(ring: FloatArray, other: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per ring (N, V, 2) and side, each corner of the other ring (N, W, 2) against the
    side's line: how far it lies on the inner side, times the side's length (N, V, W);
    and the side's length (N, V; zero for a side of no length)."""
    start, normal = _inward(ring)
    proj: FloatArray = np.einsum("nvk,nwk->nvw", normal, other) - np.einsum(
        "nvk,nvk->nv", normal, start)[:, :, None]
    return proj, np.hypot(normal[..., 0], normal[..., 1])


def _overlap_sides(a: FloatArray, b: FloatArray) -> BoolArray:
    """`_overlap` for any convex rings: by the lines of both rings' sides."""
    out = np.ones(len(a), dtype=bool)
    for ring, other in ((a, b), (b, a)):
        # The other ring wholly outside one side's line: separated.
        proj, length = _side_offsets(ring, other)
        out &= ~((proj.max(axis=2) < 0) & (length > 0)).any(axis=1)
    return out


def overlapping(a: FloatArray, b: FloatArray) -> BoolArray:
    """Per pair of convex rings (N, V, 2), (N, W, 2): do they overlap or touch? Such spaces
    see each other (step 1)."""
    return _overlap(a, b)


def _degenerate(ring: FloatArray) -> BoolArray:
    """Rings of one point (an area's origin)."""
    out: BoolArray = (ring == ring[:, :1]).all(axis=(1, 2))
    return out


def line_of_effect(tracer: Tracer, a_ring: FloatArray, b_ring: FloatArray,
                   a_elev: FloatArray, a_tall: FloatArray, t_elev: FloatArray,
                   t_tall: FloatArray) -> BoolArray:
    """Per pair k: whether some straight line from a point of ring a_ring[k] (the attacker's
    space, or an origin) to a point of ring b_ring[k] (the target's) is stopped by nothing:
    no solid wall whose band fills the sheet of sight between the two vertical extents
    (a_elev, a_tall; t_elev, t_tall, feet) where it crosses, facing the line's start, no two
    limited walls, no blocking terrain."""
    forward, _ = line_of_effect_both(tracer, a_ring, b_ring, a_elev, a_tall, t_elev, t_tall)
    return forward


def line_of_effect_both(tracer: Tracer, a_ring: FloatArray, b_ring: FloatArray,
                        a_elev: FloatArray, a_tall: FloatArray, t_elev: FloatArray,
                        t_tall: FloatArray, walked: bool = False,
                        group: IntArray | None = None,
                        ) -> tuple[BoolArray, BoolArray]:
    """`line_of_effect` from a to b and from b to a, at once (only one-way walls tell the
    two apart: the same lines are tried and read from either end). With `walked`, the
    kernel has already looked for a plain wall sealing each pair's corner lines (the corner
    engine's trace, `LineHits.sealed`) and found none: that step is not repeated.

    `group`: per pair, the pair of spaces it is a part of (a hex of one creature and a hex
    of another: `pairs_line_of_effect`). A group with a free line each way has line of
    effect; its other pairs are then no longer searched, and may read False: read the
    answers per group.

    Without groups, each pair's answers are kept with the walls' blockers, by the pair's
    two rings and heights: the line of effect of two spaces depends on nothing else. A
    pair asked again (a token back on a square it stood on; a pair recomputed because
    someone else moved beside it) is read back, not searched again: its search has fixed
    costs of about a millisecond a call."""
    n = len(a_ring)
    if n == 0 or group is not None:
        return _line_of_effect_both(tracer, a_ring, b_ring, a_elev, a_tall, t_elev, t_tall,
                                    walked, group)

    def search(at: IntArray) -> list[tuple[bool, bool]]:
        f, b = _line_of_effect_both(tracer, a_ring[at], b_ring[at], a_elev[at], a_tall[at],
                                    t_elev[at], t_tall[at], walked)
        return list(zip(f.tolist(), b.tolist(), strict=True))

    got = _read_back(blockers(tracer).known,
                     _pair_keys(a_ring, b_ring, a_elev, a_tall, t_elev, t_tall), search)
    both = np.array(got, dtype=bool).reshape(n, 2)
    return both[:, 0].copy(), both[:, 1].copy()


_T = TypeVar("_T")


def _read_back(known: dict[bytes, _T], keys: list[bytes],
               work: Callable[[IntArray], list[_T]]) -> list[_T]:
    """Each key's value: read back from `known`, or worked out (`work` of the positions of
    those not known, all at once) and kept there (`known` starts again past
    KNOWN_PAIRS)."""
    got = list(map(known.get, keys))
    todo = [k for k, g in enumerate(got) if g is None]
    if todo:
        values = work(np.array(todo, dtype=np.intp))
        if len(known) + len(todo) > KNOWN_PAIRS:
            known.clear()
        known.update(zip([keys[k] for k in todo], values, strict=True))
        for k, v in zip(todo, values, strict=True):
            got[k] = v
    return cast("list[_T]", got)


def remember_no_line(tracer: Tracer, a_ring: FloatArray, b_ring: FloatArray,
                     a_elev: FloatArray, a_tall: FloatArray, t_elev: FloatArray,
                     t_tall: FloatArray) -> None:
    """Keep, for `line_of_effect_both` to read back, that these pairs of spaces (as it
    takes them) have no line of effect either way: a caller proved it by a walk the
    search does not make (`banded_walk`), and a later snapshot that asks the search
    about the same two spaces is answered at once."""
    # (A whole map's pairs past the table's size are not kept: their keys alone would
    # cost more than the searches they spare, and the table starts again past it.)
    if len(a_ring) == 0 or len(a_ring) > KNOWN_PAIRS:
        return
    known = blockers(tracer).known
    keys = _pair_keys(a_ring, b_ring, a_elev, a_tall, t_elev, t_tall)
    if len(known) + len(keys) > KNOWN_PAIRS:
        known.clear()
    known.update(dict.fromkeys(keys, (False, False)))


def _pair_keys(a_ring: FloatArray, b_ring: FloatArray, a_elev: FloatArray, a_tall: FloatArray,
               t_elev: FloatArray, t_tall: FloatArray) -> list[bytes]:
    """Per pair: the bytes of its two rings (led by the search's budget, which a pair past
    it depends on, and the first ring's number of corners, so that two splits of the same
    numbers differ) and its heights."""
    n = len(a_ring)
    rows = np.concatenate([np.full((n, 1), float(SEARCH_WORK_CAP)),
                           np.full((n, 1), float(a_ring.shape[1])),
                           np.asarray(a_ring, dtype=np.float64).reshape(n, -1),
                           np.asarray(b_ring, dtype=np.float64).reshape(n, -1),
                           np.column_stack([a_elev, a_tall, t_elev, t_tall]).astype(np.float64)],
                          axis=1)
    rows = np.ascontiguousarray(rows)
    out = cast("list[bytes]", rows.view(np.dtype((np.void, rows.shape[1] * 8))).ravel()
               .tolist())
    return out


def _line_of_effect_both(tracer: Tracer, a_ring: FloatArray, b_ring: FloatArray,
                         a_elev: FloatArray, a_tall: FloatArray, t_elev: FloatArray,
                         t_tall: FloatArray, walked: bool = False,
                         group: IntArray | None = None,
                         ) -> tuple[BoolArray, BoolArray]:
    """`line_of_effect_both`, every pair searched."""
    n = len(a_ring)
    if n == 0:
        return np.zeros(0, dtype=bool), np.zeros(0, dtype=bool)
    # The search draws lines through a point ring as its first ring: a pair whose second
    # ring only is a point is looked at the other way round.
    swap = _degenerate(b_ring) & ~_degenerate(a_ring)
    if swap.any():
        w = swap[:, None, None]
        a2, b2 = np.where(w, b_ring, a_ring), np.where(w, a_ring, b_ring)
        a_e, a_t = np.where(swap, t_elev, a_elev), np.where(swap, t_tall, a_tall)
        t_e, t_t = np.where(swap, a_elev, t_elev), np.where(swap, a_tall, t_tall)
        # (Without the groups: a swapped pair's two ways are its group's other two.)
        f, b = _line_of_effect_both(tracer, a2, b2, a_e, a_t, t_e, t_t, walked)
        return np.where(swap, b, f), np.where(swap, f, b)
    fwd = _overlap(a_ring, b_ring)
    back = fwd.copy()
    blk = blockers(tracer)
    todo = np.flatnonzero(~fwd)
    if len(todo) == 0:
        return fwd, back
    if len(blk.xy) == 0:
        fwd[todo] = back[todo] = True
        return fwd, back
    # Sealed by one plain wall, found by the kernel's grid walk over the corner lines.
    plain = np.flatnonzero(tracer.wall_plain)
    if len(plain) and not walked:
        todo = todo[~kernel.sealed_blocks(take_rows(a_ring, todo), take_rows(b_ring, todo),
                                          tracer.wall_xy, plain)]
        if len(todo) == 0:
            return fwd, back
    ar, br = take_rows(a_ring, todo), take_rows(b_ring, todo)
    ext = (a_elev[todo], a_tall[todo], t_elev[todo], t_tall[todo])
    bi, wi = kernel.block_candidates(ar, br, blk.xy)
    # Walls whose band fills the sheet nowhere a line of their pair can cross them stop
    # none of its lines: left out.
    whole, never = _band_fill(blk, ar, br, ext, bi, wi)
    bi, wi, whole = bi[~never], wi[~never], whole[~never]
    if len(bi) == 0:
        fwd[todo] = back[todo] = True
        return fwd, back
    sealed, score = _sealed(blk, ar, br, bi, wi, whole)
    keep = ~sealed[bi]
    bi, wi, whole = bi[keep], wi[keep], whole[keep]
    rest = np.flatnonzero(~sealed)
    if len(rest):
        free_f, free_b = _search(blk, ar, br, ext, bi, wi, whole, rest,
                                 None if group is None else group[todo],
                                 _leaders(bi, score[keep]))
        fwd[todo[rest[free_f]]] = True
        back[todo[rest[free_b]]] = True
    return fwd, back


def _sealed(blk: Blockers, ar: FloatArray, br: FloatArray, bi: IntArray, wi: IntArray,
            whole: BoolArray, robust: bool = False) -> tuple[BoolArray, IntArray]:
    """Per pair: walls near it (rows bi, wi, ascending by pair; `whole`: the row's band
    fills the sheet wherever a line of the pair crosses it, `_band_fill`) that stop every
    line of the pair they cross, alone, separate its two spaces wholly: one crossing every
    line between a corner of ring a and a corner of ring b, or a chain of them (`_chains`).
    And per row, how many of those corner lines it crosses when it stops every line it
    crosses (else -1). `robust`: as `_chains`'."""
    always = blk.stops[wi] | (whole & ~blk.limited[wi] & (blk.direction[wi] == 0))
    sealed = np.zeros(len(ar), dtype=bool)
    sel = np.flatnonzero(always)
    per = ar.shape[1] * br.shape[1]
    hits = np.zeros((len(sel), per), dtype=bool)
    step = max(1, 65536 // per)
    for c0 in range(0, len(sel), step):
        rows = sel[c0:c0 + step]
        hit, _ = kernel.block_hits(ar, br, blk.xy, bi[rows], wi[rows])
        hits[c0:c0 + len(rows)] = hit.reshape(len(rows), -1)
    sealed[bi[sel[hits.all(axis=1)]]] = True
    left = ~sealed[bi[sel]]
    if left.any():
        sealed |= _chains(ar, br, blk.xy, bi[sel[left]], wi[sel[left]], hits[left],
                          robust)
    # Each row's share of the pair's corner lines it crosses (-1: it does not stop every
    # line it crosses), for `_leaders`.
    score = np.full(len(bi), -1, dtype=np.intp)
    score[sel] = hits.sum(axis=1)
    return sealed, score


#: Fractions of the way: how far the crossings `_crossing_fractions` bounds are taken to
#: reach beyond their bounds, so that rounding in the fractions the search computes for
#: the lines it tries never falls outside them.
_FRACTION_SLACK = 1e-7
#: Feet: how clearly a band must fill the sheet (or leave it) where `_band_fill` decides
#: it for all of a pair's lines; closer calls are left to the lines themselves.
_FEET_SLACK = 1e-9
#: Feet: creatures shorter than this have no band judged filling their sheet whole by its
#: reach alone (`_band_reach`): their heads may round to their feet.
_MIN_TALL_FT = 1e-6


def _band_fill(blk: Blockers, ar: FloatArray, br: FloatArray,
               ext: tuple[FloatArray, FloatArray, FloatArray, FloatArray], bi: IntArray,
               wi: IntArray) -> tuple[BoolArray, BoolArray]:
    """Per row (pair bi, wall wi): whether the wall's band (none: a band from floor to
    sky) fills the sheet of sight between the two creatures wherever a line of the pair
    can cross the wall (`whole`: it stops, as far as heights go, every line of the pair
    it crosses), and whether it fills it nowhere there (`never`: it stops none).

    The sheet at a fraction s of the way runs from the feet line to the head line, both
    linear in s (geometry.vertical.sheet). A band holding the sheet's whole reach (the
    lower feet to the higher head) fills it everywhere; one beside that reach, nowhere.
    For the others, the fractions at which lines of the pair cross the wall are bounded
    (`_crossing_fractions`), and the band is decided over those fractions only: near the
    creature on the ground, the sheet is low, however high the other flies. What is not
    clear by _FEET_SLACK stays undecided (neither)."""
    whole, never = _band_reach(blk, ext, bi, wi)
    bottom, top = blk.bottom[wi], blk.top[wi]
    part = np.flatnonzero(~whole & ~never)
    if len(part) == 0:
        return whole, never
    item = bi[part]
    s0, s1 = _crossing_fractions(take_rows(ar, item), take_rows(br, item),
                                 take_rows(blk.xy, wi[part]))
    a_e, a_t, t_e, t_t = (e[item] for e in ext)
    b = np.where(np.isnan(bottom[part]), -np.inf, bottom[part])
    t = np.where(np.isnan(top[part]), np.inf, top[part])
    # Filled at s when feet(s) - bottom >= 0 and top - head(s) >= 0: two linear functions
    # c + m s of s (an unbounded side: always met).
    lines = [(np.where(np.isinf(b), np.inf, a_e - b), t_e - a_e),
             (np.where(np.isinf(t), np.inf, t - a_e - a_t), a_e + a_t - t_e - t_t)]
    fills_all = np.ones(len(part), dtype=bool)
    from_s, to_s = s0.copy(), s1.copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        for c, m in lines:
            at0, at1 = c + m * s0, c + m * s1
            fills_all &= (at0 >= _FEET_SLACK) & (at1 >= _FEET_SLACK)
            # Where c + m s >= -_FEET_SLACK within [s0, s1]: an interval (maybe empty).
            root = -(c + _FEET_SLACK) / m
            rising, falling = m > 0, m < 0
            from_s = np.where(rising, np.maximum(from_s, root), from_s)
            to_s = np.where(falling, np.minimum(to_s, root), to_s)
            flat_out = (m == 0) & (c < -_FEET_SLACK)
            to_s = np.where(flat_out, -np.inf, to_s)
    whole[part] = fills_all
    never[part] = from_s > to_s
    return whole, never


def _band_reach(blk: Blockers, ext: tuple[FloatArray, FloatArray, FloatArray, FloatArray],
                bi: IntArray, wi: IntArray) -> tuple[BoolArray, BoolArray]:
    """`_band_fill` against the sheet's whole reach only, from the lower feet to the
    higher head: a band holding all of it fills the sheet wherever it is crossed, one
    beside it nowhere."""
    lo = np.minimum(ext[0], ext[2])[bi]
    hi = np.maximum(ext[0] + ext[1], ext[2] + ext[3])[bi]
    bottom, top = blk.bottom[wi], blk.top[wi]
    # A sheet of no height (a token a hair tall: its head at its feet, in floats) is met
    # by no band (`band_meets`: the band's bottom below the head, strictly): a band never
    # fills it whole.
    tall = (np.minimum(ext[1], ext[3]) >= _MIN_TALL_FT)[bi]
    exact = _exact_heights(*ext)[bi]
    whole: BoolArray = tall & _band_holds(bottom, top, lo, hi, exact)
    with np.errstate(invalid="ignore"):
        never: BoolArray = (top < lo) | (bottom > hi)
    return whole, never


def _band_holds(bottom: FloatArray, top: FloatArray, lo: FloatArray | float,
                hi: FloatArray | float, exact: BoolArray | bool) -> BoolArray:
    """Whether a band (bottom, top in feet; NaN: unbounded that way) holds the vertical
    reach lo..hi (the lower feet to the higher head of two creatures) wherever a line of
    theirs crosses it. Along a line the sheet's feet and head lines are interpolated
    (geometry.vertical.sheet): for heights that are `exact` (`_exact_heights`) they never
    leave lo..hi, so a band from lo to hi holds it; for others they may round a float step
    out of it (a second reviewer's scene: heads at 7.9 ft, 3.1 + 4.8 and 4.2 + 3.7, a wall
    7.9 ft tall, and a line over it), so the band must hold it by _FEET_SLACK."""
    slack = np.where(exact, 0.0, _FEET_SLACK)
    with np.errstate(invalid="ignore"):
        out: BoolArray = ((np.isnan(bottom) | (bottom <= lo - slack))
                          & (np.isnan(top) | (top >= hi + slack)))
    return out


def _exact_heights(*values: FloatArray) -> BoolArray:
    """Per row: whether these feet values (elevations, heights) are all multiples of 1/64
    ft below 2^40 ft, so that the sums and differences `sheet` works out of them are exact
    and its interpolated lines stay between their ends (each rounding step is monotone)."""
    out = np.ones(np.shape(values[0]), dtype=bool)
    for v in values:
        scaled = np.asarray(v, dtype=np.float64) * 64.0
        with np.errstate(invalid="ignore"):
            out &= (scaled == np.round(scaled)) & (np.abs(v) < 2.0 ** 40)
    return out


def _crossing_fractions(ar: FloatArray, br: FloatArray,
                        w: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per row (rings a and b, wall w): bounds [s0, s1] on the fraction of the way from a
    to b (from where a line leaves ring a to where it enters ring b) at which any line
    between the two rings crosses the wall. Such a line's stretch from its start u to the
    crossing, then v on to its end: s = u / (u + v), with u between the wall's distance to
    ring a and the farthest of a wall end from a corner of a, v likewise for b. Widened by
    _FRACTION_SLACK and kept within [0, 1]."""
    u_lo, u_hi = _ring_distances(ar, w)
    v_lo, v_hi = _ring_distances(br, w)
    with np.errstate(invalid="ignore", divide="ignore"):
        s0 = np.where(u_lo > 0, u_lo / (u_lo + v_hi), 0.0)
        s1 = np.where(v_lo > 0, u_hi / (u_hi + v_lo), 1.0)
    return (np.clip(s0 - _FRACTION_SLACK, 0.0, 1.0),
            np.clip(s1 + _FRACTION_SLACK, 0.0, 1.0))


def _ring_distances(ring: FloatArray, w: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per row (convex ring (R, V, 2), wall (R, 4)): the least distance between the ring
    (its inside included) and the wall, and the greatest between a point of each."""
    px, py = ring[..., 0], ring[..., 1]  # (R, V)
    ax, ay, bx, by = (w[:, k, None] for k in range(4))
    # Greatest: between a corner and a wall end (the distance is convex in both points).
    # (Short axes reduced column by column, `kernel.over_points`: numpy's reduce over them
    # costs several times as much.)
    far = kernel.over_points(np.maximum, np.maximum(np.hypot(px - ax, py - ay),
                                                    np.hypot(px - bx, py - by)))
    # Least: zero where the wall meets the ring (an end inside it, or a side crossed);
    # else from a corner to the wall, or from a wall end to a side.
    qx, qy = kernel.next_corners(px), kernel.next_corners(py)
    dist = kernel.point_segment_distance
    near = kernel.over_points(np.minimum, np.minimum(
        dist(px, py, ax, ay, bx, by),
        np.minimum(dist(ax, ay, px, py, qx, qy), dist(bx, by, px, py, qx, qy))))
    side_a = (qx - px) * (ay - py) - (qy - py) * (ax - px)
    side_b = (qx - px) * (by - py) - (qy - py) * (bx - px)
    # (A ring of one point has sides of no length, on which every point lies: the
    # distances above are then exact.)
    every = functools.partial(kernel.over_points, np.logical_and)
    inside = (every(side_a >= 0) | every(side_a <= 0) | every(side_b >= 0)
              | every(side_b <= 0)) & ~_degenerate(ring)
    wall_p = (bx - ax) * (py - ay) - (by - ay) * (px - ax)
    wall_q = (bx - ax) * (qy - ay) - (by - ay) * (qx - ax)
    crosses = (((side_a <= 0) & (side_b >= 0)) | ((side_a >= 0) & (side_b <= 0))) & (
        ((wall_p <= 0) & (wall_q >= 0)) | ((wall_p >= 0) & (wall_q <= 0)))
    meets = inside | kernel.over_points(np.logical_or, crosses)
    return np.where(meets, 0.0, near), far


#: Walls per pair tried first against its lines (`_leaders`).
LEADERS = 2


def _leaders(bi: IntArray, score: IntArray) -> BoolArray:
    """Per row (pair bi, ascending): one of the LEADERS walls of its pair that stop every
    line they cross and cross most of its corner lines. A pair with no free line has
    hundreds of lines tried; most of them are stopped by one of these, which are tried
    first, and only the lines they leave against all the pair's walls."""
    order = np.lexsort((-score, bi))
    first = np.searchsorted(bi[order], bi[order])
    lead = np.zeros(len(bi), dtype=bool)
    lead[order[(np.arange(len(bi)) - first) < LEADERS]] = True
    out: BoolArray = lead & (score > 0)
    return out


def _chains(ar: FloatArray, br: FloatArray, xy: FloatArray, bi: IntArray, wi: IntArray,
            hits: BoolArray, robust: bool = False) -> BoolArray:
    """Per pair: a chain of walls (rows bi, wi, ascending by pair, each stopping alone
    every line of the pair it crosses; hits: which corner lines each crosses) that meet
    one another at points inside the hull of the two rings, touch neither ring, and reach
    across the hull from one of its two sides between the rings to the other, separates
    the two spaces: any line from one to the other meets the chain, at a point of its
    interior, and where it meets a wall of the chain along that wall's length it meets
    the walls the chain continues with at the ends, across (a room's corner, a wall
    ending on another, a door frame).

    The hull's sides between the rings are the corner lines with every corner on one
    side of them (two of them, or several on one line).

    Whether two walls meet is worked out from their numbers, and rounding reads two walls
    a float step apart as met. That is harmless where the chain only spares the search
    (the answer is 'none' either way, to a float step, and a ruleset's sample lines,
    traced first, find a line through such a gap). `robust` (a proof that skips the
    sample lines: `walled_apart`): the close calls go to GEOS's robust predicate
    (`_meeting`'s `robust`)."""
    out = np.zeros(len(ar), dtype=bool)
    # Only the pairs with rows here, renumbered densely (bi ascending: each run of one
    # pair's rows starts a new number).
    run = kernel.run_starts(bi[1:] != bi[:-1])
    items, bi = bi[run], np.cumsum(run) - 1
    ar, br = take_rows(ar, items), take_rows(br, items)
    pts = np.concatenate([ar, br], axis=1)  # (N, V + W, 2)
    v_n, w_n = ar.shape[1], br.shape[1]
    # Coordinates as separate x and y planes: the same products as (rel x d) with 2-vectors,
    # on contiguous arrays (a trailing axis of 2 makes every step a strided one).
    px, py = pts[..., 0].copy(), pts[..., 1].copy()  # (N, K)
    # Hull sides: lines through two corners with every corner on one side. Of two convex
    # rings, only a side of either ring or a line from a corner of one to a corner of the
    # other can be one (a line through two corners of one ring that are not neighbours
    # has corners of that ring on both sides, or on it: then it is the line of a side):
    # those are tested, the corner lines first (`_hull_lines`).
    ii, jj = _hull_lines(v_n, w_n)
    hx, hy = np.take(px, ii, axis=1), np.take(py, ii, axis=1)  # (N, H)
    hdx, hdy = np.take(px, jj, axis=1) - hx, np.take(py, jj, axis=1) - hy
    hreal = (hdx != 0) | (hdy != 0)
    if hdx.size * px.shape[1] <= _HULL_SIDES_AT_ONCE:
        ho = (hdx[..., None] * (py[:, None, :] - hy[..., None])
              - hdy[..., None] * (px[:, None, :] - hx[..., None]))  # (N, H, K)
        h_left = (ho >= 0).all(axis=2) & hreal
        h_right_all = (ho <= 0).all(axis=2) & hreal
    else:
        # A corner at a time: the same products, without (N, H, K) temporaries (a hex
        # matrix's 1,400 pairs: 9 MB each, 13.8 against 6.0 ms).
        h_left, h_right_all = hreal.copy(), hreal.copy()
        for k in range(px.shape[1]):
            side = hdx * (py[:, k, None] - hy) - hdy * (px[:, k, None] - hx)
            h_left &= side >= 0
            h_right_all &= side <= 0
    # The corner lines (a's p to b's q, as block lines number them) are the first V x W
    # lines: whether every corner lies on their left (or on them), or every corner on
    # their right.
    side1, side2 = h_left[:, :v_n * w_n], h_right_all[:, :v_n * w_n]
    h_right = h_right_all & ~h_left
    rows = len(bi)
    cross1 = (hits & take_rows(side1, bi)).any(axis=1)
    cross2 = (hits & take_rows(side2, bi)).any(axis=1)
    # Only the rows of pairs with rows crossing both hull sides can make a chain: the
    # others' walls are not tested against the rings.
    reaches = np.zeros((2, len(ar)), dtype=bool)
    reaches[0, bi[cross1]] = True
    reaches[1, bi[cross2]] = True
    may = np.flatnonzero((reaches[0] & reaches[1])[bi])
    if len(may) == 0:
        return out
    w = take_rows(xy, wi)
    wm, bm = take_rows(w, may), bi[may]
    clear = np.zeros(rows, dtype=bool)
    if ar.shape[1] == br.shape[1]:
        # Both rings in one call (its costs are mostly fixed).
        touch = _touches(np.concatenate([ar, br]), np.concatenate([bm, bm + len(ar)]),
                         np.concatenate([wm, wm]))
        clear[may] = ~(touch[:len(may)] | touch[len(may):])
    else:
        clear[may] = ~_touches(ar, bm, wm) & ~_touches(br, bm, wm)
    reaches[:] = False
    reaches[0, bi[clear & cross1]] = True
    reaches[1, bi[clear & cross2]] = True
    useful = clear & (reaches[0] & reaches[1])[bi]
    if not useful.any():
        return out
    idx = np.flatnonzero(useful)
    # Pairs of rows of one pair whose walls may meet: each row's wall against the walls
    # whose boxes meet its box (`_near_walls`), found among its pair's rows; not every two
    # rows of the pair (a pair far apart on a big map has hundreds of walls near it, and
    # tens of thousands of pairs of them).
    near = _near_walls(xy)
    if near is None:
        return out
    indptr, nbrs = near
    n_walls = np.int64(len(indptr) - 1)
    wu = wi[idx]
    deg = indptr[wu + 1] - indptr[wu]
    cand = np.repeat(idx, deg)
    partner = nbrs[np.repeat(indptr[wu], deg) + kernel.within_runs(deg)]
    key = bi[idx].astype(np.int64) * n_walls + wu
    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    want = bi[cand].astype(np.int64) * n_walls + partner
    at = np.minimum(np.searchsorted(sorted_key, want), max(len(sorted_key) - 1, 0))
    found = (sorted_key[at] == want) if len(sorted_key) else np.zeros(0, dtype=bool)
    other = idx[order[at[found]]]
    cand = cand[found]
    # Each two rows once, the earlier first (as every two rows of a pair were taken).
    u, v = np.minimum(cand, other), np.maximum(cand, other)
    uv = np.unique(u.astype(np.int64) * rows + v)
    u, v = (uv // rows).astype(np.intp), (uv % rows).astype(np.intp)
    wt = np.ascontiguousarray(w.T)
    meet, point = _meeting(wt[:, u], wt[:, v], robust)
    u, v, point = u[meet], v[meet], point[meet]
    # Meeting points inside the hull (on the inner side of every hull side, or on it).
    inside = _in_hulls(px, py, (hx, hy, hdx, hdy), h_left, h_right, bi[u], point)
    u, v = u[inside], v[inside]
    label = np.arange(rows)
    if len(u):
        # Each row's smallest label over its meetings, by one sort (ufunc.at is slow),
        # then pointer jumping, until nothing changes.
        ends = np.concatenate([u, v])
        other = np.concatenate([v, u])
        order = np.argsort(ends, kind="stable")
        ends, other = ends[order], other[order]
        starts = np.flatnonzero(kernel.run_starts(ends[1:] != ends[:-1]))
        nodes = ends[starts]
        for _ in range(64):
            before = label
            best = np.minimum.reduceat(label[other], starts)
            label = label.copy()
            label[nodes] = np.minimum(label[nodes], best)
            label = label[label]
            if (label == before).all():
                break
    comp1 = np.zeros(rows, dtype=bool)
    comp2 = np.zeros(rows, dtype=bool)
    comp1[label[cross1 & useful]] = True
    comp2[label[cross2 & useful]] = True
    both = comp1 & comp2
    out[items[bi[both[label] & useful]]] = True
    return out


#: (pair x line x corner) products up to which `_chains` tests every corner against the
#: lines that can be hull sides (`_hull_lines`) at once (a move's few pairs); past it, a
#: corner at a time.
_HULL_SIDES_AT_ONCE = 1 << 15


#: Per blockers' segments (by identity: `blockers` keeps them per set of walls): each
#: segment's neighbours, the segments whose boxes, grown a hair, meet its box (None: more
#: than _NEAR_PAIRS_CAP of them).
_NEAR_WALLS: dict[int, tuple[FloatArray, tuple[IntArray, IntArray] | None]] = {}
_NEAR_WALLS_KEPT = 8
#: Pixels the boxes of `_near_walls` are grown by: two segments that `_meeting` finds to
#: meet (with rounding) always have boxes that meet grown so.
_NEAR_PX = 1e-6
#: Neighbours (segment, segment) past which a set of segments is too tangled for chains
#: (`_near_walls`). A map's walls meet a few others each: 1,000 benchmark walls have about
#: 3,000; a lattice of 3,000 long walls across 3,000 others has 18 million, which took
#: 0.9 GB and 4 s to list.
_NEAR_PAIRS_CAP = 1 << 22
#: Segments whose neighbours one STRtree query lists (its output is at most this many
#: times the segments: 128 x 20,000 rows, 40 MB, for a lattice).
_NEAR_CHUNK = 128


def _near_walls(xy: FloatArray) -> tuple[IntArray, IntArray] | None:
    """The segments xy (M, 4) whose boxes meet each one's (grown by _NEAR_PX), as CSR
    (indptr (M + 1), neighbours; a segment is not its own): a superset of the segments it
    meets, found once per set of segments with an STRtree. None when they pass
    _NEAR_PAIRS_CAP (found in chunks, so that such a set is given up on before its list
    is built): no chain is then looked for, and the search decides."""
    held = _NEAR_WALLS.get(id(xy))
    if held is not None and held[0] is xy:
        return held[1]
    lo = np.minimum(xy[:, 0:2], xy[:, 2:4]) - _NEAR_PX
    hi = np.maximum(xy[:, 0:2], xy[:, 2:4]) + _NEAR_PX
    boxes = shapely.box(lo[:, 0], lo[:, 1], hi[:, 0], hi[:, 1])
    tree = shapely.STRtree(boxes)
    parts: list[tuple[IntArray, IntArray]] = []
    found = 0
    out: tuple[IntArray, IntArray] | None = None
    for c0 in range(0, len(xy), _NEAR_CHUNK):
        i, j = tree.query(boxes[c0:c0 + _NEAR_CHUNK])
        i = i + c0
        keep = i != j
        parts.append((i[keep], j[keep]))
        found += int(keep.sum())
        if found > _NEAR_PAIRS_CAP:
            break
    else:
        i = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, dtype=np.intp)
        j = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, dtype=np.intp)
        order = np.lexsort((j, i))
        i, j = i[order].astype(np.intp), j[order].astype(np.intp)
        indptr = np.zeros(len(xy) + 1, dtype=np.intp)
        np.cumsum(np.bincount(i, minlength=len(xy)), out=indptr[1:])
        out = (indptr, j)
    if len(_NEAR_WALLS) >= _NEAR_WALLS_KEPT:
        drop_oldest(_NEAR_WALLS)
    _NEAR_WALLS[id(xy)] = (xy, out)
    return out


def _in_hulls(px: FloatArray, py: FloatArray,
              lines: tuple[FloatArray, FloatArray, FloatArray, FloatArray],
              h_left: BoolArray, h_right: BoolArray, item: IntArray,
              point: FloatArray) -> IntArray:
    """The points (point[k] of pair item[k]) inside their pair's hull: on the inner side
    of every hull side, or on it. A pair's corners are px, py (N, K); the lines that can be
    hull sides (`_hull_lines`) start at x, y with direction dx, dy (`lines`, (N, H) each);
    h_left (h_right): the line is a hull side with every corner on its left (right). Only
    the points inside the corners' box grown a hair are tested, and only against each
    pair's hull sides (a few of its H lines)."""
    hx, hy, hdx, hdy = lines
    box_lo = np.column_stack([px.min(axis=1), py.min(axis=1)]) - _NEAR_PX
    box_hi = np.column_stack([px.max(axis=1), py.max(axis=1)]) + _NEAR_PX
    boxed = np.flatnonzero(((point >= box_lo[item]) & (point <= box_hi[item])).all(axis=1))
    item, point = item[boxed], point[boxed]
    if len(item) * hx.shape[1] <= _IN_HULLS_DIRECT:
        # Few points: each against all H lines at once, the hull sides picked by mask
        # (gathering each pair's sides, below, costs more calls than it saves).
        po = (hdx[item] * (point[:, 1, None] - hy[item])
              - hdy[item] * (point[:, 0, None] - hx[item]))
        bad = (h_left[item] & (po < 0)) | (h_right[item] & (po > 0))
        direct: IntArray = boxed[~bad.any(axis=1)]
        return direct
    # Each pair's hull sides, with the side of them the hull lies on: +1 left, -1 right,
    # 0 padding.
    real_side = h_left | h_right
    n_sides = max(int(real_side.sum(axis=1).max(initial=0)), 1)
    which = np.argsort(~real_side, axis=1, kind="stable")[:, :n_sides]
    sign = np.where(np.take_along_axis(h_left, which, axis=1), 1.0,
                    np.where(np.take_along_axis(h_right, which, axis=1), -1.0, 0.0))
    sx, sy = np.take_along_axis(hx, which, axis=1), np.take_along_axis(hy, which, axis=1)
    sdx, sdy = np.take_along_axis(hdx, which, axis=1), np.take_along_axis(hdy, which, axis=1)
    po = (sdx[item] * (point[:, 1, None] - sy[item])
          - sdy[item] * (point[:, 0, None] - sx[item]))
    out: IntArray = boxed[~(sign[item] * po < 0).any(axis=1)]
    return out


#: (point x line) products past which `_in_hulls` gathers each pair's hull sides first.
_IN_HULLS_DIRECT = 65536


@functools.lru_cache(maxsize=64)
def _hull_lines(v_n: int, w_n: int) -> tuple[IntArray, IntArray]:
    """For rings of v_n and w_n corners side by side (a's first), the lines `_chains`
    tests as hull sides, as (i, j) corner positions: every corner line (p, v_n + q), in
    the block lines' order (p * w_n + q), then each ring's sides (corner to next, the last
    to the first). Read-only, kept per shape. (Leaving the rings' own sides out changed
    no proof in the calls tried, the benchmark scenes' and made-up ones: a chain's walls
    touch neither ring. They keep the hull whole all the same.)"""
    p, q = np.divmod(np.arange(v_n * w_n), w_n)
    ii, jj = [p], [v_n + q]
    for start, count in ((0, v_n), (v_n, w_n)):
        if count > 1:
            k = np.arange(count)
            nxt = (k + 1) % count
            # (A ring of two corners has one side, not two.)
            keep = k < nxt if count == 2 else np.ones(count, dtype=bool)
            ii.append(start + np.minimum(k, nxt)[keep])
            jj.append(start + np.maximum(k, nxt)[keep])
    out_i, out_j = np.concatenate(ii).astype(np.intp), np.concatenate(jj).astype(np.intp)
    out_i.setflags(write=False)
    out_j.setflags(write=False)
    return out_i, out_j


def _touches(rings: FloatArray, bi: IntArray, w: FloatArray) -> BoolArray:
    """Per row: whether wall w[k] (x0, y0, x1, y1) touches ring rings[bi[k]] (closed):
    boxes apart never do; the rest by separating axes."""
    lo = kernel.over_points(np.minimum, rings)[bi]
    hi = kernel.over_points(np.maximum, rings)[bi]
    near = ((np.minimum(w[:, 0], w[:, 2]) <= hi[:, 0]) & (np.maximum(w[:, 0], w[:, 2]) >= lo[:, 0])
            & (np.minimum(w[:, 1], w[:, 3]) <= hi[:, 1])
            & (np.maximum(w[:, 1], w[:, 3]) >= lo[:, 1]))
    out = np.zeros(len(bi), dtype=bool)
    k = np.flatnonzero(near)
    if len(k):
        seg = np.stack([w[k, 0:2], w[k, 2:4]], axis=1)
        out[k] = _overlap(take_rows(rings, bi[k]), seg)
    return out


def _clearly_met(a: FloatArray, b: FloatArray,
                 worked: tuple[FloatArray, ...]) -> BoolArray:
    """Row-paired segments, column-wise as `_meeting` takes them, with what `_meeting`
    worked out of them (`worked`: a's and b's directions rx, ry, sx, sy, den, b's start
    less a's qpx, qpy, and t and u along a and b): whether
    they certainly meet, rounding aside: they share an end (the very same numbers: walls
    drawn end to end), or they cross well inside both (far from their ends, and far from
    parallel)."""
    shared = (((a[0] == b[0]) & (a[1] == b[1])) | ((a[0] == b[2]) & (a[1] == b[3]))
              | ((a[2] == b[0]) & (a[3] == b[1])) | ((a[2] == b[2]) & (a[3] == b[3])))
    rx, ry, sx, sy, den, qpx, qpy, t, u = worked
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # Each numerator is a difference of products that may cancel: its rounding is up
        # to a few float steps of the products' sizes, and t's (u's) that over |den|.
        eps = 8 * np.finfo(np.float64).eps
        t_err = eps * (np.abs(qpx * sy) + np.abs(qpy * sx)) / np.abs(den)
        u_err = eps * (np.abs(qpx * ry) + np.abs(qpy * rx)) / np.abs(den)
    steep = np.abs(den) > _CLEAR * np.hypot(rx, ry) * np.hypot(sx, sy)
    t_in = (t > _CLEAR + t_err) & (t < 1 - _CLEAR - t_err)
    u_in = (u > _CLEAR + u_err) & (u < 1 - _CLEAR - u_err)
    out: BoolArray = shared | (steep & t_in & u_in)
    return out


#: How far inside both segments (as a fraction of each), and how far from parallel (the
#: sine of the angle), two walls must cross for `_clearly_met` to trust the arithmetic.
_CLEAR = 1e-6


def _meeting(a: FloatArray, b: FloatArray,
             robust: bool = False) -> tuple[BoolArray, FloatArray]:
    """Row-paired segments, given column-wise ((4, M): x0, y0, x1, y1 planes): whether
    they meet (closed segments), and a point where they do ((M, 2)).

    Worked out from their numbers, rounding reads two segments a float step apart as
    met. `robust`: the close calls (not `_clearly_met`) among those read as met go to
    GEOS's robust predicate, which has the last word."""
    px, py, rx, ry = a[0], a[1], a[2] - a[0], a[3] - a[1]
    qx, qy, sx, sy = b[0], b[1], b[2] - b[0], b[3] - b[1]
    den = rx * sy - ry * sx
    qpx, qpy = qx - px, qy - py
    t_num = qpx * sy - qpy * sx
    u_num = qpx * ry - qpy * rx
    with np.errstate(divide="ignore", invalid="ignore"):
        t, u = t_num / den, u_num / den
    crossing = (den != 0) & (t >= 0) & (t <= 1) & (u >= 0) & (u <= 1)
    tc = np.where(crossing, t, 0.0)
    point = np.full((len(px), 2), np.nan)
    point[crossing, 0] = (px + tc * rx)[crossing]
    point[crossing, 1] = (py + tc * ry)[crossing]
    # Parallel: collinear and overlapping; the meeting point an end of one on the other.
    para = (den == 0) & (t_num == 0)
    met = crossing.copy()
    if para.any():
        k = np.flatnonzero(para)
        ak, bk = a[:, k], b[:, k]
        # The overlap of the two boxes: on collinear segments, their common stretch.
        lo = np.maximum(np.minimum(ak[0:2], ak[2:4]), np.minimum(bk[0:2], bk[2:4]))
        hi = np.minimum(np.maximum(ak[0:2], ak[2:4]), np.maximum(bk[0:2], bk[2:4]))
        # The first of b's ends, then a's, that lies in it.
        ends = np.stack([bk[0:2], bk[2:4], ak[0:2], ak[2:4]])  # (4, 2, m)
        on = ((ends >= lo) & (ends <= hi)).all(axis=1)  # (4, m)
        done = on.any(axis=0)
        at = ends[on.argmax(axis=0), :, np.arange(len(k))]  # (m, 2)
        point[k[done]] = at[done]
        met[k] = done
    if robust:
        doubt = np.flatnonzero(met & ~_clearly_met(a, b, (rx, ry, sx, sy, den, qpx, qpy, t,
                                                          u)))
        if len(doubt):
            met[doubt] = shapely.intersects(
                shapely.linestrings(a[:, doubt].T.reshape(-1, 2, 2)),
                shapely.linestrings(b[:, doubt].T.reshape(-1, 2, 2)))
    return met, point


#: Pixels: how clearly the other ring must lie on the inner side of a side's line for the
#: side to be a back side (`_back_sides`).
_BACK_MARGIN_PX = 1e-6


def _back_sides(ring: FloatArray, other: FloatArray) -> BoolArray:
    """Per ring (N, V, 2) and side (from corner v to the next): whether the other ring
    (N, W, 2) lies wholly and clearly on the inner side of the side's line. A line from
    the other ring that meets such a side has already crossed the ring's inside, so the
    stretch of a line between the two rings never starts there."""
    proj, length = _side_offsets(ring, other)
    out: BoolArray = (length > 0) & (proj.min(axis=2) > _BACK_MARGIN_PX * length)
    return out


def _events(ar: FloatArray, br: FloatArray, xy: FloatArray, bi: IntArray,
            wi: IntArray, items: IntArray, lean: BoolArray | None = None,
            ) -> tuple[IntArray, FloatArray]:
    """(item, point) for every event point of the items, items ascending: ring corners,
    wall ends that may lie in the hull of the two rings (inside their bounding box and
    their band across the line between their centres), and walls' crossings of ring
    sides. `lean`: per item, whether the events on each ring's back (`_back_sides`: its
    corners between two back sides, walls' crossings of a back side) are left out. The
    stretch of a line between the two rings starts and ends on their front sides, so a
    line turning about a back corner, or meeting a wall where it crosses a back side,
    changes nothing of the walls its stretch crosses: the cells of the events left have
    one answer each, as long as no wall's stop varies within a cell (`_varies`: the
    caller's `lean` leaves those items whole)."""
    back_a = np.zeros(ar.shape[:2], dtype=bool)
    back_b = np.zeros(br.shape[:2], dtype=bool)
    if lean is not None and lean[items].any():
        slim = items[lean[items]]
        ar_s, br_s = take_rows(ar, slim), take_rows(br, slim)
        back_a[slim] = _back_sides(ar_s, br_s)
        back_b[slim] = _back_sides(br_s, ar_s)
    parts_i: list[IntArray] = []
    parts_p: list[FloatArray] = []
    for ring, back in ((ar, back_a), (br, back_b)):
        # A corner between two back sides (the side before it and the side after it).
        keep = take_rows(~(back & np.roll(back, 1, axis=1)), items).reshape(-1)
        parts_i.append(np.repeat(items, ring.shape[1])[keep])
        parts_p.append(np.compress(keep, take_rows(ring, items).reshape(-1, 2), axis=0))
    both = np.concatenate([ar, br], axis=1)
    box_lo = kernel.over_points(np.minimum, both)
    box_hi = kernel.over_points(np.maximum, both)
    axis = (kernel.over_points(np.add, ar) / ar.shape[1]
            - kernel.over_points(np.add, br) / br.shape[1])
    normal = np.column_stack([-axis[:, 1], axis[:, 0]])
    proj = np.einsum("nvk,nk->nv", both, normal)
    p_lo, p_hi = proj.min(axis=1), proj.max(axis=1)
    w = take_rows(xy, wi)
    nb = take_rows(normal, bi)
    lo_b, hi_b = take_rows(box_lo, bi), take_rows(box_hi, bi)
    for end in (w[:, 0:2], w[:, 2:4]):
        at = end[:, 0] * nb[:, 0] + end[:, 1] * nb[:, 1]
        within = (end >= lo_b) & (end <= hi_b)
        inside = (within[:, 0] & within[:, 1] & (at >= p_lo[bi]) & (at <= p_hi[bi]))
        parts_i.append(bi[inside])
        parts_p.append(np.compress(inside, end, axis=0))
    for ring, back in ((ar, back_a), (br, back_b)):
        v = take_rows(ring, bi)  # (R, V, 2)
        nxt = kernel.next_corners(v)
        a0, a1 = w[:, None, 0:2], w[:, None, 2:4]
        d1, d2 = a1 - a0, nxt - v
        den = d1[..., 0] * d2[..., 1] - d1[..., 1] * d2[..., 0]
        diff = v - a0
        with np.errstate(divide="ignore", invalid="ignore"):
            s = (diff[..., 0] * d2[..., 1] - diff[..., 1] * d2[..., 0]) / den
            u = (diff[..., 0] * d1[..., 1] - diff[..., 1] * d1[..., 0]) / den
        ok = (den != 0) & (s >= 0) & (s <= 1) & (u >= 0) & (u <= 1) & ~take_rows(back, bi)
        r, k = np.nonzero(ok)
        if len(r):
            parts_i.append(bi[r])
            parts_p.append(a0[r, 0] + d1[r, 0] * s[r, k][:, None])
    item = np.concatenate(parts_i)
    pts = np.concatenate(parts_p)
    # Each point once per item (walls meeting end to end share their ends).
    order = np.lexsort((pts[:, 1], pts[:, 0], item))
    item, pts = item[order], take_rows(pts, order)
    new = np.ones(len(item), dtype=bool)
    new[1:] = (item[1:] != item[:-1]) | (pts[1:, 0] != pts[:-1, 0]) | (pts[1:, 1] != pts[:-1, 1])
    return item[new], np.compress(new, pts, axis=0)


def _clip(p0: FloatArray, d: FloatArray, normal: FloatArray,
          offset: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per line p0 + t d and convex ring (row-paired, as its sides' inward normals and
    offsets, `_sides`): the interval of t inside the ring (empty when lo > hi)."""
    nx, ny = normal[..., 0], normal[..., 1]
    a = nx * d[:, None, 0] + ny * d[:, None, 1]
    b = nx * p0[:, None, 0] + ny * p0[:, None, 1] - offset
    # a t + b >= 0 on every side.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = -b / a
    lo = np.where(a > 0, ratio, -np.inf).max(axis=1)
    hi = np.where(a < 0, ratio, np.inf).min(axis=1)
    outside = ((a == 0) & (b < 0)).any(axis=1)
    lo = np.where(outside, np.inf, lo)
    return lo, hi


def _clip_boxes(p0: FloatArray, d: FloatArray,
                box: FloatArray) -> tuple[FloatArray, FloatArray]:
    """`_clip` for rings that are boxes (x0, y0, x1, y1) with sides along the axes: the
    interval of t with p0 + t d inside the box, borders included (empty when lo > hi)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        tx0 = (box[:, 0] - p0[:, 0]) / d[:, 0]
        tx1 = (box[:, 2] - p0[:, 0]) / d[:, 0]
        ty0 = (box[:, 1] - p0[:, 1]) / d[:, 1]
        ty1 = (box[:, 3] - p0[:, 1]) / d[:, 1]
    still_x, still_y = d[:, 0] == 0, d[:, 1] == 0
    lo = np.maximum(np.where(still_x, -np.inf, np.minimum(tx0, tx1)),
                    np.where(still_y, -np.inf, np.minimum(ty0, ty1)))
    hi = np.minimum(np.where(still_x, np.inf, np.maximum(tx0, tx1)),
                    np.where(still_y, np.inf, np.maximum(ty0, ty1)))
    outside = (still_x & ((p0[:, 0] < box[:, 0]) | (p0[:, 0] > box[:, 2]))) | (
        still_y & ((p0[:, 1] < box[:, 1]) | (p0[:, 1] > box[:, 3])))
    return np.where(outside, np.inf, lo), hi


def _as_boxes(ring: FloatArray) -> FloatArray | None:
    """Rings (N, V, 2) as boxes (N, 4: x0, y0, x1, y1) when every one is a box of some
    width and height with sides along the axes (a square grid's spaces); else None."""
    if ring.shape[1] != 4 or len(ring) == 0:
        return None
    nxt = kernel.next_corners(ring)
    if not ((ring[..., 0] == nxt[..., 0]) | (ring[..., 1] == nxt[..., 1])).all():
        return None
    lo, hi = kernel.over_points(np.minimum, ring), kernel.over_points(np.maximum, ring)
    if not (hi > lo).all():
        return None  # a point (an origin) or a segment: `_clip` reads it its own way
    return np.concatenate([lo, hi], axis=1)


def _shared_sides(ring: FloatArray) -> tuple[FloatArray, FloatArray] | None:
    """When every ring (N, V, 2) has sides in the same V directions, in the same order (a
    hex grid's hexes, each a hair inside): those sides' unit inward normals (V, 2), and
    each ring's offsets along them (N, V); else None. A line is then clipped with one
    small product per line, without gathering each ring's normals."""
    if len(ring) == 0:
        return None
    _, normal = _inward(ring)
    length = np.hypot(normal[..., 0], normal[..., 1])
    if not (length > 0).all():
        return None
    unit = normal / length[..., None]
    shared = unit[0]
    # Rings of one layout are the same hexagon moved and inset: their sides turn by
    # rounding only (a side off by 1e-9 rad moves by far less than EPSILON_PX).
    if not (np.abs(unit - shared).max() < 1e-9):
        return None
    half = len(shared) // 2
    if len(shared) % 2 == 0 and np.abs(shared[half:] + shared[:half]).max() < 1e-9:
        # Sides in parallel pairs (a hexagon's): each pair's normals made exactly
        # opposite, so that a line is clipped to the strip between them at once
        # (`_clip_slabs`).
        shared = np.concatenate([shared[:half], -shared[:half]])
    offset: FloatArray = np.einsum("vk,nvk->nv", shared, ring)
    return shared, offset


def _in_slabs(normal: FloatArray) -> bool:
    """Whether shared sides' normals (V, 2) come in exactly opposite pairs, side k and
    side k + V/2 (`_shared_sides` makes a hexagon's so)."""
    half = len(normal) // 2
    return len(normal) % 2 == 0 and bool((normal[half:] == -normal[:half]).all())


def _clip_slabs(p0: FloatArray, d: FloatArray, normal: FloatArray,
                offset: FloatArray) -> tuple[FloatArray, FloatArray]:
    """`_clip_shared` for sides in opposite pairs (`_in_slabs`): a pair at a time, the
    strip between side k's line and side k + V/2's, with one product for both. The
    bounds on t are the very numbers `_clip_shared` works out for the two sides (the
    same operations, in the same order, up to a sign), so the intervals are the same."""
    n = len(p0)
    half = len(normal) // 2
    lo, hi = np.full(n, -np.inf), np.full(n, np.inf)
    outside = np.zeros(n, dtype=bool)
    dx, dy = np.ascontiguousarray(d[:, 0]), np.ascontiguousarray(d[:, 1])
    px, py = np.ascontiguousarray(p0[:, 0]), np.ascontiguousarray(p0[:, 1])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for k, (nx, ny) in enumerate(normal[:half].tolist()):
            near, far = offset[k], offset[k + half]
            # Inside the strip: near <= n.x <= -far.
            a = nx * dx + ny * dy
            c = nx * px + ny * py
            t0 = (near - c) / a
            t1 = (-far - c) / a
            t_lo, t_hi = np.minimum(t0, t1), np.maximum(t0, t1)
            if not a.all():
                # Lines along the strip: inside it or not, whatever t.
                along = a == 0
                t_lo[along], t_hi[along] = -np.inf, np.inf
                outside |= along & ((c < near) | (-c < far))
            np.maximum(lo, t_lo, out=lo)
            np.minimum(hi, t_hi, out=hi)
    return np.where(outside, np.inf, lo), hi


def _clip_shared(p0: FloatArray, d: FloatArray, normal: FloatArray,
                 offset: FloatArray) -> tuple[FloatArray, FloatArray]:
    """`_clip` for rings with shared sides (`_shared_sides`): normal (V, 2), offset of
    each line's ring (V, N: side by side, each side's offsets one contiguous row).

    A side at a time, over every line: the same products as a (V, N) array would hold,
    without its temporaries (a hex search clips ~30,000 lines a round: each (6, N)
    temporary was 1.5 MB, and the whole clip 4.9 against 2.9 ms a call). Written out, not
    `normal @ d.T`: a matrix product with an inner size of 2 goes to BLAS, whose threads
    spin beside the server's worker (docs/geometry.md, 'No matrix products')."""
    n = len(p0)
    lo, hi = np.full(n, -np.inf), np.full(n, np.inf)
    outside = np.zeros(n, dtype=bool)
    dx, dy = np.ascontiguousarray(d[:, 0]), np.ascontiguousarray(d[:, 1])
    px, py = np.ascontiguousarray(p0[:, 0]), np.ascontiguousarray(p0[:, 1])
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for (nx, ny), off in zip(normal.tolist(), offset, strict=True):
            # a t + b >= 0 on this side.
            a = nx * dx + ny * dy
            b = nx * px + ny * py - off
            ratio = -b / a
            np.maximum(lo, np.where(a > 0, ratio, -np.inf), out=lo)
            np.minimum(hi, np.where(a < 0, ratio, np.inf), out=hi)
            outside |= (a == 0) & (b < 0)
    return np.where(outside, np.inf, lo), hi


@dataclass(frozen=True, slots=True)
class _Clipper:
    """How lines are clipped to a set of rings, the fastest way they allow: as boxes
    along the axes (a square grid's spaces), by sides all of them share (a hex grid's
    hexes, whose sides also come in opposite pairs), or by each ring's own sides."""

    boxes: FloatArray | None = None
    normal: FloatArray | None = None  # shared (V, 2), or each ring's (N, V, 2)
    offset: FloatArray | None = None  # (V, N) with shared sides, else (N, V)
    #: Shared sides in opposite pairs (`_clip_slabs`).
    slabs: bool = False

    @classmethod
    def of(cls, ring: FloatArray) -> _Clipper:
        boxes = _as_boxes(ring)
        if boxes is not None:
            return cls(boxes=boxes)
        shared = _shared_sides(ring)
        if shared is not None:
            # Offsets side by side (V, N), as `_clip_shared` reads them.
            return cls(normal=shared[0], offset=np.ascontiguousarray(shared[1].T),
                       slabs=_in_slabs(shared[0]))
        normal, offset = _sides(ring)
        return cls(normal=normal, offset=offset)

    def clip(self, p0: FloatArray, d: FloatArray, li: IntArray) -> tuple[FloatArray, FloatArray]:
        """Lines p0 + t d clipped to rings li: the interval of t inside each."""
        if self.boxes is not None:
            return _clip_boxes(p0, d, take_rows(self.boxes, li))
        assert self.normal is not None and self.offset is not None
        if self.normal.ndim == 2:
            # (np.take along axis 1: the same columns as [:, li] at a third of the cost.)
            clip = _clip_slabs if self.slabs else _clip_shared
            return clip(p0, d, self.normal, np.take(self.offset, li, axis=1))
        return _clip(p0, d, take_rows(self.normal, li), take_rows(self.offset, li))


def _sides(ring: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per ring (N, V, 2): each side's inward normal and its offset (normal . start): a
    point x is on the inner side of side v when normal . x >= offset."""
    start, normal = _inward(ring)
    offset: FloatArray = np.einsum("nvk,nvk->nv", normal, start)
    return normal, offset


@dataclass(frozen=True, slots=True)
class _Lines:
    """The lines `_search` tries, by unit: a unit of an item is either two of its event
    points (`it`, `p`, `q`: the lines through them shifted EPSILON_PX to either side
    along `nrm`, and where `turn`, turned either way too: four lines, else two), or one
    line as it is (`x_it`, `x_p0`, `x_p1`: from an origin, or point to point). Units are
    made into lines only when tried (`of`): most items with a free line find it among
    their first few, and drawing every line of every item cost as much as trying them."""

    it: IntArray
    p: FloatArray
    q: FloatArray
    nrm: FloatArray
    turn: BoolArray
    x_it: IntArray
    x_p0: FloatArray
    x_p1: FloatArray

    @property
    def items(self) -> IntArray:
        """Per unit, its item (the event-point units first)."""
        out: IntArray = np.concatenate([self.it, self.x_it])
        return out

    def of(self, units: IntArray) -> tuple[IntArray, FloatArray, FloatArray]:
        """(item, p0, p1) of every line of these units."""
        b = units[units < len(self.it)]
        x = units[units >= len(self.it)] - len(self.it)
        it, p, q, nrm, turn = self.it[b], self.p[b], self.q[b], self.nrm[b], self.turn[b]
        li, p0, p1 = [it, self.x_it[x]], [p + nrm, self.x_p0[x]], [q + nrm, self.x_p1[x]]
        for s1, s2 in ((1, -1), (-1, 1), (-1, -1)):
            sel = slice(None) if s1 == s2 else turn
            li.append(it[sel])
            p0.append(p[sel] + s1 * nrm[sel])
            p1.append(q[sel] + s2 * nrm[sel])
        return np.concatenate(li), np.concatenate(p0), np.concatenate(p1)


def _candidate_lines(ar: FloatArray, br: FloatArray, ev_item: IntArray, ev_pt: FloatArray,
                     items: IntArray, shifts_only: BoolArray | None = None) -> _Lines:
    """The lines tried (`_Lines`), through two points of each item's event points each
    moved EPSILON_PX to either side of the line through them (four lines a pair: shifted
    to either side, or turned either way; for the items of `shifts_only`, `_apart`, the two
    shifts only); from an origin (a ring of one point), the lines from it towards each
    event point turned a hair either way (the cells of lines through a point are the turns
    between those); from a point to a point, the line between them."""
    count = np.bincount(ev_item, minlength=len(ar))
    first = np.cumsum(count) - count
    point_a = _degenerate(ar)
    x_i: list[IntArray] = [np.empty(0, dtype=np.intp)]
    x_p: list[FloatArray] = [np.empty((0, 2))]
    x_q: list[FloatArray] = [np.empty((0, 2))]
    its = items[(count[items] >= 2) & ~point_a[items]]
    it = np.empty(0, dtype=np.intp)
    p = q = nrm = np.empty((0, 2))
    turn = np.empty(0, dtype=bool)
    if len(its):
        # Every two event points of each item, all items at once: the k-th pair of an
        # item is (i, j), i < j, with j(j - 1) / 2 <= k < (j + 1) j / 2.
        e = count[its]
        per = e * (e - 1) // 2
        it = np.repeat(its, per)
        k = kernel.within_runs(per)
        j = np.floor((1 + np.sqrt(1 + 8 * k)) / 2).astype(np.intp)
        j -= j * (j - 1) // 2 > k  # (the square root a hair off either way)
        j += (j + 1) * j // 2 <= k
        i = k - j * (j - 1) // 2
        p, q = take_rows(ev_pt, first[it] + i), take_rows(ev_pt, first[it] + j)
        d = q - p
        norm = np.hypot(d[:, 0], d[:, 1])
        ok = norm > 4 * EPSILON_PX
        p, q, d = (np.compress(ok, x, axis=0) for x in (p, q, d))
        it, norm = it[ok], norm[ok]
        nrm = np.column_stack([-d[:, 1], d[:, 0]]) / norm[:, None] * EPSILON_PX
        turn = np.ones(len(it), dtype=bool) if shifts_only is None else ~shifts_only[it]
    # Point to point: the one line between them.
    both = items[point_a[items] & _degenerate(br)[items]]
    if len(both):
        x_i.append(both)
        x_p.append(ar[both, 0])
        x_q.append(br[both, 0])
    single = point_a[ev_item]
    if single.any():
        sel = np.flatnonzero(single)
        o_it = ev_item[sel]
        o = ar[o_it, 0]
        d = ev_pt[sel] - o
        norm = np.hypot(d[:, 0], d[:, 1])
        ok = norm > 4 * EPSILON_PX
        o_it, o, d, norm = o_it[ok], o[ok], d[ok], norm[ok]
        o_nrm = np.column_stack([-d[:, 1], d[:, 0]]) / norm[:, None] * EPSILON_PX
        for s2 in (1, -1):
            x_i.append(o_it)
            x_p.append(o)
            x_q.append(o + d + s2 * o_nrm)
    return _Lines(it, p, q, nrm, turn, np.concatenate(x_i), np.concatenate(x_p),
                  np.concatenate(x_q))


def _apart(ar: FloatArray, br: FloatArray) -> BoolArray:
    """Per pair of rings: whether no line perpendicular to the line between their centres
    meets both (their shadows on that line are apart, by more than a few EPSILON_PX).

    Then, in a frame along that line, every line meeting both rings is y = m x + c with m
    and c bounded, and the lines of one cell of the event points' arrangement (section 3
    of the module's header) are a bounded convex polygon of (m, c), with no vertical side
    (an event point's lines are c = y - x m). A vertex of it strictly between its least
    and largest m has the polygon straight above or straight below it: the line through
    its two event points shifted a hair to one side or the other lies in the cell. So the
    two shifted lines through every two event points meet every cell, and the two turned
    ones are not needed (one shift alone is not enough: tried, it missed cells). Where a
    wall's stop varies within a cell (`_varies`), the cells do not decide, and the items
    near such walls keep all four lines."""
    if len(ar) == 0:
        return np.zeros(0, dtype=bool)
    ca = kernel.over_points(np.add, ar) / ar.shape[1]
    cb = kernel.over_points(np.add, br) / br.shape[1]
    axis = cb - ca
    length = np.hypot(axis[:, 0], axis[:, 1])
    ok = length > 0
    unit = axis / np.where(ok, length, 1.0)[:, None]
    a_far = np.einsum("nvk,nk->nv", ar, unit).max(axis=1)
    b_near = np.einsum("nvk,nk->nv", br, unit).min(axis=1)
    out: BoolArray = ok & (a_far < b_near - 8 * EPSILON_PX)
    return out


def _varies(blk: Blockers, ar: FloatArray, br: FloatArray, bi: IntArray, wi: IntArray,
            whole: BoolArray) -> BoolArray:
    """Per row (pair bi, wall wi; its band filling the sheet nowhere a line of the pair
    crosses it is not a row, `line_of_effect_both`): whether the wall may stop some lines
    of one cell of the pair's arrangement and not others. A height band stops a line where
    it fills the sheet between the two creatures at the line's crossing, which moves along
    the wall within a cell: unless it fills the sheet wherever a line of the pair crosses
    the wall (`whole`, `_band_fill`). A one-way wall stops a line from the side the line
    starts on, which changes within a cell only if the wall's line passes through the ring
    the line starts from (either ring: the search reads lines both ways)."""
    banded = ~np.isnan(blk.bottom[wi]) | ~np.isnan(blk.top[wi])
    out: BoolArray = banded & ~whole
    one_way = np.flatnonzero(blk.direction[wi] != 0)
    if len(one_way):
        w = take_rows(blk.xy, wi[one_way])
        dx, dy = w[:, 2] - w[:, 0], w[:, 3] - w[:, 1]
        crossed = np.zeros(len(one_way), dtype=bool)
        for ring in (ar, br):
            corners = take_rows(ring, bi[one_way])  # (R, V, 2)
            side = (dx[:, None] * (corners[..., 1] - w[:, 1, None])
                    - dy[:, None] * (corners[..., 0] - w[:, 0, None]))
            crossed |= ~((side > 0).all(axis=1) | (side < 0).all(axis=1))
        out[one_way] |= crossed
    return out


def _search(blk: Blockers, ar: FloatArray, br: FloatArray,
            ext: tuple[FloatArray, FloatArray, FloatArray, FloatArray], bi: IntArray,
            wi: IntArray, whole: BoolArray, items: IntArray, group: IntArray | None = None,
            lead: BoolArray | None = None) -> tuple[BoolArray, BoolArray]:
    """Per item in `items` (ascending): whether one of the lines tried
    (`_candidate_lines`) runs free from its ring a to its ring b, read from a's end and
    from b's. `whole`: per row, `_band_fill`'s. `group`: per item, its group
    (`line_of_effect_both`); the items of a group with a free line each way are not
    searched further. `lead`: the rows tried first (`_leaders`)."""
    free_f = np.zeros(len(ar), dtype=bool)
    free_b = np.zeros(len(ar), dtype=bool)
    if group is None:
        group = np.arange(len(ar))
    group_f = np.zeros(int(group.max()) + 1, dtype=bool)
    group_b = np.zeros(len(group_f), dtype=bool)
    asked = items
    point_a, point_b = _degenerate(ar), _degenerate(br)
    # Items with no wall near them whose stop varies within a cell: their cells decide,
    # and need no events on the rings' backs (`_events`); between rings apart along their
    # axis, the shifted lines suffice (`_apart`).
    lean = np.ones(len(ar), dtype=bool)
    lean[bi[_varies(blk, ar, br, bi, wi, whole)]] = False
    ev_item, ev_pt = _events(ar, br, blk.xy, bi, wi, items, lean)
    # A pair past the budget is not searched: no line of it is found free.
    items, ev_item, ev_pt = _within_budget(point_a, bi, items, ev_item, ev_pt)
    if len(items) == 0:
        return free_f[asked], free_b[asked]
    shifts_only = _apart(ar, br) & lean
    lines = _candidate_lines(ar, br, ev_item, ev_pt, items, shifts_only)
    units = lines.items
    if len(units) == 0:
        return free_f[asked], free_b[asked]
    clippers = (_Clipper.of(ar), _Clipper.of(br))
    # Tried in rounds: a few lines of every item first, then more, then the rest, of the
    # items still without a free line each way. An item with a free line usually has
    # many, found in the first round (254 of the 424 items reaching this search on a scene
    # of 60 tokens among 300 short walls; their thousands of other lines are neither
    # clipped nor drawn: `_Lines`). The units of an item (two of its event points, two
    # or four lines each) are taken in a fixed shuffled order, so a round samples all of
    # its event points; the answer is the same as trying every line (any free line will
    # do), and so is its cost for an item every line of which is blocked.
    # A small search (a move's few pairs) is tried in one round: its cost is the calls',
    # not the lines'.
    # In chunks of units: a big map's last round has millions of lines, whose
    # temporaries would each be hundreds of megabytes (first touched, then freed, every
    # round); the units of groups found free by an earlier chunk are left out.
    def done(k: IntArray) -> BoolArray:
        g = group[units[k]]
        out: BoolArray = group_f[g] & group_b[g]
        return out

    for part in kernel.in_rounds(units, _ROUNDS, _ONE_ROUND, _TRY_UNITS, done):
        li, p0, p1 = lines.of(part)
        _try(blk, ext, bi, wi, li, p0, p1, clippers,
             point_a, point_b, free_f, free_b, lead)
        group_f[group[free_f]] = True
        group_b[group[free_b]] = True
    return free_f[asked], free_b[asked]


#: Work (candidate lines x walls near the pair) above which one pair is not searched: its
#: sample lines decide, as before the exact test (docs/geometry.md, 'A budget per pair').
#: The densest pair of the benchmark scenes (200 tokens, 5,000 walls, dressed) needs
#: 2.4 million; a pair behind a field of hundreds of separate short walls (a legal scene of
#: 20,000 of them) needed 500 million, 13 s of the worker for that one pair.
SEARCH_WORK_CAP = 1 << 23


def _within_budget(point_a: BoolArray, bi: IntArray, items: IntArray,
                   ev_item: IntArray, ev_pt: FloatArray,
                   ) -> tuple[IntArray, IntArray, FloatArray]:
    """The items (and their event points) whose search costs at most SEARCH_WORK_CAP: the
    lines `_candidate_lines` would draw (four through every two event points, two from an
    origin, `point_a`, towards each) times the walls near the item. Decided per item from
    its own geometry, so a pair gets the same answer in any batch (a move's or a whole
    table's)."""
    e = np.bincount(ev_item, minlength=len(point_a)).astype(np.int64)
    lines = np.where(point_a, 2 * e, 2 * e * (e - 1)) + 1
    rows = np.bincount(bi, minlength=len(point_a)).astype(np.int64)
    ok = lines * rows <= SEARCH_WORK_CAP
    if ok[items].all():
        return items, ev_item, ev_pt
    keep = ok[ev_item]
    return items[ok[items]], ev_item[keep], ev_pt[keep]


def _try(blk: Blockers, ext: tuple[FloatArray, FloatArray, FloatArray, FloatArray],
         bi: IntArray, wi: IntArray, li: IntArray, p0: FloatArray, p1: FloatArray,
         rings: tuple[_Clipper, _Clipper],
         point_a: BoolArray, point_b: BoolArray, free_f: BoolArray, free_b: BoolArray,
         lead: BoolArray | None = None) -> None:
    """Lines p0 -> p1 of items li: each one's stretch from ring a to ring b (each clipped
    by its `_Clipper`), tried against the walls; the items one of them runs free for
    marked in free_f (read from a's end) and free_b (from b's). `lead`: rows (of bi, wi)
    that stop every line they cross, tried first: the lines they stop are not tried
    against the others."""
    d = p1 - p0
    a_lo, a_hi = rings[0].clip(p0, d, li)
    single = point_a[li]
    a_lo = np.where(single, 0.0, a_lo)
    a_hi = np.where(single, 0.0, a_hi)
    # Only the lines that meet ring a are clipped to ring b (most lines through two event
    # points miss one ring or the other).
    hit = np.flatnonzero(a_lo <= a_hi)
    if len(hit) < len(li):
        li, a_lo, a_hi, single = li[hit], a_lo[hit], a_hi[hit], single[hit]
        p0, d = take_rows(p0, hit), take_rows(d, hit)
    b_lo, b_hi = rings[1].clip(p0, d, li)
    # A point target (only ever with a point origin): the line ends on it.
    pb = point_b[li]
    b_lo = np.where(pb, 1.0, b_lo)
    b_hi = np.where(pb, 1.0, b_hi)
    ok = b_lo <= b_hi
    fwd = ok & (a_hi < b_lo)
    back = ok & (b_hi < a_lo) & ~single
    use = fwd | back
    if not use.any():
        return
    ta = np.where(fwd, a_hi, a_lo)[use]
    tb = np.where(fwd, b_lo, b_hi)[use]
    li = li[use]
    p0, d = np.compress(use, p0, axis=0), np.compress(use, d, axis=0)
    starts = p0 + ta[:, None] * d
    ends = p0 + tb[:, None] * d
    if lead is not None and lead.any():
        # The leaders stop every line they cross, both ways: a plain crossing test.
        stopped = _crossed(blk.xy, bi[lead], wi[lead], li, starts, ends, len(free_f))
        left = np.flatnonzero(~stopped)
        li, starts, ends = li[left], take_rows(starts, left), take_rows(ends, left)
    blocked_f, blocked_b = _blocked(blk, ext, bi, wi, li, starts, ends, len(free_f))
    free_f[li[~blocked_f]] = True
    free_b[li[~blocked_b]] = True


def _expand(bi: IntArray, li: IntArray, n_items: int) -> tuple[IntArray, IntArray]:
    """Every (line, row) of lines li (of items) against their items' rows (bi ascending):
    the line's index and the row's."""
    w_first = np.searchsorted(bi, np.arange(n_items))
    per = np.searchsorted(bi, np.arange(n_items), side="right")[li] - w_first[li]
    line = np.repeat(np.arange(len(li)), per)
    within = kernel.within_runs(per)
    return line, w_first[li[line]] + within


def _crossed(xy: FloatArray, bi: IntArray, wi: IntArray, li: IntArray, starts: FloatArray,
             ends: FloatArray, n_items: int) -> BoolArray:
    """Per line (of item li[k], starts[k] -> ends[k]): whether one of its item's rows
    (bi ascending, wi) crosses it, by the crossing convention."""
    line, row = _expand(bi, li, n_items)
    out = np.zeros(len(li), dtype=bool)
    hit = kernel.cross_paired(take_rows(starts, line), take_rows(ends, line),
                              take_rows(xy, wi[row]))
    out[line[hit]] = True
    return out


#: Units per item tried in the first rounds of `_search` (the rest in the last): up to four
#: lines each: 16 and 256 lines.
_ROUNDS = (4, 64)
#: Units in all up to which `_search` tries them in one round.
_ONE_ROUND = 512
#: Units `_search` tries at once (up to four lines each: a chunk's temporaries stay a few
#: megabytes).
_TRY_UNITS = 1 << 14


def _blocked(blk: Blockers, ext: tuple[FloatArray, FloatArray, FloatArray, FloatArray],
             bi: IntArray, wi: IntArray, li: IntArray, starts: FloatArray, ends: FloatArray,
             n_items: int) -> tuple[BoolArray, BoolArray]:
    """Per line tried (of item li[k], from starts[k] in ring a to ends[k] in ring b):
    whether the walls near its item (rows bi, wi, ascending by item) stop it, read from
    its start and from its end."""
    per = np.bincount(bi, minlength=n_items)[li]
    total = int(per.sum())
    blocked = [np.zeros(len(li), dtype=bool), np.zeros(len(li), dtype=bool)]
    limited_hits: list[list[tuple[IntArray, FloatArray]]] = [[], []]
    cum = np.concatenate([[0], np.cumsum(per)])
    bounds = np.searchsorted(cum, np.arange(0, total + _CHUNK_ROWS, _CHUNK_ROWS))
    bounds = np.unique(np.clip(bounds, 0, len(li)))
    for k0, k1 in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        line, row = _expand(bi, li[k0:k1], n_items)
        line += k0
        w = wi[row]
        s, e = take_rows(starts, line), take_rows(ends, line)
        wxy = take_rows(blk.xy, w)
        hit = np.flatnonzero(kernel.cross_paired(s, e, wxy))
        line, w, row = line[hit], w[hit], row[hit]
        stops = blk.stops[w]
        for k in (0, 1):
            blocked[k][line[stops]] = True
        rest = np.flatnonzero(~stops)
        if len(rest) == 0:
            continue
        # (The points and walls of the crossings that stop not alone, gathered once.)
        crossing = hit[rest]
        wr, wxr = w[rest], take_rows(wxy, crossing)
        s_r, e_r = take_rows(s, crossing), take_rows(e, crossing)
        frac = wall_crossing(s_r, e_r, wxr)
        it = bi[row[rest]]
        lo, hi = sheet(frac, ext[0][it], ext[1][it], ext[2][it], ext[3][it])
        _, whole = band_meets(blk.bottom[wr], blk.top[wr], lo, hi)
        lim = blk.limited[wr]
        one_way = blk.direction[wr] != Direction.BOTH
        for k, origin in ((0, s_r), (1, e_r)):
            facing = np.ones(len(rest), dtype=bool)
            if one_way.any():
                side = kernel.foundry_side(wxr[one_way], origin[one_way])
                facing[one_way] = side != blk.direction[wr][one_way]
            fills = facing & whole
            blocked[k][line[rest[fills & ~lim]]] = True
            sel = fills & lim
            if sel.any():
                limited_hits[k].append((line[rest[sel]], np.round(frac[sel], 9)))
    for k in (0, 1):
        if limited_hits[k]:
            ln = np.concatenate([h[0] for h in limited_hits[k]])
            where = np.concatenate([h[1] for h in limited_hits[k]])
            order = np.lexsort((where, ln))
            ln, where = ln[order], where[order]
            new = kernel.run_starts((ln[1:] != ln[:-1]) | (where[1:] != where[:-1]))
            blocked[k] |= np.bincount(ln[new], minlength=len(li)) >= 2
    return blocked[0], blocked[1]


@dataclass(frozen=True, slots=True)
class Spaces:
    """Every creature's space as convex rings (a square creature's, or an area origin's,
    one; a creature on a hex grid one per hex of its footprint), a hair inside: rings
    (K, V, 2), creature c's rings first[c] .. first[c] + count[c]."""

    rings: FloatArray
    first: IntArray
    count: IntArray

    def take(self, which: IntArray) -> Spaces:
        """The spaces of creatures `which` (positions), in that order, as `Spaces` of their
        own."""
        count = self.count[which]
        at = np.repeat(self.first[which], count) + kernel.within_runs(count)
        return Spaces(take_rows(self.rings, at), np.cumsum(count) - count, count)


def spaces_of(tracer: Tracer, inset_px: float) -> Spaces:
    """The tracer's creatures' spaces as `Spaces`: their boxes on a square grid, their hex
    footprints' hexes on a hex grid, each moved `inset_px` towards its centre (as the rules'
    sample points are)."""
    n = len(tracer.creatures)
    if tracer.creature_polys is None:
        return Spaces(box_rings(tracer.boxes.reshape(-1, 4), inset_px),
                      np.arange(n, dtype=np.intp), np.ones(n, dtype=np.intp))
    verts = tracer.cell_verts
    centre = (kernel.over_points(np.add, verts) / verts.shape[1])[:, None, :]
    d = centre - verts
    dist = np.hypot(d[..., 0], d[..., 1])[..., None]
    moved = verts + d / np.maximum(dist, 1e-12) * np.minimum(inset_px, dist)
    return Spaces(moved, tracer.cell_start, tracer.cell_count)


def hull_rings(spaces: Spaces, points: FloatArray | None = None,
               valid: BoolArray | None = None) -> tuple[FloatArray, IntArray]:
    """Per creature, one convex ring holding all of its space: the convex hull of its
    rings' corners, grown about its centre just enough to hold its `points` too, if given
    (n, P, 2; where `valid`: on a hex grid the 'any part' samples, a hair inside towards the
    footprint's centre, where the hexes are a hair inside towards their own). A wall that
    separates two such rings wholly separates everything inside them. Returns the rings
    (n, V, 2), shorter ones padded by repeating their last corner (a repeated corner only
    repeats a line), and each one's own number of corners."""
    n = len(spaces.first)
    xy = spaces.take(np.arange(n)).rings.reshape(-1, 2)
    who = np.repeat(np.arange(n), spaces.count * spaces.rings.shape[1])
    hulls = shapely.convex_hull(shapely.multipoints(xy, indices=who))
    outline = np.where(shapely.get_type_id(hulls) == 3, shapely.get_exterior_ring(hulls), hulls)
    pts, idx = shapely.get_coordinates(outline, return_index=True)
    total = np.bincount(idx, minlength=n)
    start = np.cumsum(total) - total
    count = total - (shapely.get_type_id(outline) == 2)  # a ring repeats its first corner
    width = int(count.max())
    col = np.minimum(np.arange(width)[None, :], count[:, None] - 1)
    rings: FloatArray = pts[start[:, None] + col]
    # The centre of its own corners (not of the padding: a ring's result must not depend
    # on the other rings of the batch, the longest of which sets the padding).
    own = (np.arange(width)[None, :] < count[:, None])[..., None]
    centre = (rings * own).sum(axis=1, keepdims=True) / count[:, None, None]
    if points is None or valid is None:
        return rings, count.astype(np.intp)
    # The least growth about the centre that holds every point: per side (inward normal
    # m through corner v), a point p needs the factor m.(c - p) / m.(c - v).
    start_v, normal = _inward(rings)
    reach = np.einsum("nvk,nvk->nv", normal, centre - start_v)  # > 0 on real sides
    need = np.einsum("nvk,npk->nvp", normal, centre - points)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where((reach > 0)[:, :, None] & valid[:, None, :],
                          need / reach[:, :, None], 1.0)
    grow = np.maximum(factor.max(axis=(1, 2)), 1.0)
    # A hair more than the least: the points then lie inside, not on a side.
    grown: FloatArray = centre + (rings - centre) * (grow + 1e-12)[:, None, None]
    return grown, count.astype(np.intp)


def padded_rings(rings: Sequence[FloatArray]) -> tuple[FloatArray, IntArray]:
    """Rings of different numbers of corners (each (V_k, 2)) as one array (n, V, 2),
    shorter ones padded by repeating their last corner (as `hull_rings` pads them), and
    each one's own number of corners."""
    counts = np.array([len(r) for r in rings], dtype=np.intp)
    if len(counts) == 0:
        return np.zeros((0, 1, 2)), counts
    flat = np.concatenate(rings)
    start = np.cumsum(counts) - counts
    col = np.minimum(np.arange(int(counts.max()))[None, :], counts[:, None] - 1)
    out: FloatArray = flat[start[:, None] + col]
    return out, counts


def ring_list(rings: FloatArray, counts: IntArray) -> list[FloatArray]:
    """`padded_rings`' inverse: each ring's own corners (read-only views)."""
    out = [rings[k, :c] for k, c in enumerate(counts.tolist())]
    for ring in out:
        ring.flags.writeable = False
    return out


#: Pairs up to which `sealed_pairs` tests all of them in one call, their rings padded to
#: the largest (the kernel's cost per call outweighs the padded lines below it).
SEAL_ONE_CALL = 2_000
#: Pairs up to which a group of one size is merged with the other small groups.
SEAL_GROUP_MERGE = 400


def sealed_pairs(tracer: Tracer, rings: FloatArray, corners: IntArray, a: IntArray,
                 t: IntArray, room_rings: Callable[[], FloatArray] | None = None
                 ) -> BoolArray | None:
    """Per pair (a[k], t[k]) of creatures: whether one plain wall, or a run of them end to
    end, crosses every line between the corners of their convex rings (rings (n, V, 2),
    creature c's first corners[c] corners; `hull_rings`), which separates the two rings
    wholly (`kernel.sealed_blocks`, step 2 above): every line from one to the other is
    stopped, at any height, from either end. For a whole table's pairs, a wall plain but
    for a height band that holds the pair's whole vertical reach counts as plain
    (`banded_walk`). None with no such wall. Pairs are taken by
    their rings' numbers of corners (a hex creature's are 6 to a dozen), so that the many
    pairs of common sizes are not padded to the largest creature's; the groups of few pairs
    go together in one call (each call has fixed costs), as do a move's few pairs. A wall
    that separates two rings separates them both ways: each unordered pair is tested
    once. Before any of it, pairs whose rings lie in two rooms of the plain walls are
    sealed too, by the walls around either room (geometry.rooms); `room_rings`, if given,
    makes the rings the rooms are read from (each creature's space a hair inside, as the
    lines between spaces start from it: a space flush against a room's wall is then in
    the room, where a ring on the wall meets its border). It is only called when the walls
    have rooms: a scene of 20,000 walls has none, and its creatures' rings are not made
    for nothing at every move."""
    plain = np.flatnonzero(tracer.wall_plain)
    if len(plain) == 0 and not banded_plain(tracer).any():
        return None
    if len(a) == 0:
        return np.zeros(0, dtype=bool)
    a, t, back = _unordered(corners, a, t)
    # Pairs in two rooms of the plain walls are walled off (geometry.rooms): sealed, with
    # no wall to find; the kernel walks the others.
    if rooms.rooms(tracer, len(a) >= rooms.BUILD_PAIRS) is None:
        sealed = np.zeros(len(a), dtype=bool)
    else:
        sealed = rooms.walled_off(*rooms.rooms_of(
            tracer, rings if room_rings is None else room_rings(), len(a))[np.stack([a, t])])
    todo = np.flatnonzero(~sealed)
    a, t = a[todo], t[todo]
    if len(a) == 0:
        every: BoolArray = sealed[back.reshape(-1)]
        return every
    sealed[todo] = _walk(tracer, rings, corners, a, t, plain)
    left = np.flatnonzero(~sealed[todo])
    # (A move's few pairs are left to the proofs after this one: a walk per set of walls
    # has fixed costs, a millisecond for the few pairs of a move it would prove.)
    if len(left) >= BANDED_MIN_PAIRS:
        a_l, t_l = a[left], t[left]
        sealed[todo[left]] = banded_walk(
            tracer, a_l, t_l, plain,
            lambda rows, which: _walk(tracer, rings, corners, a_l[rows], t_l[rows], which))
    out: BoolArray = sealed[back.reshape(-1)]
    return out


def _walk(tracer: Tracer, rings: FloatArray, corners: IntArray, a: IntArray, t: IntArray,
          which: IntArray) -> BoolArray:
    """Per pair: whether one of the walls `which` (each stopping every line of the pair it
    crosses), or a run of them end to end, crosses every line between the corners of the
    two rings, and the rings do not meet (`sealed_pairs`' walk)."""
    sealed = np.zeros(len(a), dtype=bool)
    # A walk past the kernel's bound for hints (a whole table) is cut into calls by ring
    # sizes, some of them under the bound: none reads or keeps hints, as one call of the
    # whole walk would not (a first subscription reads none back).
    hints = len(a) <= kernel.HINT_MAX_BLOCKS
    for rows, va, vt in _by_ring_sizes(corners, a, t, SEAL_ONE_CALL):
        ra, rt = rings[a[rows], :va], rings[t[rows], :vt]
        got = kernel.sealed_blocks(ra, rt, tracer.wall_xy, which, hints)
        # Spaces that overlap or touch see each other (a rider on its mount); only rings
        # whose boxes meet can.
        near = np.flatnonzero(got)
        lo_a = kernel.over_points(np.minimum, ra[near])
        hi_a = kernel.over_points(np.maximum, ra[near])
        lo_t = kernel.over_points(np.minimum, rt[near])
        hi_t = kernel.over_points(np.maximum, rt[near])
        near = near[((lo_a <= hi_t) & (lo_t <= hi_a)).all(axis=1)]
        got[near] &= ~_overlap(ra[near], rt[near])
        sealed[rows] = got
    return sealed


def banded_walk(tracer: Tracer, a: IntArray, t: IntArray, plain: IntArray,
                walk: Callable[[IntArray, IntArray], BoolArray]) -> BoolArray:
    """Per pair of creatures (a[k], t[k]) that the plain walls `plain` do not seal: whether
    they are sealed when the walls plain but for a height band holding the pair's whole
    vertical reach (the lower feet to the higher head) count too. Such a band fills the
    sheet of sight wherever a line of the pair crosses the wall, so the wall stops it as
    a plain one would (`_band_reach`; tokens under _MIN_TALL_FT are left out). `walk(rows,
    walls)`: whether the walls `walls`, or runs of them, seal the pairs at `rows` (the
    caller's walk over its own rings). Pairs are walked together when the same walls hold
    their reaches (a dressed map has a dozen reaches, and a handful of sets of walls
    holding them); the pairs of the sets that few pairs have are walked together too,
    with the walls that hold every one of their reaches."""
    out = np.zeros(len(a), dtype=bool)
    banded = np.flatnonzero(banded_plain(tracer))
    if len(banded) == 0:
        return out
    lo = np.minimum(tracer.elev[a], tracer.elev[t])
    hi = np.maximum(tracer.elev[a] + tracer.tall[a], tracer.elev[t] + tracer.tall[t])
    exact = _exact_heights(tracer.elev[a], tracer.tall[a], tracer.elev[t], tracer.tall[t])
    rows = np.flatnonzero(np.minimum(tracer.tall[a], tracer.tall[t]) >= _MIN_TALL_FT)
    reach, inverse = np.unique(np.stack([lo[rows], hi[rows], exact[rows]], axis=1), axis=0,
                               return_inverse=True)
    holds = _band_holds(tracer.wall_bottom[banded], tracer.wall_top[banded], reach[:, 0:1],
                        reach[:, 1:2], reach[:, 2:3] > 0)
    sets, of_reach = np.unique(holds, axis=0, return_inverse=True)
    of_row = of_reach.reshape(-1)[inverse.reshape(-1)]
    size = np.bincount(of_row, minlength=len(sets))
    few = size < BANDED_FEW
    # (Sets of few pairs: one walk, with the walls that hold all of their reaches.)
    groups = [(np.flatnonzero(of_row == k), sets[k]) for k in np.flatnonzero(~few).tolist()]
    if few.any():
        groups.append((np.flatnonzero(few[of_row]), np.logical_and.reduce(sets[few], axis=0)))
    for at, mask in groups:
        if not mask.any() or len(at) == 0:
            continue
        out[rows[at]] = walk(rows[at], np.sort(np.concatenate([plain, banded[mask]])))
    return out


#: Pairs left by the plain walk below which `sealed_pairs` walks no banded walls.
BANDED_MIN_PAIRS = 256
#: Pairs below which the pairs of a set of walls holding their reaches are walked with
#: the other such sets' (`banded_walk`).
BANDED_FEW = 64


def banded_plain(tracer: Tracer) -> BoolArray:
    """Per wall: plain but for a height band (solid, both ways, not limited, banded)."""
    banded: BoolArray = ((tracer.wall_cover_code == SOLID_CODE) & ~tracer.wall_limited
                         & (tracer.wall_dir == Direction.BOTH) & tracer.wall_banded)
    return banded


def pairs_line_of_effect(tracer: Tracer, spaces: Spaces, a: IntArray, t: IntArray,
                         origin: tuple[float, float] | None = None,
                         walked: bool = False) -> BoolArray:
    """Per pair (a[k], t[k]) of the tracer's creatures: `line_of_effect` from a's space to
    t's, any of a's rings to any of t's; `origin` (elevation, height in feet) replaces the
    attacker's vertical extent (an area's origin). Each unordered pair is looked at once,
    both ways. `walked`: as `line_of_effect_both`'s, for every ring pair."""
    out = np.zeros(len(a), dtype=bool)
    if len(a) == 0:
        return out
    n = len(tracer.creatures)
    if origin is None:
        lo, hi = np.minimum(a, t), np.maximum(a, t)
    else:
        lo, hi = a, t
    keys, back = np.unique(lo * n + hi, return_inverse=True)
    back = back.reshape(-1)
    ua, ut = keys // n, keys % n
    ca, ct = spaces.count[ua], spaces.count[ut]
    per = ca * ct
    pair = np.repeat(np.arange(len(ua)), per)
    within = kernel.within_runs(per)
    ra = spaces.first[ua][pair] + within // ct[pair]
    rt = spaces.first[ut][pair] + within % ct[pair]
    aa, tt = ua[pair], ut[pair]
    if origin is None:
        a_elev, a_tall = tracer.elev[aa], tracer.tall[aa]
    else:
        a_elev, a_tall = np.full(len(aa), origin[0]), np.full(len(aa), origin[1])
    # (Pairs of one ring each, as on a square grid, are their own groups: asked without,
    # their answers are kept for the next snapshots.)
    fwd, bwd = line_of_effect_both(tracer, take_rows(spaces.rings, ra),
                                   take_rows(spaces.rings, rt), a_elev,
                                   a_tall, tracer.elev[tt], tracer.tall[tt], walked,
                                   group=pair if (per != 1).any() else None)
    seen_f = np.zeros(len(ua), dtype=bool)
    seen_b = np.zeros(len(ua), dtype=bool)
    seen_f[pair[fwd]] = True
    seen_b[pair[bwd]] = True
    out = np.where(a == ua[back], seen_f[back], seen_b[back])
    return out


def _unordered(corners: IntArray, a: IntArray, t: IntArray
               ) -> tuple[IntArray, IntArray, IntArray]:
    """Pairs of creatures (a[k], t[k]) each once, either way round (what separates two
    rings separates them both ways), the one whose ring has more corners first (so that
    pairs of two sizes make one group, not two): the distinct pairs, and where each given
    pair is among them."""
    n = len(corners)
    keys, back = np.unique(np.minimum(a, t) * n + np.maximum(a, t), return_inverse=True)
    ua, ut = keys // n, keys % n
    flip = corners[ua] < corners[ut]
    return np.where(flip, ut, ua), np.where(flip, ua, ut), back.reshape(-1)


def _by_ring_sizes(corners: IntArray, a: IntArray, t: IntArray,
                   one_call: int) -> Iterator[tuple[IntArray, int, int]]:
    """The pairs (a[k], t[k]) in groups of one call each, as (rows, corners of a's rings,
    of t's): by their rings' numbers of corners (a hex creature's are 6 to a dozen), so
    that the many pairs of common sizes are not padded to the largest creature's. Up to
    `one_call` pairs (a move's) go in one call, padded to their largest rings: each call
    has fixed costs. Past it, the groups of few pairs (a footprint or two of each size)
    are merged into one call, padded, for the same reason."""
    width = int(corners.max()) + 1
    if len(a) <= one_call:
        kind = np.full(len(a), corners[a].max() * width + corners[t].max())
    else:
        kind = corners[a] * width + corners[t]
        _, inverse = np.unique(kind, return_inverse=True)
        counts = np.bincount(inverse.reshape(-1))
        small = (counts <= SEAL_GROUP_MERGE)[inverse.reshape(-1)]
        if np.count_nonzero(counts <= SEAL_GROUP_MERGE) > 1:
            kind[small] = corners[a[small]].max() * width + corners[t[small]].max()
    for k in np.unique(kind).tolist():
        yield np.flatnonzero(kind == k), k // width, k % width


#: Pairs up to which `walled_apart` tests all of them in one call, their rings padded to
#: the largest (the chains' cost grows with the cube of the corners: a dressed hex
#: table's 1,300 pairs in one call cost twice what they cost by sizes).
WALLED_ONE_CALL = 64


def walled_apart(tracer: Tracer, rings: FloatArray, corners: IntArray, a: IntArray,
                 t: IntArray) -> BoolArray:
    """Per pair (a[k], t[k]) of creatures: whether walls that each stop every line of the
    pair they cross (solid, both ways, not limited, with no height band or one filling
    the sheet of sight wherever a line of the pair crosses it) separate their convex
    rings (rings (n, V, 2), creature c's first corners[c] corners: `hull_rings`) wholly,
    alone or as a chain meeting inside the two rings' hull (a room's corner, a wall
    ending on another: `_sealed`, step 2 above). Every line from one ring to the other,
    and so from anything inside one to anything inside the other, is then stopped.

    This is the exact test's proof for two creatures at once, where the exact test makes
    it for each pair of their hexes: two creatures of three hexes walled apart are proved
    so once, not nine times, before any of their lines is traced. Walls only: blocking
    terrain's borders are left out (a line grazing a corner of the terrain from outside
    does not enter it, where a border's segment would be taken to stop it). Each
    unordered pair is tested once."""
    out = np.zeros(len(a), dtype=bool)
    blk = blockers(tracer)
    if len(a) == 0 or blk.border.all():
        return out
    a, t, back = _unordered(corners, a, t)
    got = np.zeros(len(a), dtype=bool)
    for rows, va, vt in _by_ring_sizes(corners, a, t, WALLED_ONE_CALL):
        ia, it = a[rows], t[rows]
        ar, br = rings[ia, :va], rings[it, :vt]
        ext = (tracer.elev[ia], tracer.tall[ia], tracer.elev[it], tracer.tall[it])
        bi, wi = kernel.block_candidates(ar, br, blk.xy)
        whole, never = _band_fill(blk, ar, br, ext, bi, wi)
        keep = ~never & ~blk.border[wi]
        bi, wi, whole = bi[keep], wi[keep], whole[keep]
        if len(bi):
            # (Rings that overlap or touch see each other: a rider on its mount.)
            got[rows] = (_sealed(blk, ar, br, bi, wi, whole, robust=True)[0]
                         & ~_overlap(ar, br))
    out = got[back]
    return out
