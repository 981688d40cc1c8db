"""What the table is looking at: each scene's focus, the pair an overlay follows.

Rule of this module: pure values. The gm sets a scene's `Focus` (attacker, target, attack
mode); each subscriber is sent its *view* of it, where a viewer (player, overlay) sees a
hidden or absent token as nobody, so a focus never names what a viewer may not know of.
The session (server/session.py) keeps one focus per scene and sends a subscriber its view
whenever that view changes; nothing here knows about connections.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from server.messages import FocusOut, TokenDoc


@dataclass(frozen=True, slots=True)
class Focus:
    """The pair the gm points the table at; None on a side: nobody chosen."""

    attacker: str | None = None
    target: str | None = None
    mode: str | None = None


NOBODY = Focus()


def view(focus: Focus, tokens: Mapping[str, TokenDoc], viewer: bool) -> Focus:
    """The focus as a subscriber may see it: tokens no longer in the scene are dropped for
    everyone, and hidden ones for viewers."""

    def seen(tid: str | None) -> str | None:
        if tid is None:
            return None
        token = tokens.get(tid)
        if token is None or (viewer and token.hidden):
            return None
        return tid

    return Focus(seen(focus.attacker), seen(focus.target), focus.mode)


def out(scene: str, focus: Focus) -> FocusOut:
    """The wire message of one subscriber's view."""
    return FocusOut(scene, focus.attacker, focus.target, focus.mode)
