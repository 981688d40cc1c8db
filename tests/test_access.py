"""server/roles.py alone: which hello gets which role, and which sets of tokens a server
refuses to start with."""

from __future__ import annotations

import pytest

from server.messages import Hello, RoleName
from server.roles import WRITE_TYPES, Access, Role


def _hello(token: str | None = None, role: RoleName | None = None) -> Hello:
    return Hello(protocol=1, client="t", token=token, role=role)


def test_an_open_server_makes_every_hello_a_gm_unless_it_asks_to_view() -> None:
    open_server = Access()
    assert open_server.grant(_hello()) is Role.GM
    assert open_server.grant(_hello("anything")) is Role.GM
    assert open_server.grant(_hello(role="overlay")) is Role.OVERLAY


def test_each_token_gets_its_role_and_never_more() -> None:
    access = Access("gm-secret", "player-secret", "overlay-secret")
    assert access.grant(_hello("gm-secret")) is Role.GM
    assert access.grant(_hello("player-secret")) is Role.PLAYER
    assert access.grant(_hello("overlay-secret")) is Role.OVERLAY
    assert access.grant(_hello("gm-secret", "player")) is Role.PLAYER  # a gm viewing
    assert access.grant(_hello("player-secret", "gm")) is None  # a player asking for more
    assert access.grant(_hello("wrong")) is None
    assert access.grant(_hello()) is None


def test_viewer_tokens_need_a_gm_token_and_tokens_must_differ() -> None:
    with pytest.raises(ValueError, match="needs a gm access token"):
        Access(player="p")
    with pytest.raises(ValueError, match="must differ"):
        Access("same", "same")


def test_every_write_is_refused_to_a_viewer_by_its_type() -> None:
    assert {"scene.load", "token.update", "wall.delete", "turn.end",
            "scene.focus"} <= WRITE_TYPES
    assert not {"subscribe", "cover.query", "scene.get", "breath.get"} & WRITE_TYPES
    assert Role.PLAYER.viewer and Role.OVERLAY.viewer and not Role.GM.viewer
