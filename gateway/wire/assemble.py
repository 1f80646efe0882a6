"""Rebuild the full response a streamed answer amounts to, for the record.

Runs after the last byte went to the client, so it costs the client nothing. Handles chat chunks
(content, reasoning, tool-call deltas merged by index with argument fragments concatenated,
finish_reason, usage) and legacy completion chunks.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.wire.sse import iter_events, plain_json_events


def parse_stream(blob: bytes) -> list[dict[str, Any]]:
    """Every JSON chunk in an SSE byte stream (``[DONE]`` and malformed events skipped)."""
    return plain_json_events(blob) or _parse_events(blob)


def _parse_events(blob: bytes) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    for data in iter_events(blob):
        if not data or data == b"[DONE]":
            continue
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            chunks.append(value)
    return chunks


def _merge_tool_calls(slot: list[dict[str, Any]], deltas: list[dict[str, Any]]) -> None:
    for d in deltas:
        idx = d.get("index", len(slot))
        while len(slot) <= idx:
            slot.append({"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        call = slot[idx]
        if d.get("id"):
            call["id"] = d["id"]
        if d.get("type"):
            call["type"] = d["type"]
        fn = d.get("function") or {}
        if fn.get("name"):
            call["function"]["name"] += fn["name"]
        if fn.get("arguments"):
            call["function"]["arguments"] += fn["arguments"]


_HEAD_KEYS = ("id", "created", "model", "system_fingerprint")
_TEXT_KEYS = frozenset(("content", "reasoning_content", "reasoning"))


def assemble_chat(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``chat.completion`` object equivalent to the streamed ``chat.completion.chunk`` list.

    Text deltas are collected per choice and joined once at the end; a delta whose text is not
    a string (a broken upstream) is left out rather than failing the record."""
    choices: dict[int, dict[str, Any]] = {}
    texts: dict[int, dict[str, list[str]]] = {}
    head: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    for chunk in chunks:
        if head is None and chunk.get("id"):
            head = {k: chunk.get(k) for k in _HEAD_KEYS}
        if chunk.get("usage"):
            usage = chunk["usage"]
        for ch in chunk.get("choices") or ():
            i = ch.get("index", 0)
            slot = choices.get(i)
            if slot is None:
                slot = choices[i] = {
                    "index": i,
                    "message": {"role": "assistant", "content": None},
                    "finish_reason": None,
                    "logprobs": None,
                }
                texts[i] = {}
            delta = ch.get("delta")
            if delta:
                for key, value in delta.items():
                    if not value:
                        continue
                    if key in _TEXT_KEYS:
                        if isinstance(value, str):
                            texts[i].setdefault(key, []).append(value)
                    elif key == "role":
                        slot["message"]["role"] = value
                    elif key == "tool_calls":
                        _merge_tool_calls(slot["message"].setdefault("tool_calls", []), value)
            if ch.get("finish_reason"):
                slot["finish_reason"] = ch["finish_reason"]
    for i, pieces in texts.items():
        message = choices[i]["message"]
        for key, parts in pieces.items():
            message[key] = "".join(parts)
    return {
        **(head or {}),
        "object": "chat.completion",
        "choices": [choices[i] for i in sorted(choices)],
        "usage": usage,
    }


def assemble_completion(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``text_completion`` object equivalent to streamed completion chunks."""
    texts: dict[int, dict[str, Any]] = {}
    head: dict[str, Any] = {}
    usage: dict[str, Any] | None = None
    for chunk in chunks:
        if not head and chunk.get("id"):
            head = {k: chunk.get(k) for k in ("id", "created", "model")}
        if chunk.get("usage"):
            usage = chunk["usage"]
        for ch in chunk.get("choices") or []:
            i = ch.get("index", 0)
            slot = texts.setdefault(
                i, {"index": i, "text": "", "finish_reason": None, "logprobs": None}
            )
            slot["text"] += ch.get("text") or ""
            if ch.get("finish_reason"):
                slot["finish_reason"] = ch["finish_reason"]
    return {
        **head,
        "object": "text_completion",
        "choices": [texts[i] for i in sorted(texts)],
        "usage": usage,
    }
