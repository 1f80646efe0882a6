"""Server-sent events as OpenAI sends them: ``data: <json>\\n\\n`` lines, ending ``data: [DONE]``.

Only what the pass-through needs: cut a byte stream at event boundaries, and recognise the
events that matter (the terminal ``[DONE]`` and the usage-only chunk).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

DONE_EVENT = b"data: [DONE]\n\n"
EVENT_SEP = b"\n\n"


def encode_event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + EVENT_SEP


def encode_named_event(event: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(payload) + EVENT_SEP


class EventSplitter:
    """Turns arbitrary byte blocks into blocks of whole events (carrying any partial tail)."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, block: bytes) -> bytes:
        data = self._tail + block if self._tail else block
        cut = data.rfind(EVENT_SEP)
        if cut < 0:
            self._tail = data
            return b""
        self._tail = data[cut + 2 :]
        return data[: cut + 2]

    @property
    def pending(self) -> bytes:
        return self._tail


def iter_events(blob: bytes) -> Iterator[bytes]:
    """The ``data:`` payloads of whole events in ``blob`` (CRLF tolerated)."""
    for raw in blob.replace(b"\r\n", b"\n").split(EVENT_SEP):
        for line in raw.split(b"\n"):
            if line.startswith(b"data:"):
                yield line[5:].strip()


def drop_usage_only_events(blob: bytes) -> tuple[bytes, dict[str, Any] | None]:
    """Remove the usage-only chunk (``"choices":[]`` with usage) a client did not ask for.

    Returns the remaining bytes and the usage found. Called only on blocks that contain
    ``"usage"`` with a non-null value, so the common path is a substring search.
    """
    kept: list[bytes] = []
    usage: dict[str, Any] | None = None
    for raw in blob.split(EVENT_SEP):
        if not raw:
            continue
        if raw.startswith(b"data: {") and b'"choices":[]' in raw:
            chunk = orjson.loads(raw[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
                continue
        kept.append(raw + EVENT_SEP)
    return b"".join(kept), usage
