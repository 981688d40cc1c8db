"""Covercast benchmarks: `.venv/bin/python -m bench [--quick] [options]`.

Figures (each the median of repeated runs, the run count shown; ratios to the baselines are
measured in the same run, on the same scenes):

- full matrix: Dnd35 `evaluate` of every ordered pair in all three modes, for 50/100/200
  tokens x 100/1,000/5,000 walls, against the naive baseline (sampled, extrapolated) and
  the brute-force numpy baseline (bench/baselines.py);
- equality: on every scene, Dnd35 through the fast engine equals Dnd35 through
  `CornerEngine.reference` (all targets when affordable, otherwise a sample of targets with
  every attacker); any difference makes the run fail (exit status 1);
- one move through the sans-I/O Core (100 tokens, 1,000 walls, one subscriber);
- end to end over WebSockets on 127.0.0.1 (50 subscribers, one mover): latency and
  sustained moves per second; five warm-up moves, then the figures of the median of three
  runs on fresh servers, with the machine's steadiness before each; this section runs
  first, on a rested machine;
- peak memory (tracemalloc) of loading the 100 x 1,000 scene and computing its matrix;
- permessage-deflate on vs off: server CPU per broadcast to 50 clients;
- centre-line rulesets: degrees and pf2 full matrix next to dnd35's on the same scenes
  (plain and dressed with the third dimension, terrain, water and mounts), against their
  pair-by-pair `reference` (the "before" figure, and an equality check of the whole
  matrix), and one move through the Core in each of the three rulesets (bench/degrees.py);
- parity: every ruleset on every grid (pf1, degrees, pf2, realms on squares; degrees, pf2,
  realms on a row and a column hex layout) next to dnd35 on squares, full matrix and one
  move, on 100x1,000 and 200x5,000, plain and dressed, as ratios to dnd35 measured in the
  same worker, each checked against its pair-by-pair `reference` (bench/parity.py);
- issue 15's other targets, so that one run shows all of them: one move to 50 subscribers
  for dnd35, pf2 and realms, verbose and compact (`bench.live e2e-matrix`); scenes at the
  documented limits, 1,000 tokens and 20,000 walls, one attacker followed, on every
  ruleset and on two hex layouts (`bench.filters`); bytes per annotation, verbose and
  compact (`bench.live sizes`).

Each full-matrix size and each Core figure runs in a worker process under a memory limit
(--mem-limit-gb) and a timeout, so a blow-up is reported instead of taking the machine
down. Results are printed and written to bench/RESULTS.md (not in --quick mode unless --out
is given). Exit status: 0 fine, 1 a result differs from the reference, 2 a measurement
failed (error, memory limit, timeout).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import live
from bench.scenes import generate
from server import memory

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "RESULTS.md"
#: The heading of the results file's last section, measured by `python -m bench.hexbench`
#: and written by hand; a run of this command keeps it.
KEPT_SECTION = "## Hex grids"
Result = dict[str, Any]

FULL_CONFIGS = [(t, w) for t in (50, 100, 200) for w in (100, 1000, 5000)]
QUICK_CONFIGS = [(50, 100), (50, 1000)]
#: Centre-line rulesets: (tokens, walls, dressed); the reference runs up to REFERENCE_MAX
#: ordered pairs x walls (above, the pair-by-pair computation takes minutes).
DEGREES_CONFIGS = [(50, 300, False), (100, 1000, False), (100, 1000, True),
                   (200, 5000, False)]
QUICK_DEGREES_CONFIGS = [(50, 300, False), (50, 300, True)]
REFERENCE_MAX = 2e7
MOVE_RULESETS = ("dnd35", "degrees", "pf2")
#: Every ruleset on every grid next to dnd35: (tokens, walls, dressed).
PARITY_CONFIGS = [(100, 1000, False), (100, 1000, True), (200, 5000, False),
                  (200, 5000, True)]
QUICK_PARITY_CONFIGS = [(40, 200, False)]
#: Above this tokens x walls, one run per figure and a smaller equality sample, and this
#: many times the worker's timeout.
PARITY_BIG = 200_000
PARITY_BIG_TIMEOUT_FACTOR = 3
#: Within this factor of dnd35 on squares (issue 15, item 1).
TARGET_PARITY = 1.5

#: Issue 15 item 2: one move to 50 subscribers, p99 < 10 ms, for these rulesets.
E2E_RULESETS = ("dnd35", "pf2", "realms")
#: Issue 15 item 4: scenes at the documented limits (`welcome.limits`), one attacker
#: followed; every ruleset, and the hex rulesets on a row and a column hex layout too.
LIMITS_TOKENS, LIMITS_WALLS = 1000, 20000
LIMITS_RULESETS = ("dnd35", "pf1", "degrees", "pf2", "realms", "dnd5e")
LIMITS_HEX = (2, 5)
TARGET_FIRST_S = 1.0
TARGET_LIMITS_MOVE_S = 0.020
#: Issue 15 item 5: the compact form of a full set at least this many times smaller.
SIZES_RULESETS = ("dnd35", "pf2", "realms")
TARGET_COMPACT = 4.0
#: Every section, in the order `run_plan` takes them.
SECTIONS = ("e2e", "e2e-rulesets", "matrix", "move", "memory", "degrees", "parity",
            "limits", "sizes", "compression")

TARGET_NAIVE = 100.0
TARGET_BRUTE = 2.0
TARGET_P99_S = 0.010
TARGET_BIG_S = 0.5


@dataclass
class Plan:
    quick: bool
    sections: set[str]
    configs: list[tuple[int, int]]
    degrees_configs: list[tuple[int, int, bool]]
    parity_configs: list[tuple[int, int, bool]]
    seed: int
    live_tokens: int
    live_walls: int
    clients: int
    core_moves: int
    e2e_moves: int
    #: End-to-end runs, each on a fresh server; the figures are the median run's.
    e2e_runs: int
    seconds: float
    mem_limit_gb: float
    timeout: float
    in_thread: bool
    breakdown: bool
    out: Path | None
    command: str
    results: Result = field(default_factory=dict)


# -- running workers ---------------------------------------------------------------------------

def _worker(plan: Plan, module: str, args: Sequence[str], label: str,
            timeout: float | None = None) -> Result:
    """Run `python -m module args --out tmp` under the memory limit, for at most `timeout`
    seconds (default the plan's); its JSON, or an error."""
    timeout = plan.timeout if timeout is None else timeout
    with tempfile.TemporaryDirectory(prefix="covercast-bench-") as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", module, *args, "--out", str(out)]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                                  timeout=timeout,
                                  preexec_fn=live._limit_memory(plan.mem_limit_gb))
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
        elapsed = time.perf_counter() - t0
        if proc.returncode > 0 and out.exists():
            # The worker wrote its figures, then judged them wrong itself (bench.filters: a
            # kept table unequal to a fresh one, an unfiltered subscription not refused):
            # they are kept, so that the report shows what is wrong.
            kept: Result = json.loads(out.read_text())
            kept.update(worker_s=elapsed, worker_exit=proc.returncode)
            return kept
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or "").strip().splitlines()[-3:]
            how = (f"killed by signal {-proc.returncode}" if proc.returncode < 0
                   else f"exit status {proc.returncode}")
            return {"error": f"{label}: worker {how}: " + " | ".join(tail)}
        result: Result = json.loads(out.read_text())
        result["worker_s"] = elapsed
        return result


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _load(plan: Plan, label: str) -> None:
    """Note the machine's 1-minute load average as a part starts (the machine may be
    shared: figures taken under load are slower than the code)."""
    if hasattr(os, "getloadavg"):
        plan.results.setdefault("load", []).append((label, os.getloadavg()[0]))


