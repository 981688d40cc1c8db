"""Subscriptions and their deltas, sans I/O: what each subscriber asked for and holds, and
the frames that bring it to a scene's current state.

Rule of this module: a subscription is read from its `subscribe` request once (its filter
checked against the scene's tokens as the subscriber may see them, so a viewer naming a
hidden token hears what it would for an unknown one) and is then only compared: its view
of a table is the entries of the pairs its filter selects among the table's creatures, in
its modes; its delta is that view diffed against what it was last sent, built once per
revision for every subscriber with the same ask and the same holding (`Frames`). Tables
come in from the Core (`Table`), never computed here; nothing here reads geometry beyond a
creature's id and side, or touches a socket.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from geometry.columns import ids_of
from geometry.model import CreatureGeom
from rulesets.base import AttackMode
from server import focus as focusing
from server.compact import encode_annotations, encoding_annotation_parts, encoding_annotations
from server.errors import ClientError, ErrorCode
from server.frames import Parts
from server.messages import (
    LIMITS,
    AnnotationOut,
    Annotations,
    BreathOut,
    Subscribe,
    TokenDoc,
)

Key = tuple[str, str, str]
Pair = tuple[str, str]
#: An annotation table: (scene, lines, without hidden tokens).
CacheKey = tuple[str, bool, bool]

#: Delta frames kept per scene for subscribers catching up to its current state.
FRAME_CACHE = 64
#: The sides a `sides` filter names, as Foundry's token dispositions.
SIDES: dict[str, int] = {"friendly": 1, "neutral": 0, "hostile": -1, "secret": -2}
_SIDE_NAMES = {v: k for k, v in SIDES.items()}
#: Ids one `attackers` or `targets` list may hold: as many as a scene may have tokens.
MAX_FILTER_IDS = LIMITS.max_tokens
_ALL_MODES = len(AttackMode)


@dataclass(frozen=True, slots=True)
class Filter:
    """Which pairs a subscription follows: those whose attacker is one of `attackers` and
    of one of the `sides` (dispositions), and whose target is one of `targets`; a field
    left out (None) takes every token. Ids that name no token now select nothing until a
    token with that id is there (created again, or shown again to a viewer)."""

    attackers: frozenset[str] | None = None
    targets: frozenset[str] | None = None
    sides: frozenset[int] | None = None

    @property
    def everything(self) -> bool:
        return self.attackers is None and self.targets is None and self.sides is None

    def ends(self, creatures: tuple[CreatureGeom, ...]
             ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The creatures the filter takes as attackers, and as targets, in the scene's
        order."""
        ids = ids_of(creatures)
        if self.sides is not None:
            sides = self.sides
            attackers = tuple(c.id for c in creatures if c.disposition in sides
                              and (self.attackers is None or c.id in self.attackers))
        else:
            attackers = ids if self.attackers is None else tuple(
                filter(self.attackers.__contains__, ids))
        targets = ids if self.targets is None else tuple(filter(self.targets.__contains__, ids))
        return attackers, targets

    def count(self, creatures: tuple[CreatureGeom, ...]) -> int:
        """How many ordered pairs of these creatures the filter selects."""
        attackers, targets = self.ends(creatures)
        return len(attackers) * len(targets) - len(set(attackers).intersection(targets))

    def describe(self) -> str:
        """The filter as the wire spells it, for messages."""
        parts = []
        if self.attackers is not None:
            parts.append(f"attackers {sorted(self.attackers)}")
        if self.targets is not None:
            parts.append(f"targets {sorted(self.targets)}")
        if self.sides is not None:
            parts.append(f"sides {sorted(_SIDE_NAMES[s] for s in self.sides)}")
        return ", ".join(parts) or "no filter"


EVERYTHING = Filter()

# The pairs of a filter among a revision's creatures, for the last creature tuple each
# filter was asked about (a scene's deltas and its table ask it several times a revision),
# with the attackers and targets they were made of.
_PAIRS: dict[Filter, tuple[tuple[CreatureGeom, ...], frozenset[Pair], tuple[str, ...],
                           tuple[str, ...]]] = {}
