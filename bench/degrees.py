"""Centre-line rulesets (degrees, pf2) next to dnd35, for one scene size, in a worker process.

`python -m bench.degrees --tokens 100 --walls 1000 --out result.json` times, on one generated
scene (dressed with the third dimension, terrain, water, mounts and token flags with
--dressed, bench/dressing.py): the full matrix (every ordered pair, all three modes) of
dnd35, degrees and pf2 through `evaluate`, and of degrees and pf2 through `reference` (the
pair-by-pair computation `evaluate` replaced: the "before" figure, measured in the same run),
and checks that `evaluate` equals `reference` annotation by annotation on the whole matrix.
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bench.dressing import dress
from bench.matrix import _error, _where, first_subscription, timed_runs
from bench.scenes import generate
from rulesets import REGISTRY
from rulesets.base import Annotation
from rulesets.degrees import CoverDegrees
from server.memory import tune_process

Result = dict[str, Any]
RULESETS = ("dnd35", "degrees", "pf2")
#: Centre-line rulesets with a reference computation.
CENTRE_LINE = ("degrees", "pf2")


def measure(tokens: int, walls: int, seed: int, *, dressed: bool = False, max_runs: int = 5,
            reference: bool = True) -> Result:
    scene = generate(tokens, walls, seed)
    geom = dress(scene.geom, seed) if dressed else scene.geom
    out: Result = {"tokens": tokens, "walls": walls, "seed": seed, "dressed": dressed,
                   "pairs": tokens * (tokens - 1)}
    fast: dict[str, list[Annotation]] = {}
    for name in RULESETS:
        ruleset = REGISTRY.get(name)
        opts = ruleset.Options()
        # GM cover floors name a ruleset's own degrees: dnd35 has none of degrees' names.
        g = geom if name in CENTRE_LINE else replace(geom, creatures=tuple(
            replace(c, cover_floor=None) for c in geom.creatures))
        try:
            times, anns = timed_runs(functools.partial(first_subscription, ruleset, g, opts),
                                     max_runs)
            out[name] = {"median_s": statistics.median(times), "times": times}
            fast[name] = anns
        except Exception as exc:
            out[name] = {"error": _error(exc), "where": _where(exc)}
    if reference:
        for name in CENTRE_LINE:
            ruleset = REGISTRY.get(name)
            assert isinstance(ruleset, CoverDegrees)
            opts = ruleset.Options()
            key = f"{name}_reference"
            try:
                times, ref = timed_runs(functools.partial(ruleset.reference, geom, opts), 1)
            except Exception as exc:
                out[key] = {"error": _error(exc), "where": _where(exc)}
                continue
            out[key] = {"median_s": statistics.median(times), "times": times}
            if name in fast:
                wrong = [(f, r) for f, r in zip(fast[name], ref, strict=True) if f != r]
                out[key]["compared"] = len(ref)
                out[key]["mismatches"] = len(wrong) + abs(len(ref) - len(fast[name]))
                out[key]["examples"] = [f"fast {f} != reference {r}"[:600]
                                        for f, r in wrong[:2]]
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.degrees", description=__doc__)
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--walls", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dressed", action="store_true")
    p.add_argument("--max-runs", type=int, default=5)
    p.add_argument("--no-reference", action="store_true")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    tune_process()  # as the server runs (server/memory.py)
    result = measure(args.tokens, args.walls, args.seed, dressed=args.dressed,
                     max_runs=args.max_runs, reference=not args.no_reference)
    with open(args.out, "w") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
