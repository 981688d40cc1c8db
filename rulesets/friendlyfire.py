"""Enchanted Realms' friendly-fire rule (seed 003), as pure logic on a hex or square grid.

Rule of this module: no I/O and no wire types; the session validates a request, this module
numbers the candidate cells (hexes, or squares), maps the friendly-fire die, moves the dice
forward and compares, and returns every step as frozen values a chat card can show. The
procedure (docs/rulesets.md quotes the seed for each choice):

1. An attack is a pool of d20s at one target (split dice are several attacks). The shot
   misses only if every die misses: a die hits on a natural 20 or when die + modifier
   reaches the target's Defense (cover included); a natural 1 always misses. A target with
   full cover cannot be struck by the shot at all.
2. Candidates, numbered from 1: first every cell around the target's footprint (the six
   hexes, or eight squares, around a one-cell target), clockwise on screen starting with the
   one toward the attacker (the cell whose direction from the target's centre lies within
   half a cell's share of the circle, [-30, +30) degrees around a hex, [-22.5, +22.5) around
   a square, of the direction to the attacker's centre); then the cell 10 ft (two cells) in
   front of the target on the line of fire (toward the attacker) and the cell 10 ft behind
   it (away from the attacker): for a bigger footprint, the first cells on the line of fire
   two cells from it.
3. The friendly-fire die has one face per candidate and two empty slots: a d10 for a
   one-hex target (slots 1-8, 9 and 10 empty), a d12 for a one-square target. An empty
   slot, an unoccupied cell or the attacker's own cell means the shot hits nothing. A
   creature filling several candidate cells is struck on any of their numbers (a bigger
   bystander is likelier to be hit); two creatures in one cell: the first in scene order.
4. On a creature: the same raw d20s move forward by 2 (capped at 20; 18 and 19 become a
   natural 20, a natural 1 becomes a raw 3, so no automatic miss), plus the same modifier,
   against that creature's Defense (no cover: the shot already went astray). The pool hits
   if any die does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from geometry import hex as hexgrid
from geometry.hex import Cell, HexLayout
from geometry.kernel import FloatArray
from geometry.model import CreatureGeom, Grid, SceneGeom
from geometry.square import creature_centre, squares
from rulesets.base import Annotation, Degree, Flag, Stat

FORWARD = 2
#: Empty slots added to the numbered cells (the seed's 9 and 10 of a d10).
EMPTY_SLOTS = 2
NATURAL_20 = 20
NATURAL_1 = 1
#: How far in front of and behind the target the last two candidates lie, in cells (10 ft).
LINE_CELLS = 2


@dataclass(frozen=True, slots=True)
class Candidate:
    """One numbered cell (hex or square) a stray shot may strike."""

    slot: int
    cell: Cell
    centre: tuple[float, float]
    role: str  # "around", "front" or "behind"
    token: str | None
    note: str = ""
    #: What the cell is called on a chat card: "hex" or "square".
    noun: str = "hex"


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


# -- candidates ------------------------------------------------------------------------------

class _Cells(Protocol):
    """The cell facts of one grid the rule needs (hexes, or squares)."""

    size: float
    noun: str

    def footprint(self, c: CreatureGeom) -> tuple[Cell, ...]: ...

    def centre(self, cell: Cell) -> tuple[float, float]: ...

    def at(self, x: FloatArray, y: FloatArray) -> list[Cell]: ...

    def neighbours(self, cell: Cell) -> list[Cell]: ...

    def distance(self, a: Sequence[Cell], b: Sequence[Cell]) -> int: ...

    def origin(self, c: CreatureGeom) -> tuple[float, float]: ...


class _Hexes:
    """Foundry's hex cells (offset coordinates, geometry.hex)."""

    noun = "hex"

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self.layout = HexLayout.of(grid)
        self.size = self.layout.size

    def footprint(self, c: CreatureGeom) -> tuple[Cell, ...]:
        return tuple(hexgrid.footprint(c, self.grid).cells)

    def centre(self, cell: Cell) -> tuple[float, float]:
        x, y = hexgrid.centre_point(self.layout, np.array([cell[0]]), np.array([cell[1]]))
        return float(x[0]), float(y[0])

    def at(self, x: FloatArray, y: FloatArray) -> list[Cell]:
        ii, jj = hexgrid.point_to_offset(self.layout, x, y)
        return list(zip(ii.tolist(), jj.tolist(), strict=True))

    def neighbours(self, cell: Cell) -> list[Cell]:
        return hexgrid.neighbours(self.layout, cell)

    def distance(self, a: Sequence[Cell], b: Sequence[Cell]) -> int:
        return hexgrid.cells_distance(self.layout, a, b)

    def origin(self, c: CreatureGeom) -> tuple[float, float]:
        # The centre of the hex under the token's centre (exact grid geometry: a token's
        # stored x, y are rounded to whole pixels, which would otherwise turn an exact tie
        # between two neighbours into an accident of rounding).
        fp = hexgrid.footprint(c, self.grid)
        x, y = fp.centre
        (cell,) = self.at(np.array([x]), np.array([y]))
        if cell not in fp.cells:
            cell = min(fp.cells, key=lambda k: math.dist(self.centre(k), fp.centre))
        return self.centre(cell)


