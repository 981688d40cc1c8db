"""`covercast`: run the server, or talk to one from a terminal.

    covercast serve [--host H] [--port P] [--no-demo | --fresh-demo] [--token T]
                    [--state PATH] [--state-sync full|normal]
                    [--player-token T] [--overlay-token T] [--workers N]
                    [--nats URL [--no-front] [--nats-replicas N]]   (docs/deploy.md)
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
import errno
import json
import logging
import math
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import msgspec

from covercast.show import render_query, render_table
from server.admission import HELLO_TIMEOUT_S, MAX_CONNECTIONS, MAX_PER_ADDRESS

DEFAULT_PORT = 8765
DEFAULT_URL = f"ws://127.0.0.1:{DEFAULT_PORT}"


def default_state_path() -> str:
    """Where the server keeps what outlives it (every scene, each token's air): the XDG state
    directory, $XDG_STATE_HOME/covercast/state.sqlite3 (~/.local/state/... by default)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "covercast", "state.sqlite3")


def _demo_request() -> Any:
    from server.messages import parse_request

    text = resources.files("server").joinpath("demo/demo.json").read_text()
    return parse_request(json.loads(text))


def serve(args: argparse.Namespace) -> int:
    try:
        import numpy  # noqa: F401
        import shapely  # noqa: F401
    except ImportError as exc:
        print(f"error: the server needs numpy and shapely ({exc.name} is missing): "
              "pip install 'covercast[server]'", file=sys.stderr)
        return 2
    from server.admission import EdgeLimits
    from server.app import run
    from server.errors import ClientError
    from server.session import Core
    from server.store import Store, StoreError
    from server.workers import WorkerConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    workers = args.workers if args.workers is not None else cpus()
    if workers < (0 if args.nats and not args.no_front else 1):
        print(f"error: --workers {workers}: at least 1"
              + (" (0 for a front process alone, with --nats)" if workers == 0 else ""),
              file=sys.stderr)
        return 2
    if args.no_front and not args.nats:
        print("error: --no-front needs --nats (workers without a front process are "
              "reached over NATS only)", file=sys.stderr)
        return 2
    try:
        store = Store(args.state or default_state_path(), sync=args.state_sync)
    except (StoreError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    gm_token = args.token or os.environ.get("COVERCAST_TOKEN") or None
    overlay_token = args.overlay_token or os.environ.get("COVERCAST_OVERLAY_TOKEN") or None
    player_token = args.player_token or os.environ.get("COVERCAST_PLAYER_TOKEN") or None
    # One process holds the scenes itself; with workers each restores the ones it owns
    # (server/workers.py), and this process reads them all once first, so that a damaged
    # store stops the server here with one clear line; on NATS the scenes live in
    # JetStream (docs/deploy.md).
    single = workers == 1 and not args.nats
    try:
        core = Core(access_token=gm_token, player_token=player_token,
                    overlay_token=overlay_token, store=store, restore=not args.nats,
                    keep_scenes=not args.nats)
        restored = sorted(core.scenes)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:  # a stored scene cannot be read back
        print(f"error: {exc}", file=sys.stderr)
        return 1
    # NATS mode starts without the demo scene: scenes are the workers' to claim.
    demo = None if args.no_demo or args.nats else _demo_request()
    demo_kept = False
    if demo is not None and single:
        try:
            # A demo scene the store brought back is kept as the gm left it.
            demo_kept = not core.preload(demo, keep_stored=not args.fresh_demo)
        except ClientError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 1
    elif demo is not None:
        demo_kept = "demo" in restored and not args.fresh_demo
    # The scenes as they were at start-up (the banner's), then, with workers, let go of.
    revisions = {sid: scene.revision for sid, scene in core.scenes.items()}
    if not single:
        core.scenes.clear()
    limits = EdgeLimits(hello_timeout_s=args.hello_timeout, max_connections=args.max_connections,
                        max_per_address=args.max_per_address)

    def ready(port: int) -> None:
        url = f"ws://{args.host}:{port}"
        print(f"covercast listening on {url}", flush=True)
        print(f"state store: {store.path}"
              + (f" ({len(restored)} scene{'s' if len(restored) != 1 else ''} restored: "
                 f"{', '.join(restored)})" if restored else ""), flush=True)
        scene = "SCENE" if demo is None else "demo"
        print(f"live overlay: http://{args.host}:{port}/overlay?scene={scene}"
              + (f"#token={overlay_token}" if overlay_token else
                 " (add #token=GM_TOKEN: this server has no overlay token)" if gm_token
                 else ""), flush=True)
        if demo is not None:
            # Commands that work as printed: with a token server, the other terminal needs it.
            env = f"COVERCAST_TOKEN={shlex.quote(gm_token)} " if gm_token else ""
            flag = "" if port == DEFAULT_PORT and args.host == "127.0.0.1" else f" --url {url}"
            revision = f" at revision {revisions['demo']}" if "demo" in revisions else ""
            said = (f"restored{revision}, as it was left (--fresh-demo loads it as shipped)"
                    if demo_kept else "loaded (D&D 3.5)")
            print(f"demo scene 'demo' {said}. In another terminal:\n"
                  f"  {env}.venv/bin/covercast watch{flag}\n"
                  f"  {env}.venv/bin/covercast move goblin 8 6{flag}\n"
                  f"  {env}.venv/bin/covercast door door-e open{flag}\n"
                  f"  {env}.venv/bin/covercast query archer goblin{flag}", flush=True)

    config = WorkerConfig(workers, gm_token, player_token, overlay_token, store.path, demo,
                          limits, sync=args.state_sync, fresh_demo=args.fresh_demo)
    if args.nats:
        if not (args.no_front and workers == 1):
            store.close()  # each worker process opens it; this one runs none
        return _serve_nats(args, replace(config, demo=None, nats=args.nats,
                                         replicas=args.nats_replicas), core, ready)
    try:
        if workers == 1:
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(run(core, args.host, args.port, ready, limits))
        else:
            store.close()  # each worker opens it for the scenes it owns
            return _serve_workers(args, config, ready)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            print(f"error: port {args.port} is in use: is another covercast running? "
                  "use --port", file=sys.stderr)
        else:
            print(f"error: cannot listen on {args.host}:{args.port}: "
                  f"{exc.strerror or exc}", file=sys.stderr)
        return 2
    return 0


def cpus() -> int:
    """The CPUs this process may run on (`--workers`' default)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _serve_workers(args: argparse.Namespace, config: Any, ready: Any) -> int:
    """`serve --workers N` (N > 1): the workers first, then the front process's listener;
    SIGTERM or ^C stops both."""
    import signal

    from server.front import run as run_front
    from server.workers import Workers

    pool = Workers(config)
    try:
        pool.start()
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        supervisor = asyncio.create_task(pool.supervise())
        try:
            await run_front(pool.sockets, args.host, args.port, ready, config.limits)
        finally:
            supervisor.cancel()

    try:
        with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
            asyncio.run(main())
    finally:
        pool.stop()
    return 0


def _serve_nats(args: argparse.Namespace, config: Any, core: Any, ready: Any) -> int:
    """`serve --nats URL`: this machine's part of a NATS deployment (docs/deploy.md): a
    front process (unless --no-front) and --workers worker processes (a single worker
    with --no-front runs in this process)."""
    import signal

    try:
        from server import mesh
    except ImportError as exc:
        print(f"error: NATS mode needs the NATS client ({exc.name} is missing): "
              "pip install 'covercast[cluster]'", file=sys.stderr)
        return 2
    from server.workers import Workers

    pool = Workers(config) if config.workers and not (args.no_front and config.workers == 1) \
        else None

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        if pool is not None:
            supervisor = asyncio.create_task(pool.supervise())
        try:
            if not args.no_front:
                await mesh.run_front(args.nats, args.host, args.port, ready, config.limits)
            elif pool is None:
                def said(name: str) -> None:
                    print(f"covercast worker {name} on {args.nats}", flush=True)

                await mesh.run_worker(args.nats, core, config.replicas, ready=said)
            else:
                print(f"covercast: {config.workers} workers on {args.nats}", flush=True)
                await asyncio.Event().wait()
        finally:
            if pool is not None:
                supervisor.cancel()

    try:
        if pool is not None:
            pool.start()
        with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
            asyncio.run(main())
    except (RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if pool is not None:
            pool.stop()
    return 0


def _token(args: argparse.Namespace) -> str | None:
    """--token, else the environment's, read as the client library reads it."""
    from covercast.client import token_from_env

    token: str | None = args.token or token_from_env()
    return token


class CommandError(Exception):
    """A command the user gave cannot be carried out (a door that is no door, a square off
    the map, a file that is not a scene): said in one line, exit status 1."""


async def _watch(args: argparse.Namespace) -> int:
    from covercast.client import Client

    color = sys.stdout.isatty()
    async with Client(args.url, token=_token(args), name="covercast-watch") as client:
        if args.attacker or args.target:
            ids = {t["id"] for t in (await client.get_scene(args.scene)).scene["tokens"]}
            unknown = sorted(set(args.attacker + args.target) - ids)
            if unknown:
                raise CommandError(f"scene {args.scene!r} has no token {', '.join(unknown)} "
                                   f"(its tokens: {', '.join(sorted(ids)) or 'none'})")
        # The server sends only the filtered pairs (and computes no others): a big scene
        # stays cheap to watch one token of.
        sub = await client.subscribe(args.scene, attackers=args.attacker or None,
                                     targets=args.target or None)

        def draw(changed: set[tuple[str, str]]) -> None:
            _draw(render_table(_as_dicts(sub.table), sub.revision, changed,
                               attackers=args.attacker, targets=args.target, color=color))

        draw(set())
        async for delta in sub:
            draw({(a.attacker, a.target) for a in delta.annotations}
                 | {(a, t) for a, t, _ in delta.removed})
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


def _find(items: list[dict[str, Any]], wanted: str, what: str, scene: str) -> dict[str, Any]:
    for item in items:
        if item["id"] == wanted:
            return item
    names = ", ".join(sorted(i["id"] for i in items)[:30]) or "none"
    raise CommandError(f"scene {scene!r} has no {what} {wanted!r} (its {what}s: {names})")


async def _move(args: argparse.Namespace) -> int:
    from covercast.client import Client

    async with Client(args.url, token=_token(args), name="covercast-move") as client:
        scene = (await client.get_scene(args.scene)).scene
        token = _find(scene["tokens"], args.token_id, "token", args.scene)
        size = float(scene["grid"].get("size", 100))
        # scene.get leaves out fields at their defaults (docs/protocol.md section 5).
        width, height = scene.get("width", 4000), scene.get("height", 3000)
        tw, th = token.get("width", 1), token.get("height", 1)
        scale = 1.0 if args.px else size
        x, y = args.x * scale, args.y * scale
        # The token's whole footprint must stay on the map (Foundry's padding: --force).
        if not args.force and (x < 0 or y < 0 or x + tw * size > width
                               or y + th * size > height):
            unit = "px" if args.px else "squares"
            raise CommandError(
                f"({args.x:g}, {args.y:g}) puts {args.token_id} off the map: scene "
                f"{args.scene!r} is {width / scale:g} x {height / scale:g} {unit}, and a "
                f"token of {tw:g} x {th:g} squares fits from (0, 0) to "
                f"({(width - tw * size) / scale:g}, {(height - th * size) / scale:g}); "
                "--force moves it anyway")
        ack = await client.move_token(args.scene, args.token_id, x, y)
        print(f"moved {args.token_id} to ({args.x:g}, {args.y:g}{' px' if args.px else ''}): "
              f"scene {args.scene} now at revision {ack.revision}")
    return 0


_DOOR_STATES = {"open": 1, "close": 0, "lock": 2}


async def _door(args: argparse.Namespace) -> int:
    from covercast.client import Client

    async with Client(args.url, token=_token(args), name="covercast-door") as client:
        walls = (await client.get_scene(args.scene)).scene["walls"]
        doors = sorted(w["id"] for w in walls if w.get("door", 0))
        wall = next((w for w in walls if w["id"] == args.wall_id), None)
        listed = f"its doors: {', '.join(doors[:30])}" if doors else "it has no doors"
        if wall is None:
            raise CommandError(f"scene {args.scene!r} has no wall {args.wall_id!r} ({listed})")
        if not wall.get("door", 0):
            raise CommandError(f"wall {args.wall_id!r} is not a door, and only doors open, "
                               f"close or lock ({listed})")
        ack = await client.update_walls(args.scene, [{"_id": args.wall_id,
                                                      "ds": _DOOR_STATES[args.state]}])
        print(f"door {args.wall_id} {args.state}: scene {args.scene} now at revision "
              f"{ack.revision}")
    return 0


async def _query(args: argparse.Namespace) -> int:
    from covercast.client import Client

    async with Client(args.url, token=_token(args), name="covercast-query") as client:
        state = None if args.json else await client.get_scene(args.scene)
        result = await client.query(args.scene, args.attacker, args.target, args.attack,
                                    lines=args.lines)
        answer = msgspec.to_builtins(result)
        if state is None:
            print(json.dumps(answer["annotation"], indent=2))
        else:
            print(render_query(answer, state.scene, str(state.scene.get("ruleset", "?"))))
    return 0


def read_scene_file(path: str) -> dict[str, Any]:
    """A scene file as a `scene.load` request: either the whole request of docs/protocol.md
    section 5 (`{"type": "scene.load", "scene": {...}, "ruleset": ..., "options": ...}`)
    or only the scene document (`{"id": ..., "grid": ..., "walls": [...], ...}`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CommandError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{path} is not JSON: line {exc.lineno} column {exc.colno}: "
                           f"{exc.msg}") from None
    if not isinstance(data, dict):
        raise CommandError(f"{path} holds a JSON {type(data).__name__}, not a scene (an "
                           "object with id and grid, or a scene.load request)")
    if isinstance(data.get("scene"), dict):
        kind = data.get("type", "scene.load")
        if kind != "scene.load":
            raise CommandError(f"{path} is a {kind!r} message, not scene.load")
        return {k: v for k, v in data.items() if k not in ("type", "id")}
    return {"scene": data}


async def _load(args: argparse.Namespace) -> int:
    from covercast.client import Client

    request = read_scene_file(args.file)
    scene = request["scene"]
    ruleset = args.ruleset or request.get("ruleset") or "dnd35"
    options = dict(request.get("options") or {})
    if args.options is not None:
        try:
            extra = json.loads(args.options)
        except json.JSONDecodeError as exc:
            raise CommandError(f"--options is not JSON: {exc.msg} at column {exc.colno}"
                               ) from None
        if not isinstance(extra, dict):
            raise CommandError("--options wants a JSON object, e.g. '{\"flanking\": true}'")
        options.update(extra)
    async with Client(args.url, token=_token(args), name="covercast-load") as client:
        ack = await client.load_scene(scene, ruleset=ruleset, options=options)
        name = scene.get("id") or scene.get("_id")
        counts = ", ".join(f"{len(scene.get(k) or [])} {k}" for k in ("tokens", "walls",
                                                                         "regions"))
        print(f"loaded scene {name!r} ({ruleset}; {counts}) at revision {ack.revision}\n"
              f"  see it: covercast watch --scene {name} --url {args.url}")
    return 0


def _record(args: argparse.Namespace) -> int:
    from covercast.replay import record

    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        print(f"error: --listen wants HOST:PORT, got {args.listen!r}", file=sys.stderr)
        return 2

    # `--out recordings/session.jsonl` works on a fresh clone: the folder is made.
    with contextlib.suppress(OSError):
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)

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
                with contextlib.suppress(OSError):  # the open below says what is wrong
                    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
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
        from covercast.client import ConnectionLost, CovercastError, ServerError

        try:
            code: int = asyncio.run(fn(args))
            return code
        except ConnectionLost as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except ServerError as exc:
            where = f" (at {exc.path})" if exc.path and exc.path not in exc.message else ""
            print(f"error: {exc}{where}", file=sys.stderr)
            return 1
        except (CovercastError, CommandError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0
    return run


class _Help(argparse.HelpFormatter):
    """Every flag's default after its help line (flags off or unset by default say so in
    their help instead)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if ("%(default)" in text or not action.option_strings
                or action.default in (None, False, [], argparse.SUPPRESS)):
            return text
        return text + " (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="covercast", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=description,
                              formatter_class=_Help)

    p = command("serve", "run the server",
                "Run the Covercast server: WebSocket clients (the Foundry module, bots, "
                "this command) and the overlay page at http://HOST:PORT/overlay, on one "
                "port. The demo scene 'demo' is loaded unless --no-demo.")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help="the port to listen on (0 picks a free one)")
    demo = p.add_mutually_exclusive_group()
    demo.add_argument("--no-demo", action="store_true", help="start without the demo scene")
    demo.add_argument("--fresh-demo", action="store_true",
                      help="load the demo scene as shipped, replacing the one the state store "
                           "kept (by default a stored demo scene is kept, with its changes)")
    p.add_argument("--token", help="the gm's access token clients must send in hello "
                                   "($COVERCAST_TOKEN if unset; none: an open server, every "
                                   "client is gm unless it asks for a viewer role)")
    p.add_argument("--player-token", help="access token of read-only players, who never see "
                                          "hidden tokens ($COVERCAST_PLAYER_TOKEN if unset; "
                                          "needs a gm token)")
    p.add_argument("--overlay-token", help="access token of read-only stream overlays "
                                           "($COVERCAST_OVERLAY_TOKEN if unset; needs a gm "
                                           "token)")
    p.add_argument("--state", metavar="PATH",
                   help="SQLite file keeping every scene and each token's air across "
                        "restarts ($XDG_STATE_HOME/covercast/state.sqlite3 if unset; "
                        "':memory:' keeps nothing)")
    p.add_argument("--state-sync", choices=("normal", "full"), default="normal",
                   help="normal: each scene change is in the state file's WAL before its ack "
                        "(survives the server killed; a power cut may lose the last ones); "
                        "full: fsynced before its ack (survives a power cut; about one "
                        "fsync per change). Air is always fsynced (default: %(default)s)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="worker processes owning the scenes, each scene one worker's (default: "
                        "the number of CPUs; 1: one process, as before); see docs/deploy.md")
    p.add_argument("--nats", metavar="URL",
                   help="run on NATS (nats://host:4222, several comma-separated): scenes "
                        "owned by workers on any machine, clients on any front process; "
                        "needs covercast[cluster] and a NATS server with JetStream "
                        "(docs/deploy.md)")
    p.add_argument("--no-front", action="store_true",
                   help="with --nats: workers only, no listener on this machine")
    p.add_argument("--nats-replicas", type=int, default=3, metavar="N",
                   help="with --nats: JetStream replicas of the leases and change logs "
                        "(1 on a single NATS server; made once, by the first worker)")
    p.add_argument("--hello-timeout", type=float, default=HELLO_TIMEOUT_S, metavar="S",
                   help="seconds a connection has to send its hello (default: %(default)s)")
    p.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS, metavar="N",
                   help="connections in all, lowered to keep a tenth of the descriptor "
                        "limit free (default: %(default)s)")
    p.add_argument("--max-per-address", type=int, default=MAX_PER_ADDRESS, metavar="N",
                   help="connections from one address (default: %(default)s)")
    p.set_defaults(func=serve)

    def client_command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        c = command(name, summary, description)
        c.add_argument("--url", default=DEFAULT_URL, help="the server")
        c.add_argument("--scene", default="demo", help="the scene's id")
        c.add_argument("--token", help="the gm's access token ($COVERCAST_TOKEN if unset)")
        return c

    c = client_command("watch", "print a scene's live cover table",
                       "Subscribe to a scene and print its cover table (ranged and melee, "
                       "each attacker against each target), redrawn on every change; rows "
                       "the change touched are marked with * (reverse video on a terminal).")
    c.add_argument("--attacker", action="append", default=[], metavar="TOKEN",
                   help="show only this attacker's rows (repeatable; the server sends no "
                        "others)")
    c.add_argument("--target", action="append", default=[], metavar="TOKEN",
                   help="show only rows against this target (repeatable; the server sends "
                        "no others)")
    c.add_argument("--once", action="store_true", help="exit after the first change")
    c.set_defaults(func=_client_command(_watch))

    c = client_command("move", "move a token",
                       "Move a token so its top-left corner is on square (X, Y), counted "
                       "from 0 at the map's top-left; a move off the map is refused.")
    c.add_argument("token_id", metavar="TOKEN", help="the token's id")
    c.add_argument("x", type=float, metavar="X", help="column (or pixels with --px)")
    c.add_argument("y", type=float, metavar="Y", help="row (or pixels with --px)")
    c.add_argument("--px", action="store_true", help="X and Y are pixels, not squares")
    c.add_argument("--force", action="store_true",
                   help="move it even off the map (into a Foundry scene's padding)")
    c.set_defaults(func=_client_command(_move))

    c = client_command("door", "open, close or lock a door",
                       "Open, close or lock a door (a wall whose door type is not 0); any "
                       "other wall is refused, with the scene's doors listed.")
    c.add_argument("wall_id", metavar="WALL", help="the door's wall id")
    c.add_argument("state", choices=["open", "close", "lock"], help="what to do with it")
    c.set_defaults(func=_client_command(_door))

    c = client_command("query", "ask for one pair's cover",
                       "What ATTACKER gets against TARGET right now: the cover degree, the "
                       "numbers to add and why, the flags that are true, and with --lines "
                       "the lines traced (in squares). --json prints the whole annotation.")
    c.add_argument("attacker", metavar="ATTACKER", help="the attacker's token id")
    c.add_argument("target", metavar="TARGET", help="the target's token id")
    c.add_argument("--attack", choices=["melee", "reach", "ranged"], default="ranged",
                   help="the kind of attack")
    c.add_argument("--lines", action="store_true", help="also list the lines traced")
    c.add_argument("--json", action="store_true",
                   help="print the annotation as the protocol's JSON (pixels, every flag)")
    c.set_defaults(func=_client_command(_query))

    c = client_command("load", "load a scene from a JSON file",
                       "Load (or replace) a scene from FILE: a scene document as in "
                       "docs/protocol.md section 5 ({\"id\": ..., \"grid\": ..., \"walls\": "
                       "[...], \"tokens\": [...]}), or a whole scene.load request with its "
                       "ruleset and options. Then `covercast watch --scene ID` shows it.")
    c.add_argument("file", metavar="FILE", help="the scene file (JSON)")
    c.add_argument("--ruleset", help="the ruleset (the file's, else dnd35, if unset)")
    c.add_argument("--options", metavar="JSON",
                   help="ruleset options as a JSON object, over the file's")
    c.set_defaults(func=_client_command(_load))

    c = command("record", "record a client's session, as a proxy to the server",
                "Stand between a client and the server and write everything that passes "
                "to a recording (JSON Lines) that `covercast replay` plays back.")
    c.add_argument("--out", required=True, metavar="FILE",
                   help="the recording to write (JSON Lines; e.g. recordings/session.jsonl)")
    c.add_argument("--url", default=DEFAULT_URL, help="the server to forward to")
    c.add_argument("--listen", default="127.0.0.1:8766", metavar="HOST:PORT",
                   help="where the client connects instead")
    c.add_argument("--note", default="", help="a note kept in the file's header")
    c.set_defaults(func=_record)

    c = command("replay", "replay a recorded session against a server",
                "Send a recording's requests to a server at their recorded pace (or "
                "faster) and, with --check, compare the replies and annotations.")
    c.add_argument("file", metavar="FILE", help="a recording (covercast record, docs/client.md)")
    c.add_argument("--url", default=DEFAULT_URL, help="the server")
    c.add_argument("--token", help="access token for the hello ($COVERCAST_TOKEN if unset)")
    c.add_argument("--speed", type=float, default=1.0,
                   help="time scale: 2 replays twice as fast, 0 as fast as possible")
    c.add_argument("--as-fast-as-possible", action="store_true", help="the same as --speed 0")
    c.add_argument("--out", metavar="FILE",
                   help="write what was sent and received (recording format)")
    c.add_argument("--check", action="store_true",
                   help="compare replies and annotations with the recording; exit 1 with a "
                        "diff when they differ")
    c.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for the last replies and deltas")
    c.add_argument("--quiet", action="store_true", help="no progress bar")
    c.set_defaults(func=_replay)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
