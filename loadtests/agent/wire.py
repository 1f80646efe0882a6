"""What the simulated agent client sends and reads, per API, as the clients it imitates do.

- :class:`ChatConversation` (a Claude-Code-like agent on Chat Completions): ``messages`` with
  the system prompt, the user's request, each assistant turn with its ``tool_calls`` and one
  ``tool`` message per call; the tools of the ``chat`` flavour; the episode in our header
  ``x-switchyard-episode`` (recorded as is).
- :class:`ResponsesConversation` (a Codex-like agent on the Responses API): ``instructions``,
  ``input`` items (the user message, ``function_call`` and ``function_call_output`` items,
  assistant messages), ``store: false`` and the whole history every turn (no
  ``previous_response_id``), the tools of the ``responses`` flavour, and ``prompt_cache_key`` =
  the conversation id, as Codex sends it (recorded as ``cache-key:<id>``).

Both read a JSON answer or an SSE stream (chat chunks with ``tool_calls`` deltas; Responses
events, of which ``response.completed`` carries the whole output). Nothing in a request names the
task: only what the real client sends.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from tasks.agent.tools import AGENT_LOOP_SYSTEM_PROMPT, Flavour, chat_tools, responses_tools

EPISODE_HEADER = "x-switchyard-episode"


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call the model made: its id, the tool, and the arguments' JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ModelTurn:
    """One answer of the model: its text and its tool calls."""

    text: str
    calls: tuple[Call, ...] = ()
    usage: dict[str, Any] = field(default_factory=dict)


class WireError(ValueError):
    """An answer the client cannot read (malformed JSON, a stream without an answer)."""


class Conversation(Protocol):
    """One episode's conversation in one API's wire format."""

    path: str
    flavour: Flavour
    episode_id: str  # as the gateway records it

    def body(self) -> dict[str, Any]: ...
    def headers(self) -> dict[str, str]: ...
    async def read(self, response: aiohttp.ClientResponse) -> ModelTurn: ...
    def add_turn(self, turn: ModelTurn) -> None: ...
    def add_result(self, call: Call, output: str) -> None: ...


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, str]]:
    """``(event, data)`` of each server-sent event (``event`` empty when the stream names none)."""
    event, data = "", list[str]()
    async for raw in response.content:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
    if data:
        yield event, "\n".join(data)


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise WireError(f"malformed JSON in the answer: {exc}") from exc


class ChatConversation:
    """The conversation on ``POST /v1/chat/completions``."""

    path = "/v1/chat/completions"
    flavour: Flavour = "chat"

    def __init__(
        self, prompt: str, episode: str, *, model: str, stream: bool, max_tokens: int
    ) -> None:
        self.episode_id = episode
        self.model, self.stream, self.max_tokens = model, stream, max_tokens
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": AGENT_LOOP_SYSTEM_PROMPT},
            {"role": "user", "content": prompt},
        ]
        self.tools = chat_tools(self.flavour)

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.messages,
            "tools": self.tools,
            "tool_choice": "auto",
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "stream": self.stream,
        }
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def headers(self) -> dict[str, str]:
        return {EPISODE_HEADER: self.episode_id}

    async def read(self, response: aiohttp.ClientResponse) -> ModelTurn:
        if not self.stream:
            payload = _loads(await response.text())
            choices = payload.get("choices") if isinstance(payload, dict) else None
            if not choices:
                raise WireError("the answer has no choices")
            message = choices[0].get("message") or {}
            calls = tuple(
                Call(c.get("id") or f"call_{i}", c["function"]["name"],
                     c["function"].get("arguments") or "")
                for i, c in enumerate(message.get("tool_calls") or ())
            )  # fmt: skip
            return ModelTurn(message.get("content") or "", calls, payload.get("usage") or {})
        text: list[str] = []
        parts: dict[int, dict[str, str]] = {}
        usage: dict[str, Any] = {}
        done = False
        async for _event, data in sse_events(response):
            # Read to the end after [DONE], as the OpenAI SDK does: leaving early closes the
            # connection before the server finished the response.
            done = done or data == "[DONE]"
            if done:
                continue
            chunk = _loads(data)
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                text.append(delta.get("content") or "")
                for piece in delta.get("tool_calls") or ():
                    part = parts.setdefault(piece.get("index", 0), {"id": "", "name": "", "a": ""})
                    function = piece.get("function") or {}
                    part["id"] = piece.get("id") or part["id"]
                    part["name"] += function.get("name") or ""
                    part["a"] += function.get("arguments") or ""
        calls = tuple(
            Call(p["id"] or f"call_{i}", p["name"], p["a"]) for i, p in sorted(parts.items())
        )
        return ModelTurn("".join(text), calls, usage)

    def add_turn(self, turn: ModelTurn) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if turn.calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in turn.calls
            ]  # fmt: skip
        self.messages.append(message)

    def add_result(self, call: Call, output: str) -> None:
        self.messages.append({"role": "tool", "tool_call_id": call.id, "content": output})


class ResponsesConversation:
    """The conversation on ``POST /v1/responses``."""

    path = "/v1/responses"
    flavour: Flavour = "responses"

    def __init__(
        self, prompt: str, conversation_id: str, *, model: str, stream: bool, max_tokens: int
    ) -> None:
        self.conversation_id = conversation_id
        self.episode_id = f"cache-key:{conversation_id}"
        self.model, self.stream, self.max_tokens = model, stream, max_tokens
        self.items: list[dict[str, Any]] = [
            {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": prompt}]}
        ]  # fmt: skip
        self.tools = responses_tools(self.flavour)

    def body(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "instructions": AGENT_LOOP_SYSTEM_PROMPT,
            "input": self.items,
            "tools": self.tools,
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "store": False,
            "stream": self.stream,
            "max_output_tokens": self.max_tokens,
            "prompt_cache_key": self.conversation_id,
        }

    def headers(self) -> dict[str, str]:
        return {}

    async def read(self, response: aiohttp.ClientResponse) -> ModelTurn:
        if not self.stream:
            payload = _loads(await response.text())
            if not isinstance(payload, dict):
                raise WireError("the answer is not an object")
            return _responses_turn(payload.get("output") or [], payload.get("usage") or {})
        items: list[dict[str, Any]] = []
        final: dict[str, Any] | None = None
        async for _event, data in sse_events(response):
            event = _loads(data)
            kind = event.get("type")
            if kind == "response.output_item.done":
                items.append(event["item"])
            elif kind in ("response.completed", "response.incomplete"):
                final = event.get("response") or {}
            elif kind in ("response.failed", "error"):
                raise WireError(f"the stream failed: {data[:200]}")
        if final is None:
            raise WireError("the stream ended without response.completed")
        return _responses_turn(final.get("output") or items, final.get("usage") or {})

    def add_turn(self, turn: ModelTurn) -> None:
        if turn.text:
            self.items.append(
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": turn.text}]}
            )  # fmt: skip
        for call in turn.calls:
            self.items.append(
                {"type": "function_call", "call_id": call.id, "name": call.name,
                 "arguments": call.arguments}
            )  # fmt: skip

    def add_result(self, call: Call, output: str) -> None:
        self.items.append({"type": "function_call_output", "call_id": call.id, "output": output})


def _responses_turn(output: list[dict[str, Any]], usage: dict[str, Any]) -> ModelTurn:
    text: list[str] = []
    calls: list[Call] = []
    for item in output:
        if item.get("type") == "message":
            text.extend(
                part.get("text") or ""
                for part in item.get("content") or ()
                if part.get("type") == "output_text"
            )
        elif item.get("type") == "function_call":
            call_id = item.get("call_id") or item.get("id") or f"call_{len(calls)}"
            calls.append(Call(call_id, item.get("name") or "", item.get("arguments") or ""))
    return ModelTurn("".join(text), tuple(calls), usage)


def start_conversation(
    flavour: Flavour, prompt: str, conversation_id: str, *, model: str, stream: bool,
    max_tokens: int,
) -> Conversation:  # fmt: skip
    """The conversation of ``flavour``'s client for the request ``prompt``."""
    if flavour == "chat":
        return ChatConversation(
            prompt, f"agent-{conversation_id}", model=model, stream=stream, max_tokens=max_tokens
        )
    return ResponsesConversation(
        prompt, conversation_id, model=model, stream=stream, max_tokens=max_tokens
    )
