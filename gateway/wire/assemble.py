"""Rebuild the full response a streamed answer amounts to, for the record.

Runs after the last byte went to the client, so it costs the client nothing. Handles chat chunks
(content, reasoning, tool-call deltas merged by index with argument fragments concatenated,
finish_reason, usage) and legacy completion chunks.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.wire.sse import iter_events


def parse_stream(blob: bytes) -> list[dict[str, Any]]:
    """Every JSON chunk in an SSE byte stream (``[DONE]`` and malformed events skipped)."""
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


def assemble_chat(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``chat.completion`` object equivalent to the streamed ``chat.completion.chunk`` list."""
    choices: dict[int, dict[str, Any]] = {}
    head: dict[str, Any] = {}
    usage: dict[str, Any] | None = None
    for chunk in chunks:
        if not head and chunk.get("id"):
            head = {k: chunk.get(k) for k in ("id", "created", "model", "system_fingerprint")}
        if chunk.get("usage"):
            usage = chunk["usage"]
        for ch in chunk.get("choices") or []:
            i = ch.get("index", 0)
            slot = choices.setdefault(
                i,
                {
                    "index": i,
                    "message": {"role": "assistant", "content": None},
                    "finish_reason": None,
                    "logprobs": None,
                },
            )
            delta = ch.get("delta") or {}
            msg = slot["message"]
            if delta.get("role"):
                msg["role"] = delta["role"]
            if delta.get("content"):
                msg["content"] = (msg["content"] or "") + delta["content"]
            for key in ("reasoning_content", "reasoning"):
                if delta.get(key):
                    msg[key] = msg.get(key, "") + delta[key]
            if delta.get("tool_calls"):
                _merge_tool_calls(msg.setdefault("tool_calls", []), delta["tool_calls"])
            if ch.get("finish_reason"):
                slot["finish_reason"] = ch["finish_reason"]
    return {
        **head,
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
