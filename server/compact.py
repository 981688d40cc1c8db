"""The frames of `annotations` messages: the compact form, the same message without its
repetition, and both forms encoded in steps for large full sets.

Rule of this module: pure encoding, sans I/O. It turns an `Annotations` message (the values
the session built) into the bytes of its verbose form or of its compact form
(docs/protocol.md section 12), in one call or chunk by chunk (`encoding_annotations`,
yielding between chunks for the server's worker; `encoding_annotation_parts` leaves a
large one in its parts, server/frames.py); a client decodes the compact form back
into exactly the verbose message; it reads no scene, holds no state
between frames and never changes the values it is given. Every frame is self-contained:
the modifiers and flag names its annotations refer to are listed in the frame itself, so
frames can be shared between subscribers, coalesced and dropped like verbose ones, and a
client needs nothing from an earlier frame to read a later one.

In a 100-token scene's full set, 30,000 annotations carry a handful of distinct modifier
lists and flag maps (the session shares one object per distinct value): each distinct one
is turned into its indices once per frame, looked up by identity after that.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import msgspec

from rulesets.base import Flag
from server.frames import Parts
from server.messages import AnnotationOut, Annotations, ModifierOut, encode

#: Every flag name, sorted: the verbose `flags` map's keys, and what flag indices count in.
FLAG_NAMES: tuple[str, ...] = tuple(sorted(f.value for f in Flag))
_FLAG_INDEX = {name: k for k, name in enumerate(FLAG_NAMES)}
_FLAG_LIST = list(FLAG_NAMES)

_MSGPACK = msgspec.msgpack.Encoder()
_JSON = msgspec.json.Encoder()


#: Annotations encoded per step of `encoding_annotations` (about 10 ms of the worker here; a
#: full set of 200 tokens is 119,400 annotations, 70 ms in one call of the encoder).
ENCODE_CHUNK = 16_384


def encode_annotations(message: Annotations, binary: bool, compact: bool) -> bytes | str:
    """The frame of an `annotations` message: verbose (server.messages.encode) or compact."""
    if not compact:
        return encode(message, binary)
    body = compact_message(message)
    if binary:
        return _MSGPACK.encode(body)
    return _JSON.encode(body).decode()


def encoding_annotations(message: Annotations, binary: bool, compact: bool,
                         chunk: int | None = None) -> Generator[None, None, bytes | str]:
    """`encode_annotations(message, binary, compact)` in steps: the very same bytes, its
    annotations encoded `chunk` at a time, yielding after each chunk, so that the full set
    of a large table holds the server's worker no longer than a slice of the table's
    computation does (server/tables.py). A message of at most `chunk` annotations is one
    step, without a yield. `chunk`: ENCODE_CHUNK by default."""
    frame = yield from encoding_annotation_parts(message, binary, compact, chunk)
    return frame.joined() if isinstance(frame, Parts) else frame


def encoding_annotation_parts(message: Annotations, binary: bool, compact: bool,
                              chunk: int | None = None
                              ) -> Generator[None, None, bytes | str | Parts]:
    """`encoding_annotations`, a message of more than `chunk` annotations left in its
    parts (server/frames.py): the server's edge writes them as one message's fragments,
    and nothing copies tens of MB into one buffer in one go."""
    chunk = ENCODE_CHUNK if chunk is None else chunk
    items = message.annotations
    if len(items) <= chunk:
        return encode_annotations(message, binary, compact)
    compactor = _Compactor() if compact else None
    parts: list[bytes] = []
    for k in range(0, len(items), chunk):
        some = items[k:k + chunk]
        rows: list[Any] = compactor.rows(some) if compactor is not None else some
        parts.append(_MSGPACK.encode(rows) if binary else _JSON.encode(rows))
        yield
    return _assembled(compactor.body(message, _ANNOTATIONS) if compactor is not None
                      else _verbose_body(message, _ANNOTATIONS), parts, len(items), chunk,
                      binary)


#: Where the annotations go in a body `_assembled` builds.
_ANNOTATIONS = msgspec.Raw(b"")


def _assembled(body: dict[str, Any], parts: list[bytes], total: int, chunk: int,
               binary: bool) -> Parts:
    """The frame of `body` in parts, its "annotations" entry the array of every item of
    `parts` (each an array of its own, of `chunk` items, the last of the rest): each key
    and value encoded on its own, the parts of the annotations taken as they are (without
    their own brackets or header), nothing copied."""
    encode = _MSGPACK.encode if binary else _JSON.encode
    pieces: list[bytes | memoryview] = [_map_header(len(body)) if binary else b"{"]
    for key, value in body.items():
        pieces.append(encode(key))
        if binary:
            if value is _ANNOTATIONS:
                # The array of every part's items: each part without its own header.
                pieces.append(_msgpack_array_header(total))
                pieces += (memoryview(p)[len(_msgpack_array_header(n)):]
                           for p, n in zip(parts, _chunk_sizes(total, chunk), strict=True))
            else:
                pieces.append(encode(value))
        else:
            pieces.append(b":")
            if value is _ANNOTATIONS:
                pieces.append(b"[")
                for k, p in enumerate(parts):
                    pieces += (b"," if k else b"", memoryview(p)[1:-1])
                pieces.append(b"]")
            else:
                pieces.append(encode(value))
            pieces.append(b",")
    if not binary:
        pieces[-1] = b"}"  # in place of the last entry's comma
    return Parts.of(pieces, text=not binary)


def _chunk_sizes(total: int, chunk: int) -> list[int]:
    return [min(chunk, total - k) for k in range(0, total, chunk)]


def _map_header(n: int) -> bytes:
    """The bytes msgpack starts a map of n entries with (fixmap, map 16)."""
    if n < 16:
        return bytes((0x80 | n,))
    return b"\xde" + n.to_bytes(2, "big")


def _msgpack_array_header(n: int) -> bytes:
    """The bytes msgpack starts an array of n items with (fixarray, array 16, array 32)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


