"""Every ruleset on every grid next to dnd35 on squares, for one scene size, in a worker process.

`python -m bench.parity --tokens 100 --walls 1000 [--dressed] --out result.json` times, on one
generated scene (dressed with the third dimension, terrain, water and mounts with --dressed,
bench/dressing.py; GM floors left out, since they name one ruleset's degrees) laid on the
square grid and on hex layouts (bench/hexscenes.py):

- the full matrix (every ordered pair, all three modes) through `evaluate`, each ruleset from
  cold: what rulesets keep across revisions of a scene (realms' covered fractions, degrees'
  and pf2's line of effect per pair, `rulesets.forget_kept`) is forgotten before each run,
  as on a first subscription;
- one move as the session computes it: a token steps one square (one hex), and the pairs
  `geometry.incremental.affected_pairs` names, widened by the ruleset (`Ruleset.widen`), are
  evaluated on the scene after the move (what the rulesets keep warm from the scene before
  it, as in the server), median of a few movers;
- equality: `evaluate` against the ruleset's pair-by-pair `reference` (pf1, realms,
  degrees, pf2), annotation by annotation, on the pairs of a sample of targets against every
  attacker (all targets with --full-reference), and on every move's pairs (on a sample of
  each move's pairs with --move-sample N: a big scene's hex references take most of an
  hour otherwise).

`--hex-only` measures only dnd35 on squares (the baseline) beside the hex layouts.

dnd35 on the square grid is the baseline, measured in the same worker on the same scene; the
figures are reported as ratios to it, each timed beside it (`interleaved_full`): every run
of a ruleset's matrix right after or right before a run of dnd35's, the ratio the median
of the runs' ratios; a ruleset's moves, then dnd35's same moves. On a shared machine a slow
patch then slows both sides of a ratio.
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
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from bench.dressing import dress
from bench.hexbench import moved
from bench.hexscenes import HEX_KINDS, on_hex
from bench.matrix import LONG_RUN_S, QUICK_RUN_S, _error, _where, first_subscription
from bench.scenes import generate
from geometry.incremental import affected_pairs
from geometry.model import GridKind, SceneGeom
from rulesets import REGISTRY, forget_kept
from rulesets.base import Annotation, AttackMode, Ruleset
from server.memory import tune_process

Result = dict[str, Any]
#: (ruleset, grids it runs on here).
SQUARE_RULESETS = ("dnd35", "pf1", "degrees", "pf2", "realms")
HEX_RULESETS = ("degrees", "pf2", "realms")
#: Hex layouts measured by default: one row layout and one column layout (the issue's).
DEFAULT_HEX = (GridKind.HEXODDR, GridKind.HEXEVENQ)
#: Targets of the sampled equality check (every attacker against each).
SAMPLE_TARGETS = 6
MOVES = 3


def _reference(ruleset: Ruleset) -> Callable[..., list[Annotation]] | None:
    ref = getattr(ruleset, "reference", None)
    return ref if callable(ref) else None


def _compare(fast: Sequence[Annotation], ref: Sequence[Annotation]) -> tuple[int, list[str]]:
    wrong = [(f, r) for f, r in zip(fast, ref, strict=True) if f != r]
    bad = len(wrong) + abs(len(fast) - len(ref))
    return bad, [f"fast {f} != reference {r}"[:600] for f, r in wrong[:2]]


Cell = tuple[str, str]  # (layout, ruleset)
#: The baseline every ratio is to.
BASE: Cell = ("SQUARE", "dnd35")


def _timed_matrix(name: str, geom: SceneGeom) -> float:
    """Seconds of one first subscription's full matrix of ruleset `name` on `geom`."""
    ruleset = REGISTRY.get(name)
    opts = ruleset.Options()
    gc.collect()
    t0 = time.perf_counter()
    first_subscription(ruleset, geom, opts)
    return time.perf_counter() - t0


