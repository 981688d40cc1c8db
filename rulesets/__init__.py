"""Game systems: each maps geometry facts to modifiers.

Rule of this package: rulesets import `geometry`, never `server`; `REGISTRY` finds them by
name and lists the valid names when one is wrong.
"""

from rulesets.base import Registry, Ruleset, UnknownRuleset
from rulesets.degrees import CoverDegrees
from rulesets.dnd35 import Dnd35
from rulesets.pf1 import Pf1
from rulesets.pf2 import Pf2

REGISTRY = Registry()
REGISTRY.register(Dnd35())
REGISTRY.register(Pf1())
REGISTRY.register(CoverDegrees())
REGISTRY.register(Pf2())

__all__ = ["REGISTRY", "Registry", "Ruleset", "UnknownRuleset"]
