"""server/tables.py alone: `Tables` over a dict of Scene values and a list of
subscriptions, without a Core or a connection. A table brought up to date change by change
equals the ruleset's fresh answer for every pair and mode; a filtered table holds the pairs
followed and no other; the table computed in slices equals the one computed at once; a
scene forgotten mid-way never gets the table computed for it; a viewers' table never
names a hidden token."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import pytest

from bench.scenes import generate
from rulesets.base import AttackMode
from server import ahead as ahead_reading
from server import scene as scenes
from server import tables as annotation_tables
from server.messages import SceneLoad, parse_request
from server.subscriptions import Filter, Subscription
from server.tables import Tables, annotation_out
from tests.test_incremental import _change, _scene


class _Held:
    """What tests.test_incremental._change reads of a Core: its scenes."""

    def __init__(self, held: dict[str, scenes.Scene]) -> None:
        self.scenes = held


def _loaded(message: dict[str, Any]) -> scenes.Scene:
    request = parse_request(message)
    assert isinstance(request, SceneLoad)
    return scenes.load(request.scene, request.ruleset, request.options, None)


def _applied(scene: scenes.Scene, message: dict[str, Any]) -> scenes.Scene:
    request = parse_request(message)
    if isinstance(request, SceneLoad):
        return scenes.load(request.scene, request.ruleset, request.options, scene)
    build, kind, field_name = ahead_reading.BATCHES[type(request)]
    return build(scene, kind, getattr(request, field_name))


def _fresh(scene: scenes.Scene, geom: Any = None) -> dict[tuple[str, str, str], Any]:
    geom = scene.geometry if geom is None else geom
    return {(a.attacker, a.target, a.mode.value): annotation_out(a)
            for a in scene.ruleset.annotate(geom, scene.options)}


def _following(subs: list[Subscription]) -> Any:
    def follows(sid: str) -> Iterable[Subscription]:
        return [s for s in subs if s.scene == sid]
    return follows


@pytest.mark.parametrize("ruleset", ["dnd35", "pf2", "realms"])
def test_a_table_kept_up_to_date_equals_the_fresh_answer(ruleset: str) -> None:
    rng = random.Random(5)
    held = {"s": _loaded(_scene(rng, ruleset))}
    subs = [Subscription("s", False, tuple(AttackMode), True)]
    tables = Tables(held, _following(subs))
    assert tables.current("s", False) == _fresh(held["s"])
    for step in range(25):
        held["s"] = _applied(held["s"], _change(rng, _Held(held), step))
        assert tables.current("s", False) == _fresh(held["s"]), (ruleset, step)
        tables.prepare("s")  # the idle-time copy the next revision starts from


def test_a_filtered_table_holds_the_pairs_followed_only() -> None:
    rng = random.Random(6)
    held = {"s": _loaded(_scene(rng, "dnd35"))}
    sub = Subscription("s", False, tuple(AttackMode), True,
                       filter=Filter(attackers=frozenset({"t1"})))
    tables = Tables(held, _following([sub]))
    for step in range(10):
        table = tables.view_table("s", False, False)
        fresh = _fresh(held["s"])
        assert dict(table.entries) == {k: v for k, v in fresh.items() if k[0] == "t1"}, step
        assert tables.computed(sub, "s")
        held["s"] = _applied(held["s"], _change(rng, _Held(held), step))
        assert not tables.computed(sub, "s")  # a new revision: not computed yet


def test_a_table_computed_in_slices_equals_the_one_computed_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(annotation_tables, "SLICE_S", 0.0005)  # many slices
    rng = random.Random(7)
    message = _scene(rng, "pf2")
    held = {"s": _loaded(message)}
    tables = Tables(held, _following([]))
    steps = list(tables.warm([("s", False, False)]))
    assert len(steps) > 3  # it did yield between slices
    key = ("s", False, False)
    assert tables.cache[key].table == _fresh(held["s"])


def test_slices_grow_towards_their_time_whatever_the_creatures_sizes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A slice quicker than SLICE_S doubles the next, also when its pairs weigh more than
    one (Large and Tiny creatures: `pair_costs`), and its last pair fills it short of the
    size: a table of 2,450 pairs takes a handful of slices, not one per 16 pairs (each
    call has fixed costs: a move on the benchmark scene took half again as long)."""
    monkeypatch.setattr(annotation_tables, "SLICE_S", 1000.0)  # every slice is quick
    scene = generate(50, 300, 1)
    assert {c.width for c in scene.geom.creatures} >= {0.5, 1, 2}
    held = {"s": _loaded(scene.message)}
    tables = Tables(held, _following([]))
    steps = list(tables.warm([("s", False, False)]))
    # 16, 32, 64, ... pairs of Medium creatures: 2,450 pairs (some weighing 2.25 or 4)
    # in at most 10 slices.
    assert len(steps) <= 10, len(steps)
    assert tables.cache[("s", False, False)].table == _fresh(held["s"])


