"""The overlay page over plain HTTP on the server's own port: the right files with the right
content types, a 404 for everything else (path traversal included, sent as raw bytes so no
client library tidies the path first), and WebSocket handshakes still accepted on any path."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from server import static
from tests.conftest import LiveServer, Peer

OVERLAY = static.OVERLAY_DIR


def get(server: LiveServer, path: str, method: str = "GET",
        extra: str = "") -> tuple[int, dict[str, str], bytes]:
    """A raw HTTP/1.1 request of exactly `path`: status, headers (lower-case names), body
    (for HEAD, the body must be empty and Content-Length the GET's)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n"
                     .encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if method != "HEAD":
        assert int(headers["content-length"]) == len(body)
    return status, headers, body


@pytest.mark.parametrize(("path", "file", "content_type"), [
    ("/overlay", "index.html", "text/html; charset=utf-8"),
    ("/overlay/", "index.html", "text/html; charset=utf-8"),
    ("/overlay/index.html", "index.html", "text/html; charset=utf-8"),
    ("/overlay?scene=demo&transparent=1", "index.html", "text/html; charset=utf-8"),
    ("/overlay/overlay.js", "overlay.js", "text/javascript; charset=utf-8"),
    ("/overlay/overlay.css", "overlay.css", "text/css; charset=utf-8"),
])
def test_overlay_files_are_served_with_their_content_type(
        live_server: LiveServer, path: str, file: str, content_type: str) -> None:
    status, headers, body = get(live_server, path)
    assert status == 200
    assert headers["content-type"] == content_type
    assert body == (OVERLAY / file).read_bytes()
    assert headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in headers["content-security-policy"]


@pytest.mark.parametrize("path", [
    "/", "/favicon.ico", "/overlay/missing.js", "/overlayx", "/overlay/index.htm",
    "/overlay/../server/app.py", "/overlay/..%2f..%2fserver%2fapp.py",
    "/overlay/%2e%2e/%2e%2e/server/app.py", "/overlay/..\\..\\server\\app.py",
    "/overlay//etc/passwd", "//etc/passwd", "/overlay/%2fetc%2fpasswd",
    "/clients/overlay/index.html", "/overlay/./index.html", "/overlay/index.html/",
    "/overlay/overlay.js%00.html", "/server/app.py", "/etc/passwd",
    "/overlay/../../../../../../etc/passwd",
])
def test_anything_else_is_404_and_traversal_reaches_nothing(live_server: LiveServer,
                                                            path: str) -> None:
    status, headers, body = get(live_server, path)
    assert status == 404
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert body.startswith(b"404: no page at ")
    assert b"import" not in body and b"root:" not in body


def test_websocket_handshakes_work_on_any_path_including_the_overlays(
        live_server: LiveServer) -> None:
    for path in ("/", "/overlay", "/anything/at/all"):
        p = Peer.open(live_server.url + path)
        try:
            assert p.hello()["type"] == "welcome"
        finally:
            p.close()


def test_only_plain_files_of_known_types_in_the_overlay_directory_are_listed(
        tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<p>hi</p>")
    (tmp_path / "app.js").write_text("1")
    (tmp_path / ".secret.js").write_text("no")
    (tmp_path / "notes.txt").write_text("no")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.js").write_text("no")
    files = static.overlay_files(tmp_path)
    assert sorted(files) == ["/overlay", "/overlay/", "/overlay/app.js", "/overlay/index.html"]
    reply = static.route("/overlay/sub/deep.js", {}, files)
    assert reply is not None and reply.status == 404
    assert static.route("/overlay", {"Upgrade": "websocket"}, files) is None
    assert static.overlay_files(tmp_path / "nowhere") == {}


# -- methods, HEAD, symlinks (issue 16) ----------------------------------------------------

PATHS = ["/overlay", "/overlay/overlay.js", "/", "/nowhere", "/overlay/../server/app.py"]


@pytest.mark.parametrize("method", ["PUT", "POST", "DELETE", "TRACE", "OPTIONS", "PATCH",
                                    "CONNECT", "BREW", "get", "PROPFIND"])
def test_any_method_but_get_and_head_is_405_on_every_path(live_server: LiveServer,
                                                          method: str) -> None:
    for path in PATHS:
        status, headers, body = get(live_server, path, method)
        assert status == 405, (method, path, status)
        assert headers["allow"] == "GET, HEAD"
        assert b"<html" not in body.lower() and b"import" not in body
        assert b"GET and HEAD" in body
        assert headers["x-content-type-options"] == "nosniff"


def test_a_websocket_handshake_with_another_method_is_405_too(live_server: LiveServer) -> None:
    upgrade = ("Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
    status, headers, _ = get(live_server, "/", "POST", upgrade)
    assert status == 405 and headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize("path", ["/overlay", "/overlay/overlay.js", "/overlay/overlay.css",
                                  "/nowhere"])
def test_head_has_the_get_headers_and_no_body(live_server: LiveServer, path: str) -> None:
    g_status, g_headers, g_body = get(live_server, path)
    status, headers, body = get(live_server, path, "HEAD")
    assert status == g_status
    assert body == b""
    assert headers["content-length"] == str(len(g_body))
    for name in ("content-type", "content-security-policy", "x-content-type-options"):
        assert headers[name] == g_headers[name]


def test_the_page_says_nosniff_and_allows_only_its_own_files(live_server: LiveServer) -> None:
    _, headers, _ = get(live_server, "/overlay")
    assert headers["x-content-type-options"] == "nosniff"
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "connect-src 'self' ws: wss:" in csp and "unsafe" not in csp


def test_a_symlink_out_of_the_overlay_folder_is_never_followed(tmp_path: Path) -> None:
    folder = tmp_path / "overlay"
    folder.mkdir()
    outside = tmp_path / "secret.js"
    outside.write_text("root:x:0:0")
    (folder / "index.html").write_text("<p>page</p>")
    (folder / "app.js").write_text("ok()")
    (folder / "inside.css").symlink_to(folder / "app.js")  # stays inside: served
    (folder / "passwd.js").symlink_to("/etc/passwd")
    (folder / "secret.js").symlink_to(outside)
    (folder / "loop.js").symlink_to(folder / "loop.js")
    (folder / "up.js").symlink_to("../secret.js")
    files = static.overlay_files(folder)
    assert sorted(files) == ["/overlay", "/overlay/", "/overlay/app.js",
                             "/overlay/index.html", "/overlay/inside.css"]
    reply = static.route("/overlay/inside.css", {}, files)
    assert reply is not None and (reply.status, reply.body) == (200, b"ok()")
    # A file of the table swapped for a symlink after the table was built is not followed.
    (folder / "app.js").unlink()
    (folder / "app.js").symlink_to(outside)
    for path in ("/overlay/app.js", "/overlay/inside.css"):
        reply = static.route(path, {}, files)
        assert reply is not None and reply.status == 404, path
        assert b"root:" not in reply.body
    # ... nor a folder swapped for a symlink to another folder's file of the same name.
    (folder / "app.js").unlink()
    (folder / "app.js").mkdir()
    reply = static.route("/overlay/app.js", {}, files)
    assert reply is not None and reply.status == 404


def test_the_route_refuses_methods_and_answers_head_without_a_body(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<p>hi</p>")
    files = static.overlay_files(tmp_path)
    put = static.route("/overlay", {}, files, "PUT")
    assert put is not None and put.status == 405 and ("Allow", "GET, HEAD") in put.headers
    head = static.route("/overlay", {"Upgrade": "websocket"}, files, "HEAD")
    assert head is not None and head.status == 200 and head.body == b""
    assert ("Content-Length", "9") in head.headers