def _verbose_body(message: Annotations, annotations: msgspec.Raw) -> dict[str, Any]:
    """The verbose message as a map, its fields in the order (and with the defaults left
    out) the Struct is encoded in, its annotations already encoded."""
    body: dict[str, Any] = {
        "type": "annotations", "scene": message.scene, "revision": message.revision,
        "full": message.full, "annotations": annotations, "removed": message.removed,
    }
    return _with_tail(body, message)


def _with_tail(body: dict[str, Any], message: Annotations) -> dict[str, Any]:
    """`body` with the message's last fields, where they are not their defaults (left out,
    as the Struct leaves them out)."""
    if message.breath:
        body["breath"] = message.breath
    if message.id is not None:
        body["id"] = message.id
    return body


def compact_message(message: Annotations) -> dict[str, Any]:
    """The compact form of `message` as plain values (msgspec encodes it as is): the
    verbose fields, `form: "compact"`, the frame's `flags` and `modifiers` tables, and each
    annotation as an array referring to them."""
    compactor = _Compactor()
    return compactor.body(message, compactor.rows(message.annotations))


class _Compactor:
    """One compact frame's tables, built as its annotations are turned into rows (in one
    call, or chunk by chunk: `encoding_annotations`).

    Per distinct modifier (by value) its index in `modifiers`; per modifier list and flag
    map object of the message, its indices (the message keeps its objects alive while its
    frame is built, so their ids are stable)."""

    def __init__(self) -> None:
        self.modifiers: list[ModifierOut] = []
        self._mod_index: dict[tuple[Any, ...], int] = {}
        self._lists: dict[int, list[int]] = {}
        self._flag_sets: dict[int, list[int]] = {}

    def _mod_refs(self, mods: list[ModifierOut]) -> list[int]:
        refs = []
        for m in mods:
            value = (m.stat, m.value, m.kind, m.reason, tuple(m.damage))
            k = self._mod_index.get(value)
            if k is None:
                k = self._mod_index[value] = len(self.modifiers)
                self.modifiers.append(m)
            refs.append(k)
        self._lists[id(mods)] = refs
        return refs

    def _flag_refs(self, flags: dict[str, bool]) -> list[int]:
        if len(flags) != len(FLAG_NAMES) or not all(f in _FLAG_INDEX for f in flags):
            # The verbose map names every flag (session._flag_map): the decoder restores
            # the false ones from the frame's list, so a map that is not whole is a bug.
            raise ValueError(f"flags map without every flag: {sorted(flags)}")
        refs = sorted(_FLAG_INDEX[f] for f, on in flags.items() if on)
        self._flag_sets[id(flags)] = refs
        return refs

    def rows(self, annotations: Sequence[AnnotationOut]) -> list[tuple[Any, ...]]:
        """These annotations as compact rows, their modifiers and flags by reference."""
        rows: list[tuple[Any, ...]] = []
        append = rows.append
        get_mods, get_flags = self._lists.get, self._flag_sets.get
        for a in annotations:
            mods = get_mods(id(a.modifiers))
            if mods is None:
                mods = self._mod_refs(a.modifiers)
            flags = get_flags(id(a.flags))
            if flags is None:
                flags = self._flag_refs(a.flags)
            if a.flankers or a.lines is not None or a.visible is not None:
                append((a.attacker, a.target, a.mode, a.loe, a.cover, mods, flags, _extra(a)))
            else:
                append((a.attacker, a.target, a.mode, a.loe, a.cover, mods, flags))
        return rows

    def body(self, message: Annotations, rows: Any) -> dict[str, Any]:
        """The compact message around these rows (every annotation's, in order)."""
        body: dict[str, Any] = {
            "type": "annotations", "scene": message.scene, "revision": message.revision,
            "full": message.full, "form": "compact", "flags": _FLAG_LIST,
            "modifiers": self.modifiers, "annotations": rows, "removed": message.removed,
        }
        return _with_tail(body, message)


def _extra(a: AnnotationOut) -> dict[str, Any]:
    """An annotation's optional fields present, under their verbose names."""
    out: dict[str, Any] = {}
    if a.flankers:
        out["flankers"] = a.flankers
    if a.lines is not None:
        out["lines"] = a.lines
    if a.visible is not None:
        out["visible"] = a.visible
    return out
