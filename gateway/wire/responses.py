"""OpenAI Responses API <-> the internal format (OpenAI chat completions). Pure; no I/O.

Request (``POST /v1/responses`` body -> chat body)::

    instructions                        -> first message, role system
    input: str                          -> one user message
    input items:
      message user|system|developer|assistant (type optional; content str or parts)
                                        -> a message of that role (developer -> system);
                                           input_text/output_text -> text, input_image -> image_url,
                                           refusal -> text; other parts dropped (noted)
      function_call {call_id, name, arguments[, namespace]}
                                        -> tool_calls on the preceding assistant message, or a new
                                           one (call_id kept as the tool call id)
      function_call_output {call_id, output: str | parts}
                                        -> role=tool message (text of the parts); dropped (noted)
                                           when no function_call item before it has its call_id
      reasoning, item_reference, built-in tool calls -> dropped (noted)
    tools: function                     -> function tool (name, description, parameters)
           namespace {name, tools}      -> its function tools flattened to "<ns>__<name>" and
                                           named back (name + namespace) in the answer
           anything else (web_search, file_search, mcp, custom, local_shell, ...) -> dropped (noted)
    tool_choice: auto|none|required     -> same; {"type":"function","name"} -> a named function;
                                           allowed_tools -> its mode; others -> auto (noted)
    parallel_tool_calls -> same; max_output_tokens -> max_tokens; temperature, top_p -> same;
    reasoning.effort (none..xhigh) -> reasoning_effort;
    text.format json_schema|json_object -> response_format
    stream -> stream + stream_options.include_usage
    store, include, metadata, prompt_cache_key (cache-affinity key), user, safety_identifier,
    service_tier, truncation, text.verbosity and unknown fields -> tolerated (not forwarded)
    previous_response_id, conversation, prompt, background: true -> 400 (no server-side state)

Answer (chat completion -> ``response``): reasoning_content -> a ``reasoning`` item
(reasoning_text), content -> a ``message`` item (output_text), each tool call -> a
``function_call`` item; finish_reason length -> status incomplete (max_output_tokens),
content_filter -> incomplete (content_filter), otherwise completed. Ids: ``resp_<exchange hex>``,
items ``msg_``/``fc_``/``rs_`` + exchange hex + output index; missing call ids ``call_...``.

Stream: response.created, response.in_progress, then per item output_item.added,
[content_part.added, output_text.delta..., output_text.done, content_part.done] |
[function_call_arguments.delta..., function_call_arguments.done] |
[reasoning_text.delta..., reasoning_text.done], output_item.done; finally response.completed
(or response.incomplete) with usage. A failure mid-stream: ``error`` then ``response.failed``.
Every event has ``type`` and ``sequence_number`` (from 0) and is sent with an ``event:`` line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.errors import InvalidRequestError
from gateway.wire.blocks import (
    Block,
    BlockSequencer,
    StepKind,
    completion_as_chunk,
    note,
    usage_counts,
)
from gateway.wire.sse import encode_named_event

NAMESPACE_SEP = "__"
_STATEFUL = ("previous_response_id", "conversation", "prompt")
_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")  # what vLLM and OpenAI take
_TEXT_PARTS = ("input_text", "output_text", "text", "refusal")
_ITEMS = {
    "text": ("msg", "message"),
    "tool": ("fc", "function_call"),
    "reasoning": ("rs", "reasoning"),
}


class ResponsesRequest(BaseModel):
    """The fields the door reads; the rest are tolerated as OpenAI does (``extra="allow"``)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    reasoning: dict[str, Any] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stream: bool | None = None
    metadata: dict[str, str] | None = None
    prompt_cache_key: str | None = None
    user: str | None = None
    safety_identifier: str | None = None
    text: dict[str, Any] | None = None


@dataclass(slots=True)
class ResponsesTranslation:
    """The internal chat body of a Responses request, and what the answer must echo."""

    body: dict[str, Any]
    stream: bool
    metadata: dict[str, str] | None
    cache_key: str | None
    namespaced: dict[str, tuple[str, str]]
    notes: dict[str, list[str]] = field(default_factory=dict)


def _invalid(message: str, param: str, code: str = "invalid_value") -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code=code)


