"""What keeps one token move cheap (issue 6), held to the straightforward computation: a
token change rebuilds only the creatures whose documents changed and keeps the walls' and
regions' tuples, and a new revision's annotation table replaces recomputed entries in
place (a clone of the last one, never a rebuilt dict)."""

from __future__ import annotations

import random
from typing import Any

import msgpack
import msgspec
import pytest

from geometry.square import grid_steps_many, within_reach_many
from server.scene import to_geometry
from server.session import Core
from tests.test_incremental import _change, _scene, _send


def _core(seed: int, ruleset: str = "dnd35") -> tuple[Core, int, random.Random]:
    rng = random.Random(seed)
    core = Core()
    gm = core.connect()
    _send(core, gm, {"type": "hello", "protocol": 1, "client": "t"})
    assert _send(core, gm, _scene(rng, ruleset))[gm][0]["type"] == "ack"
    return core, gm, rng


def test_a_token_change_rebuilds_only_its_creatures() -> None:
    for seed in (1, 2, 3):
        core, gm, rng = _core(seed)
        before = core.scenes["s"]
        for step in range(30):
            old_geom = before.geometry
            _send(core, gm, _change(rng, core, step))
            scene = core.scenes["s"]
            geom = scene.geometry
            # Whatever was reused, it is the geometry built from scratch.
            assert geom == to_geometry(scene), f"seed {seed} step {step}"
            if scene.walls is before.walls and scene.regions is before.regions:
                assert geom.walls is old_geom.walls
                assert geom.regions is old_geom.regions and geom.water is old_geom.water
                kept = {c.id: c for c in old_geom.creatures}
                for c in geom.creatures:
                    same_doc = before.tokens.get(c.id) is scene.tokens[c.id]
                    assert (c is kept.get(c.id)) == same_doc, (seed, step, c.id)
            before = scene


def _subscribed_core(seed: int) -> tuple[Core, int, random.Random]:
    """A scene as `_core` loads it, with one subscriber."""
    core, gm, rng = _core(seed)
    sub = core.connect()
    _send(core, sub, {"type": "hello", "protocol": 1, "client": "t"})
    _send(core, sub, {"type": "subscribe", "scene": "s"})
    return core, gm, rng


def _random_move(core: Core, gm: int, rng: random.Random) -> None:
    """One token of scene "s" to a random square, its deltas resolved."""
    token = rng.choice(list(core.scenes["s"].tokens))
    frame = {"type": "token.update", "scene": "s",
             "tokens": [{"id": token, "x": rng.randrange(0, 12) * 100,
                         "y": rng.randrange(0, 12) * 100}]}
    core.drain(core.receive(gm, msgpack.packb(frame)))


def test_a_move_replaces_table_entries_in_place() -> None:
    core, gm, rng = _subscribed_core(4)
    moved = 0
    for step in range(12):
        old = core.tables.current("s", False)
        _random_move(core, gm, rng)
        new = core.tables.current("s", False)
        assert new is not old  # the subscriber's table is never changed under it
        # Same pairs, same order: recomputed entries were replaced, not deleted and added
        # again (a table with deletions is copied entry by entry, not cloned).
        assert list(new) == list(old), f"step {step}"
        unchanged = [k for k in old if old[k] == new[k]]
        assert all(new[k] is old[k] for k in unchanged)
        moved += len(unchanged) < len(old)
    assert moved  # some move changed some annotation


def test_tables_stay_untracked_by_the_collector() -> None:
    # A table is written only with the scene's own key tuples, which the collector untracks
    # once it has seen them: a dict written with a tuple it still tracks (one just built) is
    # tracked from then on, and every young collection walks all of its entries.
    import gc

    core, gm, rng = _subscribed_core(5)
    changed = 0
    for step in range(8):
        gc.collect()  # what is there now has been seen
        before = core.tables.current("s", False)
        assert not gc.is_tracked(before), f"step {step}"
        _random_move(core, gm, rng)
        after = core.tables.current("s", False)
        changed += any(after[k] is not before[k] for k in before if k in after)
        assert not gc.is_tracked(after), f"step {step}"
    assert changed  # entries were replaced, so the test saw the writes it is about


