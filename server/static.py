"""The plain HTTP side of the server port: the live overlay page and its files.

Rule of this module: decide, from a request's path and headers alone, whether a request is a
WebSocket handshake (None: let it through, on any path) or a page request, and answer page
requests from a fixed table of files read from `clients/overlay/`. A requested path is only
ever looked up in that table, never joined onto a directory, so no path (`..`, encoded
slashes, absolute paths) can reach another file. No I/O besides reading those files; the
network side is server/app.py.
"""

from __future__ import annotations

import email.utils
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit


def _overlay_dir() -> Path:
    """clients/overlay/ of the source tree, or, installed from a wheel, the copy
    pyproject.toml's data-files put in <prefix>/share/covercast/overlay/."""
    source = Path(__file__).resolve().parent.parent / "clients" / "overlay"
    return source if source.is_dir() else Path(sys.prefix) / "share" / "covercast" / "overlay"


#: Where the overlay's files are.
OVERLAY_DIR = _overlay_dir()

CONTENT_TYPES: Mapping[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".ico": "image/x-icon",
}

#: The page may load its own files and open a WebSocket back to this server; nothing else
#: (an overlay must work offline, and nothing from elsewhere runs inside it).
_SECURITY = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; "
                                "img-src 'self' data:; connect-src 'self' ws: wss:; "
                                "base-uri 'none'; form-action 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@dataclass(frozen=True, slots=True)
class HttpReply:
    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


def overlay_files(directory: Path = OVERLAY_DIR) -> dict[str, Path]:
    """URL path -> file, for every servable file directly in `directory`; the page itself
    is at /overlay (and /overlay/)."""
    table: dict[str, Path] = {}
    if not directory.is_dir():
        return table
    for f in sorted(directory.iterdir()):
        if f.is_file() and f.suffix in CONTENT_TYPES and not f.name.startswith("."):
            table[f"/overlay/{f.name}"] = f
    if "/overlay/index.html" in table:
        table["/overlay"] = table["/overlay/"] = table["/overlay/index.html"]
    return table


def is_websocket(headers: Mapping[str, str]) -> bool:
    return "websocket" in headers.get("Upgrade", "").lower()


def route(path: str, headers: Mapping[str, str],
          files: Mapping[str, Path]) -> HttpReply | None:
    """The answer to an HTTP request for `path` (query and fragment ignored), or None for a
    WebSocket handshake, which any path may carry."""
    if is_websocket(headers):
        return None
    wanted = urlsplit(path).path
    found = files.get(wanted)
    if found is None:
        return _reply(404, "Not Found", "text/plain; charset=utf-8",
                      f"404: no page at {wanted[:200]!r}; the overlay is at /overlay\n"
                      .encode())
    try:
        body = found.read_bytes()
    except OSError:
        return _reply(404, "Not Found", "text/plain; charset=utf-8", b"404: file gone\n")
    return _reply(200, "OK", CONTENT_TYPES[found.suffix], body)


def _reply(status: int, reason: str, content_type: str, body: bytes) -> HttpReply:
    headers = (("Date", email.utils.formatdate(usegmt=True)), ("Connection", "close"),
               ("Content-Type", content_type), ("Content-Length", str(len(body))),
               *_SECURITY.items())
    return HttpReply(status, reason, headers, body)
