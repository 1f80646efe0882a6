"""A served model on loopback for the served-conversation tests: it keeps every body it was sent
and answers with a scripted answer, in OpenAI's chat or completions format or natively in
Anthropic's or OpenAI's Responses format, whole or streamed.

An :class:`Answer` is what the model "says" (reasoning, text pieces, tool calls whose arguments
arrive in fragments); :meth:`Answer.turn` is the answer a trainer must see, built from the script
alone (never from gateway code), so the tests compare the export with an independent truth.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.fixtures.loopback_server import LoopbackServer, answer
from traffic.export.turns import AssistantTurn, ToolCall


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    fragments: tuple[str, ...]  # the arguments' JSON text, as streamed

    @property
    def arguments(self) -> str:
        return "".join(self.fragments)


@dataclass(frozen=True)
class Answer:
    text: tuple[str, ...] = ()
    reasoning: str | None = None
    calls: tuple[Call, ...] = ()

    def turn(self, *, native: bool = False) -> AssistantTurn | None:
        """What training must read (None: the model said nothing). An Anthropic provider sends a
        call's input as an object: its arguments are that object as compact JSON."""
        calls = tuple(
            ToolCall(c.id, c.name, _compact(c.arguments) if native else c.arguments)
            for c in self.calls
        )
        text = "".join(self.text) or None
        return AssistantTurn(text, calls) if text or calls else None

    @property
    def finish(self) -> str:
        return "tool_calls" if self.calls else "stop"


def _compact(arguments: str) -> str:
    return orjson.dumps(json.loads(arguments)).decode()


USAGE = {"prompt_tokens": 321, "completion_tokens": 12, "total_tokens": 333}
_HEAD = {"id": "chatcmpl-served", "created": 1, "model": "served-model"}


def chat_completion(a: Answer) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(a.text) or None}
    if a.reasoning:
        message["reasoning_content"] = a.reasoning
    if a.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in a.calls
        ]
    choice = {"index": 0, "message": message, "finish_reason": a.finish, "logprobs": None}
    return {**_HEAD, "object": "chat.completion", "choices": [choice], "usage": USAGE}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
    return {**_HEAD, "object": "chat.completion.chunk", "choices": [choice]}


def chat_chunks(a: Answer) -> list[dict[str, Any]]:
    out = [_chunk({"role": "assistant", "content": ""})]
    if a.reasoning:
        half = len(a.reasoning) // 2
        out += [_chunk({"reasoning_content": p}) for p in (a.reasoning[:half], a.reasoning[half:])]
    out += [_chunk({"content": piece}) for piece in a.text]
    for i, c in enumerate(a.calls):
        head = {"index": i, "id": c.id, "type": "function"}
        out.append(
            _chunk({"tool_calls": [{**head, "function": {"name": c.name, "arguments": ""}}]})
        )
        out += [
            _chunk({"tool_calls": [{"index": i, "function": {"arguments": f}}]})
            for f in c.fragments
        ]
    out.append(_chunk({}, a.finish))
    out.append({**_HEAD, "object": "chat.completion.chunk", "choices": [], "usage": USAGE})
    return out


def text_completion(a: Answer) -> dict[str, Any]:
    choice = {"index": 0, "text": "".join(a.text), "finish_reason": "stop", "logprobs": None}
    return {**_HEAD, "object": "text_completion", "choices": [choice], "usage": USAGE}


def text_chunks(a: Answer) -> list[dict[str, Any]]:
    pieces = [{"index": 0, "text": t, "finish_reason": None, "logprobs": None} for t in a.text]
    out = [{**_HEAD, "object": "text_completion", "choices": [p]} for p in pieces]
    end = {"index": 0, "text": "", "finish_reason": "stop", "logprobs": None}
    return [*out, {**_HEAD, "object": "text_completion", "choices": [end], "usage": USAGE}]


