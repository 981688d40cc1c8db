"""The compact form of `annotations` (server/compact.py, docs/protocol.md section 12).

Decoded, a compact frame is exactly the verbose frame the same subscriber would have got,
for every ruleset on every grid it supports, full sets and deltas, JSON and msgpack (what
the Python client's decoders give: `expand` on the typed Structs, `expand_plain` on plain
values); a client that does not ask gets the verbose form, byte for byte as before.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from covercast.client import expand, expand_plain
from rulesets import REGISTRY
from server.compact import FLAG_NAMES
from server.messages import Annotations, CompactAnnotations
from server.session import Core, Send

Doc = dict[str, Any]
SIZE = 100

#: Every ruleset on every grid it supports (welcome's `grids`).
CASES = [(r.name, grid) for r in REGISTRY.all() for grid in r.describe()["grids"]]

SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

cell = st.tuples(st.integers(0, 9), st.integers(0, 9))


@st.composite
def scenes(draw: st.DrawFn, grid: int) -> Doc:
    """A small scene with what makes annotations differ: walls (low, improved, doors),
    tokens of several sizes, heights and sides (flanking, soft cover), a hidden one, water
    and an obscuring region."""
    n = draw(st.integers(2, 6))
    cells = draw(st.lists(cell, min_size=n, max_size=n, unique=True))
    tokens: list[Doc] = []
    for k, (x, y) in enumerate(cells):
        t: Doc = {"id": f"t{k}", "x": x * SIZE, "y": y * SIZE,
                  "disposition": draw(st.sampled_from([-1, 1])),
                  "elevation": draw(st.sampled_from([0, 0, 0, 10]))}
        if draw(st.integers(0, 4)) == 0:
            t.update(width=2, height=2, size="large")
        if draw(st.integers(0, 6)) == 0:
            t["hidden"] = True
        tokens.append(t)
    walls: list[Doc] = []
    for k in range(draw(st.integers(0, 6))):
        (x, y), (dx, dy) = draw(cell), draw(st.sampled_from(
            [(3, 0), (0, 3), (2, 0), (0, 2), (2, 2), (2, -1)]))
        w: Doc = {"id": f"w{k}", "c": [x * SIZE, y * SIZE, (x + dx) * SIZE, (y + dy) * SIZE]}
        kind = draw(st.sampled_from([None, None, "low", "improved", "door"]))
        if kind == "door":
            w.update(door=1, ds=draw(st.sampled_from([0, 1])))
        elif kind is not None:
            w["flags"] = {"covercast": {"cover": kind}}
        walls.append(w)
    regions: list[Doc] = []
    if draw(st.booleans()):
        regions.append({"id": "lake", "kind": "water", "surface": 8,
                        "points": [0, 0, 400, 0, 400, 1000, 0, 1000]})
    if draw(st.booleans()):
        regions.append({"id": "fog", "kind": "obscuring",
                        "points": [500, 500, 900, 500, 900, 900, 500, 900]})
    return {"id": "s", "grid": {"type": grid, "size": SIZE, "distance": 5},
            "width": 1000, "height": 1000, "tokens": tokens, "walls": walls,
            "regions": regions}


@st.composite
def changes(draw: st.DrawFn, doc: Doc) -> list[Doc]:
    """A few changes a gm makes: moves, a token hidden or shown, one created, one deleted."""
    ids = [t["id"] for t in doc["tokens"]]
    out: list[Doc] = []
    for step in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["move", "move", "hide", "create", "delete"]))
        if kind == "move":
            x, y = draw(cell)
            out.append({"type": "token.update", "scene": "s",
                        "tokens": [{"id": draw(st.sampled_from(ids)), "x": x * SIZE,
                                    "y": y * SIZE}]})
        elif kind == "hide":
            out.append({"type": "token.update", "scene": "s",
                        "tokens": [{"id": draw(st.sampled_from(ids)),
                                    "hidden": draw(st.booleans())}]})
        elif kind == "create":
            x, y = draw(cell)
            out.append({"type": "token.create", "scene": "s",
                        "tokens": [{"id": f"n{step}", "x": x * SIZE, "y": y * SIZE,
                                    "disposition": 1}]})
        elif len(ids) > 2:
            gone = draw(st.sampled_from(ids))
            ids.remove(gone)
            out.append({"type": "token.delete", "scene": "s", "ids": [gone]})
    return out


def _frame(message: Doc, binary: bool) -> bytes | str:
    return msgpack.packb(message) if binary else json.dumps(message)


def _plain(frame: bytes | str) -> Any:
    return json.loads(frame) if isinstance(frame, str) else msgpack.unpackb(frame)


def _typed(frame: bytes | str, kind: type[Any]) -> Any:
    if isinstance(frame, str):
        return msgspec.json.decode(frame.encode(), type=kind)
    return msgspec.msgpack.decode(frame, type=kind)


class Table:
    """A Core with a gm (who changes the scene) and, for each encoding and view, a verbose
    and a compact subscriber, side by side."""

    def __init__(self, load: Doc, lines: bool, modes: list[str]) -> None:
        self.core = Core(access_token="g", player_token="p")
        self.gm = self._greet({"token": "g"}, binary=True)
        assert _plain(self._send(self.gm, load, True)[0])["type"] == "ack"
        self.pairs: list[tuple[int, int, bool]] = []
        self.last: dict[int, bytes | str] = {}
        for binary in (False, True):
            for token in ("g", "p"):  # the gm's view and a viewer's (hidden tokens out)
                verbose = self._greet({"token": token}, binary)
                compact = self._greet({"token": token, "compact": True}, binary)
                self.pairs.append((verbose, compact, binary))
        self.full: dict[int, bytes | str] = {}
        sub = {"type": "subscribe", "scene": "s", "lines": lines, "modes": modes, "id": 7}
        for verbose, compact, binary in self.pairs:
            for conn in (verbose, compact):
                (self.full[conn],) = self._send(conn, sub, binary)

    def _greet(self, extra: Doc, binary: bool) -> int:
        conn = self.core.connect()
        hello = {"type": "hello", "protocol": 1, "client": "test", **extra}
        (welcome,) = self._send(conn, hello, binary)
        assert _plain(welcome)["type"] == "welcome"
        return conn

    def _send(self, conn: int, message: Doc, binary: bool) -> list[bytes | str]:
        outs = self.core.drain(self.core.receive(conn, _frame(message, binary)))
        return [o.frame for o in outs if isinstance(o, Send) and o.conn == conn]

    def change(self, message: Doc) -> dict[int, list[bytes | str]]:
        """The gm's change; each subscriber's frames (its delta, if any)."""
        outs = self.core.drain(self.core.receive(self.gm, msgpack.packb(message)))
        got: dict[int, list[bytes | str]] = {}
        for o in outs:
            if isinstance(o, Send) and o.conn != self.gm:
                got.setdefault(o.conn, []).append(o.frame)
        return got


def same(verbose: bytes | str, compact: bytes | str) -> None:
    """The compact frame decodes to exactly the verbose one, plain and typed."""
    assert type(verbose) is type(compact)
    plain = _plain(compact)
    if plain.get("type") != "annotations":
        assert plain == _plain(verbose)
        return
    assert plain["form"] == "compact" and "form" not in _plain(verbose)
    assert expand_plain(plain) == _plain(verbose)
    assert expand(_typed(compact, CompactAnnotations)) == _typed(verbose, Annotations)


@pytest.mark.parametrize(("ruleset", "grid"), CASES)
@SETTINGS
@given(data=st.data(), lines=st.booleans(),
       modes=st.sampled_from([["melee", "reach", "ranged"], ["ranged"], ["melee", "reach"]]))
def test_compact_decodes_to_the_verbose_form(ruleset: str, grid: int, data: st.DataObject,
                                             lines: bool, modes: list[str]) -> None:
    doc = data.draw(scenes(grid))
    table = Table({"type": "scene.load", "scene": doc, "ruleset": ruleset}, lines, modes)
    for verbose, compact, _ in table.pairs:
        same(table.full[verbose], table.full[compact])
    for message in data.draw(changes(doc)):
        got = table.change(message)
        for verbose, compact, _ in table.pairs:
            assert len(got.get(verbose, [])) == len(got.get(compact, []))
            for v, c in zip(got.get(verbose, []), got.get(compact, []), strict=True):
                same(v, c)
    # The last, empty full set of an unloaded scene too.
    got = table.change({"type": "scene.unload", "scene": "s"})
    for verbose, compact, _ in table.pairs:
        same(got[verbose][0], got[compact][0])


def test_the_compact_form_lists_shared_values_once() -> None:
    """Flags are the indices of the true ones in the frame's `flags` (every flag name,
    sorted), modifiers indices into the frame's `modifiers`, each distinct one listed once;
    the optional fields ride in a trailing map only when present."""
    doc = {"id": "s", "grid": {"type": 1, "size": SIZE, "distance": 5},
           "tokens": [{"id": "a", "x": 0, "y": 0, "disposition": 1},
                      {"id": "f", "x": 200, "y": 0, "disposition": 1},
                      {"id": "t", "x": 100, "y": 0, "disposition": -1},
                      {"id": "far", "x": 600, "y": 600, "disposition": -1}],
           "walls": [{"id": "w", "c": [300, 500, 900, 500], "flags": {"covercast": {
               "cover": "low"}}}]}
    table = Table({"type": "scene.load", "scene": doc, "ruleset": "dnd35"}, False,
                  ["melee", "reach", "ranged"])
    verbose, compact, _ = table.pairs[1]  # msgpack, the gm's view
    msg = _plain(table.full[compact])
    assert msg["flags"] == list(FLAG_NAMES) == sorted(FLAG_NAMES)
    mods = [msgspec.json.encode(m) for m in msg["modifiers"]]
    assert len(mods) == len(set(mods))
    rows = {(r[0], r[1], r[2]): r for r in msg["annotations"]}
    flanking = rows[("a", "t", "melee")]
    assert flanking[7] == {"flankers": ["f"]}
    assert {msg["flags"][k] for k in flanking[6]} >= {"flanking", "adjacent", "can_target"}
    assert {"stat": "attack", "value": 2, "kind": "flanking", "reason": "flanking with f"} in [
        msg["modifiers"][k] for k in flanking[5]]
    assert len(rows[("far", "a", "ranged")]) == 7  # nothing optional: no trailing map
    assert expand_plain(msg) == _plain(table.full[verbose])
    # A tenth of the bytes, or less, on this small scene already.
    assert len(table.full[compact]) * 4 < len(table.full[verbose])


def test_without_the_flag_nothing_changes() -> None:
    """A protocol 1 client that does not ask gets the verbose form: its welcome has no
    `compact`, its annotations no `form`; asking gets `compact: true` in welcome."""
    core = Core()
    plain, asking = core.connect(), core.connect()
    (w1,) = core.receive(plain, json.dumps({"type": "hello", "protocol": 1, "client": "x"}))
    (w2,) = core.receive(asking, json.dumps({"type": "hello", "protocol": 1, "client": "x",
                                             "compact": True}))
    assert isinstance(w1, Send) and isinstance(w2, Send)
    assert "compact" not in json.loads(w1.frame)
    assert json.loads(w2.frame)["compact"] is True
    load = {"type": "scene.load", "scene": {"id": "s", "grid": {"type": 1}, "tokens": [
        {"id": "a", "x": 0, "y": 0}, {"id": "b", "x": 300, "y": 0}]}}
    core.receive(plain, json.dumps(load))
    (full,) = core.receive(plain, json.dumps({"type": "subscribe", "scene": "s"}))
    assert isinstance(full, Send)
    assert "form" not in json.loads(full.frame)
    assert isinstance(json.loads(full.frame)["annotations"][0]["flags"], dict)


def test_a_bad_compact_flag_is_refused_by_name() -> None:
    core = Core()
    conn = core.connect()
    (out,) = core.receive(conn, json.dumps({"type": "hello", "protocol": 1, "client": "x",
                                            "compact": "yes"}))
    assert getattr(out, "code", None) == 1008
    assert "$.compact" in getattr(out, "reason", "")


# -- the typed client against the real server --------------------------------------------------

CLIENT_SCENE: Doc = {
    "id": "c", "grid": {"type": 1, "size": 50, "distance": 5},
    "walls": [{"_id": "low", "c": [150, 0, 150, 150], "flags": {"covercast": {"cover": "low"}}}],
    "tokens": [{"_id": "a", "x": 0, "y": 50, "disposition": 1},
               {"_id": "f", "x": 100, "y": 50, "disposition": 1},
               {"_id": "t", "x": 50, "y": 50, "disposition": -1},
               {"_id": "b", "x": 250, "y": 50, "disposition": -1}],
}


def test_the_client_asks_for_the_compact_form_and_gives_the_same_objects(
        live_server: Any) -> None:
    """`Client` asks for the compact form by default (welcome.compact) and its
    subscription's table, full set and deltas, holds the same AnnotationOuts as a client
    asking for the verbose form, in either encoding."""
    import asyncio

    from covercast.client import Client

    async def main() -> None:
        async with asyncio.timeout(30):
            async with Client(live_server.url) as gm, \
                    Client(live_server.url, compact=False) as plain:
                assert gm.welcome.compact is True and plain.welcome.compact is False
                await gm.load_scene(CLIENT_SCENE, "pf2")
                subs = [await gm.subscribe("c", lines=True),
                        await plain.subscribe("c", lines=True)]
                assert dict(subs[0].table) == dict(subs[1].table)
                assert subs[0].get("a", "t", "melee") is not None
                assert subs[0].get("a", "t", "melee").flankers == ["f"]  # type: ignore[union-attr]
                ack = await gm.move_token("c", "b", 200, 100)
                for sub in subs:
                    await sub.wait_for(ack.revision)
                assert dict(subs[0].table) == dict(subs[1].table)
    asyncio.run(main())


def test_the_client_falls_back_to_the_verbose_form_on_an_older_server() -> None:
    """A server from before the compact form refuses the unknown hello field (1008 naming
    it); the client says hello again without it and works as before."""
    import asyncio

    from websockets.asyncio.server import ServerConnection, serve

    from covercast.client import Client

    hellos: list[Doc] = []

    async def old_server(ws: ServerConnection) -> None:
        async for frame in ws:
            msg = msgpack.unpackb(frame) if isinstance(frame, bytes) else json.loads(frame)
            if msg["type"] == "hello":
                hellos.append(msg)
                if "compact" in msg:
                    await ws.close(1008, "expected hello; $.compact: unknown field 'compact' "
                                         "(value True)")
                    return
                await ws.send(msgpack.packb({
                    "type": "welcome", "protocol": 1, "server": "covercast", "version": "0",
                    "rulesets": [], "limits": {}, "role": "gm", "id": msg["id"]}))

    async def main() -> None:
        async with asyncio.timeout(20), serve(old_server, "127.0.0.1", 0) as srv:
            port = next(iter(srv.sockets)).getsockname()[1]
            async with Client(f"ws://127.0.0.1:{port}") as cc:
                assert cc.welcome.compact is False
                assert cc.connected
    asyncio.run(main())
    assert [("compact" in h) for h in hellos] == [True, False]


def test_the_protocol_docs_example_is_what_the_server_sends() -> None:
    """docs/protocol.md section 12's example is the compact reply to section 3.12's
    subscribe on section 3.2's scene, and decodes to section 4.6's verbose reply."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()
    load = json.loads(re.search(r"This load \(a scene with a limited wall.*?```json\n(.*?)```",
                                doc, re.S).group(1))  # type: ignore[union-attr]
    example = json.loads(re.search(r"```json\n(.*?)```", doc.split(
        "## 12. Compact annotations")[1], re.S).group(1))  # type: ignore[union-attr]
    verbose_doc = json.loads(re.search(r"The reply to the `subscribe` of section 3.12, on the "
                                       r"`crypt` scene.*?```json\n(.*?)```", doc,
                                       re.S).group(1))  # type: ignore[union-attr]
    core = Core()
    conn = core.connect()
    core.receive(conn, json.dumps({"type": "hello", "protocol": 1, "client": "docs",
                                   "compact": True}))
    core.receive(conn, json.dumps(load))
    (reply,) = core.receive(conn, json.dumps({"type": "subscribe", "scene": "crypt",
                                              "modes": ["ranged"], "lines": True, "id": 2}))
    assert isinstance(reply, Send)
    assert json.loads(reply.frame) == example
    assert expand_plain(example) == verbose_doc
