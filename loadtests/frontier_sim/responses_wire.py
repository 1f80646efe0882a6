"""OpenAI Responses wire format: parse ``POST /v1/responses`` bodies, build responses and events.

Shapes follow https://platform.openai.com/docs/api-reference/responses (and the openai SDK's
``types/responses``). The answer comes from :mod:`loadtests.frontier_sim.answers` like every other
endpoint's: the request is read into a :class:`RequestView`:

- ``instructions`` and every message's text count towards the prompt tokens;
- the last user message's text decides whether a tool is called ("tool" / "call");
- a trailing ``function_call_output`` is the tool result the text answer quotes;
- ``tools`` of type ``function`` are offered (others are accepted and ignored);
- ``tool_choice`` ``auto`` / ``none`` / ``required`` / ``{"type": "function", "name"}``;
- ``max_output_tokens`` caps the answer (status ``incomplete``, reason ``max_output_tokens``);
- ``reasoning`` puts a ``reasoning`` item first, with ``encrypted_content`` when ``include`` asks
  for it; reasoning items sent back in ``input`` are checked as OpenAI checks them
  (``reasoning.py``);
- the prompt is cached automatically, as OpenAI does (see ``prompt_cache.py``):
  ``usage.input_tokens_details.cached_tokens`` says how many input tokens were read from it.

Streams are ``event: <type>\\ndata: {json}\\n\\n`` events numbered by ``sequence_number``:
response.created, response.in_progress, response.output_item.added, then for text
content_part.added, output_text.delta..., output_text.done, content_part.done, or for a call
function_call_arguments.delta..., function_call_arguments.done; response.output_item.done and
response.completed (or response.incomplete) with usage. No ``[DONE]``: the stream just ends.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

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
    AutomaticPrefix,
    CacheablePrompt,
    CacheUse,
)
from loadtests.frontier_sim.reasoning import (
    check_input_items,
    encrypted_requested,
    reasoning_item,
    reasoning_requested,
)
from loadtests.frontier_sim.tool_use import ToolSpec
from loadtests.frontier_sim.transcript import StepCollector

_TEXT_PARTS = ("input_text", "output_text", "text")


@dataclass(frozen=True, slots=True)
class ParsedResponses:
    """A Responses request: the answer's view, whether to stream, and fields to echo.

    ``cacheable`` and ``cache``: as in :class:`openai_wire.ParsedRequest`."""

    view: RequestView
    stream: bool
    echo: dict[str, Any]
    cacheable: CacheablePrompt | None = None
    cache: CacheUse = NO_CACHE
    reasoning: bool = False  # a reasoning item goes first (see reasoning.py)
    encrypted: bool = False  # ... with its encrypted_content

    def with_cache(self, cache: CacheUse) -> ParsedResponses:
        return replace(self, cache=cache)

    @property
    def views(self) -> tuple[RequestView, ...]:
        return (self.view,)


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where} must be a string or an array of content parts", where)
    return "".join(
        str(p.get("text", ""))
        for p in content
        if isinstance(p, dict) and p.get("type") in _TEXT_PARTS
    )


def _tools(body: dict[str, Any]) -> tuple[tuple[ToolSpec, ...], ToolMode, str | None]:
    tools: list[ToolSpec] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            raise BadRequest("each tool must be an object", "tools")
        if tool.get("type") != "function":
            continue
        if not isinstance(tool.get("name"), str):
            raise BadRequest("function tools need a name", "tools")
        tools.append(ToolSpec(tool["name"], tool.get("parameters") or {}))
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise BadRequest("tool_choice object needs type function and a name", "tool_choice")
        return tuple(tools), "required", choice["name"]
    if choice not in ("auto", "none", "required"):
        raise BadRequest("tool_choice must be none, auto, required or a function", "tool_choice")
    return tuple(tools), choice, None


def parse_responses_request(body: Any) -> ParsedResponses:
    """Parse a ``POST /v1/responses`` body; raises :class:`BadRequest`."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("Missing required parameter: 'model'.", "model")
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise BadRequest("input must be a string or an array of items", "input")
    check_input_items(items)
    texts = [_text(body.get("instructions"), "instructions")]
    user_texts: list[str] = []
    steps = StepCollector()
    instruction = ""
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            text = _text(item.get("content"), f"input[{i}].content")
            texts.append(text)
            if item.get("role") == "user":
                user_texts.append(text)
                if text and user_words(text):
                    instruction = text
                    steps.turn()
        elif kind == "function_call":
            texts.append(str(item.get("arguments") or ""))
            steps.call(item.get("call_id"), item.get("name"), item.get("arguments"))
        elif kind == "function_call_output":
            texts.append(_text(item.get("output"), f"input[{i}].output"))
            steps.result(item.get("call_id"), texts[-1])
    last = items[-1] if items else {}
    tool_result = None
    if last.get("type") == "function_call_output":
        tool_result = _text(last.get("output"), "output")
    max_tokens = body.get("max_output_tokens")
    if max_tokens is not None and (
        not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1
    ):
        raise BadRequest("max_output_tokens must be an integer >= 1", "max_output_tokens")
    tools, tool_mode, forced = _tools(body)
    tools_text = orjson.dumps(body["tools"]).decode() if tools else ""
    prompt_text = " ".join(texts)
    view = RequestView(
        model=model,
        prompt_tokens=estimate_tokens(prompt_text + tools_text),
        last_user_text=user_texts[-1] if user_texts else "",
        tool_result=tool_result,
        tools=tools,
        tool_mode=tool_mode,
        forced_tool=forced,
        max_tokens=max_tokens,
        tool_steps=steps.steps(),
        instruction_text=instruction,
        turn_steps=steps.turn_steps(),
        context=tuple(texts),
    )
    echo = {
        "instructions": body.get("instructions"),
        "max_output_tokens": max_tokens,
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "store": body.get("store", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
    }
    # The provider's prompt puts the tool definitions first.
    cacheable = AutomaticPrefix(model, tools_text + prompt_text)
    reasoning = reasoning_requested(body)
    encrypted = reasoning and encrypted_requested(body)
    stream = bool(body.get("stream"))
    return ParsedResponses(view, stream, echo, cacheable, reasoning=reasoning, encrypted=encrypted)


def _id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


def _usage(request: ParsedResponses, answer: Answer) -> dict[str, Any]:
    prompt = request.view.prompt_tokens
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": request.cache.read, "cache_write_tokens": 0},
        "output_tokens": answer.tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + answer.tokens,
    }