def _content(content: Any, where: str, notes: dict[str, list[str]]) -> str | list[dict[str, Any]]:
    """Message content as a string, or as chat parts when it holds images."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _invalid(f"Invalid type for '{where}': expected a string or an array.", where)
    texts: list[str] = []
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            text = str(part.get("text") if kind != "refusal" else part.get("refusal") or "")
            texts.append(text)
            parts.append({"type": "text", "text": text})
        elif kind == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        else:
            note(notes, "dropped_content", str(kind))
    return parts if len(parts) > len(texts) else "".join(texts)


def _messages(
    req: ResponsesRequest, notes: dict[str, list[str]], flat: dict[tuple[str, str], str]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if req.instructions:
        out.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        return [*out, {"role": "user", "content": req.input}]
    calls: set[str] = set()
    for i, item in enumerate(req.input or []):
        where = f"input[{i}]"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise _invalid(f"Invalid value for '{where}.role': {role!r}.", f"{where}.role")
            content = _content(item.get("content"), f"{where}.content", notes)
            out.append({"role": "system" if role == "developer" else role, "content": content})
        elif kind == "function_call":
            call_id, name = item.get("call_id"), item.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise _invalid(f"Missing required parameter: '{where}.call_id'.", where)
            if item.get("namespace"):
                name = flat.get((str(item["namespace"]), name), name)
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": str(item.get("arguments") or "")},
            }
            last = out[-1] if out else None
            if last is None or last["role"] != "assistant" or isinstance(last["content"], list):
                last = {"role": "assistant", "content": None}
                out.append(last)
            last.setdefault("tool_calls", []).append(call)
            calls.add(call_id)
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise _invalid(f"Missing required parameter: '{where}.call_id'.", where)
            if call_id not in calls:  # its call was a dropped item (e.g. local_shell_call)
                note(notes, "dropped_input", "function_call_output")
                continue
            output = _content(item.get("output", ""), f"{where}.output", notes)
            text = output if isinstance(output, str) else "".join(p.get("text", "") for p in output)
            out.append({"role": "tool", "tool_call_id": call_id, "content": text})
        else:
            note(notes, "dropped_input", str(kind))
    return _merge_leading_system(out)


def _merge_leading_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One system message first (instructions + leading system/developer items): many chat
    templates accept a system message only at the start."""
    lead = 0
    while lead < len(messages) and messages[lead]["role"] == "system":
        lead += 1
    texts = [m["content"] for m in messages[:lead]]
    if lead < 2 or not all(isinstance(t, str) for t in texts):
        return messages
    return [{"role": "system", "content": "\n\n".join(texts)}, *messages[lead:]]


def _function(tool: dict[str, Any], name: str) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": name, "parameters": tool.get("parameters") or {"type": "object"}}
    if tool.get("description"):
        fn["description"] = tool["description"]
    return {"type": "function", "function": fn}


def _tools(
    tools: list[dict[str, Any]], notes: dict[str, list[str]]
) -> tuple[list[dict[str, Any]], dict[str, tuple[str, str]]]:
    out: list[dict[str, Any]] = []
    namespaced: dict[str, tuple[str, str]] = {}
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind == "function":
            if not isinstance(tool.get("name"), str):
                raise _invalid(f"Missing required parameter: 'tools[{i}].name'.", f"tools[{i}]")
            out.append(_function(tool, tool["name"]))
        elif kind == "namespace" and isinstance(tool.get("name"), str):
            inner_tools = tool.get("tools") or []
            if not isinstance(inner_tools, list):
                raise _invalid(
                    f"Invalid type for 'tools[{i}].tools': expected an array.", f"tools[{i}].tools"
                )
            for inner in inner_tools:
                if (
                    not isinstance(inner, dict)
                    or inner.get("type") != "function"
                    or not isinstance(inner.get("name"), str)
                ):
                    kind_of = inner.get("type") if isinstance(inner, dict) else type(inner).__name__
                    note(notes, "dropped_tools", f"{tool['name']}.{kind_of}")
                    continue
                flat = f"{tool['name']}{NAMESPACE_SEP}{inner['name']}"
                namespaced[flat] = (tool["name"], inner["name"])
                out.append(_function(inner, flat))
        else:
            note(notes, "dropped_tools", str(kind))
    return out, namespaced


def _tool_choice(choice: Any, names: set[str], notes: dict[str, list[str]]) -> Any:
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise _invalid(f"Invalid value for 'tool_choice': {choice!r}.", "tool_choice")
        return choice
    kind = choice.get("type")
    if kind == "function" and choice.get("name") in names:
        return {"type": "function", "function": {"name": choice["name"]}}
    if kind == "allowed_tools" and choice.get("mode") in ("auto", "required"):
        return choice["mode"]
    note(notes, "ignored_fields", "tool_choice")
    return "auto"


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format") or {}
    if not isinstance(fmt, dict):
        raise _invalid("Invalid type for 'text.format': expected an object.", "text.format")
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return None


