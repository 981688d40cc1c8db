"""server/routing.py alone: where a client's frame goes when scenes live in several
workers (no sockets, no processes)."""

from __future__ import annotations

import json
import subprocess
import sys

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from server.routing import Links, Route, owner, peek, subject_token


def test_every_request_names_its_scene_and_hello_names_none() -> None:
    assert peek(json.dumps({"type": "hello", "protocol": 1})) == Route(None, hello=True)
    assert peek(json.dumps({"type": "token.update", "scene": "s1", "tokens": []})) == Route("s1")
    assert peek(msgpack.packb({"type": "subscribe", "scene": "s2", "id": 3})) == Route("s2")
    load = {"type": "scene.load", "scene": {"id": "s3", "grid": {}, "walls": [[1] * 5] * 9}}
    assert peek(json.dumps(load)) == Route("s3")
    foundry = {"type": "scene.load", "scene": {"_id": "s4", "grid": {}}}
    assert peek(msgpack.packb(foundry)) == Route("s4")


def test_a_frame_whose_scene_cannot_be_read_has_no_route() -> None:
    """The connection's first worker refuses these, as one server would."""
    for frame in ("[1, 2]", "not json", json.dumps({"type": "cover.query", "scene": 7}),
                  json.dumps({"type": "cover.query"}), json.dumps({"type": "scene.load",
                                                                   "scene": "s1"}),
                  json.dumps({"type": "cover.query", "scene": {"id": "s1"}}),
                  json.dumps({"type": "cover.query", "scene": ""}), b"\xc1", b""):
        assert peek(frame) == Route(None), frame


def test_a_frame_nested_too_deeply_to_read_has_no_route() -> None:
    """Found by make fuzz through a front process: msgspec's RecursionError escaped peek,
    and the front dropped the client (1000) without a word; now the frame goes on to a
    worker, which refuses it as one server does."""
    # Written out by hand: the encoders refuse such depths themselves.
    packed = b"\x82\xa4type\xa9scene.get\xa5scene" + b"\x81\xa1d\x91" * 3000 + b"\xa5arena"
    text = '{"type": "scene.get", "scene": "x", "id": ' + '{"d": [' * 3000 + "1" + \
        "]}" * 3000 + "}"
    for frame in (packed, text, b"\x91" * 100_000, "[" * 100_000):
        assert peek(frame) == Route(None)


def test_a_key_said_twice_counts_as_the_request_decoder_counts_it() -> None:
    """The last one, as json.loads and msgpack do: the front and the worker agree on the
    scene a frame is for."""
    text = '{"type": "cover.query", "scene": "a", "scene": "b"}'
    assert peek(text) == Route(json.loads(text)["scene"])


def test_a_scene_has_one_owner_in_every_process() -> None:
    """Python's str hash changes from one process to the next; the owner must not (another
    process, another machine, a restart: the same worker)."""
    ids = [f"scene-{k}" for k in range(50)]
    here = [owner(i, 7) for i in ids]
    code = ("import sys; from server.routing import owner; "
            f"print([owner(i, 7) for i in {ids!r}])")
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "123"}).stdout
    assert str(here) == there.strip()
    assert set(here) == set(range(7))  # they spread over every worker


@given(st.text(min_size=1))
def test_any_scene_id_is_one_subject_token(sid: str) -> None:
    token = subject_token(sid)
    assert token.isalnum() and token.isascii() and len(token) == 32
    assert owner(sid, 1) == 0


def test_links_say_hello_to_each_worker_once() -> None:
    hello = json.dumps({"type": "hello", "protocol": 1, "token": "t"})
    links = Links(2)
    assert links.target(hello) == (0, True)  # the first frame, whatever it is
    links.greeted(hello)
    a = next(s for s in (f"s{k}" for k in range(100)) if owner(s, 2) == 0)
    b = next(s for s in (f"s{k}" for k in range(100)) if owner(s, 2) == 1)
    assert links.target(json.dumps({"type": "scene.get", "scene": a})) == (0, False)
    assert links.target(json.dumps({"type": "scene.get", "scene": b})) == (1, True)
    links.opened(1)
    assert links.target(json.dumps({"type": "scene.get", "scene": b})) == (1, False)
    # A second hello, or a frame without a scene: to the first worker, which refuses it.
    assert links.target(hello) == (0, False)
    assert links.target("[]") == (0, False)
    assert links.hello == hello and links.used == [0, 1]


def test_a_lost_link_that_only_said_hello_is_opened_again() -> None:
    """Worker 0 restarted: a client that never used it keeps its connection, and its next
    frame for worker 0 opens a new link; a client that used it must be closed."""
    hello = json.dumps({"type": "hello", "protocol": 1})
    b = next(s for s in (f"s{k}" for k in range(100)) if owner(s, 2) == 1)
    links = Links(2)
    links.greeted(hello)
    links.opened(1)
    links.sent(1)
    assert links.lost(0) is False
    assert links.target("[]") == (1, False)  # the first worker linked now
    assert links.target(json.dumps({"type": "scene.get", "scene": b})) == (1, False)
    assert links.lost(1) is True
    assert links.target("[]") == (0, True)