def _status(answer: Answer) -> tuple[str, dict[str, str] | None]:
    if not isinstance(answer, ToolCall) and answer.finish == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


def _item(answer: Answer, item_id: str, call_id: str, done: bool) -> dict[str, Any]:
    status = "completed" if done else "in_progress"
    if isinstance(answer, ToolCall):
        return {
            "id": item_id,
            "type": "function_call",
            "status": status,
            "arguments": answer.arguments_json if done else "",
            "call_id": call_id,
            "name": answer.name,
        }
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": answer.text}
    content = [part] if done else []
    return {
        "id": item_id,
        "type": "message",
        "status": status,
        "content": content,
        "role": "assistant",
    }


def _response(
    request: ParsedResponses,
    response_id: str,
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    incomplete: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": incomplete,
        "model": request.view.model,
        "output": output,
        "temperature": 1.0,
        "top_p": 1.0,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        **request.echo,
        "usage": usage,
    }


def response_body(request: ParsedResponses, answers: Sequence[Answer]) -> bytes:
    """A ``response`` JSON body."""
    answer = answers[0]
    item = _item(
        answer, _id("msg_" if not isinstance(answer, ToolCall) else "fc_"), _id("call_"), done=True
    )
    status, incomplete = _status(answer)
    usage = _usage(request, answer)
    output = [*_reasoning_items(request), item]
    return orjson.dumps(_response(request, _id("resp_"), status, output, usage, incomplete))


def _reasoning_items(request: ParsedResponses) -> list[dict[str, Any]]:
    return [reasoning_item(_id("rs_"), request.encrypted)] if request.reasoning else []


def response_stream(request: ParsedResponses, answers: Sequence[Answer]) -> Iterator[bytes]:
    """The SSE events of a streamed response, the final ``response.completed`` included."""
    answer = answers[0]
    response_id = _id("resp_")
    is_call = isinstance(answer, ToolCall)
    item_id, call_id = _id("fc_" if is_call else "msg_"), _id("call_")
    seq = iter(range(1 << 30))

    def event(kind: str, **payload: Any) -> bytes:
        data = {"type": kind, "sequence_number": next(seq), **payload}
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    snapshot = _response(request, response_id, "in_progress", [], None)
    yield event("response.created", response=snapshot)
    yield event("response.in_progress", response=snapshot)
    before = _reasoning_items(request)
    for n, thought in enumerate(before):
        opening = {"id": thought["id"], "type": "reasoning", "summary": []}
        yield event("response.output_item.added", output_index=n, item=opening)
        yield event("response.output_item.done", output_index=n, item=thought)
    index = len(before)
    yield event(
        "response.output_item.added",
        output_index=index,
        item=_item(answer, item_id, call_id, done=False),
    )
    where: dict[str, Any] = {"item_id": item_id, "output_index": index}
    done = _item(answer, item_id, call_id, done=True)
    if isinstance(answer, ToolCall):
        for fragment in answer.argument_fragments():
            yield event("response.function_call_arguments.delta", **where, delta=fragment)
        yield event(
            "response.function_call_arguments.done",
            **where,
            name=answer.name,
            arguments=answer.arguments_json,
        )
    else:
        empty = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
        yield event("response.content_part.added", **where, content_index=0, part=empty)
        for piece in answer.pieces():
            yield event(
                "response.output_text.delta", **where, content_index=0, delta=piece, logprobs=[]
            )
        yield event(
            "response.output_text.done", **where, content_index=0, text=answer.text, logprobs=[]
        )
        yield event("response.content_part.done", **where, content_index=0, part=done["content"][0])
    yield event("response.output_item.done", output_index=index, item=done)
    status, incomplete = _status(answer)
    usage = _usage(request, answer)
    final = _response(request, response_id, status, [*before, done], usage, incomplete)
    yield event(f"response.{status}", response=final)
