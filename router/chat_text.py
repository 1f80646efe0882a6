"""The scorer's view of a request, read from the internal chat body (OpenAI chat completions).

Every door translates its client's body into that format before routing (the Responses and
Messages doors included), and the exporter rebuilds the same shape from the record, so one reader
serves the gateway's request path and the RL loop's training alike: a model is trained on the
view it will be scored on. Pure and total: any body, however odd, gives a :class:`RequestText`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from router.request_text import RequestText


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
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        text = content_text(message.get("content"))
        chars += len(text)
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(text)
        elif role == "user":
            last_user = text
    return RequestText(
        system="\n".join(system),
        last_user=last_user,
        turns=len(messages),
        tool_names=tools,
        prompt_chars=chars,
        has_tools=bool(tools),
        endpoint=endpoint,
    )


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
