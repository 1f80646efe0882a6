"""Rebuild the full response a streamed answer amounts to, for the record.

Runs after the last byte went to the client, so it costs the client nothing. Handles chat chunks
(content, reasoning, tool-call deltas merged by index with argument fragments concatenated,
finish_reason, usage) and legacy completion chunks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway.wire.sse import parse_stream
from gateway.wire.stream_template import (
    TextRun,
    data_events,
    find_template,
    read_events,
    sentinel_text,
)


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


def assemble_chat_stream(blob: bytes) -> dict[str, Any] | None:
    """The ``chat.completion`` a relayed OpenAI stream's bytes amount to (None: no chunk):
    :func:`assemble_chat` over :func:`parse_stream`, its text deltas read as one template
    where they allow it (:mod:`gateway.wire.stream_template`: ~3x cheaper for plain text)."""
    events = data_events(blob)
    if events is not None and len(events) > 2:
        template = find_template(events[1], b'"content":')
        if template is not None and _plain_text_delta(template.event):
            items = read_events(events, template)
            if items is not None:
                return assemble_chat(items)
    chunks = parse_stream(blob)
    return assemble_chat(chunks) if chunks else None


def _plain_text_delta(event: dict[str, Any]) -> bool:
    """Whether a template chunk holds one choice whose delta's only text is the template's
    ``content`` and carries no tool calls: adding it again changes nothing but that text."""
    choices = event.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta")
    if not isinstance(delta, dict) or not sentinel_text(delta.get("content")):
        return False
    return not any(
        v for k, v in delta.items() if k != "content" and (k in _TEXT_KEYS or k == "tool_calls")
    )


def assemble_chat(chunks: Iterable[dict[str, Any] | TextRun]) -> dict[str, Any]:
    """A ``chat.completion`` object equivalent to the streamed ``chat.completion.chunk`` list.

    Text deltas are collected per choice and joined once at the end; a delta whose text is not
    a string (a broken upstream) is left out rather than failing the record. A
    :class:`TextRun` stands for its events: its template's chunk (empty text) once, which is
    all those chunks do but their texts, then the texts."""
    choices: dict[int, dict[str, Any]] = {}
    texts: dict[int, dict[str, list[str]]] = {}
    head: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    for item in chunks:
        run: list[str] | None = None
        if type(item) is TextRun:
            chunk, run = item.template.blank, item.texts
        else:
            chunk = item  # type: ignore[assignment]
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
            if run is not None and any(run):
                texts[i].setdefault("content", []).extend(run)
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