def interleaved_full(cells: Sequence[Cell], timed: Callable[[Cell], float],
                     max_runs: int) -> dict[Cell, Result]:
    """Each cell's full matrix timed beside the baseline's, run for run: in each round,
    every cell but the baseline is timed right after (or, every other round, right
    before) a run of the baseline, and its ratio is the median over the rounds of its
    time over that neighbouring baseline run. A slow patch of a shared machine then
    slows both runs of a ratio, not the baseline's runs alone (timed one after the other
    before everything else, dnd35's 100 x 1,000 matrix once read 45.7 ms where the
    same code read 32-34 ms an hour before, and every ratio of that scene with it).
    Rounds: 5 when the baseline's first run is under 2 s, 3 under 10 s, else 1 (at most
    `max_runs`). Returns per cell: its times, their median, and its ratio (the
    baseline's: 1)."""
    first = timed(BASE)
    wanted = 1 if first >= LONG_RUN_S else 5 if first < QUICK_RUN_S else 3
    rounds = max(1, min(wanted, max_runs))
    base_times = [first]
    times: dict[Cell, list[float]] = {c: [] for c in cells if c != BASE}
    ratios: dict[Cell, list[float]] = {c: [] for c in times}
    for r in range(rounds):
        for cell in times:
            if r % 2 == 0:
                b = timed(BASE)
                t = timed(cell)
            else:
                t = timed(cell)
                b = timed(BASE)
            base_times.append(b)
            times[cell].append(t)
            ratios[cell].append(t / b)
    out: dict[Cell, Result] = {BASE: {"full_s": statistics.median(base_times),
                                      "full_times": base_times, "full_ratio": 1.0}}
    for cell, ts in times.items():
        out[cell] = {"full_s": statistics.median(ts), "full_times": ts,
                     "full_ratio": statistics.median(ratios[cell])}
    return out


def _moves(name: str, geom: SceneGeom, movers: Sequence[int]
           ) -> tuple[list[float], list[int], list[tuple[SceneGeom, Any, list[Annotation]]]]:
    """One move at a time, each from the scene before it, warm from a first subscription's
    full matrix (as the server is after a subscription): each move's time, number of pairs,
    and what it gave."""
    ruleset = REGISTRY.get(name)
    opts = ruleset.Options()
    first_subscription(ruleset, geom, opts)
    times, sizes, done = [], [], []
    for k in movers:
        after = moved(geom, k)
        affected = affected_pairs(geom, after)
        pairs = sorted(affected) if affected is not None else None
        if pairs is not None:
            pairs = sorted(ruleset.widen(geom, after, opts, set(pairs)))
        sizes.append(len(pairs) if pairs is not None else -1)
        t0 = time.perf_counter()
        fast = ruleset.evaluate(after, opts, pairs)
        times.append(time.perf_counter() - t0)
        done.append((after, pairs, fast))
    return times, sizes, done


def _references(name: str, geom: SceneGeom, sample: list[tuple[str, str]],
                done: Sequence[tuple[SceneGeom, Any, list[Annotation]]],
                move_sample: int | None, rng: random.Random) -> Result:
    """The cell's full matrix and moves against the ruleset's pair-by-pair reference."""
    ruleset = REGISTRY.get(name)
    opts = ruleset.Options()
    ref = _reference(ruleset)
    if ref is None or name == "dnd35":
        return {}
    compared, mismatches, examples = 0, 0, []
    for after, pairs, fast in done:
        asked = pairs
        if move_sample is not None:
            every = pairs if pairs is not None else [
                (a.id, t.id) for a in after.creatures for t in after.creatures
                if a.id != t.id]
            asked = sorted(rng.sample(every, min(len(every), move_sample)))
        got = ref(after, opts, asked)
        if asked is not pairs:
            # The fast answers for the sampled pairs, in the reference's order (one
            # missing counts as a mismatch).
            mine = {a.key(): a for a in fast}
            both = [(mine[a.key()], a) for a in got if a.key() in mine]
            bad, ex = _compare([f for f, _ in both], [r for _, r in both])
            bad += len(got) - len(both)
            # A reference that answers fewer pairs than asked counts too.
            bad += len(asked or ()) * len(AttackMode) - len(got)
        else:
            bad, ex = _compare(fast, got)
        compared += len(got)
        mismatches += bad
        examples += ex
    # The matrix: the sampled targets' pairs, from cold, against the reference.
    anns = first_subscription(ruleset, geom, opts)
    forget_kept()
    t0 = time.perf_counter()
    want = ref(geom, opts, sample)
    reference_s = time.perf_counter() - t0
    by_key = {a.key(): a for a in anns}
    got_full = [by_key[a.key()] for a in want if a.key() in by_key]
    bad, ex = _compare(got_full, want)
    return {"reference_s": reference_s, "compared": len(want) + compared,
            "reference_pairs": len(sample),
            "mismatches": bad + mismatches + (len(want) - len(got_full)),
            "examples": (ex + examples)[:2]}