def run_plan(plan: Plan) -> None:
    r = plan.results
    _load(plan, "start")
    # The latency sections first, on a rested machine (e2e-rulesets, the verdict, before
    # e2e's throughput phase): on this VM two minutes of both cores
    # at full load (what the matrices below take) slow the same pure-Python work by about
    # 20% (`live.steadiness` p50 1.83-1.97 ms rested, 2.16-2.46 ms right after), which a
    # latency percentile would carry.
    live_args = ["--tokens", str(plan.live_tokens), "--walls", str(plan.live_walls),
                 "--seed", str(plan.seed)]
    if "e2e-rulesets" in plan.sections:
        _load(plan, "e2e-rulesets")
        _say(f"[bench] end to end per ruleset ({', '.join(E2E_RULESETS)}), verbose and "
             f"compact, {plan.e2e_runs} runs each ...")
        r["e2e_rulesets"] = _worker(plan, "bench.live", [
            "e2e-matrix", *live_args, "--clients", str(plan.clients), "--moves",
            str(plan.e2e_moves), "--runs", str(plan.e2e_runs), "--rulesets", *E2E_RULESETS],
            "e2e-rulesets")
        r["e2e_rulesets"].setdefault("moves", plan.e2e_moves)
    if "e2e" in plan.sections:
        # One run of dnd35's, with the throughput phase after its moves: where a move's
        # time goes (the server's CPU, the clients', the ack) and the moves per second
        # sustained. Its latency is judged in e2e-rulesets, with the other rulesets' (the
        # run here is not a second verdict: two in one report disagreed, 9.5 and 10.8 ms).
        _load(plan, "e2e")
        _say(f"[bench] end to end, one run: {plan.clients} subscribers, {plan.e2e_moves} "
             f"moves, {plan.seconds:g} s of throughput ...")
        scene = generate(plan.live_tokens, plan.live_walls, plan.seed)
        try:
            r["e2e"] = live.run_e2e(scene, plan.clients, plan.e2e_moves, plan.seconds,
                                    plan.in_thread, plan.mem_limit_gb)
        except Exception as exc:
            r["e2e"] = {"error": f"{type(exc).__name__}: {exc}"}
    if "matrix" in plan.sections:
        r["matrix"] = []
        for tokens, walls in plan.configs:
            _say(f"[bench] full matrix {tokens} tokens x {walls} walls ...")
            _load(plan, f"{tokens}x{walls}")
            args = ["--tokens", str(tokens), "--walls", str(walls), "--seed", str(plan.seed)]
            if plan.quick:
                args += ["--max-runs", "3", "--naive-budget", "1"]
            if plan.breakdown:
                args.append("--breakdown")
            res = _worker(plan, "bench.matrix", args, f"{tokens}x{walls}")
            res.setdefault("tokens", tokens)
            res.setdefault("walls", walls)
            r["matrix"].append(res)
            _say("        " + _matrix_line(res))
    if "move" in plan.sections:
        _load(plan, "move")
        _say(f"[bench] one move through the Core ({plan.live_tokens} x {plan.live_walls}) ...")
        r["move"] = _worker(plan, "bench.live", ["move", *live_args, "--moves",
                                                 str(plan.core_moves)], "move")
    if "memory" in plan.sections:
        _load(plan, "memory")
        _say("[bench] peak memory (tracemalloc) ...")
        r["memory"] = _worker(plan, "bench.live", ["memory", *live_args], "memory")
    if "degrees" in plan.sections:
        r["degrees"] = {"matrix": [], "move": {}}
        for tokens, walls, dressed in plan.degrees_configs:
            what = f"{tokens} tokens x {walls} walls" + (", dressed" if dressed else "")
            _say(f"[bench] degrees and pf2 next to dnd35, {what} ...")
            args = ["--tokens", str(tokens), "--walls", str(walls), "--seed", str(plan.seed)]
            if dressed:
                args.append("--dressed")
            if plan.quick:
                args += ["--max-runs", "3"]
            if tokens * (tokens - 1) * walls > REFERENCE_MAX:
                args.append("--no-reference")
            res = _worker(plan, "bench.degrees", args, what)
            res.update(tokens=tokens, walls=walls, dressed=dressed)
            r["degrees"]["matrix"].append(res)
        for name in MOVE_RULESETS:
            _say(f"[bench] one move through the Core, {name} ...")
            r["degrees"]["move"][name] = _worker(
                plan, "bench.live", ["move", *live_args, "--moves", str(plan.core_moves),
                                     "--ruleset", name], f"move {name}")
    if "parity" in plan.sections:
        r["parity"] = []
        for tokens, walls, dressed in plan.parity_configs:
            what = f"{tokens} tokens x {walls} walls" + (", dressed" if dressed else "")
            _say(f"[bench] every ruleset on every grid next to dnd35, {what} ...")
            _load(plan, f"parity {tokens}x{walls}" + (" dressed" if dressed else ""))
            args = ["--tokens", str(tokens), "--walls", str(walls), "--seed", str(plan.seed)]
            timeout = plan.timeout
            if dressed:
                args.append("--dressed")
            if plan.quick:
                args += ["--max-runs", "1", "--kinds", "2"]
            elif tokens * walls > PARITY_BIG:
                # One run each and a smaller equality sample: a cold realms matrix there
                # takes tens of seconds, and the hex references of every pair of every
                # move most of an hour (a sample of each move's pairs instead).
                args += ["--max-runs", "1", "--sample-targets", "3", "--move-sample", "50"]
                # Eight rulesets and layouts, each with its references: the 200 x 5,000
                # dressed scene took more than 900 s (2026-12-06).
                timeout = PARITY_BIG_TIMEOUT_FACTOR * plan.timeout
            res = _worker(plan, "bench.parity", args, what, timeout)
            res.update(tokens=tokens, walls=walls, dressed=dressed)
            r["parity"].append(res)
    if "limits" in plan.sections:
        _load(plan, "limits")
        # Quick: a scene just past the limit of pairs (its unfiltered subscription is
        # refused all the same), two rulesets, one hex layout.
        tokens, walls, moves = (400, 2000, 6) if plan.quick else (LIMITS_TOKENS,
                                                                  LIMITS_WALLS, 30)
        rulesets = ("dnd35", "pf2") if plan.quick else LIMITS_RULESETS
        kinds = LIMITS_HEX[:1] if plan.quick else LIMITS_HEX
        _say(f"[bench] scenes at the limits: {tokens} tokens x {walls} walls, one attacker "
             f"followed, {', '.join(rulesets)} ...")
        r["limits"] = _worker(plan, "bench.filters", [
            "--tokens", str(tokens), "--walls", str(walls), "--moves", str(moves),
            "--rulesets", *rulesets, "--hex", *map(str, kinds)], "limits")
        r["limits"].update(tokens=tokens, walls=walls)
    if "sizes" in plan.sections:
        _load(plan, "sizes")
        _say(f"[bench] bytes per annotation, verbose and compact ({', '.join(SIZES_RULESETS)})"
             " ...")
        r["sizes"] = _worker(plan, "bench.live", ["sizes", *live_args, "--rulesets",
                                                  *SIZES_RULESETS], "sizes")
    if "compression" in plan.sections:
        _load(plan, "compression")
        _say(f"[bench] permessage-deflate on/off, {plan.clients} clients ...")
        r["compression"] = _worker(plan, "bench.live", ["compression", *live_args,
                                                        "--clients", str(plan.clients)],
                                   "compression")


# -- formatting ----------------------------------------------------------------------------------

