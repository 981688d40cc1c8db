"""`covercast`: run the server, or talk to one from a terminal.

    covercast serve [--host H] [--port P] [--no-demo] [--token T] [--state PATH]
                    [--player-token T] [--overlay-token T]
    covercast watch [--scene demo]            live cover table, redrawn on every delta
    covercast move TOKEN X Y [--px]           move a token (grid squares, or pixels)
    covercast door WALL open|close|lock       open, close or lock a door
    covercast query ATTACKER TARGET [--attack ranged] [--lines]
    covercast record --out FILE [--listen HOST:PORT]     record a client's session (a proxy)
    covercast replay FILE [--speed S] [--out FILE] [--check]   replay it, compare the results

The access token comes from --token or the COVERCAST_TOKEN environment variable; it is the
gm's. Read-only viewers say hello with --player-token / COVERCAST_PLAYER_TOKEN or
--overlay-token / COVERCAST_OVERLAY_TOKEN. The server also serves the live overlay page at
http://HOST:PORT/overlay (see docs/protocol.md, "Roles" and "The overlay page").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from server.admission import HELLO_TIMEOUT_S, MAX_CONNECTIONS, MAX_PER_ADDRESS

DEFAULT_PORT = 8765
DEFAULT_URL = f"ws://127.0.0.1:{DEFAULT_PORT}"


def default_state_path() -> str:
    """Where the server keeps what outlives it (each token's air): the XDG state
    directory, $XDG_STATE_HOME/covercast/state.sqlite3 (~/.local/state/... by default)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "covercast", "state.sqlite3")


def _demo_request() -> Any:
    from server.messages import parse_request

    text = resources.files("server").joinpath("demo/demo.json").read_text()
    return parse_request(json.loads(text))


