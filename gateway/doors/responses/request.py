"""OpenAI Responses API -> the internal format (OpenAI chat completions): the request side.
Pure; no I/O. The answer side (a chat completion or stream -> Responses) is
:mod:`gateway.doors.responses.translate`.

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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.errors import InvalidRequestError
from gateway.wire.blocks import note

NAMESPACE_SEP = "__"
_STATEFUL = ("previous_response_id", "conversation", "prompt")
_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")  # what vLLM and OpenAI take
_TEXT_PARTS = ("input_text", "output_text", "text", "refusal")


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
