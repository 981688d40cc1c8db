"""Record a live session through a proxy, replay it against a server, compare the two.

Rule of this module: a session is what went over one WebSocket connection, as
covercast/recording.py writes it. Recording is transparent (frames are forwarded untouched,
in both directions, and written as they pass); replaying sends the recorded client frames
on the recorded schedule scaled by a speed, and keeps everything it receives; comparing
matches replies to requests (the server answers in request order) and annotation tables at
the revisions both runs saw, because pushes coalesce differently at a different pace.
Revisions are compared relative to the first one each run saw of a scene, so a session
recorded on a fresh server replays against a server that already held that scene. Air
(turn.end) changes without a new revision, so it is compared where each run ended, and a
turn.end or friendlyfire.resolve the server rolled for is replayed with the seed it reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import shutil
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from covercast.client import expand_plain
from covercast.recording import Entry, Recording, Writer, entry_from_frame
from server.messages import short_repr

#: What each request is answered with (protocol.md section 4).
REPLY_TYPES = {
    "hello": "welcome", "scene.load": "ack", "token.create": "ack", "token.update": "ack",
    "token.delete": "ack", "wall.create": "ack", "wall.update": "ack", "wall.delete": "ack",
    "cover.query": "cover.result", "area.query": "area.result", "scene.get": "scene",
    "subscribe": "annotations", "unsubscribe": "ack", "scene.unload": "ack",
    "turn.end": "breath", "breath.get": "breath", "friendlyfire.resolve": "friendlyfire.result",
}
#: Float fields may differ by rounding across numpy/Shapely builds; rules results do not.
FLOAT_TOLERANCE = 1e-9


class ReplayError(Exception):
    """The replay could not run (server unreachable, closed at once)."""


def _usable_id(rid: Any) -> bool:
    """An `id` the server echoes (protocol.md section 1)."""
    if isinstance(rid, bool):
        return False
    return (isinstance(rid, int) and rid >= 0) or (isinstance(rid, str) and len(rid) <= 256)


def _answers(request: dict[str, Any] | None, msg: dict[str, Any]) -> bool:
    """Whether `msg` is the reply to `request` (the oldest one not yet answered)."""
    mid = msg.get("id")
    if request is not None and _usable_id(request.get("id")):
        return mid == request["id"] and type(mid) is type(request["id"])
    if mid is not None:
        return False
    if msg.get("type") == "error":
        return True
    want = REPLY_TYPES.get(str(request.get("type"))) if request is not None else None
    if want == "annotations":
        return msg.get("type") == "annotations" and msg.get("full") is True
    return want is not None and msg.get("type") == want


def key_text(key: Sequence[Any]) -> str:
    """An annotation key for people: `archer -> goblin (ranged)`."""
    return f"{key[0]} -> {key[1]} ({key[2]})"


@dataclass(slots=True)
class _Sub:
    number: int
    revision: int


@dataclass(slots=True)
class Tracker:
    """What one connection's session amounts to, fed message by message in wire order:
    each request's reply, and each subscription's annotation messages."""

    requests: list[dict[str, Any] | None] = field(default_factory=list)
    replies: list[dict[str, Any] | None] = field(default_factory=list)
    #: First and newest revision seen of each scene (in any reply or push).
    first: dict[str, int] = field(default_factory=dict)
    latest: dict[str, int] = field(default_factory=dict)
    #: (scene, subscription number) -> its annotation messages: the full set, then deltas.
    history: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    subs: dict[str, _Sub] = field(default_factory=dict)
    #: Per scene and token: the air the last turn.end reply gave, and the air the
    #: subscription last received (a push may bring it before or after that reply).
    air_expected: dict[str, dict[str, Any]] = field(default_factory=dict)
    air_seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    _counts: dict[str, int] = field(default_factory=dict)
    _pending: deque[int] = field(default_factory=deque)

    def sent(self, msg: dict[str, Any] | None) -> None:
        self._pending.append(len(self.requests))
        self.requests.append(msg)
        self.replies.append(None)

    def received(self, msg: dict[str, Any] | None) -> None:
        if msg is None:
            return
        msg = expand_plain(msg)  # a compact set is read as the verbose one it stands for
        scene, revision = msg.get("scene"), msg.get("revision")
        if isinstance(scene, str) and isinstance(revision, int):
            self.first.setdefault(scene, revision)
            self.latest[scene] = max(revision, self.latest.get(scene, revision))
        if self._pending and _answers(self.requests[self._pending[0]], msg):
            k = self._pending.popleft()
            self.replies[k] = msg
            self._reply(self.requests[k], msg)
        elif (msg.get("type") == "annotations" and isinstance(scene, str)
              and scene in self.subs):
            self._keep(scene, msg)
            if msg.get("full"):  # the last, empty set of an unloaded scene
                del self.subs[scene]

    def _reply(self, request: dict[str, Any] | None, msg: dict[str, Any]) -> None:
        kind = request.get("type") if request is not None else None
        scene = msg.get("scene")
        if not isinstance(scene, str):
            return
        if kind == "subscribe" and msg.get("type") == "annotations":
            number = self._counts[scene] = self._counts.get(scene, 0) + 1
            self.subs[scene] = _Sub(number, int(msg["revision"]))
            self.history[(scene, number)] = []
            self._keep(scene, msg)
        elif kind == "unsubscribe" and msg.get("type") == "ack":
            self.subs.pop(scene, None)
            self.air_expected.pop(scene, None)
        elif kind == "turn.end" and msg.get("type") == "breath" and scene in self.subs:
            self.air_expected.setdefault(scene, {}).update(
                (b.get("token"), b) for b in msg.get("breath", []))

    def _keep(self, scene: str, msg: dict[str, Any]) -> None:
        seen = self.air_seen.setdefault(scene, {})
        if msg.get("full"):
            seen.clear()
        seen.update((b.get("token"), b) for b in msg.get("breath", []))
        sub = self.subs[scene]
        sub.revision = int(msg["revision"])
        self.history[(scene, sub.number)].append(msg)

    def table(self, scene: str, number: int) -> dict[str, dict[str, Any]]:
        """A subscription's annotations by key (`key_text`) after its last message."""
        table: dict[str, dict[str, Any]] = {}
        for msg in self.history[(scene, number)]:
            _apply(table, msg, set())
        return table

    @property
    def unanswered(self) -> int:
        return len(self._pending)

    def air_due(self, scene: str) -> list[str]:
        """Tokens whose air from a turn.end this scene's subscription has not yet received."""
        seen = self.air_seen.get(scene, {})
        return sorted(str(t) for t, b in self.air_expected.get(scene, {}).items()
                      if seen.get(t) != b)

    def behind(self) -> list[str]:
        """Subscriptions that have not yet received the newest revision of their scene."""
        return [f"{scene} (at revision {sub.revision}, scene at {self.latest[scene]}"
                + (f"; air of {', '.join(self.air_due(scene))} not yet received"
                   if self.air_due(scene) else "") + ")"
                for scene, sub in self.subs.items()
                if sub.revision < self.latest.get(scene, sub.revision) or self.air_due(scene)]

    @property
    def settled(self) -> bool:
        return not self._pending and not self.behind()


