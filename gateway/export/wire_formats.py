"""Parsers of each recorded wire format into OpenAI chat messages, tools and answers.

The mapping rules are listed in :mod:`gateway.export.conversation`; every parser raises
:class:`~gateway.export.turns.UnsupportedShape` instead of guessing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from gateway.export.turns import AssistantTurn, Message, ToolCall, UnsupportedShape

_TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})
_DROPPED_PARTS = frozenset({"thinking", "redacted_thinking", "reasoning"})

Parsers = tuple[
    Callable[[dict[str, Any]], list[Message]],
    Callable[[dict[str, Any]], list[dict[str, Any]]],
    Callable[[dict[str, Any]], AssistantTurn],
]


def parsers_for(fmt: object) -> Parsers:
    """``(messages, tools, answer)`` parsers of wire format ``fmt``."""
    if fmt == "openai.chat":
        return _chat_messages, _chat_tools, _chat_answer
    if fmt == "openai.completions":
        return _completion_messages, _no_tools, _completion_answer
    if fmt == "openai.responses":
        return _responses_messages, _responses_tools, _responses_answer
    if fmt == "anthropic.messages":
        return _anthropic_messages, _anthropic_tools, _anthropic_answer
    raise UnsupportedShape("unknown_wire_format", str(fmt))


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


def _no_tools(request: dict[str, Any]) -> list[dict[str, Any]]:
    return []


def _append_tool_calls(messages: list[Message], calls: Iterable[ToolCall]) -> None:
    """Attach calls to the trailing assistant message, or start one."""
    if not messages or messages[-1]["role"] != "assistant":
        messages.append({"role": "assistant", "content": None})
    messages[-1].setdefault("tool_calls", []).extend(call.to_dict() for call in calls)


# ---------------------------------------------------------------- OpenAI chat


def _chat_messages(request: dict[str, Any]) -> list[Message]:
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


def _chat_tools(request: dict[str, Any]) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for tool in _items(request.get("tools") or [], "tools"):
        fn = tool.get("function")
        if tool.get("type") != "function" or not isinstance(fn, dict):
            raise UnsupportedShape("non_function_tool", str(tool.get("type")))
        tools.append(_function_tool(fn.get("name"), fn.get("description"), fn.get("parameters")))
    for fn in _items(request.get("functions") or [], "functions"):
        tools.append(_function_tool(fn.get("name"), fn.get("description"), fn.get("parameters")))
    return tools


def _chat_answer(response: dict[str, Any]) -> AssistantTurn:
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


def _completion_messages(request: dict[str, Any]) -> list[Message]:
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


def _completion_answer(response: dict[str, Any]) -> AssistantTurn:
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UnsupportedShape("malformed_response", "no choices")
    text = choices[0].get("text")
    if not isinstance(text, str):
        raise UnsupportedShape("malformed_response", "choice without text")
    return AssistantTurn(text or None)


# ---------------------------------------------------------------- OpenAI Responses


def _responses_messages(request: dict[str, Any]) -> list[Message]:
    if request.get("previous_response_id") or request.get("conversation"):
        raise UnsupportedShape("stateful_conversation", "previous_response_id or conversation")
    messages: list[Message] = []
    instructions = request.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    raw = request.get("input")
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
        return messages
    for i, item in enumerate(_items(raw, "input")):
        where = f"input[{i}]"
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ("system", "developer", "user", "assistant"):
                raise UnsupportedShape("unknown_role", f"{where}: {role}")
            text = _text(item.get("content"), where)
            if role == "assistant":
                messages.append({"role": "assistant", "content": text or None})
            else:
                messages.append({"role": "user" if role == "user" else "system", "content": text})
        elif kind == "function_call":
            args = item.get("arguments")
            call = _tool_call(item.get("call_id"), item.get("name"), args, _fallback_id(where, 0))
            _append_tool_calls(messages, [call])
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise UnsupportedShape("malformed_request", f"{where}: output without call_id")
            content = _text(item.get("output"), where)
            messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        elif kind == "reasoning":
            continue
        elif kind == "item_reference":
            raise UnsupportedShape("stateful_conversation", where)
        else:
            raise UnsupportedShape("unsupported_item", f"{where}: {kind}")
    return messages


def _responses_tools(request: dict[str, Any]) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for tool in _items(request.get("tools") or [], "tools"):
        if tool.get("type") != "function":
            raise UnsupportedShape("non_function_tool", str(tool.get("type")))
        tools.append(
            _function_tool(tool.get("name"), tool.get("description"), tool.get("parameters"))
        )
    return tools


def _responses_answer(response: dict[str, Any]) -> AssistantTurn:
    output = response.get("output")
    if not isinstance(output, list) or not all(isinstance(v, dict) for v in output):
        raise UnsupportedShape("malformed_response", "output is not a list of objects")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for i, item in enumerate(output):
        kind = item.get("type")
        if kind == "message":
            texts.append(_text(item.get("content"), f"output[{i}]"))
        elif kind == "function_call":
            args = item.get("arguments")
            calls.append(
                _tool_call(item.get("call_id"), item.get("name"), args, _fallback_id("output", i))
            )
        elif kind == "reasoning":
            continue
        else:
            raise UnsupportedShape("unsupported_item", f"output[{i}]: {kind}")
    text = "\n".join(t for t in texts if t)
    return AssistantTurn(text or None, tuple(calls))


# ---------------------------------------------------------------- Anthropic messages


def _anthropic_messages(request: dict[str, Any]) -> list[Message]:
    messages: list[Message] = []
    system = _text(request.get("system"), "system")
    if system:
        messages.append({"role": "system", "content": system})
    for i, msg in enumerate(_items(request.get("messages"), "messages")):
        role = msg.get("role")
        where = f"messages[{i}]"
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if role == "user":
            messages.extend(_anthropic_user(_items(blocks, where), where))
        elif role == "assistant":
            messages.append(_anthropic_assistant(_items(blocks, where), where).to_message())
        else:
            raise UnsupportedShape("unknown_role", f"{where}: {role}")
    return messages


def _anthropic_user(blocks: list[dict[str, Any]], where: str) -> list[Message]:
    """Tool results first (OpenAI wants them right after the calls), then the user's text."""
    tool_messages: list[Message] = []
    texts: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            texts.append(_text([block], where))
        elif kind == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str):
                raise UnsupportedShape("malformed_request", f"{where}: tool_result without id")
            content = _text(block.get("content"), where)
            tool_messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        elif kind in ("image", "document"):
            raise UnsupportedShape("non_text_content", f"{where}: {kind}")
        else:
            raise UnsupportedShape("unsupported_item", f"{where}: {kind}")
    if texts or not tool_messages:
        tool_messages.append({"role": "user", "content": "\n".join(texts)})
    return tool_messages


def _anthropic_assistant(blocks: list[dict[str, Any]], where: str) -> AssistantTurn:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            texts.append(_text([block], where))
        elif kind == "tool_use":
            args = block.get("input")
            calls.append(
                _tool_call(block.get("id"), block.get("name"), args, _fallback_id(where, j))
            )
        elif kind in _DROPPED_PARTS:
            continue
        else:
            raise UnsupportedShape("unsupported_item", f"{where}: {kind}")
    text = "\n".join(t for t in texts if t)
    return AssistantTurn(text or None, tuple(calls))


def _anthropic_tools(request: dict[str, Any]) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    for tool in _items(request.get("tools") or [], "tools"):
        if tool.get("type", "custom") != "custom":
            raise UnsupportedShape("non_function_tool", str(tool.get("type")))
        tools.append(
            _function_tool(tool.get("name"), tool.get("description"), tool.get("input_schema"))
        )
    return tools


def _anthropic_answer(response: dict[str, Any]) -> AssistantTurn:
    content = response.get("content")
    if not isinstance(content, list) or not all(isinstance(v, dict) for v in content):
        raise UnsupportedShape("malformed_response", "content is not a list of blocks")
    return _anthropic_assistant(content, "response")
