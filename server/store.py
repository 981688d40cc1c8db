"""The embedded store: state that must outlive a connection and the server process.

Rule of this module: plain synchronous sqlite3 (standard library), called only by the Core
(server/session.py) and its scene persistence (server/durable.py), which run on one thread
at a time; every write is one transaction, committed before the call returns. It holds
opaque JSON texts and knows nothing of their meaning:

- `breath`: each token's air (drowning and suffocating), by (scene id, token id);
- `scene`: each loaded scene's revision and head (its scene document without walls, tokens
  and regions, its ruleset and options), by scene id;
- `doc`: each wall, token and region document of a scene, by (scene, generation, kind,
  id), with the order it arrived in (`seq`), so a move writes one token's row, never the
  whole scene. The scene's row names its current generation; only that one is read back.
- `stage`: generations that are not (or no longer) current: a large `scene.load` being
  written ahead of the Core (`Backstage.stage`, on the thread that reads large frames:
  rows written a slice at a time, invisible until the Core makes the generation current in
  one short transaction, `put_staged`), and generations a load replaced or the Core gave
  up, deleted a slice at a time by `Backstage.sweep`.

The path comes from `covercast serve --state PATH`; ":memory:" keeps nothing after the
process ends. A file is opened in WAL mode. Scene writes follow `sync`: "normal" (the
default) commits to the WAL file, fsynced at checkpoints (a change survives the server
killed in any way; a power cut may lose the last ones, never the file's consistency; the
VTT, which holds the documents, sends its scenes again on reconnect); "full" fsyncs every
commit (a change survives a power cut). Each token's air, which only Covercast holds, is
fsynced at every write whatever `sync` says. Several processes may share one file (each
scene written by its owner only): writers wait for each other up to BUSY_TIMEOUT_MS, and
every scene write checks the revision it replaces, so one that another process advanced
meanwhile is refused rather than overwritten.

Only a file store has a backstage (a second connection): ":memory:" is one connection's
database, and the Core does not write scenes to it at all (nothing would read them back).

A store that cannot be written or read any more (disk full, the file made read-only or
replaced) raises StoreUnavailable with the reason in plain words; the operation did
nothing, and the next one tries again, so the store recovers by itself when space returns.
The outage is logged once when it starts (and when its reason changes) and once when it
ends, never once per request.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("covercast.store")

SCHEMA_VERSION = 3
#: How long a write waits for another process holding the file's write lock.
BUSY_TIMEOUT_MS = 2000
#: The document kinds a scene holds, in the order they are read back.
KINDS = ("walls", "tokens", "regions")
#: A document's `seq` is (revision << SEQ_BITS) + its place in its batch: documents created
#: later sort after earlier ones, and an update keeps its document's place.
SEQ_BITS = 20
#: Rows a backstage writes or deletes per transaction: the Core's own writes wait for the
#: file's write lock at most one slice (a few milliseconds).
SLICE_ROWS = 1000
#: A generation still marked as being staged this many seconds after it began was left by
#: a process that stopped mid-way: it is swept like a replaced one.
STAGE_ABANDONED_S = 600.0

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS breath (
        scene TEXT NOT NULL,
        token TEXT NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (scene, token)
    )""",
    """CREATE TABLE IF NOT EXISTS scene (
        scene TEXT PRIMARY KEY,
        revision INTEGER NOT NULL,
        head TEXT NOT NULL,
        gen INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE IF NOT EXISTS doc (
        scene TEXT NOT NULL,
        gen INTEGER NOT NULL,
        kind TEXT NOT NULL,
        id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (scene, gen, kind, id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS stage (
        scene TEXT NOT NULL,
        gen INTEGER NOT NULL,
        since REAL NOT NULL,
        stale INTEGER NOT NULL,
        PRIMARY KEY (scene, gen)
    )""",
)

#: Schema 2 to 3: scenes get a generation (0), their documents are keyed by it.
_FROM_2 = (
    "ALTER TABLE scene ADD COLUMN gen INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE doc RENAME TO doc2",
    _SCHEMA[2],
    "INSERT INTO doc (scene, gen, kind, id, seq, body) "
    "SELECT scene, 0, kind, id, seq, body FROM doc2",
    "DROP TABLE doc2",
)

