"""server/cluster.py alone: NATS mode's bookkeeping, without NATS."""

from __future__ import annotations

from server.cluster import (
    FRONT_GONE_S,
    KEPT_ANSWER_BYTES,
    LEASE_S,
    REMEMBERED,
    RESEND_S,
    Journal,
    Liveness,
    Requests,
    Sessions,
    silent_fronts,
    takeovers,
)


def test_a_request_is_answered_once() -> None:
    s = Sessions("f")
    c = s.open("hello")
    p = s.request(c, "arena", "token.update", b"move")
    assert s.unanswered("arena") == [p]
    assert s.answered(p.rid) is True
    assert s.answered(p.rid) is False  # the old owner's late answer, or the new one's
    assert s.unanswered("arena") == []


def test_answers_reach_a_client_in_the_order_of_its_requests() -> None:
    """Protocol section 3: a client's replies in the order of its requests, whichever
    scene's owner answers first; another client's are not held; a subscription sent again
    to a new owner (no request of the client) is handed over at once."""
    s = Sessions("f")
    a, b = s.open("hello-a"), s.open("hello-b")
    slow = s.request(a, "big", "subscribe", b"sub")
    quick = s.request(a, "small", "scene.get", b"get")
    aside = s.aside(a)  # a frame naming no scene
    other = s.request(b, "small", "scene.get", b"get")
    assert s.answered(quick.rid) and s.in_order(quick.rid, ["get's reply"]) == []
    assert s.in_order(aside, ["aside's reply"]) == []
    assert s.answered(other.rid) and s.in_order(other.rid, ["b's reply"]) == ["b's reply"]
    assert s.answered(slow.rid)
    assert s.in_order(slow.rid, ["full set", "focus"]) == [
        "full set", "focus", "get's reply", "aside's reply"]
    (again,) = s.moved("big")
    assert s.in_order(again.rid, ["full set again"]) == ["full set again"]
    late = s.request(a, "small", "scene.get", b"get")
    s.close(a)
    assert s.in_order(late.rid, ["gone"]) == ["gone"]  # no session to hold it for


def test_a_new_owner_gets_the_subscriptions_again_then_the_requests_unanswered() -> None:
    s = Sessions("f")
    a, b = s.open("hello-a"), s.open("hello-b")
    sub = s.request(a, "arena", "subscribe", b"sub-a")
    s.answered(sub.rid)
    s.request(b, "other", "subscribe", b"sub-b")
    first = s.request(a, "arena", "token.update", b"m1")
    second = s.request(b, "arena", "token.update", b"m2")
    s.answered(first.rid)
    again = s.moved("arena")
    assert [(p.session, p.frame) for p in again] == [(a, b"sub-a"), (b, b"m2")]
    assert again[0].rid != sub.rid  # a new rid: the old one was answered
    assert again[1].rid == second.rid  # its own: the new owner may have it logged
    assert s.subscribed("arena") and s.subscribed("other")


def test_unsubscribing_or_leaving_forgets_what_would_be_sent_again() -> None:
    s = Sessions("f")
    a = s.open("hello")
    s.request(a, "arena", "subscribe", b"sub")
    s.request(a, "arena", "unsubscribe", b"unsub")
    assert not s.subscribed("arena")
    s.request(a, "arena", "subscribe", b"sub")
    s.close(a)
    assert s.moved("arena") == [] and not s.local(a)


def test_answers_remembered_are_bounded() -> None:
    s = Sessions("f")
    a = s.open("hello")
    rids = [s.request(a, "x", "scene.get", b"g").rid for _ in range(REMEMBERED + 10)]
    for r in rids:
        assert s.answered(r)
    assert s.answered(rids[-1]) is False
    assert s.answered(rids[0]) is True  # forgotten long since: its answer is not held back


