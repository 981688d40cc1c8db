"""Idle-time work between changes (Core.prepare): the next revision starts from a copy made
ahead of time and old tables are let go then. Whether or not it runs, and whenever it runs,
every subscriber must end up holding exactly the scene's annotations, and no table a
subscriber was sent may change afterwards."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Mapping
from typing import Any

import msgpack
import msgspec
import pytest

from server.messages import AnnotationOut
from server.session import Core, Send
from server.tables import annotation_out
from tests.conftest import LiveServer, Peer
from tests.test_incremental import _change, _scene, _send, gm_and_viewer, hide_or_show

Key = tuple[str, str, str]


def _apply(held: dict[Key, dict[str, Any]], frame: dict[str, Any]) -> None:
    """A client's copy of the annotations after one `annotations` frame."""
    if frame["full"]:
        held.clear()
    for a in frame["annotations"]:
        held[(a["attacker"], a["target"], a["mode"])] = a
    for k in frame["removed"]:
        held.pop((k[0], k[1], k[2]), None)


def _wire(table: dict[Key, AnnotationOut]) -> dict[Key, dict[str, Any]]:
    """The table as a client decodes it."""
    return {k: msgpack.unpackb(msgspec.msgpack.encode(v)) for k, v in table.items()}


@pytest.mark.parametrize("ruleset", ["dnd35", "degrees", "realms", "dnd5e"])
def test_subscribers_hold_the_scene_whenever_prepare_runs(ruleset: str) -> None:
    rng = random.Random(11)
    core, gm, viewer, snapshots = gm_and_viewer(rng, ruleset)
    held: dict[int, dict[Key, dict[str, Any]]] = {gm: {}, viewer: {}}
    for conn, frames in snapshots.items():
        for frame in frames:
            _apply(held[conn], frame)
    # Every table a subscriber was sent, with what it held then: none may change later.
    sent: list[tuple[Mapping[Key, AnnotationOut], dict[Key, AnnotationOut]]] = []
    used_spare = 0
    for step in range(36):
        if rng.random() < 0.6:
            core.prepare("s")
            if rng.random() < 0.3:
                core.prepare("s")  # twice: still one spare, still right
        spares = {k: v[1] for k, v in core.tables.spares.items()}
        if step % 9 == 7:
            # A reload with the lake's surface changed: every pair computed afresh.
            message = _scene(rng, ruleset)
            message["scene"]["regions"][0]["surface"] = rng.choice([6, 8, 10])
        else:
            message = hide_or_show(rng, core) if step % 6 == 4 else _change(rng, core, step)
        outputs = core.drain(core.receive(gm, msgpack.packb(message)))
        for o in outputs:
            if isinstance(o, Send) and isinstance(o.frame, bytes):
                frame = msgpack.unpackb(o.frame)
                if frame.get("type") == "annotations":
                    _apply(held[o.conn], frame)
        cache = core.tables.cache
        used_spare += sum(cache[k].table is t for k, t in spares.items() if k in cache)
        scene = core.scenes["s"]
        for conn, viewer_view in ((gm, False), (viewer, True)):
            sub = core.connections[conn].subscriptions["s"]
            geom = core.tables.visible_geometry(scene) if viewer_view else scene.geometry
            fresh = {a.key(): annotation_out(a)
                     for a in scene.ruleset.annotate(geom, scene.options)}
            assert sub.sent == fresh, f"{ruleset} step {step} conn {conn}"
            assert held[conn] == _wire(fresh), f"{ruleset} step {step} conn {conn}"
            sent.append((sub.sent, dict(sub.sent)))
        for table, then in sent:
            assert table == then, f"{ruleset} step {step}: a table already sent changed"
        assert len(core.tables.retired) <= 4 and len(core.tables.spares) <= 4
    assert used_spare > 5  # the spares were taken up, not only made


def test_prepare_of_an_unknown_or_unloaded_scene_keeps_nothing() -> None:
    rng = random.Random(3)
    core = Core(access_token="g")
    gm = core.connect()
    _send(core, gm, {"type": "hello", "protocol": 1, "client": "t", "token": "g"})
    _send(core, gm, _scene(rng, "dnd35"))
    _send(core, gm, {"type": "subscribe", "scene": "s"})
    core.drain(core.receive(gm, msgpack.packb(_change(rng, core, 0))))
    core.prepare("nope")
    core.prepare("s")
    assert core.tables.spares and core.tables.retired == {}
    _send(core, gm, {"type": "scene.unload", "scene": "s"})
    assert core.tables.spares == {} and core.tables.retired == {}
    core.prepare("s")
    assert core.tables.spares == {}


def test_the_server_prepares_each_scene_after_its_fan_out(live_server: LiveServer) -> None:
    gm, sub = Peer.open(live_server.url), Peer.open(live_server.url)
    try:
        for p in (gm, sub):
            assert p.hello()["type"] == "welcome"
        scene = {"_id": "p", "grid": {"type": 1, "size": 100, "distance": 5},
                 "walls": [{"_id": "w", "c": [450, 0, 450, 900]}],
                 "tokens": [{"_id": f"t{k}", "x": 100 * k, "y": 100 * (k % 3)}
                            for k in range(6)]}
        assert gm.request({"type": "scene.load", "scene": scene})["type"] == "ack"
        assert sub.request({"type": "subscribe", "scene": "p"})["full"]
        core, key = live_server.core, ("p", False, False)
        spares = []
        for k in range(3):
            ack = gm.request({"type": "token.update", "scene": "p",
                              "tokens": [{"_id": "t0", "x": 100 * (k % 2), "y": 500}]})
            assert sub.recv()["revision"] == ack["revision"]
            deadline = time.monotonic() + 5
            held, cache = core.tables.spares, core.tables.cache
            while (key not in held or held[key][0] is not cache[key]) \
                    and time.monotonic() < deadline:
                time.sleep(0.01)
            spare = core.tables.spares[key]
            assert spare[0] is cache[key] and spare[1] is not cache[key].table
            spares.append(spare[1])
        # Each change after the first started from the copy prepared after the one before.
        assert all(s is not t for s, t in itertools.pairwise(spares))
        assert core.tables.cache[key].table is not spares[-1]
        ack = gm.request({"type": "token.update", "scene": "p",
                          "tokens": [{"_id": "t1", "x": 800, "y": 800}]})
        assert sub.recv()["revision"] == ack["revision"]
        assert core.tables.cache[key].table is spares[-1]
    finally:
        gm.close()
        sub.close()
