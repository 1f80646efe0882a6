"""Anthropic Messages wire format: parse requests, build bodies, SSE events and errors.

Shapes follow https://docs.anthropic.com/en/api/messages and its streaming page: events are
``event: <type>\\ndata: {json}\\n\\n`` in the order message_start, content_block_start, ping,
content_block_delta..., content_block_stop, message_delta, message_stop.

Prompt caching follows ``cache_control`` markers as Anthropic does (see ``prompt_cache.py``): the
usage (the body's, or message_start's when streamed) reports ``cache_read_input_tokens`` and
``cache_creation_input_tokens``, and ``input_tokens`` counts only the prompt tokens that were
neither read from the cache nor written to it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from loadtests.frontier_sim import thinking
from loadtests.frontier_sim.answers import (
    Answer,
    BadRequest,
    RequestView,
    ToolCall,
    ToolMode,
    estimate_tokens,
)
from loadtests.frontier_sim.instructions import user_words
from loadtests.frontier_sim.prompt_cache import (
    NO_CACHE,
    CacheablePrompt,
    CacheUse,
    MarkedBlocks,
    PromptBlock,
)
from loadtests.frontier_sim.tool_use import ToolSpec
from loadtests.frontier_sim.transcript import StepCollector

_STOP_REASONS = {"natural": "end_turn", "length": "max_tokens", "stop": "stop_sequence"}
_ROLES = ("user", "assistant", "system")
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


@dataclass(frozen=True, slots=True)
class ParsedMessages:
    """A Messages request: the answer's view and whether to stream.

    ``cacheable`` is the prompt's blocks when some carry ``cache_control`` (None: nothing to
    cache); ``cache`` is what the simulator's prompt cache made of them (:meth:`with_cache`)."""

    view: RequestView
    stream: bool
    cacheable: CacheablePrompt | None = None
    cache: CacheUse = NO_CACHE
    thinking: str | None = None  # the thinking block's text, when the request enabled it

    def with_cache(self, cache: CacheUse) -> ParsedMessages:
        return replace(self, cache=cache)

    @property
    def views(self) -> tuple[RequestView, ...]:
        return (self.view,)


def _event(kind: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _blocks_text(content: Any, kind: str = "text") -> str:
    """Text of a content string or of its blocks of type ``kind``."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest("content must be a string or an array of content blocks")
    texts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            raise BadRequest("each content block must be an object")
        if block.get("type") != kind:
            continue
        if kind == "tool_result":
            texts.append(_blocks_text(block.get("content") or ""))
        elif isinstance(block.get("text"), str):
            texts.append(block["text"])
    return " ".join(texts)


def _tools(body: dict[str, Any]) -> tuple[tuple[ToolSpec, ...], ToolMode, str | None]:
    tools: list[ToolSpec] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise BadRequest("tools: each tool needs a name")
        tools.append(ToolSpec(tool["name"], tool.get("input_schema") or {}))
    choice = body.get("tool_choice") or {"type": "auto"}
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        if not isinstance(choice.get("name"), str):
            raise BadRequest("tool_choice: type tool needs a name")
        return tuple(tools), "required", choice["name"]
    modes: dict[Any, ToolMode] = {"auto": "auto", "any": "required", "none": "none"}
    if kind not in modes:
        raise BadRequest("tool_choice.type must be auto, any, tool or none")
    return tuple(tools), modes[kind], None


def parse_messages_request(body: Any) -> ParsedMessages:
    """Parse a ``POST /v1/messages`` body; raises :class:`BadRequest`."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest("max_tokens: Field required (an integer >= 1)")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: must be a non-empty array")
    # "system" turns inside `messages`: Claude Code (2.1) sends them mid-conversation.
    if not all(isinstance(m, dict) and m.get("role") in _ROLES for m in messages):
        raise BadRequest("messages: each message needs role user, assistant or system")
    stop = body.get("stop_sequences") or []
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise BadRequest("stop_sequences: must be an array of strings")
    texts = [_blocks_text(m.get("content", "")) for m in messages]
    user_texts = [t for m, t in zip(messages, texts, strict=True) if m["role"] == "user" and t]
    last = messages[-1]
    has_result = last["role"] == "user" and isinstance(last.get("content"), list)
    tool_result = _blocks_text(last["content"], "tool_result") if has_result else ""
    tools, tool_mode, forced_tool = _tools(body)
    thinks = thinking.thinking_requested(body)
    thinking.check_replayed(messages, thinks)
    system = _blocks_text(body.get("system") or "")
    steps = StepCollector()
    instruction = ""
    for m, text in zip(messages, texts, strict=True):
        if m["role"] == "user" and text and user_words(text):
            instruction = text
            steps.turn()
        for block in m.get("content") if isinstance(m.get("content"), list) else ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                steps.call(block.get("id"), block.get("name"), block.get("input"))
            elif block.get("type") == "tool_result":
                steps.result(block.get("tool_use_id"), _blocks_text(block.get("content") or ""))
    tools_text = orjson.dumps(body["tools"]).decode() if tools else ""
    view = RequestView(
        model=model,
        prompt_tokens=estimate_tokens(system + " ".join(texts) + tools_text + tool_result),
        last_user_text=user_texts[-1] if user_texts else "",
        tool_result=tool_result or None,
        tools=tools,
        tool_mode=tool_mode,
        forced_tool=forced_tool,
        max_tokens=max_tokens,
        stop=tuple(stop),
        tool_steps=steps.steps(),
        instruction_text=instruction,
        turn_steps=steps.turn_steps(),
        context=(system, *texts),
    )
    return ParsedMessages(
        view,
        bool(body.get("stream")),
        _marked_blocks(model, body, messages),
        thinking=thinking.thinking_text(view) if thinks else None,
    )


