"""The plain HTTP side of the server port: the live overlay page and its files.

Rule of this module: decide, from a request's path and headers alone, whether a request is a
WebSocket handshake (None: let it through, on any path) or a page request, and answer page
requests from a fixed table of files read from `clients/overlay/`. A requested path is only
ever looked up in that table, never joined onto a directory, so no path (`..`, encoded
slashes, absolute paths) can reach another file; and a file of the table is read only when
it is a regular file whose real path (symlinks resolved, when it is read) is still inside
that folder, so a symlink planted there reaches nothing outside it. Only GET and HEAD are
served (HEAD: the same headers, no body); any other method is 405 on every path. No I/O
besides reading those files; the network side is server/app.py.
"""

from __future__ import annotations

import email.utils
import os
import stat
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
        if f.suffix in CONTENT_TYPES and not f.name.startswith(".") and _inside(f) is not None:
            table[f"/overlay/{f.name}"] = f
    if "/overlay/index.html" in table:
        table["/overlay"] = table["/overlay/"] = table["/overlay/index.html"]
    return table


def is_websocket(headers: Mapping[str, str]) -> bool:
    return "websocket" in headers.get("Upgrade", "").lower()


#: The methods served, on every path (a WebSocket handshake is a GET).
METHODS = ("GET", "HEAD")


def route(path: str, headers: Mapping[str, str], files: Mapping[str, Path],
          method: str = "GET") -> HttpReply | None:
    """The answer to an HTTP request for `path` (query and fragment ignored), or None for a
    WebSocket handshake, which any path may carry. A method but GET and HEAD is refused
    (405, naming the two); HEAD is answered as GET would be, without the body."""
    if method not in METHODS:
        return _reply(405, "Method Not Allowed", "text/plain; charset=utf-8",
                      f"405: method {method[:32]!r} is not served; this server answers "
                      f"{' and '.join(METHODS)}\n".encode(),
                      extra=(("Allow", ", ".join(METHODS)),))
    head = method == "HEAD"
    if is_websocket(headers) and not head:
        return None
    wanted = urlsplit(path).path
    found = files.get(wanted)
    if found is None:
        return _reply(404, "Not Found", "text/plain; charset=utf-8",
                      f"404: no page at {wanted[:200]!r}; the overlay is at /overlay\n"
                      .encode(), head=head)
    body = _read(found)
    if body is None:
        return _reply(404, "Not Found", "text/plain; charset=utf-8", b"404: file gone\n",
                      head=head)
    return _reply(200, "OK", CONTENT_TYPES[found.suffix], body, head=head)


def _inside(f: Path) -> Path | None:
    """The real path of `f` when it is a regular file inside `f`'s own folder (symlinks
    resolved now), else None."""
    try:
        real = f.resolve(strict=True)
        root = f.parent.resolve(strict=True)
    except (OSError, RuntimeError):  # gone, or a symlink loop
        return None
    if not real.is_relative_to(root) or not real.is_file():
        return None
    return real


def _read(f: Path) -> bytes | None:
    """The bytes of `f`, if it is still a regular file inside its folder (None: it is not,
    or it is gone). Opened without following a symlink at its real path and checked after
    opening, so it cannot be swapped for one in between."""
    real = _inside(f)
    if real is None:
        return None
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read()


def _reply(status: int, reason: str, content_type: str, body: bytes, head: bool = False,
           extra: tuple[tuple[str, str], ...] = ()) -> HttpReply:
    """A reply with the usual headers; to a HEAD, the GET's headers (its Content-Length
    too) without the body."""
    headers = (("Date", email.utils.formatdate(usegmt=True)), ("Connection", "close"),
               ("Content-Type", content_type), ("Content-Length", str(len(body))),
               *extra, *_SECURITY.items())
    return HttpReply(status, reason, headers, b"" if head else body)
