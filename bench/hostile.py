"""Legal scenes built to be expensive, through the rulesets: how long one scene's whole
matrix holds the worker, and how much memory it takes.

A slice of a table is cut between pairs, never inside one (docs/protocol.md), so what one
pair of tokens costs is what every other client may wait. Three kinds of walls, each within
`welcome.limits` (20,000 walls):

- `forest`: short walls (10 px) scattered over a 30 x 40-square band, tokens on both sides;
- `strip`: the same walls in a strip 1.4 squares high, right between two tokens (every wall
  near one sight);
- `lattice`: the 20-token benchmark scene beside a lattice of long walls crossing one
  another (`--lattice` of each way), far from the tokens.

Each (scene, ruleset) runs in a process of its own, so that its peak memory (ru_maxrss) is
its own; CPU time of `evaluate`, from nothing kept (a first subscription).

    python -m bench.hostile [--rulesets dnd35 realms] [--walls 20000] [--lattice 9800]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from bench.scenes import generate
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
from rulesets import REGISTRY, forget_kept

G = 100.0
SCENES = ("forest-2", "forest-20", "strip-2", "lattice")


def _wall(k: int, x0: float, y0: float, x1: float, y1: float) -> WallGeom:
    return WallGeom(f"w{k}", x0, y0, x1, y1, True, False, Direction.BOTH, WallCover.SOLID,
                    None, None)


def _token(k: int, x: float, y: float) -> CreatureGeom:
    return CreatureGeom(f"t{k}", x, y, 1, 1, Size.MEDIUM, 5, 6, 0, 1 if k % 2 else -1, False)


def _scattered(walls: int, y_lo: float, y_hi: float, seed: int = 1) -> list[WallGeom]:
    """Walls 10 px long at random angles, centres over x 5-35 squares, y y_lo-y_hi."""
    rng = random.Random(seed)
    out = []
    for k in range(walls):
        cx, cy = rng.uniform(5 * G, 35 * G), rng.uniform(y_lo * G, y_hi * G)
        ang = rng.uniform(0, np.pi)
        dx, dy = np.cos(ang) * 5, np.sin(ang) * 5
        out.append(_wall(k, cx - dx, cy - dy, cx + dx, cy + dy))
    return out


def scene(name: str, walls: int, lattice: int) -> SceneGeom:
    """One of SCENES."""
    grid = Grid(GridKind.SQUARE, G, 5, "ft")
    if name.startswith("forest"):
        n = int(name.split("-")[1])
        tokens = [_token(k, ((k // 2) % 4) * G if k % 2 == 0 else (36 + (k // 2) % 4) * G,
                         (((k // 2) // 4) * 3 % 40) * G) for k in range(n)]
        return SceneGeom(grid, tuple(_scattered(walls, 0, 40)), tuple(tokens))
    if name.startswith("strip"):
        tokens = [_token(0, 1 * G, 5 * G), _token(1, 38 * G, 5 * G)]
        return SceneGeom(grid, tuple(_scattered(walls, 4.8, 6.2)), tuple(tokens))
    base = generate(20, 300, 1).geom
    extra = []
    x0, span = 1000 * G, 100 * G
    for k in range(lattice):
        y = x0 + 0.5 + k * (span / lattice)
        extra += [_wall(10_000 + 2 * k, x0, y, x0 + span, y),
                  _wall(10_001 + 2 * k, y, x0, y, x0 + span)]
    return replace(base, walls=base.walls + tuple(extra))


def one(name: str, ruleset: str, walls: int, lattice: int) -> dict[str, Any]:
    """Evaluate one scene's whole matrix once (in this process)."""
    geom = scene(name, walls, lattice)
    rules = REGISTRY.get(ruleset)
    forget_kept()
    t0 = time.process_time()
    out = rules.evaluate(geom, rules.Options())
    took = time.process_time() - t0
    return {"scene": name, "ruleset": ruleset, "walls": len(geom.walls),
            "tokens": len(geom.creatures), "annotations": len(out), "cpu_s": took,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.hostile", description=__doc__)
    p.add_argument("--rulesets", nargs="+", default=["dnd35", "pf1", "degrees", "realms"])
    p.add_argument("--scenes", nargs="+", default=list(SCENES), choices=SCENES)
    p.add_argument("--walls", type=int, default=20_000)
    p.add_argument("--lattice", type=int, default=9_800)
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--one", nargs=2, metavar=("SCENE", "RULESET"), help=argparse.SUPPRESS)
    p.add_argument("--out", help="JSON results file")
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], args.walls, args.lattice)))
        return 0
    print("| scene | ruleset | walls | tokens | CPU | peak memory |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    results = []
    for name in args.scenes:
        for ruleset in args.rulesets:
            cmd = [sys.executable, "-m", "bench.hostile", "--one", name, ruleset,
                   "--walls", str(args.walls), "--lattice", str(args.lattice)]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, check=True,
                                      timeout=args.timeout)
                r = json.loads(done.stdout.strip().splitlines()[-1])
                print(f"| {name} | {ruleset} | {r['walls']} | {r['tokens']} "
                      f"| {r['cpu_s']:.2f} s | {r['peak_mb']:.0f} MB |", flush=True)
            except subprocess.TimeoutExpired:
                r = {"scene": name, "ruleset": ruleset, "error": f"over {args.timeout} s"}
                print(f"| {name} | {ruleset} | | | over {args.timeout:.0f} s | |", flush=True)
            except subprocess.CalledProcessError as exc:
                # A MemoryError under the caller's memory limit, or a crash: its last line.
                last = (exc.stderr or "").strip().splitlines()[-1:] or ["no output"]
                r = {"scene": name, "ruleset": ruleset, "error": last[0]}
                print(f"| {name} | {ruleset} | | | failed: {last[0]} | |", flush=True)
            results.append(r)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