def track(entries: Sequence[Entry]) -> Tracker:
    tracker = Tracker()
    for e in entries:
        if e.dir == "send":
            tracker.sent(e.msg)
        else:
            tracker.received(e.msg)
    return tracker


# -- comparing -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Comparison:
    """The result of --check: `differences` is empty when the replay matched."""

    replies: int
    tables: int
    differences: tuple[str, ...]
    #: What could not be compared, and why (not differences).
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.differences


def compare(recorded: Sequence[Entry], replayed: Sequence[Entry],
            lines: Sequence[int] | None = None, limit: int = 200) -> Comparison:
    """Compare a replay with its recording: every reply the recording holds, and every
    subscription's annotations at each revision both runs saw, plus where each ended.
    Ignored, because they legitimately vary: times, the welcome's server version and
    ruleset list, and absolute revisions (counted from each run's first one per scene)."""
    rec, rep = track(recorded), track(replayed)
    send_lines = ([n for n, e in zip(lines, recorded, strict=True) if e.dir == "send"]
                  if lines is not None else None)
    out: list[str] = []
    replies = 0
    for k, (want, got) in enumerate(zip(rec.replies, rep.replies, strict=False)):
        if want is None:
            continue  # the recorded client left before this reply: nothing to compare
        replies += 1
        where = f"line {send_lines[k]}, " if send_lines is not None else ""
        title = f"reply to request {k + 1} ({where}{_describe(rec.requests[k])}):"
        if got is None:
            out += [title, "  recorded a reply, the replay got none"]
            continue
        diffs = list(_diff(_normal(want, rec.first), _normal(got, rep.first), "$"))
        if diffs:
            out += [title, *("  " + d for d in diffs[:20])]
    if len(rep.replies) < len(rec.replies):
        out.append(f"the replay sent {len(rep.replies)} of the {len(rec.replies)} requests")
    tables = 0
    notes: list[str] = []
    for (scene, number), recorded_msgs in sorted(rec.history.items()):
        title = f"scene {scene!r}, subscription {number}"
        replayed_msgs = rep.history.get((scene, number))
        if replayed_msgs is None:
            out.append(f"{title}: the replay has no such subscription")
            continue
        live = rec.subs.get(scene)
        # A recording that stopped before its last delta arrived (the client closed right
        # after its last change) says nothing about where the subscription ends.
        cut = (live is not None and live.number == number
               and (live.revision < rec.latest[scene] or bool(rec.air_due(scene))))
        if cut:
            assert live is not None
            notes.append(f"{title}: the recording stops at revision "
                         f"+{live.revision - rec.first[scene]}, before the delta of "
                         f"+{rec.latest[scene] - rec.first[scene]}"
                         + (" and air news" if rec.air_due(scene) else "")
                         + "; compared up to there")
        count, diffs = _compare_tables(recorded_msgs, replayed_msgs, rec.first[scene],
                                       rep.first[scene], title, cut)
        tables += count
        out += diffs
    if len(out) > limit:
        out = [*out[:limit], f"... and {len(out) - limit} more lines"]
    return Comparison(replies, tables, tuple(out), tuple(notes))


