"""Degrees and pf2 on hex grids: the full matrix and one move, fast path against reference.

`python -m bench.hexbench --tokens 100 --walls 1000` lays a dressed benchmark scene on each
hex layout (bench/hexscenes.py; `--kinds 1` adds the square scene itself) and times, per
ruleset: `evaluate` on every ordered pair (all three modes), and one move as the session
computes it (a token steps one hex; the pairs `geometry.incremental.affected_pairs` names
are evaluated), through `evaluate` and through `reference` (the pair-by-pair computation),
checking that both give the same annotations.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bench.dressing import dress
from bench.hexscenes import HEX_KINDS, on_hex
from bench.matrix import first_subscription
from bench.scenes import generate
from geometry import hex as hexgrid
from geometry.incremental import affected_pairs
from geometry.model import GridKind, SceneGeom
from rulesets import REGISTRY
from rulesets.degrees import CoverDegrees
from server.memory import tune_process

Result = dict[str, Any]


def moved(geom: SceneGeom, k: int) -> SceneGeom:
    """The scene after creature k steps one hex (to the next column), or one square right
    on a square grid."""
    c = geom.creatures[k]
    if not hexgrid.is_hex(geom.grid):
        x, y = c.x + geom.grid.size, c.y
    else:
        layout = hexgrid.HexLayout.of(geom.grid)
        cell = hexgrid.footprint(c, geom.grid).cells[0]
        x, y = hexgrid.token_position(layout, (cell[0], cell[1] + 1), c.width, c.height,
                                      c.shape)
    creatures = list(geom.creatures)
    creatures[k] = replace(c, x=x, y=y)
    return replace(geom, creatures=tuple(creatures))


def _timed(fn: Any, runs: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def measure(tokens: int, walls: int, seed: int, kinds: Sequence[int], runs: int,
            reference: bool, moves: int) -> Result:
    base = dress(generate(tokens, walls, seed).geom, seed)
    out: Result = {"tokens": tokens, "walls": walls, "seed": seed, "layouts": {}}
    for kind in (GridKind.SQUARE, *HEX_KINDS):
        if int(kind) not in kinds:
            continue
        # The square scene itself for comparison (kind 1), or laid on a hex layout.
        geom = base if kind is GridKind.SQUARE else on_hex(base, kind, seed)
        row: Result = {}
        for name in ("degrees", "pf2"):
            ruleset = REGISTRY.get(name)
            assert isinstance(ruleset, CoverDegrees)
            opts = ruleset.Options()
            full_s, _ = _timed(lambda r=ruleset, o=opts, g=geom: first_subscription(r, g, o), runs)
            move_fast, move_ref, mismatches, compared, pairs = [], [], 0, 0, []
            # Every move timed before any reference runs (bench/parity.py says why).
            done = []
            for m in range(moves):
                k = (7 * m + 3) % len(geom.creatures)
                after = moved(geom, k)
                affected = affected_pairs(geom, after)
                chosen = sorted(affected) if affected is not None else None
                pairs.append(len(chosen) if chosen is not None else -1)
                fs, fast = _timed(lambda r=ruleset, o=opts, g=after, p=chosen:
                                  r.evaluate(g, o, p), 1)
                move_fast.append(fs)
                done.append((after, chosen, fast))
            if reference:
                for after, chosen, fast in done:
                    rs, ref = _timed(lambda r=ruleset, o=opts, g=after, p=chosen:
                                     r.reference(g, o, p), 1)
                    move_ref.append(rs)
                    compared += len(ref)
                    mismatches += sum(f != x for f, x in zip(fast, ref, strict=True))
            row[name] = {"full_matrix_s": full_s,
                         "move_fast_median_s": statistics.median(move_fast),
                         "move_reference_median_s": (statistics.median(move_ref)
                                                     if move_ref else None),
                         "move_pairs": pairs, "compared": compared, "mismatches": mismatches}
        out["layouts"][kind.name] = row
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hexbench", description=__doc__)
    p.add_argument("--tokens", type=int, default=100)
    p.add_argument("--walls", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--kinds", type=int, nargs="*", default=[2, 3, 4, 5])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--moves", type=int, default=3)
    p.add_argument("--no-reference", action="store_true")
    p.add_argument("--out")
    args = p.parse_args(argv)
    tune_process()  # as the server runs (server/memory.py)
    result = measure(args.tokens, args.walls, args.seed, args.kinds, args.runs,
                     not args.no_reference, args.moves)
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