_SYNC = {"full": "FULL", "normal": "NORMAL"}


class StoreError(Exception):
    """The state file cannot be used (not a Covercast store, newer schema, unreadable)."""


class StoreUnavailable(StoreError):
    """The store cannot be written (or read) now; `reason` says why in plain words (disk
    full, read-only). Nothing was done; a later call may succeed."""

    def __init__(self, action: str, reason: str) -> None:
        super().__init__(f"the state store cannot be {action}: {reason}")
        self.action = action
        self.reason = reason


class _Refused(Exception):
    """A write that must not happen, its reason in plain words: the scene's stored revision
    is not the one the write replaces (another process wrote it), or the state file is no
    longer at its path."""


@dataclass(frozen=True, slots=True)
class StoredScene:
    """One scene as stored: its revision, head, and each kind's document texts in order."""

    revision: int
    head: str
    docs: Mapping[str, Sequence[str]]


#: sqlite's primary result codes (the low byte of an extended code) in plain words.
_SQLITE_REASONS = {
    5: "the state file is locked by another process (SQLITE_BUSY)",
    6: "the state file is locked (SQLITE_LOCKED)",
    8: "the state file or its folder is read-only (SQLITE_READONLY)",
    10: "disk I/O error (SQLITE_IOERR)",
    11: "the state file is corrupt (SQLITE_CORRUPT)",
    13: "disk full (SQLITE_FULL)",
    14: "the state file cannot be opened: its folder is gone or not writable "
        "(SQLITE_CANTOPEN)",
    26: "the file is not an SQLite database (SQLITE_NOTADB)",
}


def sqlite_reason(exc: sqlite3.Error) -> str:
    """Why sqlite failed, in plain words (its own text when the code is not one above)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _SQLITE_REASONS:
        return _SQLITE_REASONS[code & 0xFF]
    return str(exc) or type(exc).__name__


def os_reason(exc: OSError) -> str:
    """Why the system refused, in plain words."""
    if exc.errno == errno.ENOSPC:
        return "disk full"
    if exc.errno == errno.EDQUOT:
        return "disk quota exceeded"
    if exc.errno in (errno.EROFS,):
        return "the file system is read-only"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied ({exc.filename or 'the state file'})"
    return exc.strerror or str(exc)


def _make_parent(path: Path) -> None:
    """Create the state file's folder; when a part of it is a file, say which."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (path.parent, *path.parent.parents)
                        if p.exists() and not p.is_dir()), path.parent)
        raise StoreError(f"{path}: cannot create the state store's folder {path.parent}: "
                         f"{blocker} is a file, not a folder (choose another --state path "
                         "or move that file)") from None
    except OSError as exc:
        raise StoreError(f"{path}: cannot create the state store's folder {path.parent}: "
                         f"{os_reason(exc)}") from None


