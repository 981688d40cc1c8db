"""The asyncio client library (covercast/client.py) against the real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from covercast.client import (
    ALL_MODES,
    Ack,
    Client,
    ConnectionLost,
    CoverResult,
    Flags,
    FriendlyFireAttack,
    FriendlyFireResult,
    Mode,
    ServerError,
    Subscription,
    flags,
)
from tests.conftest import LiveServer

ROOT = Path(__file__).resolve().parent.parent

SCENE: dict[str, Any] = {
    "id": "s", "grid": {"type": 1, "size": 50, "distance": 5},
    "walls": [{"_id": "gate", "c": [150, 0, 150, 150], "door": 1, "ds": 0}],
    "tokens": [{"_id": "a", "x": 0, "y": 50, "disposition": 1},
               {"_id": "b", "x": 250, "y": 50, "disposition": -1},
               {"_id": "c", "x": 0, "y": 300, "disposition": -1}],
}


def run(live: LiveServer, body: Callable[[Client], Awaitable[None]], **kw: Any) -> None:
    async def main() -> None:
        async with asyncio.timeout(30):
            async with Client(live.url, **kw) as cc:
                await body(cc)
    asyncio.run(main())


def test_hello_gives_a_typed_welcome(live_server: LiveServer) -> None:
    async def body(cc: Client) -> None:
        assert cc.welcome.protocol == 1
        assert {"dnd35", "pf1", "degrees"} <= {r["name"] for r in cc.welcome.rulesets}
        assert cc.welcome.limits.max_batch > 0
    run(live_server, body)


def test_changes_and_queries_return_frozen_replies(live_server: LiveServer) -> None:
    async def body(cc: Client) -> None:
        ack = await cc.load_scene(SCENE)
        assert isinstance(ack, Ack) and (ack.scene, ack.revision) == ("s", 1)
        closed = await cc.query("s", "a", "b")
        assert isinstance(closed, CoverResult) and closed.annotation.cover == "total"
        with pytest.raises(AttributeError):
            closed.annotation.cover = "none"  # type: ignore[misc]
        assert (await cc.update_walls("s", [{"_id": "gate", "ds": 1}])).revision == 2
        opened = await cc.query("s", "a", "b", lines=True)
        assert opened.annotation.cover == "none" and opened.annotation.lines
        assert (await cc.create_tokens("s", [{"_id": "d", "x": 100, "y": 300}])).revision == 3
        assert (await cc.create_walls("s", [{"_id": "w", "c": [0, 200, 200, 200]}])).revision == 4
        state = await cc.get_scene("s")
        assert state.revision == 4
        assert {t["id"] for t in state.scene["tokens"]} == {"a", "b", "c", "d"}
        assert (await cc.delete_tokens("s", ["d"])).revision == 5
        assert (await cc.delete_walls("s", ["w"])).revision == 6
        area = await cc.area("s", {"t": "circle", "x": 50, "y": 100, "distance": 10})
        assert area.revision == 6 and "a" in {h.token for h in area.affected}
        from_point = await cc.query("s", "a", "c", origin=(25, 325))
        assert from_point.annotation.attacker == "a" and from_point.annotation.loe
        assert (await cc.unload_scene("s")).revision == 6
    run(live_server, body)


def test_refused_request_raises_with_code_path_and_message(live_server: LiveServer) -> None:
    async def body(cc: Client) -> None:
        await cc.load_scene(SCENE)
        with pytest.raises(ServerError) as info:
            await cc.update_tokens("s", [{"_id": "a", "x": 10}, {"_id": "nobody", "x": 0}])
        assert info.value.code == "unknown_token"
        assert info.value.path == "$.tokens[1].id"
        assert "'nobody'" in info.value.message and info.value.request_id is not None
        with pytest.raises(ServerError) as info:
            await cc.load_scene({**SCENE, "id": "t"}, ruleset="pf2e")
        assert info.value.code == "unknown_ruleset" and "dnd35" in info.value.message
        # The connection stays usable and the batch changed nothing.
        state = await cc.get_scene("s")
        assert state.revision == 1
        assert next(t for t in state.scene["tokens"] if t["id"] == "a")["x"] == 0
    run(live_server, body)


def test_concurrent_requests_get_their_own_replies(live_server: LiveServer) -> None:
    async def body(cc: Client) -> None:
        await cc.load_scene(SCENE)
        pairs = [(x, y) for x in "abc" for y in "abc" if x != y] * 5
        results = await asyncio.gather(*(cc.query("s", x, y) for x, y in pairs),
                                       cc.get_scene("s"), cc.query("s", "a", "zz"),
                                       return_exceptions=True)
        for (x, y), r in zip(pairs, results, strict=False):
            assert isinstance(r, CoverResult)
            assert (r.annotation.attacker, r.annotation.target) == (x, y)
        assert isinstance(results[-1], ServerError) and results[-1].path == "$.target"
    run(live_server, body)


def test_subscription_iterates_deltas_over_a_live_table(live_server: LiveServer) -> None:
    async def body(cc: Client) -> None:
        await cc.load_scene(SCENE)
        sub = await cc.subscribe("s", modes=["ranged"])
        assert isinstance(sub, Subscription) and sub.revision == 1
        assert set(sub.table) == {(x, y, "ranged") for x in "abc" for y in "abc" if x != y}
        before = sub.get("a", "b")
        assert before is not None and before.cover == "total"
        ack = await cc.update_walls("s", [{"_id": "gate", "ds": 1}])
        delta = await anext(sub)
        assert delta.revision == ack.revision and not delta.full
        assert ("a", "b", "ranged") in {(a.attacker, a.target, a.mode)
                                        for a in delta.annotations}
        # The table now holds what a query says, for every pair.
        for (x, y, mode), ann in sub.table.items():
            assert ann == (await cc.query("s", x, y, cast(Mode, mode))).annotation
        ack = await cc.delete_tokens("s", ["c"])
        await sub.wait_for(ack.revision)
        assert not any("c" in key[:2] for key in sub.table)
        await sub.close()
        # Iteration ends: after the pushes already received (wait_for consumes none when
        # the delta arrived with the ack, its table being at the revision already).
        rest = [d async for d in sub]
        assert all(not d.full and d.revision <= ack.revision for d in rest)
        with pytest.raises(ServerError) as info:
            await cc.unsubscribe("s")
        assert info.value.code == "unknown_scene"
    run(live_server, body)


def test_a_filtered_subscription_holds_only_its_pairs(live_server: LiveServer) -> None:
    async def body(cc: Client) -> None:
        await cc.load_scene(SCENE)
        sub = await cc.subscribe("s", attackers=["a"], targets=["b", "c"])
        assert sub.filters == {"attackers": ["a"], "targets": ["b", "c"]}
        assert set(sub.table) == {("a", t, m) for t in "bc" for m in ALL_MODES}
        ack = await cc.update_walls("s", [{"_id": "gate", "ds": 1}])
        delta = await anext(sub)
        assert delta.revision == ack.revision
        assert {(a.attacker, a.target) for a in delta.annotations} <= {("a", "b"), ("a", "c")}
        for (x, y, mode), ann in sub.table.items():
            assert ann == (await cc.query("s", x, y, cast(Mode, mode))).annotation
        side = await cc.subscribe("s", sides=["hostile"], modes=["ranged"])
        assert sub is not side and not sub.active  # subscribing again replaced it
        assert {k[0] for k in side.table} == {"b", "c"}  # "a" is friendly
        with pytest.raises(ServerError) as info:
            await cc.subscribe("s", attackers=["zz"])
        assert info.value.code == "unknown_token" and info.value.path == "$.attackers[0]"
        with pytest.raises(ServerError) as info:
            await cc.subscribe("s", sides=cast(Any, ["ally"]))
        assert info.value.code == "invalid" and "'ally'" in str(info.value)
        assert side.active  # refused: the subscription it had stays
    run(live_server, body)


def test_unloading_the_scene_ends_the_subscription(live_server: LiveServer) -> None:
    async def body(cc: Client) -> None:
        await cc.load_scene(SCENE)
        sub = await cc.subscribe("s")
        async with Client(live_server.url) as other:
            await other.unload_scene("s")
        last = [d async for d in sub]
        assert len(last) == 1 and last[0].full and last[0].annotations == []
        assert not sub.active and sub.table == {}
    run(live_server, body)


def test_closing_the_client_ends_iteration(live_server: LiveServer) -> None:
    async def main() -> None:
        async with Client(live_server.url) as cc:
            await cc.load_scene(SCENE)
            sub = await cc.subscribe("s")
        assert [d async for d in sub] == [] and not sub.active
        with pytest.raises(ConnectionLost, match="closed"):
            await cc.get_scene("s")
    asyncio.run(main())


LAKE: dict[str, Any] = {
    "id": "lake", "grid": {"type": 1, "size": 100, "distance": 5},
    "regions": [{"id": "water", "kind": "water", "surface": 10,
                 "points": [0, 0, 1000, 0, 1000, 1000, 0, 1000]}],
    "tokens": [{"_id": "diver", "x": 300, "y": 300, "disposition": 1,
                "flags": {"covercast": {"con": 1, "fortitude": 4}}},
               {"_id": "ranger", "x": 1200, "y": 300, "disposition": 1}],
}


def test_turn_end_and_breath_are_typed_and_reach_the_subscription(
        live_server: LiveServer) -> None:
    async def body(cc: Client) -> None:
        await cc.load_scene(LAKE, ruleset="degrees")
        sub = await cc.subscribe("lake")
        assert dict(sub.air) == {}
        entry = await cc.turn_end("lake", "diver", attacked=True, critical_hits=1)
        assert (entry.token, entry.air, entry.max_air) == ("diver", 3, 6)
        assert [step.event for step in entry.steps] == ["critical_hit", "end_of_turn"]
        delta = await anext(sub)
        assert [b.token for b in delta.breath] == ["diver"] and sub.air["diver"].air == 3
        # Dice given by the caller are used; the server rolls none, so reports no seed.
        saved = await cc.turn_end("lake", "diver", spoke=True, d20=20)
        assert saved.air == 0 and saved.seed is None
        assert saved.steps[-1].d20 == 20
        (stored,) = await cc.breath("lake", "diver")
        assert stored == saved
        assert [b.token for b in await cc.breath("lake")] == ["diver"]
        with pytest.raises(ServerError) as info:
            await cc.turn_end("lake", "nobody")
        assert info.value.code == "unknown_token"
    run(live_server, body)


def test_friendly_fire_is_typed_and_replayable(live_server: LiveServer) -> None:
    # Enchanted Realms on HEXODDR: a wall hides the bandit b entirely from the archer a (full
    # cover: a missed shot is resolved by the friendly-fire rule); ally c stands beyond b.
    field = {"id": "hexfield", "grid": {"type": 2, "size": 100, "distance": 5},
             "walls": [{"id": "w", "c": [540, 0, 540, 120]}],
             "tokens": [{"id": "a", "x": 50, "y": 0, "disposition": 1},
                        {"id": "b", "x": 550, "y": 0, "disposition": -1},
                        {"id": "c", "x": 650, "y": 0, "disposition": 1}]}

    async def body(cc: Client) -> None:
        await cc.load_scene(field, ruleset="realms")
        given = await cc.friendly_fire("hexfield", "a", [{"target": "b", "dice": [3], "d10": 4}],
                                       {"b": 14, "c": 12}, bonus=4)
        assert isinstance(given, FriendlyFireResult) and given.seed is None
        (shot,) = given.attacks
        assert shot.cover == "total" and shot.friendly_fire and shot.slot == 4
        assert shot.struck == "c" and [d.raw for d in shot.moved] == [5]
        with pytest.raises(AttributeError):
            shot.struck = "a"  # type: ignore[misc]
        rolled = await cc.friendly_fire("hexfield", "a", [FriendlyFireAttack("b", count=2)],
                                        {"b": 30}, seed=7)
        again = await cc.friendly_fire("hexfield", "a", [FriendlyFireAttack("b", count=2)],
                                       {"b": 30}, seed=7)
        assert rolled.seed == again.seed == 7 and rolled.attacks == again.attacks
        assert rolled.attacks[0].rolled[:2] == ["d20", "d20"]
        with pytest.raises(ServerError) as info:
            await cc.friendly_fire("hexfield", "a", [{"target": "b", "dice": [3]}], {})
        assert info.value.code == "invalid" and info.value.path == "$.defense"
    run(live_server, body)


def test_roles_from_the_token_and_asked_in_hello() -> None:
    server = LiveServer(token="gm-secret", player_token="player-secret").start()
    try:
        async def gm(cc: Client) -> None:
            assert cc.welcome.role == "gm"
            await cc.load_scene({**SCENE, "tokens": [*SCENE["tokens"], {
                "_id": "lurker", "x": 300, "y": 300, "hidden": True}]})
        run(server, gm, token="gm-secret")

        async def player(cc: Client) -> None:
            assert cc.welcome.role == "player"
            sub = await cc.subscribe("s")
            assert "lurker" not in {k[0] for k in sub.table} | {k[1] for k in sub.table}
            with pytest.raises(ServerError):
                await cc.move_token("s", "a", 0, 0)
        run(server, player, token="player-secret")

        async def gm_as_overlay(cc: Client) -> None:
            assert cc.welcome.role == "overlay"
        run(server, gm_as_overlay, token="gm-secret", role="overlay")
    finally:
        server.stop()


def test_dropped_connection_is_reported_to_waiters() -> None:
    server = LiveServer().start()

    async def main() -> None:
        async with Client(server.url) as cc:
            await cc.load_scene(SCENE)
            sub = await cc.subscribe("s")
            server.stop()
            with pytest.raises(ConnectionLost):
                async with asyncio.timeout(10):
                    await anext(sub)
            with pytest.raises(ConnectionLost):
                await cc.get_scene("s")
    try:
        asyncio.run(main())
    finally:
        server.stop()


def test_access_token_wrong_and_right() -> None:
    server = LiveServer(token="s3cret").start()
    try:
        async def wrong() -> None:
            async with Client(server.url, token="guess"):
                pass
        with pytest.raises(ConnectionLost, match="1008 access denied"):
            asyncio.run(wrong())

        async def right(cc: Client) -> None:
            assert cc.welcome.protocol == 1
        run(server, right, token="s3cret")
    finally:
        server.stop()


def test_unreachable_server() -> None:
    async def main() -> None:
        async with Client("ws://127.0.0.1:9", open_timeout=5):
            pass
    with pytest.raises(ConnectionLost, match="cannot reach"):
        asyncio.run(main())


class FlakyProxy:
    """A WebSocket relay in front of a server that drops its connections as a network
    would, refuses new ones while `refusing`, and can be pointed at another server (as if
    the server restarted)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.refusing = False
        self.clients: set[ServerConnection] = set()
        self.url = ""

    async def __aenter__(self) -> FlakyProxy:
        self._server = await serve(self._relay, "127.0.0.1", 0, compression=None,
                                   max_size=None)
        self.url = f"ws://127.0.0.1:{next(iter(self._server.sockets)).getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    async def drop(self) -> None:
        for ws in list(self.clients):
            await ws.close(1012, "service restart")

    async def _relay(self, ws: ServerConnection) -> None:
        if self.refusing:
            await ws.close(1013, "try again later")
            return
        self.clients.add(ws)
        async with connect(self.upstream, compression=None, max_size=None) as up:
            async def pump(a: Any, b: Any) -> None:
                with contextlib.suppress(ConnectionClosed):
                    async for frame in a:
                        await b.send(frame)
            _, pending = await asyncio.wait(
                [asyncio.create_task(pump(ws, up)), asyncio.create_task(pump(up, ws))],
                return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
        self.clients.discard(ws)


async def _offline(cc: Client) -> None:
    async with asyncio.timeout(10):
        while cc.connected:
            await asyncio.sleep(0.01)


def test_reconnect_renews_subscriptions_and_holds_requests(live_server: LiveServer) -> None:
    async def main() -> None:
        async with asyncio.timeout(30), FlakyProxy(live_server.url) as proxy, \
                Client(proxy.url, reconnect=True) as cc:
            await cc.load_scene(SCENE)
            sub = await cc.subscribe("s", modes=["ranged"])
            drawn = random.getstate()
            proxy.refusing = True
            await proxy.drop()
            await _offline(cc)
            # While it is away, another client changes the scene, and we ask something.
            async with Client(live_server.url) as other:
                await other.update_walls("s", [{"_id": "gate", "ds": 1}])
            pending = asyncio.create_task(cc.query("s", "a", "b"))
            await asyncio.sleep(0.3)
            assert not pending.done()  # it waits for the connection
            proxy.refusing = False
            assert (await pending).annotation.cover == "none"
            assert cc.reconnects == 1 and cc.connected
            # Its waits between tries drew nothing from the program's own generator.
            assert random.getstate() == drawn
            renewed = await anext(sub)  # the new full set, with the change we missed
            assert renewed.full and renewed.revision == 2
            assert sub.table["a", "b", "ranged"].cover == "none"
            ack = await cc.move_token("s", "c", 100, 300)
            await sub.wait_for(ack.revision)
            assert sub.active
    asyncio.run(main())


def test_reconnect_to_a_restarted_server_reloads_through_on_reconnect() -> None:
    old, new, other = LiveServer().start(), LiveServer().start(), LiveServer().start()

    async def reload(cc: Client) -> None:
        await cc.load_scene(SCENE)

    async def main() -> None:
        async with asyncio.timeout(30), FlakyProxy(old.url) as proxy, \
                FlakyProxy(old.url) as proxy2, \
                Client(proxy.url, reconnect=True, on_reconnect=reload) as cc, \
                Client(proxy2.url, reconnect=True) as forgetful:
            await cc.load_scene(SCENE)
            await cc.update_walls("s", [{"_id": "gate", "ds": 1}])
            sub = await cc.subscribe("s")
            lost = await forgetful.subscribe("s")
            # The server "restarts": each proxy now leads to a server without scenes.
            proxy.upstream, proxy2.upstream = new.url, other.url
            await proxy.drop()
            await proxy2.drop()
            renewed = await anext(sub)
            assert renewed.full and renewed.revision == 1  # reloaded: gate closed again
            assert sub.table["a", "b", "ranged"].cover == "total"
            # Without an on_reconnect that loads the scene, the subscription ends.
            with pytest.raises(ServerError) as info:
                await anext(lost)
            assert info.value.code == "unknown_scene"
            assert [d async for d in lost] == [] and not lost.active
            assert forgetful.connected  # the connection itself is back
    try:
        asyncio.run(main())
    finally:
        for server in (old, new, other):
            server.stop()


def test_reconnect_gives_up_after_its_timeout(live_server: LiveServer) -> None:
    async def main() -> None:
        async with asyncio.timeout(30), FlakyProxy(live_server.url) as proxy, \
                Client(proxy.url, reconnect=True, reconnect_timeout=0.5, max_backoff=0.1) as cc:
            await cc.load_scene(SCENE)
            sub = await cc.subscribe("s")
            proxy.refusing = True
            await proxy.drop()
            with pytest.raises(ConnectionLost, match="gave up reconnecting"):
                await anext(sub)
            with pytest.raises(ConnectionLost, match="gave up reconnecting"):
                await cc.get_scene("s")
            assert not cc.connected
    asyncio.run(main())


def test_without_reconnect_a_drop_ends_everything(live_server: LiveServer) -> None:
    async def main() -> None:
        async with asyncio.timeout(30), FlakyProxy(live_server.url) as proxy, \
                Client(proxy.url) as cc:
            await cc.load_scene(SCENE)
            sub = await cc.subscribe("s")
            await proxy.drop()
            with pytest.raises(ConnectionLost, match="1012 service restart"):
                await anext(sub)
            with pytest.raises(ConnectionLost):
                await cc.get_scene("s")
            assert cc.reconnects == 0
    asyncio.run(main())


def test_the_documented_example_runs(live_server: LiveServer) -> None:
    """examples/automated_session.py, as docs/client.md tells people to run it."""
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "automated_session.py"),
                           "--url", live_server.url], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "subscribed at revision 1" in out
    assert "goblin at (3, 1): archer sees cover (+4 ac, +2 reflex)" in out
    assert "goblin at (7, 2): archer sees no line of effect" in out
    assert "door opened, revision 6: archer -> goblin now cover" in out
    assert "refused (unknown_wall at $.walls[0].id)" in out
    assert "fireball at (5, 2) catches: goblin (none), horse (cover)" in out
    assert "yard" not in live_server.core.scenes  # it cleans up after itself


