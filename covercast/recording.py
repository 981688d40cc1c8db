"""Recorded sessions: the file format `covercast record` writes and `covercast replay` reads.

Rule of this module: a recording is JSON Lines, validated once when read (msgspec Structs,
like the server's messages), and every problem is reported as a RecordingError naming the
line, the field and the value; nothing downstream re-checks it. Format (docs/client.md):

    {"format": "covercast-recording", "version": 1, "protocol": 1, "created": "...Z", ...}
    {"t": 0.0, "dir": "send", "msg": {"type": "hello", "protocol": 1, "client": "vtt"}}
    {"t": 0.004, "dir": "recv", "msg": {"type": "welcome", ...}}

`t` is seconds since the connection opened; `send` is client to server, `recv` server to
client; `frame` is "text" for a JSON text frame (default: a binary msgpack frame); a frame
that was no decodable message keeps its bytes in `raw` (text) or `b64` (binary) instead of
`msg`.
"""

from __future__ import annotations

import base64
import datetime
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Annotated, Any, Literal, TypeVar

import msgpack
import msgspec
from msgspec import Meta, Struct

from server.messages import PROTOCOL_VERSION, schema_error, short_repr

FORMAT = "covercast-recording"
FORMAT_VERSION = 1

Direction = Literal["send", "recv"]
T = TypeVar("T")


class RecordingError(Exception):
    """A recording file that cannot be replayed: `line` (1-based, 0 for the whole file)
    and what is wrong with it."""

    def __init__(self, path: str, line: int, problem: str) -> None:
        where = f"{path}: line {line}" if line else path
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.line = line
        self.problem = problem


