"""Seeded benchmark scenes: one generator, two views of the same scene.

`generate(tokens, walls, seed)` returns a `BenchScene` holding the geometric snapshot the
engine reads (`geom`, a SceneGeom) and the `scene.load` message a client would send for it
(`message`, Foundry-style documents), so the same scene runs through the engine directly and
through the server. Everything is derived from `random.Random(seed)`: the same arguments
give the same scene, byte for byte.

What a scene holds (square grid, 100 px squares, 5 ft):

- a map about 6 * sqrt(tokens) squares a side;
- rooms laid out on a coarse grid of cells, their sides running along grid lines, each side
  split into segments of mixed lengths (more walls means shorter segments, as on real maps
  where wall count comes from detail, not from more rooms), with doors (closed, open, and a
  few locked) in the room sides;
- free-standing low walls (flags.covercast.cover "low"), a few arrow slits ("improved"),
  a few limited (sight 10) windows and one-way walls;
- angled walls: straight diagonal walls and round pillars drawn as polygons of short
  segments (about a fifth of the wall count);
- tokens on free, non-overlapping squares (no wall through their interior): mostly Medium,
  some Large (2 x 2), a few Small and Tiny (half a square), with mixed dispositions.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
import shapely

from geometry.model import (
    CreatureGeom,
    Direction,
    Grid,
    GridKind,
    SceneGeom,
    Size,
    WallCover,
    WallGeom,
)

GRID_PX = 100
CELL = 8  # squares per room cell of the layout
ANGLED_SHARE = 0.2
LOW_SHARE = 0.05
SLIT_SHARE = 0.01
WINDOW_SHARE = 0.02
ONE_WAY_SHARE = 0.02

Doc = dict[str, Any]
Move = tuple[str, tuple[float, float], tuple[float, float]]


@dataclass(frozen=True, slots=True)
class Wall:
    """One wall as generated (pixels), before it becomes a document and a WallGeom."""

    id: str
    c: tuple[float, float, float, float]
    door: int = 0  # Foundry CONST.WALL_DOOR_TYPES: 0 none, 1 door
    ds: int = 0  # door state: 0 closed, 1 open, 2 locked
    sight: int = 20  # 20 normal, 10 limited
    dir: int = 0  # 0 both, 1 left, 2 right
    cover: str | None = None  # flags.covercast.cover


@dataclass(frozen=True, slots=True)
class Token:
    id: str
    col: float  # top-left, in squares (Tiny tokens sit at half squares)
    row: float
    width: float  # squares
    size: Size
    disposition: int


@dataclass(frozen=True, slots=True)
class BenchScene:
    """A generated scene: its parameters, the geometry, and the scene.load message."""

    name: str
    tokens: int
    walls: int
    seed: int
    side: int  # squares per side of the map
    geom: SceneGeom
    message: Doc
    #: Medium tokens with a free square to their right: (id, (x, y) now, (x, y) one
    #: square on), in token order; `pick_mover` chooses one that sees the most.
    movers: tuple[Move, ...]

    @property
    def scene_id(self) -> str:
        sid: str = self.message["scene"]["_id"]
        return sid


def map_side(tokens: int) -> int:
    return max(12, math.ceil(6 * math.sqrt(tokens)))


def generate(tokens: int, walls: int, seed: int = 1) -> BenchScene:
    """A scene with exactly `tokens` tokens and `walls` walls, deterministic in the seed."""
    rng = random.Random(f"covercast-bench:{tokens}:{walls}:{seed}")
    side = map_side(tokens)
    wall_list = _walls(rng, side, walls)
    token_list = _tokens(rng, side, tokens, wall_list)
    name = f"bench-{tokens}t-{walls}w-s{seed}"
    geom = SceneGeom(
        grid=Grid(GridKind.SQUARE, float(GRID_PX), 5.0, "ft"),
        walls=tuple(_wall_geom(w) for w in wall_list),
        creatures=tuple(_creature_geom(t) for t in token_list),
    )
    message: Doc = {
        "type": "scene.load",
        "ruleset": "dnd35",
        "options": {},
        "scene": {
            "_id": name,
            "name": f"Covercast benchmark: {tokens} tokens, {walls} walls, seed {seed}",
            "grid": {"type": 1, "size": GRID_PX, "distance": 5, "units": "ft"},
            "width": side * GRID_PX,
            "height": side * GRID_PX,
            "walls": [_wall_doc(w) for w in wall_list],
            "tokens": [_token_doc(t) for t in token_list],
        },
    }
    return BenchScene(name, tokens, walls, seed, side, geom, message,
                      _movers(token_list, wall_list, side))


# -- walls -------------------------------------------------------------------------------------

Seg = tuple[float, float, float, float]  # in squares


def _walls(rng: random.Random, side: int, total: int) -> list[Wall]:
    if total <= 0:
        return []
    n_angled = round(total * ANGLED_SHARE)
    n_low = max(1, round(total * LOW_SHARE)) if total >= 10 else 0
    n_axis = total - n_angled - n_low
    rooms = _room_runs(rng, side)
    runs, doors = _fit_runs(rng, rooms, n_axis)
    pieces = _split(rng, runs, n_axis - len(doors))
    out: list[Wall] = []
    special = list(range(len(pieces)))
    rng.shuffle(special)
    # At least one of each kind once there are a few dozen pieces (small test scenes too).
    floor = 1 if len(pieces) >= 20 else 0
    n_slit = max(floor, round(len(pieces) * SLIT_SHARE))
    n_window = max(floor, round(len(pieces) * WINDOW_SHARE))
    n_oneway = max(floor, round(len(pieces) * ONE_WAY_SHARE))
    slits = set(special[:n_slit])
    windows = set(special[n_slit:n_slit + n_window])
    oneway = set(special[n_slit + n_window:n_slit + n_window + n_oneway])
    for k, seg in enumerate(pieces):
        c = _px(seg)
        if k in slits:
            out.append(Wall(f"w{len(out)}", c, cover="improved"))
        elif k in windows:
            out.append(Wall(f"w{len(out)}", c, sight=10))
        elif k in oneway:
            out.append(Wall(f"w{len(out)}", c, dir=rng.choice((1, 2))))
        else:
            out.append(Wall(f"w{len(out)}", c))
    for seg in doors:
        state = rng.choices((0, 1, 2), weights=(5, 4, 1))[0]
        out.append(Wall(f"w{len(out)}", _px(seg), door=1, ds=state))
    for seg in _low_walls(rng, side, n_low):
        out.append(Wall(f"w{len(out)}", _px(seg), cover="low"))
    for seg in _angled(rng, side, n_angled):
        out.append(Wall(f"w{len(out)}", _px(seg)))
    # Interleave kinds the way a map's wall list is (ids stay as generated).
    order = list(range(len(out)))
    rng.shuffle(order)
    return [out[k] for k in order]


def _px(seg: Seg) -> tuple[float, float, float, float]:
    x0, y0, x1, y1 = (round(v * GRID_PX, 3) for v in seg)
    return (x0, y0, x1, y1)


def _room_runs(rng: random.Random, side: int) -> list[list[Seg]]:
    """Per room, its four sides as runs along grid lines (squares), in random room order."""
    rooms: list[list[Seg]] = []
    cells = max(1, side // CELL)
    for cj in range(cells):
        for ci in range(cells):
            if rng.random() < 0.15:
                continue  # an open yard
            x0 = ci * CELL + rng.randint(0, 2)
            y0 = cj * CELL + rng.randint(0, 2)
            x1 = min(side, (ci + 1) * CELL - rng.randint(0, 2))
            y1 = min(side, (cj + 1) * CELL - rng.randint(0, 2))
            if x1 - x0 < 3 or y1 - y0 < 3:
                continue
            rooms.append([(x0, y0, x1, y0), (x1, y0, x1, y1), (x1, y1, x0, y1),
                          (x0, y1, x0, y0)])
    rng.shuffle(rooms)
    return rooms


def _fit_runs(rng: random.Random, rooms: list[list[Seg]],
              budget: int) -> tuple[list[Seg], list[Seg]]:
    """Room sides within the wall budget, with a door cut into some of them: (runs, doors).

    Whole rooms are dropped while the sides (plus their doors) exceed the budget."""
    runs: list[Seg] = []
    doors: list[Seg] = []
    for room in rooms:
        room_runs: list[Seg] = []
        room_doors: list[Seg] = []
        for x0, y0, x1, y1 in room:
            length = abs(x1 - x0) + abs(y1 - y0)
            if length >= 3 and rng.random() < 0.4:
                at = rng.randint(1, int(length) - 2)
                dx, dy = (x1 - x0) / length, (y1 - y0) / length
                ax, ay = x0 + dx * at, y0 + dy * at
                bx, by = ax + dx, ay + dy
                room_runs += [(x0, y0, ax, ay), (bx, by, x1, y1)]
                room_doors.append((ax, ay, bx, by))
            else:
                room_runs.append((x0, y0, x1, y1))
        if len(runs) + len(doors) + len(room_runs) + len(room_doors) > budget:
            continue
        runs += room_runs
        doors += room_doors
    return runs, doors


def _split(rng: random.Random, runs: list[Seg], count: int) -> list[Seg]:
    """Split runs into exactly `count` pieces (fewer runs than that assumed): the longest
    piece is cut at a random point, at a grid point when it is long enough, so lengths stay
    mixed. With no runs at all, pieces are laid out as short free-standing walls."""
    if count <= 0:
        return []
    if not runs:
        runs = [(0.0, 0.0, 1.0, 0.0)]
    heap = [(-math.hypot(s[2] - s[0], s[3] - s[1]), k, s) for k, s in enumerate(runs)]
    heapq.heapify(heap)
    serial = len(heap)
    while len(heap) < count:
        neg, _, (x0, y0, x1, y1) = heapq.heappop(heap)
        length = -neg
        if length >= 2 and rng.random() < 0.7:
            at = rng.randint(1, int(length) - 1) / length
        else:
            at = rng.uniform(0.3, 0.7)
        mx, my = x0 + (x1 - x0) * at, y0 + (y1 - y0) * at
        for part in ((x0, y0, mx, my), (mx, my, x1, y1)):
            heapq.heappush(heap, (-math.hypot(part[2] - part[0], part[3] - part[1]),
                                  serial, part))
            serial += 1
    while len(heap) > count:  # more runs than pieces wanted: drop the shortest
        heap.sort()
        heap.pop()
    return [s for _, _, s in sorted(heap, key=lambda h: h[1])]


def _low_walls(rng: random.Random, side: int, n: int) -> list[Seg]:
    out: list[Seg] = []
    for _ in range(n):
        length = rng.randint(1, 3)
        if rng.random() < 0.5:
            x, y = rng.randint(0, side - length), rng.randint(1, side - 1)
            out.append((x, y, x + length, y))
        else:
            x, y = rng.randint(1, side - 1), rng.randint(0, side - length)
            out.append((x, y, x, y + length))
    return out


def _angled(rng: random.Random, side: int, n: int) -> list[Seg]:
    """Diagonal walls and round pillars (polygons of 6 to 16 short sides)."""
    out: list[Seg] = []
    while len(out) < n:
        left = n - len(out)
        if left >= 6 and rng.random() < 0.6:
            k = min(left, rng.randint(6, 16))
            r = rng.uniform(0.4, 1.6)
            cx, cy = rng.uniform(r, side - r), rng.uniform(r, side - r)
            phase = rng.uniform(0, 2 * math.pi)
            pts = [(cx + r * math.cos(phase + 2 * math.pi * j / k),
                    cy + r * math.sin(phase + 2 * math.pi * j / k)) for j in range(k)]
            out += [(*pts[j], *pts[(j + 1) % k]) for j in range(k)]
        else:
            length = rng.uniform(1.0, 5.0)
            ang = rng.uniform(0, math.pi)
            if abs(math.sin(2 * ang)) < 0.2:  # keep them clearly angled
                ang += math.pi / 4
            x0, y0 = rng.uniform(0, side), rng.uniform(0, side)
            x1 = min(max(x0 + length * math.cos(ang), 0.0), float(side))
            y1 = min(max(y0 + length * math.sin(ang), 0.0), float(side))
            if math.hypot(x1 - x0, y1 - y0) > 0.2:
                out.append((x0, y0, x1, y1))
    return out


# -- tokens ------------------------------------------------------------------------------------

SIZES: tuple[tuple[Size, float, float], ...] = (
    # size, width in squares, share
    (Size.MEDIUM, 1.0, 0.76),
    (Size.LARGE, 2.0, 0.12),
    (Size.SMALL, 1.0, 0.07),
    (Size.TINY, 0.5, 0.05),
)


def _blocked_squares(walls: list[Wall], side: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Per square (row, col): a wall runs through its open interior."""
    return _squares_crossed(np.array([w.c for w in walls], dtype=np.float64), side)


