"""An asyncio client for Covercast, for scripts, bots and the CLI.

Rule of this module: speak the protocol exactly as docs/protocol.md says, msgpack in binary
frames; requests carry an `id` and their reply is matched to it, pushes (`annotations`
without our id) go to `pushes()`. It imports nothing from the server.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import msgpack
from websockets.asyncio.client import ClientConnection, connect


class CovercastError(Exception):
    """The server answered a request with an `error` message."""

    def __init__(self, reply: dict[str, Any]) -> None:
        super().__init__(f"{reply.get('code')}: {reply.get('message')}")
        self.reply = reply


class Client:
    """One connection to a Covercast server."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.welcome: dict[str, Any] = {}
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._pushes: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, url: str, token: str | None = None,
                   name: str = "covercast-python") -> Client:
        ws = await connect(url, max_size=None, compression=None)
        client = cls(ws)
        hello: dict[str, Any] = {"type": "hello", "protocol": 1, "client": name}
        if token is not None:
            hello["token"] = token
        client.welcome = await client.request(hello)
        return client

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _read(self) -> None:
        try:
            async for frame in self.ws:
                msg = msgpack.unpackb(frame, raw=False) if isinstance(frame, bytes) else {}
                rid = msg.get("id")
                fut = self._waiting.pop(rid, None) if isinstance(rid, int) else None
                if fut is not None and not fut.done():
                    fut.set_result(msg)
                else:
                    await self._pushes.put(msg)
        finally:
            for fut in self._waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("connection closed"))

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send a request and wait for its reply; an `error` reply raises CovercastError.
        A `subscribe` reply (the full annotation set) is returned here too."""
        rid = next(self._ids)
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        await self.ws.send(msgpack.packb({**message, "id": rid}))
        reply = await fut
        if reply.get("type") == "error":
            raise CovercastError(reply)
        return reply

    async def load_scene(self, scene: dict[str, Any], ruleset: str = "dnd35",
                         options: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.request({"type": "scene.load", "scene": scene, "ruleset": ruleset,
                                   "options": options or {}})

    async def get_scene(self, scene: str) -> dict[str, Any]:
        """The scene as the server holds it (grid, walls, tokens, regions, revision)."""
        reply = await self.request({"type": "scene.get", "scene": scene})
        state: dict[str, Any] = reply["scene"]
        return state

    async def update_tokens(self, scene: str, changes: list[dict[str, Any]]) -> dict[str, Any]:
        return await self.request({"type": "token.update", "scene": scene, "tokens": changes})

    async def update_walls(self, scene: str, changes: list[dict[str, Any]]) -> dict[str, Any]:
        return await self.request({"type": "wall.update", "scene": scene, "walls": changes})

    async def query(self, scene: str, attacker: str, target: str, attack: str = "ranged",
                    lines: bool = False) -> dict[str, Any]:
        reply = await self.request({"type": "cover.query", "scene": scene,
                                    "attacker": attacker, "target": target,
                                    "attack": attack, "lines": lines})
        annotation: dict[str, Any] = reply["annotation"]
        return annotation

    async def turn_end(self, scene: str, token: str, **what: Any) -> dict[str, Any]:
        """A token's turn ended (`attacked`, `castSpell`, `spoke`, `criticalHits`,
        `critFailedDamageSaves`, `breathing`, `con`, `fortitude`, `hp`, `rolls`, `seed` as
        in docs/protocol.md); returns its new air state, with the steps taken."""
        reply = await self.request({"type": "turn.end", "scene": scene, "token": token,
                                    **what})
        entry: dict[str, Any] = reply["breath"][0]
        return entry

    async def breath(self, scene: str, token: str | None = None) -> list[dict[str, Any]]:
        """A token's air state, or every stored one of the scene."""
        message: dict[str, Any] = {"type": "breath.get", "scene": scene}
        if token is not None:
            message["token"] = token
        reply = await self.request(message)
        entries: list[dict[str, Any]] = reply["breath"]
        return entries

    async def subscribe(self, scene: str, lines: bool = False) -> dict[str, Any]:
        """Subscribe; returns the full annotation set. Deltas then arrive in `pushes()`."""
        return await self.request({"type": "subscribe", "scene": scene, "lines": lines})

    async def pushes(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            yield await self._pushes.get()
