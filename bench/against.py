"""Every ruleset now against an earlier commit, on the same scenes, in one run: is any
ruleset slower than before? (issue 14: "the benchmark shows no ruleset slower than before").

    python -m bench.against REF [--rounds 2] [--repeat 3] [--layouts SQUARE HEXODDR HEXEVENQ]

REF is checked out in a temporary worktree (`git worktree add --detach`, removed after).
Then, `--rounds` times, this file measures REF's code and then this checkout's, each in a
process of its own (this file runs there with that tree first on the path, and only uses
what both have: `bench.scenes`, `bench.dressing`, `bench.hexscenes`, `bench.hexbench`,
`geometry.incremental.affected_pairs`, the rulesets' `evaluate` and `widen`). Per layout
(100 tokens, 1,000 walls, plain and dressed; squares and the hex layouts) and ruleset: the
whole matrix from nothing kept (a first subscription), `--repeat` times in the process (the
first run of a scene also builds its walls' indexes, which the server does when the scene
is loaded), and five moves as bench.parity makes them (each mover one step, its pairs
widened by the ruleset), CPU time, medians.
Rulesets REF does not have are left out. Prints a table of before / now and their ratio.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RULESETS = ("dnd35", "pf1", "degrees", "pf2", "realms", "dnd5e")
HEX_RULESETS = ("degrees", "pf2", "realms")


def _forget() -> None:
    """What the rulesets keep across snapshots, forgotten (older code: realms' measures)."""
    import rulesets

    forget = getattr(rulesets, "forget_kept", None)
    if forget is not None:
        forget()
        return
    import rulesets.realms as realms

    getattr(realms, "_MEASURES", {}).clear()


def measure(rounds: int, layouts: Sequence[str]) -> dict[str, list[float]]:
    """In the tree first on sys.path: per 'plain|dressed LAYOUT ruleset', the median
    matrix and move CPU seconds."""
    from bench.dressing import dress
    from bench.hexbench import moved
    from bench.hexscenes import on_hex
    from bench.scenes import generate
    from geometry.incremental import affected_pairs
    from geometry.model import GridKind
    from rulesets import REGISTRY

    try:
        from server.memory import tune_process
        tune_process()
    except ImportError:
        pass
    known = set(REGISTRY.names())
    out: dict[str, list[float]] = {}
    small = generate(8, 20, 1).geom
    REGISTRY.get("dnd35").evaluate(small, REGISTRY.get("dnd35").Options())
    for dressed in (False, True):
        base = generate(100, 1000, 1).geom
        if dressed:
            base = dress(base, 1)
        base = replace(base, creatures=tuple(replace(c, cover_floor=None)
                                             for c in base.creatures))
        for lay in layouts:
            geom = base if lay == "SQUARE" else on_hex(base, GridKind[lay], 1)
            names = RULESETS if lay == "SQUARE" else HEX_RULESETS
            for name in names:
                if name not in known:
                    continue  # a ruleset this tree does not have
                rules = REGISTRY.get(name)
                opts = rules.Options()
                mats = []
                for _ in range(rounds):
                    _forget()
                    gc.collect()
                    t0 = time.process_time()
                    rules.evaluate(geom, opts)
                    mats.append(time.process_time() - t0)
                n = len(geom.creatures)
                moves = []
                for k in [(7 * m + 3) % n for m in range(5)]:
                    after = moved(geom, k)
                    affected = affected_pairs(geom, after)
                    pairs = (sorted(rules.widen(geom, after, opts, set(affected)))
                             if affected is not None else None)
                    gc.collect()
                    t0 = time.process_time()
                    rules.evaluate(after, opts, pairs)
                    moves.append(time.process_time() - t0)
                key = f"{'dressed' if dressed else 'plain'} {lay} {name}"
                out[key] = [statistics.median(mats), statistics.median(moves)]
                print(key, file=sys.stderr, flush=True)
    return out


def _run(tree: Path, rounds: int, layouts: Sequence[str]) -> dict[str, list[float]]:
    """`measure` with `tree` first on the path, in a process of its own."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--measure", "--rounds", str(rounds),
         "--layouts", *layouts], cwd=tree, env=env, capture_output=True, text=True,
        check=True)
    result: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.against", description=__doc__)
    p.add_argument("ref", nargs="?", help="the earlier commit (any git revision)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--layouts", nargs="+", default=["SQUARE", "HEXODDR", "HEXEVENQ"])
    p.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help="JSON results file")
    args = p.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.rounds, args.layouts)))
        return 0
    if not args.ref:
        p.error("name the earlier commit")
    runs: dict[str, list[dict[str, list[float]]]] = {"before": [], "now": []}
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), args.ref], cwd=REPO,
                       check=True, capture_output=True)
        try:
            for _ in range(args.rounds):
                runs["before"].append(_run(old, args.repeat, args.layouts))
                runs["now"].append(_run(REPO, args.repeat, args.layouts))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO,
                           check=False, capture_output=True)
    table: list[dict[str, Any]] = []
    print("| layout, ruleset | matrix before / now | ratio | move before / now | ratio |")
    print("| --- | --- | ---: | --- | ---: |")
    for key in runs["now"][0]:
        if key not in runs["before"][0]:
            print(f"| {key} | (not in {args.ref}) | | | |")
            continue
        bm, bv = (statistics.median(r[key][i] for r in runs["before"]) for i in (0, 1))
        nm, nv = (statistics.median(r[key][i] for r in runs["now"]) for i in (0, 1))
        table.append({"key": key, "matrix": [bm, nm], "move": [bv, nv]})
        print(f"| {key} | {bm * 1e3:.0f} / {nm * 1e3:.0f} ms | {nm / bm:.2f} "
              f"| {bv * 1e3:.2f} / {nv * 1e3:.2f} ms | {nv / bv:.2f} |", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"ref": args.ref, "rounds": args.rounds, "rows": table}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
