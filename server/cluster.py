"""The bookkeeping of NATS mode, sans I/O: what a front process must remember of its
clients' requests, what a worker must remember of a scene's change log, and when a scene's
lease is stale.

Rule of this module: plain values and decisions (time is passed in, never read), no
sockets and no NATS (server/mesh.py moves the messages). The rules they keep:

- A request is answered once. Each request a front process sends gets an id of its own
  (`rid`); the first answer for it is delivered and later ones (a request sent again to a
  scene's new owner, whose old owner had answered after all) are dropped.
- A change is applied once. The owner logs each accepted change with its rid and its
  answer before it answers; a change sent again (its owner died after logging it) is
  answered from the log, not applied a second time.
- A scene belongs to the worker holding its lease, and a lease holds while its worker
  renews its liveness; a worker not heard of for LEASE_S may lose its scenes to another,
  which takes each over (one at a time: a compare-and-set on the lease) and resumes it from
  the log at the last acknowledged revision.
- When a scene changes owner, every front process sends the new owner, for each of its
  clients, the subscriptions it held there (a full set comes back: the new owner knows
  nothing of what the old one sent) and the requests still unanswered, in their order.
- A request is sent until it is answered. Core NATS delivers at most once: a message on
  its way when a NATS node dies, or an answer published while the front is reconnecting,
  is lost. A front sends a request that has no answer after RESEND_S again (same rid);
  the owner hands a copy of a request it is still handling nothing, and answers a copy of
  one it answered with the answer it gave (`Requests`), so a copy never applies a change
  twice.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

#: Seconds without a renewal after which a worker's leases may be taken over.
LEASE_S = 2.0
#: Seconds between two renewals of a worker's liveness.
RENEW_S = 0.4
#: Answers kept per scene for changes that may be sent again (and rids answered, per front).
REMEMBERED = 4096
#: Seconds after which a worker forgets the clients of a front process it has not heard
#: from (front processes say they are there every FRONT_BEAT_S).
FRONT_BEAT_S = 1.0
FRONT_GONE_S = 10.0
#: Changes between two snapshots of a scene (a new owner replays at most these).
SNAPSHOT_EVERY = 100
#: Seconds a front waits for a request's answer before it sends the request again.
RESEND_S = 3.0
#: Answers larger than this are not remembered by a scene's owner (a change's answer is an
#: ack or an error, far smaller): a copy of their request is handled again.
KEPT_ANSWER_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Pending:
    """A request on its way to a scene's owner, not answered yet."""

    rid: str
    session: str
    scene: str
    frame: bytes | str


@dataclass(slots=True)
class _Session:
    hello: bytes | str
    #: The subscribe frame of each scene it is subscribed to (sent again to a new owner).
    subscriptions: dict[str, bytes | str] = field(default_factory=dict)
    #: Its requests not answered to it yet, in the order it sent them, and the answers
    #: that came before the answer of an earlier request (held until it comes).
    order: deque[str] = field(default_factory=deque)
    held: dict[str, list[Any]] = field(default_factory=dict)