def _is_air(key: str) -> bool:
    return key.startswith("air of ")


def _apply(table: dict[str, dict[str, Any]], msg: dict[str, Any], touched: set[str]) -> bool:
    """Apply an annotations message to a table; note the keys it touched in `touched`.
    True when it was a full set (every key touched)."""
    if msg.get("full"):
        table.clear()
    for key in msg.get("removed", []):
        text = key_text(key)
        table.pop(text, None)
        touched.add(text)
    for a in msg.get("annotations", []):
        text = key_text((a.get("attacker"), a.get("target"), a.get("mode")))
        table[text] = a
        touched.add(text)
    for b in msg.get("breath", []):
        text = f"air of {b.get('token')}"
        table[text] = b
        touched.add(text)
    return bool(msg.get("full"))


def _compare_tables(want: list[dict[str, Any]], got: list[dict[str, Any]], base_want: int,
                    base_got: int, title: str, cut: bool = False) -> tuple[int, list[str]]:
    """Walk two subscriptions' messages side by side by relative revision; at every
    revision both reached, compare the keys either changed since the last comparison (the
    others were already compared); then where each ended (unless the recording was `cut`
    short), and if that differs the final tables, else the final air states."""
    tw: dict[str, dict[str, Any]] = {}
    tg: dict[str, dict[str, Any]] = {}
    touched: set[str] = set()
    everything = False
    out: list[str] = []
    count = i = j = 0
    def rel_w(k: int) -> int:
        return int(want[k]["revision"]) - base_want

    def rel_g(k: int) -> int:
        return int(got[k]["revision"]) - base_got

    while i < len(want) and j < len(got):
        rw, rg = rel_w(i), rel_g(j)
        if rw < rg:
            everything |= _apply(tw, want[i], touched)
            i += 1
        elif rg < rw:
            everything |= _apply(tg, got[j], touched)
            j += 1
        else:
            # Everything either run received at this revision, then compare. Air is left
            # to the end: a turn.end changes it without a new revision, so which message
            # of a revision carries it depends on how deltas coalesced.
            while i < len(want) and rel_w(i) == rw:
                everything |= _apply(tw, want[i], touched)
                i += 1
            while j < len(got) and rel_g(j) == rg:
                everything |= _apply(tg, got[j], touched)
                j += 1
            count += 1
            keys = tw.keys() | tg.keys() if everything else touched
            diffs = list(_diff_tables(tw, tg, (k for k in keys if not _is_air(k))))
            if diffs:
                out += [f"{title}, at revision +{rw}:", *("  " + d for d in diffs[:20])]
            touched, everything = set(), False
    for msg in want[i:]:
        _apply(tw, msg, touched)
    for msg in got[j:]:
        _apply(tg, msg, touched)
    end_want = int(want[-1]["revision"]) - base_want
    end_got = int(got[-1]["revision"]) - base_got
    if end_want != end_got and not cut:
        diffs = list(_diff_tables(tw, tg, tw.keys() | tg.keys()))
        out += [f"{title}: the recording ends at revision +{end_want}, the replay at "
                f"+{end_got}", *("  final tables: " + d for d in diffs[:20])]
    elif not cut:
        diffs = list(_diff_tables(tw, tg, (k for k in tw.keys() | tg.keys() if _is_air(k))))
        if diffs:
            out += [f"{title}, at the end:", *("  " + d for d in diffs[:20])]
    return count, out


