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


def get(server: LiveServer, path: str) -> tuple[int, dict[str, str], bytes]:
    """A raw HTTP/1.1 GET of exactly `path`: status, headers (lower-case names), body."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode("latin-1"))
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
