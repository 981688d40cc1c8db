"""Scene ownership and changes: the scenes one Core holds, and every change to them.

Rule of this module: sans-I/O, and it knows nothing of connections or annotations. Each
scene is one immutable Scene value (server/scene.py); a change builds the next value (or
takes the one built ahead of the Core, server/ahead.py, if it was built from this very
value), lets the Core refuse it (`check`: a subscribed table past the limits), writes it
to the state store (server/durable.py) and only then installs it, so the scene held is
never ahead of what is stored; anything that fails before the install leaves the scene as
it was. What a change means for subscribers (the ack, their deltas) is the Core's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from server import ahead as ahead_reading
from server import durable
from server import scene as scenes
from server.errors import ClientError, ErrorCode, unavailable
from server.messages import LIMITS, SceneLoad
from server.store import Store, StoreUnavailable

log = logging.getLogger("covercast.changes")

#: What the Core checks of a new scene value before it is stored (raises ClientError).
Check = Callable[[scenes.Scene], None]


class SceneChanges:
    """The scenes of one Core (`scenes`: id -> current value), kept in `store` unless
    `keep` is False (NATS mode keeps them in JetStream, server/mesh.py; a ":memory:"
    store keeps nothing after the process, so scenes are not written to it at all)."""

    def __init__(self, store: Store, keep: bool = True) -> None:
        self.store = store
        self.keep = keep and store.path != ":memory:"
        self.scenes: dict[str, scenes.Scene] = {}
        # Large loads are written ahead of the Core's thread, on the ahead thread's
        # connection to the store.
        self._backstage = store.backstage() if self.keep else None
        # The frame being handled: what was built of it ahead, if anything, and the
        # store generation a load written ahead made current, if it did.
        self._built: ahead_reading.Ahead | None = None
        self._installed: int | None = None

    def get(self, sid: str) -> scenes.Scene:
        """The scene `sid` (ClientError `unknown_scene`, naming the loaded ones)."""
        try:
            return self.scenes[sid]
        except KeyError:
            known = ", ".join(sorted(self.scenes)) or "none"
            raise ClientError(ErrorCode.UNKNOWN_SCENE,
                              f"$.scene: no scene {sid!r} is loaded (loaded: {known})",
                              path="$.scene") from None

    def restore(self, ids: Iterable[str] | None = None) -> list[str]:
        """Bring back the stored scenes `ids` (None: every stored one) at their stored
        revisions, as they were when their last change was acknowledged; the ids brought
        back. StoreError names a scene that cannot be read back; ValueError, one held
        already."""
        wanted = self.store.scene_ids() if ids is None else list(ids)
        held = [sid for sid in wanted if sid in self.scenes]
        if held:  # tables and subscribers are of the scene held: not to be swapped here
            raise ValueError(f"scene(s) already loaded: {', '.join(map(repr, held))}")
        for sid in wanted:
            self.scenes[sid] = durable.restore(self.store, sid)
        if wanted:
            log.info("state store %s: %d scene(s) restored: %s", self.store.path,
                     len(wanted), ", ".join(f"{sid!r} at revision {self.scenes[sid].revision}"
                                            for sid in wanted))
        return wanted

    # -- the frame being handled -----------------------------------------------------

    def stager(self) -> Callable[[scenes.Scene], int] | None:
        """What writes a loaded scene's documents ahead (server/ahead.py), if scenes are
        stored in a file."""
        backstage = self._backstage
        if backstage is None:
            return None
        return lambda scene: durable.stage_load(backstage, scene)

    def sweep(self) -> None:
        """Off the Core's thread, on the ahead thread: the store's generations nobody reads
        any more (a replaced large load) deleted, a slice at a time."""
        if self._backstage is not None:
            self._backstage.sweep()

    def begin(self, ahead: ahead_reading.Ahead | None) -> None:
        """A frame is handled; `ahead` is what was built of it ahead, if anything."""
        self._built = ahead if ahead is not None and ahead.built else None
        self._installed = None

    def end(self, ahead: ahead_reading.Ahead | None) -> None:
        """The frame was handled: a load written ahead but not taken (the scene changed
        meanwhile, or the load was refused) is left to the store's sweep."""
        self._built = None
        if (ahead is not None and ahead.staged is not None and self._installed != ahead.staged
                and isinstance(ahead.request, SceneLoad)):
            self.store.abandon(ahead.request.scene.id, ahead.staged)

    def _built_from(self, base: scenes.Scene | None,
                    build: Callable[[], scenes.Scene]) -> tuple[scenes.Scene,
                                                                ahead_reading.Ahead | None]:
        """The changed scene: the one built ahead if it was built from `base`, this very
        value, else `build()`; an error met building it ahead is raised as building it now
        would. With it, what was built ahead if that is what it is."""
        built, self._built = self._built, None
        if built is None or built.base is not base:
            return build(), None
        if built.refused is not None:
            raise built.refused
        assert built.scene is not None
        return built.scene, built

    # -- changes ---------------------------------------------------------------------

    def load(self, request: SceneLoad, check: Check) -> scenes.Scene:
        """Install the scene a `scene.load` (or the demo's preload) describes, replacing
        the one held under its id, if any (ClientError: refused, nothing changed)."""
        sid = request.scene.id
        previous = self.scenes.get(sid)
        if previous is None and len(self.scenes) >= LIMITS.max_scenes:
            raise ClientError(ErrorCode.TOO_LARGE,
                              f"$.scene.id: the server holds {len(self.scenes)} scenes, the "
                              f"limit is {LIMITS.max_scenes}", path="$.scene.id")
        loaded, built = self._built_from(previous, lambda: scenes.load(
            request.scene, request.ruleset, request.options, previous))
        # Its documents were written ahead if the scene built ahead is the one loaded.
        staged = built.staged if built is not None else None
        check(loaded)
        try:  # stored before it is installed: an acknowledged revision is never lost
            if self.keep:
                durable.save_load(self.store, loaded, previous, staged)
                self._installed = staged
        except StoreUnavailable as exc:
            raise unavailable(exc, "the scene was not loaded") from None
        self.scenes[sid] = loaded
        return loaded

    def change(self, sid: str, build: Callable[[scenes.Scene], scenes.Scene],
               batch: tuple[str, Sequence[Any]], check: Check) -> scenes.Scene:
        """Apply a batch (`batch`: the kind of documents and the items it names) to scene
        `sid` (ClientError: refused, the scene as it was)."""
        current = self.get(sid)
        changed, built = self._built_from(current, lambda: build(current))
        check(changed)
        try:  # stored before the swap: the scene never runs ahead of what is durable
            if self.keep:
                rows = (built.rows if built is not None and built.rows is not None
                        else durable.change_rows(current, changed, *batch))
                durable.save_change(self.store, changed, rows)
        except StoreUnavailable as exc:
            raise unavailable(exc, "the change was not applied") from None
        self.scenes[sid] = changed
        return changed

    def unload(self, sid: str) -> scenes.Scene:
        """Forget a scene for good, the store too; the value it had (ClientError: it is
        not loaded, or the store cannot forget it and it stays loaded)."""
        scene = self.get(sid)
        try:
            if self.keep:
                durable.forget(self.store, sid)
        except StoreUnavailable as exc:
            raise unavailable(exc, "the scene stays loaded") from None
        del self.scenes[sid]
        return scene
