"""Roles against a real server on 127.0.0.1: the access token decides gm, player or overlay;
viewers (player, overlay) cannot change a scene, and no reply or push to a viewer names a
hidden token or shows its effect, including when the gm hides or shows one. The sans-I/O
part at the end checks the viewer's incremental deltas against fresh evaluations over a
long run of random hides, shows and moves."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import pytest

from covercast.cli import main as cli_main
from server.messages import SceneLoad, parse_request
from server.roles import Role
from server.session import Core, Send
from tests.conftest import LiveServer, Peer

GM, PLAYER, OVERLAY = "gm-token", "player-token", "overlay-token"
POLICY_VIOLATION = 1008
Key = tuple[str, str, str]

# An archer shooting past a hidden shade at a mark (soft cover for the gm only); a knight
# and a hidden lurker on both sides of a brute (flanking for the gm only); a secret door.
SCENE: dict[str, Any] = {
    "_id": "keep",
    "grid": {"type": 1, "size": 100, "distance": 5, "units": "ft"},
    "walls": [
        {"_id": "wall", "c": [0, 300, 300, 300]},
        {"_id": "secret", "c": [300, 300, 400, 300], "door": 2, "ds": 0},
        {"_id": "gate", "c": [400, 300, 500, 300], "door": 1, "ds": 0},
    ],
    "tokens": [
        {"_id": "archer", "name": "Archer", "x": 0, "y": 0, "disposition": 1},
        {"_id": "mark", "name": "Mark", "x": 400, "y": 0, "disposition": -1},
        {"_id": "shade", "name": "Shade", "x": 200, "y": 0, "disposition": -1, "hidden": True},
        {"_id": "knight", "name": "Knight", "x": 0, "y": 600, "disposition": 1},
        {"_id": "brute", "name": "Brute", "x": 100, "y": 600, "disposition": -1},
        {"_id": "lurker", "name": "Lurker", "x": 200, "y": 600, "disposition": 1,
         "hidden": True},
    ],
}
HIDDEN = {"shade", "lurker"}
VISIBLE = {"archer", "mark", "knight", "brute"}


# -- helpers ------------------------------------------------------------------------------

@pytest.fixture
def server() -> Iterator[LiveServer]:
    live = LiveServer(token=GM, player_token=PLAYER, overlay_token=OVERLAY).start()
    yield live
    live.stop()


@pytest.fixture
def open_server() -> Iterator[LiveServer]:
    live = LiveServer().start()
    yield live
    live.stop()


@pytest.fixture
def connect(server: LiveServer) -> Iterator[Callable[..., Peer]]:
    peers: list[Peer] = []

    def make(token: str | None, role: str | None = None, live: LiveServer = server) -> Peer:
        p = Peer.open(live.url)
        peers.append(p)
        welcome = p.hello(token, role)
        assert welcome["type"] == "welcome", welcome
        return p

    yield make
    for p in peers:
        p.close()


@pytest.fixture
def gm(connect: Callable[..., Peer]) -> Peer:
    p = connect(GM)
    assert p.request({"type": "scene.load", "scene": copy.deepcopy(SCENE)})["type"] == "ack"
    return p


def names(annotation: dict[str, Any]) -> set[str]:
    """Every token id an annotation mentions: its pair, flankers, what its lines met."""
    out = {annotation["attacker"], annotation["target"], *annotation.get("flankers", [])}
    for line in annotation.get("lines") or []:
        out.update(line.get("tokens", []))
    return out


def table(message: dict[str, Any]) -> dict[Key, dict[str, Any]]:
    return {(a["attacker"], a["target"], a["mode"]): a for a in message["annotations"]}


def apply(held: dict[Key, dict[str, Any]], delta: dict[str, Any]) -> None:
    assert delta["type"] == "annotations" and delta["full"] is False, delta
    for key in delta["removed"]:
        del held[(key[0], key[1], key[2])]
    held.update(table(delta))


def update(gm: Peer, *patches: dict[str, Any]) -> int:
    reply = gm.request({"type": "token.update", "scene": "keep", "tokens": list(patches)})
    assert reply["type"] == "ack", reply
    revision: int = reply["revision"]
    return revision


def next_delta(viewer: Peer, revision: int) -> dict[str, Any]:
    """The push bringing `viewer` to `revision` (pushes coalesce: one per change here)."""
    push = viewer.recv()
    assert push["type"] == "annotations" and push["revision"] == revision, push
    return push


def fresh(connect: Callable[..., Peer], token: str, **extra: Any) -> dict[Key, dict[str, Any]]:
    """What a new viewer subscribing now is sent."""
    p = connect(token)
    reply = p.request({"type": "subscribe", "scene": "keep", **extra})
    assert reply["type"] == "annotations" and reply["full"] is True, reply
    return table(reply)


# -- roles from tokens ----------------------------------------------------------------------

@pytest.mark.parametrize(("token", "asked", "role"), [
    (GM, None, "gm"), (PLAYER, None, "player"), (OVERLAY, None, "overlay"),
    (GM, "gm", "gm"), (GM, "player", "player"), (GM, "overlay", "overlay"),
    (PLAYER, "overlay", "overlay"), (OVERLAY, "player", "player"),
])
def test_welcome_names_the_role_the_token_gives(server: LiveServer, token: str,
                                               asked: str | None, role: str) -> None:
    p = Peer.open(server.url)
    try:
        welcome = p.hello(token, asked)
        assert welcome["type"] == "welcome" and welcome["role"] == role
    finally:
        p.close()


@pytest.mark.parametrize(("token", "asked"), [
    (None, None), ("", None), ("nope", None), (PLAYER + " ", None), (None, "overlay"),
    (PLAYER, "gm"), (OVERLAY, "gm"),
], ids=["none", "empty", "wrong", "near-miss", "no-token-asks-overlay", "player-asks-gm",
        "overlay-asks-gm"])
def test_a_token_never_gets_more_than_its_role(server: LiveServer, token: str | None,
                                               asked: str | None) -> None:
    p = Peer.open(server.url)
    try:
        p.send({"type": "hello", "protocol": 1, "client": "pytest",
                **({} if token is None else {"token": token}),
                **({} if asked is None else {"role": asked})})
        with pytest.raises(Exception) as closed:
            p.recv(5)
        assert getattr(closed.value, "rcvd", None) is not None, closed.value
        assert closed.value.rcvd.code == POLICY_VIOLATION  # type: ignore[attr-defined]
        assert closed.value.rcvd.reason == "access denied"  # type: ignore[attr-defined]
    finally:
        p.close()


@pytest.mark.parametrize(("token", "asked", "role"), [
    (None, None, "gm"), ("anything", None, "gm"), (None, "overlay", "overlay"),
    (None, "player", "player"), (None, "gm", "gm"),
])
def test_an_open_server_makes_everyone_gm_unless_asked_for_a_viewer_role(
        open_server: LiveServer, token: str | None, asked: str | None, role: str) -> None:
    p = Peer.open(open_server.url)
    try:
        assert p.hello(token, asked)["role"] == role
    finally:
        p.close()


def test_hello_with_an_unknown_role_closes_naming_the_field(open_server: LiveServer) -> None:
    p = Peer.open(open_server.url)
    try:
        p.send({"type": "hello", "protocol": 1, "client": "pytest", "role": "dm"})
        with pytest.raises(Exception) as closed:
            p.recv(5)
        reason = closed.value.rcvd.reason  # type: ignore[attr-defined]
        assert reason.startswith("expected hello; $.role") and "'dm'" in reason, reason
    finally:
        p.close()


def test_viewer_tokens_need_a_gm_token_and_tokens_must_differ() -> None:
    with pytest.raises(ValueError, match="gm access token"):
        Core(player_token="p")
    with pytest.raises(ValueError, match="gm access token"):
        Core(overlay_token="o")
    with pytest.raises(ValueError, match="must differ"):
        Core(access_token="same", overlay_token="same")
    assert Core(access_token="g", player_token="p", overlay_token="o") is not None


def test_serve_refuses_viewer_tokens_without_a_gm_token(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("COVERCAST_TOKEN", "COVERCAST_PLAYER_TOKEN", "COVERCAST_OVERLAY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COVERCAST_OVERLAY_TOKEN", "o")
    assert cli_main(["serve", "--no-demo", "--port", "0"]) == 2
    assert "gm access token" in capsys.readouterr().err


# -- viewers cannot write -------------------------------------------------------------------

WRITES: list[dict[str, Any]] = [
    {"type": "scene.load", "scene": {"_id": "keep", "grid": {"type": 1}}},
    {"type": "scene.load", "scene": {"_id": "other", "grid": {"type": 1}}},
    {"type": "scene.unload", "scene": "keep"},
    {"type": "token.create", "scene": "keep", "tokens": [{"_id": "new", "x": 0, "y": 900}]},
    {"type": "token.update", "scene": "keep", "tokens": [{"_id": "mark", "x": 900}]},
    {"type": "token.update", "scene": "keep", "tokens": [{"_id": "shade", "hidden": False}]},
    {"type": "token.delete", "scene": "keep", "ids": ["mark"]},
    {"type": "wall.create", "scene": "keep", "walls": [{"_id": "w2", "c": [0, 0, 9, 9]}]},
    {"type": "wall.update", "scene": "keep", "walls": [{"_id": "gate", "ds": 1}]},
    {"type": "wall.delete", "scene": "keep", "ids": ["wall"]},
    {"type": "token.update", "scene": "nowhere", "tokens": [{"_id": "x", "x": 1}]},
    {"type": "turn.end", "scene": "keep", "token": "mark", "spoke": True},
]


@pytest.mark.parametrize("token", [PLAYER, OVERLAY])
def test_viewers_get_a_forbidden_error_naming_the_message_and_the_role(
        server: LiveServer, connect: Callable[..., Peer], gm: Peer, token: str) -> None:
    before = server.core.scenes["keep"].snapshot()
    viewer = connect(token)
    role = "player" if token == PLAYER else "overlay"
    for k, message in enumerate(WRITES):
        reply = viewer.request({**message, "id": k})
        assert reply == {
            "type": "error", "code": "forbidden", "path": "$.type", "id": k,
            "message": f"$.type: {message['type']} is not allowed for role '{role}': only a "
                       "gm connection changes scenes"}, reply
    assert server.core.scenes["keep"].snapshot() == before
    assert set(server.core.scenes) == {"keep"}
    # The connection stays up and can still read.
    assert viewer.request({"type": "scene.get", "scene": "keep"})["revision"] == 1


def test_a_gm_asking_for_a_viewer_role_is_a_viewer(connect: Callable[..., Peer],
                                                   gm: Peer) -> None:
    as_overlay = connect(GM, "overlay")
    reply = as_overlay.request({"type": "token.delete", "scene": "keep", "ids": ["mark"]})
    assert reply["code"] == "forbidden"
    got = as_overlay.request({"type": "scene.get", "scene": "keep"})
    assert {t["id"] for t in got["scene"]["tokens"]} == VISIBLE


# -- what viewers read ----------------------------------------------------------------------

@pytest.mark.parametrize("token", [PLAYER, OVERLAY])
def test_scene_get_hides_hidden_tokens_and_secret_doors(
        connect: Callable[..., Peer], gm: Peer, token: str) -> None:
    full = gm.request({"type": "scene.get", "scene": "keep"})["scene"]
    seen = connect(token).request({"type": "scene.get", "scene": "keep"})["scene"]
    assert {t["id"] for t in full["tokens"]} == VISIBLE | HIDDEN
    assert {t["id"] for t in seen["tokens"]} == VISIBLE
    walls = {w["id"]: w for w in seen["walls"]}
    assert walls["secret"] == {"id": "secret", "c": [300.0, 300.0, 400.0, 300.0]}
    assert walls["gate"]["door"] == 1
    assert {k: v for k, v in seen.items() if k not in ("tokens", "walls")} == {
        k: v for k, v in full.items() if k not in ("tokens", "walls")}
    # Opened, the secret door is an open door to everyone.
    gm.request({"type": "wall.update", "scene": "keep", "walls": [{"_id": "secret", "ds": 1}]})
    seen = connect(token).request({"type": "scene.get", "scene": "keep"})["scene"]
    secret = next(w for w in seen["walls"] if w["id"] == "secret")
    assert (secret["door"], secret["ds"]) == (1, 1)


@pytest.mark.parametrize("token", [PLAYER, OVERLAY])
def test_viewer_annotations_never_name_hidden_tokens_nor_show_their_effect(
        connect: Callable[..., Peer], gm: Peer, token: str) -> None:
    gm_view = fresh(connect, GM, lines=True)
    seen = fresh(connect, token, lines=True)
    # The gm sees the shade's soft cover and the lurker's flanking; viewers see neither.
    assert gm_view[("archer", "mark", "ranged")]["cover"] == "soft"
    assert gm_view[("knight", "brute", "melee")]["flankers"] == ["lurker"]
    assert seen[("archer", "mark", "ranged")]["cover"] == "none"
    assert seen[("archer", "mark", "ranged")]["modifiers"] == []
    assert seen[("knight", "brute", "melee")]["flags"]["flanking"] is False
    assert "flankers" not in seen[("knight", "brute", "melee")]
    assert seen
    for annotation in seen.values():
        assert names(annotation) <= VISIBLE, annotation
    # What a viewer sees is exactly the gm's view of the scene without its hidden tokens.
    gm.request({"type": "token.delete", "scene": "keep", "ids": sorted(HIDDEN)})
    assert fresh(connect, GM, lines=True) == seen


@pytest.mark.parametrize("token", [PLAYER, OVERLAY])
def test_a_hidden_token_and_an_unknown_one_give_the_same_error(
        connect: Callable[..., Peer], gm: Peer, token: str) -> None:
    viewer = connect(token)

    def error(attacker: str, target: str) -> dict[str, Any]:
        reply = viewer.request({"type": "cover.query", "scene": "keep", "attacker": attacker,
                                "target": target, "id": 1})
        assert reply["type"] == "error", reply
        return reply

    for field, (attacker, target) in (("attacker", ("{}", "mark")),
                                      ("target", ("archer", "{}"))):
        hidden = error(attacker.format("shade"), target.format("shade"))
        unknown = error(attacker.format("ghost"), target.format("ghost"))
        assert hidden["path"] == unknown["path"] == f"$.{field}"
        assert hidden["code"] == unknown["code"] == "unknown_token"
        assert hidden["message"].replace("shade", "X") == unknown["message"].replace("ghost", "X")
    # A hidden token attacking itself is unknown too, not "cannot attack itself".
    assert error("lurker", "lurker")["code"] == "unknown_token"
    # The gm may ask about them.
    reply = gm.request({"type": "cover.query", "scene": "keep", "attacker": "archer",
                        "target": "shade"})
    assert reply["type"] == "cover.result"


@pytest.mark.parametrize("token", [PLAYER, OVERLAY])
def test_cover_query_for_a_viewer_ignores_hidden_tokens(
        connect: Callable[..., Peer], gm: Peer, token: str) -> None:
    ask = {"type": "cover.query", "scene": "keep", "attacker": "archer", "target": "mark",
           "lines": True}
    mine = gm.request(ask)["annotation"]
    theirs = connect(token).request(ask)["annotation"]
    assert mine["cover"] == "soft" and any("shade" in ln.get("tokens", [])
                                           for ln in mine["lines"])
    assert theirs["cover"] == "none" and names(theirs) <= VISIBLE
    flank = {**ask, "attacker": "knight", "target": "brute", "attack": "melee"}
    assert gm.request(flank)["annotation"]["flankers"] == ["lurker"]
    assert connect(token).request(flank)["annotation"]["flags"]["flanking"] is False


@pytest.mark.parametrize("token", [PLAYER, OVERLAY])
def test_area_query_for_a_viewer_leaves_hidden_tokens_out(
        connect: Callable[..., Peer], gm: Peer, token: str) -> None:
    ask = {"type": "area.query", "scene": "keep",
           "template": {"t": "circle", "x": 250, "y": 50, "distance": 15}}
    mine = {h["token"] for h in gm.request(ask)["affected"]}
    theirs = {h["token"] for h in connect(token).request(ask)["affected"]}
    assert "shade" in mine
    assert theirs == mine - HIDDEN and theirs


# -- hiding and showing while subscribed --------------------------------------------------------

@pytest.mark.parametrize("lines", [False, True])
def test_hiding_and_showing_tokens_moves_them_out_of_and_into_a_viewers_deltas(
        connect: Callable[..., Peer], gm: Peer, lines: bool) -> None:
    viewer = connect(OVERLAY)
    held = table(viewer.request({"type": "subscribe", "scene": "keep", "lines": lines}))
    assert all(names(a) <= VISIBLE for a in held.values())

    # The gm shows the shade: its pairs arrive, and the archer now has soft cover past it.
    rev = update(gm, {"_id": "shade", "hidden": False})
    push = next_delta(viewer, rev)
    assert push["removed"] == []
    assert any("shade" in names(a) for a in push["annotations"])
    apply(held, push)
    assert held[("archer", "mark", "ranged")]["cover"] == "soft"
    assert held == fresh(connect, OVERLAY, lines=lines)

    # The gm hides the mark: every entry naming it goes, the others it touched change.
    rev = update(gm, {"_id": "mark", "hidden": True})
    push = next_delta(viewer, rev)
    removed = {tuple(k) for k in push["removed"]}
    assert removed == {k for k in held if "mark" in (k[0], k[1])}
    assert all("mark" not in names(a) for a in push["annotations"])
    apply(held, push)
    assert held == fresh(connect, OVERLAY, lines=lines)

    # The gm hides the last visible one of a flanking pair's partners and shows the lurker.
    rev = update(gm, {"_id": "lurker", "hidden": False}, {"_id": "shade", "hidden": True})
    push = next_delta(viewer, rev)
    apply(held, push)
    assert held[("knight", "brute", "melee")]["flankers"] == ["lurker"]
    assert all("shade" not in names(a) for a in held.values())
    assert held == fresh(connect, OVERLAY, lines=lines)

    # A hidden token moving tells the viewer nothing but the new revision.
    rev = update(gm, {"_id": "shade", "x": 100, "y": 100})
    push = next_delta(viewer, rev)
    assert push["annotations"] == [] and push["removed"] == []

    # Everything shown again: the viewer's table is the gm's.
    rev = update(gm, {"_id": "shade", "hidden": False}, {"_id": "mark", "hidden": False})
    apply(held, next_delta(viewer, rev))
    assert held == fresh(connect, GM, lines=lines)


def test_a_viewer_is_never_told_of_a_hidden_token_created_or_deleted(
        connect: Callable[..., Peer], gm: Peer) -> None:
    viewer = connect(PLAYER)
    held = table(viewer.request({"type": "subscribe", "scene": "keep"}))
    reply = gm.request({"type": "token.create", "scene": "keep", "tokens": [
        {"_id": "spy", "x": 100, "y": 0, "disposition": -1, "hidden": True}]})
    push = next_delta(viewer, reply["revision"])
    assert push["annotations"] == [] and push["removed"] == []
    reply = gm.request({"type": "token.delete", "scene": "keep", "ids": ["spy", "lurker"]})
    push = next_delta(viewer, reply["revision"])
    assert push["annotations"] == [] and push["removed"] == []
    assert held == fresh(connect, PLAYER)


# -- the incremental viewer tables, without sockets ---------------------------------------------

def _frame(message: dict[str, Any]) -> bytes:
    data: bytes = msgpack.packb(message)
    return data


def _say(core: Core, conn: int, message: dict[str, Any]) -> list[dict[str, Any]]:
    out = core.drain(core.receive(conn, _frame(message)))
    return [msgpack.unpackb(o.frame, raw=False) for o in out
            if isinstance(o, Send) and o.conn == conn and isinstance(o.frame, bytes)]


def _load(core: Core, scene: dict[str, Any]) -> None:
    request = parse_request({"type": "scene.load", "scene": scene})
    assert isinstance(request, SceneLoad)
    core.preload(request)


def _from_scratch(core: Core, hidden: set[str]) -> dict[Key, dict[str, Any]]:
    """The gm's full set of the scene with its hidden tokens deleted, in a new server."""
    snap = core.scenes["r"].snapshot()
    other = Core()
    _load(other, {"_id": "r", "grid": snap["grid"], "walls": snap["walls"],
                  "tokens": [t for t in snap["tokens"] if t["id"] not in hidden]})
    conn = other.connect()
    _say(other, conn, {"type": "hello", "protocol": 1, "client": "t"})
    (full,) = _say(other, conn, {"type": "subscribe", "scene": "r", "lines": True})
    return table(full)