def _squares_crossed(coords: np.ndarray[Any, np.dtype[np.float64]],
                     side: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Per square (row, col): one of the segments (x0, y0, x1, y1 in pixels) runs through
    its open interior."""
    blocked = np.zeros((side, side), dtype=bool)
    if not len(coords):
        return blocked
    lines = shapely.linestrings(coords.reshape(-1, 2, 2) / GRID_PX)
    tree = shapely.STRtree(lines)
    eps = 1e-6
    rows, cols = np.mgrid[0:side, 0:side]
    boxes = shapely.box(cols.ravel() + eps, rows.ravel() + eps,
                        cols.ravel() + 1 - eps, rows.ravel() + 1 - eps)
    box_idx, _ = tree.query(boxes, predicate="intersects")
    flat = blocked.reshape(-1)
    flat[np.unique(box_idx)] = True
    return blocked


def _tokens(rng: random.Random, side: int, n: int, walls: list[Wall]) -> list[Token]:
    wall_in = _blocked_squares(walls, side)
    # Walls along interior grid lines of a 2 x 2 space cut through a Large token.
    lines_h: set[tuple[int, int]] = set()  # (row line y, col): wall along y between cols
    lines_v: set[tuple[int, int]] = set()
    for w in walls:
        x0, y0, x1, y1 = (v / GRID_PX for v in w.c)
        if y0 == y1 and float(y0).is_integer():
            for c in range(math.floor(min(x0, x1)), math.ceil(max(x0, x1))):
                lines_h.add((int(y0), c))
        elif x0 == x1 and float(x0).is_integer():
            for r in range(math.floor(min(y0, y1)), math.ceil(max(y0, y1))):
                lines_v.add((int(x0), r))
    taken = wall_in.copy()
    out: list[Token] = []
    attempts = 0
    weights = [s[2] for s in SIZES]
    while len(out) < n:
        attempts += 1
        if attempts > 200 * n + 10_000:
            raise RuntimeError(f"cannot place {n} tokens on a {side}x{side} map")
        size, width, _ = rng.choices(SIZES, weights=weights)[0]
        span = 2 if width == 2 else 1
        col, row = rng.randint(0, side - span), rng.randint(0, side - span)
        if taken[row:row + span, col:col + span].any():
            continue
        if span == 2 and ((row + 1, col) in lines_h or (row + 1, col + 1) in lines_h
                          or (col + 1, row) in lines_v or (col + 1, row + 1) in lines_v):
            continue
        taken[row:row + span, col:col + span] = True
        fcol, frow = float(col), float(row)
        if width < 1:
            fcol += rng.choice((0.0, 0.5))
            frow += rng.choice((0.0, 0.5))
        disposition = rng.choices((-1, 1, 0), weights=(45, 45, 10))[0]
        out.append(Token(f"t{len(out)}", fcol, frow, width, size, disposition))
    return out


def _movers(tokens: list[Token], walls: list[Wall], side: int) -> tuple[Move, ...]:
    """Medium tokens whose right-hand square is free (no token, no wall inside)."""
    taken = _blocked_squares(walls, side)
    for t in tokens:
        span = 2 if t.width == 2 else 1
        r, c = math.floor(t.row), math.floor(t.col)
        taken[r:r + span, c:c + span] = True
    out: list[Move] = []
    for t in tokens:
        r, c = int(t.row), int(t.col)
        if t.size is Size.MEDIUM and c + 1 < side and not taken[r, c + 1]:
            out.append((t.id, (t.col * GRID_PX, t.row * GRID_PX),
                        ((t.col + 1) * GRID_PX, t.row * GRID_PX)))
    if not out:
        raise RuntimeError("no token can move one square to the right")
    return tuple(out)


def pick_mover(scene: BenchScene, annotations: list[Doc]) -> Move:
    """The candidate mover with line of effect to the most targets (ranged), from a full
    `annotations` list as a subscriber receives it (ties: the first in token order), so a
    move changes what others see, not just a token walled in a closed room."""
    seen: dict[str, int] = {}
    for a in annotations:
        if a["mode"] == "ranged" and a["loe"]:
            seen[a["attacker"]] = seen.get(a["attacker"], 0) + 1
    return max(scene.movers, key=lambda m: seen.get(m[0], 0))


def walk(scene: BenchScene, token_id: str, steps: int) -> list[tuple[float, float]]:
    """`steps` positions (pixels) of a Medium token walking one square at a time (right,
    down, left, up, then the diagonals, the first that will do) to squares it has not
    stood on, none holding another token or a wall: a move to where it has never been, so
    nothing measured for an earlier place of it can be reused. Walled in, it goes on from
    the nearest square it may still take."""
    geom = scene.geom
    taken = _squares_crossed(np.array([(w.x0, w.y0, w.x1, w.y1) for w in geom.walls],
                                      dtype=np.float64).reshape(-1, 4), scene.side)
    here: tuple[int, int] | None = None
    for c in geom.creatures:
        r, col = math.floor(c.y / GRID_PX), math.floor(c.x / GRID_PX)
        if c.id == token_id:
            here = (r, col)
            continue
        span = max(1, math.ceil(c.width))
        taken[r:r + span, col:col + span] = True
    if here is None:
        raise KeyError(token_id)
    taken[here] = True
    out: list[tuple[float, float]] = []
    steps_around = ((0, 1), (1, 0), (0, -1), (-1, 0), (1, 1), (-1, 1), (1, -1), (-1, -1))
    while len(out) < steps:
        free = [(here[0] + dr, here[1] + dc) for dr, dc in steps_around
                if 0 <= here[0] + dr < scene.side and 0 <= here[1] + dc < scene.side
                and not taken[here[0] + dr, here[1] + dc]]
        if free:
            here = free[0]
        else:
            rows, cols = np.nonzero(~taken)
            if not len(rows):
                raise RuntimeError(f"{token_id} has no square left to walk to")
            k = int(np.argmin(np.maximum(abs(rows - here[0]), abs(cols - here[1]))))
            here = (int(rows[k]), int(cols[k]))
        taken[here] = True
        out.append((here[1] * GRID_PX, here[0] * GRID_PX))
    return out


def path(scene: BenchScene, mover: Move, count: int, walking: bool) -> list[tuple[float, float]]:
    """Where the mover goes in `count` moves: one square right and back (`mover`'s two
    places), or walking to new squares (`walk`)."""
    if walking:
        return walk(scene, mover[0], count)
    return [mover[2] if k % 2 == 0 else mover[1] for k in range(count)]


# -- documents and geometry ----------------------------------------------------------------------

def _wall_doc(w: Wall) -> Doc:
    doc: Doc = {"_id": w.id, "c": list(w.c), "move": 20, "sight": w.sight, "dir": w.dir,
                "door": w.door, "ds": w.ds}
    if w.cover is not None:
        doc["flags"] = {"covercast": {"cover": w.cover}}
    return doc


def _token_doc(t: Token) -> Doc:
    return {"_id": t.id, "name": f"Token {t.id}", "x": t.col * GRID_PX, "y": t.row * GRID_PX,
            "width": t.width, "height": t.width, "elevation": 0,
            "disposition": t.disposition, "hidden": False, "size": t.size.label}


def _wall_geom(w: Wall) -> WallGeom:
    open_door = w.door != 0 and w.ds == 1
    return WallGeom(id=w.id, x0=w.c[0], y0=w.c[1], x1=w.c[2], y1=w.c[3],
                    active=not open_door, limited=w.sight == 10,
                    direction=Direction(w.dir),
                    cover=WallCover(w.cover) if w.cover else WallCover.SOLID,
                    bottom=None, top=None)


def _creature_geom(t: Token) -> CreatureGeom:
    return CreatureGeom(id=t.id, x=t.col * GRID_PX, y=t.row * GRID_PX, width=t.width,
                        height=t.width, size=t.size, reach=t.size.reach, tall=t.size.height,
                        elevation=0.0, disposition=t.disposition, hidden=False)


def move_frame(scene: BenchScene, token_id: str, to: tuple[float, float],
               request_id: int) -> Doc:
    """The token.update message moving a token to `to` (pixels)."""
    return {"type": "token.update", "scene": scene.scene_id, "id": request_id,
            "tokens": [{"_id": token_id, "x": to[0], "y": to[1]}]}
