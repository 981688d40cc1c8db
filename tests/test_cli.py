"""The `covercast` CLI client commands against the real server on 127.0.0.1."""

from __future__ import annotations

import argparse
import errno
import json
import os
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from covercast.cli import build_parser, main
from covercast.show import render_table
from tests.conftest import LiveServer, Peer

SCENE: dict[str, Any] = {
    "id": "s", "grid": {"type": 1, "size": 50, "distance": 5},
    "walls": [{"id": "gate", "c": [150, 0, 150, 150], "door": 1, "ds": 0}],
    "tokens": [{"id": "a", "x": 0, "y": 50, "disposition": 1},
               {"id": "b", "x": 250, "y": 50, "disposition": -1}],
}


def _loaded(server: LiveServer) -> Peer:
    peer = Peer.open(server.url)
    assert peer.hello()["type"] == "welcome"
    assert peer.request({"type": "scene.load", "scene": SCENE})["type"] == "ack"
    return peer


def test_move_counts_squares_of_the_scene_grid(live_server: LiveServer,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    peer = _loaded(live_server)
    assert main(["move", "a", "2", "3", "--url", live_server.url, "--scene", "s"]) == 0
    assert "revision 2" in capsys.readouterr().out
    state = peer.request({"type": "scene.get", "scene": "s", "id": 9})
    assert state["type"] == "scene" and state["id"] == 9 and state["revision"] == 2
    token = next(t for t in state["scene"]["tokens"] if t["id"] == "a")
    assert (token["x"], token["y"]) == (100, 150)  # 50-px squares, not the demo's 100


def test_door_and_query_change_cover(live_server: LiveServer,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _loaded(live_server)
    args = ["--url", live_server.url, "--scene", "s"]
    assert main(["query", "a", "b", "--json", *args]) == 0
    assert json.loads(capsys.readouterr().out)["cover"] == "total"
    assert main(["door", "gate", "open", *args]) == 0
    capsys.readouterr()
    assert main(["query", "a", "b", "--lines", "--json", *args]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["cover"] == "none" and answer["lines"]


def test_errors_are_reported_not_raised(live_server: LiveServer,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    _loaded(live_server)
    code = main(["move", "nobody", "1", "1", "--url", live_server.url, "--scene", "s"])
    assert code == 1
    assert "nobody" in capsys.readouterr().err
    assert main(["query", "a", "b", "--url", "ws://127.0.0.1:9", "--scene", "s"]) == 2


def test_watch_prints_the_table_then_the_delta(live_server: LiveServer,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    peer = _loaded(live_server)
    result: list[int] = []
    watcher = threading.Thread(target=lambda: result.append(main(
        ["watch", "--once", "--url", live_server.url, "--scene", "s"])))
    watcher.start()
    # Move until the watcher has seen a delta (it subscribes asynchronously).
    for step in range(50):
        peer.request({"type": "wall.update", "scene": "s",
                      "walls": [{"id": "gate", "ds": step % 2}]})
        watcher.join(0.1)
        if not watcher.is_alive():
            break
    assert result == [0]
    out = capsys.readouterr().out
    assert out.count("attacker") == 2  # the full table, then the table after the delta
    assert "*a" in out or "*b" in out


def test_render_table_marks_changed_pairs() -> None:
    ann = {"attacker": "a", "target": "b", "mode": "ranged", "loe": True, "cover": "cover",
           "modifiers": [{"stat": "ac", "value": 4, "kind": "cover", "reason": ""}],
           "flags": {"in_reach": True}}
    text = render_table({("a", "b", "ranged"): ann}, 7, {("a", "b")})
    assert "revision 7" in text and "*a" in text and "+4 ac" in text


LOW: dict[str, Any] = {
       "id": "s", "grid": {"type": 1, "size": 50, "distance": 5}, "width": 500, "height": 300,
       "walls": [{"id": "gate", "c": [150, 0, 150, 150], "door": 1, "ds": 0},
                 {"id": "crate", "c": [100, 60, 100, 90]}],
       "tokens": [{"id": "a", "x": 0, "y": 50, "disposition": 1},
                  {"id": "b", "x": 250, "y": 50, "disposition": -1},
                  {"id": "c", "x": 0, "y": 200, "disposition": 1}]}


def _low(live_server: LiveServer) -> tuple[Peer, list[str]]:
    """A gm connection with scene LOW loaded, and the flags that point a command at it."""
    peer = Peer.open(live_server.url)
    peer.hello()
    assert peer.request({"type": "scene.load", "scene": LOW})["type"] == "ack"
    return peer, ["--url", live_server.url, "--scene", "s"]


def test_query_reads_as_a_gm_reads_it(live_server: LiveServer,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The default form: the degree, the numbers and why (each reason once), only the true
    flags, and the lines in squares of the scene's grid, not pixels."""
    peer = Peer.open(live_server.url)
    peer.hello()
    scene = {**LOW, "walls": [LOW["walls"][1]]}  # the crate alone
    assert peer.request({"type": "scene.load", "scene": scene})["type"] == "ack"
    args = ["--url", live_server.url, "--scene", "s"]
    assert main(["query", "a", "b", "--lines", *args]) == 0
    out = capsys.readouterr().out
    assert out.startswith("a -> b, ranged attack (scene s, revision 1, dnd35), 25 ft apart")
    assert "cover:     cover" in out and "+4 ac, +2 reflex" in out
    assert "    +4 ac: cover\n    +2 reflex: cover, vs effects" in out
    assert "true:      can_hide, can_target, in_reach" in out
    assert "adjacent" not in out and "flanking" not in out  # false flags are not listed
    assert "lines:     " in out and "blocked by wall crate" in out
    assert "(0, 1) -> (6, 2)  blocked by wall crate" in out
    assert "(0, 1) -> (5, 1)  clear" in out and "50" not in out.split("lines:")[1]


def test_door_on_a_plain_wall_is_refused(live_server: LiveServer,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    peer, args = _low(live_server)
    assert main(["door", "crate", "open", *args]) == 1
    err = capsys.readouterr().err
    assert "wall 'crate' is not a door" in err and "its doors: gate" in err
    assert main(["door", "nothing", "open", *args]) == 1
    assert "has no wall 'nothing'" in capsys.readouterr().err
    assert peer.request({"type": "scene.get", "scene": "s"})["scene"]["revision"] == 1


def test_move_off_the_map_is_refused(live_server: LiveServer,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    peer, args = _low(live_server)
    assert main(["move", "a", "99", "99", *args]) == 1
    err = capsys.readouterr().err
    assert "off the map" in err and "10 x 6 squares" in err and "(9, 5)" in err
    assert main(["move", "a", "-1", "0", *args]) == 1
    assert main(["move", "a", "10", "0", *args]) == 1  # its right edge would be at 11
    capsys.readouterr()
    assert peer.request({"type": "scene.get", "scene": "s"})["scene"]["revision"] == 1
    assert main(["move", "a", "9", "5", *args]) == 0
    assert main(["move", "a", "12", "0", "--force", *args]) == 0


def test_load_a_scene_file(live_server: LiveServer, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    """Both forms of docs/protocol.md: a scene document, and a whole scene.load request
    with its ruleset and options; a broken file is named with its line."""
    args = ["--url", live_server.url]
    doc = tmp_path / "yard.json"
    doc.write_text(json.dumps(LOW))
    assert main(["load", str(doc), *args]) == 0
    assert "loaded scene 's' (dnd35; 3 tokens, 2 walls, 0 regions) at revision" in \
        capsys.readouterr().out
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps({"type": "scene.load", "ruleset": "pf1",
                                 "options": {"softCoverVsReach": False}, "scene": LOW}))
    assert main(["load", str(whole), "--options", '{"bigCreaturesRanged": true}', *args]) == 0
    capsys.readouterr()
    peer = Peer.open(live_server.url)
    peer.hello()
    state = peer.request({"type": "scene.get", "scene": "s"})["scene"]
    assert state["ruleset"] == "pf1"
    assert state["options"]["softCoverVsReach"] is False
    assert state["options"]["bigCreaturesRanged"] is True
    broken = tmp_path / "broken.json"
    broken.write_text('{"id": "s",\n "grid": }')
    assert main(["load", str(broken), *args]) == 1
    assert "broken.json is not JSON: line 2 column 10" in capsys.readouterr().err
    assert main(["load", str(tmp_path / "absent.json"), *args]) == 1
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**LOW, "tokens": [{"id": "a", "x": "left"}]}))
    assert main(["load", str(bad), *args]) == 1
    assert "tokens[0].x" in capsys.readouterr().err


def test_watch_filters_by_attacker(live_server: LiveServer, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    peer = Peer.open(live_server.url)
    peer.hello()
    assert peer.request({"type": "scene.load", "scene": LOW})["type"] == "ack"
    result: list[int] = []
    watcher = threading.Thread(target=lambda: result.append(main(
        ["watch", "--once", "--attacker", "c", "--url", live_server.url, "--scene", "s"])))
    asked: list[Any] = []
    subscribe = live_server.core._subscribe

    def recording(state: Any, request: Any, binary: bool) -> Any:
        asked.append(request)
        return subscribe(state, request, binary)

    monkeypatch.setattr(live_server.core, "_subscribe", recording)
    watcher.start()
    for step in range(50):
        peer.request({"type": "token.update", "scene": "s",
                      "tokens": [{"id": "b", "x": 250 + 50 * (step % 2)}]})
        watcher.join(0.1)
        if not watcher.is_alive():
            break
    assert result == [0]
    # The server filtered (it sent and computed c's rows only), not the watcher.
    assert [(r.attackers, r.targets) for r in asked] == [(["c"], None)]
    rows = [line for line in capsys.readouterr().out.splitlines()
            if line[1:2] in ("a", "b", "c") and not line.startswith(" attacker")]
    assert rows and all(line[1:].startswith("c ") for line in rows)
    assert any(line.startswith("*c") for line in rows)
    assert main(["watch", "--once", "--attacker", "zz", "--url", live_server.url,
                 "--scene", "s"]) == 1
    assert "no token zz" in capsys.readouterr().err


def test_render_table_reverse_video_on_a_terminal() -> None:
    ann = {"attacker": "a", "target": "b", "mode": "ranged", "loe": True, "cover": "none",
           "modifiers": [], "flags": {}}
    table = {("a", "b", "ranged"): ann, ("b", "a", "ranged"): {**ann, "attacker": "b",
                                                                "target": "a"}}
    text = render_table(table, 3, {("a", "b")}, color=True)
    assert "\x1b[7m*a" in text and "\x1b[7m b" not in text


def test_every_command_and_flag_says_what_it_does() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) >= {"serve", "watch", "move", "door", "query", "load", "record",
                                "replay"}
    for name, command in sub.choices.items():
        assert command.description, f"{name} has no description"
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{name} {action.dest} has no help line"
        text = command.format_help()
        defaults = [a for a in command._actions if a.option_strings and a.default not in
                    (None, False, [], argparse.SUPPRESS)]
        for action in defaults:
            assert f"(default: {action.default})" in " ".join(text.split()), \
                f"{name} {action.dest}: default not shown"


def test_port_in_use_is_one_line() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "covercast.cli", "serve", "--port",
                               str(port), "--state", ":memory:", "--no-demo"],
                              capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: port {port} is in use: is another covercast running? use --port")
    assert "Traceback" not in done.stderr
    assert errno.EADDRINUSE  # the check the server makes


def test_banner_commands_work_on_a_token_server(tmp_path: Path) -> None:
    """What `covercast serve` prints for another terminal runs as printed, token included."""
    server = subprocess.Popen(
        [sys.executable, "-m", "covercast.cli", "serve", "--port", "0", "--state", ":memory:",
         "--token", "gm secret"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "COVERCAST_TOKEN": ""})
    try:
        assert server.stdout is not None
        lines: list[str] = []
        while not lines or "covercast query" not in lines[-1]:
            lines.append(server.stdout.readline())
            assert lines[-1], lines  # the banner ended without its commands
        commands = [line.strip() for line in lines if "covercast move" in line
                    or "covercast query" in line]
        assert len(commands) == 2, lines
        for command in commands:
            env_part, rest = command.split(" .venv/bin/covercast ", 1)
            assert env_part == "COVERCAST_TOKEN='gm secret'"
            done = subprocess.run(
                [sys.executable, "-m", "covercast.cli", *shlex.split(rest)],
                capture_output=True, text=True, timeout=30,
                env={**os.environ, "COVERCAST_TOKEN": "gm secret"})
            assert done.returncode == 0, done.stderr
    finally:
        server.terminate()
        server.wait(10)


def test_serve_with_a_state_path_under_a_file_says_so_plainly(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes").write_text("a file, not a folder")
    assert main(["serve", "--no-demo", "--state", str(tmp_path / "notes" / "s.sqlite3")]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'notes'} is a file, not a folder" in err, err
    assert "Errno" not in err
