"""A seeded mutation fuzzer over the protocol's real messages, shared by the fuzz tests
(tests/test_fuzz.py, bounded, in every test run) and the long run (tests/fuzz_long.py,
`make fuzz`).

The corpus is one valid message of every request type (section 3 of docs/protocol.md),
aimed at a worker's own scenes: a square pf2 scene with walls of every kind, tokens with
Covercast flags, regions in both forms (water, fog, cover), and a realms hex scene for
friendly fire. A mutation takes one of them and does what a hostile or broken client does:
puts a hostile value somewhere (a lone surrogate, an integer past 64 bits, a float at the
edge, a wrong type, deep nesting, a long string), drops, adds or renames fields, swaps the
type, grows a batch to the limit and past it, then encodes it as JSON or msgpack, and
sometimes damages the bytes themselves (flipped, cut, spliced). Everything is drawn from
one random.Random, so a seed replays a run frame for frame.

The oracle, `check_outputs`, is the same everywhere: no exception out of the server, no
`internal` error, no 1011 close, every frame decodable; and (checked by the caller) a
refused request leaves every scene as it was.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack

MAX_BATCH = 5000
MAX_FRAME = 4 * 1024 * 1024

# -- the corpus: real messages ---------------------------------------------------------------


def square_scene(sid: str) -> dict[str, Any]:
    """A 10x8 square scene with a wall of every kind, a door of every state, Wall Height,
    tokens with Covercast flags (a mount and its rider, a hidden one, a swimmer), a
    Covercast cover region, a Foundry fog region and a lake."""
    return {
        "_id": sid, "name": "fuzz arena", "width": 1000, "height": 800,
        "grid": {"type": 1, "size": 100, "distance": 5, "units": "ft"},
        "walls": [
            {"_id": "w0", "c": [300, 0, 300, 300]},
            {"_id": "w1", "c": [500, 200, 700, 200], "flags": {"covercast": {"cover": "low"}}},
            {"_id": "w2", "c": [0, 400, 200, 400], "door": 1, "ds": 0},
            {"_id": "w3", "c": [200, 400, 300, 400], "door": 2, "ds": 1},
            {"_id": "w4", "c": [600, 500, 600, 700], "dir": 1, "sight": 10},
            {"_id": "w5", "c": [700, 0, 700, 100],
             "flags": {"wall-height": {"top": 5, "bottom": 0}}},
            {"_id": "w6", "c": [800, 300, 900, 300], "flags": {"covercast": {"cover": "improved"}}},
        ],
        "tokens": [
            {"_id": "a", "name": "Archer", "x": 0, "y": 0, "disposition": 1,
             "flags": {"covercast": {"con": 2, "fortitude": 5}}},
            {"_id": "b", "name": "Brute", "x": 500, "y": 0, "disposition": -1,
             "width": 2, "height": 2, "size": "large"},
            {"_id": "c", "name": "Cleric", "x": 100, "y": 500, "disposition": 1,
             "elevation": 10, "flags": {"wall-height": {"tokenHeight": 6}}},
            {"_id": "d", "name": "Diver", "x": 100, "y": 700, "disposition": 0,
             "flags": {"covercast": {"swim": True}}},
            {"_id": "h", "name": "Hidden", "x": 400, "y": 400, "disposition": -1,
             "hidden": True, "reach": 10},
            {"_id": "r", "name": "Rider \U0001F40E", "x": 500, "y": 0, "disposition": -1,
             "flags": {"covercast": {"mount": "b", "takeCover": True}}},
        ],
        "regions": [
            {"id": "rubble", "kind": "cover", "points": [400, 600, 500, 600, 500, 700, 400, 700]},
            {"_id": "fog", "name": "Fog", "shapes": [
                {"type": "rectangle", "x": 700, "y": 600, "width": 200, "height": 100}],
             "flags": {"covercast": {"kind": "obscuring", "penalty": 2}}},
            {"id": "lake", "kind": "water", "surface": 5,
             "points": [0, 600, 300, 600, 300, 800, 0, 800]},
            {"_id": "pillar", "shapes": [{"type": "circle", "x": 850, "y": 450, "radius": 40}],
             "flags": {"covercast": {"kind": "blocking"}}},
        ],
    }


def hex_scene(sid: str) -> dict[str, Any]:
    """Enchanted Realms' friendly-fire field on hex rows: an archer, a bandit behind a wall
    and an ally behind the bandit, fog between."""
    return {"_id": sid, "grid": {"type": 2, "size": 100, "distance": 5},
            "walls": [{"_id": "w", "c": [540, 0, 540, 120]}],
            "regions": [{"id": "fog", "kind": "obscuring", "penalty": 3,
                         "points": [250, 0, 350, 0, 350, 120, 250, 120]}],
            "tokens": [{"_id": "a", "x": 50, "y": 0, "disposition": 1},
                       {"_id": "b", "x": 550, "y": 0, "disposition": -1},
                       {"_id": "c", "x": 650, "y": 0, "disposition": 1}]}


def load_square(sid: str, rid: Any = None) -> dict[str, Any]:
    msg = {"type": "scene.load", "scene": square_scene(sid), "ruleset": "pf2",
           "options": {"lowWalls": "lesser"}}
    return msg if rid is None else {**msg, "id": rid}


def load_hex(sid: str, rid: Any = None) -> dict[str, Any]:
    msg = {"type": "scene.load", "scene": hex_scene(sid), "ruleset": "realms",
           "options": {"obscuredPenalty": 2, "vicinityFt": 10, "lowCoverNearAttacker": False}}
    return msg if rid is None else {**msg, "id": rid}


def corpus(sq: str, hx: str) -> list[dict[str, Any]]:
    """One or more valid messages of every request type but hello, on scenes `sq` (square,
    pf2) and `hx` (hex, realms)."""
    return [
        load_square(sq, 1),
        {"type": "scene.load", "scene": square_scene(sq), "ruleset": "dnd35",
         "options": {"softCoverVsReach": True, "lowObstacleRangeFrom": "target"}, "id": 2},
        load_hex(hx, "h"),
        {"type": "token.create", "scene": sq, "id": 3, "tokens": [
            {"_id": "n1", "x": 800, "y": 100, "disposition": -1, "name": "Newt",
             "texture": {"src": "newt.png"}, "sort": 3, "_stats": {"modifiedTime": 1.7e12}},
            {"_id": "n2", "x": 900, "y": 700, "width": 0.5, "height": 0.5}]},
        {"type": "token.update", "scene": sq, "id": "u", "tokens": [
            {"_id": "a", "x": 100, "y": 100},
            {"_id": "c", "elevation": 0, "flags": {"covercast": {"cover": "lesser"}}},
            {"_id": "r", "flags": {"covercast": {"-=mount": None}}}]},
        {"type": "token.update", "scene": sq, "tokens": [{"_id": "h", "hidden": False}]},
        {"type": "token.delete", "scene": sq, "ids": ["d"], "id": 4},
        {"type": "wall.create", "scene": sq, "id": 5, "walls": [
            {"_id": "x1", "c": [100, 100, 200, 150], "move": 0, "sight": 20,
             "light": 20, "sound": 20}]},
        {"type": "wall.update", "scene": sq, "id": 6, "walls": [
            {"_id": "w2", "ds": 1}, {"_id": "w0", "c": [300, 0, 300, 250]}]},
        {"type": "wall.delete", "scene": sq, "ids": ["w4", "w6"], "id": 7},
        {"type": "cover.query", "scene": sq, "attacker": "a", "target": "b", "id": 8},
        {"type": "cover.query", "scene": sq, "attacker": "c", "target": "b", "attack": "melee",
         "lines": True, "origin": {"x": 150, "y": 550}, "id": 9},
        {"type": "cover.query", "scene": hx, "attacker": "a", "target": "b", "attack": "reach"},
        {"type": "area.query", "scene": sq, "id": 10, "template": {
            "t": "circle", "x": 500, "y": 300, "distance": 15, "elevation": 0}},
        {"type": "area.query", "scene": sq, "template": {
            "t": "cone", "x": 0, "y": 0, "distance": 30, "direction": 45, "angle": 90,
            "user": "u", "flags": {}}},
        {"type": "area.query", "scene": sq, "template": {
            "t": "ray", "x": 0, "y": 50, "distance": 60, "direction": 0, "width": 5}},
        {"type": "area.query", "scene": hx, "template": {
            "t": "rect", "x": 0, "y": 0, "distance": 20, "direction": 30}},
        {"type": "scene.get", "scene": sq, "id": 11},
        {"type": "subscribe", "scene": sq, "modes": ["melee", "ranged"], "id": 12},
        {"type": "subscribe", "scene": hx, "lines": True, "id": 13},
        {"type": "unsubscribe", "scene": sq, "id": 14},
        {"type": "unsubscribe", "scene": hx},
        {"type": "turn.end", "scene": sq, "token": "d", "breathing": False, "attacked": True,
         "castSpell": True, "spoke": False, "criticalHits": 1, "critFailedDamageSaves": 0,
         "con": 1, "fortitude": 3, "hp": 20, "rolls": {"d20": 12, "d10": [3]}, "id": 15},
        {"type": "turn.end", "scene": sq, "token": "a", "seed": 12345},
        {"type": "breath.get", "scene": sq, "token": "d", "id": 16},
        {"type": "breath.get", "scene": sq},
        {"type": "friendlyfire.resolve", "scene": hx, "attacker": "a", "bonus": 4,
         "defense": {"b": 14, "c": 12},
         "attacks": [{"target": "b", "dice": [17, 6], "d10": 4}], "id": 17},
        {"type": "friendlyfire.resolve", "scene": hx, "attacker": "a", "seed": 99,
         "defense": {"b": 14, "c": 12}, "attacks": [{"target": "b", "count": 3},
                                                    {"target": "c", "count": 1}]},
        {"type": "scene.unload", "scene": hx, "id": 18},
    ]


def hello(token: str | None = None, role: str | None = None, rid: Any = "hi") -> dict[str, Any]:
    msg: dict[str, Any] = {"type": "hello", "protocol": 1, "client": "fuzz", "id": rid}
    if token is not None:
        msg["token"] = token
    if role is not None:
        msg["role"] = role
    return msg


#: Message types that change a scene or the store (a viewer's are always forbidden).
WRITES = frozenset({"scene.load", "scene.unload", "token.create", "token.update",
                    "token.delete", "wall.create", "wall.update", "wall.delete", "turn.end"})
TYPES = ("hello", "scene.load", "token.create", "token.update", "token.delete", "wall.create",
         "wall.update", "wall.delete", "cover.query", "area.query", "scene.get", "subscribe",
         "unsubscribe", "scene.unload", "turn.end", "breath.get", "friendlyfire.resolve")

# -- hostile values ----------------------------------------------------------------------------

SURROGATE_TEXT = ("\ud800", "\udfff", "a\udc00b", "Gull \ud83d", "\ud83d\ud83d",
                  "\udc00\ud800", "x" * 10 + "\udbff")
HUGE_INTS = (2 ** 63, 2 ** 64 - 1, 2 ** 64, -(2 ** 63) - 1, 10 ** 30, -(10 ** 30), 2 ** 53,
             2 ** 53 + 1, 2 ** 63 - 1, -(2 ** 63), 10 ** 100)
EDGE_FLOATS = (1e29, -1e29, 1e308, -1e308, 5e-324, -0.0, 1e7, 1e7 + 1, -1e7 - 0.5, 0.1,
               float("nan"), float("inf"), float("-inf"), 1e16)
PLAIN: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 3, 20, 21, 100, 101, 1000, 0.5, "", "x", "a", "b",
         "demo", "melee", "ranged", "reach", "circle", "gm", "player", "overlay", "ft",
         "low", "improved", "half", "standard", "lesser", "water", "fog", [], {}, [1, 2],
         {"x": 1}, "-=mount", "_id", "id", "\U0001F600", "é", "\u0000", "\u202e", "\ufeff")


def deep(depth: int, leaf: Any = 0) -> Any:
    """A value nested `depth` levels (lists and maps alternating)."""
    v = leaf
    for k in range(depth):
        v = [v] if k % 2 else {"d": v}
    return v


@dataclass
class Mutator:
    """Hostile frames drawn from `rng`, on the worker's scenes `sq` and `hx`."""

    rng: random.Random
    sq: str = "fz-sq"
    hx: str = "fz-hx"
    #: Heavy mutations (batches past a thousand items) at most this often (fraction).
    heavy: float = 0.002
    messages: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.messages = corpus(self.sq, self.hx)
        self.ids = ("a", "b", "c", "d", "h", "r", "n1", "w0", "w1", "w2", "w3", "fog",
                    "lake", self.sq, self.hx)

    def value(self) -> Any:
        """A hostile value of some kind (a fresh object: never shared, so never a cycle)."""
        return copy.deepcopy(self._value())

    def _value(self) -> Any:
        r = self.rng
        kind = r.random()
        if kind < 0.25:
            return r.choice(SURROGATE_TEXT)
        if kind < 0.40:
            return r.choice(HUGE_INTS)
        if kind < 0.55:
            return r.choice(EDGE_FLOATS)
        if kind < 0.85:
            return r.choice(PLAIN + self.ids)
        if kind < 0.90:
            return deep(r.choice((5, 30, 31, 32, 33, 40, 200)))
        if kind < 0.95:
            return "x" * r.choice((255, 256, 257, 1025, 5000))
        return [r.choice(PLAIN) for _ in range(r.randint(0, 8))]

    def key(self) -> str:
        r = self.rng
        return r.choice(("id", "_id", "type", "scene", "x", "y", "tokens", "walls", "flags",
                         "covercast", "wall-height", "c", "bogus", "__proto__", "-=x",
                         "a.b", "a[0]", "`", "", "\ud800", "k\udc00", "é", "1"))

    def message(self) -> dict[str, Any]:
        return copy.deepcopy(self.rng.choice(self.messages))

    def paths(self, obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
        """Every path to a value inside `obj` (maps and lists)."""
        yield prefix
        if isinstance(obj, dict):
            for k, v in obj.items():
                yield from self.paths(v, (*prefix, k))
        elif isinstance(obj, list):
            for k, v in enumerate(obj):
                yield from self.paths(v, (*prefix, k))

    @staticmethod
    def _get(obj: Any, path: tuple[Any, ...]) -> Any:
        for p in path:
            obj = obj[p]
        return obj

    def mutate(self, msg: dict[str, Any]) -> Any:
        """One to three mutations of a message (a copy)."""
        r = self.rng
        obj: Any = msg
        if r.random() < self.heavy:
            self._huge_batch(obj)
            return obj
        for _ in range(r.choice((1, 1, 1, 2, 3))):
            obj = self._mutate_once(obj)
        return obj

    def _mutate_once(self, obj: Any) -> Any:
        r = self.rng
        if not isinstance(obj, dict | list):
            return self.value() if r.random() < 0.5 else obj
        paths = list(self.paths(obj))
        path = r.choice(paths)
        target = self._get(obj, path)
        op = r.random()
        if op < 0.40 and path:
            # Replace a value.
            self._get(obj, path[:-1])[path[-1]] = self.value()
        elif op < 0.50 and isinstance(target, dict):
            target[self.key()] = self.value()  # an unknown (or duplicate) field
        elif op < 0.58 and isinstance(target, dict) and target:
            del target[r.choice(list(target))]  # a missing field
        elif op < 0.64 and isinstance(target, dict) and target:
            k = r.choice(list(target))  # a field under another name
            target[self.key()] = target.pop(k)
        elif op < 0.70 and isinstance(obj, dict):
            obj["type"] = r.choice((*TYPES, "token.move", "", "HELLO"))  # another type
        elif op < 0.76 and isinstance(target, list) and target:
            # Duplicate items (duplicate ids in a batch), or empty the list.
            if r.random() < 0.3:
                target.clear()
            else:
                target.extend(copy.deepcopy(r.choice(target)) for _ in range(r.randint(1, 4)))
        elif op < 0.80 and path and isinstance(target, str | int | float):
            # A near miss: the value's type changed, same meaning.
            if isinstance(target, bool):
                new: Any = int(target)
            elif isinstance(target, int):
                new = r.choice((float(target), str(target), -target, target + 1, [target]))
            elif isinstance(target, float):
                new = r.choice((int(target) if math.isfinite(target) else 0, str(target),
                                -target, target * 1e6))
            else:
                new = r.choice((target.upper(), target + "\ud800", target[:-1], 0, [target],
                                {"id": target}))
            self._get(obj, path[:-1])[path[-1]] = new
        elif path:
            # Nest the value deeper.
            self._get(obj, path[:-1])[path[-1]] = deep(r.choice((1, 3, 30, 33)), target)
        return obj

    def _huge_batch(self, obj: dict[str, Any]) -> None:
        """A batch at the limit or past it (5000 items, 5001, a long delete list)."""
        r = self.rng
        n = r.choice((1000, MAX_BATCH, MAX_BATCH + 1))
        kind = r.choice(("tokens", "walls", "ids"))
        if kind == "tokens":
            obj["tokens"] = [{"_id": f"t{k}", "x": (k % 100) * 10, "y": (k // 100) * 10}
                             for k in range(n)]
        elif kind == "walls":
            obj["walls"] = [{"_id": f"v{k}", "c": [k, 0, k, 10]} for k in range(n)]
        else:
            obj["ids"] = [f"t{k}" for k in range(n)]

    # -- frames ------------------------------------------------------------------------

    def frame(self, obj: Any) -> bytes | str:
        """The message as a JSON text frame or a msgpack binary frame, sometimes with its
        bytes damaged. A string with a lone surrogate goes as JSON (its escape), or as
        msgpack with the surrogate's CESU-8 bytes (not UTF-8: a bad frame)."""
        r = self.rng
        if r.random() < 0.5:
            text = json.dumps(obj)  # NaN and Infinity as JSON's extension spells them
            if r.random() < 0.05:
                return self._damage_text(text)
            return text
        try:
            data: bytes = msgpack.packb(obj)
        except (UnicodeEncodeError, OverflowError, ValueError):
            try:
                data = msgpack.packb(obj, unicode_errors="surrogatepass")
            except (OverflowError, ValueError):
                return json.dumps(obj)  # an integer msgpack cannot carry at all
        if r.random() < 0.05:
            return self._damage_bytes(data)
        return data

    def _damage_text(self, text: str) -> str:
        r = self.rng
        if not text:
            return "{"
        k = r.randrange(len(text))
        op = r.random()
        if op < 0.3:
            return text[:k]
        if op < 0.6:
            return text[:k] + r.choice(("\\ud800", "\\u0000", '"', "{", "]", "\\", "NaN",
                                        "1e999", "-", "\\uZZZZ", "\ud800")) + text[k:]
        return text[:k] + text[k + 1:]

    def _damage_bytes(self, data: bytes) -> bytes:
        r = self.rng
        b = bytearray(data)
        for _ in range(r.randint(1, 4)):
            if not b:
                break
            op = r.random()
            k = r.randrange(len(b))
            if op < 0.4:
                b[k] = r.randrange(256)
            elif op < 0.6:
                del b[k:]
            elif op < 0.8:
                b[k:k] = bytes(r.choice((b"\xc1", b"\xd4\x00\x00", b"\xc4\x01x", b"\xdd\xff\xff"
                                        b"\xff\xff", b"\xed\xa0\x80", b"\xcf" + b"\xff" * 8)))
            else:
                del b[k]
        return bytes(b)

    def next_frame(self) -> tuple[bytes | str, str | None]:
        """A hostile frame and the type of the message it was made from."""
        r = self.rng
        if r.random() < 0.03:
            junk = r.choice((b"", b"\x00", b"\xc1", "", "null", "[]", "1", '"hello"',
                             "{}", '{"type": null}', b"\x91" * 10000 + b"\xc0",
                             "[" * 10000, '{"a":' * 1000 + "1" + "}" * 1000))
            return junk, None
        msg = self.message()
        kind = msg.get("type")
        return self.frame(self.mutate(msg) if r.random() < 0.95 else msg), kind


# -- the oracle ---------------------------------------------------------------------------------

def decode(frame: bytes | str) -> dict[str, Any]:
    out: dict[str, Any] = (json.loads(frame) if isinstance(frame, str)
                           else msgpack.unpackb(frame, raw=False))
    return out


@dataclass
class Tally:
    """What a fuzz run found."""

    frames: int = 0
    crashes: int = 0
    internal: int = 0
    closes_1011: int = 0
    state_changes: int = 0
    refused: int = 0
    accepted: int = 0
    viewer_writes_accepted: int = 0
    undecodable: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, what: str, frame: bytes | str) -> None:
        if len(self.examples) < 20:
            self.examples.append(f"{what}: {frame[:300]!r}")

    @property
    def bad(self) -> int:
        return (self.crashes + self.internal + self.closes_1011 + self.state_changes
                + self.viewer_writes_accepted + self.undecodable)

    def summary(self) -> dict[str, Any]:
        return {"frames": self.frames, "crashes": self.crashes, "internal": self.internal,
                "closes_1011": self.closes_1011, "state_changes_on_refused": self.state_changes,
                "viewer_writes_accepted": self.viewer_writes_accepted,
                "undecodable_replies": self.undecodable, "refused": self.refused,
                "accepted": self.accepted}


def finite(obj: Any) -> bool:
    """Whether a decoded reply holds only finite numbers (the server never sends NaN)."""
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(finite(v) for v in obj.values())
    if isinstance(obj, list):
        return all(finite(v) for v in obj)
    return True


def state_of(core: Any) -> tuple[Any, ...]:
    """Everything a request may change in a Core, cheaply comparable: the scene values
    (immutable, swapped on success: identity) and the store's rows (each token's air; the
    Core's air tables are a cache of them, filled on first read; each scene's revision and
    a digest of its documents' rows)."""
    scenes = tuple(sorted((sid, id(s)) for sid, s in core.scenes.items()))
    db = core.store._db
    rows = tuple(db.execute("SELECT scene, token, state FROM breath "
                            "ORDER BY scene, token").fetchall())
    stored = tuple(db.execute("SELECT scene, revision FROM scene ORDER BY scene").fetchall())
    docs = db.execute("SELECT count(*), total(seq), total(length(body)) FROM doc").fetchone()
    return scenes, rows, stored, docs


def store_agrees(core: Any) -> bool:
    """The store holds every scene of the Core at the Core's revision, and no other, with
    as many documents in its current generation as the scene holds."""
    db = core.store._db
    stored = dict(db.execute("SELECT scene, revision FROM scene").fetchall())
    docs = dict(db.execute("SELECT d.scene, count(*) FROM doc d JOIN scene s ON "
                           "d.scene = s.scene AND d.gen = s.gen GROUP BY d.scene").fetchall())
    return stored == {sid: s.revision for sid, s in core.scenes.items()} and all(
        docs.get(sid, 0) == len(s.walls) + len(s.tokens) + len(s.regions)
        for sid, s in core.scenes.items())


class CoreFuzz:
    """The fuzzer against a sans-I/O Core: a gm connection, a player connection and, now
    and then, a fresh connection whose first frame is fuzzed (a hello or anything)."""

    GM, PLAYER = "fuzz-gm", "fuzz-player"

    def __init__(self, seed: int, heavy: float = 0.002, ahead: bool = False) -> None:
        """`ahead`: every frame of a greeted connection is read ahead first (`Core.ahead`,
        as the edge does for large frames) and handed to `receive` with it."""
        from server.session import Core
        from server.store import Store

        self.ahead = ahead
        #: Every reply frame, in order: two runs that behaved alike have the same digest.
        self.digest = hashlib.sha256()
        self.rng = random.Random(seed)
        self.mut = Mutator(self.rng, heavy=heavy)
        # A state file, as a server keeps by default (a ":memory:" store holds no scene):
        # every change is checked against what the file holds.
        folder = tempfile.mkdtemp(prefix="covercast-fuzz-")
        weakref.finalize(self, shutil.rmtree, folder, True)
        self.core = Core(access_token=self.GM, player_token=self.PLAYER,
                         store=Store(os.path.join(folder, "state.sqlite3")), seed=seed)
        self.tally = Tally()
        self.gm = self._greet(self.GM)
        self.player = self._greet(self.PLAYER)
        self.reset()

    def _greet(self, token: str) -> int:
        conn = self.core.connect()
        out = self.core.receive(conn, json.dumps(hello(token)))
        assert decode(out[0].frame)["type"] == "welcome", out  # type: ignore[union-attr, arg-type]
        return conn

    def reset(self) -> None:
        """The worker's two scenes as loaded at the start, others unloaded."""
        for sid in list(self.core.scenes):
            if sid not in (self.mut.sq, self.mut.hx):
                self.core.drain(self.core.receive(self.gm, json.dumps(
                    {"type": "scene.unload", "scene": sid})))
        for msg in (load_square(self.mut.sq), load_hex(self.mut.hx)):
            out = self.core.drain(self.core.receive(self.gm, json.dumps(msg)))
            assert decode(out[0].frame)["type"] == "ack", out  # type: ignore[union-attr]

    def send(self, conn: int, frame: bytes | str, viewer: bool = False) -> dict[str, Any] | None:
        """One frame through the Core, checked; the reply to it (None: closed or crashed)."""
        from server.session import Close, Send

        t = self.tally
        t.frames += 1
        before = state_of(self.core)
        try:
            read = self.core.ahead(conn, frame) if self.ahead else None
            out = self.core.drain(self.core.receive(conn, frame, read))
        except Exception as exc:  # anything out of the Core would close the socket 1011
            t.crashes += 1
            t.note(f"crash {type(exc).__name__}: {exc}", frame)
            return None
        first: dict[str, Any] | None = None
        for o in out:
            if isinstance(o, Close):
                if o.code == 1011:
                    t.closes_1011 += 1
                    t.note("1011", frame)
                continue
            assert isinstance(o, Send)
            self.digest.update(o.frame if isinstance(o.frame, bytes) else o.frame.encode(
                "utf-8", "surrogatepass"))
            try:
                msg = decode(o.frame)
            except Exception:
                t.undecodable += 1
                t.note("undecodable reply", frame)
                continue
            if msg.get("type") == "error" and msg.get("code") == "internal":
                t.internal += 1
                t.note("internal", frame)
            if o.conn == conn and first is None:
                first = msg
        refused = first is None or first.get("type") == "error"
        t.refused += refused
        t.accepted += not refused
        if (refused or viewer) and state_of(self.core) != before:
            t.state_changes += 1
            t.note("state changed by a refused request", frame)
        if not store_agrees(self.core):
            t.state_changes += 1
            t.note("the store and the scenes in memory disagree", frame)
        if viewer and not refused and first is not None and first.get("type") in (
                "ack", "breath") and "scene" in first and first.get("id") != "probe":
            kind = kind_of(frame)
            if kind in WRITES:
                t.viewer_writes_accepted += 1
                t.note("viewer write accepted", frame)
        return first

    def readers_work(self) -> None:
        """Every scene still answers scene.get, subscribe and area.query, in both
        encodings (nothing the fuzzer did poisoned one)."""
        for sid in list(self.core.scenes):
            for binary in (False, True):
                for msg in ({"type": "scene.get", "scene": sid, "id": "probe"},
                            {"type": "subscribe", "scene": sid, "id": "probe"},
                            {"type": "unsubscribe", "scene": sid, "id": "probe"},
                            {"type": "area.query", "scene": sid, "id": "probe",
                             "template": {"t": "circle", "x": 100, "y": 100, "distance": 10}}):
                    try:
                        data: bytes | str = msgpack.packb(msg) if binary else json.dumps(msg)
                    except UnicodeEncodeError:  # a scene id msgpack cannot carry (a bug)
                        data = json.dumps(msg)
                    got = self.send(self.gm, data)
                    if got is not None and got.get("type") == "error" and got.get(
                            "code") not in ("unknown_scene",):
                        self.tally.internal += got.get("code") == "internal"
                        if got.get("code") != "internal":
                            self.tally.note(f"reader refused: {got}", data)

    def run(self, frames: int) -> Tally:
        from server.session import Close

        r = self.rng
        for k in range(frames):
            frame, _ = self.mut.next_frame()
            pick = r.random()
            if pick < 0.70:
                self.send(self.gm, frame)
            elif pick < 0.90:
                self.send(self.player, frame, viewer=True)
            else:
                # A fresh connection: its first frame is a fuzzed hello or anything.
                conn = self.core.connect()
                first = self.mut.frame(self.mut.mutate(hello(self.GM))) if r.random() < 0.7 \
                    else frame
                self.tally.frames += 1
                try:
                    out = self.core.receive(conn, first)
                except Exception as exc:
                    self.tally.crashes += 1
                    self.tally.note(f"crash before hello {type(exc).__name__}: {exc}", first)
                    out = []
                for o in out:
                    if isinstance(o, Close) and o.code == 1011:
                        self.tally.closes_1011 += 1
                    elif not isinstance(o, Close):
                        try:
                            decode(o.frame)  # type: ignore[union-attr, arg-type]
                        except Exception:
                            self.tally.undecodable += 1
                self.core.disconnect(conn)
            if k % 200 == 199:
                self.readers_work()
            if k % 500 == 499:
                self.reset()
        self.readers_work()
        return self.tally


def kind_of(frame: bytes | str) -> Any:
    try:
        msg = decode(frame)
    except Exception:
        return None
    return type_of(msg)


def type_of(msg: Any) -> str | None:
    """A decoded message's type, when it is a string (a fuzzed type may be any value)."""
    kind = msg.get("type") if isinstance(msg, dict) else None
    return kind if isinstance(kind, str) else None