_PAIRS_HELD = 256


def pairs_of(flt: Filter, creatures: tuple[CreatureGeom, ...]) -> frozenset[Pair]:
    """The ordered (attacker, target) pairs of these creatures the filter selects."""
    held = _PAIRS.get(flt)
    if held is not None and held[0] is creatures:
        return held[1]
    attackers, targets = flt.ends(creatures)
    if held is not None and held[2] == attackers and held[3] == targets:
        # A move keeps the ids: the very same set, so that subscribers' pairs compare by
        # identity (a thousand pairs a revision were built and compared before).
        pairs = held[1]
    else:
        pairs = frozenset((a, t) for a in attackers for t in targets if a != t)
    if len(_PAIRS) >= _PAIRS_HELD:
        _PAIRS.clear()
    _PAIRS[flt] = (creatures, pairs, attackers, targets)
    return pairs


def need(filters: Iterable[Filter], creatures: tuple[CreatureGeom, ...]
         ) -> frozenset[Pair] | None:
    """The pairs a table must hold for subscribers with these filters (None: every pair)."""
    distinct = set(filters)
    if EVERYTHING in distinct:
        return None
    out: set[Pair] = set()
    for flt in distinct:
        out |= pairs_of(flt, creatures)
    return frozenset(out)


def read_filter(request: Subscribe, scene_id: str, tokens: Mapping[str, TokenDoc],
                viewer: bool) -> Filter:
    """The filter a `subscribe` asks for, checked: lists neither empty nor longer than a
    scene's tokens, ids naming tokens of the scene (visible ones, for a viewer: a hidden
    token's id gets the very error an unknown id does), sides by name."""
    ids: dict[str, frozenset[str] | None] = {}
    for name in ("attackers", "targets"):
        given = getattr(request, name)
        if given is None:
            ids[name] = None
            continue
        path = f"$.{name}"
        _sized(given, path, "token ids", "token")
        for k, tid in enumerate(given):
            doc = tokens.get(tid)
            if doc is None or (viewer and doc.hidden):
                raise ClientError(ErrorCode.UNKNOWN_TOKEN,
                                  f"{path}[{k}]: no token {tid!r} in scene {scene_id!r}",
                                  path=f"{path}[{k}]")
        ids[name] = frozenset(given)
    sides: frozenset[int] | None = None
    if request.sides is not None:
        _sized(request.sides, "$.sides", "sides", "side")
        for k, side in enumerate(request.sides):
            if side not in SIDES:
                raise ClientError(ErrorCode.INVALID,
                                  f"$.sides[{k}]: unknown side {side!r}; the sides are "
                                  f"{', '.join(SIDES)}", path=f"$.sides[{k}]")
        sides = frozenset(SIDES[s] for s in request.sides)
    return Filter(ids["attackers"], ids["targets"], sides)


def _sized(given: Sequence[str], path: str, what: str, one: str) -> None:
    if not given:
        raise ClientError(ErrorCode.INVALID,
                          f"{path}: an empty list selects no pair; name at least one {one}, "
                          "or leave the field out to take every one", path=path)
    if len(given) > MAX_FILTER_IDS:
        raise ClientError(ErrorCode.INVALID,
                          f"{path}: {len(given)} {what}, at most {MAX_FILTER_IDS} (as many "
                          "as a scene may have tokens, welcome.limits.maxTokens)", path=path)


