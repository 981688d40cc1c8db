"""The live overlay in a real headless browser (Debian's chromium driven by playwright): the
page served by a real server connects as an overlay, draws the demo scene, follows a token
moved over the protocol by a gm connection, never shows a hidden token until the gm shows
it, and leaves a screenshot in tests/artifacts/.

`make test` installs chromium and playwright first (`make browser`). Where they are missing
the test is skipped, unless COVERCAST_REQUIRE_BROWSER=1 (set by `make test`), where it fails.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LiveServer, Peer

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
GM, OVERLAY = "gm-secret", "overlay-secret"
HOSTILE = (0xE7, 0x21, 0x24)  # the page's colour for disposition -1
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync"]


def _browser_missing() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing (make browser installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing (make browser installs it)"
    return None


@pytest.fixture
def page() -> Iterator[Any]:
    missing = _browser_missing()
    if missing is not None:
        if os.environ.get("COVERCAST_REQUIRE_BROWSER") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=LAUNCH_ARGS,
            viewport={"width": 1280, "height": 720})
        try:
            yield context.new_page()
        finally:
            context.close()


@pytest.fixture
def server() -> Iterator[LiveServer]:
    live = LiveServer(token=GM, overlay_token=OVERLAY).start()
    yield live
    live.stop()


def _gm(server: LiveServer) -> Peer:
    gm = Peer.open(server.url)
    assert gm.hello(GM)["role"] == "gm"
    demo = json.loads(resources.files("server").joinpath("demo/demo.json").read_text())
    assert gm.request(demo)["type"] == "ack"
    reply = gm.request({"type": "token.create", "scene": "demo", "tokens": [
        {"_id": "assassin", "name": "Assassin", "x": 200, "y": 400, "disposition": -1,
         "hidden": True}]})
    assert reply["type"] == "ack", reply
    return gm


def _state(page: Any) -> dict[str, Any]:
    state: dict[str, Any] = page.evaluate("window.__covercastOverlay")
    return state


def _wait(page: Any, condition: str, what: str) -> dict[str, Any]:
    """Poll the page's debug state until the JS `condition` on `s` holds (polled from here:
    the page's Content-Security-Policy forbids the eval that wait_for_function needs)."""
    check = f"(() => {{ const s = window.__covercastOverlay; return !!s && ({condition}); }})()"
    deadline = time.monotonic() + 15
    while not page.evaluate(check):
        if time.monotonic() > deadline:
            raise AssertionError(f"the page never showed {what}; its state: {_state(page)}")
        page.wait_for_timeout(50)
    return _state(page)


def _pixel(page: Any, state: dict[str, Any], x: float, y: float) -> tuple[int, int, int]:
    """The canvas colour at scene point (x, y)."""
    v = state["view"]
    px = round((v["ox"] + x * v["scale"]) * v["dpr"])
    py = round((v["oy"] + y * v["scale"]) * v["dpr"])
    rgba = page.evaluate(
        "([x, y]) => Array.from(document.getElementById('map').getContext('2d')"
        ".getImageData(x, y, 1, 1).data)", [px, py])
    return rgba[0], rgba[1], rgba[2]


def _near(colour: tuple[int, int, int], want: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 40 for a, b in zip(colour, want, strict=True))


def test_overlay_page_follows_a_moved_token_and_never_shows_hidden_ones(
        page: Any, server: LiveServer) -> None:
    gm = _gm(server)
    try:
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.goto(f"{server.http_url}/overlay?scene=demo&attacker=archer&target=wizard"
                  f"#token={OVERLAY}")
        first = _wait(page, "s.role === 'overlay' && s.sceneRevision >= 2 && s.pair !== null "
                            "&& s.annotationCount > 0", "the demo scene with the pair")
        # The viewer never got the hidden assassin: not drawn, in no annotation.
        assert "assassin" not in first["tokens"]
        assert "assassin" not in first["annotationTokens"]
        assert set(first["tokens"]) == {"fighter", "rogue", "wizard", "cleric", "ogre",
                                        "goblin", "archer", "scout"}
        assert first["pair"]["lines"] > 0
        goblin_before = (550, 450)  # the goblin's centre (500, 400, one 100 px square)
        assert _near(_pixel(page, first, *goblin_before), HOSTILE)

        moved = gm.request({"type": "token.update", "scene": "demo",
                            "tokens": [{"_id": "goblin", "x": 700, "y": 600}]})
        assert moved["type"] == "ack", moved
        rev = moved["revision"]
        after = _wait(page, f"s.tokens.goblin.x === 700 && s.tokens.goblin.y === 600 && "
                            f"s.annotationRevision >= {rev} && s.pair && "
                            f"s.pair.revision >= {rev}", "the goblin's move")
        assert after["draws"] > first["draws"]
        assert _near(_pixel(page, after, 750, 650), HOSTILE)
        assert not _near(_pixel(page, after, *goblin_before), HOSTILE)

        # The gm shows the assassin: it appears; hides it again: it is gone again.
        shown = gm.request({"type": "token.update", "scene": "demo",
                            "tokens": [{"_id": "assassin", "hidden": False}]})
        state = _wait(page, f"s.sceneRevision >= {shown['revision']} && "
                            "'assassin' in s.tokens && s.annotationTokens.includes('assassin')",
                      "the assassin once shown")
        assert _near(_pixel(page, state, 250, 450), HOSTILE)
        hidden = gm.request({"type": "token.update", "scene": "demo",
                             "tokens": [{"_id": "assassin", "hidden": True}]})
        _wait(page, f"s.sceneRevision >= {hidden['revision']} && !('assassin' in s.tokens) "
                    "&& !s.annotationTokens.includes('assassin')", "the assassin hidden again")

        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "overlay.png"))
        assert (ARTIFACTS / "overlay.png").stat().st_size > 10_000
        assert not [c for c in console if c.startswith("error")], console
    finally:
        gm.close()


def test_overlay_transparent_background_leaves_the_map_see_through(
        page: Any, server: LiveServer) -> None:
    gm = _gm(server)
    try:
        page.goto(f"{server.http_url}/overlay?scene=demo&transparent=1&attacker=archer"
                  f"&target=goblin#token={OVERLAY}")
        state = _wait(page, "s.sceneRevision >= 2 && s.pair !== null", "the demo scene")
        # An empty floor square (scene 150, 150) is see-through; a token is not.
        v = state["view"]
        alpha = page.evaluate(
            "([x, y]) => document.getElementById('map').getContext('2d')"
            ".getImageData(x, y, 1, 1).data[3]",
            [round((v["ox"] + 150 * v["scale"]) * v["dpr"]) + 3,
             round((v["oy"] + 150 * v["scale"]) * v["dpr"]) + 3])
        assert alpha == 0
        assert _near(_pixel(page, state, 550, 450), HOSTILE)
        for element in ("document.documentElement", "document.body"):
            assert page.evaluate(f"getComputedStyle({element}).backgroundColor") == (
                "rgba(0, 0, 0, 0)")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "overlay-transparent.png"), omit_background=True)
    finally:
        gm.close()


def test_overlay_with_a_wrong_token_shows_access_denied(page: Any, server: LiveServer) -> None:
    page.goto(f"{server.http_url}/overlay?scene=demo#token=wrong")
    _wait(page, "document.getElementById('status').textContent.includes('access denied') "
                "&& !s.connected && s.sceneRevision === 0", "access denied")
