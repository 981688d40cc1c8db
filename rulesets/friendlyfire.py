"""Enchanted Realms' friendly-fire rule (seed 003), as pure logic on a hex grid.

Rule of this module: no I/O and no wire types; the session validates a request, this module
numbers the candidate hexes, maps the d10, moves the dice forward and compares, and returns
every step as frozen values a chat card can show. The procedure (docs/rulesets.md quotes the
seed for each choice):

1. An attack is a pool of d20s at one target (split dice are several attacks). The shot
   misses only if every die misses: a die hits on a natural 20 or when die + modifier
   reaches the target's Defense (cover included); a natural 1 always misses. A target with
   full cover cannot be struck by the shot at all.
2. Candidates, numbered 1..8: slots 1-6 are the six hexes around the target, clockwise on
   screen starting with the one toward the attacker (the neighbour whose direction from the
   target's centre lies within [-30, +30) degrees of the direction to the attacker's
   centre); slot 7 is the hex 10 ft (two hexes) in front of the target on the line of fire
   (toward the attacker), slot 8 the hex 10 ft behind it (away from the attacker). For a
   target filling several hexes, "around" walks from the hex under its centre in each of the
   six directions to the first hex outside it, and front/behind are the first hexes on the
   line of fire two hexes from its footprint.
3. A d10 picks: 1-8 a candidate, 9 and 10 empty slots. An empty slot, an unoccupied hex or
   the attacker's own hex means the shot hits nothing. A creature filling several candidate
   hexes is struck on any of their numbers (a bigger bystander is likelier to be hit); two
   creatures in one hex: the first in scene order.
4. On a creature: the same raw d20s move forward by 2 (capped at 20; 18 and 19 become a
   natural 20, a natural 1 becomes a raw 3, so no automatic miss), plus the same modifier,
   against that creature's Defense (no cover: the shot already went astray). The pool hits
   if any die does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from geometry import hex as hexgrid
from geometry.hex import Cell, HexLayout
from geometry.model import SceneGeom
from rulesets.base import Annotation, Degree, Flag, Stat

FORWARD = 2
SLOTS = 8
D10_FACES = 10
NATURAL_20 = 20
NATURAL_1 = 1
#: How far in front of and behind the target slots 7 and 8 lie, in hexes (10 ft).
LINE_HEXES = 2


@dataclass(frozen=True, slots=True)
class Candidate:
    """One numbered hex a stray shot may strike."""

    slot: int
    cell: Cell
    centre: tuple[float, float]
    role: str  # "around", "front" or "behind"
    token: str | None
    note: str = ""


@dataclass(frozen=True, slots=True)
class Die:
    """One d20 judged against a Defense: its raw face (after moving forward, for a stray
    shot), the total with the modifier, and whether it hits."""

    raw: int
    total: int
    natural20: bool
    hit: bool


@dataclass(frozen=True, slots=True)
class Shot:
    """What the attack knows about its original target before rolling."""

    target: str
    defense: int
    modifier: int
    full_cover: bool


def aimed(ann: Annotation, defense: int, bonus: int) -> tuple[Shot, str | None, str]:
    """The shot at its original target from the realms annotation of the pair: Defense
    with the cover bonus, the attacker's bonus with the obscurement penalty, why the
    friendly-fire rule applies (None: only a miss near others brings it), and the first
    step a chat card shows."""
    cover_bonus = sum(m.value for m in ann.modifiers if m.stat is Stat.DEFENSE)
    penalty = sum(m.value for m in ann.modifiers if m.stat is Stat.ATTACK)
    full = ann.cover is Degree.TOTAL
    shot = Shot(ann.target, defense + cover_bonus, bonus + penalty, full)
    trigger = None
    if Flag.FRIENDLY_FIRE in ann.flags:
        trigger = "full cover" if full else "three-quarters cover with others in the vicinity"
    label = "full" if full else ann.cover.value.replace("_", "-")
    first = (f"{ann.target}: Defense {defense} {cover_bonus:+d} ({label} cover) = "
             f"{shot.defense}; modifier {bonus:+d} {penalty:+d} (obscurement) = "
             f"{shot.modifier:+d}")
    return shot, trigger, first


@dataclass(frozen=True, slots=True)
class Outcome:
    """One attack resolved, every step kept."""

    target: str
    dice: tuple[Die, ...]
    hit_target: bool
    friendly_fire: bool
    d10: int | None
    slot: int | None
    struck: str | None
    moved: tuple[Die, ...]
    defense_struck: int | None
    hit_struck: bool | None
    steps: tuple[str, ...]


# -- candidates -------------------------------------------------------------------------------

def _occupants(scene: SceneGeom, skip: str) -> dict[Cell, str]:
    out: dict[Cell, str] = {}
    for c in scene.creatures:
        if c.id == skip:
            continue
        for cell in hexgrid.footprint(c, scene.grid).cells:
            out.setdefault(cell, c.id)
    return out


def _angle(dx: float, dy: float) -> float:
    """Degrees clockwise on screen from east (y points down)."""
    return math.degrees(math.atan2(dy, dx)) % 360.0


def _first_on_ray(layout: HexLayout, start: tuple[float, float], u: tuple[float, float],
                  own: Sequence[Cell], want: int) -> Cell:
    """The first cell along the ray from `start` in direction `u` that is `want` hexes from
    the footprint `own` (cells along a line are adjacent, so the distance grows by one)."""
    step = layout.size / 16
    reach = (want + 2) * layout.size + _radius(layout, own, start)
    n = math.ceil(reach / step) + 1
    s = np.arange(n, dtype=np.float64) * step
    ii, jj = hexgrid.point_to_offset(layout, start[0] + s * u[0], start[1] + s * u[1])
    seen: set[Cell] = set()
    for cell in zip(ii.tolist(), jj.tolist(), strict=True):
        if cell in seen:
            continue
        seen.add(cell)
        if hexgrid.cells_distance(layout, [cell], own) == want:
            return cell
    raise AssertionError("a ray always reaches a hex two hexes out")


def _radius(layout: HexLayout, cells: Sequence[Cell], p: tuple[float, float]) -> float:
    x, y = hexgrid.centre_point(layout, np.array([c[0] for c in cells]),
                                np.array([c[1] for c in cells]))
    return float(np.max(np.hypot(x - p[0], y - p[1])))


def candidates(scene: SceneGeom, attacker: str, target: str) -> tuple[Candidate, ...]:
    """The eight numbered hexes a stray shot from `attacker` at `target` may strike."""
    layout = HexLayout.of(scene.grid)
    fa = hexgrid.footprint(scene.creature(attacker), scene.grid)
    ft = hexgrid.footprint(scene.creature(target), scene.grid)
    own = ft.cells
    # Directions are taken between the centres of the hexes under the two tokens' centres
    # (exact grid geometry: a token's stored x, y are rounded to whole pixels, which would
    # otherwise turn an exact tie between two neighbours into an accident of rounding).
    centre_cell = _cell_under(layout, ft.centre, own)
    pt = _centre(layout, centre_cell)
    pa = _centre(layout, _cell_under(layout, fa.centre, fa.cells))
    dx, dy = pa[0] - pt[0], pa[1] - pt[1]
    norm = math.hypot(dx, dy)
    if norm < 1e-9:
        raise ValueError("the attacker and the target stand on the same hex: no line of fire")
    u = (dx / norm, dy / norm)
    around: list[Cell] = []
    q0, r0 = (int(v[0]) for v in hexgrid.offset_to_cube(layout, np.array([centre_cell[0]]),
                                                          np.array([centre_cell[1]])))
    for dq, dr in hexgrid.NEIGHBOUR_STEPS:
        q, r = q0, r0
        while True:
            q, r = q + dq, r + dr
            i, j = hexgrid.cube_to_offset(layout, np.array([q]), np.array([r]))
            cell = (int(i[0]), int(j[0]))
            if cell not in own:
                around.append(cell)
                break
    toward = _angle(dx, dy)

    def order(cell: Cell) -> float:
        x, y = _centre(layout, cell)
        return (_angle(x - pt[0], y - pt[1]) - toward + 30.0 + 1e-6) % 360.0

    around.sort(key=order)
    front = _first_on_ray(layout, pt, u, own, LINE_HEXES)
    behind = _first_on_ray(layout, pt, (-u[0], -u[1]), own, LINE_HEXES)
    occupied = _occupants(scene, target)
    out = []
    for slot, (cell, role) in enumerate(
            [*((c, "around") for c in around), (front, "front"), (behind, "behind")],
            start=1):
        who = occupied.get(cell)
        note = ""
        if who == attacker:
            who, note = None, "the attacker's own hex: the shooter does not strike itself"
        out.append(Candidate(slot, cell, _centre(layout, cell), role, who, note))
    return tuple(out)


def _cell_under(layout: HexLayout, p: tuple[float, float], cells: Sequence[Cell]) -> Cell:
    """The hex under a token's centre (the nearest of its own hexes, for odd shapes)."""
    ii, jj = hexgrid.point_to_offset(layout, np.array([p[0]]), np.array([p[1]]))
    cell: Cell = (int(ii[0]), int(jj[0]))
    if cell not in cells:
        cell = min(cells, key=lambda c: _dist(layout, c, p))
    return cell


