"""The one error root of Covercast.

Rule of this module: a ClientError is something a client caused; it is reported to that
client as an `error` message (code, message naming the field and value, path) and the
connection stays open. The server's own condition the client must hear about, and that is
no bug, travels the same way with code `unavailable` (the state store cannot be written:
disk full), logged once by the module that met it. Any other exception reaching the
session is a bug: it is logged and the client gets an `internal` error without details.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.Enum):
    BAD_FRAME = "bad_frame"
    INVALID = "invalid"
    UNKNOWN_SCENE = "unknown_scene"
    UNKNOWN_TOKEN = "unknown_token"
    UNKNOWN_WALL = "unknown_wall"
    DUPLICATE_ID = "duplicate_id"
    UNKNOWN_RULESET = "unknown_ruleset"
    UNSUPPORTED = "unsupported"
    TOO_LARGE = "too_large"
    PROTOCOL = "protocol"
    FORBIDDEN = "forbidden"
    UNAVAILABLE = "unavailable"
    INTERNAL = "internal"


class CovercastError(Exception):
    """Root of every error Covercast raises on purpose."""


class ClientError(CovercastError):
    """Bad input from a client: reported to it, never fatal to the connection."""

    def __init__(self, code: ErrorCode, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.path = path

    def under(self, prefix: str) -> ClientError:
        """The same error located inside `prefix` (e.g. '$.tokens[3]')."""
        if self.path is None:
            return ClientError(self.code, f"{prefix}: {self.message}", prefix)
        path = prefix + self.path[1:]
        message = self.message
        if message.startswith(self.path):
            message = path + message[len(self.path):]
        return ClientError(self.code, message, path)


def unavailable(reason: Exception, what: str) -> ClientError:
    """The client's error for a store that cannot be used now (`reason`, which the store
    logged) and what that means for its request."""
    return ClientError(ErrorCode.UNAVAILABLE, f"{reason}; {what}, try again later")