class Store:
    """Scenes and per-token state kept across reconnects and restarts."""

    def __init__(self, path: str | Path = ":memory:", sync: str = "normal") -> None:
        self.path = str(path)
        if sync not in _SYNC:
            raise ValueError(f"sync: {sync!r} is not one of {', '.join(_SYNC)}")
        self.sync = sync
        #: The reason of the current outage (None: the last operation worked).
        self.outage: str | None = None
        if self.path != ":memory:":
            _make_parent(Path(self.path))
            if os.path.isdir(self.path):
                raise StoreError(f"{self.path}: is a folder; the state store is a file "
                                 "(give a file path to --state)")
        try:
            # The Core runs on one worker thread at a time, but not the one that built it.
            self._db = sqlite3.connect(self.path, check_same_thread=False,
                                       isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot use as a state store: "
                             f"{sqlite_reason(exc)}") from None
        try:
            self._open()
        except sqlite3.Error as exc:
            self._db.close()
            code = getattr(exc, "sqlite_errorcode", 0) or 0
            if code & 0xFF == 11:  # SQLITE_CORRUPT
                raise StoreError(self._damaged(str(exc))) from None
            raise StoreError(f"{self.path}: cannot use as a state store: "
                             f"{sqlite_reason(exc)}") from None
        except StoreError:
            self._db.close()
            raise
        #: The file opened (device, inode): a write checks it is still the one at the path.
        self._file = self._identity()
        self._backstage: Backstage | None = None

    def _identity(self) -> tuple[int, int] | None:
        if self.path == ":memory:":
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def _open(self) -> None:
        db = self._db
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: store schema {version} is newer than this "
                             f"server's ({SCHEMA_VERSION})")
        if self.path != ":memory:":
            # A torn or damaged file is refused here, at start-up, rather than found one
            # page at a time while serving.
            problems = [str(r[0]) for r in db.execute("PRAGMA quick_check(5)")]
            if problems != ["ok"]:
                raise StoreError(self._damaged("; ".join(problems)))
        if db.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
            # Incremental: an unloaded scene's pages can be given back to the file system.
            # Set before anything is written to a new file; a file that has tables already
            # (a version 1 store) takes it with one VACUUM.
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            if db.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]:
                db.execute("VACUUM")
        if self.path != ":memory:":
            db.execute("PRAGMA journal_mode = WAL")
        db.execute(f"PRAGMA synchronous = {_SYNC[self.sync]}")
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("PRAGMA user_version").fetchone()[0] == 2:
                for statement in _FROM_2:
                    db.execute(statement)
            for statement in _SCHEMA:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.rollback()
            raise

    def _damaged(self, detail: str) -> str:
        return (f"{self.path}: the state file is damaged (torn or corrupt): {detail}. "
                "Restore it from a backup, or move it away to start with an empty store")

    @contextlib.contextmanager
    def _guard(self, action: str) -> Iterator[None]:
        """Turn a failing sqlite call into StoreUnavailable, logging an outage once."""
        try:
            yield
        except sqlite3.Error as exc:
            reason = sqlite_reason(exc)
            if self._db.in_transaction:  # a failed COMMIT leaves it open
                with contextlib.suppress(sqlite3.Error):
                    self._db.rollback()
        except OSError as exc:
            reason = os_reason(exc)
        except _Refused as exc:
            reason = str(exc)
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.rollback()
        else:
            if self.outage is not None:
                log.warning("state store %s works again (after: %s)", self.path, self.outage)
                self.outage = None
            return
        if self.outage != reason:
            log.error("state store %s cannot be %s: %s; changes are refused with "
                      "'unavailable' until it can (logged once)", self.path, action, reason)
            self.outage = reason
        raise StoreUnavailable(action, reason) from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction: committed when the block ends, rolled back if it raises."""
        # In WAL mode sqlite keeps writing to a file moved or deleted under it, which no
        # restart would find: such a write is refused until the file is back.
        if self._file is not None and self._identity() != self._file:
            raise _Refused(f"the state file is no longer at {self.path} (moved or deleted "
                           "while the server runs)")
        # isolation_level=None: explicit BEGIN; IMMEDIATE takes the write lock first, so
        # two processes never both read, then both write.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._db.rollback()
            raise
        self._db.execute("COMMIT")

    @contextlib.contextmanager
    def _synced(self) -> Iterator[None]:
        """The transactions inside are fsynced at their commit, whatever `sync` says."""
        if self.sync == "full":
            yield
            return
        self._db.execute("PRAGMA synchronous = FULL")
        try:
            yield
        finally:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute(f"PRAGMA synchronous = {_SYNC[self.sync]}")

    # -- each token's air -------------------------------------------------------------------

    def get_breath(self, scene: str, token: str) -> str | None:
        with self._guard("read"):
            row = self._db.execute("SELECT state FROM breath WHERE scene = ? AND token = ?",
                                   (scene, token)).fetchone()
        return None if row is None else str(row[0])

    def scene_breath(self, scene: str) -> dict[str, str]:
        """Every stored state of a scene's tokens, by token id."""
        with self._guard("read"):
            rows = self._db.execute("SELECT token, state FROM breath WHERE scene = ? "
                                    "ORDER BY token", (scene,)).fetchall()
        return {str(t): str(s) for t, s in rows}

    def put_breath(self, scene: str, token: str, state: str) -> None:
        """Write one token's state, in its own transaction (StoreUnavailable: not written)."""
        with self._guard("written"), self._synced(), self._transaction() as db:
            db.execute("INSERT INTO breath (scene, token, state) VALUES (?, ?, ?) "
                       "ON CONFLICT (scene, token) DO UPDATE SET state = excluded.state",
                       (scene, token, state))

    # -- scenes -----------------------------------------------------------------------------

    def scene_ids(self) -> list[str]:
        """Every stored scene's id, in order."""
        try:
            rows = self._db.execute("SELECT scene FROM scene ORDER BY scene").fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read the stored scenes: "
                             f"{sqlite_reason(exc)}") from None
        return [str(r[0]) for r in rows]

    def read_scene(self, scene: str) -> StoredScene | None:
        """A stored scene (None: none under that id), read in one transaction so a writer
        in another process is seen wholly or not at all."""
        try:
            self._db.execute("BEGIN")
            try:
                row = self._db.execute("SELECT revision, head, gen FROM scene "
                                       "WHERE scene = ?", (scene,)).fetchone()
                rows = [] if row is None else self._db.execute(
                    "SELECT kind, body FROM doc WHERE scene = ? AND gen = ? "
                    "ORDER BY kind, seq", (scene, row[2])).fetchall()
            finally:
                self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot read stored scene {scene!r}: "
                             f"{sqlite_reason(exc)}") from None
        if row is None:
            return None
        docs: dict[str, list[str]] = {kind: [] for kind in KINDS}
        for kind, body in rows:
            if kind not in docs:
                raise StoreError(f"{self.path}: stored scene {scene!r} holds a document "
                                 f"of unknown kind {kind!r}")
            docs[kind].append(str(body))
        return StoredScene(int(row[0]), str(row[1]), docs)

    def put_scene(self, scene: str, revision: int, head: str,
                  docs: Mapping[str, Sequence[tuple[str, str]]],
                  replaces: int | None) -> None:
        """Store a whole scene (a `scene.load`), replacing what was stored under its id:
        `docs` holds each kind's (id, text) in order; `replaces` is the revision this
        process holds of it (None: a scene new to this process)."""
        with self._guard("written"), self._transaction() as db:
            if replaces is not None:
                self._check(db, scene, replaces)
            row = db.execute("SELECT gen FROM scene WHERE scene = ?", (scene,)).fetchone()
            gen = 0 if row is None else int(row[0])
            db.execute("DELETE FROM doc WHERE scene = ? AND gen = ?", (scene, gen))
            db.execute("INSERT INTO scene (scene, revision, head, gen) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT (scene) DO UPDATE SET revision = excluded.revision, "
                       "head = excluded.head", (scene, revision, head, gen))
            _insert_docs(db, scene, gen, revision, docs)

    def put_staged(self, scene: str, revision: int, head: str, gen: int,
                   replaces: int | None) -> None:
        """Make generation `gen`, which a backstage wrote ahead (`Backstage.stage`), the
        stored scene at `revision`: one short transaction whatever the scene's size; the
        generation it replaces is left to the sweep. Refused (StoreUnavailable, nothing
        done) when the stored scene is not at `replaces` or the generation is not whole."""
        with self._guard("written"), self._transaction() as db:
            if replaces is not None:
                self._check(db, scene, replaces)
            if db.execute("DELETE FROM stage WHERE scene = ? AND gen = ? AND stale = 0",
                          (scene, gen)).rowcount != 1:
                raise _Refused(f"scene {scene!r}: the generation written ahead is gone")
            row = db.execute("SELECT gen FROM scene WHERE scene = ?", (scene,)).fetchone()
            if row is not None:
                db.execute("INSERT OR REPLACE INTO stage (scene, gen, since, stale) "
                           "VALUES (?, ?, ?, 1)", (scene, int(row[0]), time.time()))
            db.execute("INSERT INTO scene (scene, revision, head, gen) VALUES (?, ?, ?, ?) "
                       "ON CONFLICT (scene) DO UPDATE SET revision = excluded.revision, "
                       "head = excluded.head, gen = excluded.gen",
                       (scene, revision, head, gen))

    def abandon(self, scene: str, gen: int) -> None:
        """A generation written ahead that will not be made current: left to the sweep.
        Best effort (a failure is logged; the sweep finds it by its age anyway)."""
        try:
            with self._transaction() as db:
                db.execute("UPDATE stage SET stale = 1 WHERE scene = ? AND gen = ?",
                           (scene, gen))
        except (sqlite3.Error, OSError, _Refused) as exc:
            log.warning("state store %s: a generation written ahead of scene %r is left "
                        "for the sweep: %s", self.path, scene, exc)

    def backstage(self) -> Backstage | None:
        """A second connection to the same file, for the thread that reads large frames
        (None for ":memory:", which is one connection's database); closed with the store."""
        if self.path == ":memory:":
            return None
        if self._backstage is None:
            self._backstage = Backstage(self)
        return self._backstage

    def put_change(self, scene: str, revision: int, kind: str,
                   put: Sequence[tuple[str, str]], drop: Sequence[str]) -> None:
        """Store one accepted change of a scene at `revision` (replacing revision - 1): the
        documents of `kind` it created or changed, (id, text) in batch order, and the ids
        it deleted; one transaction."""
        with self._guard("written"), self._transaction() as db:
            self._check(db, scene, revision - 1, revision)
            gen = int(db.execute("SELECT gen FROM scene WHERE scene = ?",
                                 (scene,)).fetchone()[0])
            if put:
                base = revision << SEQ_BITS
                # A changed document keeps its place (seq); a new one goes after the rest.
                db.executemany("INSERT INTO doc (scene, gen, kind, id, seq, body) "
                               "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (scene, gen, kind, id) "
                               "DO UPDATE SET body = excluded.body",
                               ((scene, gen, kind, i, base + k, body)
                                for k, (i, body) in enumerate(put)))
            if drop:
                db.executemany("DELETE FROM doc WHERE scene = ? AND gen = ? AND kind = ? "
                               "AND id = ?", ((scene, gen, kind, i) for i in drop))

    def delete_scene(self, scene: str) -> None:
        """Forget a scene for good (its documents and its tokens' air), then give the
        freed pages back to the file system."""
        with self._guard("written"), self._transaction() as db:
            db.execute("DELETE FROM doc WHERE scene = ?", (scene,))
            db.execute("DELETE FROM stage WHERE scene = ?", (scene,))
            db.execute("DELETE FROM scene WHERE scene = ?", (scene,))
            db.execute("DELETE FROM breath WHERE scene = ?", (scene,))
        self.compact()

    def compact(self) -> None:
        """Shrink the file to what it holds: free pages given back, the WAL folded into the
        file and truncated (what another process still reads stays; a later compaction
        takes it). A failure here loses nothing: it is logged and the file stays larger."""
        try:
            # executescript steps the pragma to its end (execute frees a single page).
            self._db.executescript("PRAGMA incremental_vacuum;")
            if self.path != ":memory:":
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        except sqlite3.Error as exc:
            log.warning("state store %s could not be compacted: %s", self.path,
                        sqlite_reason(exc))

    def _check(self, db: sqlite3.Connection, scene: str, replaces: int,
               revision: int | None = None) -> None:
        """The stored scene is at `replaces` (else another process wrote it: refused);
        with `revision`, it moves to it."""
        if revision is not None:
            done = db.execute("UPDATE scene SET revision = ? WHERE scene = ? AND "
                              "revision = ?", (revision, scene, replaces)).rowcount
            if done == 1:
                return
        row = db.execute("SELECT revision FROM scene WHERE scene = ?", (scene,)).fetchone()
        if row is None:
            raise _Refused(f"scene {scene!r} is no longer in the store (another process "
                            "unloaded it)")
        if int(row[0]) != replaces:
            raise _Refused(f"scene {scene!r} is at revision {row[0]} in the store, not "
                            f"{replaces} as this server holds it (another process wrote it)")

    def close(self) -> None:
        if self._backstage is not None:
            self._backstage.close()
        self._db.close()