def _centre(layout: HexLayout, cell: Cell) -> tuple[float, float]:
    x, y = hexgrid.centre_point(layout, np.array([cell[0]]), np.array([cell[1]]))
    return float(x[0]), float(y[0])


def _dist(layout: HexLayout, cell: Cell, p: tuple[float, float]) -> float:
    x, y = _centre(layout, cell)
    return math.hypot(x - p[0], y - p[1])


def pick(cands: Sequence[Candidate], d10: int) -> Candidate | None:
    """The d10 face's candidate: faces 1..8 the numbered hexes, 9 and 10 empty slots."""
    if not 1 <= d10 <= D10_FACES:
        raise ValueError(f"a d10 shows 1..10, not {d10}")
    return cands[d10 - 1] if d10 <= len(cands) else None


# -- dice -------------------------------------------------------------------------------------

def judge(raw: int, modifier: int, defense: int) -> Die:
    """A die against the original target: natural 20 hits, natural 1 misses, otherwise
    die + modifier must reach the Defense."""
    total = raw + modifier
    hit = raw == NATURAL_20 or (raw != NATURAL_1 and total >= defense)
    return Die(raw, total, raw == NATURAL_20, hit)


def forward(raw: int) -> int:
    """The raw face moved forward by 2 for a stray shot (18 and 19 become a natural 20)."""
    return min(raw + FORWARD, NATURAL_20)


