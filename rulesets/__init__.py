"""Game systems: each maps geometry facts to modifiers.

Rule of this package: rulesets import `geometry`, never `server`; `REGISTRY` finds them by
name and lists the valid names when one is wrong.
"""

from rulesets.base import Registry, Ruleset, UnknownRuleset
from rulesets.degrees import CoverDegrees
from rulesets.dnd5e import Dnd5e
from rulesets.dnd35 import Dnd35
from rulesets.pf1 import Pf1
from rulesets.pf2 import Pf2
from rulesets.realms import Realms

REGISTRY = Registry()
REGISTRY.register(Dnd35())
REGISTRY.register(Pf1())
REGISTRY.register(CoverDegrees())
REGISTRY.register(Realms())
REGISTRY.register(Pf2())
REGISTRY.register(Dnd5e())


def forget_kept() -> None:
    """Forget what rulesets keep across revisions of a scene (realms' covered fractions,
    degrees' and pf2's line of effect per pair of creature objects, the line of effect
    of pairs of spaces kept with the walls, the hexes between hex footprints, the walls
    last found sealing pairs of spaces), so that the next evaluation is a first
    subscription's. Benchmarks time first subscriptions so."""
    from geometry.hex import forget_measured
    from geometry.kernel import forget_hints
    from geometry.openings import forget_known
    from rulesets import kept, realms

    realms._MEASURES.clear()
    kept.forget()
    forget_known()
    forget_measured()
    forget_hints()


__all__ = ["REGISTRY", "Registry", "Ruleset", "UnknownRuleset", "forget_kept"]