def _s(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    if v >= 100:
        return f"{v:.0f} s"
    if v >= 1:
        return f"{v:.2f} s"
    if v >= 0.001:
        return f"{v * 1e3:.1f} ms"
    return f"{v * 1e6:.0f} us"


def _steadiness(e2e: dict[str, Any]) -> list[str]:
    """The machine's steadiness measured before the end-to-end run, as a report line."""
    m = e2e.get("steadiness")
    if not m:
        return []
    return [f"- the machine's steadiness just before the run (bench/live.py `steadiness`: "
            f"one fixed ~2 ms pure-Python workload timed {m['samples']} times), "
            f"p50 / p99: {_ms(m['p50_s'])} / {_ms(m['p99_s'])} "
            f"({m['p99_s'] / m['p50_s']:.2f}x)"]


def _warmup(e2e: dict[str, Any]) -> str:
    """The warm-up moves, sent before the measured ones and kept out of their percentiles."""
    warm = e2e.get("warmup_delivered_s") or []
    if not warm:
        return ""
    return (f" (after {len(warm)} warm-up moves, not in the percentiles: "
            f"{', '.join(_ms(w) for w in warm)} until all have it)")


def _ms(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v * 1e3:.2f} ms"


def _ratio(base: float | None, engine: float | None) -> float | None:
    if base is None or engine is None or engine <= 0:
        return None
    return base / engine


def _x(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:.0f}x" if v >= 10 else f"{v:.2f}x"


def _engine_s(m: Result) -> float | None:
    e = m.get("engine", {})
    v = e.get("median_s")
    return float(v) if v is not None else None


def _ranged_s(m: Result) -> float | None:
    v = m.get("engine_ranged", {}).get("median_s")
    return float(v) if v is not None else None


def _brute_s(m: Result) -> float | None:
    v = m.get("brute", {}).get("median_s")
    return float(v) if v is not None else None


def _naive_s(m: Result) -> float | None:
    v = m.get("naive", {}).get("extrapolated_s")
    return float(v) if v is not None else None


def _runs(d: Result) -> str:
    times = d.get("times")
    return f" ({len(times)})" if times else ""


def _equality_text(m: Result) -> str:
    eq = m.get("equality")
    if not eq:
        return "n/a"
    if "error" in eq:
        return "ERROR"
    scope = "all targets" if eq.get("all_targets") else f"{eq.get('targets')} targets"
    if eq.get("mismatches"):
        return f"MISMATCH {eq['mismatches']}/{eq['compared']}"
    sub = eq.get("subset_mismatches")
    extra = f", subset != full: {sub}" if sub else ""
    return f"equal {eq['compared']} ({scope}){extra}"


def _matrix_line(m: Result) -> str:
    if "error" in m and "engine" not in m:
        return f"{m['tokens']}x{m['walls']}: {m['error']}"
    e = m.get("engine", {})
    eng = _s(_engine_s(m)) + _runs(e) if "median_s" in e else "FAILED"
    return (f"engine {eng}, brute {_s(_brute_s(m))}{_runs(m.get('brute', {}))}, "
            f"naive ~{_s(_naive_s(m))} ({m.get('naive', {}).get('sampled_pairs')} pairs), "
            f"{_equality_text(m)}")


def machine() -> Result:
    from importlib.metadata import version

    import msgpack
    import msgspec
    import numpy
    import shapely

    cpu = "unknown"
    mem = "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    commit = "unknown"
    dirty = ""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        diff = subprocess.run(["git", "diff", "HEAD", "--", ".", ":(exclude)bench",
                               ":(exclude)tests/test_bench_scenes.py"], cwd=REPO,
                              capture_output=True, timeout=30).stdout
        if diff.strip():
            dirty = hashlib.sha1(diff).hexdigest()[:10]
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "cpu": cpu, "memory": mem, "platform": platform.platform(),
        "python": platform.python_version(), "numpy": numpy.__version__,
        "shapely": shapely.__version__, "websockets": version("websockets"),
        "msgspec": msgspec.__version__, "msgpack": ".".join(map(str, msgpack.version)),
        "commit": commit + (f" + uncommitted changes (diff sha1 {dirty})" if dirty else ""),
    }


@dataclass(frozen=True)
class Target:
    name: str
    verdict: str  # "met", "not met", "not measured"
    detail: str


def targets(plan: Plan) -> list[Target]:
    r = plan.results
    out: list[Target] = []
    matrix: list[Result] = r.get("matrix", [])
    if matrix:
        for label, base, goal in (("naive", _naive_s, TARGET_NAIVE),
                                  ("brute numpy", _brute_s, TARGET_BRUTE)):
            ratios = [(m, _ratio(base(m), _engine_s(m))) for m in matrix]
            worst = min(ratios, key=lambda p: -1.0 if p[1] is None else p[1])
            failed = [m for m, v in ratios if v is None or v < goal]
            detail = ", ".join(f"{m['tokens']}x{m['walls']}: {_x(v)}" for m, v in ratios)
            verdict = "not met" if failed else "met"
            if plan.quick:
                verdict += " (quick sizes only)"
            out.append(Target(f"full matrix >= {goal:g}x faster than {label}", verdict,
                              f"worst {worst[0]['tokens']}x{worst[0]['walls']}; {detail}"))
            # The same target on the baselines' own work (ranged rows only), beside it: the
            # engine's all-mode time above carries melee, reach and flanking they skip.
            like = [(m, _ratio(base(m), _ranged_s(m))) for m in matrix]
            if any(v is not None for _, v in like):
                short = [m for m, v in like if v is None or v < goal]
                out.append(Target(
                    f"... like for like: ranged rows only, the {label} baseline's own work",
                    "not met" if short else "met",
                    ", ".join(f"{m['tokens']}x{m['walls']}: {_x(v)}" for m, v in like)))
    else:
        out.append(Target("full matrix >= 100x faster than naive, >= 2x than brute numpy",
                          "not measured", ""))
    deg = r.get("degrees", {}).get("matrix", [])
    if deg:
        slower = []
        for m in deg:
            base = m.get("dnd35", {}).get("median_s")
            for name in ("degrees", "pf2"):
                t = m.get(name, {}).get("median_s")
                if t is None or base is None or t > base:
                    slower.append(f"{name} {_degrees_scene(m)}")
        detail = "; ".join(
            f"{_degrees_scene(m)}: dnd35 {_s(m.get('dnd35', {}).get('median_s'))}, degrees "
            f"{_s(m.get('degrees', {}).get('median_s'))}, pf2 "
            f"{_s(m.get('pf2', {}).get('median_s'))}" for m in deg)
        out.append(Target("degrees and pf2 full matrix at least as fast as dnd35's on the same "
                          "scene (our own yardstick, not an issue target)",
                          "not met" if slower else "met",
                          (f"slower: {', '.join(slower)}; " if slower else "") + detail))
    out += parity_targets(r.get("parity", []))
    out += e2e_ruleset_targets(r.get("e2e_rulesets"), plan)
    out += limits_targets(r.get("limits"))
    out += sizes_targets(r.get("sizes"))
    big = [m for m in matrix if (m["tokens"], m["walls"]) == (200, 5000)]
    if big:
        t = _engine_s(big[0])
        err = big[0].get("engine", {}).get("error") or big[0].get("error")
        out.append(Target("200 tokens (all 39,800 ordered pairs) with 5,000 walls < 0.5 s",
                          "met" if t is not None and t < TARGET_BIG_S else "not met",
                          _s(t) if t is not None else f"failed: {err}"))
    else:
        out.append(Target("200 tokens with 5,000 walls < 0.5 s", "not measured", ""))
    return out