class Header(Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """First line: what this file is, and which protocol the session spoke."""

    format: str
    version: int
    protocol: int
    created: str
    source: str = ""
    note: str = ""


class Entry(Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One WebSocket message of the session, in either direction."""

    t: Annotated[float, Meta(ge=0, le=1e7)]
    dir: Direction
    msg: dict[str, Any] | None = None
    frame: Literal["binary", "text"] = "binary"
    raw: str | None = None
    b64: str | None = None

    def to_frame(self) -> bytes | str:
        """The WebSocket frame to send for this entry, in its recorded encoding."""
        if self.msg is not None:
            if self.frame == "text":
                return json.dumps(self.msg)
            data: bytes = msgpack.packb(self.msg)
            return data
        if self.raw is not None:
            return self.raw
        assert self.b64 is not None
        return base64.b64decode(self.b64)


@dataclass(frozen=True, slots=True)
class Recording:
    """A whole recorded session; `lines[k]` is the file line of `entries[k]`."""

    path: str
    header: Header
    entries: tuple[Entry, ...]
    lines: tuple[int, ...]

    @property
    def sends(self) -> list[Entry]:
        return [e for e in self.entries if e.dir == "send"]

    @property
    def duration(self) -> float:
        return self.entries[-1].t if self.entries else 0.0


def entry_from_frame(t: float, direction: Direction, frame: bytes | str) -> Entry:
    """The entry for a frame seen on the wire (undecodable frames are kept as bytes)."""
    t = round(t, 6)
    try:
        msg = json.loads(frame) if isinstance(frame, str) else msgpack.unpackb(frame, raw=False)
        if isinstance(msg, dict):
            json.dumps(msg, allow_nan=False)  # representable in the file as it is
            return Entry(t, direction, msg, "text" if isinstance(frame, str) else "binary")
    except (ValueError, TypeError, msgpack.UnpackException):
        pass
    if isinstance(frame, str):
        return Entry(t, direction, None, "text", raw=frame)
    return Entry(t, direction, None, b64=base64.b64encode(frame).decode())


class Writer:
    """Writes a recording line by line, flushed, so an interrupted session leaves a valid
    file up to its last message."""

    def __init__(self, out: IO[str], source: str, note: str = "") -> None:
        self.out = out
        self.start = time.monotonic()
        created = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        header = Header(FORMAT, FORMAT_VERSION, PROTOCOL_VERSION,
                        created.replace("+00:00", "Z"), source, note)
        self._line(msgspec.json.encode(header).decode())
        self.count = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def frame(self, direction: Direction, frame: bytes | str,
              t: float | None = None) -> Entry:
        """Record one frame as it went over the wire, now (or at `t`)."""
        entry = entry_from_frame(self.elapsed() if t is None else t, direction, frame)
        self.entry(entry)
        return entry

    def entry(self, entry: Entry) -> None:
        self._line(msgspec.json.encode(entry).decode())
        self.count += 1

    def _line(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()


def read(path: str | Path) -> Recording:
    """Read and validate a recording; RecordingError names the first bad line."""
    name = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise RecordingError(name, 0, f"cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise RecordingError(name, 0, f"not UTF-8 text ({exc.reason} at byte "
                                      f"{exc.start})") from None
    return parse(text, name)


def parse(text: str, name: str = "<recording>") -> Recording:
    lines = list(_lines(text))
    if not lines:
        raise RecordingError(name, 0, "empty file: expected a header line "
                                      f'{{"format": "{FORMAT}", ...}}')
    number, first = lines[0]
    header = _decode(name, number, first, Header, "header")
    if header.format != FORMAT:
        raise RecordingError(name, number, f"$.format: expected {FORMAT!r}, got "
                                           f"{short_repr(header.format)}")
    if header.version != FORMAT_VERSION:
        raise RecordingError(name, number, f"$.version: this covercast reads recording "
                                           f"format {FORMAT_VERSION}, got {header.version}")
    if header.protocol != PROTOCOL_VERSION:
        raise RecordingError(name, number, f"$.protocol: recorded with protocol "
                                           f"{header.protocol}; this covercast speaks "
                                           f"{PROTOCOL_VERSION}")
    entries: list[Entry] = []
    numbers: list[int] = []
    for number, line in lines[1:]:
        entry = _decode(name, number, line, Entry, "message")
        _check_entry(name, number, entry, entries[-1].t if entries else 0.0)
        entries.append(entry)
        numbers.append(number)
    return Recording(name, header, tuple(entries), tuple(numbers))


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield number, line


def _decode(name: str, number: int, line: str, kind: type[T], what: str) -> T:
    try:
        raw = json.loads(line)
    except ValueError as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        column = f" (column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise RecordingError(name, number, f"not valid JSON: {detail}{column}: "
                                           f"{short_repr(line, 60)}") from None
    if not isinstance(raw, dict):
        raise RecordingError(name, number, f"expected a JSON object (the {what}), got "
                                           f"{short_repr(raw)}")
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise RecordingError(name, number, schema_error(exc, raw).message) from None


def _check_entry(name: str, number: int, entry: Entry, previous: float) -> None:
    kept = [k for k in ("msg", "raw", "b64") if getattr(entry, k) is not None]
    if len(kept) != 1:
        raise RecordingError(name, number, "a message line needs exactly one of msg, raw, "
                                           f"b64; got {', '.join(kept) or 'none'}")
    if entry.msg is not None and not isinstance(entry.msg.get("type"), str):
        raise RecordingError(name, number, "$.msg.type: a message needs a string type, got "
                                           f"{short_repr(entry.msg.get('type'))}")
    if entry.raw is not None and entry.frame != "text":
        raise RecordingError(name, number, '$.raw: raw is for text frames ("frame": "text"); '
                                           "binary frames use b64")
    if entry.b64 is not None:
        try:
            base64.b64decode(entry.b64, validate=True)
        except ValueError:
            raise RecordingError(name, number, f"$.b64: not base64: "
                                               f"{short_repr(entry.b64)}") from None
    if entry.t < previous:
        raise RecordingError(name, number, f"$.t: {entry.t} is earlier than the line "
                                           f"before ({previous}); lines must be in time "
                                           "order")