class _Squares:
    """Square cells as (row, column), like the hex grids' offset coordinates."""

    noun = "square"

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self.size = grid.size

    def footprint(self, c: CreatureGeom) -> tuple[Cell, ...]:
        # The cells under each of its squares' centres (a token off the grid, or one
        # smaller than a square, is in the cells its squares mostly cover).
        return tuple(dict.fromkeys(
            (math.floor((b[1] + b[3]) / 2 / self.size), math.floor((b[0] + b[2]) / 2 / self.size))
            for b in squares(c, self.grid)))

    def centre(self, cell: Cell) -> tuple[float, float]:
        return ((cell[1] + 0.5) * self.size, (cell[0] + 0.5) * self.size)

    def at(self, x: FloatArray, y: FloatArray) -> list[Cell]:
        return list(zip(np.floor(y / self.size).astype(int).tolist(),
                        np.floor(x / self.size).astype(int).tolist(), strict=True))

    def neighbours(self, cell: Cell) -> list[Cell]:
        i, j = cell
        return [(i + di, j + dj) for di in (-1, 0, 1) for dj in (-1, 0, 1) if di or dj]

    def distance(self, a: Sequence[Cell], b: Sequence[Cell]) -> int:
        """Squares between two sets of cells, each step to one of the eight around."""
        aa, bb = np.array(a).reshape(-1, 1, 2), np.array(b).reshape(1, -1, 2)
        return int(np.abs(aa - bb).max(axis=2).min())

    def origin(self, c: CreatureGeom) -> tuple[float, float]:
        return creature_centre(c, self.grid)


def _cells(grid: Grid) -> _Cells:
    return _Hexes(grid) if hexgrid.is_hex(grid) else _Squares(grid)


def _occupants(scene: SceneGeom, cells: _Cells, skip: str) -> dict[Cell, str]:
    out: dict[Cell, str] = {}
    for c in scene.creatures:
        if c.id == skip:
            continue
        for cell in cells.footprint(c):
            out.setdefault(cell, c.id)
    return out


def _angle(dx: float, dy: float) -> float:
    """Degrees clockwise on screen from east (y points down)."""
    return math.degrees(math.atan2(dy, dx)) % 360.0


def _first_on_ray(cells: _Cells, start: tuple[float, float], u: tuple[float, float],
                  own: Sequence[Cell], want: int) -> Cell:
    """The first cell along the ray from `start` in direction `u` that is `want` cells from
    the footprint `own` (cells along a line are adjacent, so the distance grows by one)."""
    step = cells.size / 16
    reach = (want + 2) * cells.size + _radius(cells, own, start)
    n = math.ceil(reach / step) + 1
    s = np.arange(n, dtype=np.float64) * step
    seen: set[Cell] = set()
    for cell in cells.at(start[0] + s * u[0], start[1] + s * u[1]):
        if cell in seen:
            continue
        seen.add(cell)
        if cells.distance([cell], own) == want:
            return cell
    raise AssertionError("a ray always reaches a cell two cells out")