def e2e_ruleset_targets(res: Result | None, plan: Plan) -> list[Target]:
    """Issue 15 item 2, per ruleset: judged on the verbose form (every client's default),
    the compact form beside it."""
    name = (f"one move, 100 tokens / 1,000 walls, to 50 subscribers: p99 < "
            f"{TARGET_P99_S * 1e3:g} ms for {', '.join(E2E_RULESETS)}, median of 3 runs "
            "(issue 15 item 2; the verbose form judged, the compact beside it)")
    if res is None:
        return [Target(name, "not measured", "section e2e-rulesets not run")]
    if "results" not in res:
        return [Target(name, "not measured", res.get("error", ""))]
    got = res["results"]
    sized = (res.get("tokens"), res.get("walls"), res.get("clients")) == (100, 1000, 50)
    over = [k for k, v in got.items() if k.endswith("verbose")
            and v.get("all_delivered_p99_s", math.inf) >= TARGET_P99_S]
    verdict = ("not met" if over else "met") if sized and not plan.quick else \
        "not measured (quick sizes)"
    detail = ", ".join(f"{k} {_ms(v.get('all_delivered_p99_s'))}" for k, v in got.items())
    return [Target(name, verdict, detail + (f"; over: {', '.join(over)}" if over else ""))]


def limits_targets(res: Result | None) -> list[Target]:
    """Issue 15 item 4: every ruleset (and grid) at the limits, one attacker followed."""
    name = (f"{LIMITS_TOKENS:,} tokens / {LIMITS_WALLS:,} walls, one attacker followed: "
            f"first result < {TARGET_FIRST_S:g} s, a move < {TARGET_LIMITS_MOVE_S * 1e3:g} ms "
            "(another token's, and the attacker walking), the unfiltered subscription "
            "refused with too_large (issue 15 item 4)")
    if res is None:
        return []
    if "rulesets" not in res:
        return [Target(name, "not measured", res.get("error", ""))]
    misses: list[str] = []
    parts: list[str] = []
    for label, row in res["rulesets"].items():
        f = row["filtered"]
        walk = f.get("attacker_walk", {}).get("median_ms")
        parts.append(f"{label} first {_s(f['first_s'])}, move {f['move']['median_ms']:.1f} ms"
                     + ("" if walk is None else f", walking {walk:.1f} ms"))
        if f["first_s"] >= TARGET_FIRST_S:
            misses.append(f"{label} first result {_s(f['first_s'])}")
        if f["move"]["median_ms"] >= TARGET_LIMITS_MOVE_S * 1e3:
            misses.append(f"{label} move {f['move']['median_ms']:.1f} ms")
        if walk is not None and walk >= TARGET_LIMITS_MOVE_S * 1e3:
            misses.append(f"{label} walking {walk:.1f} ms")
        code = f.get("unfiltered", {}).get("code", "too_large")
        if code != "too_large":
            misses.append(f"{label} unfiltered subscription: {code}")
    sized = (res.get("tokens"), res.get("walls")) == (LIMITS_TOKENS, LIMITS_WALLS)
    verdict = ("not met" if misses else "met") if sized else "not measured (quick sizes)"
    detail = "; ".join(parts) + (f". Over: {', '.join(misses)}" if misses else "")
    return [Target(name, verdict, detail)]


def sizes_targets(res: Result | None) -> list[Target]:
    """Issue 15 item 5: the compact full set against the verbose one, per encoding."""
    name = (f"annotations sent compactly: a full set at least {TARGET_COMPACT:g}x smaller "
            "than the verbose one (issue 15 item 5)")
    if res is None:
        return []
    if "rulesets" not in res:
        return [Target(name, "not measured", res.get("error", ""))]
    ratios = [(f"{ruleset} {enc}", d["forms"][f"verbose_{enc}"]["full_bytes"]
               / d["forms"][f"compact_{enc}"]["full_bytes"])
              for ruleset, d in res["rulesets"].items() for enc in ("msgpack", "json")]
    short = [k for k, v in ratios if v < TARGET_COMPACT]
    return [Target(name, "not met" if short else "met",
                   ", ".join(f"{k} {_x(v)}" for k, v in ratios))]


def problems(plan: Plan) -> tuple[list[str], list[str]]:
    """(wrong results, failed measurements)."""
    wrong: list[str] = []
    failed: list[str] = []
    for m in plan.results.get("matrix", []):
        name = f"{m['tokens']}x{m['walls']}"
        if "error" in m:
            failed.append(f"{name}: {m['error']}")
        for part in ("engine", "engine_ranged", "brute"):
            if "error" in m.get(part, {}):
                failed.append(f"{name} {part}: {m[part]['error']} (at {m[part].get('where')})")
        eq = m.get("equality", {})
        if "error" in eq:
            failed.append(f"{name} equality: {eq['error']} (at {eq.get('where')})")
        if eq.get("mismatches"):
            wrong.append(f"{name}: {eq['mismatches']} of {eq['compared']} annotations differ "
                         f"from the reference; e.g. {eq['examples'][:1]}")
        if eq.get("subset_mismatches"):
            wrong.append(f"{name}: {eq['subset_mismatches']} annotations of a subset "
                         "evaluation differ from the full matrix")
    move = plan.results.get("move")
    if move is not None:
        if "error" in move:
            failed.append(f"move: {move['error']}")
        elif not move.get("view_matches_fresh", True):
            wrong.append(f"move: after the moves, the subscriber's view differs from a fresh "
                         f"evaluation in {move['view_mismatches']} annotations, e.g. "
                         f"{move['view_examples'][:1]}")
    deg = plan.results.get("degrees", {})
    for m in deg.get("matrix", []):
        name = _degrees_scene(m)
        if "error" in m:
            failed.append(f"degrees {name}: {m['error']}")
        for part in ("dnd35", "degrees", "pf2", "degrees_reference", "pf2_reference"):
            res = m.get(part, {})
            if "error" in res:
                failed.append(f"{part} {name}: {res['error']} (at {res.get('where')})")
            if res.get("mismatches"):
                wrong.append(f"{part.split('_')[0]} {name}: {res['mismatches']} of "
                             f"{res['compared']} annotations differ from the reference; e.g. "
                             f"{res['examples'][:1]}")
    for name, move in deg.get("move", {}).items():
        if "error" in move:
            failed.append(f"move {name}: {move['error']}")
        elif not move.get("view_matches_fresh", True):
            wrong.append(f"move {name}: the subscriber's view differs from a fresh evaluation "
                         f"in {move['view_mismatches']} annotations")
    for m in plan.results.get("parity", []):
        name = _degrees_scene(m)
        if "error" in m:
            failed.append(f"parity {name}: {m['error']}")
        for layout, rows in m.get("layouts", {}).items():
            for ruleset, res in rows.items():
                if "error" in res:
                    failed.append(f"parity {name} {layout} {ruleset}: {res['error']} (at "
                                  f"{res.get('where')})")
                if res.get("mismatches"):
                    wrong.append(f"{ruleset} {layout} {name}: {res['mismatches']} of "
                                 f"{res['compared']} annotations differ from the reference; "
                                 f"e.g. {res['examples'][:1]}")
    for name in ("memory", "e2e", "compression", "e2e_rulesets", "limits", "sizes"):
        res = plan.results.get(name)
        if res is not None and "error" in res:
            failed.append(f"{name}: {res['error']}")
        if res is not None and "worker_exit" in res:
            failed.append(f"{name}: the worker's own checks failed (exit status "
                          f"{res['worker_exit']}); its figures are above")
    for label, row in plan.results.get("limits", {}).get("rulesets", {}).items():
        if not row["filtered"].get("equal", False):
            wrong.append(f"limits {label}: the table kept for the attacker differs from a "
                         "fresh evaluation of its pairs")
    for label, row in plan.results.get("e2e_rulesets", {}).get("results", {}).items():
        if "error" in row:
            failed.append(f"e2e {label}: {row['error']}")
    return wrong, failed


