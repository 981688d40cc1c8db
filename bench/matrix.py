"""Full-matrix figures for one scene size, run in a worker process of its own.

`python -m bench.matrix --tokens 100 --walls 1000 --out result.json` times, on one generated
scene: Dnd35 `evaluate` of every ordered pair in all three modes (the engine), the brute
numpy baseline, the naive baseline on a sample of pairs (extrapolated), and checks Dnd35
through the fast engine against Dnd35 through `CornerEngine.reference`. The parent
(`python -m bench`) runs one worker per scene size under a memory limit and a timeout, so a
run that blows up is reported as such instead of taking the machine down.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from bench import baselines
from bench.scenes import BenchScene, generate
from rulesets import forget_kept
from rulesets.base import Annotation, AttackMode
from rulesets.corner import CornerEngine, CornerOptions
from rulesets.dnd35 import Dnd35
from server.memory import tune_process

T = TypeVar("T")
Result = dict[str, Any]

#: Runs per figure: 5 when a run is quick, 3 normally, 1 when one run takes this long.
LONG_RUN_S = 10.0
QUICK_RUN_S = 2.0
#: Rows per batch of the equality check (the reference traces without the spatial prune).
EQUALITY_BATCH_ROWS = 1200


def first_subscription(ruleset: Any, geom: Any, options: Any) -> list[Annotation]:
    """A scene's whole matrix as a first subscription computes it: what rulesets keep
    across revisions of a scene (`rulesets.forget_kept`) forgotten first, so that a run
    timed again does not read back the run before."""
    forget_kept()
    out: list[Annotation] = ruleset.evaluate(geom, options)
    return out


def timed_runs(fn: Callable[[], T], max_runs: int) -> tuple[list[float], T]:
    """Run fn repeatedly: 5 runs when quick, 3 normally, 1 when a run takes LONG_RUN_S or
    more (never more than max_runs). Returns the times and the last result."""
    times: list[float] = []
    result: T
    while True:
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        first = times[0]
        wanted = 1 if first >= LONG_RUN_S else 5 if first < QUICK_RUN_S else 3
        if len(times) >= min(wanted, max_runs):
            return times, result


def _error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 300 else text[:297] + "..."


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}"
                       for f in reversed(frames[-4:]))


def measure(tokens: int, walls: int, seed: int, *, max_runs: int = 5,
            naive_budget_s: float = 2.0, naive_max_pairs: int = 400,
            equality_rows: int | None = None, breakdown: bool = False) -> Result:
    scene = generate(tokens, walls, seed)
    geom = scene.geom
    opts = CornerOptions()
    pairs = baselines.ordered_pairs(tokens)
    out: Result = {"tokens": tokens, "walls": walls, "seed": seed, "pairs": len(pairs),
                   "rows": 3 * len(pairs), "scene": scene.name}

    # The engine: the full matrix, all pairs, three modes, each run a first subscription's
    # (nothing kept from the run before: line of effect is kept per pair of spaces).
    full: list[Annotation] | None = None
    try:
        times, full = timed_runs(lambda: first_subscription(Dnd35(), geom, opts), max_runs)
        out["engine"] = {"median_s": statistics.median(times), "times": times}
    except Exception as exc:  # MemoryError under the worker's limit, or a bug
        out["engine"] = {"error": _error(exc), "where": _where(exc)}
    engine_levels = (baselines.engine_ranged(full, geom, pairs) if full is not None else None)

    # The engine on the baselines' own work: every ordered pair, the ranged mode only.
    try:
        def ranged() -> list[Annotation]:
            forget_kept()
            out: list[Annotation] = Dnd35().evaluate(geom, opts, modes=[AttackMode.RANGED])
            return out

        times, _ = timed_runs(ranged, max_runs)
        out["engine_ranged"] = {"median_s": statistics.median(times), "times": times}
    except Exception as exc:
        out["engine_ranged"] = {"error": _error(exc), "where": _where(exc)}

    # Brute-force numpy, ranged only, every ordered pair.
    brute_levels: list[int] | None = None
    try:
        times, levels = timed_runs(lambda: baselines.brute_ranged(geom), max_runs)
        brute_levels = [int(v) for v in levels]
        out["brute"] = {"median_s": statistics.median(times), "times": times,
                        "agreement": (baselines.agreement(brute_levels, engine_levels)
                                      if engine_levels is not None else None)}
    except Exception as exc:
        out["brute"] = {"error": _error(exc), "where": _where(exc)}

    # Naive: a random sample of ordered pairs, timed pair by pair, extrapolated.
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    rng.shuffle(order)
    naive = baselines.Naive(geom)
    per_pair: list[float] = []
    sampled: list[int] = []
    naive_levels: list[int] = []
    started = time.perf_counter()
    for k in order[:naive_max_pairs]:
        a, t = pairs[k]
        t0 = time.perf_counter()
        naive_levels.append(naive.pair(a, t))
        per_pair.append(time.perf_counter() - t0)
        sampled.append(k)
        if time.perf_counter() - started >= naive_budget_s and len(sampled) >= 5:
            break
    mean = statistics.fmean(per_pair) if per_pair else float("nan")
    truth = engine_levels if engine_levels is not None else brute_levels
    out["naive"] = {"per_pair_s": mean, "sampled_pairs": len(sampled),
                    "extrapolated_s": mean * len(pairs),
                    "agreement": (baselines.agreement(naive_levels, [truth[k] for k in sampled])
                                  if truth is not None else None),
                    "agreement_with": "engine" if engine_levels is not None else "brute"}

    out["equality"] = equality(scene, full, equality_rows, seed)
    if breakdown:
        out["breakdown"] = time_breakdown(scene, opts)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def default_equality_rows(walls: int) -> int:
    """Rows of the reference check per scene, to keep it to a few seconds."""
    return max(600, int(2.5e7 / (walls + 1000)))


def equality(scene: BenchScene, full: Sequence[Annotation] | None, rows: int | None,
             seed: int) -> Result:
    """Dnd35 via the fast engine == Dnd35 via CornerEngine.reference, over every attacker
    against a set of targets (all of them when the budget allows; otherwise a sample with
    every creature size among the targets), in batches. Also checks that the full-matrix
    result agrees with those batches (evaluating a subset gives the same annotations)."""
    geom = scene.geom
    n = len(geom.creatures)
    budget = rows if rows is not None else default_equality_rows(len(geom.walls))
    per_target = 3 * max(1, n - 1)
    k = max(1, min(n, budget // per_target))
    targets = list(range(n)) if k >= n else baselines.sample_targets(geom, k, seed)
    ids = [c.id for c in geom.creatures]
    per_batch = max(1, EQUALITY_BATCH_ROWS // per_target)
    compared = 0
    mismatches: list[baselines.Mismatch] = []
    subset_mismatches = 0
    full_by = {a.key(): a for a in full} if full is not None else None
    t0 = time.perf_counter()
    try:
        for b0 in range(0, len(targets), per_batch):
            batch = targets[b0:b0 + per_batch]
            pairs = [(ids[a], ids[t]) for t in batch for a in range(n) if a != t]
            fast = Dnd35().evaluate(geom, CornerOptions(), pairs=pairs)
            count, bad = baselines.compare_annotations(geom, pairs, fast)
            compared += count
            mismatches += bad
            if full_by is not None:
                subset_mismatches += sum(1 for a in fast if full_by.get(a.key()) != a)
    except Exception as exc:
        return {"error": _error(exc), "where": _where(exc), "compared": compared}
    return {
        "compared": compared, "targets": len(targets), "all_targets": len(targets) == n,
        "mismatches": len(mismatches),
        "examples": [f"{m.row}: fast {m.fast} != reference {m.reference}"[:600]
                     for m in mismatches[:3]],
        "subset_mismatches": subset_mismatches if full_by is not None else None,
        "seconds": time.perf_counter() - t0,
    }


def time_breakdown(scene: BenchScene, opts: CornerOptions) -> Result:
    """One run of the engine's two paths on the full matrix's rows, for where time goes:
    rows between single-square creatures (the block path) and rows with a big creature
    (the general path)."""
    geom = scene.geom
    n = len(geom.creatures)
    engine = CornerEngine(geom, opts)
    single = [c.width <= 1 and c.height <= 1 for c in geom.creatures]
    rows = [(a, t, m) for a in range(n) for t in range(n) if a != t for m in AttackMode]
    out: Result = {}
    for name, sel in (("single_rows", [r for r in rows if single[r[0]] and single[r[1]]]),
                      ("big_rows", [r for r in rows if not (single[r[0]] and single[r[1]])])):
        gc.collect()
        t0 = time.perf_counter()
        try:
            engine.evaluate(sel, False)
            out[name] = {"rows": len(sel), "seconds": time.perf_counter() - t0}
        except Exception as exc:
            out[name] = {"rows": len(sel), "error": _error(exc), "where": _where(exc),
                         "seconds": time.perf_counter() - t0}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.matrix", description=__doc__)
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--walls", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-runs", type=int, default=5)
    p.add_argument("--naive-budget", type=float, default=2.0)
    p.add_argument("--equality-rows", type=int, default=None)
    p.add_argument("--breakdown", action="store_true")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    tune_process()  # as the server runs (server/memory.py)
    result = measure(args.tokens, args.walls, args.seed, max_runs=args.max_runs,
                     naive_budget_s=args.naive_budget, equality_rows=args.equality_rows,
                     breakdown=args.breakdown)
    with open(args.out, "w") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