def serve(args: argparse.Namespace) -> int:
    from server.admission import EdgeLimits
    from server.app import run
    from server.session import Core
    from server.store import Store, StoreError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        store = Store(args.state or default_state_path())
    except (StoreError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        core = Core(
            access_token=args.token or os.environ.get("COVERCAST_TOKEN") or None,
            player_token=args.player_token or os.environ.get("COVERCAST_PLAYER_TOKEN") or None,
            overlay_token=(args.overlay_token or os.environ.get("COVERCAST_OVERLAY_TOKEN")
                           or None),
            store=store)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.no_demo:
        core.preload(_demo_request())

    def ready(port: int) -> None:
        url = f"ws://{args.host}:{port}"
        print(f"covercast listening on {url}", flush=True)
        print(f"state store: {store.path}", flush=True)
        scene = "SCENE" if args.no_demo else "demo"
        print(f"live overlay: http://{args.host}:{port}/overlay?scene={scene} "
              "(add #token=OVERLAY_TOKEN when the server has tokens)", flush=True)
        if not args.no_demo:
            print("demo scene 'demo' loaded (D&D 3.5). In another terminal:\n"
                  f"  .venv/bin/covercast watch --url {url}\n"
                  f"  .venv/bin/covercast move goblin 8 6 --url {url}\n"
                  f"  .venv/bin/covercast door door-e open --url {url}", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(core, args.host, args.port, ready, EdgeLimits(
            hello_timeout_s=args.hello_timeout, max_connections=args.max_connections,
            max_per_address=args.max_per_address)))
    return 0


def _token(args: argparse.Namespace) -> str | None:
    token: str | None = args.token or os.environ.get("COVERCAST_TOKEN") or None
    return token


def _summary(ann: dict[str, Any]) -> str:
    if not ann["loe"]:
        return "total cover"
    mods = ", ".join(f"{m['value']:+d} {m['stat']}" for m in ann["modifiers"])
    text = str(ann["cover"]) + (f" ({mods})" if mods else "")
    if ann["mode"] != "ranged" and not ann["flags"].get("in_reach"):
        text = "out of reach"
    return text


def render_table(table: dict[tuple[str, str, str], dict[str, Any]], revision: int,
                 changed: set[tuple[str, str]]) -> str:
    pairs = sorted({(a, t) for a, t, _ in table})
    head = f"{'attacker':<10} {'target':<10} {'ranged':<34} {'melee':<34}"
    lines = [f"revision {revision}   (* = changed by the last update)", head, "-" * len(head)]
    for a, t in pairs:
        ranged = table.get((a, t, "ranged"))
        melee = table.get((a, t, "melee"))
        mark = "*" if (a, t) in changed else " "
        lines.append(f"{mark}{a:<9} {t:<10} {_summary(ranged) if ranged else '-':<34} "
                     f"{_summary(melee) if melee else '-':<34}")
    return "\n".join(lines)


async def _watch(args: argparse.Namespace) -> int:
    from covercast.client import Client

    async with Client(args.url, token=_token(args), name="covercast-watch") as client:
        sub = await client.subscribe(args.scene)
        _draw(render_table(_as_dicts(sub.table), sub.revision, set()))
        async for delta in sub:
            changed = {(a.attacker, a.target) for a in delta.annotations}
            _draw(render_table(_as_dicts(sub.table), sub.revision, changed))
            if args.once:
                return 0
    return 0


def _as_dicts(table: Mapping[tuple[str, str, str], Any]) -> dict[tuple[str, str, str],
                                                                   dict[str, Any]]:
    return {k: msgspec.to_builtins(v) for k, v in table.items()}


def _draw(text: str) -> None:
    if sys.stdout.isatty():
        sys.stdout.write("\x1b[2J\x1b[H")
    print(text, flush=True)


async def _move(args: argparse.Namespace) -> int:
    from covercast.client import Client

    async with Client(args.url, token=_token(args), name="covercast-move") as client:
        size = 1.0 if args.px else (await client.get_scene(args.scene)).scene["grid"]["size"]
        ack = await client.move_token(args.scene, args.token_id, args.x * size, args.y * size)
        print(f"moved {args.token_id}: scene {args.scene} now at revision {ack.revision}")
    return 0


async def _door(args: argparse.Namespace) -> int:
    from covercast.client import Client

    ds = {"open": 1, "close": 0, "lock": 2}[args.state]
    async with Client(args.url, token=_token(args), name="covercast-door") as client:
        ack = await client.update_walls(args.scene, [{"_id": args.wall_id, "ds": ds}])
        print(f"door {args.wall_id} {args.state}: revision {ack.revision}")
    return 0


async def _query(args: argparse.Namespace) -> int:
    from covercast.client import Client

    async with Client(args.url, token=_token(args), name="covercast-query") as client:
        result = await client.query(args.scene, args.attacker, args.target, args.attack,
                                    lines=args.lines)
        print(json.dumps(msgspec.to_builtins(result.annotation), indent=2))
    return 0


def _record(args: argparse.Namespace) -> int:
    from covercast.replay import record

    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        print(f"error: --listen wants HOST:PORT, got {args.listen!r}", file=sys.stderr)
        return 2

    def ready(url: str) -> None:
        print(f"recording: point your client at {url} (forwarded to {args.url}); the "
              f"session ends when it disconnects, or Ctrl-C", file=sys.stderr, flush=True)

    try:
        outcome = asyncio.run(record(args.url, Path(args.out), host=host, port=int(port),
                                     ready=ready, note=args.note))
    except KeyboardInterrupt:
        print(f"stopped; {args.out} holds the session up to now", file=sys.stderr)
        return 0
    except OSError as exc:
        what = (f"cannot write {args.out}" if exc.filename is not None
                else f"cannot listen on {args.listen}")
        print(f"error: {what}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if outcome.failure is not None:
        print(f"error: {outcome.failure}", file=sys.stderr)
        return 2
    print(f"recorded {outcome.messages} messages to {args.out}", file=sys.stderr)
    return 0


def _replay(args: argparse.Namespace) -> int:
    from covercast import recording
    from covercast.replay import Progress, ReplayError, compare, replay

    speed = 0.0 if args.as_fast_as_possible else args.speed
    if speed < 0 or not math.isfinite(speed):
        print(f"error: --speed must be 0 (as fast as possible) or positive, got {speed}",
              file=sys.stderr)
        return 2
    try:
        rec = recording.read(args.file)
    except recording.RecordingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sends = len(rec.sends)
    duration = max((e.t for e in rec.sends), default=0.0) / speed if speed else 0.0
    progress = None if args.quiet else Progress(sends, duration)
    with contextlib.ExitStack() as stack:
        writer = None
        if args.out is not None:
            try:
                f = stack.enter_context(open(args.out, "w", encoding="utf-8"))
            except OSError as exc:
                print(f"error: cannot write {args.out}: {exc.strerror or exc}",
                      file=sys.stderr)
                return 2
            writer = recording.Writer(f, f"covercast replay of {args.file} at speed {speed:g} "
                                         f"against {args.url}")
        try:
            outcome = asyncio.run(replay(rec, args.url, speed=speed, token=_token(args),
                                         timeout=args.timeout, writer=writer,
                                         progress=progress))
        except ReplayError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130
    print(f"replayed {outcome.sent} of {sends} messages from {args.file} in "
          f"{outcome.elapsed:.2f} s; received {outcome.received}"
          + (f"; wrote {args.out}" if args.out else ""), file=sys.stderr)
    code = 0
    if outcome.closed is not None:
        print(f"the server closed the connection: {outcome.closed}", file=sys.stderr)
    for problem in outcome.incomplete:
        print(f"incomplete: {problem} within {args.timeout:g} s", file=sys.stderr)
        code = 1
    if args.check:
        result = compare(rec.entries, outcome.entries, rec.lines)
        for note in result.notes:
            print(f"check: note: {note}")
        if result.ok:
            print(f"check: same as the recording ({result.replies} replies, "
                  f"{result.tables} annotation tables compared)")
        else:
            print(f"check: the replay differs from {args.file} (revisions counted from "
                  "each run's first one of a scene):")
            print("\n".join(result.differences))
            code = 1
    return code


def _client_command(fn: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        from covercast.client import ConnectionLost, CovercastError

        try:
            code: int = asyncio.run(fn(args))
            return code
        except ConnectionLost as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except CovercastError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0
    return run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="covercast", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", help="run the server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--no-demo", action="store_true", help="start without the demo scene")
    p.add_argument("--token", help="the gm's access token clients must send in hello "
                                   "(default: $COVERCAST_TOKEN; none: open server, every "
                                   "client is gm unless it asks for a viewer role)")
    p.add_argument("--player-token", help="access token of read-only players, who never see "
                                          "hidden tokens (default: $COVERCAST_PLAYER_TOKEN; "
                                          "needs a gm token)")
    p.add_argument("--overlay-token", help="access token of read-only stream overlays "
                                           "(default: $COVERCAST_OVERLAY_TOKEN; needs a gm "
                                           "token)")
    p.add_argument("--state", metavar="PATH",
                   help="SQLite file keeping each token's air across restarts (default: "
                        "$XDG_STATE_HOME/covercast/state.sqlite3; ':memory:' keeps nothing)")
    p.add_argument("--hello-timeout", type=float, default=HELLO_TIMEOUT_S, metavar="S",
                   help="seconds a connection has to send its hello (default: %(default)s)")
    p.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS, metavar="N",
                   help="connections in all (default: %(default)s, lowered to keep a tenth "
                        "of the descriptor limit free)")
    p.add_argument("--max-per-address", type=int, default=MAX_PER_ADDRESS, metavar="N",
                   help="connections from one address (default: %(default)s)")
    p.set_defaults(func=serve)

    def client_parser(name: str, help_text: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help_text)
        c.add_argument("--url", default=DEFAULT_URL)
        c.add_argument("--scene", default="demo")
        c.add_argument("--token", help="access token (default: $COVERCAST_TOKEN)")
        return c

    c = client_parser("watch", "print the live cover table of a scene")
    c.add_argument("--once", action="store_true", help="exit after the first delta")
    c.set_defaults(func=_client_command(_watch))

    c = client_parser("move", "move a token")
    c.add_argument("token_id")
    c.add_argument("x", type=float)
    c.add_argument("y", type=float)
    c.add_argument("--px", action="store_true", help="x and y are pixels, not squares")
    c.set_defaults(func=_client_command(_move))

    c = client_parser("door", "open, close or lock a door")
    c.add_argument("wall_id")
    c.add_argument("state", choices=["open", "close", "lock"])
    c.set_defaults(func=_client_command(_door))

    c = client_parser("query", "ask for one pair's cover")
    c.add_argument("attacker")
    c.add_argument("target")
    c.add_argument("--attack", choices=["melee", "reach", "ranged"], default="ranged")
    c.add_argument("--lines", action="store_true")
    c.set_defaults(func=_client_command(_query))

    c = sub.add_parser("record", help="record a client's session, as a proxy to the server")
    c.add_argument("--out", required=True, help="the recording to write (JSON Lines)")
    c.add_argument("--url", default=DEFAULT_URL, help="the server to forward to")
    c.add_argument("--listen", default="127.0.0.1:8766",
                   help="where the client connects instead (default 127.0.0.1:8766)")
    c.add_argument("--note", default="", help="a note kept in the file's header")
    c.set_defaults(func=_record)

    c = sub.add_parser("replay", help="replay a recorded session against a server")
    c.add_argument("file", help="a recording (covercast record, docs/client.md)")
    c.add_argument("--url", default=DEFAULT_URL)
    c.add_argument("--token", help="access token for the hello (default: $COVERCAST_TOKEN)")
    c.add_argument("--speed", type=float, default=1.0,
                   help="time scale: 2 replays twice as fast, 0 as fast as possible")
    c.add_argument("--as-fast-as-possible", action="store_true", help="the same as --speed 0")
    c.add_argument("--out", help="write what was sent and received (recording format)")
    c.add_argument("--check", action="store_true",
                   help="compare replies and annotations with the recording; exit 1 with a "
                        "diff when they differ")
    c.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for the last replies and deltas (default 10)")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=_replay)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