def report(plan: Plan, elapsed: float, info: Result) -> str:
    """The results as Markdown (printed and written to RESULTS.md)."""
    r = plan.results
    lines: list[str] = ["# Covercast benchmark results", ""]
    lines += [f"- date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
              f"- command: `{plan.command}`" + (" (quick run: small sizes, few runs)"
                                                if plan.quick else ""),
              f"- machine: {info['nproc']} CPUs ({info['cpu']}), {info['memory']} RAM, "
              f"{info['platform']}",
              f"- Python {info['python']}, numpy {info['numpy']}, shapely {info['shapely']}, "
              f"websockets {info['websockets']}, msgspec {info['msgspec']}, msgpack "
              f"{info['msgpack']}",
              f"- code: commit {info['commit']}",
              f"- scenes: bench/scenes.py, seed {plan.seed}; workers limited to "
              f"{plan.mem_limit_gb:g} GiB of address space, {plan.timeout:.0f} s each; "
              f"whole run {elapsed:.0f} s",
              "- allocator: every worker and the server run with the server's C allocator "
              "settings (server/memory.py: glibc mmap threshold 256 MiB, trim threshold "
              "1 GiB; " + ("turned off for this run by COVERCAST_TUNE_MALLOC=0"
                           if os.environ.get("COVERCAST_TUNE_MALLOC") == "0" else "in force")
              + ") and its garbage collector's young-generation threshold ("
              + (f"{os.environ['COVERCAST_GC_GEN0']} by COVERCAST_GC_GEN0"
                 if os.environ.get("COVERCAST_GC_GEN0") else f"{memory.GC_GEN0:,}")
              + " objects; Python's default is 700)"]
    if r.get("load"):
        lines += [f"- machine shared with other jobs: {info['nproc']}-CPU load average (1 min) "
                  "as each part started: " + ", ".join(f"{k} {v:.1f}" for k, v in r["load"])
                  + f"; at the end {os.getloadavg()[0]:.1f}"]
    lines += [""]

    lines += ["## Targets", "", "| target | verdict | detail |", "| --- | --- | --- |"]
    lines += [f"| {t.name} | **{t.verdict}** | {t.detail} |" for t in targets(plan)]
    wrong, failed = problems(plan)
    if wrong or failed:
        lines += ["", "## Problems", ""]
        lines += [f"- WRONG: {w}" for w in wrong]
        lines += [f"- FAILED: {f}" for f in failed]
    lines.append("")

    matrix: list[Result] = r.get("matrix", [])
    if matrix:
        lines += [
            "## Full matrix", "",
            "Dnd35 `evaluate`: every ordered pair, melee + reach + ranged, creatures as soft "
            "cover, flanking. Time is the median of the runs in parentheses (5 when a run is "
            "under 2 s, 3 under 10 s, else 1). Baselines compute the *ranged* degree only "
            "(bench/baselines.py); ratio = baseline time / engine time. Naive: mean time per "
            "pair over the sampled pairs x all ordered pairs (extrapolated). Agreement: share "
            "of pairs where the baseline's ranged degree equals the engine's.", "",
            "'Engine, ranged only' is the same `evaluate` asked for the ranged mode alone: "
            "the baselines' own work, for a like-for-like ratio.", "",
            "| tokens | walls | ordered pairs | engine | brute numpy | engine vs brute | "
            "naive (extrapolated) | engine vs naive | engine, ranged only | vs brute / naive "
            "| baselines agree | equality vs reference |",
            "| ---: | ---: | ---: | --- | --- | ---: | --- | ---: | --- | ---: | --- | --- |"]
        for m in matrix:
            e, b, nv = m.get("engine", {}), m.get("brute", {}), m.get("naive", {})
            eng = (_s(e["median_s"]) + _runs(e)) if "median_s" in e else \
                f"FAILED: {e.get('error', m.get('error', '?'))}"
            brute = (_s(b["median_s"]) + _runs(b)) if "median_s" in b else \
                f"FAILED: {b.get('error', m.get('error', '?'))}"
            er = m.get("engine_ranged", {})
            ranged = (_s(er["median_s"]) + _runs(er)) if "median_s" in er else \
                f"FAILED: {er.get('error', 'not run')}"
            naive = (f"{_s(nv['extrapolated_s'])} ({nv['sampled_pairs']} pairs, "
                     f"{_ms(nv['per_pair_s'])}/pair)") if nv else "n/a"
            agree = []
            if b.get("agreement") is not None:
                agree.append(f"brute {b['agreement']:.2%}")
            if nv.get("agreement") is not None:
                agree.append(f"naive {nv['agreement']:.2%} (vs {nv['agreement_with']})")
            lines.append(
                f"| {m['tokens']} | {m['walls']} | {m.get('pairs', '')} | {eng} | {brute} | "
                f"{_x(_ratio(_brute_s(m), _engine_s(m)))} | {naive} | "
                f"{_x(_ratio(_naive_s(m), _engine_s(m)))} | {ranged} | "
                f"{_x(_ratio(_brute_s(m), _ranged_s(m)))} / "
                f"{_x(_ratio(_naive_s(m), _ranged_s(m)))} | {', '.join(agree) or 'n/a'} | "
                f"{_equality_text(m)} |")
        lines += ["", "Equality: Dnd35 through `CornerEngine.evaluate` against Dnd35 through "
                  "`CornerEngine.reference` (the same rows), every attacker against all "
                  "targets or a sample of targets including every creature size, in batches; "
                  "'subset != full' counts annotations where a subset evaluation disagreed with "
                  "the full matrix.", ""]
        if any("breakdown" in m for m in matrix):
            lines += ["Where the engine's time goes (one run of `CornerEngine.evaluate` on the "
                      "matrix rows, split by path):", "",
                      "| tokens | walls | single-square rows | rows with a big creature |",
                      "| ---: | ---: | --- | --- |"]
            for m in matrix:
                bd = m.get("breakdown")
                if not bd:
                    continue
                cells = []
                for part in ("single_rows", "big_rows"):
                    p = bd[part]
                    cells.append(f"{p['rows']} rows: " + (
                        _s(p["seconds"]) if "error" not in p
                        else f"FAILED after {_s(p['seconds'])}: {p['error']}"))
                lines.append(f"| {m['tokens']} | {m['walls']} | {cells[0]} | {cells[1]} |")
            lines.append("")

    move = r.get("move")
    if move:
        lines += ["## One move through the Core (sans-I/O)", ""]
        if "error" in move:
            lines += [f"FAILED: {move['error']}", ""]
        else:
            lines += [
                f"{move['tokens']} tokens, {move['walls']} walls, one subscriber (all modes). "
                f"Time of `core.receive(gm, token.update)` plus resolving its Notify into the "
                f"subscriber's delta (`core.drain`), moving token {move['mover']} one square "
                f"right and back (chosen as the movable token that sees the most); before "
                f"each move, untimed, the Core's idle-time work (`core.prepare`), as the "
                f"server does after each change's fan-out.", "",
                f"- median of {move['moves']} moves: **{_ms(move['median_s'])}** (min "
                f"{_ms(min(move['times']))}, max {_ms(max(move['times']))}); CPU time of "
                f"the Core's thread, median: {_ms(move.get('cpu_median_s'))} (the wall time "
                f"above includes waiting for a core on a shared machine)",
                f"- annotations changed per move: median {move['changed_median']:g}, max "
                f"{move['changed_max']}; delta frame {move['delta_bytes_median']:.0f} bytes",
                f"- the subscription itself (full matrix through the Core, snapshot "
                f"{move['snapshot_bytes'] / 1e6:.1f} MB): {_s(move['subscribe_s'])}",
                f"- subscriber's view after the moves equals a fresh full evaluation: "
                f"{'yes' if move['view_matches_fresh'] else 'NO'}", ""]

    e2e = r.get("e2e")
    if e2e:
        lines += ["## End to end over WebSockets (127.0.0.1)", ""]
        if "error" in e2e and "moves_done" not in e2e:
            lines += [f"FAILED: {e2e['error']}", ""]
        else:
            cpu = e2e.get("server_cpu_per_move_s")
            where = ("a thread of the client process" if e2e["server"] == "thread"
                     else "a child process")
            lines += [
                f"Real server (server.app.run, compression off) in {where}"
                f"; {e2e['clients']} subscribed asyncio clients and one mover in one process; "
                f"{e2e['tokens']} tokens, {e2e['walls']} walls. Latency: from sending a "
                f"token.update to the arrival of its annotation delta (when the clients' "
                f"event loop woke with its bytes in the socket; 'handled': when each "
                f"client's task had it, after the frames of the clients before it in the "
                f"same process); moves one at a time "
                f"({e2e['moves_done']} of {e2e['moves']} done). One run of dnd35's, "
                f"for where a move's time goes and for the throughput after it; the "
                f"latency target is judged in the section 'One move to 50 subscribers, per "
                f"ruleset' (median of three runs each). It runs before the matrices: "
                f"minutes of both cores at full load slow this machine's CPU.", "",
                f"- until **all {e2e['clients']}** subscribers have it: p50 "
                f"{_ms(e2e['all_delivered_p50_s'])}, **p99 {_ms(e2e['all_delivered_p99_s'])}**, "
                f"max {_ms(e2e['all_delivered_max_s'])}{_warmup(e2e)}",
                f"- per subscriber ({e2e['moves_done'] * e2e['clients']} deliveries): p50 "
                f"{_ms(e2e['per_client_p50_s'])}, p99 {_ms(e2e['per_client_p99_s'])}",
                *([f"- handled by all {e2e['clients']}: p50 "
                   f"{_ms(e2e['all_handled_p50_s'])}, p99 {_ms(e2e['all_handled_p99_s'])}; "
                   f"client process CPU per move {_ms(e2e['client_cpu_per_move_s'])}"]
                  if "all_handled_p50_s" in e2e else []),
                f"- ack to the mover: p50 {_ms(e2e['ack_p50_s'])}",
                *_steadiness(e2e),
                f"- server CPU per move: {_ms(cpu) if cpu is not None else 'n/a'}"
                + (f"; move by move (the scheduler's count for the server's threads): p50 "
                   f"{_ms(e2e['move_cpu_p50_s'])}, p99 {_ms(e2e['move_cpu_p99_s'])}; the "
                   f"slowest moves: "
                   + ", ".join(f"{_ms(lat)} with {_ms(c)} of server CPU"
                               for lat, c in e2e["slowest"])
                   if "move_cpu_p50_s" in e2e else ""),
                f"- subscribing all {e2e['clients']} (first one computes the matrix): "
                f"{_s(e2e['subscribe_all_s'])}"]
            if "moves_per_s" in e2e:
                lines += [
                    f"- sustained: **{e2e['moves_per_s']:.1f} moves/s** acknowledged over "
                    f"{e2e['throughput_seconds']:.1f} s (next move sent when the ack arrives), "
                    f"{e2e['deltas_per_client_per_s']:.1f} deltas/s reached each subscriber "
                    f"(deltas coalesce); all caught up: {'yes' if e2e['caught_up'] else 'NO'} "
                    f"({_s(e2e['catch_up_s'])} after the last ack)"]
            if "error" in e2e:
                lines.append(f"- ERROR: {e2e['error']}")
            lines.append("")

    mem = r.get("memory")
    if mem:
        lines += ["## Peak memory", ""]
        if "error" in mem:
            lines += [f"FAILED: {mem['error']}", ""]
        else:
            lines += [
                f"tracemalloc around a Core loading the {mem['tokens']} x {mem['walls']} scene "
                f"(scene.load) and computing its full matrix (first subscription); Python and "
                f"numpy allocations (GEOS memory is not traced).", "",
                f"- peak **{mem['peak_mb']:.0f} MiB**, retained afterwards "
                f"{mem['retained_mb']:.0f} MiB (time under tracemalloc "
                f"{_s(mem['seconds_traced'])})", ""]
        peaks = [f"{m['tokens']}x{m['walls']}: {m['peak_rss_mb']:.0f} MiB"
                 for m in matrix if "peak_rss_mb" in m]
        if peaks:
            lines += ["Peak RSS of each full-matrix worker (engine, baselines and checks "
                      "together): " + ", ".join(peaks), ""]

    deg = r.get("degrees")
    if deg:
        lines += _degrees_report(deg)

    if r.get("parity"):
        lines += _parity_report(r["parity"])
    if r.get("limits"):
        lines += _limits_report(r["limits"])
    if r.get("e2e_rulesets"):
        lines += _e2e_rulesets_report(r["e2e_rulesets"])
    if r.get("sizes"):
        lines += _sizes_report(r["sizes"])

    comp = r.get("compression")
    if comp:
        lines += ["## permessage-deflate", ""]
        if "error" in comp:
            lines += [f"FAILED: {comp['error']}", ""]
        else:
            on, off = comp["on"], comp["off"]
            lines += [
                f"Server-thread CPU time (time.thread_time) to send one frame to "
                f"{comp['clients']} clients with websockets, median; frames are real ones "
                f"from the Core ({comp['tokens']} x {comp['walls']} scene): move deltas "
                f"(median {comp['delta_bytes_median']:.0f} bytes, deflated "
                f"{comp['delta_deflated_bytes_median']:.0f}) and the subscription snapshot "
                f"({comp['snapshot_bytes'] / 1e6:.2f} MB, deflated "
                f"{comp['snapshot_deflated_bytes'] / 1e3:.0f} KB). The server runs with "
                f"compression off.", "",
                "| frame | deflate off | deflate on |", "| --- | --- | --- |",
                f"| move delta | {_ms(off['delta_cpu_median_s'])} | "
                f"{_ms(on['delta_cpu_median_s'])} |",
                f"| snapshot | {_ms(off['snapshot_cpu_median_s'])} | "
                f"{_ms(on['snapshot_cpu_median_s'])} |",
                "", f"(deflate negotiated: off {off['negotiated']}, on {on['negotiated']})",
                ""]
    return "\n".join(lines)


