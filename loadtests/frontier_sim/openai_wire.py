"""OpenAI wire format: parse chat/legacy completion requests, build bodies, SSE chunks, errors.

Shapes follow https://platform.openai.com/docs/api-reference (chat completions, legacy
completions, models). Streams are ``data: {json}\\n\\n`` lines closed by ``data: [DONE]\\n\\n``.
Chat prompts are cached automatically, as OpenAI does (see ``prompt_cache.py``):
``usage.prompt_tokens_details.cached_tokens`` says how many prompt tokens were read from it.
For a model named ``deepseek-*`` the usage says it as DeepSeek's API does instead, in
``prompt_cache_hit_tokens`` and ``prompt_cache_miss_tokens`` (the shape a pass-through to an
OpenAI-compatible provider must read for itself: litellm's ``Usage`` maps it).
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
    FinishedAnswer,
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
from loadtests.frontier_sim.tool_use import ToolSpec
from loadtests.frontier_sim.transcript import StepCollector

DONE_EVENT = b"data: [DONE]\n\n"
_FINISH_REASONS = {"natural": "stop", "length": "length", "stop": "stop"}


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    """A chat or legacy completion request: one view per choice, and stream options.

    ``cacheable`` is the prompt as the provider caches it (None: not cached); ``cache`` is what
    the simulator's prompt cache made of it (:meth:`with_cache`)."""

    views: tuple[RequestView, ...]
    stream: bool
    include_usage: bool
    echo_prompts: tuple[str, ...] = ()
    suffix: str = ""
    cacheable: CacheablePrompt | None = None
    cache: CacheUse = NO_CACHE

    def with_cache(self, cache: CacheUse) -> ParsedRequest:
        return replace(self, cache=cache)

    @property
    def model(self) -> str:
        return self.views[0].model

    @property
    def prompt_tokens(self) -> int:
        return self.views[0].prompt_tokens


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            part["text"]
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    raise BadRequest("message content must be a string or an array of parts", "messages")


def _int_param(body: dict[str, Any], name: str, default: int | None, low: int) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise BadRequest(f"{name} must be an integer >= {low}", name)
    return value