def test_the_example_listed_in_the_docs_is_the_file() -> None:
    doc = (ROOT / "docs" / "client.md").read_text()
    listed = doc.split("<!-- example: examples/automated_session.py -->\n```python\n", 1)[1]
    listed = listed.split("```\n", 1)[0]
    assert listed == (ROOT / "examples" / "automated_session.py").read_text()


def test_token_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the `covercast` command does: $COVERCAST_TOKEN when no token is given, a viewer
    role's own variable first, and token="" for none at all."""
    server = LiveServer(token="gm-t", player_token="player-t").start()
    try:
        monkeypatch.setenv("COVERCAST_TOKEN", "gm-t")

        async def as_gm(cc: Client) -> None:
            assert cc.welcome.role == "gm"
        run(server, as_gm)
        monkeypatch.setenv("COVERCAST_PLAYER_TOKEN", "player-t")
        monkeypatch.setenv("COVERCAST_TOKEN", "wrong")

        async def as_player(cc: Client) -> None:
            assert cc.welcome.role == "player"
        run(server, as_player, role="player")

        async def none() -> None:
            async with Client(server.url, token=""):
                pass
        monkeypatch.setenv("COVERCAST_TOKEN", "gm-t")
        with pytest.raises(ConnectionLost, match="1008 access denied"):
            asyncio.run(none())
    finally:
        server.stop()


