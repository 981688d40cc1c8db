"""The degrees procedure's fast path (every pair at once) equals its reference (pair by pair).

`CoverDegrees.evaluate` and `Pf2.evaluate` trace every pair's centre line in one batch, prove
most sample lines of blocked pairs blocked with a few plain walls, trace the rest, find who
threatens whom with arrays and build one outcome per distinct combination of facts;
`reference` is the straightforward computation they replaced. Both must give the same
annotations, field by field (traced lines included), on:

- seeded benchmark scenes dressed with the third dimension (elevations, heights, wall
  bands), terrain regions of every kind, water, riders on mounts, Take Cover, GM floors,
  other reaches and sizes, tokens gathered so that they flank (bench/dressing.py);
- plain benchmark scenes of rooms, where most pairs are walled in;
- random small scenes (Hypothesis) with wall bands, elevations, mounts and Take Cover;
- every pair or a subset, all modes or one, with and without traced lines, default and
  non-default options;
- the same on Foundry's four hex layouts (bench/hexscenes.py: the dressed scenes and rooms
  with tokens snapped to hexes, multi-hex tokens of every shape, Tiny ones; random small hex
  scenes), where the fast path uses hex centres, footprint corners and hex steps.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
import shapely
from hypothesis import given
from hypothesis import strategies as st

from bench.dressing import dress
from bench.hexscenes import HEX_KINDS, on_hex
from bench.scenes import generate
from geometry import hex as hexgrid
from geometry import openings
from geometry.model import GridKind, RegionGeom, RegionKind, SceneGeom
from geometry.square import INSET_PX, centre, corners, inset
from rulesets import REGISTRY
from rulesets.base import Annotation, AttackMode, Degree, Flag, pair_rows
from rulesets.degrees import CoverDegrees, DegreesOptions
from rulesets.pf2 import Pf2Options
from tests.conftest import banded_walks, heads_level_with_a_band, moves_warm_and_cold
from tests.test_properties import PROPS, Doc, load
from tests.test_properties_3d import banded_scene_docs

SEEDS = range(1, 9)
OPTIONS: dict[str, dict[str, Any]] = {
    "degrees": {"default": DegreesOptions(),
                "variant": DegreesOptions(size_shift=False, area_walls_count=False)},
    "pf2": {"default": Pf2Options(),
            "variant": Pf2Options(low_walls="lesser", big_creature_standard=False)},
}
CASES = [(name, opt) for name in OPTIONS for opt in OPTIONS[name]]


def rules(name: str) -> CoverDegrees:
    ruleset = REGISTRY.get(name)
    assert isinstance(ruleset, CoverDegrees)
    return ruleset


def dressed(seed: int) -> SceneGeom:
    return dress(generate(16, 40, seed).geom, seed)


def assert_same(fast: list[Annotation], ref: list[Annotation]) -> None:
    assert len(fast) == len(ref)
    wrong = [(f, r) for f, r in zip(fast, ref, strict=True) if f != r]
    assert not wrong, f"{len(wrong)} of {len(ref)} annotations differ; first:\n" \
                      f"fast {wrong[0][0]}\nref  {wrong[0][1]}"


@pytest.mark.parametrize(("name", "option_set"), CASES)
@pytest.mark.parametrize("seed", SEEDS)
def test_fast_equals_reference_on_dressed_scenes(name: str, option_set: str,
                                                 seed: int) -> None:
    geom, options = dressed(seed), OPTIONS[name][option_set]
    lines = seed % 2 == 0
    assert_same(rules(name).evaluate(geom, options, lines=lines),
                rules(name).reference(geom, options, lines=lines))


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.parametrize("seed", SEEDS)
def test_fast_equals_reference_on_subsets(name: str, seed: int) -> None:
    """Some pairs (as after a move), one mode or two, lines drawn: flanking then needs the
    levels of pairs that were not asked for."""
    geom = dressed(seed)
    ids = [c.id for c in geom.creatures]
    rng = random.Random(seed)
    pairs = [(a, t) for a, t in (rng.sample(ids, 2) for _ in range(12))]
    for modes in ([AttackMode.MELEE], [AttackMode.RANGED, AttackMode.REACH]):
        options = OPTIONS[name]["default"]
        assert_same(rules(name).evaluate(geom, options, pairs, modes, lines=True),
                    rules(name).reference(geom, options, pairs, modes, lines=True))


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_fast_equals_reference_on_pairs_asked_twice(name: str) -> None:
    """Pairs asked for twice, flanking ones among them: each row gets its own pair's
    outcome, flanking included, as the reference gives it row by row."""
    geom = dressed(1)
    options = OPTIONS[name]["default"]
    flanking = [(x.attacker, x.target) for x in rules(name).evaluate(geom, options)
                if Flag.FLANKING in x.flags][:6]
    assert flanking
    ids = [c.id for c in geom.creatures]
    pairs = [*flanking, (ids[0], ids[1]), *flanking, (ids[0], ids[1])]
    got = rules(name).evaluate(geom, options, pairs, [AttackMode.MELEE])
    assert_same(got, rules(name).reference(geom, options, pairs, [AttackMode.MELEE]))
    assert sum(Flag.FLANKING in x.flags for x in got) == 2 * len(flanking)


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.parametrize(("tokens", "walls", "seed"), [(30, 150, 1), (24, 400, 2)])
@pytest.mark.parametrize("topped", [False, True], ids=["walls", "topped-walls"])
def test_fast_equals_reference_on_rooms(name: str, tokens: int, walls: int, seed: int,
                                        topped: bool) -> None:
    """Rooms; topped: every wall 12 ft high (Wall Height on the whole map) and the tokens
    at several elevations, so some pairs see over walls and some walls span others."""
    geom = generate(tokens, walls, seed).geom
    if topped:
        rng = random.Random(seed)
        geom = replace(geom, walls=tuple(replace(w, top=12.0) for w in geom.walls),
                       creatures=tuple(replace(c, elevation=rng.choice((0.0, 0.0, 5.0, 15.0)))
                                       for c in geom.creatures))
    options = OPTIONS[name]["default"]
    assert_same(rules(name).evaluate(geom, options), rules(name).reference(geom, options))


def test_the_scenes_reach_the_interesting_cases() -> None:
    """The comparisons above are only worth something if the scenes hold what the fast path
    computes differently: flanking, no line of effect, every degree, riders, Take Cover."""
    seen: Counter[str] = Counter()
    for name in OPTIONS:
        for seed in SEEDS:
            geom = dressed(seed)
            seen["riders"] += sum(c.mount is not None for c in geom.creatures)
            seen["take cover"] += sum(c.take_cover for c in geom.creatures)
            seen["raised"] += sum(c.elevation != 0 for c in geom.creatures)
            seen["banded walls"] += sum(w.top is not None or w.bottom is not None
                                        for w in geom.walls)
            for ann in rules(name).evaluate(geom, OPTIONS[name]["default"]):
                seen[ann.cover.value] += 1
                seen["flanking " + name] += Flag.FLANKING in ann.flags
                seen["mounted " + name] += Flag.SHARES_MAP in ann.flags
    for key in ("riders", "take cover", "raised", "banded walls", "flanking degrees",
                "flanking pf2", "mounted pf2", *(d.value for d in (
                    Degree.NONE, Degree.LESSER, Degree.STANDARD, Degree.GREATER,
                    Degree.TOTAL))):
        assert seen[key] > 0, (key, seen)


def test_rooms_take_both_ways_to_line_of_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a map of rooms most sample lines of blocked pairs are proved blocked by a few plain
    walls, the others traced: both ways are exercised (and equal the reference above)."""
    geom = generate(30, 150, 1).geom
    ruleset = rules("degrees")
    ctx = ruleset._context(geom, DegreesOptions())
    seen: Counter[str] = Counter()
    covered, open_lines = ctx._covered, ctx._open_lines

    def spy_covered(*args: Any) -> Any:
        out = covered(*args)
        seen["walled in"] += int(out.all(axis=1).sum())
        seen["lines proved blocked"] += int(out.sum())
        return out

    def spy_open(*args: Any) -> Any:
        seen["lines traced"] += len(args[2])
        return open_lines(*args)

    monkeypatch.setattr(ctx, "_covered", spy_covered)
    monkeypatch.setattr(ctx, "_open_lines", spy_open)
    ruleset._fast(ctx, pair_rows(len(geom.creatures), ctx.index, None), tuple(AttackMode),
                  False)
    assert seen["walled in"] > 0 and seen["lines traced"] > 0, seen


