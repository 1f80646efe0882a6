"""Parsers of the internal format (OpenAI chat and legacy completions) into the exporters'
conversation pieces: chat messages, tools and the answer.

The mapping rules are listed in :mod:`traffic.export.conversation`; every parser raises
:class:`~traffic.export.turns.UnsupportedShape` instead of guessing. Other wire formats are read
through these after :mod:`traffic.export.wire_formats` put them in the internal format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from traffic.export.turns import AssistantTurn, Message, ToolCall, UnsupportedShape

_TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})
_DROPPED_PARTS = frozenset({"thinking", "redacted_thinking", "reasoning"})


# ---------------------------------------------------------------- shared pieces


def _text(content: Any, where: str) -> str:
    """Plain text of a content value: a string, or a list of text parts joined by newlines."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise UnsupportedShape("malformed_request", f"{where}: content is {type(content).__name__}")
    texts: list[str] = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise UnsupportedShape("malformed_request", f"{where}: content part is not an object")
        kind = part.get("type")
        if kind in _DROPPED_PARTS:
            continue
        if kind not in _TEXT_PARTS:
            raise UnsupportedShape("non_text_content", f"{where}: {kind}")
        value = part.get("text", part.get("refusal"))
        if not isinstance(value, str):
            raise UnsupportedShape("malformed_request", f"{where}: text part without text")
        texts.append(value)
    return "\n".join(texts)


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value if value is not None else {}, ensure_ascii=False, separators=(",", ":"))


def _tool_call(call_id: Any, name: Any, arguments: Any, fallback_id: str) -> ToolCall:
    """A call; ``fallback_id`` (unique within the conversation) stands in for a missing id."""
    if not isinstance(name, str) or not name:
        raise UnsupportedShape("malformed_request", "tool call without a name")
    ident = call_id if isinstance(call_id, str) and call_id else fallback_id
    return ToolCall(id=ident, name=name, arguments=_arguments(arguments))


def _fallback_id(where: str, index: int) -> str:
    return "call_" + re.sub(r"\W+", "_", where).strip("_") + f"_{index}"


def _function_tool(name: Any, description: Any, parameters: Any) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise UnsupportedShape("malformed_request", "tool without a name")
    function: dict[str, Any] = {"name": name}
    if isinstance(description, str):
        function["description"] = description
    if isinstance(parameters, dict):
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def _items(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise UnsupportedShape("malformed_request", f"{where} is not a list of objects")
    return value


def _append_tool_calls(messages: list[Message], calls: Iterable[ToolCall]) -> None:
    """Attach calls to the trailing assistant message, or start one."""
    if not messages or messages[-1]["role"] != "assistant":
        messages.append({"role": "assistant", "content": None})
    messages[-1].setdefault("tool_calls", []).extend(call.to_dict() for call in calls)


# ---------------------------------------------------------------- OpenAI chat


def chat_messages(request: dict[str, Any]) -> list[Message]:
    messages: list[Message] = []
    for i, msg in enumerate(_items(request.get("messages"), "messages")):
        role = msg.get("role")
        where = f"messages[{i}]"
        if role in ("system", "developer", "user"):
            out_role = "user" if role == "user" else "system"
            messages.append({"role": out_role, "content": _text(msg.get("content"), where)})
        elif role == "assistant":
            if msg.get("function_call"):
                raise UnsupportedShape("legacy_function_call", where)
            text = _text(msg.get("content"), where) or msg.get("refusal") or None
            messages.append({"role": "assistant", "content": text})
            calls = _chat_tool_calls(msg.get("tool_calls"), where)
            if calls:
                _append_tool_calls(messages, calls)
        elif role == "tool":
            call_id = msg.get("tool_call_id")
            if not isinstance(call_id, str):
                raise UnsupportedShape("malformed_request", f"{where}: tool without tool_call_id")
            content = _text(msg.get("content"), where)
            messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        elif role == "function":
            raise UnsupportedShape("legacy_function_call", where)
        else:
            raise UnsupportedShape("unknown_role", f"{where}: {role}")
    return messages


def _chat_tool_calls(raw: Any, where: str) -> list[ToolCall]:
    if raw is None:
        return []
    calls: list[ToolCall] = []
    for j, call in enumerate(_items(raw, f"{where}.tool_calls")):
        if call.get("type", "function") != "function":
            raise UnsupportedShape("non_function_tool", f"{where}: {call.get('type')}")
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise UnsupportedShape("malformed_request", f"{where}: tool call without function")
        args = fn.get("arguments")
        calls.append(_tool_call(call.get("id"), fn.get("name"), args, _fallback_id(where, j)))
    return calls


def chat_tools(request: dict[str, Any]) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for tool in _items(request.get("tools") or [], "tools"):
        fn = tool.get("function")
        if tool.get("type") != "function" or not isinstance(fn, dict):
            raise UnsupportedShape("non_function_tool", str(tool.get("type")))
        tools.append(_function_tool(fn.get("name"), fn.get("description"), fn.get("parameters")))
    for fn in _items(request.get("functions") or [], "functions"):
        tools.append(_function_tool(fn.get("name"), fn.get("description"), fn.get("parameters")))
    return tools


def chat_answer(response: dict[str, Any]) -> AssistantTurn:
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UnsupportedShape("malformed_response", "no choices")
    msg = choices[0].get("message")
    if not isinstance(msg, dict):
        raise UnsupportedShape("malformed_response", "choice without message")
    if msg.get("function_call"):
        raise UnsupportedShape("legacy_function_call", "response")
    text = _text(msg.get("content"), "response") or msg.get("refusal") or None
    return AssistantTurn(text, tuple(_chat_tool_calls(msg.get("tool_calls"), "response")))


# ---------------------------------------------------------------- legacy completions


def completion_messages(request: dict[str, Any]) -> list[Message]:
    prompt = request.get("prompt")
    if isinstance(prompt, list):
        if len(prompt) != 1 or not isinstance(prompt[0], str):
            raise UnsupportedShape("batched_prompt", "prompt list or token ids")
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise UnsupportedShape("malformed_request", "prompt is not a string")
    if request.get("suffix"):
        raise UnsupportedShape("fim_suffix", "completion with a suffix")
    return [{"role": "user", "content": prompt}]


def completion_answer(response: dict[str, Any]) -> AssistantTurn:
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UnsupportedShape("malformed_response", "no choices")
    text = choices[0].get("text")
    if not isinstance(text, str):
        raise UnsupportedShape("malformed_response", "choice without text")
    return AssistantTurn(text or None)