def test_the_example_takes_a_token() -> None:
    server = LiveServer(token="ex-secret").start()
    try:
        example = [sys.executable, str(ROOT / "examples" / "automated_session.py"),
                   "--url", server.url]
        env = {k: v for k, v in os.environ.items() if k != "COVERCAST_TOKEN"}
        refused = subprocess.run(example, capture_output=True, text=True, timeout=120,
                                 env=env, check=False)
        assert refused.returncode != 0 and "access denied" in refused.stderr
        done = subprocess.run([*example, "--token", "ex-secret"], capture_output=True,
                              text=True, timeout=120, env=env, check=False)
        assert done.returncode == 0, done.stderr
        assert "subscribed at revision 1" in done.stdout
    finally:
        server.stop()


def test_flags_are_typed_and_name_every_flag_the_rulesets_raise(
        live_server: LiveServer) -> None:
    from rulesets.base import Flag

    assert set(Flags.__struct_fields__) == {f.value for f in Flag}

    async def body(cc: Client) -> None:
        await cc.load_scene(SCENE)
        answer = await cc.query("s", "a", "c", "ranged")
        typed = flags(answer.annotation)
        assert typed.can_target is answer.annotation.flags["can_target"] is True
        assert typed.adjacent is False and typed.flanking is False
        melee = flags((await cc.query("s", "a", "c", "melee")).annotation)
        assert melee.in_reach is False and melee.can_target is False
    run(live_server, body)


