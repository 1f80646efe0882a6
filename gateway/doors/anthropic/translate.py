"""Anthropic Messages request -> the internal format (an OpenAI chat body). Pure; no I/O.

Request (``POST /v1/messages`` body -> chat body)::

    system: str | [text blocks]        -> first message, role system (text parts joined by "\\n";
                                          kept as text parts when a block has cache_control)
    user   text / image blocks         -> user message (text string, or parts with image_url data
                                          URLs and cache_control)
    user   tool_result blocks          -> one role=tool message each (tool_call_id = tool_use_id),
                                          placed before the user's other blocks; is_error prefixes
                                          the text with "Error: "; images in results are dropped
    assistant text + tool_use blocks   -> one assistant message: content + tool_calls (id kept,
                                          arguments = JSON of input)
    thinking / redacted_thinking / server-tool blocks, documents -> dropped (noted)
    tools [{name, description, input_schema}]   -> function tools; typed Anthropic tools
                                          (web_search_*, bash_*, text_editor_*, ...) dropped (noted)
    tool_choice auto|any|tool|none     -> "auto" | "required" | {"function": name} | "none";
                                          disable_parallel_tool_use -> parallel_tool_calls false
    a last assistant message (prefill)  -> continued (vLLM's continue_final_message)
    max_tokens -> max_tokens; stop_sequences -> stop; temperature, top_p, top_k kept
    stream -> stream + stream_options.include_usage; thinking, metadata, service_tier and any
    other field: tolerated (not forwarded; metadata.user_id is the cache-affinity key)

The answer side (chat completion -> ``message`` and its stream): :mod:`gateway.wire.
anthropic_render`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.errors import InvalidRequestError
from gateway.wire.blocks import (
    note,
)

# Request: Anthropic Messages -> internal chat body


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class InputMessage(_Open):
    # "system" turns inside `messages` are sent by newer clients (Claude Code) for mid-
    # conversation instructions; they become system messages of the internal chat.
    role: Literal["user", "assistant", "system"]
    content: str | list[dict[str, Any]]


class CountTokensRequest(_Open):
    model: str = Field(min_length=1)
    messages: list[InputMessage]
    system: str | list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: dict[str, Any] | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    stream: bool | None = None
    metadata: dict[str, Any] | None = None


@dataclass(slots=True)
class MessagesTranslation:
    """The internal chat body of a Messages request, and what was left out of it."""

    body: dict[str, Any]
    stream: bool
    thinking: bool
    stop_sequences: tuple[str, ...]
    user_id: str | None
    notes: dict[str, list[str]] = field(default_factory=dict)


def _validate(model: type[CountTokensRequest], body: dict[str, Any]) -> CountTokensRequest:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = err.get("msg", "invalid")
        raise InvalidRequestError(f"{loc}: {msg}" if loc else msg, param=loc or None) from exc


def _text_content(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text blocks as one string, or as text parts when one carries a cache_control mark."""
    if not any(b.get("cache_control") for b in blocks):
        return "\n".join(str(b["text"]) for b in blocks)
    parts: list[dict[str, Any]] = []
    for b in blocks:
        part: dict[str, Any] = {"type": "text", "text": b["text"]}
        if b.get("cache_control"):
            part["cache_control"] = b["cache_control"]
        parts.append(part)
    return parts


def _image_part(block: dict[str, Any]) -> dict[str, Any] | None:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = str(source.get("url", ""))
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result_text(block: dict[str, Any], notes: dict[str, list[str]]) -> str:
    content = block.get("content")
    if isinstance(content, str) or content is None:
        text = content or ""
    else:
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                parts.append(str(part.get("text", "")))
            else:
                note(notes, "dropped_content", f"tool_result.{kind}")
        text = "\n".join(parts)
    return f"Error: {text}" if block.get("is_error") else text


def _user_messages(
    content: list[dict[str, Any]], notes: dict[str, list[str]], where: str
) -> list[dict[str, Any]]:
    tool_msgs: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    texts: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str):
                raise InvalidRequestError(f"{where}.{i}.text: Field required", param=where)
            texts.append(block)
            parts.append(block)
        elif kind == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise InvalidRequestError(f"{where}.{i}.tool_use_id: Field required", param=where)
            tool_msgs.append(
                {
                    "role": "tool",
                    "tool_call_id": block["tool_use_id"],
                    "content": _tool_result_text(block, notes),
                }
            )
        elif kind == "image" and (image := _image_part(block)) is not None:
            parts.append(image)
        else:
            note(notes, "dropped_content", f"user.{kind}")
    out = tool_msgs
    if len(parts) > len(texts):  # images present: a list of parts
        listed = [
            p if p["type"] == "image_url" else {"type": "text", "text": p["text"]} for p in parts
        ]
        out.append({"role": "user", "content": listed})
    elif texts:
        out.append({"role": "user", "content": _text_content(texts)})
    return out