@pytest.mark.parametrize("gm_subscribed", [True, False])
def test_viewer_deltas_equal_fresh_evaluations_over_random_hides_shows_and_moves(
        gm_subscribed: bool) -> None:
    rng = random.Random(7)
    core = Core()
    tokens: list[dict[str, Any]] = [
        {"_id": f"t{k}", "x": rng.randrange(0, 8) * 100, "y": rng.randrange(0, 8) * 100,
         "disposition": rng.choice([-1, 1]), "hidden": rng.random() < 0.3}
        for k in range(6)]
    _load(core, {"_id": "r", "grid": {"type": 1, "size": 100},
                 "walls": [{"_id": "w", "c": [350, 0, 350, 500]},
                           {"_id": "door", "c": [350, 500, 350, 800], "door": 1}],
                 "tokens": tokens})
    gm, viewer = core.connect(), core.connect()
    for conn, role in ((gm, "gm"), (viewer, "overlay")):
        assert _say(core, conn, {"type": "hello", "protocol": 1, "client": "t",
                                 "role": role})[0]["role"] == role
    held: dict[Key, dict[str, Any]] = {}
    # With the gm subscribed too, the two views' tables start from each other's.
    for conn in (gm, viewer) if gm_subscribed else (viewer,):
        (full,) = _say(core, conn, {"type": "subscribe", "scene": "r", "lines": True})
        if conn == viewer:
            held = table(full)
    hidden = {str(t["_id"]) for t in tokens if t["hidden"]}
    transitions = 0
    for _step in range(50):
        ids = rng.sample([f"t{k}" for k in range(6)], rng.randrange(1, 3))
        patches: list[dict[str, Any]] = []
        for tid in ids:
            if rng.random() < 0.5:
                patches.append({"_id": tid, "hidden": tid not in hidden})
            else:
                patches.append({"_id": tid, "x": rng.randrange(0, 8) * 100,
                                "y": rng.randrange(0, 8) * 100})
        if _step % 10 == 9:  # every tenth change shows every hidden token
            patches = [{"_id": tid, "hidden": False} for tid in sorted(hidden)] or patches
        change: dict[str, Any] = {"type": "token.update", "scene": "r", "tokens": patches}
        if _step % 10 != 9 and rng.random() < 0.2:  # now and then the door instead
            change = {"type": "wall.update", "scene": "r",
                      "walls": [{"_id": "door", "ds": rng.choice([0, 1])}]}
            patches = []
        before = bool(hidden)
        for p in patches:
            if "hidden" in p:
                hidden = hidden | {p["_id"]} if p["hidden"] else hidden - {p["_id"]}
        transitions += before != bool(hidden)
        out = core.drain(core.receive(gm, _frame(change)))
        for o in out:
            if o.conn == viewer:
                assert isinstance(o, Send) and isinstance(o.frame, bytes)
                apply(held, msgpack.unpackb(o.frame, raw=False))
        assert held == _from_scratch(core, hidden)
        assert all(not (names(a) & hidden) for a in held.values())
    # The run went from "something hidden" to "nothing hidden" and back (the viewer's
    # table then changes cache), not only within one of them.
    assert transitions >= 6
    assert Role.OVERLAY.viewer and not Role.GM.viewer


