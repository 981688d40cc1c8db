"""Enchanted Realms' friendly fire as a request: `friendlyfire.resolve`.

Rule of this module: sans-I/O and read-only. `resolve` checks a request against a Scene
value, resolves each attack on the geometry it is given (the viewers' geometry, without
hidden tokens, for a player or an overlay, so no hidden token is a candidate, the creature
struck or a source of cover) and returns the wire result with every step; the scene is
never changed. The rule itself (who may be struck, the d10, the steps) is
rulesets/friendlyfire.py's; this module checks ids and dice and rolls what the client did
not send, from a seed it reports so the outcome can be replayed.
"""

from __future__ import annotations

import random
from typing import Any

from geometry.model import SceneGeom
from rulesets import friendlyfire
from rulesets.base import AttackMode
from server import scene as scenes
from server.errors import ClientError, ErrorCode
from server.messages import (
    CandidateOut,
    DieOut,
    FriendlyFireOut,
    FriendlyFireResolve,
    FriendlyFireResult,
)


def resolve(scene: scenes.Scene, geom: SceneGeom, request: FriendlyFireResolve,
            seeds: random.Random, viewer: bool = False) -> FriendlyFireResult:
    """The friendly-fire rule for one or more attacks (split dice) of `request` in `scene`,
    traced on `geom`; dice the client did not send are drawn from a seed taken from
    `seeds` (or the request's own seed)."""
    if scene.ruleset.name != "realms":
        raise ClientError(ErrorCode.UNSUPPORTED,
                          f"$.scene: friendly fire is a rule of ruleset 'realms'; scene "
                          f"{request.scene!r} uses {scene.ruleset.name!r}", path="$.scene")
    check_shots(scene, request, viewer)
    seed = request.seed
    rng: random.Random | None = None

    def roll(sides: int) -> int:
        nonlocal rng, seed
        if rng is None:
            if seed is None:
                # 53 bits: a seed a JavaScript client can hold exactly, to send it back.
                seed = seeds.getrandbits(53)
            rng = random.Random(seed)
        return rng.randint(1, sides)

    out = []
    for k, attack in enumerate(request.attacks):
        (ann,) = scene.ruleset.annotate(geom, scene.options,
                                        pairs=[(request.attacker, attack.target)],
                                        modes=[AttackMode.RANGED])
        shot, trigger, first = friendlyfire.aimed(ann, request.defense[attack.target],
                                                  request.bonus)
        rolled: list[str] = []
        dice = attack.dice
        if dice is None:
            assert attack.count is not None
            dice = [roll(20) for _ in range(attack.count)]
            rolled.extend("d20" for _ in dice)

        try:
            cands = friendlyfire.candidates(geom, request.attacker, attack.target)
        except ValueError as exc:
            raise ClientError(ErrorCode.INVALID, f"$.attacks[{k}].target: {exc}",
                              path=f"$.attacks[{k}].target") from None
        faces = friendlyfire.faces(cands)
        if attack.d10 is not None and attack.d10 > faces:
            raise ClientError(ErrorCode.INVALID,
                              f"$.attacks[{k}].d10: the friendly-fire die of this shot has "
                              f"{faces} faces ({len(cands)} candidate cells and "
                              f"{friendlyfire.EMPTY_SLOTS} empty slots), not "
                              f"{attack.d10}", path=f"$.attacks[{k}].d10")

        def d10(attack: Any = attack, rolled: list[str] = rolled, faces: int = faces) -> int:
            if attack.d10 is not None:
                return int(attack.d10)
            rolled.append(f"d{faces}")
            return roll(faces)
        res = friendlyfire.resolve(shot, dice, d10, cands, request.defense, k + 1)
        out.append(FriendlyFireOut(
            attack.target, ann.cover.value, trigger, shot.defense, shot.modifier,
            [_die(d) for d in res.dice], res.hit_target, res.friendly_fire,
            [CandidateOut(c.slot, c.cell, c.centre[0], c.centre[1], c.role, c.token,
                          c.note) for c in cands],
            res.d10, res.slot, res.struck, [_die(d) for d in res.moved],
            res.defense_struck, res.hit_struck, rolled, [first, *res.steps], faces))
    return FriendlyFireResult(request.scene, scene.revision, request.attacker, seed, out,
                              request.id)


def check_shots(scene: scenes.Scene, request: FriendlyFireResolve,
                viewer: bool = False) -> None:
    """Every id names a token of the scene (a visible one, for a viewer) and every attack
    says its dice."""
    scenes.find_token(scene, request.attacker, viewer, "$.attacker")
    for k, attack in enumerate(request.attacks):
        path = f"$.attacks[{k}]"
        scenes.find_token(scene, attack.target, viewer, f"{path}.target")
        if attack.target == request.attacker:
            raise ClientError(ErrorCode.INVALID, f"{path}.target: a token cannot shoot "
                              f"itself ({attack.target!r})", path=f"{path}.target")
        if attack.dice is None and attack.count is None:
            raise ClientError(ErrorCode.INVALID, f"{path}.dice: give the rolled d20s "
                              "(dice) or how many the server rolls (count)",
                              path=f"{path}.dice")
        if attack.dice is not None and attack.count is not None \
                and attack.count != len(attack.dice):
            raise ClientError(ErrorCode.INVALID, f"{path}.count: {attack.count} does not "
                              f"match the {len(attack.dice)} dice given",
                              path=f"{path}.count")
        if attack.target not in request.defense:
            raise ClientError(ErrorCode.INVALID, f"$.defense: no Defense given for the "
                              f"target {attack.target!r} of attack {k}", path="$.defense")
    for tid in request.defense:
        scenes.find_token(scene, tid, viewer, "$.defense")


def _die(d: friendlyfire.Die) -> DieOut:
    return DieOut(d.raw, d.total, d.natural20, d.hit)
