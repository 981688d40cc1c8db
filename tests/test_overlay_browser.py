"""The live overlay in a real headless browser (Debian's chromium driven by playwright): the
page served by a real server connects as an overlay, draws the demo scene, follows a token
moved over the protocol by a gm connection, never shows a hidden token until the gm shows
it, and leaves a screenshot in tests/artifacts/. On hex scenes (all four Foundry layouts) it
draws the hex grid and every token's occupied hexes as geometry/hex.py computes them, hits
clicks on those hexes, marks flanking inside the hex and shows realms' panel; its JS port
of the hex formulas (clients/overlay/hex.js) is compared with geometry/hex.py directly.

The browser is $CHROMIUM, else the first chromium or chrome on PATH. `make test` installs
playwright (and, as root, Debian's chromium) first (`make browser`). Where they are missing
the test is skipped, unless COVERCAST_REQUIRE_BROWSER=1 (set by `make test` whenever a
chromium is there, and in CI), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import shapely

from geometry import hex as hexgrid
from geometry.model import Grid, GridKind
from tests.conftest import LiveServer, Peer

# The same search as the Makefile's (which also looks in macOS's Applications and passes
# what it found as $CHROMIUM), so the test and `make test`'s note agree.
CHROMIUM = os.environ.get("CHROMIUM") or next(
    (found for name in ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome")
     if (found := shutil.which(name))), "")
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
GM, OVERLAY = "gm-secret", "overlay-secret"
HOSTILE = (0xE7, 0x21, 0x24)  # the page's colour for disposition -1
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync"]


def _browser_missing() -> str | None:
    if not CHROMIUM or not Path(CHROMIUM).exists():
        where = f"at {CHROMIUM}" if CHROMIUM else "on PATH"
        return (f"no chromium {where} ('sudo make browser' installs one, or set "
                "CHROMIUM=/path/to/chromium)")
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
        # It follows the selected attacker's pairs only (the server sends no others).
        assert first["subscription"] == {"attackers": ["archer"]}
        assert first["annotationAttackers"] == ["archer"]
        assert set(first["tokens"]) == {"fighter", "rogue", "wizard", "cleric", "ogre",
                                        "goblin", "archer", "scout"}
        assert first["pair"]["lines"] > 0
        # The goblin's disc (square 500, 400), below the pair's lines that now cross it.
        goblin_before = (550, 485)
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


# -- hex scenes ------------------------------------------------------------------------------

NEUTRAL = (0xF1, 0xD8, 0x36)  # the page's colour for disposition 0
BACKGROUND = (0x22, 0x25, 0x2D)  # the map's floor
#: A realms shot on each layout with three-quarters cover and a bystander next to the target
#: (so friendly fire): archer in cell (1, 0), bandit in (1, 4), squire in (2, 4), a
#: three-hex ogre (2 x 2, ELLIPSE_1) in (3, 0); the wall covers most of the bandit.
HEX_WALLS = {2: [380, 20, 380, 172], 5: [330, 50, 330, 170]}


def _hex_layout(grid_type: int) -> hexgrid.HexLayout:
    return hexgrid.HexLayout.of(Grid(GridKind(grid_type), 100.0, 5.0, "ft"))


def _hex_token(layout: hexgrid.HexLayout, tid: str, cell: tuple[int, int], disposition: int,
               width: float = 1, height: float = 1, shape: int = 4) -> dict[str, Any]:
    x, y = hexgrid.token_position(layout, cell, width, height, shape)
    return {"_id": tid, "name": tid.title(), "x": x, "y": y, "width": width, "height": height,
            "shape": shape, "disposition": disposition}


def _hex_scene(gm: Peer, grid_type: int) -> dict[str, dict[str, Any]]:
    layout = _hex_layout(grid_type)
    tokens = [_hex_token(layout, "archer", (1, 0), 1),
              _hex_token(layout, "bandit", (1, 4), -1),
              _hex_token(layout, "squire", (2, 4), 1),
              _hex_token(layout, "ogre", (3, 0), 0, 2, 2, hexgrid.ELLIPSE_1)]
    reply = gm.request({"type": "scene.load", "ruleset": "realms", "scene": {
        "_id": "hex", "grid": {"type": grid_type, "size": 100},
        "walls": [{"_id": "wall", "c": HEX_WALLS[grid_type]}], "tokens": tokens}})
    assert reply["type"] == "ack", reply
    return {t["_id"]: t for t in tokens}


def _footprint(layout: hexgrid.HexLayout, t: dict[str, Any]) -> hexgrid.Footprint:
    return hexgrid._footprint(layout, t["x"], t["y"], t["width"], t["height"], t["shape"])


def _click(page: Any, state: dict[str, Any], x: float, y: float) -> None:
    v = state["view"]
    page.mouse.click(v["ox"] + x * v["scale"], v["oy"] + y * v["scale"])


@pytest.mark.parametrize("grid_type", [2, 5], ids=["HEXODDR", "HEXEVENQ"])
def test_overlay_draws_hex_grids_and_hex_tokens_like_foundry(
        page: Any, server: LiveServer, grid_type: int) -> None:
    layout = _hex_layout(grid_type)
    gm = Peer.open(server.url)
    assert gm.hello(GM)["role"] == "gm"
    try:
        tokens = _hex_scene(gm, grid_type)
        console: list[str] = []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
        page.goto(f"{server.http_url}/overlay?scene=hex&attacker=archer&target=bandit"
                  f"#token={OVERLAY}")
        state = _wait(page, "s.sceneRevision >= 1 && s.pair !== null && s.annotationCount > 0",
                      "the hex scene with the pair")
        assert state["gridType"] == grid_type and state["pair"]["lines"] > 0
        assert state["pair"]["cover"] == "three_quarters"

        # The bandit's hex: a point near the hex's corner that sticks out of the token's
        # old square (grid size x grid size from its top-left) is drawn red; the square's
        # top-left corner, outside the hex, is not.
        bandit = _footprint(layout, tokens["bandit"])
        assert bandit.cells == ((1, 4),)
        x, y = tokens["bandit"]["x"], tokens["bandit"]["y"]
        cx, cy = bandit.centre
        out_of_square = [(vx, vy) for vx, vy in hexgrid.vertices(layout, 1, 4)
                         if vx > x + 100 or vy > y + 100]
        assert len(out_of_square) == 1  # the bottom corner (rows) or the right one (columns)
        vx, vy = out_of_square[0]
        inside = (cx + 0.75 * (vx - cx), cy + 0.75 * (vy - cy))
        corner = (x + 6, y + 6)
        assert bandit.polygon.contains(shapely.Point(inside))
        assert not bandit.polygon.buffer(10).contains(shapely.Point(corner))
        assert _near(_pixel(page, state, *inside), HOSTILE)
        assert _near(_pixel(page, state, cx, cy), HOSTILE)
        assert not _near(_pixel(page, state, *corner), HOSTILE)
        # The page's token centre is Foundry's (geometry/hex.py token_centre).
        for tid, t in tokens.items():
            got = state["tokens"][tid]["centre"]
            want = _footprint(layout, t).centre
            assert got == pytest.approx(want, abs=1e-6), tid

        # The three-hex ogre: every one of its hexes is yellow; points of its bounding box
        # well outside the hexes are not.
        ogre = _footprint(layout, tokens["ogre"])
        assert len(ogre.cells) == 3
        for px, py in ogre.cell_centres.tolist():
            assert _near(_pixel(page, state, px, py), NEUTRAL), (px, py)
        x0, y0, x1, y1 = ogre.bounds
        outside = [(px, py) for px in np.linspace(x0 + 4, x1 - 4, 9)
                   for py in np.linspace(y0 + 4, y1 - 4, 9)
                   if not ogre.polygon.buffer(10).contains(shapely.Point(px, py))
                   and py < y1 - 10]  # the name is written under the bounding box
        assert len(outside) >= 4
        for px, py in outside:
            assert not _near(_pixel(page, state, px, py), NEUTRAL), (px, py)

        # The grid is Foundry's: an empty hex's corner, where three grid lines meet, is
        # lighter than the floor at its centre (and lies on no square-grid line).
        empty = (2, 2)
        assert all(empty not in _footprint(layout, t).cells for t in tokens.values())
        (ex,), (ey,) = hexgrid.centre_point(layout, np.array([empty[0]]), np.array([empty[1]]))
        vx, vy = next((vx, vy) for vx, vy in hexgrid.vertices(layout, *empty).tolist()
                      if min(vx % 100, 100 - vx % 100, vy % 100, 100 - vy % 100) > 5)
        assert _near(_pixel(page, state, ex, ey), BACKGROUND)
        assert sum(_pixel(page, state, vx, vy)) >= sum(BACKGROUND) + 6

        # The panel reads the realms annotation: degree, stats, friendly fire.
        text = page.inner_text("#panel")
        assert "three-quarters" in text and "+3 defense" in text and "+3 agility" in text
        assert "friendly fire" in text

        ARTIFACTS.mkdir(exist_ok=True)
        name = {2: "hexoddr", 5: "hexevenq"}[grid_type]
        page.screenshot(path=str(ARTIFACTS / f"overlay-{name}.png"))

        # Clicking selects by the drawn hex: the corner sticking out of the square picks the
        # bandit as attacker; the square's corner outside the hex is empty floor.
        _click(page, state, *inside)
        _wait(page, "s.attacker === 'bandit' && s.target === null", "the bandit picked")
        _click(page, state, *corner)
        _wait(page, "s.attacker === null", "the selection cleared")
        _click(page, state, *_footprint(layout, tokens["archer"]).centre)
        _click(page, state, cx, cy)
        state = _wait(page, "s.attacker === 'archer' && s.target === 'bandit' && s.pair",
                      "the pair picked again")

        # The bandit steps to (3, 3): its new hex is red, its old one is not.
        moved = hexgrid.token_position(layout, (3, 3), 1, 1)
        reply = gm.request({"type": "token.update", "scene": "hex", "tokens": [
            {"_id": "bandit", "x": moved[0], "y": moved[1]}]})
        assert reply["type"] == "ack", reply
        rev = reply["revision"]
        after = _wait(page, f"s.sceneRevision >= {rev} && s.pair && s.pair.revision >= {rev}",
                      "the bandit's move")
        new = _footprint(layout, dict(tokens["bandit"], x=moved[0], y=moved[1]))
        assert new.cells == ((3, 3),)
        nx, ny = new.centre
        assert _near(_pixel(page, after, nx, ny), HOSTILE)
        assert not _near(_pixel(page, after, cx, cy), HOSTILE)
        page.screenshot(path=str(ARTIFACTS / f"overlay-{name}-moved.png"))
        assert not [c for c in console if c.startswith("error")], console
    finally:
        gm.close()


ORANGE = (0xFF, 0x9F, 0x1A)  # the page's flanking colour


@pytest.mark.parametrize("grid_type", [3, 4], ids=["HEXEVENR", "HEXODDQ"])
def test_overlay_marks_flanking_on_hex_scenes(page: Any, server: LiveServer,
                                              grid_type: int) -> None:
    """pf2 on a hex grid: two allies on opposite sides of a goblin flank it; the page puts
    the orange chevron inside the goblin's hex and names the partner in the panel."""
    layout = _hex_layout(grid_type)
    around = hexgrid.neighbours(layout, (2, 2))
    tokens = [_hex_token(layout, "fighter", around[0], 1),
              _hex_token(layout, "rogue", around[5], 1),
              _hex_token(layout, "goblin", (2, 2), -1)]
    gm = Peer.open(server.url)
    assert gm.hello(GM)["role"] == "gm"
    try:
        reply = gm.request({"type": "scene.load", "ruleset": "pf2", "scene": {
            "_id": "flank", "grid": {"type": grid_type, "size": 100}, "tokens": tokens}})
        assert reply["type"] == "ack", reply
        page.goto(f"{server.http_url}/overlay?scene=flank&attacker=fighter&target=goblin"
                  f"&mode=melee#token={OVERLAY}")
        state = _wait(page, "s.sceneRevision >= 1 && s.pair !== null && s.annotationCount > 0",
                      "the flanking scene")
        goblin = _footprint(layout, tokens[2])
        cx, cy = goblin.centre
        assert _near(_pixel(page, state, cx, cy), HOSTILE)
        corners = hexgrid.vertices(layout, 2, 2)
        apex = (cx, corners[:, 1].min() + 20)  # the chevron: a fifth of a hex below the top
        assert goblin.polygon.contains(shapely.Point(apex))
        assert _near(_pixel(page, state, *apex), ORANGE)
        assert "flanking with Rogue" in page.inner_text("#panel")
        name = {3: "hexevenr", 4: "hexoddq"}[grid_type]
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"overlay-{name}-flanking.png"))
    finally:
        gm.close()