def refuse_too_large(flt: Filter, creatures: tuple[CreatureGeom, ...], scene_id: str,
                     path: str) -> None:
    """Refuse (too_large) a subscription whose table would pass `maxTablePairs`, saying
    how big it is and which filter to use instead."""
    limit = LIMITS.max_table_pairs
    n = len(creatures)
    if flt.everything:
        if n * (n - 1) <= limit:
            return
        raise ClientError(
            ErrorCode.TOO_LARGE,
            f"{path}: scene {scene_id!r} has {n} tokens, {n * (n - 1)} pairs of attacker and "
            f"target, and an unfiltered subscription computes every pair; the limit is "
            f"{limit} pairs (welcome.limits.maxTablePairs, about {tokens_for(limit)} "
            f"tokens): subscribe with a filter, attackers (one attacker is {n - 1} pairs), "
            "targets or sides, or ask single pairs with cover.query", path=path)
    count = flt.count(creatures)
    if count > limit:
        raise ClientError(
            ErrorCode.TOO_LARGE,
            f"{path}: the filter ({flt.describe()}) selects {count} pairs of attacker and "
            f"target of scene {scene_id!r}; the limit is {limit} pairs "
            f"(welcome.limits.maxTablePairs): name fewer attackers or targets, or add one "
            f"(each attacker is up to {max(n - 1, 0)} pairs)", path=path)


def tokens_for(pairs: int) -> int:
    """The most tokens whose pairs (n x (n - 1)) stay within `pairs`."""
    n = 1
    while (n + 1) * n <= pairs:
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class Table:
    """A table as the Core hands it in: the cache it is, the creatures it is of (in the
    scene's order), its entries, and per cached revision the keys that may have changed
    since the one before (None: any)."""

    source: CacheKey
    creatures: tuple[CreatureGeom, ...]
    entries: Mapping[Key, AnnotationOut]
    log: Mapping[int, frozenset[Key] | None]


@dataclass(slots=True)
class Subscription:
    scene: str
    lines: bool
    modes: tuple[AttackMode, ...]
    binary: bool
    #: A viewer's subscription: annotations of the scene without its hidden tokens.
    viewer: bool = False
    #: The pairs it follows.
    filter: Filter = EVERYTHING
    sent: Mapping[Key, AnnotationOut] = field(default_factory=dict)
    revision: int = 0
    #: Each token's air as this subscriber was last sent it.
    breath_sent: dict[str, BreathOut] = field(default_factory=dict)
    #: The cached table `sent` was taken from (its change log is valid for `sent`).
    source: CacheKey | None = None
    #: The pairs its filter selected when `sent` was taken (None: unfiltered).
    pairs: frozenset[Pair] | None = None
    #: The scene's focus as this subscriber was last sent it (server/focus.py).
    focus_sent: focusing.Focus = focusing.NOBODY
    #: Its `annotations` frames in the compact form (server/compact.py; asked in hello).
    compact: bool = False

    @property
    def wants(self) -> frozenset[str]:
        return frozenset(m.value for m in self.modes)


def open_subscription(request: Subscribe, scene_id: str, tokens: Mapping[str, TokenDoc],
                      creatures: tuple[CreatureGeom, ...], viewer: bool,
                      binary: bool, compact: bool = False) -> Subscription:
    """The subscription a `subscribe` asks for (`creatures`: the scene as the subscriber
    sees it), refused whole (nothing changed) when its filter is bad or its table too big.
    """
    flt = read_filter(request, scene_id, tokens, viewer)
    refuse_too_large(flt, creatures, scene_id, "$.scene" if flt.everything else "$")
    return Subscription(scene_id, request.lines, tuple(AttackMode(m) for m in request.modes),
                        binary, viewer, flt, compact=compact)


def view(table: Table, sub: Subscription) -> tuple[frozenset[Pair] | None,
                                                   Mapping[Key, AnnotationOut]]:
    """The part of the table this subscriber follows (its pairs, its modes), and the
    pairs its filter selects (None: unfiltered)."""
    modes = sub.wants
    if sub.filter.everything:
        if len(modes) == _ALL_MODES:
            return None, table.entries
        return None, {k: v for k, v in table.entries.items() if k[2] in modes}
    pairs = pairs_of(sub.filter, table.creatures)
    get = table.entries.get
    out: dict[Key, AnnotationOut] = {}
    for a, t in pairs:
        for m in modes:
            found = get((a, t, m))
            if found is not None:
                out[(a, t, m)] = found
    return pairs, out


