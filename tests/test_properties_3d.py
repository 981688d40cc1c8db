"""Properties of the third dimension, with Hypothesis on random small scenes.

- the vertical is translation-invariant: raising every token (and every wall's height band)
  by the same amount changes no annotation, in every ruleset; in particular, creatures all at
  one elevation get exactly the flat results;
- an attacker and a target raised far above every wall (all walls with a Wall Height top)
  have no wall cover and line of effect, whatever the walls;
- 3D grid distance: symmetric in its axes, never below the flat distance, and equal to it
  when the vertical steps are zero.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from geometry.square import feet_many
from rulesets import REGISTRY
from rulesets.base import AttackMode, Degree
from tests.test_properties import PROPS, Doc, evaluate, scene_docs, wall_docs

RULESETS = REGISTRY.names()


def _raised(doc: Doc, by: float) -> Doc:
    out = copy.deepcopy(doc)
    for t in out["tokens"]:
        t["elevation"] = t.get("elevation", 0) + by
    for w in out["walls"]:
        band = w.get("flags", {}).get("wall-height")
        if band is None:
            continue
        for end in ("bottom", "top"):
            if band.get(end) is not None:
                band[end] += by
    return out


@st.composite
def banded_scene_docs(draw: st.DrawFn) -> Doc:
    """Random scenes whose walls may have bottoms and tops, tokens at a few elevations."""
    doc = draw(scene_docs())
    for t in doc["tokens"]:
        t["elevation"] = draw(st.sampled_from([0, 0, 0, 5, 10, 20]))
    for w in doc["walls"]:
        if draw(st.booleans()):
            band = {"bottom": draw(st.sampled_from([None, 0, 4, 10])),
                    "top": draw(st.sampled_from([None, 3, 6, 12, 30]))}
            if band["bottom"] is not None and band["top"] is not None \
                    and band["bottom"] >= band["top"]:
                band["bottom"] = None
            w.setdefault("flags", {})["wall-height"] = band
    return doc


def _plain(anns: dict[Any, Any]) -> dict[Any, Any]:
    return {k: (a.loe, a.cover, a.modifiers, a.flags, a.flankers) for k, a in anns.items()}


@pytest.mark.parametrize("ruleset", RULESETS)
@PROPS
@given(doc=scene_docs(), by=st.sampled_from([5, 10, 35, -20]))
def test_one_elevation_for_all_is_the_flat_result(ruleset: str, doc: Doc, by: float) -> None:
    flat = evaluate(doc, ruleset=ruleset)
    lifted = evaluate(_raised(doc, by), ruleset=ruleset)
    assert _plain(flat) == _plain(lifted)


@pytest.mark.parametrize("ruleset", RULESETS)
@PROPS
@given(doc=banded_scene_docs(), by=st.sampled_from([5, 40, -15]))
def test_raising_everything_together_changes_nothing(ruleset: str, doc: Doc,
                                                      by: float) -> None:
    before = evaluate(doc, ruleset=ruleset)
    after = evaluate(_raised(doc, by), ruleset=ruleset)
    assert _plain(before) == _plain(after)


@st.composite
def topped_scene(draw: st.DrawFn) -> Doc:
    doc = draw(scene_docs())
    doc["walls"] = [draw(wall_docs(f"w{k}")) for k in range(draw(st.integers(1, 6)))]
    for w in doc["walls"]:
        w.setdefault("flags", {})["wall-height"] = {"top": draw(st.sampled_from([1, 3, 10,
                                                                                  30]))}
    return doc


@pytest.mark.parametrize("ruleset", RULESETS)
@PROPS
@given(doc=topped_scene(), data=st.data())
def test_far_above_every_wall_no_wall_cover(ruleset: str, doc: Doc,
                                            data: st.DataObject) -> None:
    ids = [t["id"] for t in doc["tokens"]]
    a, t = data.draw(st.permutations(ids))[:2]
    high = copy.deepcopy(doc)
    for tok in high["tokens"]:
        if tok["id"] in (a, t):
            tok["elevation"] = 500
    ann = evaluate(high, pairs=[(a, t)], modes=(AttackMode.RANGED,), ruleset=ruleset)[
        (a, t, "ranged")]
    # Nothing else stands up there: the same two creatures alone, walls or no walls.
    alone = copy.deepcopy(high)
    alone["tokens"] = [tok for tok in alone["tokens"] if tok["id"] in (a, t)]
    alone["walls"] = []
    bare = evaluate(alone, pairs=[(a, t)], modes=(AttackMode.RANGED,), ruleset=ruleset)[
        (a, t, "ranged")]
    assert ann.loe and ann.cover is bare.cover is Degree.NONE, (ann.cover, bare.cover)


@given(st.lists(st.integers(0, 12), min_size=3, max_size=3))
def test_3d_feet_is_symmetric_and_at_least_flat(steps: list[int]) -> None:
    sx, sy, sz = (np.array([v]) for v in steps)
    feet = int(feet_many(sx, sy, sz)[0])
    for perm in ((sy, sz, sx), (sz, sx, sy), (sx, sz, sy)):
        assert int(feet_many(*perm)[0]) == feet
    assert feet >= int(feet_many(sx, sy)[0])
    assert int(feet_many(sx, sy, np.array([0]))[0]) == int(feet_many(sx, sy)[0])