_INSERT_DOC = "INSERT INTO doc (scene, gen, kind, id, seq, body) VALUES (?, ?, ?, ?, ?, ?)"


def _doc_rows(scene: str, gen: int, revision: int,
              docs: Mapping[str, Sequence[tuple[str, str]]]
              ) -> Iterator[tuple[str, int, str, str, int, str]]:
    """The `doc` rows of a whole scene written at `revision`, each kind in its order."""
    base = revision << SEQ_BITS
    for kind, items in docs.items():
        for k, (i, body) in enumerate(items):
            yield scene, gen, kind, i, base + k, body


def _insert_docs(db: sqlite3.Connection, scene: str, gen: int, revision: int,
                 docs: Mapping[str, Sequence[tuple[str, str]]]) -> None:
    db.executemany(_INSERT_DOC, _doc_rows(scene, gen, revision, docs))


class Backstage:
    """The store's work done off the Core's thread, on a connection of its own: a large
    scene written ahead as a generation nobody reads yet, and generations nobody reads any
    more deleted. Each transaction is one slice (SLICE_ROWS rows), so a Core write waits
    for the file's write lock a few milliseconds at most. One thread at a time uses it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = sqlite3.connect(self.store.path, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._db.execute(f"PRAGMA synchronous = {_SYNC[self.store.sync]}")
        return self._db

    @contextlib.contextmanager
    def _slice(self) -> Iterator[sqlite3.Connection]:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.rollback()
            raise
        db.execute("COMMIT")

    def stage(self, scene: str, revision: int,
              docs: Mapping[str, Sequence[tuple[str, str]]]) -> int:
        """Write a scene's documents as a new generation, a slice at a time; its number
        (StoreUnavailable: the store cannot be written; what was written is swept)."""
        gen = secrets.randbits(62) + 1  # 0 is the generation of scenes written inline
        try:
            self._sweep()
            with self._slice() as db:
                db.execute("INSERT INTO stage (scene, gen, since, stale) VALUES (?, ?, ?, 0)",
                           (scene, gen, time.time()))
            rows = list(_doc_rows(scene, gen, revision, docs))
            for start in range(0, len(rows), SLICE_ROWS):
                with self._slice() as db:
                    db.executemany(_INSERT_DOC, rows[start:start + SLICE_ROWS])
        except sqlite3.Error as exc:
            self.store.abandon(scene, gen)
            raise StoreUnavailable("written", sqlite_reason(exc)) from None
        except OSError as exc:
            self.store.abandon(scene, gen)
            raise StoreUnavailable("written", os_reason(exc)) from None
        return gen

    def sweep(self) -> int:
        """Delete the documents of every generation no scene reads (replaced, given up, or
        left mid-way by a process that stopped), a slice at a time; how many rows went. A
        failure is logged: what is left is swept next time."""
        try:
            return self._sweep()
        except (sqlite3.Error, OSError) as exc:
            log.warning("state store %s: deleting replaced scenes failed (done at the next "
                        "sweep): %s", self.store.path, exc)
            return 0

    def _sweep(self) -> int:
        db = self._conn()
        gone = 0
        old = time.time() - STAGE_ABANDONED_S
        found = db.execute("SELECT scene, gen FROM stage WHERE stale = 1 OR since < ?",
                           (old,)).fetchall()
        for scene, gen in found:
            while True:
                with self._slice() as db:
                    # Checked inside the slice: the Core may have made it current meanwhile.
                    if db.execute("SELECT 1 FROM stage WHERE scene = ? AND gen = ? AND "
                                  "(stale = 1 OR since < ?)", (scene, gen, old)).fetchone() \
                            is None:
                        break
                    n = db.execute("DELETE FROM doc WHERE scene = ? AND gen = ? AND "
                                   "(kind, id) IN (SELECT kind, id FROM doc WHERE scene = ? "
                                   "AND gen = ? LIMIT ?)",
                                   (scene, gen, scene, gen, SLICE_ROWS)).rowcount
                    gone += n
                    if n < SLICE_ROWS:
                        db.execute("DELETE FROM stage WHERE scene = ? AND gen = ?",
                                   (scene, gen))
                        break
        if gone:
            with contextlib.suppress(sqlite3.Error):
                db.executescript("PRAGMA incremental_vacuum;")
        return gone

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