def test_lines_the_exact_test_does_not_see_are_found_by_the_samples() -> None:
    """The exact test tries lines a hair off its event points: it misses a gap narrower
    than that hair, and a line from a corner of a creature's space that lies on a wall
    (a wall does not stop a line that starts on it). On a hex grid a token off the
    grid's centres has samples a hair outside its hexes: a wall between sample and hex
    seals the hex, not the sample line. Two walls whose ends miss each other by one
    float step, a sample line between them; a band from the feet up of two creatures a
    hair tall (their heads at their feet, in floats: the band meets no line of theirs); a
    chain wall through a corner of the attacker's space. In each, a sample line is free
    and the reference finds the pair's line of effect; so does the fast path, which
    traces the samples first and asks the exact test only to turn 'none' into a line of
    effect (a second reviewer's scenes)."""
    from tests.test_openings import A_B, _scene, float_step_gap

    y, g = 200 + INSET_PX, 2.0 ** -22
    hairline = _scene([(500, -1000, 500, y - g), (500, y + g, 500, 1000)], A_B)
    k = 2 * (100 - INSET_PX)
    corner = _scene([(-100.0, k + 100.0, k + 100.0, -100.0)], [(0, 0, 1), (200, 200, 1)])
    off = _scene([(349.995, -1000.0, 349.995, 1000.0), (800.0, 240.0, 800.0, 275.0)],
                 [(300, 200, 1), (900, 200, 1)])
    off = replace(off, grid=replace(off.grid, kind=GridKind.HEXODDR))
    upper, _, below = float_step_gap()
    gap = _scene([upper, (500.0, below, 600.0, 1000.0)], A_B)
    band = replace(_scene([(500, -1000, 500, 1000)], A_B).walls[0], bottom=10.0, top=20.0)
    thin = _scene([band, (300, 245, 300, 255)], A_B)
    thin = replace(thin, creatures=tuple(replace(c, elevation=10.0, tall=1e-16)
                                         for c in thin.creatures))
    # A chain whose first wall runs through A's upper right corner (a hair inside), which
    # rounding in `_touches` reads as clear of it; the lines from that corner pass.
    c = np.array([400.1 - INSET_PX, 200.3 + INSET_PX])
    far = c + 14 * np.array([7.0, 2.0])
    through = _scene([(*(c - 7 * np.array([7.0, 2.0])).tolist(), *far.tolist()),
                      (*far.tolist(), float(far[0]), 1000.0)],
                     [(300.1, 200.3, 1), (600.1, 200.3, 1)])
    for geom in (hairline, corner, off, gap, thin, through):
        for name in OPTIONS:
            options = OPTIONS[name]["default"]
            ref = rules(name).reference(geom, options)
            assert all(a.cover is not Degree.TOTAL for a in ref), (geom.walls, name)
            assert_same(rules(name).evaluate(geom, options), ref)


