"""The `covercast` CLI client commands against the real server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from covercast.cli import main, render_table
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
    assert main(["query", "a", "b", *args]) == 0
    assert json.loads(capsys.readouterr().out)["cover"] == "total"
    assert main(["door", "gate", "open", *args]) == 0
    capsys.readouterr()
    assert main(["query", "a", "b", "--lines", *args]) == 0
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


def test_serve_with_a_state_path_under_a_file_says_so_plainly(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes").write_text("a file, not a folder")
    assert main(["serve", "--no-demo", "--state", str(tmp_path / "notes" / "s.sqlite3")]) == 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'notes'} is a file, not a folder" in err, err
    assert "Errno" not in err
