"""Golden scenario files: a scene, queries and the modifiers the rulebook expects.

Each file in tests/golden/ is one case (JSON):

    {
      "description": "what the case shows, in game terms",
      "rule": "the seed sentence (or SRD rule) it checks",
      "ruleset": "dnd35", "options": {},
      "scene": { ...exactly as in scene.load... },
      "queries": [
        {"attacker": "a", "target": "b", "attack": "ranged",
         "expect": {"loe": true, "cover": "cover",
                    "modifiers": [{"stat": "ac", "value": 4, "kind": "cover"}, ...],
                    "flags": {"can_hide": true},
                    "flankers": ["c"]}}
      ]
    }

A case may also (or instead, with "queries": []) hold area effects:

      "areas": [
        {"template": {"t": "circle", "x": 250, "y": 250, "distance": 10},
         "expect": [{"token": "b", "cover": "lesser",
                     "modifiers": [{"stat": "reflex", "value": 2, "kind": "circumstance"}],
                     "flags": {"reflex_degree_better": false}, "obstructions": 1}]}
      ]

The `expect` list of an area names exactly the affected tokens (any order); each entry is
compared like a query's expectation, plus `obstructions` when present.

A case with ruleset "realms" (hex or square grid) may also resolve shots by the friendly-fire rule:

      "friendlyfire": [
        {"request": {"attacker": "a", "defense": {"t": 13, "c": 11}, "bonus": 2,
                     "attacks": [{"target": "t", "dice": [9, 12], "d10": 6}]},
         "expect": [{"cover": "three_quarters", "slot": 6, "struck": "c",
                     "moved": [11, 14], "hitStruck": true}]}
      ]

Each `expect` entry is one attack of the reply; the keys it lists are compared exactly
(`dice` and `moved` as the raw faces, `candidates` as the token, or null, of slots 1..8).

`visible` (pf1's measured share) is compared to 0.001 when present.
`modifiers` is compared exactly as a multiset of (stat, value, kind, damage types) when
present (a modifier without `damage` applies to every attack); `flags`
checks only the flags listed; `loe`, `cover` and `flankers` exactly when present.
Evaluation goes through the same validation and document conversion as the server
(parse_request -> scene.load -> ruleset), without sockets.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from rulesets.base import AttackMode
from server import scene as scenes
from server.messages import AreaQuery, FriendlyFireResolve, SceneLoad, parse_request
from server.session import Core
from server.tables import annotation_out

GOLDEN_DIR = Path(__file__).parent / "golden"


def golden_files() -> list[Path]:
    return sorted(GOLDEN_DIR.rglob("*.json"))


def load_scene(case: dict[str, Any]) -> scenes.Scene:
    """The case's scene, through the same validation and conversion as a `scene.load`."""
    request = parse_request({"type": "scene.load", "scene": case["scene"],
                             "ruleset": case.get("ruleset", "dnd35"),
                             "options": case.get("options", {})})
    assert isinstance(request, SceneLoad)
    return scenes.load(request.scene, request.ruleset, request.options, None)


def evaluate_case(case: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(query, actual annotation as on the wire) for every query of a case."""
    scene = load_scene(case)
    out = []
    for q in case["queries"]:
        pair, modes = [(q["attacker"], q["target"])], [AttackMode(q.get("attack", "ranged"))]
        (ann,) = scene.ruleset.annotate(scene.geometry, scene.options, pairs=pair,
                                        modes=modes, lines=True)
        # Without lines a ruleset may take another path (dnd35's columnar rows): the same
        # annotation, lines aside.
        (bare,) = scene.ruleset.annotate(scene.geometry, scene.options, pairs=pair,
                                         modes=modes, lines=False)
        assert bare == msgspec.structs.replace(ann, lines=None), (q, bare, ann)
        out.append((q, msgspec.to_builtins(annotation_out(ann))))
    return out


def evaluate_areas(case: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(area, {token: actual hit as on the wire}) for every area of a case."""
    scene = load_scene(case)
    core = Core()
    core.scenes[scene.id] = scene
    out = []
    for area in case.get("areas", []):
        query = parse_request({"type": "area.query", "scene": scene.id,
                               "template": area["template"]})
        assert isinstance(query, AreaQuery)
        result = msgspec.to_builtins(core._area(query))
        out.append((area, {hit["token"]: hit for hit in result["affected"]}))
    return out


def evaluate_friendly_fire(case: dict[str, Any]) -> list[tuple[dict[str, Any],
                                                                list[dict[str, Any]]]]:
    """(entry, the attacks of the actual reply) for every friendly-fire entry of a case."""
    scene = load_scene(case)
    core = Core()
    core.scenes[scene.id] = scene
    out = []
    for entry in case.get("friendlyfire", []):
        request = parse_request({"type": "friendlyfire.resolve", "scene": scene.id,
                                 **entry["request"]})
        assert isinstance(request, FriendlyFireResolve)
        result = msgspec.to_builtins(core._friendly_fire(request))
        out.append((entry, result["attacks"]))
    return out


def ff_mismatches(expect: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    problems = []
    for key, want in expect.items():
        got = actual.get(key)
        if key in ("dice", "moved"):
            got = [d["raw"] for d in got or []]
        elif key == "candidates":
            got = [c.get("token") for c in got or []]
        if got != want:
            problems.append(f"{key}: expected {want!r}, got {got!r}")
    return problems


def mismatches(expect: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    problems = []
    for key in ("loe", "cover", "flankers", "obstructions"):
        if key in expect and expect[key] != actual.get(key, [] if key == "flankers" else None):
            problems.append(f"{key}: expected {expect[key]!r}, got {actual.get(key)!r}")
    if "visible" in expect and (actual.get("visible") is None
                                or abs(actual["visible"] - expect["visible"]) > 1e-3):
        problems.append(f"visible: expected {expect['visible']!r} (to 0.001), "
                        f"got {actual.get('visible')!r}")
    if "modifiers" in expect:
        want = sorted((m["stat"], m["value"], m["kind"], tuple(sorted(m.get("damage", []))))
                      for m in expect["modifiers"])
        got = sorted((m["stat"], m["value"], m["kind"], tuple(sorted(m.get("damage", []))))
                     for m in actual["modifiers"])
        if want != got:
            problems.append(f"modifiers: expected {want}, got {got}")
    for flag, value in expect.get("flags", {}).items():
        if actual["flags"].get(flag) != value:
            problems.append(f"flag {flag}: expected {value}, got {actual['flags'].get(flag)}")
    return problems


def load_case(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = json.loads(path.read_text())
    return case
