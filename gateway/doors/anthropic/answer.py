"""An Anthropic ``message`` as the internal format's answer: an OpenAI ``chat.completion``. Pure.

Needed where an answer exists only in Anthropic's format: a native pass-through (the Messages
door to an Anthropic provider, whose answer the client got unchanged), recorded as the record's
``canonical_response``, and Messages records written before that field existed, read by the
exporter. The inverse of :func:`gateway.doors.anthropic.translate.render_message`::

    text blocks                 -> content, joined exactly as the Messages translator joins an
                                   assistant turn's text (it is the translator's own function,
                                   :func:`gateway.doors.anthropic.translate.assistant_message`)
    tool_use, server_tool_use   -> tool_calls (id kept, arguments = JSON of input); a server
                                   tool's call stays a call, so a reader sees that the answer used
                                   a tool the internal request does not offer
    thinking                    -> reasoning_content (joined); redacted_thinking and server tools'
                                   results -> dropped
    stop_reason                 -> finish_reason: end_turn, stop_sequence, pause_turn -> stop;
                                   max_tokens -> length; tool_use -> tool_calls; refusal ->
                                   content_filter; none (a cut stream) -> None
    usage                       -> OpenAI's convention: prompt_tokens counts every input token,
                                   cache reads (cached_tokens) and writes (cache_creation_tokens)

A body that is not a message (content not a list of blocks, a call without id or name, counts
that are not numbers) is a ``ValueError`` or ``TypeError``.
"""

from __future__ import annotations

from typing import Any, Final

from gateway.doors.anthropic.translate import assistant_message
from gateway.wire.native import usage_as_openai

_CALLS: Final = ("tool_use", "server_tool_use")
_FINISH_REASONS: Final = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def completion_of_message(message: dict[str, Any]) -> dict[str, Any]:
    """The ``chat.completion`` an Anthropic ``message`` amounts to (``message`` is not changed)."""
    content = message.get("content")
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise ValueError("not an Anthropic message: content is not a list of blocks")
    blocks: list[dict[str, Any]] = []
    thinking: list[str] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            blocks.append(block)
        elif kind in _CALLS:
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise ValueError(f"not an Anthropic message: a {kind} block without id or name")
            blocks.append(block if kind == "tool_use" else {**block, "type": "tool_use"})
        elif kind == "thinking":
            thinking.append(str(block.get("thinking") or ""))
    chat = assistant_message(blocks, {}, "content")
    if thinking:
        chat["reasoning_content"] = "".join(thinking)
    stop = message.get("stop_reason")
    finish = None if stop is None else _FINISH_REASONS.get(str(stop), "stop")
    return {
        "id": message.get("id"),
        "object": "chat.completion",
        "model": message.get("model"),
        "choices": [{"index": 0, "message": chat, "finish_reason": finish, "logprobs": None}],
        "usage": usage_as_openai(message.get("usage")),
    }
