"""Drowning and suffocating (seed 002, Pathfinder 2e): a token's air, turn by turn.

Rule of this module: a pure state machine. `Breath` is a frozen value, `end_turn` maps a
state and what the creature did during its turn to the next state and every step taken;
dice come from a `Dice` the caller supplies (the client's rolls or a seeded generator), so
an outcome can be replayed. Nothing here stores, sends or knows about scenes; the server
keeps the states (server/store.py). The seed's sentences, and how each is read, are in
docs/rulesets.md ("Drowning and suffocating").
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Protocol

#: Rounds of air before the Constitution modifier ("최대 5 + 건강 수정치 만큼의 라운드").
BASE_AIR = 5
#: The suffocation save: DC 20, +5 per check after the first; 1d10, +1d10 per later check.
FIRST_DC = 20
DC_STEP = 5
FIRST_DICE = 1
#: Air spent at the end of a turn: 1, or 2 after attacking or casting a spell that turn.
SPEND_IDLE = 1
SPEND_BUSY = 2
#: Air lost per critical hit taken or critically failed save against a damaging effect.
SPEND_CRITICAL = 1


class Outcome(enum.Enum):
    """Pathfinder 2e's four degrees of success, worst first."""

    CRITICAL_FAILURE = "critical_failure"
    FAILURE = "failure"
    SUCCESS = "success"
    CRITICAL_SUCCESS = "critical_success"


_LADDER = list(Outcome)


def degree_of_success(d20: int, modifier: int, dc: int) -> Outcome:
    """PF2 Core Rulebook, Step 4 (Degree of Success): meet or beat the DC to succeed, by 10
    or more to succeed critically; miss it by 10 or more to fail critically. A natural 20
    makes the result one degree better, a natural 1 one degree worse."""
    total = d20 + modifier
    if total >= dc + 10:
        step = 3
    elif total >= dc:
        step = 2
    elif total <= dc - 10:
        step = 0
    else:
        step = 1
    if d20 == 20:
        step = min(3, step + 1)
    elif d20 == 1:
        step = max(0, step - 1)
    return _LADDER[step]


class Dice(Protocol):
    """Where the suffocation save's dice come from."""

    def d20(self) -> int: ...

    def d10(self, n: int) -> tuple[int, ...]: ...


def max_air(con: int) -> int:
    """Rounds a creature can hold its breath: 5 + its Constitution modifier (at least 0)."""
    return max(0, BASE_AIR + con)


@dataclass(frozen=True, slots=True)
class Breath:
    """A creature's air. `checks`: suffocation saves made since it ran out of air;
    `unconscious`: from running out of air (kept while at 0 HP after breathing again)."""

    max_air: int
    air: int
    suffocating: bool = False
    checks: int = 0
    unconscious: bool = False
    dead: bool = False

    @classmethod
    def full(cls, con: int) -> Breath:
        top = max_air(con)
        return cls(top, top)

    @property
    def next_dc(self) -> int:
        return FIRST_DC + DC_STEP * self.checks

    @property
    def next_dice(self) -> int:
        return FIRST_DICE + self.checks


class StepKind(enum.Enum):
    BREATHE = "breathe"
    SPOKE = "spoke"
    CRITICAL_HIT = "critical_hit"
    CRIT_FAILED_SAVE = "crit_failed_save"
    END_OF_TURN = "end_of_turn"
    OUT_OF_AIR = "out_of_air"
    SAVE = "save"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class Step:
    """One thing that happened to the air; `air` is what is left after it."""

    kind: StepKind
    air: int
    detail: str
    dc: int | None = None
    d20: int | None = None
    modifier: int | None = None
    total: int | None = None
    outcome: Outcome | None = None
    dice: tuple[int, ...] | None = None
    damage: int | None = None


@dataclass(frozen=True, slots=True)
class TurnEvent:
    """What a creature did during the turn that just ended (critical hits taken and saves
    critically failed since its previous turn end are counted here), whether it can breathe
    now, its Constitution and Fortitude modifiers and, if known, its Hit Points."""

    attacked: bool = False
    cast_spell: bool = False
    spoke: bool = False
    critical_hits: int = 0
    crit_failed_damage_saves: int = 0
    breathing: bool = False
    con: int = 0
    fortitude: int = 0
    hp: int | None = None