def full_set(sub: Subscription, sid: str, revision: int, table: Table,
             air: dict[str, BreathOut], rid: Any, ahead: EncodedFullSet | None = None
             ) -> bytes | str | Parts:
    """The `annotations` full set a new subscription starts from; it now holds it. `ahead`:
    a full set encoded before the request was handled (`encoding_full_set`), sent as it is
    when it is this very one (nothing it was made of changed meanwhile)."""
    if ahead is not None and ahead.fits(sub, revision, table, air, rid):
        sub.pairs, sub.sent, frame = ahead.pairs, ahead.sent, ahead.frame
    else:
        sub.pairs, sub.sent = view(table, sub)
        frame = encode_annotations(_full_message(sid, revision, sub.sent, air, rid),
                                   sub.binary, sub.compact)
    sub.source = table.source
    sub.revision = revision
    sub.breath_sent = air
    return frame


def _full_message(sid: str, revision: int, sent: Mapping[Key, AnnotationOut],
                  air: dict[str, BreathOut], rid: Any) -> Annotations:
    return Annotations(sid, revision, True, list(sent.values()), [], list(air.values()), rid)


@dataclass(frozen=True, slots=True)
class EncodedFullSet:
    """A subscription's full set encoded ahead of its request (in steps, so that a large
    one does not hold the server's worker in one call), with what it was made of."""

    source: CacheKey
    #: The table's entries it was taken from (a changed table is a new mapping).
    entries: Mapping[Key, AnnotationOut]
    revision: int
    air: dict[str, BreathOut]
    rid: Any
    ask: tuple[Filter, frozenset[str], bool, bool]
    pairs: frozenset[Pair] | None
    sent: Mapping[Key, AnnotationOut]
    frame: bytes | str | Parts

    def fits(self, sub: Subscription, revision: int, table: Table,
             air: dict[str, BreathOut], rid: Any) -> bool:
        """Whether this is the full set `full_set` would build for these."""
        return (self.entries is table.entries and self.source == table.source
                and self.revision == revision and self.air == air
                and type(self.rid) is type(rid) and self.rid == rid
                and self.ask == _ask(sub))


def _ask(sub: Subscription) -> tuple[Filter, frozenset[str], bool, bool]:
    return sub.filter, sub.wants, sub.binary, sub.compact


def encoding_full_set(sub: Subscription, sid: str, revision: int, table: Table,
                      air: dict[str, BreathOut], rid: Any, in_parts: bool = False
                      ) -> Generator[None, None, EncodedFullSet]:
    """The full set `full_set` would send `sub`, encoded in steps (server/compact.py
    `encoding_annotations`); `sub` is left as it was. `in_parts`: a large one is left in
    its parts (server/frames.py), for an edge that writes them as one message."""
    pairs, sent = view(table, sub)
    encoding = encoding_annotation_parts if in_parts else encoding_annotations
    frame = yield from encoding(_full_message(sid, revision, sent, air, rid),
                                sub.binary, sub.compact)
    return EncodedFullSet(table.source, table.entries, revision, air, rid, _ask(sub), pairs,
                          sent, frame)


def touched_since(table: Table, sub: Subscription) -> list[Key] | None:
    """Keys that may differ between the table this subscriber holds and the current one,
    from the cache's change log; None when the log does not reach back (or the
    subscriber's table came from another cache: a viewer's view of a scene changes cache
    when its first token is hidden or its last one shown)."""
    if table.source != sub.source or sub.revision not in table.log:
        return None
    keys: set[Key] = set()
    for revision, touched in table.log.items():
        if revision <= sub.revision:
            continue
        if touched is None:
            return None
        keys |= touched
    modes = sub.wants
    return [k for k in keys if k[2] in modes]