def test_a_scene_forgotten_while_its_table_is_computed_never_gets_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Unloaded mid-way, then loaded again under the same id at revision 1: the table
    begun for the old scene is not installed (same id, same revision, another scene); the
    next round computes the new one's."""
    monkeypatch.setattr(annotation_tables, "SLICE_S", 0.0005)
    rng = random.Random(8)
    held = {"s": _loaded(_scene(rng, "dnd35"))}
    tables = Tables(held, _following([]))
    steps = tables.warm([("s", False, False)])
    next(steps)
    del held["s"]
    tables.forget("s")
    held["s"] = _loaded(_scene(random.Random(80), "dnd35"))
    assert held["s"].revision == 1
    for _ in steps:
        pass
    assert tables.cache[("s", False, False)].table == _fresh(held["s"])
    # Forgotten for good: nothing is computed for it.
    steps = tables.warm([("s", True, False)])  # the table with lines
    next(steps)
    del held["s"]
    tables.forget("s")
    for _ in steps:
        pass
    assert not tables.cache


def test_a_viewers_table_never_names_a_hidden_token() -> None:
    rng = random.Random(9)
    message = _scene(rng, "dnd35")
    message["scene"]["tokens"][2]["hidden"] = True
    held = {"s": _loaded(message)}
    viewer = Subscription("s", False, tuple(AttackMode), True, viewer=True)
    tables = Tables(held, _following([viewer]))
    key, geom = tables.view_key("s", False, True)
    assert key == ("s", False, True)
    assert "t2" not in {c.id for c in geom.creatures}
    table = tables.view_table("s", False, True)
    assert all("t2" not in (k[0], k[1]) for k in table.entries)
    assert dict(table.entries) == _fresh(held["s"], geom)


@pytest.mark.parametrize(("ruleset", "options", "built"), [
    ("pf1", {}, True),  # the visible part by area reads the walls' index
    ("realms", {}, True),  # every covered fraction does
    ("pf1", {"partialCover": "lines"}, False),  # counted lines read no index
    ("dnd35", {}, False),
])
def test_idle_time_builds_the_walls_index_a_ruleset_reads_later(
        ruleset: str, options: dict[str, Any], built: bool) -> None:
    """`Tables.prepare` (the server's idle time after a change) has the scene's ruleset
    build what it keeps per set of walls (`Ruleset.warm`): the first move with a pair at
    cover does not pay for it (6 ms at 20,000 walls)."""
    from geometry.trace import Tracer
    from rulesets import shadows

    message = generate(6, 40, 3).message
    message = {**message, "ruleset": ruleset, "options": options}
    held = {"s": _loaded(message)}
    walls = Tracer(held["s"].geometry).walls  # the walls the index is kept for
    tables = Tables(held, _following([]))
    shadows._WALL_TREES.clear()
    tables.prepare("s")
    assert (id(walls) in shadows._WALL_TREES) is built
    if built:
        lines, tree = shadows._WALL_TREES[id(walls)][1:]
        assert len(lines) == len(walls) and tree is not None
