"""An OpenAI Responses stream, as a provider sent it, read back. Pure; no I/O.

For a native pass-through (the Responses door to OpenAI): the client got the provider's events
unchanged (reasoning items with their ``encrypted_content``, ids, fields the gateway does not
know). Two things need the events read back:

- the record keeps the whole ``response`` (:func:`assemble_response`): the terminal event's
  (``response.completed`` / ``response.incomplete``) when it came, else the opening snapshot
  with the items that were done, ``incomplete`` (a cut stream keeps what came);
- a stream the gateway ends with an error (the provider's connection broke, its own
  ``response.failed``, shutdown) ends as OpenAI ends one (:func:`failure_events`): an ``error``
  event then ``response.failed``, numbered on from the provider's last ``sequence_number``
  and naming the provider's response, so the client sees one response that failed.

Called once per stream, after it ended (or failed), on the bytes relayed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gateway.wire.sse import encode_named_event, parse_stream

_TERMINAL = ("response.completed", "response.incomplete", "response.failed")
_SNAPSHOTS = ("response.created", "response.in_progress")
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d+)')


def assemble_response(blob: bytes) -> dict[str, Any] | None:
    """The ``response`` a stream of Responses events carried; None when it never started."""
    response: dict[str, Any] | None = None
    done: dict[int, dict[str, Any]] = {}
    for event in parse_stream(blob):
        kind, body = event.get("type"), event.get("response")
        if kind in _TERMINAL and isinstance(body, dict):
            return body
        if kind in _SNAPSHOTS and isinstance(body, dict):
            response = dict(body)
        elif kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            index = event.get("output_index")
            done[index if type(index) is int else len(done)] = event["item"]
    if response is None:
        return None
    response["output"] = [done[i] for i in sorted(done)]
    response["status"] = "incomplete"
    return response


def failure_events(message: str, relayed: Sequence[bytes]) -> bytes:
    """The ``error`` and ``response.failed`` events that end a relayed stream the gateway could
    not finish (``relayed``: the blocks the client got)."""
    after = 0
    for block in reversed(relayed):
        numbers = _SEQUENCE.findall(block)
        if numbers:
            after = max(int(n) for n in numbers) + 1
            break
    error = {"code": "server_error", "message": message}
    response = assemble_response(b"".join(relayed)) or {"object": "response", "output": []}
    response = {**response, "status": "failed", "error": error}
    return encode_named_event(
        "error",
        {"type": "error", "sequence_number": after, **error, "param": None},
    ) + encode_named_event(
        "response.failed",
        {"type": "response.failed", "sequence_number": after + 1, "response": response},
    )
