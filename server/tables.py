"""Annotation tables: every pair's annotations of a scene, per revision, kept up to date.

Rule of this module: sans-I/O, and it only reads scenes. `Tables` holds, for each scene and
view (with or without lines; the gm's, or the viewers' without hidden tokens), the table
of wire annotations of its latest computed revision, and computes a new revision's table
from the last one: only the pairs the change can touch (geometry.incremental, the
ruleset's `widen`), and only the pairs some subscriber's filter selects
(server/subscriptions.py's `need`). Tables are never changed once built; a revision copies
the last one and replaces what it recomputes. Work can be done in slices (`warm`,
`annotating(sliced=True)`), each about SLICE_S, yielding between them so that the server
serves other requests meanwhile; a table computed in slices is installed only if its scene
is still the one it started from. Who follows which pairs it asks `follows(scene)`, the
scene's current subscriptions; what is sent to whom is server/subscriptions.py's.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from geometry.columns import ids_of
from geometry.incremental import Affected
from geometry.incremental import affected as affected_by
from geometry.model import SceneGeom
from rulesets.base import Annotation, AttackMode, Degree, Flag, Modifier
from server import scene as scenes
from server.messages import LIMITS, AnnotationOut, LineOut, ModifierOut
from server.settled import Settled
from server.settled import after as settled_after
from server.subscriptions import Filter, Subscription, Table, pairs_of
from server.subscriptions import need as pairs_needed

#: Cached revisions whose changed keys are remembered for cheap deltas.
CHANGE_LOG = 32
#: Seconds of geometry a slice of a table computed for the server takes (`warm`): the
#: longest another scene's request waits for the worker behind it.
SLICE_S = 0.025
#: Pairs in the first slice of a scene whose pace is not known yet (the pace then
#: doubles or halves, slice by slice, towards SLICE_S); counted in pairs of Medium
#: creatures (`pair_costs`).
FIRST_SLICE = 16
#: Entries of a whole table installed per step of a sliced computation (about 7 ms; a
#: 100-token table's 29,700 in one): the 119,400 of 200 tokens at once held the worker
#: 28-56 ms, another scene's requests waiting behind it.
INSTALL_CHUNK = 30_000
#: Rounds `warm` gives a scene that changes while its table is computed.
WARM_ROUNDS = 4
#: Pairs a change recomputes in one call of the ruleset, every mode, rather than two (the
#: pairs in the way in their modes only): below this, a call's fixed cost is the larger.
_ONE_CALL = 256

Key = tuple[str, str, str]
Pair = tuple[str, str]
#: An annotation table: (scene, lines, without hidden tokens).
CacheKey = tuple[str, bool, bool]

_FLAGS = tuple(sorted(Flag, key=lambda f: f.value))
_ALL_FALSE = {f.value: False for f in _FLAGS}
_MODE_VALUES = tuple(m.value for m in AttackMode)
#: Wire forms of modifier tuples and flag sets already converted (flag sets are few;
#: modifier tuples name flankers, so that cache is bounded).
_OUT_CACHE = 4096
_MODS_OUT: dict[tuple[Modifier, ...], list[ModifierOut]] = {}
_FLAGS_OUT: dict[frozenset[Flag], dict[str, bool]] = {}
_NO_FLANKERS: list[str] = []


def _cache_keys(sid: str) -> tuple[CacheKey, ...]:
    """Every table a scene can have: with or without lines, the gm's or the viewers'."""
    return tuple((sid, lines, hidden_out) for lines in (False, True)
                 for hidden_out in (False, True))


@dataclass(frozen=True, slots=True)
class _Cached:
    revision: int
    geom: SceneGeom
    ruleset: Any
    options: Any
    table: dict[Key, AnnotationOut]
    #: Per cached revision, the keys that may have changed since the previous cached one
    #: (None: all of them), for subscribers a few revisions behind.
    log: dict[int, frozenset[Key] | None]
    #: Tables without lines of every pair: the pairs a creature in the way can still
    #: change.
    settled: Settled | None = None
    #: The pairs the table holds (None: every pair of `geom`): what its subscribers'
    #: filters selected when it was computed.
    covered: frozenset[Pair] | None = None


def _covers(covered: frozenset[Pair] | None, need: frozenset[Pair] | None) -> bool:
    """Whether a table holding `covered` holds every pair of `need` (None: all)."""
    return covered is None or (need is not None and need <= covered)


def _all_pairs(geom: SceneGeom) -> frozenset[Pair]:
    ids = [c.id for c in geom.creatures]
    return frozenset((a, t) for a in ids for t in ids if a != t)


def _changes(old: SceneGeom, new: SceneGeom) -> float:
    """How many creatures and walls differ between two geometries (infinite when the grid
    or the regions do): how much recomputing `new` from `old`'s annotations costs, roughly."""
    if (old.grid != new.grid or old.regions != new.regions or old.water != new.water
            or old.underwater != new.underwater):
        return float("inf")
    before = {c.id: c for c in old.creatures}
    after = {c.id: c for c in new.creatures}
    n = sum(before.get(i) != after.get(i) for i in before.keys() | after.keys())
    if old.walls is not new.walls:
        n += len(set(old.walls).symmetric_difference(new.walls))
    return n