def _describe(request: dict[str, Any] | None) -> str:
    if request is None:
        return "an undecodable frame"
    text = str(request.get("type"))
    if request.get("type") == "cover.query":
        text += f" {request.get('attacker')} -> {request.get('target')}"
    elif isinstance(request.get("scene"), str):
        text += f" {request['scene']}"
    return text


def _normal(msg: dict[str, Any], first: dict[str, int]) -> dict[str, Any]:
    """A reply with what legitimately varies taken out (see `compare`)."""
    if msg.get("type") == "welcome":
        return {"type": "welcome", "protocol": msg.get("protocol"), "role": msg.get("role")}
    out = dict(expand_plain(msg))
    scene = out.get("scene")
    if isinstance(out.get("revision"), int) and isinstance(scene, str) and scene in first:
        out["revision"] = out["revision"] - first[scene]
    if out.get("type") == "annotations":
        out["annotations"] = {key_text((a.get("attacker"), a.get("target"), a.get("mode"))): a
                              for a in out.get("annotations", [])}
        out["removed"] = sorted(key_text(k) for k in out.get("removed", []))
    return out


def _diff_tables(want: dict[str, Any], got: dict[str, Any],
                 keys: Iterable[str]) -> Iterator[str]:
    for key in sorted(keys):
        if key not in want and key not in got:
            continue
        if key not in got:
            yield f"{key}: recorded {_brief(want[key])}, missing in the replay"
        elif key not in want:
            yield f"{key}: not in the recording, replayed {_brief(got[key])}"
        else:
            for d in _diff(want[key], got[key], ""):
                yield f"{key}{d}"


def _brief(annotation: Any) -> str:
    if isinstance(annotation, dict) and "cover" in annotation:
        return f"cover {annotation['cover']!r}"
    if isinstance(annotation, dict) and "air" in annotation:
        return f"air {annotation['air']!r}"
    return short_repr(annotation, 60)


