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

from typing import Any

import orjson

from gateway.wire.sse import EVENT_SEP, plain_json_events


def _events(blob: bytes) -> list[dict[str, Any]]:
    plain = plain_json_events(blob)
    if plain is not None:
        return plain
    out: list[dict[str, Any]] = []
    for raw in blob.replace(b"\r\n", b"\n").split(EVENT_SEP):
        for line in raw.split(b"\n"):
            if line.startswith(b"data:"):
                try:
                    data = orjson.loads(line[5:].strip())
                except orjson.JSONDecodeError:
                    continue
                if isinstance(data, dict):
                    out.append(data)
    return out


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
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for event in _events(blob):
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
