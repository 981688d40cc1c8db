"""The compact form of `annotations` frames: the same message without its repetition.

Rule of this module: pure encoding, sans I/O. It turns an `Annotations` message (the values
the session built) into the bytes of its compact form (docs/protocol.md section 12), which
a client decodes back into exactly the verbose message; it reads no scene, holds no state
between frames and never changes the values it is given. Every frame is self-contained:
the modifiers and flag names its annotations refer to are listed in the frame itself, so
frames can be shared between subscribers, coalesced and dropped like verbose ones, and a
client needs nothing from an earlier frame to read a later one.

In a 100-token scene's full set, 30,000 annotations carry a handful of distinct modifier
lists and flag maps (the session shares one object per distinct value): each distinct one
is turned into its indices once per frame, looked up by identity after that.
"""

from __future__ import annotations

from typing import Any

import msgspec

from rulesets.base import Flag
from server.messages import AnnotationOut, Annotations, ModifierOut, encode

#: Every flag name, sorted: the verbose `flags` map's keys, and what flag indices count in.
FLAG_NAMES: tuple[str, ...] = tuple(sorted(f.value for f in Flag))
_FLAG_INDEX = {name: k for k, name in enumerate(FLAG_NAMES)}
_FLAG_LIST = list(FLAG_NAMES)

_MSGPACK = msgspec.msgpack.Encoder()
_JSON = msgspec.json.Encoder()


def encode_annotations(message: Annotations, binary: bool, compact: bool) -> bytes | str:
    """The frame of an `annotations` message: verbose (server.messages.encode) or compact."""
    if not compact:
        return encode(message, binary)
    body = compact_message(message)
    if binary:
        return _MSGPACK.encode(body)
    return _JSON.encode(body).decode()


def compact_message(message: Annotations) -> dict[str, Any]:
    """The compact form of `message` as plain values (msgspec encodes it as is): the
    verbose fields, `form: "compact"`, the frame's `flags` and `modifiers` tables, and each
    annotation as an array referring to them."""
    modifiers: list[ModifierOut] = []
    # Per distinct modifier (by value) its index in `modifiers`; per modifier list and
    # flag map object of the message, its indices (objects are alive for the whole call,
    # so their ids are stable).
    mod_index: dict[tuple[Any, ...], int] = {}
    lists: dict[int, list[int]] = {}
    flag_sets: dict[int, list[int]] = {}

    def mod_refs(mods: list[ModifierOut]) -> list[int]:
        refs = []
        for m in mods:
            value = (m.stat, m.value, m.kind, m.reason, tuple(m.damage))
            k = mod_index.get(value)
            if k is None:
                k = mod_index[value] = len(modifiers)
                modifiers.append(m)
            refs.append(k)
        lists[id(mods)] = refs
        return refs

    def flag_refs(flags: dict[str, bool]) -> list[int]:
        if len(flags) != len(FLAG_NAMES) or not all(f in _FLAG_INDEX for f in flags):
            # The verbose map names every flag (session._flag_map): the decoder restores
            # the false ones from the frame's list, so a map that is not whole is a bug.
            raise ValueError(f"flags map without every flag: {sorted(flags)}")
        refs = sorted(_FLAG_INDEX[f] for f, on in flags.items() if on)
        flag_sets[id(flags)] = refs
        return refs

    rows: list[tuple[Any, ...]] = []
    append = rows.append
    get_mods, get_flags = lists.get, flag_sets.get
    for a in message.annotations:
        mods = get_mods(id(a.modifiers))
        if mods is None:
            mods = mod_refs(a.modifiers)
        flags = get_flags(id(a.flags))
        if flags is None:
            flags = flag_refs(a.flags)
        if a.flankers or a.lines is not None or a.visible is not None:
            append((a.attacker, a.target, a.mode, a.loe, a.cover, mods, flags, _extra(a)))
        else:
            append((a.attacker, a.target, a.mode, a.loe, a.cover, mods, flags))
    body: dict[str, Any] = {
        "type": "annotations", "scene": message.scene, "revision": message.revision,
        "full": message.full, "form": "compact", "flags": _FLAG_LIST,
        "modifiers": modifiers, "annotations": rows, "removed": message.removed,
    }
    if message.breath:
        body["breath"] = message.breath
    if message.id is not None:
        body["id"] = message.id
    return body


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
