"""A frame given in parts: one message whose bytes are never joined into one buffer.

Rule of this module: a value and nothing else. server/compact.py makes one (a full set
encoded in steps), the session hands it on (`SendParts`, only from a Core whose edge
writes it: `Core.in_parts`, set by server/app.py's `run`), and only that edge writes it,
as the fragments of one WebSocket message. Everything else gets frames in one piece,
made with `joined()` (`compact.encoding_annotations`, `Core.drain`).

Why: a 200-token full set is 53 MB. Joining its encoded parts into one fresh buffer took
the server's worker 27 ms on its own and 109-166 ms late in a full test run (a fresh
buffer that large is slow to come by), in one go, every other scene waiting.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Parts:
    """A frame as its parts in order (the frame is their concatenation). `text`: a text
    message (JSON, its parts UTF-8), else a binary one (msgpack); `size`: its bytes."""

    parts: tuple[bytes | memoryview, ...]
    text: bool
    size: int

    @classmethod
    def of(cls, parts: list[bytes | memoryview], text: bool) -> Parts:
        return cls(tuple(parts), text, sum(len(p) for p in parts))

    def __len__(self) -> int:
        return self.size

    def joined(self) -> bytes | str:
        """The frame in one piece: what the server sends when it is not written in parts."""
        data = b"".join(self.parts)
        return data.decode() if self.text else data