def _degrees_scene(m: Result) -> str:
    return f"{m['tokens']}x{m['walls']}" + (" dressed" if m.get("dressed") else "")


def _degrees_report(deg: Result) -> list[str]:
    lines = [
        "## Centre-line rulesets: degrees and pf2 next to dnd35", "",
        "Full matrix through `evaluate` (every ordered pair, melee + reach + ranged) of each "
        "ruleset with default options on the same scene; 'before' is `reference`, the "
        "pair-by-pair computation `evaluate` replaced (what main ran before), timed once in "
        "the same worker, and its annotations compared with `evaluate`'s on the whole matrix. "
        "Dressed scenes (bench/dressing.py) add elevations, heights, wall bands, terrain "
        "regions, water, riders on mounts, Take Cover and GM floors (dnd35 runs them without "
        "the floors, which name degrees it does not have). Times: median of the runs in "
        "parentheses.", "",
        "| scene | pairs | dnd35 | degrees | pf2 | degrees before | pf2 before | speed-up "
        "degrees / pf2 | fast = reference |",
        "| --- | ---: | --- | --- | --- | --- | --- | --- | --- |"]

    def cell(m: Result, part: str) -> str:
        d = m.get(part)
        if d is None:
            return "not run"
        if "median_s" in d:
            return _s(d["median_s"]) + _runs(d)
        return f"FAILED: {d.get('error', '?')}"

    for m in deg.get("matrix", []):
        if "error" in m and "degrees" not in m:
            lines.append(f"| {_degrees_scene(m)} | | FAILED: {m['error']} | | | | | | |")
            continue
        ups, eq = [], []
        for name in ("degrees", "pf2"):
            before = m.get(f"{name}_reference", {})
            ups.append(_x(_ratio(before.get("median_s"), m.get(name, {}).get("median_s"))))
            if "compared" in before:
                eq.append(f"{name} " + (f"MISMATCH {before['mismatches']}/{before['compared']}"
                                        if before["mismatches"] else
                                        f"equal {before['compared']}"))
        lines.append(
            f"| {_degrees_scene(m)} | {m.get('pairs', '')} | {cell(m, 'dnd35')} | "
            f"{cell(m, 'degrees')} | {cell(m, 'pf2')} | {cell(m, 'degrees_reference')} | "
            f"{cell(m, 'pf2_reference')} | {' / '.join(ups)} | {', '.join(eq) or 'n/a'} |")
    moves = deg.get("move", {})
    if moves:
        lines += ["", "One move through the Core per ruleset (as in 'One move through the Core' "
                  "above: same scene, same mover chosen per ruleset, one subscriber):", "",
                  "| ruleset | median move | min / max | changed per move | subscription "
                  "(full matrix) | snapshot | view = fresh |",
                  "| --- | --- | --- | ---: | --- | ---: | --- |"]
        for name, mv in moves.items():
            if "error" in mv:
                lines.append(f"| {name} | FAILED: {mv['error']} | | | | | |")
                continue
            lines.append(
                f"| {name} | **{_ms(mv['median_s'])}** | {_ms(min(mv['times']))} / "
                f"{_ms(max(mv['times']))} | {mv['changed_median']:g} | "
                f"{_s(mv['subscribe_s'])} | {mv['snapshot_bytes'] / 1e6:.1f} MB | "
                f"{'yes' if mv['view_matches_fresh'] else 'NO'} |")
    lines.append("")
    return lines


