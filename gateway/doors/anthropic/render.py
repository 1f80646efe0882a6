"""The internal answer (OpenAI chat completion or stream) -> Anthropic Messages. Pure; no I/O.

Answer (chat completion -> ``message``)::

    reasoning_content -> thinking block (only when the request enabled thinking)
    content -> text block; tool_calls -> tool_use blocks (input = parsed arguments, id kept)
    finish_reason stop -> end_turn (stop_sequence when vLLM names the matched stop string),
    length -> max_tokens, tool_calls -> tool_use, content_filter -> refusal
    usage: input_tokens = prompt - cached - cache writes, cache_read_input_tokens = cached

Stream: message_start (input_tokens estimated until the real count arrives in message_delta),
content_block_start / ping (after the first block) / content_block_delta (text_delta,
input_json_delta, thinking_delta) / content_block_stop, message_delta (stop_reason, usage),
message_stop; a failure mid-stream is an ``error`` event.

The internal answer is read as content blocks by :mod:`gateway.wire.blocks`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.wire.blocks import (
    Block,
    BlockSequencer,
    StepKind,
    cache_counts,
    completion_as_chunk,
    usage_counts,
)
from gateway.wire.native import ANTHROPIC_ERROR_STATUS
from gateway.wire.sse import encode_named_event

# Errors

_ERROR_TYPES: Final = {status: kind for kind, status in ANTHROPIC_ERROR_STATUS.items()} | {
    529: "overloaded_error"
}


def error_body(status: int, openai_body: dict[str, Any]) -> dict[str, Any]:
    """Anthropic's error shape for a status and the gateway's OpenAI-shaped error body."""
    default = "api_error" if status >= 500 else "invalid_request_error"
    message = str((openai_body.get("error") or {}).get("message", "error"))
    return {
        "type": "error",
        "error": {"type": _ERROR_TYPES.get(status, default), "message": message},
    }


# Answer: internal chat completion -> Anthropic message


@dataclass(frozen=True, slots=True)
class MessageContext:
    """What rendering an answer needs to know about the request."""

    message_id: str
    model: str
    estimated_input_tokens: int
    thinking: bool = False
    stop_sequences: tuple[str, ...] = ()

    def sequencer(self) -> BlockSequencer:
        suffix = self.message_id.removeprefix("msg_")
        return BlockSequencer(self.thinking, lambda i: f"toolu_{suffix}{i:04x}")


_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def _block(block: Block) -> dict[str, Any]:
    if block.kind == "text":
        return {"type": "text", "text": block.text}
    if block.kind == "reasoning":
        return {"type": "thinking", "thinking": block.text, "signature": ""}
    try:
        arguments = orjson.loads(block.text) if block.text else {}
    except orjson.JSONDecodeError:
        arguments = {}
    return {
        "type": "tool_use",
        "id": block.call_id,
        "name": block.name,
        "input": arguments if isinstance(arguments, dict) else {},
    }


def _stop(ctx: MessageContext, seq: BlockSequencer) -> tuple[str, str | None]:
    if seq.matched_stop is not None and seq.matched_stop in ctx.stop_sequences:
        return "stop_sequence", seq.matched_stop
    reason = _STOP_REASONS.get(seq.finish_reason or "stop", "end_turn")
    if reason == "end_turn" and any(b.kind == "tool" for b in seq.blocks):
        reason = "tool_use"
    return reason, None


def _usage(ctx: MessageContext, usage: dict[str, Any] | None) -> dict[str, int]:
    if not isinstance(usage, dict) or not usage:
        return {"input_tokens": ctx.estimated_input_tokens, "output_tokens": 0}
    prompt, completion, cached, _ = usage_counts(usage)
    written = int(cache_counts(usage)[1] or 0)
    return {
        "input_tokens": max(prompt - cached - written, 0),
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": cached,
        "output_tokens": completion,
    }


def _message(
    ctx: MessageContext,
    seq: BlockSequencer,
    content: list[dict[str, Any]],
    stop: tuple[str | None, str | None],
    usage: dict[str, int],
) -> dict[str, Any]:
    return {
        "id": ctx.message_id,
        "type": "message",
        "role": "assistant",
        "model": ctx.model,  # the name asked for (gateway.backends.passthrough._asked_model)
        "content": content,
        "stop_reason": stop[0],
        "stop_sequence": stop[1],
        "usage": usage,
    }


def render_message(ctx: MessageContext, completion: dict[str, Any]) -> dict[str, Any]:
    """The Anthropic ``message`` for a non-streamed chat completion."""
    seq = ctx.sequencer()
    seq.feed(completion_as_chunk(completion))
    content = [_block(b) for b in seq.blocks]
    return _message(ctx, seq, content, _stop(ctx, seq), _usage(ctx, seq.usage))


def _start_block(block: Block) -> dict[str, Any]:
    if block.kind == "text":
        return {"type": "text", "text": ""}
    if block.kind == "reasoning":
        return {"type": "thinking", "thinking": "", "signature": ""}
    return {"type": "tool_use", "id": block.call_id, "name": block.name, "input": {}}


def _delta(block: Block, text: str) -> dict[str, Any]:
    if block.kind == "text":
        return {"type": "text_delta", "text": text}
    if block.kind == "reasoning":
        return {"type": "thinking_delta", "thinking": text}
    return {"type": "input_json_delta", "partial_json": text}


class MessagesStreamEncoder:
    """Internal chat chunks -> Anthropic stream events; a
    ``gateway.doors.pipeline.StreamEncoder``."""

    def __init__(self, ctx: MessageContext) -> None:
        self._ctx = ctx
        self._seq = ctx.sequencer()
        self._started = False
        self._pinged = False
        self._final: dict[str, Any] | None = None

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        usage = _usage(self._ctx, None)
        start = _message(self._ctx, self._seq, [], (None, None), usage)
        return encode_named_event("message_start", {"type": "message_start", "message": start})

    def _steps(self, steps: list[tuple[StepKind, Block, str]]) -> bytes:
        out: list[bytes] = []
        for step, block, text in steps:
            if step == "open":
                payload = {
                    "type": "content_block_start",
                    "index": block.index,
                    "content_block": _start_block(block),
                }
                out.append(encode_named_event("content_block_start", payload))
                if not self._pinged:
                    self._pinged = True
                    out.append(encode_named_event("ping", {"type": "ping"}))
            elif step == "delta":
                payload = {
                    "type": "content_block_delta",
                    "index": block.index,
                    "delta": _delta(block, text),
                }
                out.append(encode_named_event("content_block_delta", payload))
            else:
                payload = {"type": "content_block_stop", "index": block.index}
                out.append(encode_named_event("content_block_stop", payload))
        return b"".join(out)

    def encode(self, chunk: dict[str, Any]) -> bytes:
        steps = self._seq.feed(chunk)
        return self._start() + self._steps(steps)

    def finish(self) -> bytes:
        out = self._start() + self._steps(self._seq.close())
        content = [_block(b) for b in self._seq.blocks]
        usage = _usage(self._ctx, self._seq.usage)
        self._final = _message(self._ctx, self._seq, content, _stop(self._ctx, self._seq), usage)
        delta = {k: self._final[k] for k in ("stop_reason", "stop_sequence")}
        payload = {"type": "message_delta", "delta": delta, "usage": usage}
        return (
            out
            + encode_named_event("message_delta", payload)
            + encode_named_event("message_stop", {"type": "message_stop"})
        )

    def error(self, message: str) -> bytes:
        body = {"type": "error", "error": {"type": "api_error", "message": message}}
        return encode_named_event("error", body)

    def final_response(self) -> dict[str, Any] | None:
        """The message as sent; an interrupted one has no stop_reason."""
        if self._final is not None:
            return self._final
        content = [_block(b) for b in self._seq.blocks]
        usage = _usage(self._ctx, self._seq.usage)
        return _message(self._ctx, self._seq, content, (None, None), usage)