def anthropic_message(a: Answer) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if a.reasoning:
        content.append({"type": "thinking", "thinking": a.reasoning, "signature": "c2ln"})
    if a.text:
        content.append({"type": "text", "text": "".join(a.text)})
    for c in a.calls:
        content.append(
            {"type": "tool_use", "id": c.id, "name": c.name, "input": json.loads(c.arguments)}
        )
    return {
        "id": "msg_served",
        "type": "message",
        "role": "assistant",
        "model": "claude-served",
        "content": content,
        "stop_reason": "tool_use" if a.calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "cache_read_input_tokens": 200, "output_tokens": 12},
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def anthropic_events(a: Answer) -> list[bytes]:
    whole = anthropic_message(a)
    start = {**whole, "content": [], "stop_reason": None}
    events = [_event("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(whole["content"]):
        kind = block["type"]
        empty: dict[str, Any] = {
            "thinking": {"thinking": "", "signature": ""},
            "text": {"text": ""},
            "tool_use": {"id": block.get("id"), "name": block.get("name"), "input": {}},
        }[kind]
        first = {
            "type": "content_block_start",
            "index": i,
            "content_block": {"type": kind, **empty},
        }
        events.append(_event("content_block_start", first))
        if kind == "thinking":
            deltas = [{"type": "thinking_delta", "thinking": block["thinking"]}]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            deltas = [{"type": "text_delta", "text": t} for t in a.text]
        else:
            call = next(c for c in a.calls if c.id == block["id"])
            deltas = [{"type": "input_json_delta", "partial_json": f} for f in call.fragments]
        for delta in deltas:
            payload = {"type": "content_block_delta", "index": i, "delta": delta}
            events.append(_event("content_block_delta", payload))
        events.append(_event("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta = {"stop_reason": whole["stop_reason"], "stop_sequence": None}
    end = {"type": "message_delta", "delta": delta, "usage": {"output_tokens": 12}}
    events.append(_event("message_delta", end))
    events.append(_event("message_stop", {"type": "message_stop"}))
    return events


def responses_response(a: Answer) -> dict[str, Any]:
    """The answer as OpenAI's Responses API gives it (a call named ``<namespace>__<name>`` as a
    namespaced call, as OpenAI answers a namespace tool)."""
    output: list[dict[str, Any]] = []
    if a.reasoning:
        text = [{"type": "reasoning_text", "text": a.reasoning}]
        output.append(
            {"id": "rs_served", "type": "reasoning", "summary": [], "content": text,
             "encrypted_content": "b3BhcXVl"}
        )  # fmt: skip
    if a.text:
        part = {"type": "output_text", "text": "".join(a.text), "annotations": []}
        output.append(
            {"id": "msg_served", "type": "message", "status": "completed", "role": "assistant",
             "content": [part]}
        )  # fmt: skip
    for c in a.calls:
        namespace, _, name = c.name.rpartition("__")
        call = {"id": f"fc_{c.id}", "type": "function_call", "status": "completed",
                "call_id": c.id, "name": name, "arguments": c.arguments}  # fmt: skip
        output.append({**call, "namespace": namespace} if namespace else call)
    usage = {"input_tokens": 321, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 12, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 333}  # fmt: skip
    return {"id": "resp_served", "object": "response", "created_at": 1, "status": "completed",
            "model": "served-model", "output": output, "usage": usage}  # fmt: skip


def responses_events(a: Answer) -> list[bytes]:
    whole = responses_response(a)
    snapshot = {**whole, "status": "in_progress", "output": [], "usage": None}
    steps: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": snapshot}),
        ("response.in_progress", {"response": snapshot}),
    ]
    for i, item in enumerate(whole["output"]):
        where = {"output_index": i, "item_id": item["id"]}
        if item["type"] == "message":
            steps.append(("response.output_item.added", {**where, "item": {**item, "content": []}}))
            steps += [
                ("response.output_text.delta", {**where, "content_index": 0, "delta": t})
                for t in a.text
            ]
        elif item["type"] == "function_call":
            call = next(c for c in a.calls if c.id == item["call_id"])
            steps.append(
                ("response.output_item.added", {**where, "item": {**item, "arguments": ""}})
            )
            steps += [("response.function_call_arguments.delta", {**where, "delta": f})
                      for f in call.fragments]  # fmt: skip
        else:
            steps.append(("response.output_item.added", {**where, "item": item}))
        steps.append(("response.output_item.done", {"output_index": i, "item": item}))
    steps.append(("response.completed", {"response": whole}))
    return [
        _event(kind, {"type": kind, "sequence_number": n, **data})
        for n, (kind, data) in enumerate(steps)
    ]


def _sse(chunks: list[dict[str, Any]]) -> list[bytes]:
    return [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]


@dataclass
class ServedModel:
    """The upstream: an aiohttp server on a loopback port, in its own thread."""

    answer: Answer = field(default_factory=Answer)
    broken: dict[str, Any] | None = None  # a whole answer to send instead of the scripted one
    received: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _server: LoopbackServer | None = None

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received.append((request.path, body))
        path, a = request.path, self.answer
        if path.endswith("/messages"):
            whole, events = anthropic_message(a), anthropic_events(a)
        elif path.endswith("/responses"):
            whole, events = responses_response(a), responses_events(a)
        elif path.endswith("/chat/completions"):
            whole, events = chat_completion(a), _sse(chat_chunks(a))
        else:
            whole, events = text_completion(a), _sse(text_chunks(a))
        if self.broken is not None:
            whole = self.broken
        return await answer(request, body, whole, events)

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    def start(self) -> ServedModel:
        app = web.Application(client_max_size=64 << 20)
        for path in ("/v1/messages", "/v1/chat/completions", "/v1/completions", "/v1/responses"):
            app.router.add_post(path, self._serve)
        app.router.add_get("/health", self._ok)
        app.router.add_get("/metrics", self._ok)
        self._server = LoopbackServer(app, "served-model").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return self._server.url