def measure(tokens: int, walls: int, seed: int, *, dressed: bool, kinds: Sequence[GridKind],
            max_runs: int = 5, full_reference: bool = False,
            sample_targets: int = SAMPLE_TARGETS, move_sample: int | None = None,
            squares: bool = True) -> Result:
    geom = generate(tokens, walls, seed).geom
    if dressed:
        geom = dress(geom, seed)
    geom = replace(geom, creatures=tuple(replace(c, cover_floor=None) for c in geom.creatures))
    out: Result = {"tokens": tokens, "walls": walls, "seed": seed, "dressed": dressed,
                   "pairs": tokens * (tokens - 1), "full_reference": full_reference,
                   "layouts": {}}
    # Warm up (imports, caches of the geometry modules) before anything is timed.
    REGISTRY.get("dnd35").evaluate(generate(8, 20, seed).geom, REGISTRY.get("dnd35").Options())
    out["sample_targets"] = sample_targets
    out["move_sample"] = move_sample
    layouts = {"SQUARE": geom, **{kind.name: on_hex(geom, kind, seed) for kind in kinds}}
    # Without `squares`, only dnd35 on squares: the baseline of every ratio.
    cells: list[Cell] = [("SQUARE", name) for name in (SQUARE_RULESETS if squares
                                                       else ["dnd35"])]
    cells += [(kind.name, name) for kind in kinds for name in HEX_RULESETS]
    rows: dict[Cell, Result] = {}
    n = len(geom.creatures)
    ids = [c.id for c in geom.creatures]
    rng = random.Random(seed)
    targets = list(range(n)) if full_reference else sorted(rng.sample(range(n),
                                                                      min(n, sample_targets)))
    sample = [(ids[a], ids[t]) for t in targets for a in range(n) if a != t]
    movers = [(7 * m + 3) % n for m in range(MOVES)]
    try:
        rows.update(interleaved_full(cells, lambda c: _timed_matrix(c[1], layouts[c[0]]),
                                     max_runs))
    except Exception as exc:
        # (Without its layouts the report shows the scene FAILED with this error.)
        del out["layouts"]
        out["error"] = _error(exc)
        out["where"] = _where(exc)
        return out
    # Moves: each cell's beside dnd35's moves timed right after them (their ratio), all
    # before any reference: a pair-by-pair reference between two timed moves left
    # garbage and cold state that made the next move of every ruleset but dnd35 (which
    # has no reference) 15-27% slower (pf2 dressed HEXODDR: 22.7 ms in a row, 29.0 after
    # references).
    done: dict[Cell, list[tuple[SceneGeom, Any, list[Annotation]]]] = {}
    base_moves: list[float] = []
    for cell in cells:
        layout, name = cell
        try:
            times, sizes, done[cell] = _moves(name, layouts[layout], movers)
            row = rows[cell]
            row.update(move_s=statistics.median(times), move_times=times, move_pairs=sizes)
            if cell != BASE:
                b_times, _, _ = _moves(BASE[1], layouts[BASE[0]], movers)
                base_move = statistics.median(b_times)
                base_moves.append(base_move)
                row.update(move_base_s=base_move, move_ratio=row["move_s"] / base_move)
        except Exception as exc:
            rows[cell] = {"error": _error(exc), "where": _where(exc)}
    if "move_s" in rows.get(BASE, {}) and base_moves:
        # The baseline's move: the median of its runs beside every cell's.
        rows[BASE]["move_s"] = statistics.median([rows[BASE]["move_s"], *base_moves])
        rows[BASE]["move_ratio"] = 1.0
    for cell in cells:
        layout, name = cell
        if "error" in rows[cell]:
            continue
        try:
            rows[cell].update(_references(name, layouts[layout], sample, done[cell],
                                          move_sample, rng))
        except Exception as exc:
            rows[cell] = {"error": _error(exc), "where": _where(exc)}
    for (layout, name), row in rows.items():
        out["layouts"].setdefault(layout, {})[name] = row
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.parity", description=__doc__)
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--walls", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dressed", action="store_true")
    p.add_argument("--kinds", type=int, nargs="*", default=[int(k) for k in DEFAULT_HEX],
                   help="hex layouts (2-5: Foundry's hex grid types)")
    p.add_argument("--max-runs", type=int, default=5)
    p.add_argument("--sample-targets", type=int, default=SAMPLE_TARGETS,
                   help="targets of the sampled equality check (every attacker against each)")
    p.add_argument("--full-reference", action="store_true",
                   help="check every target against the reference (slow), not a sample")
    p.add_argument("--move-sample", type=int, default=None,
                   help="check this many pairs of each move (at random) against the "
                        "reference, not all of them (a big scene's hex references are slow)")
    p.add_argument("--hex-only", action="store_true",
                   help="on squares, dnd35 only (the baseline of the ratios)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    tune_process()  # as the server runs (server/memory.py)
    kinds = [k for k in HEX_KINDS if int(k) in args.kinds]
    result = measure(args.tokens, args.walls, args.seed, dressed=args.dressed, kinds=kinds,
                     max_runs=args.max_runs, full_reference=args.full_reference,
                     sample_targets=args.sample_targets, move_sample=args.move_sample,
                     squares=not args.hex_only)
    with open(args.out, "w") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