def test_a_line_between_two_blocks_of_terrain_meeting_at_a_corner() -> None:
    """Two blocks of blocking terrain meet at one corner point, and the only line from one
    creature to the other that enters neither passes through that point: one of the
    sample lines (the attacker's lower left corner to the target's upper right) does.
    A line of effect, as the reference reads it. The exact test takes the terrain's
    borders as walls, and a line touching one as stopped: the sample lines, traced
    first, find it."""
    from tests.test_openings import A_B, _scene

    i = INSET_PX
    s, e = np.array([i, 300 - i]), np.array([1100 - i, 200 + i])
    px, py = (s + (e - s) / 4).tolist()  # exactly on the line: a quarter of the way
    assert (px, py) == (275 + 1 / 128, 275 - 1 / 128)
    upper = RegionGeom("upper", RegionKind.BLOCKING,
                       ((175.0, -1000.0), (px, -1000.0), (px, py), (175.0, py)))
    lower = RegionGeom("lower", RegionKind.BLOCKING,
                       ((px, py), (375.0, py), (375.0, 1000.0), (px, 1000.0)))
    geom = replace(_scene([], A_B), regions=(upper, lower))
    for name in OPTIONS:
        options = OPTIONS[name]["default"]
        ref = rules(name).reference(geom, options)
        assert all(a.cover is not Degree.TOTAL for a in ref)
        assert_same(rules(name).evaluate(geom, options), ref)


@st.composite
def mounted_scene_docs(draw: st.DrawFn) -> Doc:
    """Random small scenes with wall bands and elevations, some riders and Take Cover."""
    doc = draw(banded_scene_docs())
    tokens = doc["tokens"]
    for t in tokens:
        if draw(st.integers(0, 4)) == 0:
            t.setdefault("flags", {}).setdefault("covercast", {})["takeCover"] = True
        t["width"] = t["height"] = draw(st.sampled_from([1, 1, 1, 2, 0.5]))
    if len(tokens) >= 2 and draw(st.booleans()):
        rider, steed = draw(st.permutations(range(len(tokens))))[:2]
        # A mount is at least one size larger than its rider (the server checks it).
        tokens[rider]["width"] = tokens[rider]["height"] = 1
        tokens[steed]["width"] = tokens[steed]["height"] = 2
        tokens[rider].setdefault("flags", {}).setdefault("covercast", {})["mount"] = \
            tokens[steed]["id"]
    return doc


@pytest.mark.parametrize("name", sorted(OPTIONS))
@PROPS
@given(doc=mounted_scene_docs(), lines=st.booleans())
def test_fast_equals_reference_on_random_scenes(name: str, doc: Doc, lines: bool) -> None:
    scene = load(doc, ruleset=name)
    ruleset = rules(name)
    assert_same(ruleset.evaluate(scene.geometry, scene.options, lines=lines),
                ruleset.reference(scene.geometry, scene.options, lines=lines))


def test_benchmark_compares_the_whole_matrix() -> None:
    """bench.degrees times the three rulesets and checks fast against reference on the
    whole matrix; the report shows the comparison."""
    from bench import __main__ as bench_main
    from bench import degrees as bench_degrees

    result = bench_degrees.measure(12, 40, 1, dressed=True, max_runs=1)
    for name in ("dnd35", "degrees", "pf2"):
        assert result[name]["median_s"] > 0, result[name]
    for name in ("degrees", "pf2"):
        ref = result[f"{name}_reference"]
        assert ref["compared"] == 3 * 12 * 11 and ref["mismatches"] == 0, ref
    text = "\n".join(bench_main._degrees_report({"matrix": [result], "move": {}}))
    assert "degrees equal 396, pf2 equal 396" in text


# -- hex grids ---------------------------------------------------------------------------

HEX_SEEDS = (1, 2)


def hex_dressed(seed: int, kind: GridKind) -> SceneGeom:
    return on_hex(dressed(seed), kind, seed)