def translate_request(body: dict[str, Any]) -> ResponsesTranslation:
    """The internal chat body for a Responses body; :class:`InvalidRequestError` on a bad one."""
    try:
        req = ResponsesRequest.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        raise _invalid(f"Invalid value for '{loc}': {err.get('msg', 'invalid')}", loc) from exc
    for key in _STATEFUL:
        if body.get(key):
            msg = (
                f"'{key}' needs server-side state this gateway does not keep; send all in 'input'."
            )
            raise _invalid(msg, key, "unsupported_parameter")
    if body.get("background"):
        raise _invalid("'background' is not supported.", "background", "unsupported_parameter")
    if req.input is None and not req.instructions:
        raise _invalid(
            "Missing required parameter: 'input'.", "input", "missing_required_parameter"
        )
    notes: dict[str, list[str]] = {}
    tools, namespaced = _tools(req.tools or [], notes)
    flat = {v: k for k, v in namespaced.items()}
    out: dict[str, Any] = {"model": req.model, "messages": _messages(req, notes, flat)}
    if tools:
        out["tools"] = tools
        if req.tool_choice is not None:
            names = {t["function"]["name"] for t in tools}
            out["tool_choice"] = _tool_choice(req.tool_choice, names, notes)
        if req.parallel_tool_calls is not None:
            out["parallel_tool_calls"] = req.parallel_tool_calls
    if req.max_output_tokens is not None:
        out["max_tokens"] = req.max_output_tokens
    for key in ("temperature", "top_p"):
        if getattr(req, key) is not None:
            out[key] = getattr(req, key)
    effort = (req.reasoning or {}).get("effort")
    if effort in _EFFORTS:
        out["reasoning_effort"] = effort
    response_format = _response_format(req.text)
    if response_format is not None:
        out["response_format"] = response_format
    if req.stream:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    cache_key = req.prompt_cache_key or req.safety_identifier or req.user
    return ResponsesTranslation(out, bool(req.stream), req.metadata, cache_key, namespaced, notes)


# Answer: internal chat completion -> Responses ``response``

# Request fields a ``response`` object repeats, and their values when the request left them out.
# fmt: off
_ECHO_DEFAULTS: dict[str, Any] = {
    "instructions": None, "max_output_tokens": None, "parallel_tool_calls": True,
    "previous_response_id": None, "reasoning": {"effort": None, "summary": None}, "store": True,
    "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
    "top_p": 1.0, "truncation": "disabled", "user": None, "metadata": {}, "prompt_cache_key": None,
}
# fmt: on


@dataclass(frozen=True, slots=True)
class ResponseContext:
    """What rendering an answer needs from the request: ids, echoed fields, tool names."""

    exchange_hex: str
    model: str
    echo: dict[str, Any]
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    created_at: int = field(default_factory=lambda: int(time.time()))

    @classmethod
    def build(
        cls, exchange_id: str, body: dict[str, Any], namespaced: dict[str, tuple[str, str]]
    ) -> ResponseContext:
        echo = {k: v if body.get(k) is None else body[k] for k, v in _ECHO_DEFAULTS.items()}
        return cls(exchange_id.replace("-", ""), str(body.get("model", "")), echo, namespaced)

    @property
    def response_id(self) -> str:
        return f"resp_{self.exchange_hex}"

    def sequencer(self) -> BlockSequencer:
        return BlockSequencer(True, lambda i: f"call_{self.exchange_hex}{i:04x}")

    def item_id(self, block: Block) -> str:
        return f"{_ITEMS[block.kind][0]}_{self.exchange_hex}{block.index:04x}"


def _item(ctx: ResponseContext, block: Block, status: str) -> dict[str, Any]:
    """The output item of a block; ``in_progress`` (just added) items carry no content yet."""
    full = status != "in_progress"
    item: dict[str, Any] = {"id": ctx.item_id(block), "type": _ITEMS[block.kind][1]}
    item["status"] = status
    if block.kind == "text":
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": block.text}
        item.update(content=[part] if full else [], role="assistant")
    elif block.kind == "reasoning":
        text = [{"type": "reasoning_text", "text": block.text}]
        item.update(summary=[], content=text if full else [])
    else:
        item.update(arguments=block.text if full else "", call_id=block.call_id, name=block.name)
        if block.name in ctx.namespaced:
            item["namespace"], item["name"] = ctx.namespaced[block.name]
    return item