def _common_params(body: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("you must provide a model parameter", "model")
    return model, body


def _stop_param(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return tuple(stop)
    raise BadRequest("stop must be a string or an array of strings", "stop")


def _stream_params(body: dict[str, Any]) -> tuple[bool, bool]:
    options = body.get("stream_options") or {}
    return bool(body.get("stream")), isinstance(options, dict) and bool(
        options.get("include_usage")
    )


def _tools_param(body: dict[str, Any]) -> tuple[tuple[ToolSpec, ...], ToolMode, str | None]:
    tools: list[ToolSpec] = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise BadRequest("each tool needs function.name", "tools")
        tools.append(ToolSpec(function["name"], function.get("parameters") or {}))
    choice = body.get("tool_choice", "auto")
    if isinstance(choice, dict):
        function = choice.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise BadRequest("tool_choice object needs function.name", "tool_choice")
        return tuple(tools), "required", function["name"]
    if choice not in ("auto", "none", "required"):
        raise BadRequest("tool_choice must be none, auto, required or a function", "tool_choice")
    return tuple(tools), choice, None


def parse_chat_request(body: Any) -> ParsedRequest:
    """Parse a ``POST /v1/chat/completions`` body; raises :class:`BadRequest`."""
    model, body = _common_params(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty array", "messages")
    if not all(isinstance(m, dict) for m in messages):
        raise BadRequest("each message must be an object", "messages")
    texts = [_content_text(m.get("content")) for m in messages]
    user_texts = [t for m, t in zip(messages, texts, strict=True) if m.get("role") == "user"]
    tools, tool_mode, forced_tool = _tools_param(body)
    tools_text = orjson.dumps(body["tools"]).decode() if tools else ""
    prompt_text = " ".join(texts)
    steps = StepCollector()
    instruction = ""
    for message, text in zip(messages, texts, strict=True):
        if message.get("role") == "user" and text and user_words(text):
            instruction = text
            steps.turn()
        for call in message.get("tool_calls") or () if message.get("role") == "assistant" else ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                steps.call(call.get("id"), function.get("name"), function.get("arguments"))
        if message.get("role") == "tool":
            steps.result(message.get("tool_call_id"), text)
    n = _int_param(body, "n", 1, 1) or 1
    max_tokens = _int_param(body, "max_completion_tokens", None, 1)
    seed = body.get("seed")
    view = RequestView(
        model=model,
        prompt_tokens=estimate_tokens(prompt_text + tools_text),
        last_user_text=user_texts[-1] if user_texts else "",
        tool_result=texts[-1] if messages[-1].get("role") == "tool" else None,
        tools=tools,
        tool_mode=tool_mode,
        forced_tool=forced_tool,
        max_tokens=max_tokens or _int_param(body, "max_tokens", None, 1),
        stop=_stop_param(body),
        seed=seed if isinstance(seed, int) else None,
        tool_steps=steps.steps(),
        instruction_text=instruction,
        turn_steps=steps.turn_steps(),
        context=tuple(texts),
    )
    stream, include_usage = _stream_params(body)
    views = tuple(replace(view, choice_index=i) for i in range(n))
    # The provider's prompt puts the tool definitions first.
    cacheable = AutomaticPrefix(model, tools_text + prompt_text)
    return ParsedRequest(views, stream, include_usage, cacheable=cacheable)


def parse_completion_request(body: Any) -> ParsedRequest:
    """Parse a legacy ``POST /v1/completions`` body; raises :class:`BadRequest`."""
    model, body = _common_params(body)
    prompt = body.get("prompt", "")
    if isinstance(prompt, str):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        prompts = [" ".join(map(str, prompt))]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str | list) for p in prompt):
        prompts = [p if isinstance(p, str) else " ".join(map(str, p)) for p in prompt]
    else:
        raise BadRequest("prompt must be a string, an array of strings or of tokens", "prompt")
    suffix = body.get("suffix") or ""
    if not isinstance(suffix, str):
        raise BadRequest("suffix must be a string", "suffix")
    n = _int_param(body, "n", 1, 1) or 1
    seed = body.get("seed")
    stream, include_usage = _stream_params(body)
    prompt_tokens = sum(estimate_tokens(p) for p in prompts)
    base = RequestView(
        model=model,
        prompt_tokens=prompt_tokens,
        max_tokens=_int_param(body, "max_tokens", None, 1),
        stop=_stop_param(body),
        seed=seed if isinstance(seed, int) else None,
    )
    views = tuple(
        replace(base, last_user_text=p, choice_index=i * n + j)
        for i, p in enumerate(prompts)
        for j in range(n)
    )
    echo = tuple(prompts[i // n] for i in range(len(views))) if body.get("echo") else ()
    return ParsedRequest(views, stream, include_usage, echo, suffix)


def usage(request: ParsedRequest, answers: Sequence[Answer]) -> dict[str, Any]:
    """OpenAI's usage: ``prompt_tokens`` counts every prompt token, the cached ones included."""
    completion = sum(a.tokens for a in answers)
    found: dict[str, Any] = {
        "prompt_tokens": request.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": request.prompt_tokens + completion,
    }
    if request.model.startswith("deepseek"):
        found["prompt_cache_hit_tokens"] = request.cache.read
        found["prompt_cache_miss_tokens"] = request.prompt_tokens - request.cache.read
    else:
        found["prompt_tokens_details"] = {"cached_tokens": request.cache.read}
    return found


def _finish_reason(answer: Answer) -> str:
    return "tool_calls" if isinstance(answer, ToolCall) else _FINISH_REASONS[answer.finish]


def chat_completion(request: ParsedRequest, answers: Sequence[Answer]) -> bytes:
    """A ``chat.completion`` JSON body."""
    choices = []
    for index, answer in enumerate(answers):
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
        if isinstance(answer, ToolCall):
            message["tool_calls"] = [
                {
                    "id": new_id("call_"),
                    "type": "function",
                    "function": {"name": answer.name, "arguments": answer.arguments_json},
                }
            ]
        else:
            message["content"] = answer.text
        choices.append(
            {
                "index": index,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish_reason(answer),
            }
        )
    return orjson.dumps(
        {
            "id": new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model,
            "system_fingerprint": "fp_sim",
            "choices": choices,
            "usage": usage(request, answers),
        }
    )


def chat_stream(request: ParsedRequest, answers: Sequence[Answer]) -> Iterator[bytes]:
    """The SSE events of a streamed chat completion, ``[DONE]`` included."""
    head: dict[str, Any] = {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": request.model,
        "system_fingerprint": "fp_sim",
    }
    if request.include_usage:
        head["usage"] = None

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _sse({**head, "choices": [choice]})

    for index, answer in enumerate(answers):
        if isinstance(answer, ToolCall):
            call = {
                "index": 0,
                "id": new_id("call_"),
                "type": "function",
                "function": {"name": answer.name, "arguments": ""},
            }
            yield chunk(index, {"role": "assistant", "content": None, "tool_calls": [call]})
            for fragment in answer.argument_fragments():
                yield chunk(
                    index, {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}
                )
        else:
            yield chunk(index, {"role": "assistant", "content": "", "refusal": None})
            for piece in answer.pieces():
                yield chunk(index, {"content": piece})
        yield chunk(index, {}, _finish_reason(answer))
    if request.include_usage:
        yield _sse({**head, "choices": [], "usage": usage(request, answers)})
    yield DONE_EVENT


def _pieces(answer: Answer) -> list[str]:
    return answer.pieces() if isinstance(answer, FinishedAnswer) else [answer.arguments_json]


def _completion_text(request: ParsedRequest, index: int, answer: Answer) -> str:
    echo = request.echo_prompts[index] if request.echo_prompts else ""
    return echo + "".join(_pieces(answer)) + request.suffix


def text_completion(request: ParsedRequest, answers: Sequence[Answer]) -> bytes:
    """A legacy ``text_completion`` JSON body."""
    choices = [
        {
            "text": _completion_text(request, index, answer),
            "index": index,
            "logprobs": None,
            "finish_reason": _finish_reason(answer),
        }
        for index, answer in enumerate(answers)
    ]
    return orjson.dumps(
        {
            "id": new_id("cmpl-"),
            "object": "text_completion",
            "created": int(time.time()),
            "model": request.model,
            "choices": choices,
            "usage": usage(request, answers),
        }
    )


def text_completion_stream(request: ParsedRequest, answers: Sequence[Answer]) -> Iterator[bytes]:
    """The SSE events of a streamed legacy completion, ``[DONE]`` included."""
    head = {
        "id": new_id("cmpl-"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": request.model,
    }

    def chunk(index: int, text: str, finish: str | None = None) -> bytes:
        choice = {"text": text, "index": index, "logprobs": None, "finish_reason": finish}
        return _sse({**head, "choices": [choice]})

    for index, answer in enumerate(answers):
        if request.echo_prompts:
            yield chunk(index, request.echo_prompts[index])
        for piece in _pieces(answer):
            yield chunk(index, piece)
        yield chunk(index, request.suffix, _finish_reason(answer))
    if request.include_usage:
        yield _sse({**head, "choices": [], "usage": usage(request, answers)})
    yield DONE_EVENT


def model_list(models: Sequence[str]) -> bytes:
    data = [
        {"id": m, "object": "model", "created": 0, "owned_by": "switchyard-sim"} for m in models
    ]
    return orjson.dumps({"object": "list", "data": data})


def error_body(status: int, message: str, param: str | None = None) -> bytes:
    """OpenAI's error shape for ``status``."""
    if status == 429:
        kind, code = "requests", "rate_limit_exceeded"
    elif status == 404:
        kind, code = "invalid_request_error", "model_not_found"
    elif status < 500:
        kind, code = "invalid_request_error", None
    else:
        kind, code = "server_error", None
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})