def judge_forward(raw: int, modifier: int, defense: int | None) -> Die:
    """A die moved forward against an accidental target (no automatic miss)."""
    moved = forward(raw)
    total = moved + modifier
    hit = moved == NATURAL_20 or (defense is not None and total >= defense)
    return Die(moved, total, moved == NATURAL_20, hit)


def _signed(v: int) -> str:
    return f"{v:+d}"


def resolve(shot: Shot, dice: Sequence[int], d10: Callable[[], int],
            cands: Sequence[Candidate], defenses: Mapping[str, int],
            number: int = 1) -> Outcome:
    """One attack (a pool of d20s at one target) through the friendly-fire rule. `d10` is
    called only when every die missed (the client's die, or the seeded roller)."""
    steps = []
    head = f"Attack {number} at {shot.target}"
    if shot.full_cover:
        judged = tuple(Die(r, r + shot.modifier, r == NATURAL_20, False) for r in dice)
        steps.append(f"{head}: full cover, the shot cannot strike {shot.target}; "
                     f"dice {list(dice)}")
    else:
        judged = tuple(judge(r, shot.modifier, shot.defense) for r in dice)
        for die in judged:
            why = "natural 20" if die.natural20 else (
                "natural 1" if die.raw == NATURAL_1 else f"{die.total} vs {shot.defense}")
            steps.append(f"{head}: d20 {die.raw} {_signed(shot.modifier)} ({why}): "
                         f"{'hit' if die.hit else 'miss'}")
    if any(d.hit for d in judged):
        steps.append(f"{shot.target} is hit: no friendly fire")
        return Outcome(shot.target, judged, True, False, None, None, None, (), None, None,
                       tuple(steps))
    steps.append("every die missed: the friendly-fire rule applies")
    face = d10()
    chosen = pick(cands, face)
    if chosen is None:
        steps.append(f"d10 {face}: an empty slot, the shot hits nothing")
        return Outcome(shot.target, judged, False, True, face, None, None, (), None, None,
                       tuple(steps))
    where = f"slot {chosen.slot} ({chosen.role}, hex {chosen.cell[0]},{chosen.cell[1]})"
    if chosen.token is None:
        why = chosen.note or "unoccupied"
        steps.append(f"d10 {face}: {where}, {why}: the shot hits nothing")
        return Outcome(shot.target, judged, False, True, face, chosen.slot, None, (), None,
                       None, tuple(steps))
    struck = chosen.token
    defense = defenses.get(struck)
    moved = tuple(judge_forward(r, shot.modifier, defense) for r in dice)
    steps.append(f"d10 {face}: {where}, occupied by {struck}")
    against = f"Defense {defense}" if defense is not None else "no Defense given"
    for before, die in zip(dice, moved, strict=True):
        label = "natural 20" if die.natural20 else f"{die.total} vs {against}"
        steps.append(f"d20 {before} moved forward to {die.raw} {_signed(shot.modifier)} "
                     f"({label}): {'hit' if die.hit else 'miss'}")
    hit: bool | None = any(d.hit for d in moved)
    if defense is None and not hit:
        hit = None  # the GM compares: Covercast was not told this creature's Defense
        steps.append(f"{struck}'s Defense was not given: the GM compares the totals")
    else:
        steps.append(f"{struck} is {'hit' if hit else 'missed'}")
    return Outcome(shot.target, judged, False, True, face, chosen.slot, struck, moved, defense,
                   hit, tuple(steps))