def test_the_quick_start_runs_as_written() -> None:
    """docs/client.md's quick start, against a server with the demo scene as `make run`
    has it (only its URL is changed, to this test server's port)."""
    from covercast.cli import _demo_request

    doc = (ROOT / "docs" / "client.md").read_text()
    code = doc.split("<!-- quick start -->\n```python\n", 1)[1].split("```\n", 1)[0]
    assert len(code.strip().splitlines()) <= 20
    server = LiveServer()
    server.core.preload(_demo_request())
    server.start()
    try:
        assert "ws://127.0.0.1:8765" in code
        done = subprocess.run([sys.executable, "-c", code.replace("ws://127.0.0.1:8765",
                                                                  server.url)],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        said = doc.split("It prints `", 1)[1].split("`", 1)[0]
        after = doc.split("then `", 1)[1].split("`", 1)[0]
        assert done.stdout.splitlines() == [said, after]
    finally:
        server.stop()


def test_set_focus_reaches_the_subscription(live_server: LiveServer) -> None:
    async def body(cc: Client) -> None:
        await cc.load_scene(SCENE)
        sub = await cc.subscribe("s")
        assert sub.focus is None
        await cc.set_focus("s", "a", "b", "melee")
        async with asyncio.timeout(5):
            while sub.focus is None:
                await asyncio.sleep(0.01)
        assert (sub.focus.attacker, sub.focus.target, sub.focus.mode) == ("a", "b", "melee")
    run(live_server, body)