class Sessions:
    """A front process's clients: their hellos, subscriptions and unanswered requests."""

    def __init__(self, front: str) -> None:
        self.front = front
        self._sessions: dict[str, _Session] = {}
        self._pending: dict[str, Pending] = {}  # in the order sent
        self._sent: dict[str, float] = {}  # rid -> when it was last sent
        self._answered: OrderedDict[str, None] = OrderedDict()
        # Each client request's session, until its answer is handed over (`in_order`).
        self._asker: dict[str, str] = {}
        self._next = 0

    def _id(self) -> str:
        self._next += 1
        return f"{self.front}.{self._next}"

    def open(self, hello: bytes | str) -> str:
        """A client was welcomed with this hello: its session id."""
        sid = self._id()
        self._sessions[sid] = _Session(hello)
        return sid

    def close(self, session: str) -> None:
        self._sessions.pop(session, None)
        for rid in [r for r, p in self._pending.items() if p.session == session]:
            del self._pending[rid]
            self._sent.pop(rid, None)
        for rid in [r for r, s in self._asker.items() if s == session]:
            del self._asker[rid]

    def hello(self, session: str) -> bytes | str:
        return self._sessions[session].hello

    def local(self, session: str) -> bool:
        return session in self._sessions

    def request(self, session: str, scene: str, kind: str | None,
                frame: bytes | str) -> Pending:
        """A client's request for `scene` (its `type` is `kind`), to send to the owner."""
        pending = Pending(self._id(), session, scene, frame)
        self._pending[pending.rid] = pending
        self._queue(session, pending.rid)
        subs = self._sessions[session].subscriptions
        if kind == "subscribe":
            subs[scene] = frame
        elif kind in ("unsubscribe", "scene.unload"):
            subs.pop(scene, None)
        return pending

    def _queue(self, session: str, rid: str) -> None:
        self._sessions[session].order.append(rid)
        self._asker[rid] = session

    def aside(self, session: str) -> str:
        """A client request answered outside a scene's owner (one naming no scene): its
        rid, for `in_order`."""
        rid = self._id()
        self._queue(session, rid)
        return rid

    def in_order(self, rid: str, items: list[Any]) -> list[Any]:
        """The answer `items` to request `rid` came: what to hand to the client now, in
        the order of its requests (protocol section 3): nothing while an earlier request
        of it waits for its answer; this one and the held ones after it once that came.
        An answer to no request of a client (a subscription sent again to a new owner)
        is handed over at once."""
        session = self._asker.pop(rid, None)
        state = self._sessions.get(session) if session is not None else None
        if state is None:
            return items
        state.held[rid] = items
        out: list[Any] = []
        while state.order and state.order[0] in state.held:
            out.extend(state.held.pop(state.order.popleft()))
        return out

    def answered(self, rid: str) -> bool:
        """An answer to `rid` came: True the first time (deliver it), False after."""
        if rid in self._answered:
            return False
        self._answered[rid] = None
        while len(self._answered) > REMEMBERED:
            self._answered.popitem(last=False)
        self._pending.pop(rid, None)
        self._sent.pop(rid, None)
        return True

    def sent(self, rid: str, now: float) -> None:
        """Request `rid` was sent (again) at `now`."""
        if rid in self._pending:
            self._sent[rid] = now

    def overdue(self, now: float) -> list[Pending]:
        """The requests sent and not answered for RESEND_S, in the order they were made:
        to send again (the message or its answer may have been lost)."""
        return [p for p in self._pending.values()
                if now - self._sent.get(p.rid, now) >= RESEND_S]

    def unanswered(self, scene: str) -> list[Pending]:
        return [p for p in self._pending.values() if p.scene == scene]

    def subscribed(self, scene: str) -> bool:
        """Whether a client here holds a subscription to `scene` (its deltas are wanted)."""
        return any(scene in s.subscriptions for s in self._sessions.values())

    def moved(self, scene: str) -> list[Pending]:
        """`scene` has a new owner: what to send it, in order: each subscription again
        (under a new rid: the old one was answered), then each unanswered request (under
        its own rid: the new owner answers a logged change from its log)."""
        out = []
        for session, state in self._sessions.items():
            frame = state.subscriptions.get(scene)
            if frame is not None:
                again = Pending(self._id(), session, scene, frame)
                self._pending[again.rid] = again
                out.append(again)
        out.extend(p for p in self._pending.values() if p.scene == scene and p not in out
                   and not any(o.rid == p.rid for o in out))
        return out


