"""OpenAI Responses API <-> the internal format (OpenAI chat completions): the answer side.
Pure; no I/O. The request side is :mod:`gateway.doors.responses.request`.

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

Back (``response`` -> chat completion, :func:`completion_of_response`): for the exporter reading
Responses records written before the record kept the internal answer; the inverse of
:func:`render_response` (a namespaced call's name flattened back as the request translator
flattens its tool).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gateway.doors.responses.request import NAMESPACE_SEP
from gateway.wire.blocks import (
    Block,
    BlockSequencer,
    StepKind,
    completion_as_chunk,
    usage_counts,
)
from gateway.wire.native import chat_usage
from gateway.wire.sse import encode_named_event

_ITEMS = {
    "text": ("msg", "message"),
    "tool": ("fc", "function_call"),
    "reasoning": ("rs", "reasoning"),
}


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
    """Internal chat chunks -> Responses stream events; a
    ``gateway.doors.pipeline.StreamEncoder``."""

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


# Back: a Responses ``response`` -> the internal chat completion

_FINISH_OF_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def _parts(item: dict[str, Any]) -> list[dict[str, Any]]:
    parts = item.get("content") or []
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise ValueError(f"not a Responses output item: {item.get('type')} content")
    return parts


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def completion_of_response(response: dict[str, Any]) -> dict[str, Any]:
    """The ``chat.completion`` a Responses ``response`` amounts to; ``ValueError`` (or
    ``TypeError``) when it is not one. Items the gateway never renders (built-in tool calls) are
    left out."""
    output = response.get("output")
    if not isinstance(output, list) or not all(isinstance(i, dict) for i in output):
        raise ValueError("not a Responses response: output is not a list of items")
    texts: list[str] = []
    refusals: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in output:
        kind = item.get("type")
        if kind == "message":
            for part in _parts(item):
                if part.get("type") in ("output_text", "text"):
                    texts.append(str(part.get("text") or ""))
                elif part.get("type") == "refusal":
                    refusals.append(str(part.get("refusal") or ""))
        elif kind == "reasoning":
            reasoning.extend(str(p.get("text") or "") for p in _parts(item))
        elif kind == "function_call":
            name = str(item.get("name") or "")
            if item.get("namespace"):
                name = f"{item['namespace']}{NAMESPACE_SEP}{name}"
            arguments = str(item.get("arguments") or "")
            function = {"name": name, "arguments": arguments}
            calls.append({"id": item.get("call_id"), "type": "function", "function": function})
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if refusals:
        message["refusal"] = "".join(refusals)
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    incomplete = _field(response.get("incomplete_details"), "reason")
    finish = _FINISH_OF_INCOMPLETE.get(str(incomplete), "tool_calls" if calls else "stop")
    return {
        "id": response.get("id"),
        "object": "chat.completion",
        "model": response.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": chat_usage(response.get("usage")),
    }
