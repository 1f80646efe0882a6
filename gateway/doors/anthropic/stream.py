"""An Anthropic Messages stream assembled into the ``message`` it streamed. Pure; no I/O.

For the record of a native pass-through (the Messages door to an Anthropic provider): the
client got the provider's events unchanged; the record keeps the whole message, as for a
non-streamed answer. Events::

    message_start        {"message": {id, model, role, content: [], usage, ...}}
    content_block_start  {"index", "content_block": {type: text|thinking|redacted_thinking|
                          tool_use|server_tool_use|..., ...}}
    content_block_delta  {"index", "delta": text_delta | thinking_delta | signature_delta |
                          input_json_delta | citations_delta}
    content_block_stop   {"index"}     (a tool_use's input JSON is parsed here)
    message_delta        {"delta": {stop_reason, stop_sequence}, "usage": {...}}
    message_stop / ping / error

Called once per stream, after it ended, on the bytes relayed (a cut stream assembles what came).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from gateway.wire.sse import parse_stream
from gateway.wire.stream_template import (
    TextRun,
    find_template,
    named_events,
    named_payload,
    read_events,
    sentinel_text,
)

_DELTA_EVENT = b"event: content_block_delta\n"
_TEXT_KEYS = {"text_delta": "text", "thinking_delta": "thinking"}
# Messages events carry little besides their text, so one orjson call over them all is cheap:
# the template wins from ~30 deltas on (docs/recording.md, "Reading a stream's text deltas").
# A stream's length stands for its count (~125 bytes an event).
TEMPLATE_MIN_BYTES = 5000


def _template_events(blob: bytes) -> list[dict[str, Any] | TextRun] | None:
    """The events, the text (or thinking) deltas of the first kind streamed read as one
    template (:mod:`gateway.wire.stream_template`: ~3x cheaper for long answers); None when
    the stream does not allow it."""
    if len(blob) < TEMPLATE_MIN_BYTES:
        return None
    events = named_events(blob)
    if events is None:
        return None
    first = next((e for e in events if e.startswith(_DELTA_EVENT)), None)
    if first is None:
        return None
    key = b'"thinking":' if b'"thinking_delta"' in first else b'"text":'
    template = find_template(first, key, named_payload)
    if template is None or _text_delta_key(template.event) is None:
        return None
    return read_events(events, template, named_payload)


def _text_delta_key(event: dict[str, Any]) -> str | None:
    """The key of the text a template event's delta carries (the sentinel's), if the event is
    a ``content_block_delta`` whose text is all it adds."""
    delta = event.get("delta")
    if event.get("type") != "content_block_delta" or not isinstance(delta, dict):
        return None
    key = _TEXT_KEYS.get(str(delta.get("type")))
    if key is None or not sentinel_text(delta.get(key)) or not isinstance(event.get("index"), int):
        return None
    return key


def _apply_delta(block: dict[str, Any], delta: dict[str, Any], partial: dict[int, str]) -> None:
    kind = delta.get("type")
    if kind == "text_delta":
        block["text"] = block.get("text", "") + str(delta.get("text", ""))
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
    elif kind == "signature_delta":
        block["signature"] = block.get("signature", "") + str(delta.get("signature", ""))
    elif kind == "input_json_delta":
        key = id(block)
        partial[key] = partial.get(key, "") + str(delta.get("partial_json", ""))
    elif kind == "citations_delta":
        block.setdefault("citations", []).append(delta.get("citation"))


def _finish_input(block: dict[str, Any], partial: dict[int, str]) -> None:
    text = partial.pop(id(block), None)
    if text is None:
        return
    try:
        block["input"] = orjson.loads(text) if text.strip() else {}
    except orjson.JSONDecodeError:
        block["input"] = {"_unparsed": text}  # a cut stream: keep what came


def assemble_message(blob: bytes) -> dict[str, Any] | None:
    """The message a stream of Messages events carried; None when it never started."""
    items = _template_events(blob)
    return assemble_items(items if items is not None else parse_stream(blob))


def assemble_items(items: Iterable[dict[str, Any] | TextRun]) -> dict[str, Any] | None:
    """The message of a stream's events, read whole or as template runs (a test reads every
    event whole, ``assemble_items(parse_stream(blob))``, for the reference that the template
    reading must equal: a test cannot swap the functions of a compiled module)."""
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for item in items:
        if type(item) is TextRun:
            target = blocks.get(item.template.event["index"]) if message is not None else None
            key = _text_delta_key(item.template.event)
            if target is not None and key is not None:
                target[key] = target.get(key, "") + "".join(item.texts)
            continue
        event: dict[str, Any] = item  # type: ignore[assignment]
        kind = event.get("type")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = dict(event["message"])
            message["content"] = []
        elif message is None:
            continue
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            block = dict(event["content_block"])
            blocks[int(event.get("index", len(blocks)))] = block
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            target = blocks.get(int(event.get("index", -1)))
            if target is not None:
                _apply_delta(target, event["delta"], partial)
        elif kind == "content_block_stop":
            target = blocks.get(int(event.get("index", -1)))
            if target is not None:
                _finish_input(target, partial)
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict):
                message.update({k: v for k, v in delta.items() if k != "type"})
            usage = event.get("usage")
            if isinstance(usage, dict):
                merged = dict(message.get("usage") or {})
                merged.update({k: v for k, v in usage.items() if v is not None})
                message["usage"] = merged
    if message is None:
        return None
    for block in blocks.values():
        _finish_input(block, partial)  # blocks a cut stream never closed
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message