def _diff(want: Any, got: Any, path: str) -> Iterator[str]:
    """Every place where two decoded messages differ, as `path: recorded X, replayed Y`."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(want.keys() | got.keys(), key=str):
            sub = f"{path}.{k}" if str(k).isidentifier() else f"{path}[{k!r}]"
            if k not in got:
                yield f"{sub}: recorded {short_repr(want[k], 60)}, missing in the replay"
            elif k not in want:
                yield f"{sub}: not in the recording, replayed {short_repr(got[k], 60)}"
            else:
                yield from _diff(want[k], got[k], sub)
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            yield (f"{path}: recorded {len(want)} items, replayed {len(got)}: "
                   f"recorded {short_repr(want, 70)}, replayed {short_repr(got, 70)}")
            return
        for k, (a, b) in enumerate(zip(want, got, strict=True)):
            yield from _diff(a, b, f"{path}[{k}]")
    elif _number(want) and _number(got):
        if not math.isclose(want, got, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE):
            yield f"{path}: recorded {want!r}, replayed {got!r}"
    elif want != got or type(want) is not type(got):
        yield f"{path}: recorded {short_repr(want, 60)}, replayed {short_repr(got, 60)}"


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# -- replaying -------------------------------------------------------------------------------

class Progress:
    """A one-line progress bar on a terminal (stderr); silent when it is not a terminal."""

    def __init__(self, total: int, duration: float, stream: TextIO | None = None,
                 enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = total
        self.duration = duration
        self.sent = 0
        self.received = 0

    def draw(self, elapsed: float, status: str = "") -> None:
        if not self.enabled:
            return
        width = 30
        done = self.sent / self.total if self.total else 1.0
        bar = "#" * round(done * width) + "-" * (width - round(done * width))
        text = (f"\rreplay [{bar}] {self.sent}/{self.total} sent, {self.received} received, "
                f"{elapsed:5.1f}/{self.duration:.1f} s {status}")
        # Never wider than the terminal: a wrapped line would not be redrawn in place.
        columns = min(100, shutil.get_terminal_size((100, 24)).columns - 1)
        self.stream.write(text.ljust(columns)[:columns])
        self.stream.flush()

    def finish(self, elapsed: float) -> None:
        if self.enabled:
            self.draw(elapsed, "done")
            self.stream.write("\n")
            self.stream.flush()


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    """What a replay sent and received (its own transcript, in the recording format)."""

    entries: tuple[Entry, ...]
    sent: int
    received: int
    elapsed: float
    #: Empty when every request was answered and every subscription caught up.
    incomplete: tuple[str, ...]
    closed: str | None


def _with_seed(entry: Entry, reply: dict[str, Any] | None) -> Entry:
    """A recorded `turn.end` or `friendlyfire.resolve` for which the server rolled dice, with
    the seed it reported: the replay rolls the same dice (protocol.md 3.15, "Replaying server
    rolls", and 3.17)."""
    if entry.msg is None or entry.msg.get("seed") is not None or reply is None:
        return entry
    kind = (entry.msg.get("type"), reply.get("type"))
    if kind == ("turn.end", "breath"):
        entries = reply.get("breath")
        seed = entries[0].get("seed") if isinstance(entries, list) and entries else None
    elif kind == ("friendlyfire.resolve", "friendlyfire.result"):
        seed = reply.get("seed")
    else:
        return entry
    if not isinstance(seed, int):
        return entry
    return Entry(entry.t, entry.dir, {**entry.msg, "seed": seed}, entry.frame)


def _with_token(entry: Entry, token: str | None) -> Entry:
    """A recorded hello with this run's access token (recordings never hold one)."""
    if entry.msg is None or entry.msg.get("type") != "hello":
        return entry
    msg = {k: v for k, v in entry.msg.items() if k != "token"}
    if token is not None:
        msg["token"] = token
    return Entry(entry.t, entry.dir, msg, entry.frame)


async def replay(recording: Recording, url: str, *, speed: float = 1.0,
                 token: str | None = None, timeout: float = 10.0,
                 writer: Writer | None = None,
                 progress: Progress | None = None) -> ReplayOutcome:
    """Send the recording's client messages to the server at `url`, each at its recorded
    time divided by `speed` (0: as fast as possible), keep everything received, then wait
    (up to `timeout` seconds) for every reply and for every subscription to reach its
    scene's latest revision. A `turn.end` whose dice the server rolled is sent with the
    seed the recording's reply reported, so the same dice fall."""
    try:
        ws = await connect(url, max_size=None, compression=None, open_timeout=timeout)
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        raise ReplayError(f"cannot reach {url}: {exc}") from exc
    loop = asyncio.get_running_loop()
    start = loop.time()
    entries: list[Entry] = []
    tracker = Tracker()
    news = asyncio.Event()
    closed = asyncio.Event()
    closing = False
    server_closed: str | None = None

    def keep(entry: Entry) -> None:
        entries.append(entry)
        if writer is not None:
            writer.entry(entry)

    async def read() -> None:
        nonlocal server_closed
        try:
            async for frame in ws:
                entry = entry_from_frame(loop.time() - start, "recv", frame)
                keep(entry)
                tracker.received(entry.msg)
                if progress is not None:
                    progress.received += 1
                news.set()
        except ConnectionClosed:
            pass
        if not closing:
            server_closed = f"{ws.close_code} {ws.close_reason or ''}".strip()
        closed.set()
        news.set()

    async def tick() -> None:
        while progress is not None:
            progress.draw(loop.time() - start)
            await asyncio.sleep(0.1)

    recorded = track(recording.entries).replies
    reader = asyncio.create_task(read())
    ticker = asyncio.create_task(tick())
    try:
        for k, entry in enumerate(recording.sends):
            if speed > 0:
                delay = start + entry.t / speed - loop.time()
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(closed.wait(), delay)
            if closed.is_set():
                break
            entry = _with_seed(_with_token(entry, token), recorded[k])
            keep(Entry(round(loop.time() - start, 6), "send", entry.msg, entry.frame,
                       entry.raw, entry.b64))
            tracker.sent(entry.msg)
            try:
                await ws.send(entry.to_frame())
            except ConnectionClosed:
                break
            if progress is not None:
                progress.sent += 1
        incomplete: list[str] = []
        try:
            async with asyncio.timeout(timeout):
                while not tracker.settled and not closed.is_set():
                    news.clear()
                    await news.wait()
        except TimeoutError:
            pass
        if tracker.unanswered:
            incomplete.append(f"{tracker.unanswered} request(s) got no reply")
        incomplete += [f"subscription to {b} did not catch up" for b in tracker.behind()]
    finally:
        ticker.cancel()
        closing = True
        await ws.close()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
    elapsed = loop.time() - start
    if progress is not None:
        progress.finish(elapsed)
    return ReplayOutcome(tuple(entries), sum(e.dir == "send" for e in entries),
                         sum(e.dir == "recv" for e in entries), elapsed, tuple(incomplete),
                         server_closed)


# -- recording -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RecordOutcome:
    messages: int
    failure: str | None


#: Close codes a proxy may forward as they are (1005, 1006, 1015 cannot be sent).
_SENDABLE = {1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014}


async def record(upstream: str, out: Path, *, host: str = "127.0.0.1", port: int = 8766,
                 ready: Callable[[str], None] | None = None,
                 note: str = "") -> RecordOutcome:
    """Listen on host:port as a Covercast server would; forward the first client that
    connects to `upstream` and every frame both ways untouched, writing each to `out` as it
    passes (the access token of a `hello` is left out of the file). Returns when that
    connection ends; other clients meanwhile are refused (1013, one session per file)."""
    done = asyncio.Event()
    busy = False
    result: list[RecordOutcome] = []

    async def handler(client: ServerConnection) -> None:
        nonlocal busy
        if busy:
            await client.close(1013, "covercast record: one connection per recording")
            return
        busy = True
        try:
            result.append(await _proxy(client, upstream, f, note))
        except Exception as exc:  # a bug or a full disk: report it, never hang
            result.append(RecordOutcome(0, f"recording failed: {exc!r}"))
            await client.close(1011, "covercast record failed")
        finally:
            done.set()

    # Opened first, so an unwritable path fails before a client is kept waiting.
    with open(out, "w", encoding="utf-8") as f:
        async with serve(handler, host, port, max_size=None,
                         compression=None) as listener:
            bound = next(iter(listener.sockets)).getsockname()[1]
            if ready is not None:
                ready(f"ws://{host}:{bound}")
            await done.wait()
    return result[0]


async def _proxy(client: ServerConnection, upstream: str, out: TextIO,
                 note: str) -> RecordOutcome:
    try:
        server = await connect(upstream, max_size=None, compression=None)
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        await client.close(1011, "covercast record: upstream unreachable")
        return RecordOutcome(0, f"cannot reach {upstream}: {exc}")
    writer = Writer(out, f"covercast record, proxy to {upstream}", note)
    await asyncio.gather(_pump(client, server, "send", writer),
                         _pump(server, client, "recv", writer))
    return RecordOutcome(writer.count, None)


async def _pump(src: ServerConnection | ClientConnection,
                dst: ServerConnection | ClientConnection, direction: str,
                writer: Writer) -> None:
    """Forward frames from src to dst, recording each, until src closes; then close dst
    the same way."""
    try:
        async for frame in src:
            entry = entry_from_frame(writer.elapsed(), "send" if direction == "send"
                                     else "recv", frame)
            if entry.msg is not None and entry.msg.get("type") == "hello":
                entry = Entry(entry.t, entry.dir,
                              {k: v for k, v in entry.msg.items() if k != "token"},
                              entry.frame)
            writer.entry(entry)
            with contextlib.suppress(ConnectionClosed):
                await dst.send(frame)
    except ConnectionClosed:
        pass
    code = src.close_code if src.close_code in _SENDABLE else 1000
    await dst.close(code or 1000, src.close_reason or "")