@pytest.mark.parametrize("lines", [False, True])
def test_a_gm_and_a_viewer_subscribed_alike_get_different_deltas(
        connect: Callable[..., Peer], gm: Peer, lines: bool) -> None:
    """Subscriptions with the same scene, revision, modes, lines and encoding must still not
    share a delta across roles (a frame cache keyed without the role would leak)."""
    viewer = connect(OVERLAY)
    watcher = connect(GM)
    for p in (viewer, watcher):
        assert p.request({"type": "subscribe", "scene": "keep", "lines": lines})["full"]
    rev = update(gm, {"_id": "shade", "x": 200, "y": 100}, {"_id": "mark", "x": 300})
    theirs, mine = next_delta(viewer, rev), next_delta(watcher, rev)
    assert any("shade" in names(a) for a in mine["annotations"])
    assert all(names(a) <= VISIBLE for a in theirs["annotations"])
    assert all(not ({k[0], k[1]} & HIDDEN) for k in theirs["removed"])


@pytest.mark.parametrize("token", [PLAYER, OVERLAY])
def test_a_viewer_never_reads_a_hidden_tokens_air(
        connect: Callable[..., Peer], gm: Peer, token: str) -> None:
    viewer = connect(token)
    sub = viewer.request({"type": "subscribe", "scene": "keep"})
    assert sub["type"] == "annotations"
    # Both the shade (hidden) and the mark (visible) end a turn holding their breath.
    for who in ("shade", "mark"):
        reply = gm.request({"type": "turn.end", "scene": "keep", "token": who,
                            "breathing": False, "attacked": True})
        assert reply["type"] == "breath" and reply["breath"][0]["token"] == who, reply
    pushed: list[str] = []
    while len(pushed) < 1:
        push = viewer.recv()
        assert push["type"] == "annotations", push
        pushed.extend(b["token"] for b in push.get("breath", []))
    assert pushed == ["mark"]
    everything = viewer.request({"type": "breath.get", "scene": "keep"})
    assert [b["token"] for b in everything["breath"]] == ["mark"]
    hidden = viewer.request({"type": "breath.get", "scene": "keep", "token": "shade", "id": 1})
    unknown = viewer.request({"type": "breath.get", "scene": "keep", "token": "ghost", "id": 1})
    assert hidden["code"] == unknown["code"] == "unknown_token"
    assert hidden["message"].replace("shade", "X") == unknown["message"].replace("ghost", "X")
    # A fresh viewer subscription lists the visible token's air only; the gm sees both.
    again = connect(token).request({"type": "subscribe", "scene": "keep"})
    assert [b["token"] for b in again.get("breath", [])] == ["mark"]
    gm_view = gm.request({"type": "breath.get", "scene": "keep"})
    assert {b["token"] for b in gm_view["breath"]} == {"shade", "mark"}