def test_an_engine_after_a_move_sees_the_moved_creatures_only() -> None:
    # The corner engine patches the previous engine's per-creature stacks where creatures
    # changed: facts after moves (one token stepping, one growing to a large one, a new
    # one in the place of another) equal those of an engine built from nothing.
    from dataclasses import replace

    from bench.scenes import generate
    from geometry.model import Size
    from rulesets import corner
    from rulesets.base import AttackMode
    from rulesets.dnd35 import Dnd35

    geom = generate(24, 60, 3).geom
    options = Dnd35.Options()
    rows = [(a, t, m) for a in range(len(geom.creatures)) for t in range(len(geom.creatures))
            if a != t for m in AttackMode]
    cs = list(geom.creatures)
    big = next(k for k, c in enumerate(cs) if c.width == 1)
    steps = [
        {0: replace(cs[0], x=cs[0].x + geom.grid.size)},
        {big: replace(cs[big], width=2, height=2, size=Size.LARGE)},
        {3: replace(cs[5], id=cs[3].id)},
    ]
    corner.CornerEngine(geom, options).evaluate(rows, False)
    for step in steps:
        for k, c in step.items():
            cs[k] = c
        moved = replace(geom, creatures=tuple(cs))
        patched = corner.CornerEngine(moved, options)
        assert patched._moved == sorted(step)  # it did start from the last engine's stacks
        after_move = patched.evaluate(rows, False)
        corner._LAST_STACKS.clear()
        fresh = corner.CornerEngine(moved, options).evaluate(rows, False)
        assert after_move == fresh
        geom = moved  # the last engine (the fresh one) is of this geometry
    # A viewer's engine (a hidden token left out) in between does not push the gm's out.
    viewer = replace(geom, creatures=geom.creatures[1:])
    corner.CornerEngine(viewer, options).evaluate([(0, 1, AttackMode.RANGED)], False)
    again = corner.CornerEngine(geom, options)
    assert again._moved == [] and again._before_stacks
    assert again.evaluate(rows, False) == fresh


def test_flanking_asks_only_for_targets_within_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    # threat_rows leaves out targets no attacker of the pairs asked for can reach with a
    # melee or reach attack: the annotations (flanking included) are those computed with
    # the threats of every target, on crowded scenes where flanking happens.
    import numpy as np

    from rulesets import REGISTRY
    from rulesets.corner import CornerEngine
    from server.messages import SceneLoad
    from server.scene import load

    def every_target(self: CornerEngine, pairs: Any) -> list[tuple[int, int]]:
        targets = sorted({t for _, t in pairs})
        n = len(self.cs)
        tt = np.repeat(np.array(targets, dtype=np.intp), n)
        bb = np.tile(np.arange(n), len(targets))
        sx, sy = grid_steps_many(self._space_arr[bb], self._space_arr[tt], self.grid.size)
        near = within_reach_many(sx, sy, self._reach[bb], self._vsteps(bb, tt)) & (bb != tt)
        return list(zip(bb[near].tolist(), tt[near].tolist(), strict=True))

    flanked = 0
    for name in ("dnd35", "pf1"):
        ruleset = REGISTRY.get(name)
        for seed in range(12):
            rng = random.Random(seed)
            message = _scene(rng, name)
            for t in message["scene"]["tokens"]:  # crowd them: 9 tokens in 4 x 4 squares
                t["x"], t["y"] = rng.randrange(0, 4) * 100, rng.randrange(0, 4) * 100
            request = msgspec.convert(message, SceneLoad)
            geom = load(request.scene, request.ruleset, request.options, None).geometry
            options = ruleset.Options()
            ids = [c.id for c in geom.creatures]
            # One creature's attacks (a move's row): a target it reaches only with a reach
            # weapon has no other attacker here to bring it in.
            pairs = [(ids[1], t) for t in ids if t != ids[1]]
            got = ruleset.annotate(geom, options, pairs=pairs)
            with monkeypatch.context() as m:
                m.setattr(CornerEngine, "threat_rows", every_target)
                want = ruleset.annotate(geom, options, pairs=pairs)
            assert got == want, (name, seed)
            flanked += sum(bool(a.flankers) for a in got if a.mode.value == "reach")
    assert flanked


@pytest.mark.parametrize("every_wall", [True, False])
def test_reused_block_hits_equal_a_fresh_trace(every_wall: bool) -> None:
    # Batches small enough for the tracer's reuse: a first batch traced fresh, then batches
    # mixing its blocks (in another order) with new ones; every batch's wall hits equal
    # those of tracing it from scratch (no reuse).
    import numpy as np

    from bench.scenes import generate
    from geometry.trace import Tracer

    geom = generate(30, 300, 5).geom
    rng = np.random.default_rng(5)
    side = max(w for wall in geom.walls for w in (wall.x0, wall.x1, wall.y0, wall.y1))

    def blocks(n: int) -> tuple[Any, Any]:
        return rng.uniform(0, side, (n, 4, 2)), rng.uniform(0, side, (n, 4, 2))

    def as_set(hits: tuple[Any, Any, Any]) -> set[tuple[int, int, int]]:
        return set(zip(*(h.tolist() for h in hits), strict=True))

    tracer = Tracer(geom)
    s0, e0 = blocks(40)
    batches = [(s0, e0)]
    for _ in range(4):
        s1, e1 = blocks(25)
        pick = rng.permutation(40)[:30]
        batches.append((np.concatenate([s0[pick], s1]), np.concatenate([e0[pick], e1])))
    for s, e in batches:
        got = tracer._walls_reused(s, e, every_wall)
        want = tracer._walls(s, e, every_wall)
        # The hits (the sealed marks are a hint, which the batch's size may change).
        assert as_set(got[:3]) == as_set(want[:3])
