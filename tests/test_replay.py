"""`covercast record` and `covercast replay` against the real server on 127.0.0.1: a session
recorded through the proxy replays identically on a fresh server, timings scale with the
speed, --check catches a changed expectation, and malformed recordings are refused clearly."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest

from covercast import recording
from covercast.cli import main
from covercast.client import Client, ServerError
from covercast.replay import Progress, compare, record, replay, track
from tests.conftest import LiveServer

SCENE: dict[str, Any] = {
    "id": "s", "grid": {"type": 1, "size": 50, "distance": 5},
    "walls": [{"_id": "gate", "c": [150, 0, 150, 150], "door": 1, "ds": 0},
              {"_id": "low", "c": [50, 200, 50, 300], "flags": {"covercast": {"cover": "low"}}}],
    "tokens": [{"_id": "a", "x": 0, "y": 50, "disposition": 1},
               {"_id": "b", "x": 250, "y": 50, "disposition": -1},
               {"_id": "c", "x": 100, "y": 250, "disposition": -1}],
}
TOKEN = "s3cret"


async def _session(url: str) -> None:
    """What a VTT does: load, subscribe, move, open a door, ask, make a mistake."""
    async with Client(url, token=TOKEN, name="pytest-vtt") as cc:
        await cc.load_scene(SCENE)
        sub = await cc.subscribe("s", modes=["ranged", "melee"])
        for x, y in ((200, 100), (200, 250), (100, 250)):  # behind the gate, and back
            ack = await cc.move_token("s", "c", x, y)
            await sub.wait_for(ack.revision)
        await cc.update_walls("s", [{"_id": "gate", "ds": 1}])
        await cc.query("s", "a", "b", lines=True)
        await cc.area("s", {"t": "circle", "x": 100, "y": 100, "distance": 10})
        with pytest.raises(ServerError):
            await cc.move_token("s", "nobody", 0, 0)
        await cc.update_tokens("s", [{"_id": "b", "x": 300}, {"_id": "a", "y": 100}])
        ack = await cc.update_walls("s", [{"_id": "gate", "ds": 0}])
        await sub.wait_for(ack.revision)


def _record(tmp_path: Path) -> Path:
    """Record `_session` through `covercast record`'s proxy to a server with a token."""
    upstream = LiveServer(token=TOKEN).start()
    out = tmp_path / "session.jsonl"

    async def go() -> recording.Recording:
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        recorder = asyncio.create_task(record(upstream.url, out, port=0,
                                              ready=ready.set_result))
        await _session(await ready)
        outcome = await asyncio.wait_for(recorder, 10)
        assert outcome.failure is None and outcome.messages > 20
        return recording.read(out)
    try:
        asyncio.run(go())
    finally:
        upstream.stop()
    return out


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    return _record(tmp_path)


def _replay_cli(path: Path, server: LiveServer, *extra: str) -> int:
    return main(["replay", str(path), "--url", server.url, "--token", TOKEN, "--quiet",
                 *extra])


def test_recording_holds_both_directions_and_no_token(recorded: Path) -> None:
    text = recorded.read_text()
    assert TOKEN not in text
    rec = recording.read(recorded)
    assert rec.header.format == "covercast-recording" and rec.header.protocol == 1
    kinds = [(e.dir, (e.msg or {}).get("type")) for e in rec.entries]
    assert kinds[:2] == [("send", "hello"), ("recv", "welcome")]
    assert ("send", "cover.query") in kinds and ("recv", "cover.result") in kinds
    assert ("recv", "error") in kinds
    pushes = [e for e in rec.entries if e.msg and e.msg.get("type") == "annotations"
              and not e.msg["full"]]
    assert len(pushes) >= 4
    assert [e.t for e in rec.entries] == sorted(e.t for e in rec.entries)


