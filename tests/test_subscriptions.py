"""server/subscriptions.py alone: filters, their checks, views of a table and the deltas
between them, with tables made by hand (no Core, no geometry beyond creatures' ids and
sides)."""

from __future__ import annotations

from typing import Any

import msgpack
import msgspec
import pytest

from geometry.model import CreatureGeom, Size
from rulesets.base import AttackMode
from server.errors import ClientError
from server.messages import LIMITS, AnnotationOut, Subscribe, TokenDoc
from server.subscriptions import (
    EVERYTHING,
    Filter,
    Frames,
    Subscription,
    Table,
    diff,
    full_set,
    need,
    open_subscription,
    pairs_of,
    read_filter,
    view,
)

MODES = ("melee", "reach", "ranged")


def creature(cid: str, side: int = -1, hidden: bool = False) -> CreatureGeom:
    return CreatureGeom(cid, 0, 0, 1, 1, Size.MEDIUM, 5.0, 6.0, 0.0, side, hidden)


CS = (creature("a", 1), creature("b"), creature("c"), creature("d", 0))


def tokens(*hidden: str) -> dict[str, TokenDoc]:
    return {c.id: msgspec.convert({"id": c.id, "x": 0, "y": 0, "hidden": c.id in hidden}, TokenDoc)
            for c in CS}


def ann(a: str, t: str, m: str, cover: str = "none") -> AnnotationOut:
    return AnnotationOut(attacker=a, target=t, mode=m, loe=True, cover=cover, modifiers=[],
                         flags={}, flankers=[], lines=None, visible=None)


def whole(cs: tuple[CreatureGeom, ...] = CS) -> dict[tuple[str, str, str], AnnotationOut]:
    return {(a.id, t.id, m): ann(a.id, t.id, m) for a in cs for t in cs if a is not t
            for m in MODES}


def subscribe(**extra: Any) -> Subscribe:
    return msgspec.convert({"type": "subscribe", "scene": "s", **extra}, Subscribe)


def test_a_filter_selects_the_pairs_of_its_attackers_targets_and_sides() -> None:
    assert pairs_of(Filter(attackers=frozenset({"a"})), CS) == {("a", "b"), ("a", "c"),
                                                                ("a", "d")}
    assert pairs_of(Filter(targets=frozenset({"a"})), CS) == {("b", "a"), ("c", "a"),
                                                              ("d", "a")}
    one = Filter(frozenset({"a"}), frozenset({"c", "a"}))
    assert pairs_of(one, CS) == {("a", "c")}
    # Sides are the attacker's: friendly "a", neutral "d".
    sides = Filter(sides=frozenset({1, 0}))
    assert {p[0] for p in pairs_of(sides, CS)} == {"a", "d"}
    for flt in (one, sides, Filter(attackers=frozenset({"a", "zz"}))):
        assert flt.count(CS) == len(pairs_of(flt, CS))
    assert EVERYTHING.count(CS) == 12
    # Several subscribers' filters: their union; an unfiltered one: every pair.
    assert need([one, sides], CS) == pairs_of(one, CS) | pairs_of(sides, CS)
    assert need([one, EVERYTHING], CS) is None
    assert need([], CS) == frozenset()


@pytest.mark.parametrize(("extra", "code", "path", "words"), [
    ({"attackers": []}, "invalid", "$.attackers", ("empty",)),
    ({"targets": []}, "invalid", "$.targets", ("empty",)),
    ({"sides": []}, "invalid", "$.sides", ("empty",)),
    ({"attackers": ["a"] * (LIMITS.max_tokens + 1)}, "invalid", "$.attackers",
     (str(LIMITS.max_tokens + 1), str(LIMITS.max_tokens))),
    ({"attackers": ["a", "zz"]}, "unknown_token", "$.attackers[1]", ("'zz'", "'s'")),
    ({"targets": ["zz"]}, "unknown_token", "$.targets[0]", ("'zz'",)),
    ({"sides": ["hostile", "ally"]}, "invalid", "$.sides[1]", ("'ally'", "friendly")),
])
def test_bad_filters_are_refused_naming_the_field_and_the_value(
        extra: dict[str, Any], code: str, path: str, words: tuple[str, ...]) -> None:
    with pytest.raises(ClientError) as info:
        read_filter(subscribe(**extra), "s", tokens(), viewer=False)
    assert info.value.code.value == code and info.value.path == path
    assert all(w in info.value.message for w in words), info.value.message
    assert info.value.message.startswith(path)


def test_a_viewer_naming_a_hidden_token_hears_what_an_unknown_id_gets() -> None:
    def refusal(tid: str, viewer: bool) -> str | None:
        try:
            read_filter(subscribe(attackers=[tid]), "s", tokens("c"), viewer)
        except ClientError as exc:
            return f"{exc.code.value} {exc.path} {exc.message}".replace(repr(tid), "ID")
        return None

    assert refusal("c", viewer=True) == refusal("zz", viewer=True) is not None
    assert refusal("c", viewer=False) is None  # the gm sees hidden tokens


