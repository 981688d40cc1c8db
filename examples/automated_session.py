"""An automated session with the Covercast Python client: an archer watches a goblin walk
past a pillar of rubble and a door, and reports, as each move's delta arrives, what cover the
goblin has; then a fireball. Run it against a server (`make run` in another terminal):

    .venv/bin/python examples/automated_session.py [--url ws://127.0.0.1:8765]

tests/test_client.py runs this file against a real server, so it cannot rot.
"""

from __future__ import annotations

import argparse
import asyncio

from covercast.client import Client, ServerError

GRID = 100  # pixels per square

SCENE = {
    "id": "yard", "name": "Castle yard",
    "grid": {"type": 1, "size": GRID, "distance": 5},
    "walls": [
        # a stable with a door on its west side
        {"_id": "stable-w", "c": [600, 0, 600, 200]},
        {"_id": "stable-door", "c": [600, 200, 600, 300], "door": 1, "ds": 0},
        {"_id": "stable-s", "c": [600, 300, 900, 300]},
    ],
    "tokens": [
        {"_id": "archer", "name": "Archer", "x": 0, "y": 400, "disposition": 1},
        {"_id": "goblin", "name": "Goblin", "x": 300, "y": 0, "disposition": -1},
        {"_id": "horse", "name": "Horse", "x": 700, "y": 100, "disposition": 0,
         "size": "large", "width": 2, "height": 2},
    ],
    # a heap of rubble: cover for what is behind it
    "regions": [{"id": "rubble", "kind": "cover", "points": [300, 200, 400, 200, 400, 300,
                                                             300, 300]}],
}


def describe(cover: str, loe: bool, modifiers: list[tuple[str, int]]) -> str:
    if not loe:
        return "no line of effect"
    mods = ", ".join(f"{value:+d} {stat}" for stat, value in modifiers)
    return cover + (f" ({mods})" if mods else "")


async def main(url: str, token: str | None) -> None:
    async with Client(url, token=token, name="automated-session-example") as cc:
        print(f"connected to {cc.welcome.server} {cc.welcome.version}, rulesets: "
              + ", ".join(r["name"] for r in cc.welcome.rulesets))
        await cc.load_scene(SCENE, ruleset="dnd35")
        sub = await cc.subscribe("yard", modes=["ranged"])
        print(f"subscribed at revision {sub.revision}: {len(sub.table)} annotations")

        # The goblin sneaks behind the rubble, crosses the yard and slips into the stable.
        for x, y in [(300, 100), (400, 300), (500, 200), (700, 200)]:
            ack = await cc.move_token("yard", "goblin", x, y)
            await sub.wait_for(ack.revision)  # consume deltas up to this move's
            a = sub.get("archer", "goblin", "ranged")
            assert a is not None
            print(f"goblin at ({x // GRID}, {y // GRID}): archer sees "
                  + describe(a.cover, a.loe, [(m.stat, m.value) for m in a.modifiers]))

        # The stable door opens: iterate the subscription for the delta it causes.
        await cc.update_walls("yard", [{"_id": "stable-door", "ds": 1}])
        delta = await anext(sub)
        for a in delta.annotations:
            print(f"door opened, revision {delta.revision}: {a.attacker} -> {a.target} now "
                  + describe(a.cover, a.loe, [(m.stat, m.value) for m in a.modifiers]))

        # Closing it again with a misspelt id is refused, and changes nothing.
        try:
            await cc.update_walls("yard", [{"_id": "stable-dor", "ds": 0}])
        except ServerError as exc:
            print(f"refused ({exc.code} at {exc.path}): {exc.message}")

        # Several questions at once: replies are matched to requests by id.
        horse, slit = await asyncio.gather(
            cc.query("yard", "archer", "horse"),
            cc.query("yard", "archer", "goblin", origin=(50, 450), lines=True))
        print(f"archer vs horse: {horse.annotation.cover}; vs goblin from (50, 450): "
              f"{slit.annotation.cover}, {len(slit.annotation.lines or [])} lines traced")

        fireball = await cc.area("yard", {"t": "circle", "x": 500, "y": 200, "distance": 15})
        print("fireball at (5, 2) catches: " + ", ".join(
            f"{hit.token} ({hit.cover})" for hit in fireball.affected))
        await sub.close()
        await cc.unload_scene("yard")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8765",
                        help="the server (default: %(default)s)")
    parser.add_argument("--token", help="the gm's access token (default: $COVERCAST_TOKEN)")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.token))
