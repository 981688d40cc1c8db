"""A large full set is encoded and written in steps (issue 16's budget at 200 tokens).

`server.compact.encoding_annotations` gives the very bytes `encode_annotations` gives, in
both forms and both encodings, whatever the chunk size; the Core encodes a subscription's
full set ahead of handling it (`warm_frame`, as the server's worker runs it), sends that
frame when nothing changed meanwhile and a fresh one when something did; and the server
writes a large frame as a fragmented message that a client reads whole.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Generator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from bench.scenes import generate
from server import app, compact
from server.compact import encode_annotations, encoding_annotation_parts, encoding_annotations
from server.frames import Parts
from server.messages import AnnotationOut, Annotations, BreathOut
from server.session import Core, Send, SendParts
from tests.conftest import LiveServer, Peer

HELLO = {"type": "hello", "protocol": 1, "client": "pytest"}


def _run(steps: Generator[None, None, Any]) -> tuple[Any, int]:
    """What a stepped computation returns, and how many times it yielded."""
    count = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value, count
        count += 1


def _core(tokens: int = 24, walls: int = 60, ruleset: str = "pf2",
          compact_form: bool = False) -> tuple[Core, int, str]:
    core = Core()
    conn = core.connect()
    core.receive(conn, msgpack.packb({**HELLO, "compact": compact_form}))
    load = {**generate(tokens, walls, 1).message, "ruleset": ruleset, "id": 1}
    core.receive(conn, msgpack.packb(load))
    return core, conn, load["scene"]["_id"]


def _annotations() -> list[AnnotationOut]:
    """Annotations of every mode, with lines, flankers and visible fractions among them:
    a generated scene's (pf2) and the demo scene's (pf1)."""
    out: list[AnnotationOut] = []
    demo = json.loads((Path(__file__).parent.parent / "server/demo/demo.json").read_text())
    for scene, ruleset in ((generate(24, 60, 1).message["scene"], "pf2"),
                           (demo["scene"], "pf1")):
        core = Core()
        conn = core.connect()
        core.receive(conn, msgpack.packb(HELLO))
        core.receive(conn, msgpack.packb({"type": "scene.load", "id": 1, "scene": scene,
                                          "ruleset": ruleset}))
        core.receive(conn, msgpack.packb({"type": "subscribe", "id": 2, "lines": True,
                                          "scene": scene["_id"]}))
        out += core.tables.view_table(scene["_id"], True, False).entries.values()
    return out


ANNOTATIONS = _annotations()
BREATH = [BreathOut("t1", 3, 5, False, False, False, 1, 12, 20)]


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("compact_form", [True, False])
@pytest.mark.parametrize("count", [0, 1, 15, 16, 17, 1000, 65_536])
def test_encoding_in_steps_gives_the_same_bytes(binary: bool, compact_form: bool,
                                                 count: int) -> None:
    """Across msgpack's array and map headers (16 and 65,536 items), with chunks smaller
    and larger than the message, with and without breath and a request id."""
    items = (ANNOTATIONS * (count // len(ANNOTATIONS) + 1))[:count]
    if count >= len(ANNOTATIONS):
        assert any(a.flankers for a in items) and any(a.visible is not None for a in items)
    for breath, rid in (([], None), (BREATH, 7), (BREATH, "req-é")):
        message = Annotations("scene", 3, True, items, [], breath, rid)
        want = encode_annotations(message, binary, compact_form)
        for chunk in (1, 7, 16, 4096, 100_000):
            if count > 1000 and chunk < 4096:
                continue
            got, steps = _run(encoding_annotations(message, binary, compact_form, chunk))
            assert got == want, (breath, rid, chunk)
            assert steps == (0 if count <= chunk else -(-count // chunk))
            parts, _ = _run(encoding_annotation_parts(message, binary, compact_form, chunk))
            if count <= chunk:
                assert parts == want
            else:
                assert isinstance(parts, Parts) and parts.text is not binary
                assert parts.joined() == want and len(parts) == len(want.encode()
                                                                   if isinstance(want, str)
                                                                   else want)


def _subscribe_as_the_server_does(core: Core, conn: int, frame: bytes) -> tuple[bytes, int]:
    """`warm_frame` until it has no more work (asked again after work done in steps, as
    server/app.py's `_core_sliced` does), then `receive`: the frame sent, and the steps."""
    steps = 0
    while True:
        _, done = _run(core.warm_frame(conn, frame))
        steps += done
        if not done:
            break
    (sent, *_) = core.receive(conn, frame)
    assert isinstance(sent, Send) and isinstance(sent.frame, bytes)
    return sent.frame, steps


@pytest.mark.parametrize("compact_form", [False, True])
def test_a_full_set_encoded_ahead_is_the_frame_receive_alone_sends(
        compact_form: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compact, "ENCODE_CHUNK", 50)
    frames = []
    for ahead in (True, False):
        core, conn, sid = _core(compact_form=compact_form)
        frame = msgpack.packb({"type": "subscribe", "id": 2, "scene": sid})
        if ahead:
            got, steps = _subscribe_as_the_server_does(core, conn, frame)
            assert steps > 10  # the table in slices, the full set in chunks of 50
            assert not core._full_sets  # taken
        else:
            (sent, *_) = core.receive(conn, frame)
            assert isinstance(sent, Send) and isinstance(sent.frame, bytes)
            got = sent.frame
        frames.append(got)
    assert frames[0] == frames[1]
    assert len(msgpack.unpackb(frames[0])["annotations"]) == 3 * 24 * 23


@pytest.mark.parametrize("compact_form", [False, True])
def test_a_core_whose_edge_writes_parts_hands_a_large_full_set_on_unjoined(
        compact_form: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `in_parts` (server/app.py's edge), the full set encoded ahead is handed on in
    its parts (SendParts), the very frame a Core without it sends; `drain` joins it."""
    monkeypatch.setattr(compact, "ENCODE_CHUNK", 50)
    core, conn, sid = _core(compact_form=compact_form)
    frame = msgpack.packb({"type": "subscribe", "id": 2, "scene": sid})
    want, _ = _subscribe_as_the_server_does(core, conn, frame)
    for drained in (False, True):
        core, conn, sid = _core(compact_form=compact_form)
        core.in_parts = True
        while _run(core.warm_frame(conn, frame))[1]:
            pass
        (sent, *_) = core.receive(conn, frame)
        assert isinstance(sent, SendParts) and not sent.frame.text
        assert len(sent.frame.parts) > 3 * 24 * 23 // 50
        if drained:
            (joined, *_) = core.drain([sent])
            assert isinstance(joined, Send) and joined.frame == want
        else:
            assert sent.frame.joined() == want


def test_a_small_full_set_is_encoded_in_receive_only() -> None:
    """A table that fits in one step of the encoder costs the subscription no trip of
    its own: nothing is encoded ahead of the request."""
    core, conn, sid = _core()
    frame = msgpack.packb({"type": "subscribe", "id": 2, "scene": sid})
    _run(core.warm_frame(conn, frame))  # the table, in slices
    assert not core._full_sets
    assert _run(core.warm_frame(conn, frame)) == (None, 0)
    (sent, *_) = core.receive(conn, frame)
    assert isinstance(sent, Send) and msgpack.unpackb(sent.frame)["full"]


def test_a_full_set_encoded_ahead_is_not_sent_once_the_scene_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A change between the full set's encoding and the request's handling (another
    connection's, served between two steps): the subscriber gets the scene as it is."""
    monkeypatch.setattr(compact, "ENCODE_CHUNK", 50)
    core, conn, sid = _core()
    gm = core.connect()
    core.receive(gm, msgpack.packb(HELLO))
    frame = msgpack.packb({"type": "subscribe", "id": 2, "scene": sid})
    _, steps = _run(core.warm_frame(conn, frame))
    assert steps > 1 and conn in core._full_sets
    token = generate(24, 60, 1).message["scene"]["tokens"][0]
    core.receive(gm, msgpack.packb({"type": "token.update", "scene": sid, "id": 3,
                                    "tokens": [{"_id": token["_id"], "x": token["x"] + 100}]}))
    (sent, *_) = core.receive(conn, frame)
    assert isinstance(sent, Send) and isinstance(sent.frame, bytes)
    got = msgpack.unpackb(sent.frame)
    assert got["revision"] == core.scenes[sid].revision == 2
    fresh, fresh_conn, _ = _core()
    fresh.receive(fresh_conn, msgpack.packb({"type": "token.update", "scene": sid, "id": 3,
                                             "tokens": [{"_id": token["_id"],
                                                         "x": token["x"] + 100}]}))
    (want, *_) = fresh.receive(fresh_conn, frame)
    assert isinstance(want, Send)
    assert sent.frame == want.frame


class _Socket:
    """What `server.app._send` hands websockets: each message, its fragments listed, and in
    `events` each piece as it is taken, among the ticks of another task."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.events: list[str] = []
        self.text: list[bool | None] = []

    async def send(self, message: Any, text: bool | None = None) -> None:
        self.text.append(text)
        if isinstance(message, (bytes, str)):
            self.sent.append(message)
            return
        pieces = []
        async for m in message:
            self.events.append("piece")
            pieces.append(bytes(m) if isinstance(m, memoryview) else m)
        self.sent.append(pieces)


def _send_beside_ticks(ws: _Socket, frame: bytes | str | Parts, ticks: int) -> None:
    """`server.app._send(ws, frame)` beside a task that notes a tick in `ws.events` each
    time the event loop runs it, `ticks` times."""
    async def both() -> None:
        async def ticker() -> None:
            for _ in range(ticks):
                ws.events.append("tick")
                await asyncio.sleep(0)

        await asyncio.gather(app._send(ws, frame), ticker())  # type: ignore[arg-type]

    asyncio.run(both())


@pytest.mark.parametrize("frame", [b"\x01" * (2**20 * 5 // 2), "é" * (2**20 * 5 // 2)])
def test_a_large_frame_is_written_in_fragments(frame: bytes | str) -> None:
    """Pieces of FRAGMENT_BYTES, the event loop running other tasks between two (a socket
    whose reader keeps up never makes websockets wait)."""
    ws = _Socket()
    _send_beside_ticks(ws, frame, 10)
    (pieces,) = ws.sent
    assert [len(p) for p in pieces] == [2**20, 2**20, 2**19]
    joined = b"".join(pieces) if isinstance(frame, bytes) else "".join(pieces)
    assert joined == frame
    between = "".join("p" if e == "piece" else "t" for e in ws.events)
    assert "ptp" in between.replace("tt", "t"), between
    asyncio.run(app._send(ws, frame[:2**20]))  # type: ignore[arg-type]
    assert ws.sent[-1] == frame[:2**20]  # one frame, as it is


@pytest.mark.parametrize("text", [False, True])
def test_a_frame_given_in_parts_is_written_as_one_fragmented_message(text: bool) -> None:
    """Fragments of FRAGMENT_BYTES whatever the parts' sizes (a large part cut, small ones
    sharing a fragment), the event loop running other tasks between two, the message's
    kind (text or binary) set by the frame, not by its pieces (which are bytes)."""
    mib = app.FRAGMENT_BYTES
    sizes = [1, 3, 5 * mib // 2, 7, mib, 2, mib - 10, 10, 1, mib * 2]
    parts = [bytes([65 + k % 26]) * n for k, n in enumerate(sizes)]
    frame = Parts.of([memoryview(p) if k % 2 else p for k, p in enumerate(parts)], text)
    ws = _Socket()
    _send_beside_ticks(ws, frame, 20)
    (pieces,) = ws.sent
    assert ws.text == [text]
    total = sum(sizes)
    assert [len(p) for p in pieces] == [mib] * (total // mib) + [total % mib]
    assert b"".join(pieces) == b"".join(parts)
    between = "".join("p" if e == "piece" else "t" for e in ws.events)
    assert "pp" not in between.replace("tt", "t"), between
    for small in ([b"x"], [b"", b"ab", b""]):  # one fragment, the whole frame
        asyncio.run(app._send(ws, Parts.of(list(small), text)))  # type: ignore[arg-type]
        assert ws.sent[-1] == [b"".join(small)]


@pytest.mark.parametrize("in_parts", [False, True])
@pytest.mark.parametrize("binary", [True, False])
def test_a_large_full_set_reaches_the_client_as_one_message(
        live_server: LiveServer, binary: bool, in_parts: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A full set of several MB (fragmented by the server) decodes whole, in msgpack and
    in JSON; encoded in steps (`in_parts`), it is written from its parts, never joined."""
    written: list[Parts] = []
    if in_parts:
        monkeypatch.setattr(compact, "ENCODE_CHUNK", 1000)
        fragments = app._fragments

        def spied(frame: Parts) -> Any:
            written.append(frame)
            return fragments(frame)

        monkeypatch.setattr(app, "_fragments", spied)
    gm = Peer.open(live_server.url)
    assert gm.hello()["type"] == "welcome"
    load = {**generate(60, 100, 1).message, "id": 1}
    assert gm.request(load)["type"] == "ack"
    request = {"type": "subscribe", "id": 2, "scene": load["scene"]["_id"]}
    if binary:
        gm.send(request)
    else:
        gm.send_raw(json.dumps(request))
    frame = gm.ws.recv(60)
    assert isinstance(frame, bytes if binary else str)
    assert len(frame) > 2 * app.FRAGMENT_BYTES
    reply = msgpack.unpackb(frame) if isinstance(frame, bytes) else json.loads(frame)
    assert reply["type"] == "annotations" and reply["full"] and reply["id"] == 2
    assert len(reply["annotations"]) == 3 * 60 * 59
    if in_parts:
        (parts,) = written
        assert parts.text is not binary and len(parts.parts) > 3 * 60 * 59 // 1000
        assert parts.joined() == frame
    else:
        assert not written
    gm.close()