def test_too_large_names_the_size_and_the_filter_to_use() -> None:
    n = 400
    crowd = tuple(creature(f"t{k}") for k in range(n))
    docs = {c.id: msgspec.convert({"id": c.id, "x": 0, "y": 0}, TokenDoc) for c in crowd}
    with pytest.raises(ClientError) as info:
        open_subscription(subscribe(), "s", docs, crowd, False, True)
    text = info.value.message
    assert info.value.code.value == "too_large"
    assert "400 tokens" in text and "159600 pairs" in text and "100000" in text
    assert "attackers" in text and "399 pairs" in text
    sub = open_subscription(subscribe(attackers=["t0"]), "s", docs, crowd, False, True)
    assert sub.filter == Filter(attackers=frozenset({"t0"}))
    with pytest.raises(ClientError) as info:
        open_subscription(subscribe(sides=["hostile"]), "s", docs, crowd, False, True)
    assert "sides ['hostile']" in info.value.message and "159600" in info.value.message


def _sub(flt: Filter, modes: tuple[str, ...] = MODES) -> Subscription:
    return Subscription("s", False, tuple(AttackMode(m) for m in modes), True, False, flt)


def test_a_filtered_view_and_its_deltas() -> None:
    entries = whole()
    log: dict[int, frozenset[tuple[str, str, str]] | None] = {1: None}
    sub = _sub(Filter(attackers=frozenset({"a"})), ("ranged",))
    first = msgpack.unpackb(full_set(sub, "s", 1, Table(("s", False, False), CS, entries, log),
                                     {}, 7))
    assert first["full"] and first["id"] == 7
    assert {(x["attacker"], x["target"]) for x in first["annotations"]} == {
        ("a", "b"), ("a", "c"), ("a", "d")}
    # Revision 2 changes (a, b) and (c, b): the delta carries a's ranged entry only.
    entries = {**entries, ("a", "b", "ranged"): ann("a", "b", "ranged", "half"),
               ("a", "b", "melee"): ann("a", "b", "melee", "half"),
               ("c", "b", "ranged"): ann("c", "b", "ranged", "half")}
    log = {1: None, 2: frozenset({("a", "b", "ranged"), ("a", "b", "melee"),
                                  ("c", "b", "ranged")})}
    frame = diff(sub, "s", 2, Table(("s", False, False), CS, entries, log), {}, [])
    assert frame is not None
    delta = msgpack.unpackb(frame)
    assert [(x["attacker"], x["target"], x["mode"]) for x in delta["annotations"]] == [
        ("a", "b", "ranged")]
    assert delta["removed"] == []
    # Revision 3: "b" is gone (deleted, or hidden from a viewer): its pairs leave the view,
    # though the log does not name them.
    cs = tuple(c for c in CS if c.id != "b")
    entries = whole(cs)
    frame = diff(sub, "s", 3, Table(("s", False, False), cs, entries, {**log, 3: frozenset()}),
                 {}, [])
    assert frame is not None
    delta = msgpack.unpackb(frame)
    assert delta["removed"] == [["a", "b", "ranged"]]
    assert set(sub.sent) == {("a", "c", "ranged"), ("a", "d", "ranged")}
    # Nothing changed: no frame.
    assert diff(sub, "s", 3, Table(("s", False, False), cs, entries, log), {}, []) is None


def test_frames_are_shared_by_subscribers_with_the_same_ask_only() -> None:
    entries = whole()
    table = Table(("s", False, False), CS, entries, {1: None})
    one, two, other = (_sub(Filter(attackers=frozenset({"a"}))),
                       _sub(Filter(attackers=frozenset({"a"}))),
                       _sub(Filter(attackers=frozenset({"b"}))))
    for sub in (one, two, other):
        full_set(sub, "s", 1, table, {}, None)
    changed = {**entries, ("a", "c", "melee"): ann("a", "c", "melee", "half"),
               ("b", "c", "melee"): ann("b", "c", "melee", "half")}
    after = Table(("s", False, False), CS, changed,
                  {1: None, 2: frozenset({("a", "c", "melee"), ("b", "c", "melee")})})
    frames, scene = Frames(), object()
    asked = []

    def table_now() -> Table:
        asked.append(1)
        return after

    got = [frames.delta(sub, "s", scene, 2, {}, table_now) for sub in (one, two, other)]
    assert got[0] is got[1] and got[0] != got[2]
    assert len(asked) == 2  # built once for "a"'s two subscribers, once for "b"'s
    assert {x["attacker"] for x in msgpack.unpackb(got[2])["annotations"]} == {"b"}
    assert one.sent is two.sent and one.revision == two.revision == 2


def test_view_of_an_unfiltered_subscription_is_the_table_itself() -> None:
    entries = whole()
    table = Table(("s", False, False), CS, entries, {1: None})
    assert view(table, _sub(EVERYTHING)) == (None, entries)
    pairs, ranged = view(table, _sub(EVERYTHING, ("ranged",)))
    assert pairs is None and set(ranged) == {k for k in entries if k[2] == "ranged"}