def end_turn(state: Breath, event: TurnEvent, dice: Dice) -> tuple[Breath, tuple[Step, ...]]:
    """The state after the creature's turn ends, and each step on the way."""
    if state.dead:
        return state, (Step(StepKind.DEAD, state.air, "dead: suffocated"),)
    top = max_air(event.con)
    if event.breathing:
        return _breathe(state, top, event.hp)
    steps: list[Step] = []
    s = replace(state, max_air=top, air=min(state.air, top))
    if not s.suffocating:
        if event.spoke:
            s = replace(s, air=0)
            steps.append(Step(StepKind.SPOKE, 0, "spoke: all remaining air lost"))
        for kind, count, what in (
                (StepKind.CRITICAL_HIT, event.critical_hits, "critically hit"),
                (StepKind.CRIT_FAILED_SAVE, event.crit_failed_damage_saves,
                 "critically failed a save against a damaging effect")):
            if count and s.air > 0:
                s = replace(s, air=max(0, s.air - SPEND_CRITICAL * count))
                steps.append(Step(kind, s.air, f"{what} {count}x: {SPEND_CRITICAL} round "
                                               "of air lost each time"))
        if s.air == 0:
            # Out of air during the turn: suffocating when the turn ends, so it saves now.
            s = _run_out(s, steps, "")
        else:
            spend = SPEND_BUSY if event.attacked or event.cast_spell else SPEND_IDLE
            why = "attacked or cast a spell" if spend == SPEND_BUSY else "held breath"
            s = replace(s, air=max(0, s.air - spend))
            steps.append(Step(StepKind.END_OF_TURN, s.air,
                              f"end of turn, {why}: {spend} round(s) of air spent"))
            if s.air == 0:
                # Ran out at this very turn end: the first save is at the next one.
                return _run_out(s, steps, "; first Fortitude save at the end of the next "
                                          "turn"), tuple(steps)
    if s.suffocating:
        s = _save(s, event.fortitude, dice, steps)
    return s, tuple(steps)


def _run_out(s: Breath, steps: list[Step], more: str) -> Breath:
    steps.append(Step(StepKind.OUT_OF_AIR, 0, "out of air: unconscious and suffocating"
                                              + more))
    return replace(s, air=0, suffocating=True, unconscious=True)


def _save(s: Breath, fortitude: int, dice: Dice, steps: list[Step]) -> Breath:
    """The end-of-turn Fortitude save of a suffocating creature."""
    dc, n = s.next_dc, s.next_dice
    d20 = dice.d20()
    outcome = degree_of_success(d20, fortitude, dc)
    s = replace(s, checks=s.checks + 1)
    rolled: tuple[int, ...] | None = None
    if outcome is Outcome.CRITICAL_FAILURE:
        detail = f"Fortitude DC {dc} critically failed: dies"
    elif outcome is Outcome.FAILURE:
        rolled = dice.d10(n)
        detail = f"Fortitude DC {dc} failed: {n}d10 damage"
    else:
        detail = f"Fortitude DC {dc} {outcome.value.replace('_', ' ')}: no damage"
    steps.append(Step(StepKind.SAVE, 0, detail, dc=dc, d20=d20, modifier=fortitude,
                      total=d20 + fortitude, outcome=outcome, dice=rolled,
                      damage=None if rolled is None else sum(rolled)))
    return replace(s, dead=outcome is Outcome.CRITICAL_FAILURE)


def _breathe(state: Breath, top: int, hp: int | None) -> tuple[Breath, tuple[Step, ...]]:
    """Air again: suffocation stops, air is full, and the creature wakes unless at 0 HP."""
    awake = not (state.unconscious and hp == 0)
    detail = f"breathing: air restored to {top}"
    if state.suffocating or state.unconscious:
        detail += "; no longer suffocating" + (
            ", conscious again" if awake else ", still unconscious at 0 HP")
    s = Breath(top, top, unconscious=not awake)
    return s, (Step(StepKind.BREATHE, top, detail),)
