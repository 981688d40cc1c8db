"""The embedded store: state that must outlive a connection and the server process.

Rule of this module: plain synchronous sqlite3 (standard library), called only by the Core
(server/session.py), which runs on one thread at a time; every write is one transaction.
It holds opaque JSON texts keyed by (scene id, token id) and knows nothing of their
meaning; today it keeps each token's air (drowning and suffocating). The path comes from
`covercast serve --state PATH`; ":memory:" keeps nothing after the process ends.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

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


class Store:
    """Per-token state kept across reconnects and restarts."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
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
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot use as a state store: {exc}") from None

    def _transaction(self) -> sqlite3.Connection:
        # isolation_level=None: explicit BEGIN, committed or rolled back by the context.
        self._db.execute("BEGIN IMMEDIATE")
        return self._db

    def get_breath(self, scene: str, token: str) -> str | None:
        row = self._db.execute("SELECT state FROM breath WHERE scene = ? AND token = ?",
                               (scene, token)).fetchone()
        return None if row is None else str(row[0])

    def scene_breath(self, scene: str) -> dict[str, str]:
        """Every stored state of a scene's tokens, by token id."""
        rows = self._db.execute("SELECT token, state FROM breath WHERE scene = ? "
                                "ORDER BY token", (scene,)).fetchall()
        return {str(t): str(s) for t, s in rows}

    def put_breath(self, scene: str, token: str, state: str) -> None:
        """Write one token's state, in its own transaction."""
        with self._transaction():
            self._db.execute("INSERT INTO breath (scene, token, state) VALUES (?, ?, ?) "
                             "ON CONFLICT (scene, token) DO UPDATE SET state = excluded.state",
                             (scene, token, state))

    def close(self) -> None:
        self._db.close()