def assistant_message(
    content: list[dict[str, Any]], notes: dict[str, list[str]], where: str
) -> dict[str, Any]:
    """Assistant blocks as one chat message (shared with :mod:`gateway.doors.anthropic.answer`)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise InvalidRequestError(f"{where}.{i}: tool_use needs id and name", param=where)
            arguments = orjson.dumps(block.get("input") or {}).decode()
            calls.append(
                {
                    "id": block["id"],
                    "type": "function",
                    "function": {"name": block["name"], "arguments": arguments},
                }
            )
        else:
            note(notes, "dropped_content", f"assistant.{kind}")
    text = "".join(texts)
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def _tools(
    req: CountTokensRequest, notes: dict[str, list[str]]
) -> tuple[list[dict[str, Any]], set[str]]:
    tools: list[dict[str, Any]] = []
    for i, tool in enumerate(req.tools or []):
        if tool.get("type") not in (None, "custom") or "input_schema" not in tool:
            note(notes, "dropped_tools", str(tool.get("type") or tool.get("name")))
            continue
        if not isinstance(tool.get("name"), str):
            raise InvalidRequestError(f"tools.{i}.name: Field required", param="tools")
        fn: dict[str, Any] = {"name": tool["name"], "parameters": tool["input_schema"]}
        if tool.get("description"):
            fn["description"] = tool["description"]
        tools.append({"type": "function", "function": fn})
    return tools, {t["function"]["name"] for t in tools}


def _tool_choice(choice: dict[str, Any], names: set[str], notes: dict[str, list[str]]) -> Any:
    kind = choice.get("type")
    if kind == "tool":
        if choice.get("name") in names:
            return {"type": "function", "function": {"name": choice["name"]}}
        note(notes, "ignored_fields", "tool_choice")
        return "auto"
    modes = {"auto": "auto", "any": "required", "none": "none"}
    if kind not in modes:
        raise InvalidRequestError(
            "tool_choice.type: must be one of auto, any, tool, none", param="tool_choice"
        )
    return modes[kind]


def translate_messages(body: dict[str, Any], *, count_only: bool = False) -> MessagesTranslation:
    """The internal chat body for a Messages (or ``count_tokens``) body; 400 on a bad field."""
    model = CountTokensRequest if count_only else MessagesRequest
    req = _validate(model, body)
    notes: dict[str, list[str]] = {}
    messages: list[dict[str, Any]] = []
    if req.system:
        if isinstance(req.system, str):
            blocks = [{"type": "text", "text": req.system}]
        else:
            blocks = [b for b in req.system if isinstance(b.get("text"), str)]
        if blocks:
            messages.append({"role": "system", "content": _text_content(blocks)})
    for i, msg in enumerate(req.messages):
        where = f"messages.{i}.content"
        content = msg.content
        if isinstance(content, str):
            messages.append({"role": msg.role, "content": content})
        elif msg.role == "system":
            texts = [b for b in content if isinstance(b.get("text"), str)]
            messages.append({"role": "system", "content": _text_content(texts)})
        elif msg.role == "user":
            messages.extend(_user_messages(content, notes, where))
        else:
            messages.append(assistant_message(content, notes, where))
    out: dict[str, Any] = {"model": req.model, "messages": messages}
    if messages and messages[-1]["role"] == "assistant" and not messages[-1].get("tool_calls"):
        # A prefill: vLLM continues it (litellm passes only chat fields; providers prefill).
        out.update(continue_final_message=True, add_generation_prompt=False)
    tools, names = _tools(req, notes)
    if tools:
        out["tools"] = tools
        if req.tool_choice:
            out["tool_choice"] = _tool_choice(req.tool_choice, names, notes)
            if req.tool_choice.get("disable_parallel_tool_use"):
                out["parallel_tool_calls"] = False
    thinking = bool(req.thinking) and (req.thinking or {}).get("type") in ("enabled", "adaptive")
    stream = False
    user_id = None
    if isinstance(req, MessagesRequest):
        out["max_tokens"] = req.max_tokens
        if req.stop_sequences:
            out["stop"] = list(req.stop_sequences)
        for key in ("temperature", "top_p", "top_k"):
            if getattr(req, key) is not None:
                out[key] = getattr(req, key)
        stream = bool(req.stream)
        if stream:
            out["stream"] = True
            out["stream_options"] = {"include_usage": True}
        uid = (req.metadata or {}).get("user_id")
        user_id = uid if isinstance(uid, str) and uid else None
    return MessagesTranslation(out, stream, thinking, tuple(out.get("stop") or ()), user_id, notes)