def test_replay_on_a_fresh_server_gives_identical_annotations(
        recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fresh = LiveServer(token=TOKEN).start()
    out = tmp_path / "recordings" / "replayed.jsonl"  # the folder is made
    try:
        code = _replay_cli(recorded, fresh, "--as-fast-as-possible", "--out", str(out),
                           "--check")
    finally:
        fresh.stop()
    captured = capsys.readouterr()
    assert code == 0, captured
    assert "check: same as the recording" in captured.out
    # The output file is itself a recording, with the same replies and final tables.
    rec, got = track(recording.read(recorded).entries), track(recording.read(out).entries)
    assert len(got.replies) == len(rec.replies) == 12
    assert [r["type"] for r in got.replies if r] == [r["type"] for r in rec.replies if r]
    assert list(got.history) == list(rec.history) == [("s", 1)]
    assert got.table("s", 1) == rec.table("s", 1)
    assert len(rec.table("s", 1)) == 12  # 3 tokens, 2 modes


def test_replay_against_a_server_that_already_has_the_scene(recorded: Path) -> None:
    """Revisions are compared relative to each run's first one: a second replay against the
    same server (where the scene continues from revision 8) still matches."""
    server = LiveServer(token=TOKEN).start()
    try:
        assert _replay_cli(recorded, server, "--speed", "0", "--check") == 0
        assert server.core.scenes["s"].revision > 1
        assert _replay_cli(recorded, server, "--speed", "0", "--check") == 0
    finally:
        server.stop()


def test_check_fails_on_a_changed_expectation(recorded: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    lines = recorded.read_text().splitlines()
    changed = []
    for number, line in enumerate(lines, start=1):
        entry = json.loads(line)
        msg = entry.get("msg", {})
        if msg.get("type") == "cover.result":
            msg["annotation"]["cover"] = "improved"
            query_line = number - 1  # the request just before its reply
            while '"cover.query"' not in lines[query_line - 1]:
                query_line -= 1
            changed.append(query_line)
        elif (msg.get("type") == "annotations" and not msg["full"] and msg["annotations"]
              and len(changed) == 1):
            first = msg["annotations"][0]
            if msg.get("form") == "compact":  # the client asked for the compact form
                first[3] = not first[3]
            else:
                first["loe"] = not first["loe"]
            changed.append(msg["revision"])
        lines[number - 1] = json.dumps(entry)
    assert len(changed) == 2
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines) + "\n")
    fresh = LiveServer(token=TOKEN).start()
    try:
        code = _replay_cli(edited, fresh, "--speed", "0", "--check")
    finally:
        fresh.stop()
    out = capsys.readouterr().out
    assert code == 1
    assert f"(line {changed[0]}, cover.query a -> b)" in out
    assert "$.annotation.cover: recorded 'improved', replayed 'none'" in out
    assert f"at revision +{changed[1] - 1}:" in out and ".loe: recorded" in out
    assert "Traceback" not in out


LAKE: dict[str, Any] = {
    "id": "lake", "grid": {"type": 1, "size": 100, "distance": 5},
    "regions": [{"id": "water", "kind": "water", "surface": 10,
                 "points": [0, 0, 1000, 0, 1000, 1000, 0, 1000]}],
    "tokens": [{"_id": "diver", "x": 300, "y": 300, "disposition": 1,
                "flags": {"covercast": {"con": 1, "fortitude": 4}}},
               {"_id": "ranger", "x": 1200, "y": 300, "disposition": 1}],
}