def diff(sub: Subscription, sid: str, revision: int, table: Table,
         air: dict[str, BreathOut], breath: list[BreathOut]) -> bytes | str | None:
    """The delta frame from the subscriber's view to the current one, which becomes its
    view, with the air that changed (`breath`, of its view's `air`)."""
    pairs = None if sub.filter.everything else pairs_of(sub.filter, table.creatures)
    # The change log covers the table's entries, not a filter's pairs coming and going
    # (a token created, deleted, hidden or changing side): compared whole then.
    keys = touched_since(table, sub) if pairs == sub.pairs else None
    sent = sub.sent
    if keys is not None and pairs is not None:
        # A filtered view moves by the keys the change touched among its pairs (a move
        # touches a few of its thousands of entries).
        current: Mapping[Key, AnnotationOut]
        current = moved = dict(sent)
        get = table.entries.get
        changed, removed = [], []
        for k in keys:
            if (k[0], k[1]) not in pairs:
                continue
            new, old = get(k), sent.get(k)
            if new is None:
                if old is not None:
                    del moved[k]
                    removed.append(k)
            elif new is not old:
                moved[k] = new
                changed.append(new)
    elif keys is None:
        pairs, current = view(table, sub)
        # Entries kept from one revision to the next are the same objects; equal ones
        # from another table (a viewer's, before or after a token was hidden) are not.
        changed = [v for k, v in current.items() if (old := sent.get(k)) is not v and old != v]
        removed = [k for k in sent if k not in current]
    else:
        pairs, current = view(table, sub)
        changed = [current[k] for k in keys if k in current and sent.get(k) is not current[k]]
        removed = [k for k in keys if k not in current and k in sent]
    sub.sent = current
    sub.source = table.source
    sub.pairs = pairs
    if not changed and not removed and not breath and sub.revision == revision:
        # Nothing to send: the subscriber's view equals this one (entry for entry the
        # same objects, or equal ones), which it now holds.
        return None
    sub.revision = revision
    sub.breath_sent = air
    return encode_annotations(Annotations(sid, revision, False, changed, removed, breath),
                              sub.binary, sub.compact)


#: A shared delta frame's key: (lines, modes, binary, viewer, filter, from revision, from
#: cache, compact form).
FrameKey = tuple[bool, tuple[AttackMode, ...], bool, bool, Filter, int, CacheKey | None,
                 bool]
#: A shared delta frame: the cache, pairs and view it leaves the subscriber with, and the
#: frame.
Frame = tuple[CacheKey | None, frozenset[Pair] | None, Mapping[Key, AnnotationOut],
              bytes | str | None]


class Frames:
    """Per scene, delta frames to its current state (the scene value they lead to), by
    everything a frame depends on: the view the subscriber holds (its revision and the
    cache it came from, so a viewer's view is never taken for the gm's), what it asked
    for (filter included), and its view of the scene (a viewer's frame never carries a
    hidden token). Only frames leading to the scene's current state are kept: older ones
    (and the views they hold) go as soon as the scene changes."""

    def __init__(self, size: int = FRAME_CACHE) -> None:
        self.size = size
        self.held: dict[str, tuple[object, dict[FrameKey, Frame]]] = {}

    def forget(self, sid: str) -> None:
        self.held.pop(sid, None)

    def delta(self, sub: Subscription, sid: str, scene: object, revision: int,
              air: dict[str, BreathOut], table: Callable[[], Table]) -> bytes | str | None:
        """The frame bringing `sub` to `scene` (at `revision`, with `air`), shared with
        every subscriber in the same place; `table()` is only asked for when the frame
        has to be built."""
        held = self.held.get(sid)
        if held is None or held[0] is not scene:
            held = self.held[sid] = (scene, {})
        frames = held[1]
        # Air changes ride in deltas and each subscriber's record of the air it was sent is
        # its own (a turn end changes the air, not the revision): a frame is shared only
        # when it carries no air.
        breath = [v for k, v in air.items() if sub.breath_sent.get(k) is not v]
        if breath:
            return diff(sub, sid, revision, table(), air, breath)
        fkey = (sub.lines, sub.modes, sub.binary, sub.viewer, sub.filter, sub.revision,
                sub.source, sub.compact)
        found = frames.get(fkey)
        if found is not None:
            sub.source, sub.pairs, sub.sent, frame = found
            sub.revision = revision
            if frame is not None:
                sub.breath_sent = air
            return frame
        frame = diff(sub, sid, revision, table(), air, breath)
        if len(frames) < self.size:
            frames[fkey] = (sub.source, sub.pairs, sub.sent, frame)
        return frame