@pytest.mark.parametrize(("name", "option_set"), CASES)
@pytest.mark.parametrize("seed", HEX_SEEDS)
@pytest.mark.parametrize("kind", HEX_KINDS, ids=lambda k: k.name)
def test_fast_equals_reference_on_hex_scenes(name: str, option_set: str, seed: int,
                                             kind: GridKind) -> None:
    geom, options = hex_dressed(seed, kind), OPTIONS[name][option_set]
    lines = seed % 2 == 0
    assert_same(rules(name).evaluate(geom, options, lines=lines),
                rules(name).reference(geom, options, lines=lines))


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.parametrize("kind", HEX_KINDS, ids=lambda k: k.name)
def test_fast_equals_reference_on_hex_subsets(name: str, kind: GridKind) -> None:
    """Some pairs of a hex scene, one mode or two, lines drawn (flanking then needs levels
    of pairs not asked for)."""
    geom = hex_dressed(3, kind)
    ids = [c.id for c in geom.creatures]
    rng = random.Random(int(kind))
    pairs = [(a, t) for a, t in (rng.sample(ids, 2) for _ in range(12))]
    for modes in ([AttackMode.MELEE], [AttackMode.RANGED, AttackMode.REACH]):
        options = OPTIONS[name]["default"]
        assert_same(rules(name).evaluate(geom, options, pairs, modes, lines=True),
                    rules(name).reference(geom, options, pairs, modes, lines=True))


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.parametrize("kind", HEX_KINDS, ids=lambda k: k.name)
def test_fast_equals_reference_on_hex_rooms(name: str, kind: GridKind) -> None:
    """Rooms on a hex grid (most pairs walled in: the plain-wall proofs run on hex
    samples); on two layouts every wall 12 ft high and tokens at several elevations."""
    geom = on_hex(generate(24, 150, 1).geom, kind, 1)
    if int(kind) % 2:
        rng = random.Random(int(kind))
        geom = replace(geom, walls=tuple(replace(w, top=12.0) for w in geom.walls),
                       creatures=tuple(replace(c, elevation=rng.choice((0.0, 0.0, 5.0, 15.0)))
                                       for c in geom.creatures))
    options = OPTIONS[name]["default"]
    assert_same(rules(name).evaluate(geom, options), rules(name).reference(geom, options))


def test_the_hex_scenes_reach_the_interesting_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hex comparisons hold the cases the hex fast path computes differently: tokens of
    several hexes (footprints of many corners) and Tiny ones, every layout, flanking across
    opposite hex sides, no line of effect, every degree, riders, Take Cover, and pairs of
    creatures proved walled apart whole (`openings.walled_apart`) before their lines."""
    seen: Counter[str] = Counter()
    walled_apart = openings.walled_apart

    def counted(*args: Any) -> Any:
        out = walled_apart(*args)
        seen["walled apart"] += int(out.sum())
        return out

    monkeypatch.setattr(openings, "walled_apart", counted)
    for kind in HEX_KINDS:
        for seed in HEX_SEEDS:
            geom = hex_dressed(seed, kind)
            seen[kind.name] += 1
            seen["multi-hex"] += sum(c.width >= 2 for c in geom.creatures)
            seen["tiny"] += sum(c.width < 1 for c in geom.creatures)
            seen["riders"] += sum(c.mount is not None for c in geom.creatures)
            seen["take cover"] += sum(c.take_cover for c in geom.creatures)
            seen["banded walls"] += sum(w.top is not None or w.bottom is not None
                                        for w in geom.walls)
            seen["angled walls"] += sum(w.x0 != w.x1 and w.y0 != w.y1 for w in geom.walls)
            for name in OPTIONS:
                for ann in rules(name).evaluate(geom, OPTIONS[name]["default"]):
                    seen[ann.cover.value] += 1
                    seen["flanking " + name] += Flag.FLANKING in ann.flags
                    seen["mounted " + name] += Flag.SHARES_MAP in ann.flags
                    seen["reach " + name] += (ann.mode is AttackMode.REACH
                                              and Flag.IN_REACH in ann.flags)
    for key in ("multi-hex", "tiny", "riders", "take cover", "banded walls", "angled walls",
                "walled apart", "flanking degrees", "flanking pf2", "mounted pf2", "reach degrees",
                *(k.name for k in HEX_KINDS), *(d.value for d in (
                    Degree.NONE, Degree.LESSER, Degree.STANDARD, Degree.GREATER,
                    Degree.TOTAL))):
        assert seen[key] > 0, (key, seen)


def test_hex_fast_path_is_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a hex grid `evaluate` takes the every-pair-at-once path (not the pair-by-pair one
    it used to fall back to), and its samples hold every footprint corner."""
    geom = hex_dressed(1, GridKind.HEXODDQ)
    ruleset = rules("degrees")

    def refuse(*args: Any) -> Any:
        raise AssertionError("evaluate fell back to the pair-by-pair computation")

    monkeypatch.setattr(type(ruleset), "_by_pairs", refuse)
    ruleset.evaluate(geom, DegreesOptions())
    ctx = ruleset._context(geom, DegreesOptions())
    own = ctx.sample_valid.sum(axis=1)
    assert own.max() > 7 and own.min() <= 7  # a multi-hex footprint and a one-hex one
    for k in range(len(geom.creatures)):
        assert own[k] == len(ctx._samples(k))