def test_overlay_hex_geometry_matches_geometry_hex_py(page: Any, server: LiveServer) -> None:
    """The page's port of geometry/hex.py (clients/overlay/hex.js) gives the same cell
    centres, corners, cell under a point, token cells and token centre on every layout, for
    every token shape and size from half a hex to five, at scattered positions."""
    page.goto(f"{server.http_url}/overlay?scene=none#token={OVERLAY}")
    _wait(page, "true", "the page")
    rng = np.random.default_rng(7)
    cases: list[tuple[int, float, float, float, float, int, int, int]] = []
    for kind in (2, 3, 4, 5):
        for width in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0):
            for height in (0.5, 1.0, 1.5, 2.0, 3.0, 4.0):
                for token_shape in range(6):
                    px, py = rng.uniform(-450, 950, 2).tolist()
                    ci, cj = rng.integers(-7, 9, 2).tolist()
                    cases.append((kind, px, py, width, height, token_shape, ci, cj))
    got = page.evaluate("""(cases) => cases.map(([type, x, y, w, h, shape, i, j]) => {
        const H = window.CovercastHex, L = H.layout({type, size: 70});
        return {centre: H.centre(L, i, j), vertices: H.vertices(L, i, j),
                at: H.cellAt(L, x, y), cells: H.tokenCells(L, x, y, w, h, shape),
                tokenCentre: H.tokenCentre(L, x, y, w, h, shape)};
      })""", cases)
    shapes_seen = set()
    for (grid_type, x, y, w, h, shape, i, j), js in zip(cases, got, strict=True):
        layout = hexgrid.HexLayout.of(Grid(GridKind(grid_type), 70.0, 5.0, "ft"))
        (cx,), (cy,) = hexgrid.centre_point(layout, np.array([i]), np.array([j]))
        assert js["centre"] == pytest.approx([cx, cy], abs=1e-9)
        np.testing.assert_allclose(js["vertices"], hexgrid.vertices(layout, i, j),
                                   rtol=0, atol=1e-9)
        (pi,), (pj,) = hexgrid.point_to_offset(layout, np.array([x]), np.array([y]))
        assert js["at"] == [pi, pj]
        cells = hexgrid.token_cells(layout, x, y, w, h, shape)
        assert sorted(map(tuple, js["cells"])) == sorted(cells), (grid_type, x, y, w, h, shape)
        assert js["tokenCentre"] == pytest.approx(
            hexgrid.token_centre(layout, x, y, w, h, shape), abs=1e-9)
        shapes_seen.add(len(cells))
    assert {1, 3, 7, 12} <= shapes_seen  # ellipses of 1 to 4 hexes were among them


