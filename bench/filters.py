"""Filtered subscriptions at the documented limits, through the sans-I/O Core: a
1,000-token / 20,000-wall scene (`bench.scenes.generate`) with one subscriber following one
attacker in every mode (docs/protocol.md 3.12).

Measured in one run, beside a baseline: the same Core's unfiltered subscription and moves on
the 100-token / 1,000-wall scene (the dnd35 figures of issue 15, "full matrix ~45 ms, a move
~6 ms"), so the figures can be read as ratios on a machine of any speed:

- the unfiltered subscription to the big scene: refused up front (`too_large`), and how long
  the refusal takes;
- the filtered one's first result (the attacker's 999 pairs x 3 modes, from a scene loaded
  but never computed: the scene's wall index is built in it), and a move: of other tokens
  (each one square right, then back), and of the attacker itself (every pair it has), one
  square right and back, and walking on to squares it has not stood on;
- the table held at the end against a fresh evaluation of the attacker's pairs (equality).

Each ruleset asked for (`--rulesets`, dnd35 by default) is measured on the big scene;
every one is held to the same targets, beside the one dnd35 baseline. With `--hex KIND`,
the hex rulesets among them are measured on that hex layout of the scene too
(`measure_hex`: through the steps a filtered table takes, not the Core).

    python -m bench.filters [--tokens 1000] [--walls 20000] [--moves 30]
                            [--rulesets dnd35 pf2 realms] [--hex 2 5] [--out r.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import msgspec

from bench.hexbench import moved
from bench.hexscenes import on_hex
from bench.live import CoreHarness, _one, _sends_to, pack, unpack
from bench.parity import HEX_RULESETS
from bench.scenes import BenchScene, generate, move_frame, walk
from geometry.incremental import affected
from geometry.model import GridKind
from rulesets import REGISTRY
from server.tables import annotation_out

Result = dict[str, Any]
Key = tuple[str, str, str]

#: Squares the attacker walks on to, each a move timed.
WALK_STEPS = 20


def _ms(xs: Sequence[float]) -> Result:
    return {"median_ms": round(1000 * statistics.median(xs), 2),
            "max_ms": round(1000 * max(xs), 2), "n": len(xs)}


def _moves(h: CoreHarness, scene: BenchScene, sub: int, movers: Sequence[tuple[str, Any, Any]],
           rounds: int, view: dict[Key, Any]) -> list[float]:
    """Each mover a square right then back, `rounds` moves in all (`_steps`)."""
    steps = []
    for k in range(rounds):
        token, here, there = movers[(k // 2) % len(movers)]
        steps.append((token, there if k % 2 == 0 else here))
    return _steps(h, scene, sub, steps, view)


def _steps(h: CoreHarness, scene: BenchScene, sub: int,
           steps: Sequence[tuple[str, tuple[float, float]]], view: dict[Key, Any]) -> list[float]:
    """Each (token, place) a move; the subscriber's deltas applied to `view`; each move's
    time from the gm's frame to the subscriber's delta."""
    times = []
    for k, (token, place) in enumerate(steps):
        frame = pack(move_frame(scene, token, place, 1000 + k))
        h.core.prepare(scene.scene_id)  # the server's idle-time work, not timed
        gc.collect()
        t0 = time.perf_counter()
        outs = h.receive(h.gm, frame)
        times.append(time.perf_counter() - t0)
        _one(outs, h.gm, "ack")
        delta = _one(outs, sub, "annotations")
        for key in delta["removed"]:
            view.pop((key[0], key[1], key[2]), None)
        for a in delta["annotations"]:
            view[(a["attacker"], a["target"], a["mode"])] = a
    return times


def _baseline(moves: int) -> Result:
    """Unfiltered, 100 tokens / 1,000 walls: the full matrix and a move."""
    scene = generate(100, 1000, 1)
    h = CoreHarness(scene)
    sub = h.connect()
    t0 = time.perf_counter()
    _, full = h.subscribe(sub)
    first = time.perf_counter() - t0
    view = {(a["attacker"], a["target"], a["mode"]): a for a in full["annotations"]}
    times = _moves(h, scene, sub, scene.movers[:5], moves, view)
    return {"scene": "100 tokens / 1,000 walls, unfiltered", "first_s": round(first, 3),
            "annotations": len(full["annotations"]), "move": _ms(times)}


def measure(tokens: int, walls: int, moves: int, ruleset: str = "dnd35") -> Result:
    scene = generate(tokens, walls, 1)
    scene = replace(scene, message={**scene.message, "ruleset": ruleset})
    h = CoreHarness(scene)
    sid = scene.scene_id
    sub = h.connect()
    out: Result = {"scene": f"{tokens} tokens / {walls} walls", "ruleset": ruleset}
    t0 = time.perf_counter()
    refused = unpack(_sends_to(h.receive(sub, pack({"type": "subscribe", "scene": sid,
                                                     "id": 1})), sub)[0])
    out["unfiltered"] = {"code": refused.get("code"), "ms": round(1000 * (time.perf_counter()
                                                                         - t0), 2),
                         "message": refused.get("message")}
    # The attacker: the mover that sees the most (a move then changes what it sees).
    attacker = scene.movers[len(scene.movers) // 2]
    t0 = time.perf_counter()
    reply = unpack(_sends_to(h.receive(sub, pack({"type": "subscribe", "scene": sid, "id": 2,
                                                   "attackers": [attacker[0]]})), sub)[0])
    out["first_s"] = round(time.perf_counter() - t0, 3)
    if reply.get("type") != "annotations":
        raise RuntimeError(f"the filtered subscription was refused: {reply}")
    out["annotations"] = len(reply["annotations"])
    out["frame_bytes"] = len(pack(reply))
    view = {(a["attacker"], a["target"], a["mode"]): a for a in reply["annotations"]}
    others = [m for m in scene.movers if m[0] != attacker[0]][:8]
    times = _moves(h, scene, sub, others, moves, view)
    out["move"] = _ms(times)
    own = _moves(h, scene, sub, [attacker], 6, view)
    out["attacker_move"] = _ms(own)
    # The attacker walking on to new squares (not back to where it was: nothing it saw
    # from there is reused), WALK_STEPS of them (six gave medians a millisecond apart from
    # one run to the next), then back to its first place.
    places = walk(scene, attacker[0], WALK_STEPS)
    walked = _steps(h, scene, sub, [(attacker[0], p) for p in places], view)
    out["attacker_walk"] = _ms(walked)
    _steps(h, scene, sub, [(attacker[0], attacker[1])], view)
    cached = h.core.tables.cache[(sid, False, False)]
    out["table_held"] = len(cached.table)
    # Equality: what the subscriber holds is a fresh evaluation of the attacker's pairs.
    s = h.core.scenes[sid]
    ids = [c.id for c in s.geometry.creatures]
    fresh = {a.key(): msgspec.to_builtins(annotation_out(a)) for a in s.ruleset.annotate(
        s.geometry, s.options, pairs=[(attacker[0], t) for t in ids if t != attacker[0]])}
    out["equal"] = view == fresh
    return out


def measure_hex(tokens: int, walls: int, moves: int, ruleset: str, kind: GridKind) -> Result:
    """The same scene laid on a hex grid (`bench.hexscenes.on_hex`), one attacker followed,
    through the steps a filtered table takes (not the Core: scenes come to it as Foundry
    documents, which the hex layout does not make): the attacker's pairs, then a move of
    another token (each one hex, `bench.hexbench.moved`): the pairs
    `geometry.incremental.affected` names among those followed, widened by the ruleset for
    them only, evaluated again. The table so kept is compared with a fresh evaluation."""
    base = generate(tokens, walls, 1).geom
    base = replace(base, creatures=tuple(replace(c, cover_floor=None)
                                         for c in base.creatures))
    geom = on_hex(base, kind, 1)
    ids = [c.id for c in geom.creatures]
    rules = REGISTRY.get(ruleset)
    opts = rules.Options()
    x = ids[len(ids) // 2]
    need = {(x, t) for t in ids if t != x}
    t0 = time.perf_counter()
    held = {a.key(): a for a in rules.annotate(geom, opts, pairs=sorted(need))}
    out: Result = {"scene": f"{tokens} tokens / {walls} walls on {kind.name}",
                   "ruleset": ruleset, "first_s": round(time.perf_counter() - t0, 3)}
    times = []
    current = geom
    movers = [k for k in range(0, len(ids), max(1, len(ids) // 16)) if ids[k] != x]
    for m in range(moves):
        after = moved(current, movers[m % len(movers)])
        gc.collect()
        t0 = time.perf_counter()
        found = affected(current, after, rules.sight_points(), None, only=set(need))
        pairs = need if found is None else found.all() & need
        pairs = rules.widen(current, after, opts, pairs, need) & need
        fresh = rules.annotate(after, opts, pairs=sorted(pairs)) if pairs else []
        times.append(time.perf_counter() - t0)
        held.update((a.key(), a) for a in fresh)
        current = after
    out["move"] = _ms(times)
    out["equal"] = held == {a.key(): a for a in rules.annotate(current, opts,
                                                               pairs=sorted(need))}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1000)
    ap.add_argument("--walls", type=int, default=20000)
    ap.add_argument("--moves", type=int, default=30)
    ap.add_argument("--rulesets", nargs="+", default=["dnd35"])
    ap.add_argument("--hex", nargs="*", default=[], metavar="KIND",
                    help="hex layouts (2-5) to measure the hex rulesets on too "
                         "(degrees, pf2, realms among --rulesets)")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    base = _baseline(args.moves)
    result: Result = {"baseline": base, "rulesets": {}}
    for name in args.rulesets:
        filtered = measure(args.tokens, args.walls, args.moves, name)
        result["rulesets"][name] = {"filtered": filtered, "ratios": {
            # Against the unfiltered 100 x 1,000 dnd35 scene measured in the same run.
            "first_vs_baseline_first": round(filtered["first_s"] / base["first_s"], 2),
            "move_vs_baseline_move": round(filtered["move"]["median_ms"]
                                           / base["move"]["median_ms"], 2),
            "attacker_move_vs_baseline_move": round(filtered["attacker_move"]["median_ms"]
                                                    / base["move"]["median_ms"], 2),
            "attacker_walk_vs_baseline_move": round(filtered["attacker_walk"]["median_ms"]
                                                    / base["move"]["median_ms"], 2)}}
    for kind in (GridKind(int(k)) for k in args.hex):
        for name in (n for n in args.rulesets if n in HEX_RULESETS):
            got = measure_hex(args.tokens, args.walls, args.moves, name, kind)
            result["rulesets"][f"{name} {kind.name}"] = {"filtered": got, "ratios": {
                "move_vs_baseline_move": round(got["move"]["median_ms"]
                                               / base["move"]["median_ms"], 2)}}
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)
    # Every table kept equals a fresh evaluation, and every square scene's unfiltered
    # subscription is refused (the hex ones are not subscribed through the Core).
    ok = all(r["filtered"]["equal"] and r["filtered"].get("unfiltered", {}).get(
        "code", "too_large") == "too_large" for r in result["rulesets"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