def test_server_rolled_dice_fall_the_same_in_a_replay(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A turn.end whose save the server rolled is replayed with the seed the recording's
    reply reported; the air news, which comes without a new revision, is waited for."""
    upstream = LiveServer().start()
    out = tmp_path / "drowning.jsonl"

    async def go() -> None:
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        recorder = asyncio.create_task(record(upstream.url, out, port=0,
                                              ready=ready.set_result))
        async with Client(await ready) as cc:
            await cc.load_scene(LAKE, ruleset="degrees")
            sub = await cc.subscribe("lake")
            for _ in range(3):  # out of air, then saves the server rolls (and passes)
                entry = await cc.turn_end("lake", "diver", spoke=True, fortitude=30)
                while sub.air.get("diver") != entry:
                    await anext(sub)
            assert entry.seed is not None and entry.steps[-1].d20 is not None
        await asyncio.wait_for(recorder, 10)
    try:
        asyncio.run(go())
    finally:
        upstream.stop()
    recorded = recording.read(out)
    seeds = [e.msg["breath"][0].get("seed") for e in recorded.entries
             if e.msg and e.msg["type"] == "breath"]
    assert all(isinstance(seed, int) for seed in seeds) and len(seeds) == 3
    fresh = LiveServer().start()
    replayed = tmp_path / "replayed.jsonl"
    try:
        assert main(["replay", str(out), "--url", fresh.url, "--speed", "0", "--quiet",
                     "--check", "--out", str(replayed)]) == 0, capsys.readouterr()
    finally:
        fresh.stop()
    assert "check: same as the recording" in capsys.readouterr().out
    sent = [e.msg for e in recording.read(replayed).entries
            if e.dir == "send" and e.msg and e.msg["type"] == "turn.end"]
    assert [m["seed"] for m in sent] == seeds
    got = track(recording.read(replayed).entries)
    assert got.table("lake", 1)["air of diver"] == track(recorded.entries).table(
        "lake", 1)["air of diver"]


def test_server_rolled_friendly_fire_falls_the_same_in_a_replay(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A friendlyfire.resolve whose dice the server rolled (no seed sent) is replayed with
    the seed the recorded reply reported, so --check finds the same dice and outcome."""
    field = {"id": "hexfield", "grid": {"type": 2, "size": 100, "distance": 5},
             "walls": [{"id": "w", "c": [540, 0, 540, 120]}],
             "tokens": [{"id": "a", "x": 50, "y": 0, "disposition": 1},
                        {"id": "b", "x": 550, "y": 0, "disposition": -1},
                        {"id": "c", "x": 650, "y": 0, "disposition": 1}]}
    upstream = LiveServer().start()
    out = tmp_path / "volley.jsonl"

    async def go() -> None:
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        recorder = asyncio.create_task(record(upstream.url, out, port=0,
                                              ready=ready.set_result))
        async with Client(await ready) as cc:
            await cc.load_scene(field, ruleset="realms")
            for _ in range(3):
                shot = await cc.friendly_fire("hexfield", "a", [{"target": "b", "count": 2}],
                                              {"b": 30, "c": 10})
                assert shot.seed is not None and shot.attacks[0].rolled[:2] == ["d20", "d20"]
        await asyncio.wait_for(recorder, 10)
    try:
        asyncio.run(go())
    finally:
        upstream.stop()
    recorded = recording.read(out)
    seeds = [e.msg["seed"] for e in recorded.entries
             if e.msg and e.msg["type"] == "friendlyfire.result"]
    assert len(seeds) == 3 and all(isinstance(seed, int) for seed in seeds)
    fresh = LiveServer().start()
    replayed = tmp_path / "replayed.jsonl"
    try:
        assert main(["replay", str(out), "--url", fresh.url, "--speed", "0", "--quiet",
                     "--check", "--out", str(replayed)]) == 0, capsys.readouterr()
    finally:
        fresh.stop()
    assert "check: same as the recording" in capsys.readouterr().out
    sent = [e.msg for e in recording.read(replayed).entries
            if e.dir == "send" and e.msg and e.msg["type"] == "friendlyfire.resolve"]
    assert [m["seed"] for m in sent] == seeds


def test_replay_at_speed_ten_follows_the_scaled_schedule(tmp_path: Path) -> None:
    hello = {"type": "hello", "protocol": 1, "client": "script", "id": 0}
    sends = [(0.0, hello), (0.0, {"type": "scene.load", "scene": SCENE, "id": 1}),
             (0.5, {"type": "subscribe", "scene": "s", "id": 2}),
             (1.2, {"type": "token.update", "scene": "s", "tokens": [{"_id": "c", "x": 200}],
                    "id": 3}),
             (2.0, {"type": "cover.query", "scene": "s", "attacker": "a", "target": "c",
                    "id": 4}),
             (3.0, {"type": "scene.get", "scene": "s", "id": 5})]
    path = tmp_path / "script.jsonl"
    header = {"format": "covercast-recording", "version": 1, "protocol": 1,
              "created": "2026-11-30T00:00:00Z"}
    path.write_text("\n".join(json.dumps(x) for x in [
        header, *({"t": t, "dir": "send", "msg": m} for t, m in sends)]) + "\n")
    server = LiveServer().start()
    try:
        outcome = asyncio.run(replay(recording.read(path), server.url, speed=10))
    finally:
        server.stop()
    assert outcome.incomplete == () and outcome.closed is None
    sent = [e for e in outcome.entries if e.dir == "send"]
    assert [e.msg for e in sent] == [m for _, m in sends]
    # Never early (each at least its recorded time / 10), in order, and not in real time.
    for e, (t, _) in zip(sent, sends, strict=True):
        assert e.t >= t / 10 - 0.005
    assert [e.t for e in outcome.entries] == sorted(e.t for e in outcome.entries)
    assert sent[-1].t < 2.0  # 0.3 s scaled; 3.0 s would be real time (6x margin for load)
    replies = [e.msg for e in outcome.entries if e.dir == "recv" and e.msg]
    assert [r["type"] for r in replies if "id" in r] == [
        "welcome", "ack", "annotations", "ack", "cover.result", "scene"]
    # Without ids, replies are still told from pushes by their order and type.
    def strip(e: recording.Entry) -> recording.Entry:
        return recording.Entry(e.t, e.dir, {k: v for k, v in (e.msg or {}).items()
                                            if k != "id"})
    tracker = track([strip(e) for e in outcome.entries])
    assert [r["type"] if r else None for r in tracker.replies] == [
        "welcome", "ack", "annotations", "ack", "cover.result", "scene"]


def test_progress_bar_draws_on_a_terminal(recorded: Path) -> None:
    server = LiveServer(token=TOKEN).start()
    stream = io.StringIO()
    rec = recording.read(recorded)
    try:
        asyncio.run(replay(rec, server.url, speed=0, token=TOKEN,
                           progress=Progress(len(rec.sends), 0, stream, enabled=True)))
    finally:
        server.stop()
    text = stream.getvalue()
    assert f"[{'#' * 30}] {len(rec.sends)}/{len(rec.sends)} sent" in text
    assert text.endswith("\n") and "done" in text.split("\r")[-1]
    silent = io.StringIO()
    assert not Progress(3, 1.0, silent).enabled  # not a terminal: no bar


def test_an_undecodable_frame_is_recorded_and_replayed(tmp_path: Path) -> None:
    frames: list[recording.Entry] = [
        recording.entry_from_frame(0, "send", json.dumps(
            {"type": "hello", "protocol": 1, "client": "x"})),
        recording.entry_from_frame(0.01, "send", '{"type": "scene.get", '),
        recording.entry_from_frame(0.02, "send", b"\xc1"),
    ]
    assert frames[0].frame == "text" and frames[1].raw is not None and frames[2].b64
    path = tmp_path / "raw.jsonl"
    with path.open("w") as f:
        w = recording.Writer(f, "test")
        for e in frames:
            w.entry(e)
    server = LiveServer().start()
    try:
        outcome = asyncio.run(replay(recording.read(path), server.url, speed=0))
    finally:
        server.stop()
    errors = [e.msg for e in outcome.entries if e.msg and e.msg["type"] == "error"]
    assert [e["code"] for e in errors] == ["bad_frame", "bad_frame"]
    assert compare(outcome.entries, outcome.entries).ok


BAD_FILES = [
    ("", "empty file"),
    ('{"format": "covercast-recording", "version": 1, "protocol": 1, "created": "x"}\n'
     '{"t": 0, "dir": "send", "msg": {"type": "hello"}}\n{"t": 0.1, "dir": "send", "msg": {',
     "line 3: not valid JSON"),
    ('{"format": "covercast-recording", "version": 1, "protocol": 1, "created": "x"}\n'
     '{"t": 0, "dir": "sent", "msg": {"type": "hello"}}',
     "line 2: $.dir: Invalid enum value 'sent'"),
    ('{"format": "covercast-recording", "version": 1, "protocol": 1, "created": "x"}\n\n'
     '{"dir": "send", "msg": {"type": "hello"}}',
     "line 3: $: Object missing required field `t`"),
    ('{"format": "covercast-recording", "version": 1, "protocol": 1, "created": "x"}\n'
     '{"t": "soon", "dir": "send", "msg": {"type": "hello"}}', "line 2: $.t: Expected `float`"),
    ('{"format": "covercast-recording", "version": 1, "protocol": 1, "created": "x"}\n'
     '{"t": 1, "dir": "send", "msg": {"type": "hello"}}\n'
     '{"t": 0.5, "dir": "recv", "msg": {"type": "welcome"}}',
     "line 3: $.t: 0.5 is earlier than the line before (1.0)"),
    ('{"format": "covercast-recording", "version": 1, "protocol": 1, "created": "x"}\n'
     '{"t": 0, "dir": "send", "msg": {"scene": "s"}}', "line 2: $.msg.type"),
    ('{"format": "covercast-recording", "version": 1, "protocol": 1, "created": "x"}\n'
     '{"t": 0, "dir": "send"}', "line 2: a message line needs exactly one of msg, raw, b64"),
    ('{"format": "covercast-recording", "version": 1, "protocol": 1, "created": "x"}\n'
     '{"t": 0, "dir": "send", "msg": {"type": "hello"}, "speed": 2}',
     "line 2: $.speed: unknown field 'speed' (value 2)"),
    ('{"format": "har", "version": 1, "protocol": 1, "created": "x"}',
     "line 1: $.format: expected 'covercast-recording', got 'har'"),
    ('{"format": "covercast-recording", "version": 1, "protocol": 2, "created": "x"}',
     "line 1: $.protocol: recorded with protocol 2; this covercast speaks 1"),
    ('[1, 2]', "line 1: expected a JSON object (the header), got [1, 2]"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_FILES)
def test_malformed_recordings_are_refused_by_line(
        text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    # No server is needed: the file is refused before connecting.
    assert main(["replay", str(path), "--url", "ws://127.0.0.1:9", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and expected in err, err
    assert "Traceback" not in err


def test_missing_file_and_unreachable_server(recorded: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "/nonexistent/x.jsonl", "--quiet"]) == 2
    assert "cannot read it" in capsys.readouterr().err
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b'{"format": "\xff"}\n')
    assert main(["replay", str(binary), "--quiet"]) == 2
    assert "not UTF-8 text (invalid start byte at byte 12)" in capsys.readouterr().err
    assert main(["replay", str(recorded), "--url", "ws://127.0.0.1:9", "--quiet"]) == 2
    assert "cannot reach ws://127.0.0.1:9" in capsys.readouterr().err
    assert main(["replay", str(recorded), "--speed", "-1", "--quiet"]) == 2
    assert "--speed must be" in capsys.readouterr().err
    (tmp_path / "notes").write_text("a file where the folder would be")
    blocked = tmp_path / "notes" / "out.jsonl"
    assert main(["replay", str(recorded), "--out", str(blocked), "--quiet"]) == 2
    assert f"cannot write {blocked}" in capsys.readouterr().err


def test_recorder_takes_one_connection_and_forwards_closes(tmp_path: Path) -> None:
    upstream = LiveServer(token=TOKEN).start()
    out = tmp_path / "denied.jsonl"

    async def go() -> None:
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        recorder = asyncio.create_task(record(upstream.url, out, port=0,
                                              ready=ready.set_result))
        url = await ready
        from covercast.client import ConnectionLost

        # A wrong token: the server's close (1008 access denied) reaches the client.
        with pytest.raises(ConnectionLost, match="1008 access denied"):
            async with Client(url, token="wrong"):
                pass
        outcome = await asyncio.wait_for(recorder, 10)
        assert outcome.failure is None
    try:
        asyncio.run(go())
    finally:
        upstream.stop()
    rec = recording.read(out)
    assert [e.msg and e.msg["type"] for e in rec.entries] == ["hello"]
    assert "wrong" not in out.read_text()


def test_a_recording_cut_before_its_last_delta_still_checks(
        recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A client that closes right after its last change leaves no last delta in the file:
    that is not a regression, the tables are compared up to where the recording stops."""
    lines = recorded.read_text().splitlines()
    last_push = max(k for k, line in enumerate(lines) if '"full":false' in line)
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(lines[:last_push] + lines[last_push + 1:]) + "\n")
    # ... but a delta that is there and differs is still a difference.
    wrong = tmp_path / "wrong.jsonl"
    entry = json.loads(lines[last_push])
    dropped = entry["msg"]["annotations"].pop(0)  # the recording kept its older value
    if entry["msg"].get("form") == "compact":  # the client asked for the compact form
        dropped = dict(zip(("attacker", "target", "mode", "loe", "cover"), dropped[:5],
                           strict=True))
    wrong.write_text("\n".join([*lines[:last_push], json.dumps(entry),
                                *lines[last_push + 1:]]) + "\n")
    fresh = LiveServer(token=TOKEN).start()
    try:
        assert _replay_cli(cut, fresh, "--speed", "0", "--check") == 0
        out = capsys.readouterr().out
        assert "check: note: scene 's', subscription 1: the recording stops at revision +5, " \
               "before the delta of +6" in out
        assert "check: same as the recording" in out
        assert _replay_cli(wrong, fresh, "--speed", "0", "--check") == 1
        out = capsys.readouterr().out
        key = f"{dropped['attacker']} -> {dropped['target']} ({dropped['mode']})"
        assert f"scene 's', subscription 1, at revision +6:\n  {key}.cover: recorded " \
               f"'none', replayed {dropped['cover']!r}" in out
    finally:
        fresh.stop()


def test_record_command_reports_what_went_wrong(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes").write_text("a file where the folder would be")
    assert main(["record", "--out", str(tmp_path / "notes" / "dir.jsonl")]) == 2
    assert "cannot write" in capsys.readouterr().err
    assert main(["record", "--out", str(tmp_path / "x.jsonl"), "--listen", "nowhere"]) == 2
    assert "--listen wants HOST:PORT, got 'nowhere'" in capsys.readouterr().err

    async def unreachable() -> None:
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        recorder = asyncio.create_task(record("ws://127.0.0.1:9", tmp_path / "y.jsonl",
                                              port=0, ready=ready.set_result))
        from covercast.client import ConnectionLost

        with pytest.raises(ConnectionLost, match="1011"):
            async with Client(await ready):
                pass
        outcome = await asyncio.wait_for(recorder, 10)
        assert outcome.failure is not None and "cannot reach ws://127.0.0.1:9" in outcome.failure
    asyncio.run(unreachable())


def test_replay_reports_a_server_that_closes(tmp_path: Path, live_server: LiveServer,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "no-hello.jsonl"
    path.write_text(json.dumps({"format": "covercast-recording", "version": 1, "protocol": 1,
                                "created": "x"}) + "\n"
                    + json.dumps({"t": 0, "dir": "send",
                                  "msg": {"type": "scene.get", "scene": "s"}}) + "\n")
    assert main(["replay", str(path), "--url", live_server.url, "--quiet",
                 "--timeout", "5"]) == 1
    err = capsys.readouterr().err
    assert "the server closed the connection: 1008 expected hello" in err
    assert "incomplete: 1 request(s) got no reply" in err


def test_a_viewer_session_replays_with_its_role(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A player's session (hidden tokens filtered) checks with a player's token, and fails
    with the gm's, which sees the hidden token."""
    scene = {**SCENE, "tokens": [*SCENE["tokens"],
                                 {"_id": "lurker", "x": 300, "y": 250, "hidden": True}]}

    async def prepare(url: str) -> None:
        async with Client(url, token="gm") as gm:
            await gm.load_scene(scene)

    async def session(url: str) -> None:
        async with Client(url, token="player") as player:
            assert player.welcome.role == "player"
            sub = await player.subscribe("s")
            assert not any("lurker" in key for key in sub.table)
            await player.query("s", "a", "b")

    def server() -> LiveServer:
        live = LiveServer(token="gm", player_token="player").start()
        asyncio.run(prepare(live.url))
        return live

    upstream = server()
    out = tmp_path / "player.jsonl"

    async def go() -> None:
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        recorder = asyncio.create_task(record(upstream.url, out, port=0,
                                              ready=ready.set_result))
        await session(await ready)
        await asyncio.wait_for(recorder, 10)
    try:
        asyncio.run(go())
    finally:
        upstream.stop()
    fresh = server()
    try:
        args = ["replay", str(out), "--url", fresh.url, "--speed", "0", "--quiet", "--check"]
        assert main([*args, "--token", "player"]) == 0
        assert "check: same as the recording" in capsys.readouterr().out
        assert main([*args, "--token", "gm"]) == 1
        out_text = capsys.readouterr().out
        assert "$.role: recorded 'player', replayed 'gm'" in out_text
        assert "lurker -> a (melee): not in the recording, replayed cover" in out_text
    finally:
        fresh.stop()