def _marked_blocks(
    model: str, body: dict[str, Any], messages: list[dict[str, Any]]
) -> MarkedBlocks | None:
    """The prompt's blocks in Anthropic's order (tools, system, messages), if any is marked."""
    parts: list[tuple[str, Any, int]] = [
        ("tool", tool, len(orjson.dumps(tool))) for tool in body.get("tools") or []
    ]
    system = body.get("system")
    for block in system if isinstance(system, list) else [system] if system else []:
        parts.append(("system", block, _block_chars(block)))
    for m in messages:
        content = m.get("content")
        for block in content if isinstance(content, list) else [content]:
            parts.append((m["role"], block, _block_chars(block)))
    if not any(isinstance(b, dict) and b.get("cache_control") for _, b, _ in parts):
        return None  # the common case: nothing to digest
    return MarkedBlocks(model, tuple(_prompt_block(*part) for part in parts))


def _block_chars(block: Any) -> int:
    """Characters of a block's text (what the prompt token estimate counts); 0 for others."""
    if isinstance(block, str):
        return len(block)
    if not isinstance(block, dict):
        return 0
    if block.get("type") == "tool_result":
        inner = block.get("content") or ""
        return len(inner) if isinstance(inner, str) else sum(_block_chars(b) for b in inner)
    text = block.get("text")
    return len(text) if block.get("type") == "text" and isinstance(text, str) else 0


def _prompt_block(where: str, block: Any, chars: int) -> PromptBlock:
    # The marker is no part of the content: moving it keeps the prefix the same.
    marked = isinstance(block, dict) and bool(block.get("cache_control"))
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}
    content = orjson.dumps(block, option=orjson.OPT_SORT_KEYS)
    return PromptBlock(where.encode() + b":" + content, chars, marked)


def _stop_reason(answer: Answer) -> str:
    return "tool_use" if isinstance(answer, ToolCall) else _STOP_REASONS[answer.finish]


def _stop_sequence(answer: Answer) -> str | None:
    return None if isinstance(answer, ToolCall) else answer.stop_sequence


def _output_tokens(request: ParsedMessages, answer_tokens: int) -> int:
    """Output tokens as billed: the answer's, and the thinking's when there is one."""
    if request.thinking is None:
        return answer_tokens
    return answer_tokens + estimate_tokens(request.thinking)


def _usage(request: ParsedMessages, output_tokens: int) -> dict[str, int]:
    """Anthropic's usage: ``input_tokens`` excludes the cache reads and writes."""
    cache = request.cache
    return {
        "input_tokens": request.view.prompt_tokens - cache.read - cache.written,
        "cache_creation_input_tokens": cache.written,
        "cache_read_input_tokens": cache.read,
        "output_tokens": _output_tokens(request, output_tokens),
    }


def _head(request: ParsedMessages) -> dict[str, Any]:
    return {
        "id": "msg_" + uuid.uuid4().hex[:24],
        "type": "message",
        "role": "assistant",
        "model": request.view.model,
    }


def message(request: ParsedMessages, answer: Answer) -> bytes:
    """A ``message`` JSON body."""
    block: dict[str, Any]
    if isinstance(answer, ToolCall):
        block = {
            "type": "tool_use",
            "id": "toolu_" + uuid.uuid4().hex[:24],
            "name": answer.name,
            "input": answer.arguments,
        }
    else:
        block = {"type": "text", "text": answer.text}
    content = [block] if request.thinking is None else [thinking.block(request.thinking), block]
    return orjson.dumps(
        {
            **_head(request),
            "content": content,
            "stop_reason": _stop_reason(answer),
            "stop_sequence": _stop_sequence(answer),
            "usage": _usage(request, answer.tokens),
        }
    )


def message_stream(request: ParsedMessages, answer: Answer) -> Iterator[bytes]:
    """The SSE events of a streamed message, ``message_stop`` included."""
    start = {
        **_head(request),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(request, 1),
    }
    yield _event("message_start", {"type": "message_start", "message": start})
    index = 0
    if request.thinking is not None:
        for name, payload in thinking.stream_events(request.thinking, index):
            yield _event(name, payload)
        index += 1
    block: dict[str, Any]
    if isinstance(answer, ToolCall):
        block = {"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": answer.name}
        block["input"] = {}
        deltas = [
            {"type": "input_json_delta", "partial_json": f} for f in answer.argument_fragments()
        ]
    else:
        block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in answer.pieces()]
    yield _event(
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )
    yield _event("ping", {"type": "ping"})
    for delta in deltas:
        yield _event(
            "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        )
    yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
    stop = {"stop_reason": _stop_reason(answer), "stop_sequence": _stop_sequence(answer)}
    usage = {"output_tokens": _output_tokens(request, answer.tokens)}
    yield _event("message_delta", {"type": "message_delta", "delta": stop, "usage": usage})
    yield _event("message_stop", {"type": "message_stop"})


def model_list(models: Sequence[str]) -> bytes:
    data = [
        {"type": "model", "id": m, "display_name": m, "created_at": "2024-10-22T00:00:00Z"}
        for m in models
    ]
    return orjson.dumps(
        {"data": data, "has_more": False, "first_id": models[0], "last_id": models[-1]}
    )


def error_body(status: int, message: str) -> bytes:
    """Anthropic's error shape for ``status``."""
    default = "api_error" if status >= 500 else "invalid_request_error"
    kind = _ERROR_TYPES.get(status, default)
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})