def _radius(cells: _Cells, own: Sequence[Cell], p: tuple[float, float]) -> float:
    return max(math.dist(cells.centre(c), p) for c in own)


def ring(cells: _Cells, own: Sequence[Cell]) -> list[Cell]:
    """Every cell around the footprint: next to one of its cells, not one of them."""
    mine = set(own)
    return list(dict.fromkeys(n for c in own for n in cells.neighbours(c) if n not in mine))


def candidates(scene: SceneGeom, attacker: str, target: str) -> tuple[Candidate, ...]:
    """The numbered cells a stray shot from `attacker` at `target` may strike: every cell
    around the target's footprint (six hexes, or eight squares, around a one-cell target),
    clockwise from the one toward the attacker, then the cell in front and the cell behind
    on the line of fire."""
    cells = _cells(scene.grid)
    own = cells.footprint(scene.creature(target))
    pt = cells.origin(scene.creature(target))
    pa = cells.origin(scene.creature(attacker))
    dx, dy = pa[0] - pt[0], pa[1] - pt[1]
    norm = math.hypot(dx, dy)
    if norm < 1e-9:
        raise ValueError("the attacker and the target stand on the same cell: no line of fire")
    u = (dx / norm, dy / norm)
    around = ring(cells, own)
    toward = _angle(dx, dy)
    # Slot 1's window: half the angle a cell of the ring spans, on each side of the
    # direction to the attacker ([-30, +30) degrees around a hex, [-22.5, +22.5) around a
    # square); the counter-clockwise one of two equally near cells.
    half = 180.0 / len(around)

    def order(cell: Cell) -> float:
        x, y = cells.centre(cell)
        return (_angle(x - pt[0], y - pt[1]) - toward + half + 1e-6) % 360.0

    around.sort(key=order)
    front = _first_on_ray(cells, pt, u, own, LINE_CELLS)
    behind = _first_on_ray(cells, pt, (-u[0], -u[1]), own, LINE_CELLS)
    occupied = _occupants(scene, cells, target)
    out = []
    for slot, (cell, role) in enumerate(
            [*((c, "around") for c in around), (front, "front"), (behind, "behind")],
            start=1):
        who = occupied.get(cell)
        note = ""
        if who == attacker:
            who, note = None, (f"the attacker's own {cells.noun}: the shooter does not "
                               "strike itself")
        out.append(Candidate(slot, cell, cells.centre(cell), role, who, note, cells.noun))
    return tuple(out)


def faces(cands: Sequence[Candidate]) -> int:
    """The friendly-fire die: one face per candidate cell and two empty slots (a d10 for
    a one-hex target's eight)."""
    return len(cands) + EMPTY_SLOTS


def pick(cands: Sequence[Candidate], face: int) -> Candidate | None:
    """The die's face's candidate: faces 1..len(cands) the numbered cells, the last two
    empty slots."""
    if not 1 <= face <= faces(cands):
        raise ValueError(f"the friendly-fire die shows 1..{faces(cands)}, not {face}")
    return cands[face - 1] if face <= len(cands) else None


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
    """One attack (a pool of d20s at one target) through the friendly-fire rule. `d10` (the
    friendly-fire die, `faces(cands)` faces) is called only when every die missed (the
    client's die, or the seeded roller)."""
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
        steps.append(f"d{faces(cands)} {face}: an empty slot, the shot hits nothing")
        return Outcome(shot.target, judged, False, True, face, None, None, (), None, None,
                       tuple(steps))
    where = (f"slot {chosen.slot} ({chosen.role}, {chosen.noun} "
             f"{chosen.cell[0]},{chosen.cell[1]})")
    if chosen.token is None:
        why = chosen.note or "unoccupied"
        steps.append(f"d{faces(cands)} {face}: {where}, {why}: the shot hits nothing")
        return Outcome(shot.target, judged, False, True, face, chosen.slot, None, (), None,
                       None, tuple(steps))
    struck = chosen.token
    defense = defenses.get(struck)
    moved = tuple(judge_forward(r, shot.modifier, defense) for r in dice)
    steps.append(f"d{faces(cands)} {face}: {where}, occupied by {struck}")
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
