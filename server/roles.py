"""Who a connection is: the roles, the access tokens that grant them, and what a role may
send.

Rule of this module: pure. `Access` is built once from the server's tokens (a bad set of
tokens is a ValueError at start-up, never at a hello) and answers, for each `hello`, the
role it gets or None (access denied); every configured token is compared in constant time,
whatever matches. A viewer (player, overlay) only reads: its writes are refused by their
`type` alone, before the rest of the message is read (protocol section 10.1), so a refusal
never depends on, nor tells anything about, the scene.
"""

from __future__ import annotations

import enum
import hmac

from server.errors import ClientError, ErrorCode
from server.messages import (
    Hello,
    SceneFocus,
    SceneLoad,
    SceneUnload,
    TokenCreate,
    TokenDelete,
    TokenUpdate,
    TurnEnd,
    WallCreate,
    WallDelete,
    WallUpdate,
)


class Role(enum.Enum):
    """What a connection may do, from the access token it said `hello` with. The gm changes
    scenes and sees everything; a player or an overlay only reads, and never learns of hidden
    tokens (the two viewer roles have the same rights; the name tells the server's log and
    the client what it is)."""

    GM = "gm"
    PLAYER = "player"
    OVERLAY = "overlay"

    @property
    def viewer(self) -> bool:
        return self is not Role.GM


#: Requests that change scenes: only a gm connection may send them.
WRITES = (SceneLoad, SceneUnload, TokenCreate, TokenUpdate, TokenDelete, WallCreate,
          WallUpdate, WallDelete, TurnEnd, SceneFocus)

#: Their `type` tags, which a viewer is refused before the rest of the message is read.
WRITE_TYPES = frozenset(str(t.__struct_config__.tag) for t in WRITES)


def forbidden(kind: str, role: Role) -> ClientError:
    """The error for a write of type `kind` from a viewer role."""
    return ClientError(ErrorCode.FORBIDDEN,
                       f"$.type: {kind} is not allowed for role {role.value!r}: only a gm "
                       "connection changes scenes", path="$.type")


class Access:
    """The server's access tokens. `gm` is the gm's: without it the server is open (any
    hello is gm unless it asks for a viewer role), so viewer tokens without it would protect
    nothing and are refused (ValueError), as are two roles sharing one token."""

    def __init__(self, gm: str | None = None, player: str | None = None,
                 overlay: str | None = None) -> None:
        tokens = {Role.GM: gm, Role.PLAYER: player, Role.OVERLAY: overlay}
        self._tokens = {role: t for role, t in tokens.items() if t}
        if self._tokens and Role.GM not in self._tokens:
            raise ValueError("a player or overlay token needs a gm access token too: "
                             "without one every client may change scenes")
        if len(set(self._tokens.values())) < len(self._tokens):
            raise ValueError("the gm, player and overlay access tokens must differ")

    def grant(self, request: Hello) -> Role | None:
        """The role `hello` gets (None: access denied): its token's, or the viewer role it
        asks for, which any token may (a gm viewing as the players do); never more."""
        given = (request.token or "").encode()
        # Every configured token is compared, in constant time, whatever matches.
        matches = [role for role, secret in self._tokens.items()
                   if hmac.compare_digest(given, secret.encode())]
        if matches:
            granted = matches[0]
        elif Role.GM not in self._tokens:
            granted = Role.GM  # an open server (the loopback default)
        else:
            return None
        if request.role is None:
            return granted
        wanted = Role(request.role)
        return wanted if wanted.viewer or not granted.viewer else None