def _parity_ratios(m: Result) -> list[tuple[str, str, float | None, float | None]]:
    """(layout, ruleset, full-matrix ratio, move ratio) to dnd35 on squares, one scene."""
    layouts = m.get("layouts", {})
    base = layouts.get("SQUARE", {}).get("dnd35", {})
    out = []
    for layout, rows in layouts.items():
        for name, res in rows.items():
            if layout == "SQUARE" and name == "dnd35":
                continue
            # Ratios timed run for run beside dnd35 (bench/parity.py `interleaved_full`);
            # results of older runs carry only the times.
            full = res.get("full_ratio", (res["full_s"] / base["full_s"])
                           if "full_s" in res and base.get("full_s") else None)
            move = res.get("move_ratio", (res["move_s"] / base["move_s"])
                           if "move_s" in res and base.get("move_s") else None)
            out.append((layout, name, full, move))
    return out


def parity_targets(parity: list[Result]) -> list[Target]:
    if not parity:
        return [Target(f"every ruleset on every grid within {TARGET_PARITY:g}x of dnd35 on "
                       "squares", "not measured", "")]
    over: list[str] = []
    worst_full: tuple[float, str] = (0.0, "")
    worst_move: tuple[float, str] = (0.0, "")
    for m in parity:
        scene = _degrees_scene(m)
        for layout, name, full, move in _parity_ratios(m):
            where = f"{name} {layout.lower()} {scene}"
            for kind, v in (("matrix", full), ("move", move)):
                if v is None or v > TARGET_PARITY:
                    over.append(f"{where} {kind} {'n/a' if v is None else f'{v:.2f}x'}")
            if full is not None and full > worst_full[0]:
                worst_full = (full, where)
            if move is not None and move > worst_move[0]:
                worst_move = (move, where)
    if not worst_full[1] and not worst_move[1]:
        failed = ", ".join(f"{_degrees_scene(m)}: {m.get('error', 'no figures')}"
                           for m in parity)
        return [Target(f"every ruleset on every grid within {TARGET_PARITY:g}x of dnd35 on "
                       "squares", "not measured", failed)]
    detail = (f"worst full matrix {worst_full[0]:.2f}x ({worst_full[1]}), worst move "
              f"{worst_move[0]:.2f}x ({worst_move[1]})")
    if over:
        detail += f"; over {TARGET_PARITY:g}x: " + ", ".join(over)
    return [Target(f"every ruleset on every grid within {TARGET_PARITY:g}x of dnd35 on squares "
                   "(full matrix and one move; issue 15 item 1)",
                   "not met" if over else "met", detail)]


