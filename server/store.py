"""The embedded store: state that must outlive a connection and the server process.

Rule of this module: plain synchronous sqlite3 (standard library), called only by the Core
(server/session.py), which runs on one thread at a time; every write is one transaction.
It holds opaque JSON texts keyed by (scene id, token id) and knows nothing of their
meaning; today it keeps each token's air (drowning and suffocating). The path comes from
`covercast serve --state PATH`; ":memory:" keeps nothing after the process ends.

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
import sqlite3
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("covercast.store")

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS breath (
    scene TEXT NOT NULL,
    token TEXT NOT NULL,
    state TEXT NOT NULL,
    PRIMARY KEY (scene, token)
)
"""


class StoreError(Exception):
    """The state file cannot be used (not a Covercast store, newer schema, unreadable)."""


class StoreUnavailable(StoreError):
    """The store cannot be written (or read) now; `reason` says why in plain words (disk
    full, read-only). Nothing was done; a later call may succeed."""

    def __init__(self, action: str, reason: str) -> None:
        super().__init__(f"the state store cannot be {action}: {reason}")
        self.action = action
        self.reason = reason


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
    """Per-token state kept across reconnects and restarts."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
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
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path}: store schema {version} is newer than this "
                                 f"server's ({SCHEMA_VERSION})")
            with self._transaction():
                self._db.execute(_SCHEMA)
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot use as a state store: "
                             f"{sqlite_reason(exc)}") from None

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
        else:
            if self.outage is not None:
                log.warning("state store %s works again (after: %s)", self.path, self.outage)
                self.outage = None
            return
        if self.outage != reason:
            log.error("state store %s cannot be %s: %s; turn ends are refused with "
                      "'unavailable' until it can (logged once)", self.path, action, reason)
            self.outage = reason
        raise StoreUnavailable(action, reason) from None

    def _transaction(self) -> sqlite3.Connection:
        # isolation_level=None: explicit BEGIN, committed or rolled back by the context.
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

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
        with self._guard("written"), self._transaction():
            self._db.execute("INSERT INTO breath (scene, token, state) VALUES (?, ?, ?) "
                             "ON CONFLICT (scene, token) DO UPDATE SET state = excluded.state",
                             (scene, token, state))

    def close(self) -> None:
        self._db.close()
