"""The cost of exact line of effect through openings (issue 14 item 2), as ratios to the
engine without it, measured in the same process, runs alternating.

`python -m bench.openings --configs 100x1000,200x5000 --rulesets dnd35,degrees` times, per
scene and ruleset, the full matrix (every ordered pair, every mode) and one move through the
sans-I/O Core (`bench.live.core_move`), each with the exact test (as shipped) and without it,
in CPU time (the machine is shared: wall time follows the load of other processes):
the baseline is the engine with `geometry.openings` left out and the kernel's sealed marks
off (`blocks_cross_walls_any` called without `sealed`: the tracing the engine did before).
It also counts the annotations the exact test changes (total raised to line of effect).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from bench.live import core_move
from bench.scenes import generate
from geometry import kernel
from rulesets import REGISTRY, forget_kept
from rulesets.base import Annotation, Degree
from rulesets.corner import CornerEngine
from rulesets.degrees import _Context
from server.memory import tune_process

Result = dict[str, Any]


@contextmanager
def baseline() -> Iterator[None]:
    """The engine as it was before exact line of effect: no openings test, no sealed marks
    looked for in the kernel, no sealed pairs looked for first (degrees)."""
    patches: list[tuple[Any, str, Any]] = [
        (CornerEngine, "_through_openings", lambda self, plan, sealed, level, reach:
         (level, reach)),
        (_Context, "_through_openings",
         lambda self, a, t, open_any, sealed=None, ask=None: open_any),
        (_Context, "_sealed_pairs", lambda self, a, t: None),
        (_Context, "_origin_sees", lambda self, origin, t: False),
    ]
    original_any = kernel.blocks_cross_walls_any

    def no_sealed(*args: Any, **kw: Any) -> Any:
        kw.pop("sealed", None)
        return original_any(*args, **kw)

    patches.append((kernel, "blocks_cross_walls_any", no_sealed))
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    # What the rulesets keep across snapshots (degrees' line of effect per pair) is worked
    # out one way or the other: neither way may read the other's.
    forget_kept()
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
        forget_kept()


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """CPU time of fn (this process's: the machine is shared, wall time varies with load),
    from nothing kept by an earlier run (a first subscription's)."""
    forget_kept()
    gc.collect()
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def measure(tokens: int, walls: int, ruleset: str, rounds: int, moves: int) -> Result:
    scene = generate(tokens, walls, 1)
    rules = REGISTRY.get(ruleset)
    opts = rules.Options()
    times: dict[str, list[float]] = {"base": [], "exact": []}
    results: dict[str, list[Annotation]] = {}
    for _ in range(rounds):
        for which in ("base", "exact"):
            if which == "base":
                with baseline():
                    t, out = _timed(lambda: rules.evaluate(scene.geom, opts))
            else:
                t, out = _timed(lambda: rules.evaluate(scene.geom, opts))
            times[which].append(t)
            results[which] = out
    changed = [(b, e) for b, e in zip(results["base"], results["exact"], strict=True)
               if b != e]
    raised = sum(1 for b, e in changed if b.cover is Degree.TOTAL and e.loe)
    move: dict[str, list[float]] = {"base": [], "exact": []}
    matches = True
    for _ in range(rounds):
        for which in ("base", "exact"):
            if which == "base":
                with baseline():
                    r = core_move(tokens, walls, 1, moves, ruleset)
            else:
                forget_kept()
                r = core_move(tokens, walls, 1, moves, ruleset)
                matches = matches and bool(r["view_matches_fresh"])
            move[which].append(float(r["cpu_median_s"]))
    base_s, exact_s = statistics.median(times["base"]), statistics.median(times["exact"])
    mb, me = statistics.median(move["base"]), statistics.median(move["exact"])
    return {
        "tokens": tokens, "walls": walls, "ruleset": ruleset, "rows": len(results["exact"]),
        "matrix_base_s": base_s, "matrix_exact_s": exact_s, "matrix_ratio": exact_s / base_s,
        "move_base_s": mb, "move_exact_s": me, "move_ratio": me / mb,
        "changed": len(changed), "raised_from_total": raised,
        "other_changes": len(changed) - raised,
        "total_before": sum(1 for a in results["base"] if a.cover is Degree.TOTAL),
        "move_view_matches_fresh": matches,
        "times": {"matrix": times, "move": move},
    }


def line(m: Result) -> str:
    return (f"| {m['ruleset']} | {m['tokens']} x {m['walls']} | {m['matrix_base_s'] * 1e3:.0f} ms "
            f"| {m['matrix_exact_s'] * 1e3:.0f} ms | {m['matrix_ratio']:.2f} "
            f"| {m['move_base_s'] * 1e3:.1f} ms | {m['move_exact_s'] * 1e3:.1f} ms "
            f"| {m['move_ratio']:.2f} | {m['raised_from_total']} of {m['total_before']} "
            f"| {m['other_changes']} |")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.openings", description=__doc__)
    p.add_argument("--configs", default="100x1000,200x5000")
    p.add_argument("--rulesets", default="dnd35,degrees")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--moves", type=int, default=10)
    p.add_argument("--out", help="JSON results file")
    args = p.parse_args(argv)
    tune_process()
    out = []
    print("| ruleset | scene | matrix before | matrix exact | ratio | move before "
          "| move exact | ratio | raised from total | other changes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for config in args.configs.split(","):
        tokens, walls = (int(v) for v in config.split("x"))
        for ruleset in args.rulesets.split(","):
            m = measure(tokens, walls, ruleset, args.rounds, args.moves)
            out.append(m)
            print(line(m), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, default=lambda o: o.tolist() if isinstance(o, np.ndarray) else o)
    return 0


if __name__ == "__main__":
    sys.exit(main())
