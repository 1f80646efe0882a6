"""The scorer's view of a request, read from the internal chat body (OpenAI chat completions).

Every door translates its client's body into that format before routing (the Responses and
Messages doors included), and the exporter rebuilds the same shape from the record, so one reader
serves the gateway's request path and the RL loop's training alike: a model is trained on the
view it will be scored on. Pure and total: any body, however odd, gives a :class:`RequestText`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from router.request_text import RequestText, ToolCallText

# A tool result reports an error when its text starts so: "Error: ..." is what the Messages door
# makes of Anthropic's ``is_error`` and what agent sandboxes answer; Claude Code wraps its own
# in ``<tool_use_error>``. A failing test run is a result, not an error of the call.
_ERROR_RESULT: Final = re.compile(r"\s*(?:error\b|<tool_use_error>)", re.IGNORECASE)
TOOL_ROLES: Final = frozenset({"tool", "function"})


def is_error_result(text: str) -> bool:
    """Whether a tool result's text reports that the call failed (see ``_ERROR_RESULT``)."""
    return _ERROR_RESULT.match(text[:64]) is not None


def request_text(endpoint: str, body: Mapping[str, Any]) -> RequestText:
    """``RequestText`` of a chat-completions body (``messages``, ``tools``) or a legacy
    completions body (``prompt``)."""
    tools = _tool_names(body.get("tools"))
    messages = body.get("messages")
    if not isinstance(messages, list):
        prompt = body.get("prompt")
        text = prompt if isinstance(prompt, str) else _first_text(prompt)
        return RequestText(
            last_user=text, turns=1, prompt_chars=len(text), tool_names=tools, endpoint=endpoint
        )
    system: list[str] = []
    last_user = ""
    chars = 0
    steps = 0
    streak = 0
    last_role: object = None
    last_error = False
    last_assistant: Mapping[str, Any] = {}
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        text = content_text(message.get("content"))
        chars += len(text)
        role = last_role = message.get("role")
        if role in ("system", "developer"):
            system.append(text)
        elif role == "user":
            last_user = text
        elif role == "assistant":
            steps += 1
            last_assistant = message
        elif role in TOOL_ROLES:
            last_error = is_error_result(text)
            streak = streak + 1 if last_error else 0
    last_tool = last_role in TOOL_ROLES
    return RequestText(
        system="\n".join(system),
        last_user=last_user,
        turns=len(messages),
        tool_names=tools,
        prompt_chars=chars,
        has_tools=bool(tools),
        endpoint=endpoint,
        step=steps,
        last_tool_result=last_tool,
        last_tool_error=last_tool and last_error,
        tool_error_streak=streak,
        last_calls=_calls(last_assistant.get("tool_calls")),
    )


def _calls(tool_calls: Any) -> tuple[ToolCallText, ...]:
    """The function calls of an assistant message (``arguments`` as text, as the model wrote)."""
    if not isinstance(tool_calls, list):
        return ()
    out = []
    for call in tool_calls:
        if not isinstance(call, Mapping) or not isinstance(fn := call.get("function"), Mapping):
            continue
        name, args, call_id = fn.get("name"), fn.get("arguments"), call.get("id")
        out.append(
            ToolCallText(
                name if isinstance(name, str) else "",
                args if isinstance(args, str) else "" if args is None else _as_json(args),
                call_id if isinstance(call_id, str) else "",
            )
        )
    return tuple(out)


def _as_json(value: Any) -> str:
    # Arguments sent as an object rather than JSON text: keep their JSON (a valid call).
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return "<unreadable arguments>"


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [p.get("text") for p in content if isinstance(p, Mapping)]
    return "\n".join(p for p in parts if isinstance(p, str))


def _first_text(prompt: Any) -> str:
    # A batch of prompts routes as its first; token ids carry no text to read.
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return prompt[0]
    return ""


def _tool_names(tools: Any) -> tuple[str, ...]:
    if not isinstance(tools, Sequence) or isinstance(tools, str):
        return ()
    names = []
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else tool.get("name")
        if isinstance(name, str):
            names.append(name)
    return tuple(names)
