"""Work done ahead of the worker: a large frame read, and the scene it changes built, on a
thread of its own.

Rule of this module: a function of one frame and the scene values that were current when
it was read; nothing here writes to the Core or keeps state. The one thing it may write is
a loaded scene's documents to the state store as a generation nobody reads (`stage`,
server/durable.py's `stage_load`), which only the Core makes current. The edge (server/app.py)
calls `Core.ahead` off the Core's thread for frames too large to read in a few
milliseconds (a 20,000-wall `scene.load`, a 5,000-wall `wall.update`), so the Core thread
goes on serving other scenes meanwhile (the interpreter lock is shared between the two
threads every few milliseconds instead of the Core thread being held for the whole read).
The Core then takes what was read as if it had read it itself, and the scene built ahead
only if the scene is still the value it was built from; otherwise it builds again from
the current one, so the order of changes is the Core's, never this thread's (a staged
generation it does not take is left to the store's sweep).
"""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from geometry import rooms
from geometry.trace import Tracer
from rulesets.base import AttackMode
from server import durable
from server import scene as scenes
from server.errors import ClientError
from server.giveway import giving_way
from server.messages import (
    Request,
    SceneLoad,
    TokenCreate,
    TokenDelete,
    TokenUpdate,
    WallCreate,
    WallDelete,
    WallUpdate,
    decode_frame,
    parse_request,
)
from server.store import StoreUnavailable

log = logging.getLogger("covercast.ahead")

#: Frames at least this large are read ahead (smaller ones take less than the trip).
AHEAD_BYTES = 16 * 1024

#: Each batch request: the function building the new scene, the kind of document, and
#: the request's field holding the batch.
BATCHES: dict[type, tuple[Callable[[scenes.Scene, str, Any], scenes.Scene], str, str]] = {
    TokenCreate: (scenes.create, "tokens", "tokens"),
    TokenUpdate: (scenes.update, "tokens", "tokens"),
    TokenDelete: (scenes.delete, "tokens", "ids"),
    WallCreate: (scenes.create, "walls", "walls"),
    WallUpdate: (scenes.update, "walls", "walls"),
    WallDelete: (scenes.delete, "walls", "ids"),
}


@dataclass(frozen=True, slots=True)
class Ahead:
    """One frame read ahead: the plain objects and the validated request (or the client's
    error), and, for a change, the scene it leads to from `base` (None: no scene was
    loaded under that id) or the error building it raised."""

    frame: bytes | str
    raw: Any = None
    request: Request | None = None
    error: ClientError | None = None
    built: bool = False
    base: scenes.Scene | None = None
    scene: scenes.Scene | None = None
    refused: ClientError | None = None
    #: A loaded scene's documents written to the store ahead: their generation.
    staged: int | None = None
    #: A batch change's rows for the store, made ahead (when the Core keeps scenes).
    rows: durable.Rows | None = None


def read(frame: bytes | str, viewer: bool, write_types: frozenset[str],
         current: Mapping[str, scenes.Scene],
         stage: Callable[[scenes.Scene], int] | None = None, rows: bool = False) -> Ahead:
    """`_read`, holding itself back for the Core thread (`_held_back`)."""
    with _held_back():
        return _read(frame, viewer, write_types, current, stage, rows)


@contextlib.contextmanager
def _held_back() -> Iterator[None]:
    """This thread gives way to the others while it reads a large frame.

    - The interpreter lock: server/giveway.py.
    - The garbage collector: reading a 20,000-wall load makes about a million objects, and
      the collector, counting them, ran collections of the young and of the whole unfrozen
      heap in the middle of it, each holding the lock. None runs meanwhile (the garbage
      already there is collected first), and what was made is frozen at the end. These
      objects are acyclic (decoded maps and lists, Structs, arrays), freed by their
      reference counts frozen or not; frozen, later collections do not walk them
      (server/app.py `settle_heap` freezes the survivors of heavy calls too)."""
    # What is garbage already goes first: a freeze keeps whatever is in the heap, cyclic
    # garbage too, until the next full collection (server/app.py `settle_heap`, at most
    # once a minute). Cheap: the collection walks only the objects not frozen yet.
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        with giving_way():
            yield
    finally:
        gc.freeze()
        if was:
            gc.enable()