def _flag_map(flags: frozenset[Flag]) -> dict[str, bool]:
    """Every flag by name, true for those set (the wire shows them all)."""
    out = dict(_ALL_FALSE)
    for f in flags:
        out[f.value] = True
    return out


def modifier_out(m: Modifier) -> ModifierOut:
    return ModifierOut(m.stat.value, m.value, m.kind.value, m.reason,
                       [d.value for d in m.damage])


def annotation_out(a: Annotation) -> AnnotationOut:
    """A ruleset result as it travels on the wire."""
    # Thousands of annotations share a handful of modifier lists and flag sets: each is
    # converted once (the wire values are never modified after they are built).
    mods = _MODS_OUT.get(a.modifiers)
    if mods is None:
        if len(_MODS_OUT) >= _OUT_CACHE:
            _MODS_OUT.clear()
        mods = _MODS_OUT[a.modifiers] = [modifier_out(m) for m in a.modifiers]
    flags = _FLAGS_OUT.get(a.flags)
    if flags is None:
        flags = _FLAGS_OUT[a.flags] = _flag_map(a.flags)
    # _value_ (the documented member attribute) rather than the slower .value property:
    # this runs once per pair and mode.
    return AnnotationOut(
        attacker=a.attacker, target=a.target, mode=a.mode._value_, loe=a.loe,
        cover=a.cover._value_,
        modifiers=mods,
        flags=flags,
        flankers=list(a.flankers) if a.flankers else _NO_FLANKERS,
        lines=None if a.lines is None else [
            LineOut(ln.start, ln.end, ln.blocked, list(ln.walls), list(ln.tokens),
                    list(ln.regions)) for ln in a.lines],
        visible=a.visible,
    )


def over_limit(scene: scenes.Scene) -> bool:
    """Whether a whole table of this scene passes the limit of pairs."""
    n = len(scene.tokens)  # one creature per token; no geometry built for counting
    return n * (n - 1) > LIMITS.max_table_pairs