def _usage(usage: dict[str, Any] | None) -> dict[str, Any] | None:
    if not usage:
        return None
    prompt, completion, cached, reasoning = usage_counts(usage)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def _outcome(seq: BlockSequencer) -> tuple[str, dict[str, str] | None]:
    if seq.finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if seq.finish_reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def _response(
    ctx: ResponseContext,
    seq: BlockSequencer,
    status: str,
    *,
    incomplete: dict[str, str] | None = None,
    error: dict[str, str] | None = None,
) -> dict[str, Any]:
    item_status = "completed" if status == "completed" else "incomplete"
    done, started = status == "completed", status == "in_progress"
    return {
        "id": ctx.response_id,
        "object": "response",
        "created_at": ctx.created_at,
        "status": status,
        "background": False,
        "completed_at": int(time.time()) if done else None,
        "error": error,
        "incomplete_details": incomplete,
        "model": seq.model or ctx.model,
        "output": [] if started else [_item(ctx, b, item_status) for b in seq.blocks],
        **ctx.echo,
        "usage": None if started else _usage(seq.usage),
    }


def render_response(ctx: ResponseContext, completion: dict[str, Any]) -> dict[str, Any]:
    """The Responses ``response`` object for a non-streamed chat completion."""
    seq = ctx.sequencer()
    seq.feed(completion_as_chunk(completion))
    status, incomplete = _outcome(seq)
    return _response(ctx, seq, status, incomplete=incomplete)


class ResponsesStreamEncoder:
    """Internal chat chunks -> Responses stream events; a ``gateway.pipeline.StreamEncoder``."""

    def __init__(self, ctx: ResponseContext) -> None:
        self._ctx = ctx
        self._seq = ctx.sequencer()
        self._sequence = 0
        self._started = False
        self._final: dict[str, Any] | None = None

    def _event(self, kind: str, **payload: Any) -> bytes:
        event = {"type": kind, "sequence_number": self._sequence, **payload}
        self._sequence += 1
        return encode_named_event(kind, event)

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        snapshot = _response(self._ctx, self._seq, "in_progress")
        return self._event("response.created", response=snapshot) + self._event(
            "response.in_progress", response=snapshot
        )

    def _open(self, block: Block) -> bytes:
        where = {"output_index": block.index}
        out = self._event(
            "response.output_item.added", **where, item=_item(self._ctx, block, "in_progress")
        )
        if block.kind == "text":
            part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
            out += self._event(
                "response.content_part.added",
                item_id=self._ctx.item_id(block),
                **where,
                content_index=0,
                part=part,
            )
        return out

    def _delta(self, block: Block, text: str) -> bytes:
        where = {"item_id": self._ctx.item_id(block), "output_index": block.index}
        if block.kind == "text":
            return self._event(
                "response.output_text.delta", **where, content_index=0, delta=text, logprobs=[]
            )
        if block.kind == "reasoning":
            return self._event(
                "response.reasoning_text.delta", **where, content_index=0, delta=text
            )
        return self._event("response.function_call_arguments.delta", **where, delta=text)

    def _close(self, block: Block) -> bytes:
        where = {"item_id": self._ctx.item_id(block), "output_index": block.index}
        item = _item(self._ctx, block, "completed")
        if block.kind == "text":
            out = self._event(
                "response.output_text.done", **where, content_index=0, text=block.text, logprobs=[]
            )
            out += self._event(
                "response.content_part.done", **where, content_index=0, part=item["content"][0]
            )
        elif block.kind == "reasoning":
            out = self._event(
                "response.reasoning_text.done", **where, content_index=0, text=block.text
            )
        else:
            out = self._event(
                "response.function_call_arguments.done",
                **where,
                name=item["name"],
                arguments=block.text,
            )
        return out + self._event("response.output_item.done", output_index=block.index, item=item)

    def _steps(self, steps: list[tuple[StepKind, Block, str]]) -> bytes:
        out = [
            self._open(b) if s == "open" else self._delta(b, t) if s == "delta" else self._close(b)
            for s, b, t in steps
        ]
        return b"".join(out)

    def encode(self, chunk: dict[str, Any]) -> bytes:
        steps = self._seq.feed(chunk)  # first, so the start event knows the served model
        return self._start() + self._steps(steps)

    def finish(self) -> bytes:
        out = self._start() + self._steps(self._seq.close())
        status, incomplete = _outcome(self._seq)
        self._final = _response(self._ctx, self._seq, status, incomplete=incomplete)
        return out + self._event(f"response.{status}", response=self._final)

    def error(self, message: str) -> bytes:
        out = self._start()
        failure = {"code": "server_error", "message": message}
        self._final = _response(self._ctx, self._seq, "failed", error=failure)
        out += self._event("error", code="server_error", message=message, param=None)
        return out + self._event("response.failed", response=self._final)

    def final_response(self) -> dict[str, Any] | None:
        """The response as sent; one cut off (client gone) is ``incomplete``."""
        if self._final is not None:
            return self._final
        return _response(self._ctx, self._seq, "incomplete")
