"""Which pairs of an annotation table a creature in the way can still change.

Rule of this module: the answer is read from a table (annotations without lines, as the
wire carries them) and the ruleset's word on each degree, never from geometry. A new
revision's answer is the previous one patched with the keys that changed, or built again
when the scene's creatures (or their order) differ. A change uses it to leave out of its
"in the way" work the pairs already at a degree creatures cannot move (geometry.incremental,
`may_change`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from geometry.kernel import BoolArray
from server.messages import AnnotationOut

Key = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class Settled:
    """`may[i, j]`: some annotation of (order[i], order[j]) in a mode where creatures in the
    way count is missing from the table, or stands at a degree a creature stepping into or
    out of the way can change."""

    order: tuple[str, ...]
    index: dict[str, int]
    may: BoolArray
    #: The modes (wire values) where creatures in the way count, and per degree (wire
    #: value) whether a creature in the way can change it: what `may` was read with.
    way_values: tuple[str, ...]
    can_change: Mapping[str, bool]

    def view(self, ids: Sequence[str]) -> BoolArray:
        """`may` for creatures in this order (a creature the table does not know: may)."""
        if tuple(ids) == self.order:
            return self.may
        if not self.order:
            # Read from a table without creatures (a scene's tokens all deleted, or none
            # yet): nothing is known, every pair may change (there is no row to take).
            return np.ones((len(ids), len(ids)), dtype=bool)
        pos = np.array([self.index.get(i, -1) for i in ids], dtype=np.intp)
        known = pos >= 0
        at = np.where(known, pos, 0)
        out: BoolArray = np.take(np.take(self.may, at, axis=0), at, axis=1)
        out[~known, :] = True
        out[:, ~known] = True
        return out

    def pair(self, attacker: str, target: str) -> bool:
        """`may` for one ordered pair."""
        i, j = self.index.get(attacker), self.index.get(target)
        return True if i is None or j is None else bool(self.may[i, j])


def built(order: tuple[str, ...], table: Mapping[Key, AnnotationOut],
          way_values: tuple[str, ...], can_change: Mapping[str, bool]) -> Settled:
    """The answer for a whole table (a scene's first table, or after its creatures
    changed): every ordered pair and mode looked up once."""
    n = len(order)
    get = table.get
    may = np.zeros(n * n, dtype=bool)
    for m in way_values:
        may |= np.fromiter(((old := get((a, t, m))) is None or can_change[old.cover]
                            for a in order for t in order), dtype=bool, count=n * n)
    return Settled(order, {c: k for k, c in enumerate(order)}, may.reshape(n, n),
                   way_values, can_change)


def after(previous: Settled | None, order: tuple[str, ...],
          table: Mapping[Key, AnnotationOut], touched: Iterable[Key] | None,
          way_values: tuple[str, ...], can_change: Mapping[str, bool]) -> Settled:
    """The answer for `table`, which differs from the table `previous` was read from by the
    keys `touched` (None: any); built from scratch unless the creatures are the same, in
    the same order, and the ruleset's answers are the same."""
    if (previous is None or touched is None or previous.order != order
            or previous.way_values != way_values or previous.can_change != can_change):
        return built(order, table, way_values, can_change)
    get = table.get
    index = previous.index
    may = previous.may.copy()
    for a, t, m in touched:
        if m not in way_values:
            continue
        i, j = index.get(a), index.get(t)
        if i is not None and j is not None:
            may[i, j] = any((old := get((a, t, w))) is None or can_change[old.cover]
                            for w in way_values)
    return Settled(order, index, may, way_values, can_change)
