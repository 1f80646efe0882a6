"""One conversation shape for every wire format the gateway records.

Every exporter works on OpenAI chat messages, whatever format the client spoke:

- ``{"role": "system", "content": str}``  (OpenAI ``developer`` maps to ``system``)
- ``{"role": "user", "content": str}``
- ``{"role": "assistant", "content": str | None, "tool_calls"?: [...]}``
  with each call ``{"id", "type": "function", "function": {"name", "arguments": str}}``
- ``{"role": "tool", "tool_call_id": str, "content": str}``

Where it comes from: the conversation the served model saw, in the internal format
(:mod:`traffic.export.wire_formats`): the client's own body for the OpenAI doors, the door's
translation for the Responses and Messages doors (the record's ``canonical_request`` and
``canonical_response``, or, for records older than those, the live translator run again when the
caller passes it as ``legacy``). So Responses and Messages conversations follow the live
translators' rules exactly (:mod:`gateway.doors.responses.request`,
:mod:`gateway.doors.anthropic.translate`): a ``tool_result`` with
``is_error`` reads ``Error: ...``, an assistant turn's text blocks are joined with nothing
between them, leading system and developer items become one system message, namespaced tools are
flattened to ``<namespace>__<name>``, and what the translation left out (thinking blocks,
reasoning items, typed and built-in tools, images inside tool results) is left out here too.

Mapping of the internal format (:mod:`traffic.export.chat_format`):

- Chat: text content parts are joined with ``"\\n"``; ``name`` fields are dropped.
- Legacy completions: the prompt string becomes one user message, the completion text the answer.
- Tools become OpenAI chat tools ``{"type": "function", "function": {name, description?,
  parameters?}}``.

Anything that cannot be mapped faithfully raises :class:`UnsupportedShape` carrying a short
reason code (listed in ``SKIP_REASONS``); exporters count those and move on. Images and files,
fill-in-the-middle prompts (``suffix``), batched prompts, server-side conversation state
(``previous_response_id``) and non-function tools are all skipped, never approximated; so is an
answer of a translating door that calls a tool its conversation does not offer (a typed or
server tool the translation left out, e.g. Anthropic's ``web_search`` used by the provider).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from traffic.export.chat_format import (
    chat_answer,
    chat_messages,
    chat_tools,
    completion_answer,
    completion_messages,
)
from traffic.export.turns import SKIP_REASONS, AssistantTurn, Message, ToolCall, UnsupportedShape
from traffic.export.wire_formats import (
    TRANSLATED_FORMATS,
    InternalKind,
    LegacyTranslator,
    internal_answer,
    internal_request,
)
from traffic.store.records import InferenceRecord, json_object

__all__ = [
    "SKIP_REASONS",
    "AssistantTurn",
    "LegacyTranslator",
    "Message",
    "ToolCall",
    "UnsupportedShape",
    "answer_of",
    "canonical_body",
    "conversation_of",
    "to_messages",
    "tools_of",
]


def _messages(kind: InternalKind, body: dict[str, Any]) -> list[Message]:
    return chat_messages(body) if kind == "chat" else completion_messages(body)


def _tools(kind: InternalKind, body: dict[str, Any]) -> list[dict[str, Any]]:
    return chat_tools(body) if kind == "chat" else []


def to_messages(record: InferenceRecord, legacy: LegacyTranslator | None = None) -> list[Message]:
    """The prompt of ``record`` (its request) as OpenAI chat messages.

    Raises :class:`UnsupportedShape` when the request cannot be mapped faithfully.
    """
    return _messages(*internal_request(record, legacy))


def tools_of(
    record: InferenceRecord, legacy: LegacyTranslator | None = None
) -> list[dict[str, Any]]:
    """The tools offered in ``record``'s request as OpenAI chat tools (empty when none).

    Raises :class:`UnsupportedShape` for non-function tools (web search, computer use, ...).
    """
    return _tools(*internal_request(record, legacy))


def canonical_body(record: InferenceRecord) -> Mapping[str, Any]:
    """``record``'s request as a chat body ``{"messages", "tools"}`` whatever door it came
    through (what the router's text reader reads of a recorded request); the recorded body
    itself where it cannot be read so (a record written before its canonical fields)."""
    try:
        kind, body = internal_request(record, None)
        return {"messages": _messages(kind, body), "tools": _tools(kind, body)}
    except UnsupportedShape:
        return json_object(record.request) or {}


def answer_of(
    record: InferenceRecord, legacy: LegacyTranslator | None = None
) -> AssistantTurn | None:
    """The assistant's answer in ``record``'s response.

    ``None`` when there is no usable answer: the call failed (no response, or status >= 400)
    or the answer holds neither text nor tool calls. Only the first choice of an ``n > 1``
    response is used. Raises :class:`UnsupportedShape` for a response it cannot read.
    """
    return _answer(record, legacy, lambda: tools_of(record, legacy))


def conversation_of(
    record: InferenceRecord, legacy: LegacyTranslator | None = None
) -> tuple[list[Message], list[dict[str, Any]], AssistantTurn | None]:
    """``(to_messages(record), tools_of(record), answer_of(record))``, the request read once."""
    kind, body = internal_request(record, legacy)
    tools = _tools(kind, body)
    return _messages(kind, body), tools, _answer(record, legacy, lambda: tools)


def _answer(
    record: InferenceRecord,
    legacy: LegacyTranslator | None,
    offered: Callable[[], list[dict[str, Any]]],
) -> AssistantTurn | None:
    response = record.response
    if response is None or record.status >= 400:
        return None
    if not isinstance(response, dict):
        raise UnsupportedShape("malformed_response", "response is not an object")
    try:
        kind, completion = internal_answer(record, response, legacy)
        turn = chat_answer(completion) if kind == "chat" else completion_answer(completion)
    except UnsupportedShape as exc:
        if exc.reason == "malformed_request":  # the shared parsers speak of requests
            raise UnsupportedShape("malformed_response", str(exc)) from exc
        raise
    if not turn.content and not turn.tool_calls:
        return None
    if turn.tool_calls and record.wire_format in TRANSLATED_FORMATS:
        names = {tool["function"]["name"] for tool in offered()}
        unoffered = sorted({call.name for call in turn.tool_calls} - names)
        if unoffered:
            raise UnsupportedShape("non_function_tool", f"the answer calls unoffered {unoffered}")
    return turn
