"""Scene persistence: Scene values to the state store's rows, and back after a restart.

Rule of this module: it turns Scene values (server/scene.py) into the store's opaque texts
(server/store.py) and back, and does nothing else. The Core calls it after a change is
validated and before the new Scene is swapped in, so an acknowledged revision is always in
the store; when the store fails it raises StoreUnavailable and the Core keeps the scene as
it was. A change writes only the documents it touched (a move: one token's row) and the new
revision, in one transaction; a `scene.load` writes the whole scene (a large one is
written ahead, off the Core's thread, by `stage_load`, and the Core only makes it current);
a restored scene goes through the same validation as a `scene.load` and comes back at its
stored revision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from server import scene as scenes
from server.errors import ClientError
from server.messages import RegionDoc, SceneDoc, TokenDoc, WallDoc, normalize_ids, to_doc
from server.store import KINDS, Backstage, Store, StoreError

_ENCODE = msgspec.json.Encoder()
_DECODE: dict[str, msgspec.json.Decoder[Any]] = {
    "walls": msgspec.json.Decoder(list[WallDoc]),
    "tokens": msgspec.json.Decoder(list[TokenDoc]),
    "regions": msgspec.json.Decoder(list[RegionDoc]),
}


class _Head(msgspec.Struct, frozen=True):
    """What a scene holds besides its documents: the scene document itself (without walls,
    tokens and regions), its ruleset and its options."""

    scene: dict[str, Any]
    ruleset: str
    options: dict[str, Any]


_DECODE_HEAD = msgspec.json.Decoder(_Head)


def _text(doc: Any) -> str:
    return _ENCODE.encode(doc).decode()


def head(scene: scenes.Scene) -> str:
    return _text(_Head(to_doc(scene.doc), scene.ruleset.name,
                       msgspec.to_builtins(scene.options)))


def _docs(scene: scenes.Scene) -> dict[str, list[tuple[str, str]]]:
    return {kind: [(i, _text(d)) for i, d in getattr(scene, kind).items()] for kind in KINDS}


def stage_load(backstage: Backstage, scene: scenes.Scene) -> int:
    """Write a loaded scene's documents ahead of the Core, as a generation nobody reads
    until `save_load` is given it (StoreUnavailable: not written)."""
    return backstage.stage(scene.id, scene.revision, _docs(scene))


def save_load(store: Store, scene: scenes.Scene, previous: scenes.Scene | None,
              staged: int | None = None) -> None:
    """Store a scene a `scene.load` (or the demo's preload) installs, replacing `previous`
    (what this server held under its id, if anything); `staged`: its documents were
    written ahead as that generation (`stage_load`), so only the scene's row is written."""
    replaces = None if previous is None else previous.revision
    if staged is not None:
        store.put_staged(scene.id, scene.revision, head(scene), staged, replaces)
    else:
        store.put_scene(scene.id, scene.revision, head(scene), _docs(scene), replaces)


def _item_id(item: Any) -> str:
    """The id a batch item names: a new document's, a deleted id, an update's `id`/`_id`."""
    if isinstance(item, str):
        return item
    if isinstance(item, dict):
        return str(normalize_ids(item).get("id"))
    return str(item.id)


@dataclass(frozen=True, slots=True)
class Rows:
    """What a change writes: the documents it created or changed, (id, text) in batch
    order, and the ids it deleted."""

    kind: str
    put: list[tuple[str, str]]
    drop: list[str]


def change_rows(before: scenes.Scene, after: scenes.Scene, kind: str,
                items: Sequence[Any]) -> Rows:
    """The rows of the change from `before` to `after` (one revision on) that the batch
    `items` of `kind` documents made: only the documents the batch names are looked at
    (computed ahead of the Core for a large batch, server/ahead.py)."""
    old, new = getattr(before, kind), getattr(after, kind)
    put: list[tuple[str, str]] = []
    drop: list[str] = []
    for i in dict.fromkeys(map(_item_id, items)):
        doc = new.get(i)
        if doc is None:
            if i in old:
                drop.append(i)
        elif doc is not old.get(i):
            put.append((i, _text(doc)))
    return Rows(kind, put, drop)


def save_change(store: Store, after: scenes.Scene, rows: Rows) -> None:
    """Store a change's rows (`change_rows`) as revision `after.revision`."""
    store.put_change(after.id, after.revision, rows.kind, rows.put, rows.drop)


def restore(store: Store, sid: str) -> scenes.Scene:
    """A stored scene as it was at its last stored revision (StoreError: it cannot be read
    back, named with the reason)."""
    stored = store.read_scene(sid)
    if stored is None:
        raise StoreError(f"{store.path}: no stored scene {sid!r}")
    where = f"{store.path}: stored scene {sid!r}"
    try:
        top = _DECODE_HEAD.decode(stored.head)
        doc = msgspec.convert(top.scene, SceneDoc)
        # One decode per kind: the documents' texts joined into one JSON list.
        docs = {kind: _DECODE[kind].decode("[" + ",".join(stored.docs[kind]) + "]")
                for kind in KINDS}
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise StoreError(f"{where} is damaged: {exc}") from None
    if doc.id != sid:
        raise StoreError(f"{where} is damaged: its document's id is {doc.id!r}")
    doc = msgspec.structs.replace(doc, **docs)
    try:
        return scenes.load(doc, top.ruleset, top.options, None, revision=stored.revision)
    except ClientError as exc:
        raise StoreError(f"{where} is not a valid scene for this server "
                         f"({exc.message})") from None


def forget(store: Store, sid: str) -> None:
    """Remove a scene from the store for good (its documents and its tokens' air)."""
    store.delete_scene(sid)