# -- friendly fire (a read-only request: viewers may resolve shots, without hidden tokens) --

# Enchanted Realms on HEXODDR: an archer behind whose mark a wall hides it entirely (full
# cover: friendly fire); a hidden ally just beyond the mark (slot 4 of the numbering) and a
# hidden scout that would give cover nowhere but is in the mark's vicinity.
FIELD: dict[str, Any] = {
    "_id": "field", "grid": {"type": 2, "size": 100, "distance": 5},
    "walls": [{"_id": "w", "c": [540, 0, 540, 120]}],
    "tokens": [{"_id": "archer", "x": 50, "y": 0, "disposition": 1},
               {"_id": "mark", "x": 550, "y": 0, "disposition": -1},
               {"_id": "ally", "x": 650, "y": 0, "disposition": 1, "hidden": True}],
}


@pytest.mark.parametrize("token", [PLAYER, OVERLAY])
def test_friendly_fire_for_a_viewer_never_strikes_nor_lists_a_hidden_token(
        connect: Callable[..., Peer], gm: Peer, token: str) -> None:
    assert gm.request({"type": "scene.load", "scene": copy.deepcopy(FIELD),
                       "ruleset": "realms"})["type"] == "ack"
    ask = {"type": "friendlyfire.resolve", "scene": "field", "attacker": "archer",
           "defense": {"mark": 14}, "attacks": [{"target": "mark", "dice": [3], "d10": 4}]}
    (mine,) = gm.request(ask)["attacks"]
    viewer = connect(token)
    reply = viewer.request(ask)
    assert reply["type"] == "friendlyfire.result", reply
    (theirs,) = reply["attacks"]
    # The gm's shot strikes the hidden ally in slot 4; the viewer's finds the hex empty.
    assert mine["friendlyFire"] and mine["slot"] == 4 and mine["struck"] == "ally"
    assert theirs["friendlyFire"] and theirs["slot"] == 4 and theirs["struck"] is None
    assert "ally" in {c.get("token") for c in mine["candidates"]}
    assert "ally" not in {c.get("token") for c in theirs["candidates"]}
    assert all("ally" not in step for step in theirs["steps"])
    assert [c["cell"] for c in theirs["candidates"]] == [c["cell"] for c in mine["candidates"]]
    # A hidden id anywhere in the request is an unknown one, with the same error.
    for where, (hidden, unknown) in {
        "$.attacker": ({**ask, "attacker": "ally"}, {**ask, "attacker": "ghost"}),
        "$.attacks[0].target": (
            {**ask, "defense": {"ally": 10}, "attacks": [{"target": "ally", "dice": [3]}]},
            {**ask, "defense": {"ghost": 10}, "attacks": [{"target": "ghost", "dice": [3]}]}),
        "$.defense": ({**ask, "defense": {"mark": 14, "ally": 9}},
                      {**ask, "defense": {"mark": 14, "ghost": 9}}),
    }.items():
        a = viewer.request({**hidden, "id": 1})
        b = viewer.request({**unknown, "id": 1})
        assert a["type"] == b["type"] == "error", (a, b)
        assert a["code"] == b["code"] == "unknown_token" and a["path"] == b["path"] == where
        assert a["message"].replace("ally", "X") == b["message"].replace("ghost", "X")
    # The gm may name the hidden ally.
    assert gm.request({**ask, "defense": {"mark": 14, "ally": 9}})["type"] \
        == "friendlyfire.result"