def test_a_request_unanswered_for_resend_s_is_sent_again_until_answered() -> None:
    """Core NATS may lose a request or its answer: what was sent and not answered for
    RESEND_S is due again, in the order the client made it; an answered one never is, and
    one not sent yet (its first send under way) is not either."""
    s = Sessions("f")
    c = s.open("hello")
    a = s.request(c, "x", "token.update", b"a")
    b = s.request(c, "y", "scene.get", b"b")
    n = s.request(c, "x", "scene.get", b"n")  # made, not sent yet
    s.sent(b.rid, 10.0)
    s.sent(a.rid, 11.0)
    assert s.overdue(10.0 + RESEND_S - 0.01) == []
    assert s.overdue(11.0 + RESEND_S) == [a, b]
    s.sent(a.rid, 20.0)
    s.sent(b.rid, 20.0)
    assert s.answered(a.rid)
    assert s.overdue(20.0 + RESEND_S) == [b]
    s.sent(a.rid, 30.0)  # a late send of an answered request is not remembered
    assert s.overdue(40.0) == [b]
    assert n not in s.overdue(99.0)
    s.close(c)
    assert s.overdue(99.0) == []


def test_an_owner_drops_a_copy_of_a_waiting_request_and_answers_a_late_one_again() -> None:
    r = Requests()
    assert r.arrived("f.1") is True
    assert r.arrived("f.1") is False  # the first one's answer is on its way
    assert r.answer("f.1") is None
    r.done("f.1", b"refused")
    assert r.answer("f.1") == b"refused"
    assert r.arrived("f.1") is True  # queued: _handle answers it from `answer`
    r.done("f.1", b"refused")
    r.done("f.2", None)  # a read: nothing kept, a copy is handled afresh
    assert r.answer("f.2") is None
    r.done("f.3", b"x" * (KEPT_ANSWER_BYTES + 1))
    assert r.answer("f.3") is None
    for k in range(REMEMBERED + 5):
        r.done(f"g.{k}", b"ack")
    assert len(r.answers) == REMEMBERED and r.answer("g.0") is None
    assert r.waiting == set()


def test_a_logged_change_is_answered_from_the_log() -> None:
    j = Journal()
    assert j.answer("r1") is None
    j.logged("r1", b"ack-2", 7)
    assert j.answer("r1") == b"ack-2" and j.seq == 7


def test_a_lease_is_taken_over_only_when_its_worker_stops_renewing() -> None:
    live = Liveness(started=100.0)
    owners = {"t1": ("w1", "arena", 5), "t2": ("w2", "other", 9), "t3": ("me", "mine", 2)}
    live.heard("w1", 100.0)
    live.heard("w2", 100.0)
    assert takeovers(owners, "me", live, 100.0 + LEASE_S / 2) == []
    live.heard("w2", 101.5)
    live.heard("me", 101.9)  # its own renewals show (else it takes nothing over)
    assert takeovers(owners, "me", live, 100.0 + LEASE_S + 0.1) == [("t1", "arena", 5)]
    live.gone("w2")  # a clean stop: at once
    assert takeovers(owners, "me", live, 101.6) == [("t2", "other", 9)]
    # A worker never heard of ages from when this one started watching.
    assert not Liveness(started=50.0).stale("w9", 51.0)
    assert Liveness(started=50.0).stale("w9", 50.0 + LEASE_S + 0.1)


def test_a_worker_whose_own_renewals_do_not_show_takes_nothing_over() -> None:
    """JetStream stalls (a node died): neither worker's renewals come back through the
    watch. Each would find the other stale and take its scenes, back and forth (seen: the
    two workers swapped three scenes twice a second, and a scene was replayed while the
    other unloaded it). A worker takes over only while its own renewals show."""
    live = Liveness(started=0.0)
    owners = {"tok": ("w2", "arena", 7)}
    live.heard("w1", 10.0)
    live.heard("w2", 10.0)
    assert takeovers(owners, "w1", live, 10.0 + LEASE_S + 0.1) == []
    live.heard("w1", 12.0)  # w1's renewals show again; w2's do not
    assert takeovers(owners, "w1", live, 12.5) == [("tok", "arena", 7)]


def test_the_clients_of_a_silent_front_are_forgotten() -> None:
    heard = {"f1": 100.0, "f2": 100.0 + FRONT_GONE_S}
    now = 100.0 + FRONT_GONE_S + 1
    assert silent_fronts({"f1", "f2"}, heard, 0.0, now) == {"f1"}
    # One never heard of since this worker started: given the same time.
    assert silent_fronts({"f3"}, heard, now - 1, now) == set()
    assert silent_fronts({"f3"}, heard, 0.0, now) == {"f3"}