@dataclass(slots=True)
class Journal:
    """What a scene's owner knows of its change log: the last entry's sequence in the log
    (the next must follow it, else another owner wrote meanwhile), the answers of the last
    changes by rid, and the changes since the last snapshot."""

    seq: int = 0
    answers: OrderedDict[str, bytes] = field(default_factory=OrderedDict)
    since_snapshot: int = 0

    def logged(self, rid: str, answer: bytes, seq: int) -> None:
        self.seq = seq
        self.answers[rid] = answer
        while len(self.answers) > REMEMBERED:
            self.answers.popitem(last=False)
        self.since_snapshot += 1

    def answer(self, rid: str) -> bytes | None:
        """The answer a logged change was given (None: not logged)."""
        return self.answers.get(rid)

    def snapshot_due(self) -> bool:
        return self.since_snapshot >= SNAPSHOT_EVERY


@dataclass(slots=True)
class Requests:
    """What a scene's owner knows of the requests it was sent, by rid: those queued or
    being handled, and the answers it gave to changes (the last REMEMBERED, each up to
    KEPT_ANSWER_BYTES; a logged change's answer is in the Journal too, which a new owner
    reads back from the log). A front sends a request again when its answer is late."""

    waiting: set[str] = field(default_factory=set)
    answers: OrderedDict[str, bytes] = field(default_factory=OrderedDict)

    def arrived(self, rid: str) -> bool:
        """Request `rid` came: whether to queue it (False: a copy of one still waiting,
        which is dropped: the first one's answer is on its way)."""
        if rid in self.waiting:
            return False
        self.waiting.add(rid)
        return True

    def answer(self, rid: str) -> bytes | None:
        """The answer request `rid` was given (None: none remembered)."""
        return self.answers.get(rid)

    def done(self, rid: str, answer: bytes | None) -> None:
        """Request `rid` was handled; `answer` is what was sent for it (None: nothing,
        or nothing to send again)."""
        self.waiting.discard(rid)
        if answer is not None and len(answer) <= KEPT_ANSWER_BYTES:
            self.answers[rid] = answer
            while len(self.answers) > REMEMBERED:
                self.answers.popitem(last=False)


class Liveness:
    """When each worker was last heard renewing (by this process's clock)."""

    def __init__(self, started: float, lease_s: float = LEASE_S) -> None:
        self.started = started
        self.lease_s = lease_s
        self._heard: dict[str, float] = {}

    def heard(self, worker: str, now: float) -> None:
        self._heard[worker] = now

    def gone(self, worker: str) -> None:
        """The worker said it stops (or its liveness was deleted): stale at once."""
        self._heard[worker] = float("-inf")

    def stale(self, worker: str, now: float) -> bool:
        """Whether `worker`'s leases may be taken over: not heard for lease_s (one never
        heard of: lease_s after this process started watching)."""
        last = self._heard.get(worker, self.started)
        return now - last > self.lease_s

    def may_take(self, holder: str, me: str, now: float) -> bool:
        """Whether worker `me` may take a lease `holder` holds: `holder` is another worker
        and stale, and `me`'s own renewals show. When JetStream stalls (a node died,
        leaders being elected) every worker's renewals stop showing, its own too, so
        nobody is stale for good reason, and taking scenes over would only bounce them
        between workers."""
        return holder != me and not self.stale(me, now) and self.stale(holder, now)


def takeovers(owners: dict[str, tuple[str, str, int]], me: str, live: Liveness,
              now: float) -> list[tuple[str, str, int]]:
    """Of the leases (subject token -> (owner, scene id, lease revision)), those `me` may
    take (`Liveness.may_take`): (token, scene id, revision) to try and take."""
    return [(tok, sid, rev) for tok, (worker, sid, rev) in owners.items()
            if live.may_take(worker, me, now)]


def silent_fronts(fronts: set[str], heard: dict[str, float], started: float,
                  now: float) -> set[str]:
    """Of the front processes whose clients a worker holds, those not heard from for
    FRONT_GONE_S (one never heard of: since the worker started listening): killed, their
    clients gone with them."""
    return {f for f in fronts if now - heard.get(f, started) > FRONT_GONE_S}
