"""One conversation shape for every wire format the gateway records.

Every exporter works on OpenAI chat messages, whatever format the client spoke:

- ``{"role": "system", "content": str}``  (OpenAI ``developer`` maps to ``system``)
- ``{"role": "user", "content": str}``
- ``{"role": "assistant", "content": str | None, "tool_calls"?: [...]}``
  with each call ``{"id", "type": "function", "function": {"name", "arguments": str}}``
- ``{"role": "tool", "tool_call_id": str, "content": str}``

Mapping rules:

- OpenAI chat: text content parts are joined with ``"\\n"``; ``name`` fields are dropped.
- Legacy completions: the prompt string becomes one user message, the completion text the answer.
- OpenAI Responses: ``instructions`` become the system message; ``message`` items map by role;
  consecutive ``function_call`` items become one assistant turn with several ``tool_calls``;
  ``function_call_output`` items become tool messages; ``reasoning`` items are dropped.
- Anthropic messages: ``system`` becomes the system message; ``tool_use`` blocks become
  ``tool_calls`` (``input`` serialized as compact JSON); each ``tool_result`` block becomes a tool
  message, placed before the text of the same user turn; ``thinking`` blocks are dropped.
- Tools become OpenAI chat tools ``{"type": "function", "function": {name, description?,
  parameters?}}``.

Anything that cannot be mapped faithfully raises :class:`UnsupportedShape` carrying a short
reason code (listed in ``SKIP_REASONS``); exporters count those and move on. Images and files,
fill-in-the-middle prompts (``suffix``), batched prompts, server-side conversation state
(``previous_response_id``) and non-function tools are all skipped, never approximated.
"""

from __future__ import annotations

from typing import Any

from gateway.export.rows import ExportRow
from gateway.export.turns import SKIP_REASONS, AssistantTurn, Message, ToolCall, UnsupportedShape
from gateway.export.wire_formats import parsers_for

__all__ = [
    "SKIP_REASONS",
    "AssistantTurn",
    "Message",
    "ToolCall",
    "UnsupportedShape",
    "answer_of",
    "to_messages",
    "tools_of",
]


def to_messages(row: ExportRow) -> list[Message]:
    """The prompt of ``row`` (its request) as OpenAI chat messages.

    Raises :class:`UnsupportedShape` when the request cannot be mapped faithfully.
    """
    request = row["request"]
    if not isinstance(request, dict):
        raise UnsupportedShape("malformed_request", "request is not an object")
    return parsers_for(row.get("wire_format"))[0](request)


def tools_of(row: ExportRow) -> list[dict[str, Any]]:
    """The tools offered in ``row``'s request as OpenAI chat tools (empty when none).

    Raises :class:`UnsupportedShape` for non-function tools (web search, computer use, ...).
    """
    request = row["request"]
    if not isinstance(request, dict):
        raise UnsupportedShape("malformed_request", "request is not an object")
    return parsers_for(row.get("wire_format"))[1](request)


def answer_of(row: ExportRow) -> AssistantTurn | None:
    """The assistant's answer in ``row``'s response.

    ``None`` when there is no usable answer: the call failed (no response, or status >= 400)
    or the answer holds neither text nor tool calls. Only the first choice of an ``n > 1``
    response is used. Raises :class:`UnsupportedShape` for a response it cannot read.
    """
    response = row["response"]
    if response is None or row["status"] >= 400:
        return None
    if not isinstance(response, dict):
        raise UnsupportedShape("malformed_response", "response is not an object")
    try:
        turn = parsers_for(row.get("wire_format"))[2](response)
    except UnsupportedShape as exc:
        if exc.reason == "malformed_request":  # the shared parsers speak of requests
            raise UnsupportedShape("malformed_response", str(exc)) from exc
        raise
    if not turn.content and not turn.tool_calls:
        return None
    return turn
