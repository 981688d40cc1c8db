"""Drowning and suffocating scenario files (tests/breath/*.json, one case per file), run
twice: through the pure state machine (rulesets/breath.py) and through the session core as
`turn.end` requests (wire names, the store, the reply), without sockets.

A case: `con` and `fortitude` of the creature, an optional `start` state (wire names, as in
a `breath` reply), and `turns`, each with an `event` (turn.end fields: attacked, castSpell,
spoke, criticalHits, critFailedDamageSaves, breathing (default false here), con, fortitude,
hp), the `rolls` it needs (exactly those: a die the rules ask for and the file does not
give, or one given and not used, fails the case) and what to `expect` after it: the state
fields, the kinds of the steps in order and, for the turn's save, dc/total/degree/dice/
damage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from rulesets.breath import Breath, Step, StepKind, TurnEvent, degree_of_success, end_turn
from rulesets.breath import Outcome as O
from server.drowning import breath_out
from server.session import Core

BREATH_DIR = Path(__file__).parent / "breath"
CASES = sorted(BREATH_DIR.glob("*.json"))
STATE_FIELDS = ("air", "maxAir", "suffocating", "unconscious", "dead", "checks")
SAVE_FIELDS = ("dc", "total", "degree", "dice", "damage")


class ListedDice:
    """Exactly the dice a case lists for a turn."""

    def __init__(self, rolls: dict[str, Any]) -> None:
        self.d20s = [rolls["d20"]] if "d20" in rolls else []
        self.d10s = list(rolls.get("d10", []))

    def d20(self) -> int:
        assert self.d20s, "the rules rolled a d20 the case does not list"
        return int(self.d20s.pop())

    def d10(self, n: int) -> tuple[int, ...]:
        assert len(self.d10s) == n, f"the rules rolled {n}d10, the case lists {self.d10s}"
        out, self.d10s = tuple(self.d10s), []
        return out

    def check_used(self) -> None:
        assert not self.d20s and not self.d10s, "the case lists dice the rules did not roll"


def _event(case: dict[str, Any], e: dict[str, Any]) -> TurnEvent:
    return TurnEvent(attacked=e.get("attacked", False), cast_spell=e.get("castSpell", False),
                     spoke=e.get("spoke", False), critical_hits=e.get("criticalHits", 0),
                     crit_failed_damage_saves=e.get("critFailedDamageSaves", 0),
                     breathing=e.get("breathing", False), con=e.get("con", case.get("con", 0)),
                     fortitude=e.get("fortitude", case.get("fortitude", 0)), hp=e.get("hp"))


def _start(case: dict[str, Any]) -> Breath:
    s = case.get("start")
    if s is None:
        return Breath.full(case.get("con", 0))
    return Breath(s["maxAir"], s["air"], s["suffocating"], s["checks"], s["unconscious"],
                  s["dead"])


def _wire(state: Breath, steps: tuple[Step, ...]) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(breath_out("t", state, steps, None))
    return out


def _problems(k: int, expect: dict[str, Any], got: dict[str, Any]) -> list[str]:
    out = [f"turn {k}: {f} expected {expect[f]!r}, got {got.get(f)!r}"
           for f in STATE_FIELDS if expect[f] != got.get(f)]
    kinds = [s["event"] for s in got.get("steps", [])]
    if kinds != expect["steps"]:
        out.append(f"turn {k}: steps expected {expect['steps']}, got {kinds}")
    saves = [s for s in got.get("steps", []) if s["event"] == "save"]
    for f in SAVE_FIELDS:
        if f in expect and (not saves or saves[-1].get(f) != expect[f]):
            out.append(f"turn {k}: save {f} expected {expect[f]!r}, got "
                       f"{saves[-1].get(f) if saves else 'no save'!r}")
    return out


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_breath_case_state_machine(path: Path) -> None:
    case = json.loads(path.read_text())
    state = _start(case)
    problems = []
    for k, turn in enumerate(case["turns"]):
        dice = ListedDice(turn.get("rolls", {}))
        state, steps = end_turn(state, _event(case, turn["event"]), dice)
        dice.check_used()
        problems += _problems(k, turn["expect"], _wire(state, steps))
    assert not problems, case["description"] + "\n" + "\n".join(problems)


def _send(core: Core, conn: int, message: dict[str, Any]) -> dict[str, Any]:
    (out,) = core.drain(core.receive(conn, json.dumps(message)))
    reply: dict[str, Any] = json.loads(out.frame)  # type: ignore[union-attr]
    return reply


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_breath_case_through_turn_end(path: Path) -> None:
    case = json.loads(path.read_text())
    core = Core(seed=1)
    conn = core.connect()
    _send(core, conn, {"type": "hello", "protocol": 1, "client": "test"})
    flags = {"con": case.get("con", 0), "fortitude": case.get("fortitude", 0)}
    ack = _send(core, conn, {"type": "scene.load", "ruleset": "degrees", "scene": {
        "id": "s", "grid": {"type": 1}, "tokens": [
            {"id": "t", "x": 0, "y": 0, "flags": {"covercast": flags}}]}})
    assert ack["type"] == "ack", ack
    if "start" in case:
        # A state from earlier turns, as the store keeps it.
        core.store.put_breath("s", "t", msgspec.json.encode(
            breath_out("t", _start(case), (), None)).decode())
    problems = []
    for k, turn in enumerate(case["turns"]):
        request = {"type": "turn.end", "scene": "s", "token": "t", "breathing": False,
                   **turn["event"]}
        if "rolls" in turn:
            request["rolls"] = turn["rolls"]
        reply = _send(core, conn, request)
        assert reply["type"] == "breath", reply
        (got,) = reply["breath"]
        assert "seed" not in got, "the server rolled although the case gave every die"
        problems += _problems(k, turn["expect"], got)
    assert not problems, case["description"] + "\n" + "\n".join(problems)


@pytest.mark.parametrize(("d20", "modifier", "dc", "expected"), [
    (10, 10, 20, O.SUCCESS), (10, 9, 20, O.FAILURE), (10, 20, 20, O.CRITICAL_SUCCESS),
    (10, 0, 20, O.CRITICAL_FAILURE), (10, 1, 20, O.FAILURE), (20, 0, 20, O.CRITICAL_SUCCESS),
    # A natural 1 whose total still beats the DC by 10 is a success; a natural 20 whose
    # total misses it by 10 is a failure.
    (1, 30, 20, O.SUCCESS), (1, 29, 20, O.SUCCESS), (1, 28, 20, O.FAILURE),
    (1, 19, 20, O.FAILURE), (1, 18, 20, O.CRITICAL_FAILURE), (20, -19, 20, O.FAILURE),
    (20, -10, 20, O.FAILURE), (20, -9, 20, O.SUCCESS),
])
def test_degree_of_success(d20: int, modifier: int, dc: int, expected: O) -> None:
    assert degree_of_success(d20, modifier, dc) is expected


def test_every_step_kind_is_covered_by_a_case() -> None:
    seen = {kind for p in CASES for t in json.loads(p.read_text())["turns"]
            for kind in t["expect"]["steps"]}
    assert seen == {k.value for k in StepKind}


class _RandomDice:
    def __init__(self, seed: int) -> None:
        import random

        self.rng = random.Random(seed)

    def d20(self) -> int:
        return self.rng.randint(1, 20)

    def d10(self, n: int) -> tuple[int, ...]:
        return tuple(self.rng.randint(1, 10) for _ in range(n))


def _events() -> Any:
    from hypothesis import strategies as st

    return st.lists(st.builds(
        TurnEvent, attacked=st.booleans(), cast_spell=st.booleans(), spoke=st.booleans(),
        critical_hits=st.integers(0, 3), crit_failed_damage_saves=st.integers(0, 2),
        breathing=st.booleans(), con=st.integers(-5, 6), fortitude=st.integers(-5, 30),
        hp=st.one_of(st.none(), st.integers(0, 50))), max_size=25)


def test_breath_invariants() -> None:
    """Whatever happens: air stays within 0..max, only an out-of-air creature suffocates,
    saves are counted one per suffocating turn end, breathing empties nothing, and death
    is final."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=200, deadline=None)
    @given(_events(), st.integers(0, 2**32))
    def check(events: list[TurnEvent], seed: int) -> None:
        state = Breath.full(0)
        dice = _RandomDice(seed)
        for event in events:
            before = state
            state, steps = end_turn(state, event, dice)
            assert 0 <= state.air <= state.max_air
            assert not state.suffocating or state.air == 0
            if before.dead:
                assert state == before
                continue
            if event.breathing:
                assert (state.air, state.suffocating, state.checks) == (state.max_air, False, 0)
            saves = [s for s in steps if s.kind is StepKind.SAVE]
            assert len(saves) <= 1
            if not event.breathing:
                assert len(saves) == state.checks - before.checks
                assert bool(saves) == before.suffocating or steps[0].kind in (
                    StepKind.SPOKE, StepKind.CRITICAL_HIT, StepKind.CRIT_FAILED_SAVE,
                    StepKind.OUT_OF_AIR)
            if state.dead:
                assert saves and saves[0].outcome is O.CRITICAL_FAILURE

    check()