SIZES = [(1280, 720), (1920, 1080)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("layout", ["map", "card"])
def test_the_overlay_follows_the_focus_on_air(page: Any, server: LiveServer, layout: str,
                                              size: tuple[int, int]) -> None:
    """Both layouts at 720p and 1080p: the gm's scene.focus is drawn within 200 ms of its
    push, the card reads the pair's numbers in large type, the map highlights the wall
    that blocks the pair and keeps names apart, and a hidden target never shows."""
    width, height = size
    page.set_viewport_size({"width": width, "height": height})
    gm = _gm(server)
    try:
        page.goto(f"{server.http_url}/overlay?scene=demo&layout={layout}#token={OVERLAY}")
        _wait(page, "s.sceneRevision >= 2 && s.annotationCount > 0", "the demo scene")
        assert _state(page)["focus"] is None

        def focus(attacker: str, target: str) -> dict[str, Any]:
            gm.request({"type": "scene.focus", "scene": "demo", "attacker": attacker,
                        "target": target, "mode": "ranged"})
            state = _wait(page, f"s.focus && s.focus.attacker === {attacker!r} && "
                                "s.focus.drawnAt !== null", f"the focus on {attacker}")
            assert state["focus"]["drawnAt"] - state["focus"]["receivedAt"] < 200
            return state

        focus("archer", "wizard")
        if layout == "card":
            state = _wait(page, "s.card && s.card.includes('Archer → Wizard')", "the card")
            for text in ("RANGED ATTACK", "improved cover", "+8 AC", "+4 Reflex", "+10 Hide",
                         "target may hide"):
                assert text in state["card"], state["card"]
            degree_px = float(page.evaluate(
                "parseFloat(getComputedStyle(document.querySelector('#card .degree'))"
                ".fontSize)"))
            assert degree_px >= 0.05 * height  # ~54 px at 1080p: read across a room
            box = page.evaluate("(() => { const r = document.getElementById('card')"
                                ".getBoundingClientRect(); return [r.left, r.top, r.right, "
                                "r.bottom]; })()")
            left, top, right, bottom = box
            assert 0 < left < width / 10 and height / 2 < bottom < height  # bottom-left
            assert right < width * 0.6 and top > height / 3
            for element in ("document.documentElement", "document.body"):
                assert page.evaluate(f"getComputedStyle({element}).backgroundColor") == (
                    "rgba(0, 0, 0, 0)")
        else:
            state = _wait(page, "s.pair && s.pair.lines > 0 && s.panel && "
                                "s.panel.includes('Archer → Wizard')", "the pair's lines")
            assert page.evaluate("!document.getElementById('legend').hidden")
            labels = state["labels"]
            assert len(labels) == 8
            for i, a in enumerate(labels):
                for b in labels[i + 1:]:
                    apart = (a["x"] + a["w"] <= b["x"] or b["x"] + b["w"] <= a["x"]
                             or a["y"] + a["h"] <= b["y"] or b["y"] + b["h"] <= a["y"])
                    assert apart, (a, b)
            panel_px = float(page.evaluate(
                "parseFloat(getComputedStyle(document.getElementById('panel')).fontSize)"))
            assert panel_px >= (17 if height >= 1080 else 14)
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / f"overlay-{layout}-{width}x{height}.png"
        page.screenshot(path=str(shot), omit_background=layout == "card")
        assert shot.stat().st_size > 10_000

        # A pair with no line of effect: the wall in the way is drawn highlighted.
        focus("scout", "wizard")
        # The focus moved the subscription to the new attacker.
        _wait(page, "s.subscription && s.subscription.attackers[0] === 'scout' && "
                    "s.annotationAttackers.join() === 'scout'", "the scout's subscription")
        if layout == "card":
            _wait(page, "s.card && s.card.includes('no line of effect')", "total cover")
        else:
            state = _wait(page, "s.blockingWalls.includes('room-e1')", "the blocking wall")
            page.screenshot(path=str(ARTIFACTS / f"overlay-map-blocked-{width}x{height}.png"))

        # The hidden assassin as the target: the overlay never learns of it.
        focus("archer", "assassin")
        state = _wait(page, "s.focus.target === null", "the focus without its hidden target")
        assert "assassin" not in json.dumps(state).lower()
        assert "Assassin" not in page.evaluate("document.body.innerText")
        if layout == "card":
            assert "no target yet" in state["card"]
    finally:
        gm.close()


def test_overlay_url_naming_an_absent_token_says_so(page: Any, server: LiveServer) -> None:
    gm = _gm(server)
    try:
        # The assassin is hidden: for the overlay it does not exist either, and its name is
        # not listed among the scene's tokens.
        page.goto(f"{server.http_url}/overlay?scene=demo&attacker=archer&target=assassin"
                  f"#token={OVERLAY}")
        state = _wait(page, "s.problem !== null", "an error for the absent target")
        assert 'target "assassin", not a token of scene demo' in state["problem"]
        assert "archer, cleric, fighter, goblin, ogre, rogue, scout, wizard" in state["problem"]
        assert state["problem"] in page.evaluate(
            "document.getElementById('status').textContent")
    finally:
        gm.close()


def test_the_overlay_reads_the_compact_form_as_the_verbose_one(page: Any,
                                                              server: LiveServer) -> None:
    """The page asks for annotations in the compact form (welcome.compact), and its decoder
    (clients/overlay/compact.js) turns real compact frames, full set with lines and a move's
    delta, into exactly the verbose frames a client that did not ask gets."""
    gm = _gm(server)
    peers = {form: Peer.open(server.url) for form in ("verbose", "compact")}
    try:
        for form, peer in peers.items():
            hello = {"type": "hello", "protocol": 1, "client": "pytest", "token": GM,
                     "compact": form == "compact"}
            peer.send_raw(json.dumps(hello))
            assert peer.recv()["type"] == "welcome"
        frames: dict[str, list[str]] = {"verbose": [], "compact": []}
        for form, peer in peers.items():
            peer.send_raw(json.dumps({"type": "subscribe", "scene": "demo", "lines": True,
                                      "id": 1}))
            frames[form].append(str(peer.ws.recv(10)))  # JSON: text frames
        gm.request({"type": "token.update", "scene": "demo",
                    "tokens": [{"_id": "goblin", "x": 700, "y": 300}]})
        for form, peer in peers.items():
            frames[form].append(str(peer.ws.recv(10)))  # JSON: text frames
        page.goto(f"{server.http_url}/overlay?scene=demo#token={OVERLAY}")
        state = _wait(page, "s.annotationCount > 0", "the demo scene's annotations")
        assert state["compact"] is True
        for verbose, compact in zip(frames["verbose"], frames["compact"], strict=True):
            assert json.loads(compact)["form"] == "compact"
            got = page.evaluate("(text) => window.CovercastCompact.expand(JSON.parse(text))",
                                compact)
            assert got == json.loads(verbose)
    finally:
        for peer in peers.values():
            peer.close()
        gm.close()
