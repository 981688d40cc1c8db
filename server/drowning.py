"""Drowning and suffocating: each token's air, the `turn.end` and `breath.get` requests.

Rule of this module: sans-I/O. `Air` keeps, per scene, each token's air as the store holds
it (read once, on first use) and answers the two requests on a Scene value it is given; it
never sees a connection or a subscription. A turn end is stored (one transaction) before
the new state is kept in memory or returned, so what a client is told was applied is what
a restarted server reads back. A token's entry is replaced, never changed in place, so a
subscriber holding the entries it was sent compares them by identity. The rules of air
and saves are rulesets/breath.py's; this module only feeds them the request, the
scene's water and the dice.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

import msgspec

from geometry.water import submerged
from rulesets.breath import Breath, Step, TurnEvent, end_turn
from server import scene as scenes
from server.errors import ClientError, ErrorCode, unavailable
from server.messages import BreathGet, BreathOut, BreathState, Rolls, StepOut, TurnEnd
from server.store import Store, StoreUnavailable

_ENCODE = msgspec.json.Encoder()
_DECODE = msgspec.json.Decoder(BreathOut)


class Air:
    """The air of every token of every scene, backed by `store`; `seeds` draws the seed
    of dice the server rolls for a client that sent none."""

    def __init__(self, store: Store, seeds: random.Random) -> None:
        self.store = store
        self._seeds = seeds
        self._tables: dict[str, dict[str, BreathOut]] = {}

    def table(self, sid: str) -> dict[str, BreathOut]:
        """Every stored air of scene `sid`, deleted tokens' included."""
        table = self._tables.get(sid)
        if table is None:
            try:
                stored = self.store.scene_breath(sid)
            except StoreUnavailable as exc:
                raise unavailable(exc, "the air of its tokens is unknown for now") from None
            table = {t: _DECODE.decode(text) for t, text in stored.items()}
            self._tables[sid] = table
        return table

    def visible(self, scene: scenes.Scene, viewer: bool = False) -> dict[str, BreathOut]:
        """The stored air of the scene's current tokens (a deleted token's is kept), without
        hidden tokens' for a viewer."""
        tokens = scene.tokens
        return {t: v for t, v in self.table(scene.id).items()
                if t in tokens and not (viewer and tokens[t].hidden)}

    def forget(self, sid: str) -> None:
        """Drop the scene's air from memory (what the store keeps is the caller's: an
        unload for good deletes it there too)."""
        self._tables.pop(sid, None)

    def turn_end(self, scene: scenes.Scene, request: TurnEnd) -> BreathOut:
        """A token's turn ended: spend or restore its air, roll its suffocation save and
        store the new state (one transaction); the new state, with every step."""
        token = scenes.find_token(scene, request.token)
        own = token.flags.covercast
        con = request.con if request.con is not None else (
            own.con if own is not None and own.con is not None else 0)
        fortitude = request.fortitude if request.fortitude is not None else (
            own.fortitude if own is not None and own.fortitude is not None else 0)
        breathing = request.breathing
        if breathing is None:
            geom = scene.geometry
            k = next(i for i, c in enumerate(geom.creatures) if c.id == token.id)
            breathing = not bool(submerged(geom)[k])
        table = self.table(scene.id)
        before = _value(table[token.id]) if token.id in table else Breath.full(con)
        # 53 bits: a seed a JavaScript client can hold exactly, to send it back.
        seed = request.seed if request.seed is not None else self._seeds.getrandbits(53)
        dice = _Dice(request.rolls, seed)
        event = TurnEvent(attacked=request.attacked, cast_spell=request.cast_spell,
                          spoke=request.spoke, critical_hits=request.critical_hits,
                          crit_failed_damage_saves=request.crit_failed_damage_saves,
                          breathing=breathing, con=con, fortitude=fortitude, hp=request.hp)
        after, steps = end_turn(before, event, dice)  # raises on bad rolls: nothing stored
        out = breath_out(token.id, after, steps, seed if dice.rolled else None)
        try:
            self.store.put_breath(scene.id, token.id, _ENCODE.encode(out).decode())
        except StoreUnavailable as exc:
            raise unavailable(exc, "the turn end was not applied") from None
        self._tables[scene.id] = {**table, token.id: out}
        return out

    def get(self, scene: scenes.Scene, request: BreathGet, viewer: bool = False) -> BreathState:
        """One token's air (full air if none is stored yet), or every stored one."""
        if request.token is None:
            return BreathState(scene.id, list(self.visible(scene, viewer).values()),
                               request.id)
        token = scenes.find_token(scene, request.token, viewer)
        stored = self.table(scene.id).get(token.id)
        if stored is None:
            own = token.flags.covercast
            con = own.con if own is not None and own.con is not None else 0
            stored = breath_out(token.id, Breath.full(con), (), None)
        return BreathState(scene.id, [stored], request.id)


class _Dice:
    """The client's dice where it sent them, else dice drawn from random.Random(seed) in the
    order the rules need them (the d20, then each d10), so an outcome can be replayed."""

    def __init__(self, rolls: Rolls | None, seed: int) -> None:
        self.given = rolls if rolls is not None else Rolls()
        self.rng = random.Random(seed)
        self.rolled = False

    def d20(self) -> int:
        if self.given.d20 is not None:
            return self.given.d20
        self.rolled = True
        return self.rng.randint(1, 20)

    def d10(self, n: int) -> tuple[int, ...]:
        if self.given.d10 is not None:
            if len(self.given.d10) != n:
                raise ClientError(ErrorCode.INVALID,
                                  f"$.rolls.d10: this save's damage is {n}d10, got "
                                  f"{len(self.given.d10)} "
                                  f"{'die' if len(self.given.d10) == 1 else 'dice'} "
                                  f"{self.given.d10}",
                                  path="$.rolls.d10")
            return tuple(self.given.d10)
        self.rolled = True
        return tuple(self.rng.randint(1, 10) for _ in range(n))


def step_out(s: Step) -> StepOut:
    return StepOut(s.kind.value, s.air, s.detail, s.dc, s.d20, s.modifier, s.total,
                   None if s.outcome is None else s.outcome.value,
                   None if s.dice is None else list(s.dice), s.damage)


def breath_out(token: str, b: Breath, steps: Iterable[Step], seed: int | None) -> BreathOut:
    """A token's air as it travels on the wire (and as the store keeps it)."""
    return BreathOut(token, b.air, b.max_air, b.suffocating, b.unconscious, b.dead, b.checks,
                     b.next_dc if b.suffocating and not b.dead else None,
                     b.next_dice if b.suffocating and not b.dead else None,
                     [step_out(s) for s in steps], seed)


def _value(o: BreathOut) -> Breath:
    return Breath(o.max_air, o.air, o.suffocating, o.checks, o.unconscious, o.dead)