def _limits_report(res: Result) -> list[str]:
    lines = [
        "## Scenes at the limits, one attacker followed (issue 15 item 4)", "",
        f"bench/filters.py through the sans-I/O Core: `generate({res.get('tokens')}, "
        f"{res.get('walls')}, 1)`, one subscriber following the attacker with `attackers: "
        "[one id]`, every mode. First result: the filtered `subscribe` on a scene never "
        "computed. A move: another token steps one square (median / max of the moves); the "
        "attacker walking: it steps to squares it has never stood on, so nothing it saw "
        "before is reused (median / max). Hex layouts: the same scene on the layout, "
        "through the steps a filtered table takes (scenes come to the Core as Foundry "
        "documents, which the hex layout does not make). Equal: what the subscriber holds "
        "after every delta equals a fresh evaluation of the attacker's pairs.", ""]
    if "rulesets" not in res:
        return [*lines, f"FAILED: {res.get('error')}", ""]
    base = res.get("baseline", {})
    if base:
        lines += [f"Baseline in the same run: the unfiltered 100 x 1,000 dnd35 scene, full "
                  f"matrix {_s(base['first_s'])}, a move {base['move']['median_ms']:.2f} ms.",
                  ""]
    lines += ["| ruleset, grid | unfiltered subscribe | first result | a move of another "
              "token | the attacker walking | equal |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for label, row in res["rulesets"].items():
        f = row["filtered"]
        un = f.get("unfiltered")
        refused = "" if un is None else f"`{un.get('code')}` in {un.get('ms')} ms"
        walk = f.get("attacker_walk")
        lines.append(
            f"| {label} | {refused} | {_s(f['first_s'])} | {f['move']['median_ms']:.1f} / "
            f"{f['move']['max_ms']:.1f} ms | "
            + ("" if walk is None else f"{walk['median_ms']:.1f} / {walk['max_ms']:.1f} ms")
            + f" | {'yes' if f.get('equal') else 'NO'} |")
    return [*lines, ""]


def _e2e_rulesets_report(res: Result) -> list[str]:
    clients = res.get("clients", "?")
    lines = ["## One move to 50 subscribers, per ruleset (issue 15 item 2)", "",
             f"bench/live.py `e2e-matrix`: a real server on 127.0.0.1, {res.get('tokens')} "
             f"tokens and {res.get('walls')} walls, {clients} subscribers, "
             f"{res.get('moves', '?')} moves of one token; each ruleset and form on fresh "
             "servers, run k of every one before run k + 1 of any (a busy stretch of the "
             "machine falls on all alike); the run with the median p99 until all "
             f"{clients} have the delta.", ""]
    if "results" not in res:
        return [*lines, f"FAILED: {res.get('error')}", ""]
    return [*lines, live.e2e_markdown(res), ""]


def _sizes_report(res: Result) -> list[str]:
    lines = ["## Bytes per annotation, verbose and compact (issue 15 item 5)", "",
             f"bench/live.py `sizes`: a subscriber's full set and a move's delta on the "
             f"{res.get('tokens')}-token, {res.get('walls')}-wall scene, in each form and "
             "encoding.", ""]
    if "rulesets" not in res:
        return [*lines, f"FAILED: {res.get('error')}", ""]
    return [*lines, live.sizes_markdown(res), ""]


def _parity_report(parity: list[Result]) -> list[str]:
    lines = [
        "## Every ruleset on every grid next to dnd35 on squares", "",
        "bench/parity.py, one worker per scene: the full matrix (every ordered pair, melee + "
        "reach + ranged) through `evaluate` from cold (realms' table of covered fractions "
        "emptied before each run, as on a first subscription), median of the runs in "
        "parentheses; one move: a token steps one square (one hex) and the pairs "
        "`affected_pairs` names, widened by the ruleset, are evaluated on the scene after it "
        "(warm from the scene before it, as in the server), median of 3 movers. Ratios are "
        "to dnd35 on squares in the same worker on the same scene (dressed: bench/dressing.py, "
        "GM floors left out), timed beside it: each run of a matrix right after or right "
        "before a run of dnd35's (in turn), its ratio the median of the runs' ratios; a "
        "ruleset's moves, then dnd35's same moves. dnd35's own figures are the medians of "
        "all its runs. Equality: `evaluate` against the ruleset's pair-by-pair "
        "`reference` (pf1: each visible fraction from its own Shapely union; realms: each "
        "covered fraction from its own Shapely shadows), annotation by annotation, on every "
        "attacker against a sample of targets and on every move's pairs.", "",
        "| scene | grid | ruleset | full matrix | vs dnd35 | one move | vs dnd35 | reference "
        "(sampled pairs) | fast = reference |",
        "| --- | --- | --- | --- | ---: | --- | ---: | --- | --- |"]
    for m in parity:
        scene = _degrees_scene(m)
        if "error" in m and "layouts" not in m:
            lines.append(f"| {scene} | | | FAILED: {m['error']} | | | | | |")
            continue
        ratios = {(lay, name): (f, mv) for lay, name, f, mv in _parity_ratios(m)}
        for layout, rows in m.get("layouts", {}).items():
            for name, res in rows.items():
                if "error" in res:
                    lines.append(f"| {scene} | {layout.lower()} | {name} | FAILED: "
                                 f"{res['error']} | | | | | |")
                    continue
                full, move = ratios.get((layout, name), (1.0, 1.0))
                eq = "n/a (the baseline)" if "compared" not in res else (
                    f"MISMATCH {res['mismatches']}/{res['compared']}" if res["mismatches"]
                    else f"equal {res['compared']}")
                ref = (f"{_s(res['reference_s'])} ({res['reference_pairs']} pairs)"
                       if "reference_s" in res else "")
                lines.append(
                    f"| {scene} | {layout.lower()} | {name} | {_s(res['full_s'])} "
                    f"({len(res['full_times'])}) | {_x(full)} | {_ms(res['move_s'])} | "
                    f"{_x(move)} | {ref} | {eq} |")
    lines.append("")
    return lines


def _parity_configs(text: str) -> list[tuple[int, int, bool]]:
    """`--parity-configs`: 100x1000,200x5000d as (tokens, walls, dressed)."""
    out = []
    for c in text.lower().split(","):
        dressed = c.endswith("d")
        tokens, walls = c.rstrip("d").split("x")
        out.append((int(tokens), int(walls), dressed))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="small sizes and few runs (a minute), to check everything works")
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated subset of {','.join(SECTIONS)}")
    p.add_argument("--configs", help="full-matrix sizes, e.g. 50x100,200x5000 "
                   "(default: 50/100/200 tokens x 100/1000/5000 walls)")
    p.add_argument("--parity-configs", help="parity scenes, e.g. 100x1000,200x5000d (d: "
                   "dressed; default: 100x1000 and 200x5000, plain and dressed)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--clients", type=int, help="subscribers (default 50; quick 20)")
    p.add_argument("--moves", type=int, help="end-to-end moves (default 100; quick 20)")
    p.add_argument("--e2e-runs", type=int,
                   help="end-to-end runs, each on a fresh server; the median run is "
                   "reported (default 3; quick 1)")
    p.add_argument("--seconds", type=float, help="throughput phase (default 10; quick 2)")
    p.add_argument("--mem-limit-gb", type=float, default=8.0,
                   help="address-space limit of each worker and of the server (default 8)")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds before a worker is stopped (default 900)")
    p.add_argument("--server-in-thread", action="store_true",
                   help="run the end-to-end server in a thread of this process (like "
                        "tests.conftest.LiveServer) instead of a child process")
    p.add_argument("--breakdown", action="store_true",
                   help="also time the engine's single-square and big-creature paths")
    p.add_argument("--out", help="Markdown results file (default bench/RESULTS.md; "
                   "none in --quick mode)")
    args = p.parse_args(argv)
    quick = bool(args.quick)
    if args.configs:
        configs = [(int(a), int(b)) for a, b in
                   (c.lower().split("x") for c in args.configs.split(","))]
    else:
        configs = QUICK_CONFIGS if quick else FULL_CONFIGS
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    unknown = sections - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections: {', '.join(sorted(unknown))}")
    out = Path(args.out) if args.out else (None if quick else RESULTS)
    plan = Plan(
        quick=quick, sections=sections, configs=configs,
        degrees_configs=QUICK_DEGREES_CONFIGS if quick else DEGREES_CONFIGS,
        parity_configs=(_parity_configs(args.parity_configs) if args.parity_configs
                        else QUICK_PARITY_CONFIGS if quick else PARITY_CONFIGS),
        seed=args.seed,
        live_tokens=50 if quick else 100, live_walls=300 if quick else 1000,
        clients=args.clients or (20 if quick else 50),
        core_moves=6 if quick else 20,
        e2e_moves=args.moves or (20 if quick else 100),
        e2e_runs=args.e2e_runs or (1 if quick else 3),
        seconds=args.seconds if args.seconds is not None else (2.0 if quick else 10.0),
        mem_limit_gb=args.mem_limit_gb, timeout=args.timeout,
        in_thread=args.server_in_thread, breakdown=args.breakdown, out=out,
        command=".venv/bin/python -m bench" + "".join(
            f" {a}" for a in (sys.argv[1:] if argv is None else argv)))
    t0 = time.perf_counter()
    before = machine()["commit"]
    run_plan(plan)
    info = machine()
    if info["commit"] != before:
        info["commit"] = (f"{before} at the start, {info['commit']} at the end (the code "
                          "changed during the run: figures may mix versions)")
    text = report(plan, time.perf_counter() - t0, info)
    print(text)
    if out is not None:
        # Sections measured by other commands (bench.hexbench: "## Hex grids") are kept.
        kept = ""
        if out.exists():
            old = out.read_text()
            at = old.find(KEPT_SECTION)
            kept = "\n" + old[at:].rstrip("\n") if at >= 0 else ""
        out.write_text(text + "\n" + kept + ("\n" if kept else ""))
        _say(f"[bench] wrote {out}")
    wrong, failed = problems(plan)
    if wrong:
        _say("\n" + "!" * 78 + "\nBENCHMARK FAILED: results differ from the reference:\n"
             + "\n".join(f"  - {w}" for w in wrong) + "\n" + "!" * 78)
        return 1
    if failed:
        _say("[bench] some measurements failed:\n" + "\n".join(f"  - {f}" for f in failed))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