def _read(frame: bytes | str, viewer: bool, write_types: frozenset[str],
         current: Mapping[str, scenes.Scene],
         stage: Callable[[scenes.Scene], int] | None = None, rows: bool = False) -> Ahead:
    """`frame` decoded and validated as the Core would for a greeted connection (a viewer's
    write refused first), and a change's new scene built from `current`'s value of its
    scene, with its geometry and the ruleset's per-scene arrays warmed; a loaded scene's
    documents written ahead by `stage` when it is given (its generation in `staged`), a
    batch change's rows for the store made with `rows`."""
    raw: Any = None
    try:
        raw = decode_frame(frame)
        if viewer:
            kind = raw.get("type") if isinstance(raw, dict) else None
            if isinstance(kind, str) and kind in write_types:
                return Ahead(frame, raw)  # the Core refuses it, with its own words
        request = parse_request(raw)
    except ClientError as exc:
        return Ahead(frame, raw, error=exc)
    if viewer:
        return Ahead(frame, raw, request)
    if isinstance(request, SceneLoad):
        base = current.get(request.scene.id)

        def build(s: scenes.Scene | None) -> scenes.Scene:
            return scenes.load(request.scene, request.ruleset, request.options, s)
    elif isinstance(request, TokenCreate | TokenUpdate | TokenDelete | WallCreate
                    | WallUpdate | WallDelete):
        maker, batch_kind, field_name = BATCHES[type(request)]
        items = getattr(request, field_name)
        found = current.get(request.scene)
        if found is None:
            return Ahead(frame, raw, request)  # the Core names the unknown scene
        base = found

        def build(s: scenes.Scene | None) -> scenes.Scene:
            assert s is not None
            return maker(s, batch_kind, items)
    else:
        return Ahead(frame, raw, request)
    try:
        scene = build(base)
    except ClientError as exc:
        return Ahead(frame, raw, request, built=True, base=base, refused=exc)
    except Exception:
        # The Core meets the same bug on its own build and reports it where it belongs.
        log.debug("building a change ahead failed", exc_info=True)
        return Ahead(frame, raw, request)
    _warm(scene)
    made = None
    if rows and base is not None and not isinstance(request, SceneLoad):
        made = durable.change_rows(base, scene, batch_kind, items)
    staged = None
    if stage is not None and isinstance(request, SceneLoad):
        try:
            staged = stage(scene)
        except StoreUnavailable:
            pass  # the Core writes it itself, and meets (and reports) the outage there
        except Exception:
            log.exception("bug while writing a loaded scene ahead")
    return Ahead(frame, raw, request, built=True, base=base, scene=scene, staged=staged,
                 rows=made)


def _warm(scene: scenes.Scene) -> None:
    """Build the scene's geometry and what its ruleset keeps per walls and per token
    position (wall arrays, token layouts), as the first request on it would: one pair.
    And the rooms of its walls (geometry.rooms), which the worker builds itself only for
    fewer walls (ROOMS_MAX_WALLS): here nothing waits on them."""
    try:
        geom = scene.geometry
        if len(geom.creatures) >= 2:
            a, b = geom.creatures[0].id, geom.creatures[1].id
            scene.ruleset.annotate(geom, scene.options, pairs=[(a, b)],
                                   modes=[AttackMode.RANGED])
            rooms.rooms(Tracer(geom), max_walls=rooms.ROOMS_MAX_WALLS_AHEAD)
            scene.ruleset.warm(geom, scene.options)
    except Exception:
        log.debug("warming a scene ahead failed", exc_info=True)