class Tables:
    """The annotation tables of every scene in `scenes` (the Core's, read only here);
    `follows(scene)` gives the scene's current subscriptions, whose filters say which pairs
    a table must hold."""

    def __init__(self, scenes: Mapping[str, scenes.Scene],
                 follows: Callable[[str], Iterable[Subscription]]) -> None:
        self.scenes = scenes
        self.follows = follows
        # Per scene, lines flag and view (True: without hidden tokens): annotations at the
        # revision they were last computed for.
        self.cache: dict[CacheKey, _Cached] = {}
        # Per scene: the geometry without hidden tokens, and the revision it is of.
        self._visible: dict[str, tuple[int, SceneGeom]] = {}
        # Per scene: one key tuple for each (attacker, target, mode), shared by all its
        # tables. Once a collection has seen a key tuple of strings it is no longer tracked,
        # and a table whose keys and values are all untracked is not tracked either (after
        # a full collection) nor are its copies: a fresh tuple put into a copy would make
        # that table of 30,000 entries tracked again, scanned by young collections.
        self._keys: dict[str, dict[Key, Key]] = {}
        # Per cache: a copy of its table made in idle time (`prepare`), which the next
        # revision starts from instead of copying on the way to its deltas; and the table
        # the last revision replaced, released in idle time too (at most one per cache).
        self.spares: dict[CacheKey, tuple[_Cached, dict[Key, AnnotationOut]]] = {}
        self.retired: dict[CacheKey, _Cached] = {}
        # Per scene: how many times it was forgotten (a table computed in slices is only
        # installed into the scene it was started for), and the pairs per slice its
        # ruleset last took about SLICE_S for.
        self._epochs: dict[str, int] = {}
        self._pace: dict[str, int] = {}

    def forget(self, sid: str) -> None:
        """The scene was unloaded: its tables go, and one still being computed in slices
        is never installed."""
        self._epochs[sid] = self._epochs.get(sid, 0) + 1
        self._pace.pop(sid, None)
        for key in _cache_keys(sid):
            self.cache.pop(key, None)
            self.spares.pop(key, None)
            self.retired.pop(key, None)
        self._visible.pop(sid, None)
        self._keys.pop(sid, None)

    def computed(self, sub: Subscription, sid: str) -> bool:
        """Whether the table this subscription's delta is built from is computed for the
        scene's current revision, with the pairs it follows (its delta then only diffs
        and encodes, or hands over a frame already built)."""
        scene = self.scenes[sid]
        key, geom = self.view_key(sid, sub.lines, sub.viewer)
        cached = self.cache.get(key)
        if cached is None or cached.revision != scene.revision:
            return False
        if cached.covered is None:
            return True
        return (not sub.filter.everything
                and pairs_of(sub.filter, geom.creatures) <= cached.covered)

    def view_key(self, sid: str, lines: bool, viewer: bool) -> tuple[CacheKey, SceneGeom]:
        """The table a gm (or a viewer) sees, and the geometry it is of. A viewer's is the
        scene without its hidden tokens, so nothing it gets names them or shows their
        effect (no soft cover, no flanking from them); while no token is hidden, that is
        the gm's table."""
        scene = self.scenes[sid]
        if viewer and self.hides(scene):
            return (sid, lines, True), self.visible_geometry(scene)
        return (sid, lines, False), scene.geometry

    def hides(self, scene: scenes.Scene) -> bool:
        """Whether the scene has hidden tokens (its visible geometry has fewer)."""
        return len(self.visible_geometry(scene).creatures) < len(scene.geometry.creatures)

    def table(self, sid: str, lines: bool, viewer: bool) -> tuple[CacheKey, dict[Key,
                                                                              AnnotationOut]]:
        """Every annotation a gm (or a viewer) sees now, and the cache they come from."""
        key, geom = self.view_key(sid, lines, viewer)
        return key, self.annotations(key, geom)

    def current(self, sid: str, lines: bool) -> dict[Key, AnnotationOut]:
        """The gm's annotations of the scene's current revision, every pair."""
        return self.table(sid, lines, False)[1]

    def need(self, key: CacheKey, geom: SceneGeom,
              extra: Iterable[Filter] = ()) -> frozenset[Pair] | None:
        """The pairs of `geom` the subscribers of this table (and `extra`, a subscription
        being made) follow; None: every pair (an unfiltered subscriber)."""
        sid, lines, without_hidden = key
        hidden = self.hides(self.scenes[sid])
        filters = list(extra)
        for sub in self.follows(sid):
            if sub.lines == lines and (sub.viewer and hidden) == without_hidden:
                filters.append(sub.filter)
        return pairs_needed(filters, geom.creatures)

    def view_table(self, sid: str, lines: bool, viewer: bool,
                    extra: Iterable[Filter] = ()) -> Table:
        """The table a gm's (or a viewer's) subscriptions are served from, holding the
        pairs they (and `extra`) follow, computed for the current revision."""
        key, geom = self.view_key(sid, lines, viewer)
        entries = self.annotations(key, geom, self.need(key, geom, extra))
        return Table(key, geom.creatures, entries, self.cache[key].log)

    def visible_geometry(self, scene: scenes.Scene) -> SceneGeom:
        """The scene's geometry without its hidden tokens (walls shared: wall arrays cached
        for the full geometry are found again)."""
        held = self._visible.get(scene.id)
        if held is not None and held[0] == scene.revision:
            return held[1]
        geom = scene.geometry
        visible = replace(geom, creatures=tuple(c for c in geom.creatures if not c.hidden))
        self._visible[scene.id] = (scene.revision, visible)
        return visible

    def annotations(self, key: CacheKey, geom: SceneGeom,
                     need: frozenset[Pair] | None = None) -> dict[Key, AnnotationOut]:
        """Annotations of `geom` (the scene's current revision, or its visible part) for
        the pairs of `need` (None: every pair; the table may hold more), recomputing only
        the pairs the changes since the cached revision can have touched, and those it did
        not hold. Tables are never changed once built: a new revision copies the last one
        and replaces what it recomputes, so unchanged entries stay the same objects."""
        steps = self._annotating(key, geom, sliced=False, need=need)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                table: dict[Key, AnnotationOut] = done.value
                return table

    def _annotating(self, key: CacheKey, geom: SceneGeom, sliced: bool,
                    need: frozenset[Pair] | None = None
                    ) -> Generator[None, None, dict[Key, AnnotationOut]]:
        """`_annotations` as steps: with `sliced`, the ruleset is called on slices of the
        pairs, and the generator yields after each slice (SLICE_S of work) so that the
        server's worker can serve other requests in between. Whatever ran meanwhile, the
        table is only installed if the scene and this cache are still the ones it started
        from (else it is dropped, and `warm` starts again from the newer state). A table
        for `need` holds exactly those pairs: pairs no subscriber follows any more are
        dropped, new ones computed whole (lazily: only when a delta or a subscription
        asks)."""
        sid, lines, without_hidden = key
        scene = self.scenes[sid]
        cached = self.cache.get(key)
        start, epoch = cached, self._epochs.get(sid, 0)
        if (cached is not None and cached.revision == scene.revision
                and _covers(cached.covered, need)):
            return cached.table
        # The copy `prepare` made of this cache's table, if any: taken or dropped now.
        spare = self.spares.pop(key, None)
        # Any table is its geometry's annotations, so the other view's table is as good a
        # starting point when it is closer to this geometry: hiding or showing a token then
        # costs the pairs it touches, as creating or deleting it would, not a whole matrix,
        # while a move with tokens hidden starts from the viewers' own last table (from the
        # gm's, every hidden token would count as changed).
        other = self.cache.get((sid, lines, not without_hidden))
        own_log = True
        if other is not None and (cached is None
                                  or _changes(other.geom, geom) < _changes(cached.geom, geom)):
            cached, own_log = other, False
        # The modes where creatures in the way count (the only ones a creature stepping into
        # or out of the way can change).
        way_modes = tuple(scene.ruleset.in_the_way_modes(scene.options))
        way_values = tuple(m.value for m in way_modes)
        affected = None
        if (cached is not None and cached.ruleset is scene.ruleset
                and cached.options == scene.options):
            may_change = None if lines or cached.settled is None else cached.settled.view
            affected = affected_by(cached.geom, geom, scene.ruleset.sight_points(),
                                   may_change, only=None if need is None else set(need))
            if affected is not None:
                # A ruleset reading more than the pair's lines and reach (who stands near the
                # target) widens what must be recomputed in every respect.
                whole = frozenset(scene.ruleset.widen(cached.geom, geom, scene.options,
                                                      set(affected.whole), need))
                affected = Affected(whole, affected.in_the_way - whole)
        touched: frozenset[Key] | None
        if affected is None:
            if sliced:
                ids = [c.id for c in geom.creatures]
                done = yield from self._slices(
                    sid, geom, [(a, t) for a in ids for t in ids if a != t]
                    if need is None else sorted(need), tuple(AttackMode), lines)
                if not self._still(key, start, epoch):
                    return {}
            elif need is None:
                done = list(map(annotation_out, scene.ruleset.annotate(geom, scene.options,
                                                                       lines=lines)))
            else:
                done = list(map(annotation_out, scene.ruleset.annotate(
                    geom, scene.options, pairs=sorted(need), lines=lines))) if need else []
            keys = self._keys.setdefault(sid, {})
            # A big table computed in slices is installed a chunk per step too.
            in_steps = sliced and len(done) > INSTALL_CHUNK
            table: dict[Key, AnnotationOut] = {}
            for c0 in range(0, len(done), INSTALL_CHUNK):
                # (A comprehension per chunk: update() from a generator is 20% slower.)
                part = {keys.setdefault(k, k): o for o in done[c0:c0 + INSTALL_CHUNK]
                        for k in ((o.attacker, o.target, o.mode),)}
                if table:
                    table.update(part)
                else:
                    table = part
                if in_steps:
                    yield
            if in_steps and not self._still(key, start, epoch):
                return {}
            touched = None
        else:
            assert cached is not None
            # dict.copy clones the hash table as is (a dict built by `dict(...)` re-inserts
            # every entry once the table has had a deletion: 30,000 entries per revision);
            # `prepare` has usually made it already, between the last change and this one
            # (a copy of this very table: not of another view's, nor of an older one).
            table = spare[1] if spare is not None and spare[0] is cached else cached.table.copy()
            gone = set(ids_of(cached.geom.creatures)).difference(ids_of(geom.creatures))
            # Pairs only a creature in the way may have changed: only the modes where
            # creatures in the way count.
            in_the_way = set(affected.in_the_way)
            if not lines and cached.settled is not None:
                # ...and only those whose degree a creature in the way can still change.
                may = cached.settled.pair
                in_the_way = {pair for pair in in_the_way if may(*pair)}
            whole_pairs, way_pairs = set(affected.whole), in_the_way
            if need is not None:
                # With a filter, `affected` is exact for the pairs followed only.
                whole_pairs &= need
                way_pairs &= need
            if cached.covered is not None:
                # Pairs followed now that the table did not hold: computed whole.
                wanted = need if need is not None else _all_pairs(geom)
                whole_pairs |= wanted - cached.covered
                way_pairs -= whole_pairs
            asked_whole, asked_way = frozenset(whole_pairs), frozenset(way_pairs)
            lent: list[AnnotationOut] = []
            if without_hidden:
                whole_pairs, way_pairs, lent = self._lend(key, geom, whole_pairs, way_pairs,
                                                          way_values)
            if way_pairs and (len(way_modes) == len(_MODE_VALUES) or (
                    whole_pairs and len(whole_pairs) + len(way_pairs) <= _ONE_CALL)):
                # Creatures in the way count in every mode, or there are few pairs: one call
                # for all of them (a call has fixed costs, the ruleset's engine for the
                # scene: at 1,000 creatures more than a few pairs' work; the other modes of
                # a pair in the way come back as they were).
                whole_pairs, way_pairs = whole_pairs | way_pairs, set()
            outs: list[AnnotationOut] = []
            if sliced:
                outs = yield from self._slices(sid, geom, sorted(whole_pairs),
                                               tuple(AttackMode), lines)
                if way_pairs and way_modes:
                    outs += yield from self._slices(sid, geom, sorted(way_pairs),
                                                    way_modes, lines)
                if not self._still(key, start, epoch):
                    return {}
            else:
                results = scene.ruleset.annotate(geom, scene.options,
                                                 pairs=sorted(whole_pairs),
                                                 lines=lines) if whole_pairs else []
                if way_pairs and way_modes:
                    results += scene.ruleset.annotate(geom, scene.options,
                                                      pairs=sorted(way_pairs),
                                                      modes=way_modes, lines=lines)
            old_table = cached.table
            keys = self._keys.setdefault(sid, {})
            if len(keys) > 2 * len(old_table) + 1024:
                keys.clear()  # mostly keys of pairs long gone
            # A few hundred entries a move: built-in methods mapped over lists, not a
            # Python loop body per entry.
            if not sliced:
                outs = list(map(annotation_out, results))
            outs += lent
            fresh = [(o.attacker, o.target, o.mode) for o in outs]
            recomputed = set(fresh)
            # An unchanged entry stays the same object, for every diff; a recomputed one is
            # replaced in place (no deletion: the next copy stays a clone). A table is
            # written only with the scene's own key tuples (one per pair and mode, long
            # since untracked by the collector): a dict written with a key the collector
            # still tracks is tracked from then on, and every young collection would walk
            # its 30,000 entries.
            changed: set[Key] = set()
            for k, old, new in zip(fresh, map(old_table.get, fresh), outs, strict=True):
                if old is None or old != new:
                    k = keys.setdefault(k, k)
                    table[k] = new
                    changed.add(k)
            # Stale entries not computed again are pairs that no longer exist: when no
            # creature went and every pair and mode asked for came back, there are none.
            dropped: set[Key] = set()
            asked = len(asked_whole) * len(_MODE_VALUES) + (
                len(asked_way) * len(way_values) if asked_way and way_modes else 0)
            if gone or len(recomputed) != asked:
                stale = {(a, t, m) for a, t in asked_whole for m in _MODE_VALUES}
                stale.update((a, t, m) for a, t in asked_way for m in way_values)
                if gone:
                    stale.update(k for k in cached.table if k[0] in gone or k[1] in gone)
                dropped = stale - recomputed
            if need is not None:
                # Pairs no subscriber follows any more leave the table.
                if cached.covered is None:
                    dropped.update(k for k in cached.table if (k[0], k[1]) not in need)
                else:
                    dropped.update((a, t, m) for a, t in cached.covered - need
                                   for m in _MODE_VALUES)
            dropped -= recomputed
            for k in dropped:
                table.pop(k, None)
            touched = frozenset(changed | dropped)
        log = dict(cached.log) if cached is not None and own_log else {}
        if scene.revision in log:
            # The same revision again, for pairs a new subscription follows.
            before = log[scene.revision]
            touched = None if before is None or touched is None else before | touched
        log[scene.revision] = touched
        while len(log) > CHANGE_LOG:
            del log[min(log)]
        known = None
        if not lines and need is None:
            can_change = {d.value: scene.ruleset.in_the_way_may_change(d) for d in Degree}
            known = settled_after(cached.settled if cached is not None else None,
                                  ids_of(geom.creatures), table, touched,
                                  way_values, can_change)
        replaced = self.cache.get(key)
        if replaced is not None:
            self.retired[key] = replaced
        self.cache[key] = _Cached(scene.revision, geom, scene.ruleset, scene.options,
                                   table, log, known, need)
        return table

    def _still(self, key: CacheKey, start: _Cached | None, epoch: int) -> bool:
        """Whether a table started from cache `start` may still be installed: its scene is
        loaded and was not unloaded since, and nobody installed a newer one meanwhile."""
        return (key[0] in self.scenes and self._epochs.get(key[0], 0) == epoch
                and self.cache.get(key) is start)

    def _slices(self, sid: str, geom: SceneGeom, pairs: list[Pair],
                modes: tuple[AttackMode, ...], lines: bool
                ) -> Generator[None, None, list[AnnotationOut]]:
        """The ruleset's annotations of these pairs (as sent), computed a slice at a time,
        yielding after each slice (work that fits in one slice costs one call and no
        yield). A slice is sized to take about SLICE_S, from what the last
        slices of this scene took (kept from one table to the next)."""
        scene = self.scenes[sid]
        out: list[AnnotationOut] = []
        size = self._pace.get(sid, FIRST_SLICE)
        cost = np.cumsum(pair_costs(geom, pairs))
        k = 0
        while k < len(pairs):
            before = float(cost[k - 1]) if k else 0.0
            end = max(k + 1, int(np.searchsorted(cost, before + size, side="right")))
            chunk = pairs[k:end]
            t0 = time.perf_counter()
            out += map(annotation_out, scene.ruleset.annotate(
                geom, scene.options, pairs=chunk, modes=modes, lines=lines))
            spent = time.perf_counter() - t0
            k += len(chunk)
            weight = float(cost[end - 1]) - before
            heavy = weight > size
            if heavy or end < len(pairs) or weight == size:
                # A full slice (the next pair would not have fitted): the pace follows
                # what its weight took, at most twice or half the last size, so one slow
                # or quick slice (a pair behind many walls, a collection) does not throw
                # it off. One pair heavier than a whole slice (a big creature's) says how
                # slow such pairs are, not how many lighter ones fit, and pairs of one
                # weight vary several times over (melee ones trace more): the pace may
                # only shrink.
                basis, most = (size, size) if heavy else (weight, 2 * size)
                size = max(1, size // 2, min(most, int(basis * SLICE_S / max(spent, 1e-6))))
                self._pace[sid] = size
            if k < len(pairs) or k > len(chunk):
                # (After the last of several slices too: installing the table is work of
                # its own, in the next step.)
                yield
        return out

    def warm(self, tables: Iterable[tuple[str, bool, bool]]) -> Generator[None, None, None]:
        """Compute these tables (scene, lines, viewer), every pair, for their scenes'
        current revision in slices, yielding between slices so that the server's worker
        can serve other requests; what is computed is left in the cache, where the request
        that needed it finds it. A scene that changes faster than its table is computed is
        left, after a few rounds, to that request (the last round is a recent revision's
        increment)."""
        for sid, lines, viewer in tables:
            yield from self.warm_for(sid, lines, viewer, None)

    def warm_for(self, sid: str, lines: bool, viewer: bool,
              extra: tuple[Filter, ...] | None) -> Generator[None, None, None]:
        """`warm` for one table: every pair (`extra` None), or the pairs its subscribers
        and `extra` follow."""
        for _ in range(WARM_ROUNDS):
            scene = self.scenes.get(sid)
            if scene is None:
                break
            key, geom = self.view_key(sid, lines, viewer)
            need = None if extra is None else self.need(key, geom, extra)
            if len(need) > LIMITS.max_table_pairs if need is not None \
                    else over_limit(scene):
                break
            cached = self.cache.get(key)
            if (cached is not None and cached.revision == scene.revision
                    and _covers(cached.covered, need)):
                break
            yield from self._annotating(key, geom, sliced=True, need=need)

    def prepare(self, sid: str) -> None:
        """Idle-time work once a change of this scene has gone out to its subscribers: the
        tables its last change replaced are let go, and each table of its current revision
        gets the copy its next revision will start from. Both are work of the next change
        otherwise (measured with 100 tokens: 0.3-0.45 ms of a move's ~7 ms, the copy of
        30,000 entries and the release of the old table), done here while nothing waits.
        And what the scene's ruleset builds per set of walls on first need (`warm`)."""
        scene = self.scenes.get(sid)
        for key in _cache_keys(sid):
            self.retired.pop(key, None)
            cached = self.cache.get(key)
            if scene is None or cached is None or cached.revision != scene.revision:
                # Only tables still in use get a spare (one is computed each change).
                self.spares.pop(key, None)
                continue
            held = self.spares.get(key)
            if held is None or held[0] is not cached:
                self.spares[key] = (cached, cached.table.copy())
        if scene is not None:
            # What the ruleset builds per set of walls on first need (a wall change makes
            # new walls: the next change would pay for it).
            scene.ruleset.warm(scene.geometry, scene.options)

    def _lend(self, key: CacheKey, geom: SceneGeom, whole: set[Pair], way: set[Pair],
              way_values: tuple[str, ...]) -> tuple[set[Pair], set[Pair], list[AnnotationOut]]:
        """For the viewers' table (`geom`: the scene without its hidden tokens): of the pairs
        to recompute (`whole` in every mode, `way` in the modes creatures in the way count
        for), those whose annotations the hidden tokens cannot touch are the gm's, already
        computed at this revision: they are lent from the gm's table, and only the others
        are left to compute. The pairs the hidden tokens can touch are what the scene with
        them and without them differ in, found as for any change (geometry.incremental:
        the hidden tokens as creatures that came, the ruleset widening as it does)."""
        sid, lines, _ = key
        scene = self.scenes[sid]
        donor = self.cache.get((sid, lines, False))
        if (donor is None or donor.revision != scene.revision) and any(
                not sub.viewer and sub.lines == lines for sub in self.follows(sid)):
            # A gm subscriber will want its table at this revision too: computed first, it
            # is lent from.
            gm_key = (sid, lines, False)
            self.annotations(gm_key, scene.geometry, self.need(gm_key, scene.geometry))
            donor = self.cache.get(gm_key)
        if (donor is None or donor.revision != scene.revision
                or donor.ruleset is not scene.ruleset or donor.options != scene.options
                or not (whole or way)):
            return whole, way, []
        differ = affected_by(geom, donor.geom, scene.ruleset.sight_points(),
                             only=whole | way)
        if differ is None:
            return whole, way, []
        touched = set(scene.ruleset.widen(geom, donor.geom, scene.options, set(differ.whole),
                                          whole | way))
        touched |= differ.in_the_way
        lent: list[AnnotationOut] = []
        held = donor.table.get
        covered = donor.covered
        # Pairs the gm's table does not hold (its subscribers follow others) are computed.
        own: list[set[Pair]] = [set(), set()]
        for pairs, values, kept in ((whole, _MODE_VALUES, own[0]), (way, way_values, own[1])):
            for pair in pairs - touched:
                if covered is not None and pair not in covered:
                    kept.add(pair)
                    continue
                for m in values:
                    found = held((pair[0], pair[1], m))
                    if found is not None:
                        lent.append(found)
        return (whole & touched) | own[0], (way & touched) | own[1], lent


def pair_costs(geom: SceneGeom, pairs: Sequence[Pair]) -> np.ndarray:
    """What each pair weighs in a slice, in pairs of Medium creatures: the squares of one
    creature times the squares of the other (the corner engine traces every square of one
    against every square of the other, 16 corner lines each: issue 14 item 3). Slices are
    sized by this sum, not by a count of pairs: a pair of two 6 x 6 creatures (the largest
    a token may be) weighs 1,296 and costs 10-80 ms (Medium pairs: about 0.03 ms), so it is
    a slice of its own."""
    squares = {c.id: math.ceil(c.width) * math.ceil(c.height)
               for c in geom.creatures if c.width > 1 or c.height > 1}
    if not squares:
        return np.ones(len(pairs))
    return np.array([squares.get(a, 1) * squares.get(t, 1) for a, t in pairs],
                    dtype=np.float64)