@pytest.mark.parametrize("kind", [GridKind.HEXODDR, GridKind.HEXEVENQ], ids=lambda k: k.name)
def test_a_hex_pair_covered_by_its_first_wall_is_not_tested_against_its_last(
        kind: GridKind, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_covered` tests a blocked pair's sample lines against the first plain wall on its
    centre line, then only the pairs with lines left against the last. On a hex grid the
    samples are padded to the largest footprint's: a pair whose own lines the first wall
    covers all is done, whatever its padding (its padding was taken for lines left, and
    nearly every pair went through the second test)."""
    from rulesets import degrees

    geom = on_hex(generate(40, 200, 3).geom, kind, 3)
    seconds: list[int] = []
    calls = [0]
    real_covered, real_cover = degrees._Context._covered, degrees._Context._cover

    def covered(self: Any, *args: Any) -> Any:
        calls[0] = 0
        return real_covered(self, *args)

    def cover(self: Any, done: np.ndarray, pos: np.ndarray, cl: np.ndarray, cw: np.ndarray,
              a: np.ndarray, t: np.ndarray) -> None:
        calls[0] += 1
        if calls[0] > 1:
            own = self._valid_lines(a[cl], t[cl])
            finished = (done[pos[cl]] | ~own).all(axis=1)
            seconds.append(int(finished.sum()))
        real_cover(self, done, pos, cl, cw, a, t)

    monkeypatch.setattr(degrees._Context, "_covered", covered)
    monkeypatch.setattr(degrees._Context, "_cover", cover)
    for name in OPTIONS:
        ruleset = rules(name)
        assert_same(ruleset.evaluate(geom, ruleset.Options()),
                    ruleset.reference(geom, ruleset.Options()))
    assert seconds, "no pair was tested against a second wall: the scene shows nothing"
    assert sum(seconds) == 0, f"{sum(seconds)} pairs with every line covered tested again"


@pytest.mark.parametrize("kind", HEX_KINDS, ids=lambda k: k.name)
def test_hex_seal_rings_kept_per_footprint_are_the_rings_worked_out_afresh(
        kind: GridKind, monkeypatch: pytest.MonkeyPatch) -> None:
    """A move changes one creature's seal ring: the others are found again by footprint
    (`_SEAL_RINGS`). After a creature moves and another grows, with most rings found
    again and two worked out, every ring and corner count is the one `hull_rings` gives
    for the whole scene."""
    from collections import OrderedDict

    import rulesets.degrees as deg

    monkeypatch.setattr(deg, "_SEAL_RINGS", OrderedDict())
    worked: list[int] = []
    hull_rings = openings.hull_rings

    def counting(spaces: openings.Spaces, *args: Any) -> Any:
        worked.append(len(spaces.first))
        return hull_rings(spaces, *args)

    monkeypatch.setattr(openings, "hull_rings", counting)
    geom = hex_dressed(2, kind)
    n = len(geom.creatures)
    assert len(rules("pf2")._context(geom, Pf2Options()).seal_rings[1]) == n
    c, d = geom.creatures[3], geom.creatures[5]
    moved = replace(geom, creatures=(
        *geom.creatures[:3], replace(c, x=c.x + 300.0), geom.creatures[4],
        replace(d, width=d.width + 1, height=d.height + 1), *geom.creatures[6:]))
    for scene in (geom, moved):
        ctx = rules("pf2")._context(scene, Pf2Options())
        rings, corners = ctx.seal_rings
        want, want_corners = hull_rings(ctx.loe_spaces, ctx.samples, ctx.sample_valid)
        assert corners.tolist() == want_corners.tolist()
        width = int(want_corners.max())
        assert np.array_equal(rings[:, :width], want[:, :width])
    # Every ring once for the first scene; the two changed ones for the second.
    assert worked == [n, 2]
    assert len(deg._SEAL_RINGS) <= deg._SEAL_RINGS_KEPT


@pytest.mark.parametrize("kind", HEX_KINDS, ids=lambda k: k.name)
def test_hex_seal_rings_hold_each_space_and_its_samples(kind: GridKind,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       ) -> None:
    """The rings the sealed-pairs step tests on a hex grid (one convex ring a creature)
    hold every hex of the creature's space and every 'any part' sample (a wall sealing two
    rings then seals everything the rules trace between them), and stay within a hair of
    its footprint's hull (a wall along a creature's side still seals)."""
    geom = hex_dressed(1, kind)
    ctx = rules("pf2")._context(geom, Pf2Options())
    rings, corners = ctx.seal_rings
    spaces = ctx.loe_spaces
    for k in range(len(ctx.cs)):
        hull = shapely.Polygon(rings[k, :corners[k]])
        assert hull.is_valid and hull.area > 0
        own = np.concatenate([ctx.samples[k][ctx.sample_valid[k]],
                              spaces.rings[spaces.first[k]:spaces.first[k]
                                           + spaces.count[k]].reshape(-1, 2)])
        assert shapely.covers(hull, shapely.points(own)).all(), k
        footprint = hexgrid.footprint(ctx.cs[k], geom.grid).polygon
        assert hull.buffer(-INSET_PX / 2).within(footprint.convex_hull), k
    # Most pairs of a scene of rooms are sealed, found before anything is traced.
    rooms = on_hex(generate(24, 150, 1).geom, kind, 1)
    room_ctx = rules("pf2")._context(rooms, Pf2Options())
    n = len(rooms.creatures)
    a, t = (v.ravel() for v in np.meshgrid(np.arange(n), np.arange(n)))
    sealed = room_ctx._sealed_pairs(a[a != t], t[a != t])
    assert sealed is not None and sealed.mean() > 0.5, None if sealed is None else sealed.mean()
    # Many pairs are taken a group of ring sizes at a time, few in one padded call: the
    # same answer.
    monkeypatch.setattr(openings, "SEAL_ONE_CALL", 0)
    grouped = room_ctx._sealed_pairs(a[a != t], t[a != t])
    assert grouped is not None and (grouped == sealed).all()
    # Groups of few pairs merged into one call padded to their largest rings, or each on
    # its own, or all in one call: the same answer (rings of 6, 8 and 9 corners here).
    more = on_hex(generate(60, 300, 1).geom, kind, 1)
    more_ctx = rules("pf2")._context(more, Pf2Options())
    n = len(more.creatures)
    a, t = (v.ravel() for v in np.meshgrid(np.arange(n), np.arange(n)))
    a, t = a[a != t], t[a != t]
    answers = []
    for one_call, merge in ((0, 0), (0, openings.SEAL_GROUP_MERGE), (10**9, 0)):
        monkeypatch.setattr(openings, "SEAL_ONE_CALL", one_call)
        monkeypatch.setattr(openings, "SEAL_GROUP_MERGE", merge)
        answers.append(more_ctx._sealed_pairs(a, t))
    assert len(np.unique(more_ctx.seal_rings[1])) >= 3
    assert all(x is not None and (x == answers[0]).all() for x in answers)
    none = np.zeros(0, dtype=np.intp)
    for limit in (0, 2_000):
        monkeypatch.setattr(openings, "SEAL_ONE_CALL", limit)
        empty = room_ctx._sealed_pairs(none, none)
        assert empty is not None and empty.shape == (0,)


@st.composite
def hex_scene_docs(draw: st.DrawFn) -> Doc:
    """`mounted_scene_docs` on a hex layout, tokens of two hexes in any Foundry shape."""
    doc = draw(mounted_scene_docs())
    doc["grid"]["type"] = draw(st.sampled_from([2, 3, 4, 5]))
    for t in doc["tokens"]:
        if t.get("width") == 2:
            t["shape"] = draw(st.integers(0, 5))
    return doc


@pytest.mark.parametrize("name", sorted(OPTIONS))
@PROPS
@given(doc=hex_scene_docs(), lines=st.booleans())
def test_fast_equals_reference_on_random_hex_scenes(name: str, doc: Doc, lines: bool) -> None:
    scene = load(doc, ruleset=name)
    ruleset = rules(name)
    assert_same(ruleset.evaluate(scene.geometry, scene.options, lines=lines),
                ruleset.reference(scene.geometry, scene.options, lines=lines))


def test_square_samples_at_once_equal_creature_by_creature() -> None:
    # `samples` builds every creature's inset corners and centre in one pass on square
    # grids; one creature's, by geometry.square's helpers, is the definition (mixed sizes,
    # Tiny included).
    geom = dress(generate(60, 100, 3).geom, 3)
    ctx = CoverDegrees()._context(geom, DegreesOptions())
    assert ctx.hex is None
    each = np.stack([np.vstack([inset(corners(box), box), np.array([centre(box)])])
                     for box in ctx.spaces])
    assert np.array_equal(ctx.samples, each)
    assert ctx.sample_valid.all()


@pytest.mark.parametrize("kind", [GridKind.SQUARE, *HEX_KINDS], ids=lambda k: k.name)
def test_sample_lines_traced_in_rounds_give_every_pairs_answer(
        kind: GridKind, monkeypatch: pytest.MonkeyPatch) -> None:
    """A big scene's sample lines are traced in rounds, a few of every pair first, the
    rest only for the pairs with no open line yet (`_Context._open_lines`). Forced into
    rounds of one and two lines on small scenes, the answers are the reference's, and
    lines of pairs found open in a round are not traced again."""
    from rulesets import degrees as degrees_mod
    from rulesets import forget_kept

    monkeypatch.setattr(degrees_mod, "_OPEN_ONE_ROUND", 0)
    monkeypatch.setattr(degrees_mod, "_OPEN_ROUNDS", (1, 2))
    traced: list[int] = []
    real = degrees_mod._Context._trace_lines
    real_open = degrees_mod._Context._open_lines
    opening = [False]

    def counting(self: Any, starts: Any, ends: Any, **how: Any) -> Any:
        if opening[0]:
            traced.append(len(starts))
        return real(self, starts, ends, **how)

    def open_lines(self: Any, *args: Any) -> Any:
        # (Only the sample lines `_open_lines` traces are counted, not the centre lines.)
        opening[0] = True
        try:
            return real_open(self, *args)
        finally:
            opening[0] = False

    monkeypatch.setattr(degrees_mod._Context, "_trace_lines", counting)
    monkeypatch.setattr(degrees_mod._Context, "_open_lines", open_lines)
    calls = []
    for seed in (1, 2):
        geom = dressed(seed) if kind is GridKind.SQUARE else hex_dressed(seed, kind)
        for name in OPTIONS:
            options = OPTIONS[name]["default"]
            traced.clear()
            forget_kept()
            assert_same(rules(name).evaluate(geom, options),
                        rules(name).reference(geom, options))
            calls.append(len(traced))
    assert max(calls) >= 2  # some pairs were left for a later round
    # Rounds end early for open pairs: across the rounds, fewer lines than one round traces
    # (each evaluation from nothing kept).
    monkeypatch.setattr(degrees_mod, "_OPEN_ONE_ROUND", 10**9)
    geom = hex_dressed(1, HEX_KINDS[0]) if kind is not GridKind.SQUARE else dressed(1)
    traced.clear()
    forget_kept()
    rules("degrees").evaluate(geom, DegreesOptions())
    at_once = sum(traced[-1:])
    monkeypatch.setattr(degrees_mod, "_OPEN_ONE_ROUND", 0)
    traced.clear()
    forget_kept()
    rules("degrees").evaluate(geom, DegreesOptions())
    assert sum(traced) < at_once


@pytest.mark.parametrize("objects", [20_000, 20], ids=["numbered", "restarting"])
@pytest.mark.parametrize("kind", [GridKind.SQUARE, GridKind.HEXODDR, GridKind.HEXEVENQ],
                         ids=lambda k: k.name)
def test_line_of_effect_kept_across_moves_equals_a_fresh_evaluation(
        kind: GridKind, objects: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Line of effect depends on the two creatures, the walls and the terrain alone, and is
    kept per pair of creature objects for later snapshots of the same walls
    (`rulesets.kept`). Move after move, the pairs a move asks for equal a
    fresh evaluation with nothing kept; most pairs' line of effect is then read back, not
    looked for again; and other walls (every door shut, no walls) or other options start
    afresh rather than reading what the old walls kept. With room for few creature objects,
    the table starts again (new numbers, nothing kept) as moves make new objects."""
    from rulesets import degrees as degrees_mod
    from rulesets import forget_kept
    from rulesets import kept as kept_mod

    asked: list[int] = []
    real = degrees_mod._Context._through_openings

    def counting(self: Any, a: Any, t: Any, open_any: Any, sealed: Any = None,
                 ask: Any = None) -> Any:
        asked.append(int(ask.sum()) if ask is not None else len(a))
        return real(self, a, t, open_any, sealed, ask)

    monkeypatch.setattr(degrees_mod._Context, "_through_openings", counting)
    monkeypatch.setattr(kept_mod, "OBJECTS", objects)
    geom = dressed(3) if kind is GridKind.SQUARE else hex_dressed(3, kind)
    geom = replace(geom, creatures=tuple(replace(c, cover_floor=None) for c in geom.creatures))
    for name in OPTIONS:
        ruleset = rules(name)
        options = OPTIONS[name]["default"]
        forget_kept()
        ruleset.evaluate(geom, options)
        current, warm_asked, cold_asked = moves_warm_and_cold(
            ruleset, geom, options, asked, 6, lambda m: 5 * m + 1, assert_same)
        if objects > 1_000:
            assert warm_asked < cold_asked, (warm_asked, cold_asked)
        # The same creature objects under other walls: every door shut, then no walls.
        for walls in (tuple(replace(w, active=True) for w in current.walls), ()):
            changed = replace(current, walls=walls)
            assert_same(ruleset.evaluate(changed, options),
                        rules(name).reference(changed, options))
        other = OPTIONS[name]["variant"]
        assert_same(ruleset.evaluate(current, other), rules(name).reference(current, other))


@pytest.mark.parametrize("kind", [GridKind.SQUARE, GridKind.HEXODDR], ids=lambda k: k.name)
def test_a_creature_back_where_it_stood_reads_its_line_of_effect_back(
        kind: GridKind, monkeypatch: pytest.MonkeyPatch) -> None:
    """Creatures are numbered by state (`rulesets.kept`): a token moved and moved back is a
    new object in the state it had, and its pairs' line of effect is read back rather than
    looked for again; the same token back at another height is another state, looked at
    afresh. Every answer equals a fresh evaluation."""
    from bench.hexbench import moved
    from rulesets import degrees as degrees_mod
    from rulesets import forget_kept

    asked: list[int] = []
    real = degrees_mod._Context._through_openings
    sealed_asked: list[int] = []
    real_sealed = degrees_mod._Context._sealed_pairs

    def counting(self: Any, a: Any, t: Any, open_any: Any, sealed: Any = None,
                 ask: Any = None) -> Any:
        asked.append(int(ask.sum()) if ask is not None else len(a))
        return real(self, a, t, open_any, sealed, ask)

    def counting_sealed(self: Any, a: Any, t: Any) -> Any:
        sealed_asked.append(len(a))
        return real_sealed(self, a, t)

    monkeypatch.setattr(degrees_mod._Context, "_through_openings", counting)
    monkeypatch.setattr(degrees_mod._Context, "_sealed_pairs", counting_sealed)
    geom = dressed(4) if kind is GridKind.SQUARE else hex_dressed(4, kind)
    geom = replace(geom, creatures=tuple(replace(c, cover_floor=None) for c in geom.creatures))
    n = len(geom.creatures)
    for name in OPTIONS:
        ruleset = rules(name)
        options = OPTIONS[name]["default"]
        forget_kept()
        ruleset.evaluate(geom, options)
        for k in (0, n // 2):
            c = geom.creatures[k]
            pairs = sorted({(c.id, o.id) for o in geom.creatures if o is not c}
                           | {(o.id, c.id) for o in geom.creatures if o is not c})
            away = moved(geom, k)
            ruleset.evaluate(away, options, pairs)
            # Back where it stood: a new object, the old state.
            back = replace(geom, creatures=tuple(
                replace(o) if o is c else o for o in geom.creatures))
            assert back.creatures[k] is not c and back.creatures[k] == c
            asked.clear()
            sealed_asked.clear()
            got = ruleset.evaluate(back, options, pairs)
            assert sum(asked) == 0 and sum(sealed_asked) == 0, (name, k, asked, sealed_asked)
            assert_same(got, rules(name).reference(back, options, pairs))
            # Back at another height: another state, its pairs looked at afresh.
            higher = replace(geom, creatures=tuple(
                replace(o, elevation=o.elevation + 15.0) if o is c else o
                for o in geom.creatures))
            sealed_asked.clear()
            got = ruleset.evaluate(higher, options, pairs)
            assert sum(sealed_asked) > 0, (name, k)
            assert_same(got, rules(name).reference(higher, options, pairs))


def test_a_rider_on_the_same_mount_is_the_same_object_snapshot_after_snapshot() -> None:
    """pf2 fights a rider from its mount's space (`mounted_scene`): the same rider and
    mount objects give the same rider object each time (so what is kept per creature
    object holds for it), and a mount that moved gives a rider where the mount now is."""
    from rulesets.pf2 import mounted_scene

    geom = dressed(1)
    riders = [c for c in geom.creatures if c.mount is not None]
    assert riders
    first, _ = mounted_scene(geom)
    again, _ = mounted_scene(replace(geom, creatures=tuple(geom.creatures)))
    for c, d in zip(first.creatures, again.creatures, strict=True):
        assert c is d
    steed_id = riders[0].mount
    moved_geom = replace(geom, creatures=tuple(
        replace(c, x=c.x + 300.0) if c.id == steed_id else c for c in geom.creatures))
    moved, mounts = mounted_scene(moved_geom)
    rider = next(c for c in moved.creatures if c.id == riders[0].id)
    assert rider.x == mounts[riders[0].id].x == next(
        c for c in geom.creatures if c.id == steed_id).x + 300.0


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.parametrize("kind", [GridKind.SQUARE, GridKind.HEXODDR, GridKind.HEXEVENQ],
                         ids=lambda k: k.name)
def test_fast_equals_reference_with_banded_walls_sealing(
        name: str, kind: GridKind, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sealing walk takes a banded wall holding a pair's whole vertical reach as a
    plain one for a whole table (`openings.banded_walk`; a move's few pairs are left to
    the later proofs). Here for every call, on dressed scenes, whose walls have bands of
    every kind: the pairs it seals have no line of effect, and the answers are the
    reference's."""
    monkeypatch.setattr(openings, "BANDED_MIN_PAIRS", 0)
    found = banded_walks(monkeypatch)
    for seed in (1, 2, 3):
        geom = dress(generate(30, 120, seed).geom, seed)
        if kind is not GridKind.SQUARE:
            geom = on_hex(geom, kind, seed)
        options = OPTIONS[name]["default"]
        assert_same(rules(name).evaluate(geom, options),
                    rules(name).reference(geom, options))
    assert sum(found) > 0
    # A map whose every wall has a band (Wall Height on all of them): no plain wall at all,
    # and the banded ones seal.
    found.clear()
    geom = generate(30, 120, 2).geom
    geom = replace(geom, walls=tuple(replace(w, top=30.0) for w in geom.walls))
    if kind is not GridKind.SQUARE:
        geom = on_hex(geom, kind, 2)
    assert_same(rules(name).evaluate(geom, options), rules(name).reference(geom, options))
    assert sum(found) > 0


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_a_band_level_with_both_heads_does_not_seal_them(name: str) -> None:
    """A band whose top is exactly the two creatures' heads does not hold them whole: a
    line between them rounds over the wall. A whole table (the banded walk at its real
    threshold) gives the reference's answers, line of effect over the wall and cover,
    and the same as asking one pair."""
    geom = heads_level_with_a_band()
    options = OPTIONS[name]["default"]
    table = rules(name).evaluate(geom, options)
    assert_same(table, rules(name).reference(geom, options))
    one = rules(name).evaluate(geom, options, [("L0", "R0")])
    assert [a for a in table if (a.attacker, a.target) == ("L0", "R0")] == one
    assert all(a.loe for a in one)
