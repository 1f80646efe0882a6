"""The internal format (OpenAI chat completions) as the non-OpenAI doors read it. Pure; no I/O.

An answer, streamed or whole, is read as an ordered list of content blocks (reasoning, text, tool
call), one open at a time, which is how both the Anthropic Messages and the OpenAI Responses wire
formats are laid out::

    chunk.choices[0].delta.reasoning_content | reasoning -> a reasoning block (if kept)
    chunk.choices[0].delta.content                       -> a text block
    chunk.choices[0].delta.tool_calls[i]                 -> tool block i (id, name, arguments)
    another kind of delta than the open block's          -> close it, open the new one
    finish_reason, vLLM's stop_reason, usage, model      -> kept for the final answer

A whole ``chat.completion`` is read through :func:`completion_as_chunk`, so unary and streamed
answers render alike. Only choice 0 is read (the doors never ask for ``n`` > 1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

BlockKind = Literal["reasoning", "text", "tool"]
StepKind = Literal["open", "delta", "close"]


@dataclass(slots=True, eq=False)
class Block:
    """One output block: reasoning, text, or a tool call (``text`` holds its JSON arguments)."""

    kind: BlockKind
    index: int
    text: str = ""
    call_id: str = ""
    name: str = ""


@dataclass(slots=True)
class BlockSequencer:
    """Reads OpenAI chat chunks (choice 0) as blocks, one open at a time.

    :meth:`feed` returns the steps a chunk caused: ``("open", block, "")``, ``("delta", block,
    text)``, ``("close", block, "")``. Within a delta the order is reasoning, content, tool calls.
    Tool calls are assumed to stream in index order (OpenAI, vLLM and litellm send them so); a
    late fragment for an already closed call is added to it but causes no step.
    """

    keep_reasoning: bool
    new_call_id: Callable[[int], str]
    blocks: list[Block] = field(default_factory=list)
    finish_reason: str | None = None
    matched_stop: str | None = None
    usage: dict[str, Any] | None = None
    model: str | None = None
    _open: Block | None = None
    _tools: dict[int, Block] = field(default_factory=dict)

    def feed(self, chunk: dict[str, Any]) -> list[tuple[StepKind, Block, str]]:
        steps: list[tuple[StepKind, Block, str]] = []
        if self.model is None and chunk.get("model"):
            self.model = str(chunk["model"])
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning and self.keep_reasoning:
                self._text("reasoning", str(reasoning), steps)
            if delta.get("content"):
                self._text("text", str(delta["content"]), steps)
            for call in delta.get("tool_calls") or []:
                self._tool(call, steps)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
                stop = choice.get("stop_reason")
                self.matched_stop = stop if isinstance(stop, str) else None
        return steps

    def close(self) -> list[tuple[StepKind, Block, str]]:
        if self._open is None:
            return []
        block, self._open = self._open, None
        return [("close", block, "")]

    def _start(self, block: Block, steps: list[tuple[StepKind, Block, str]]) -> None:
        steps.extend(self.close())
        self.blocks.append(block)
        self._open = block
        steps.append(("open", block, ""))

    def _text(self, kind: BlockKind, text: str, steps: list[tuple[StepKind, Block, str]]) -> None:
        if self._open is None or self._open.kind != kind:
            self._start(Block(kind, len(self.blocks)), steps)
        assert self._open is not None
        self._open.text += text
        steps.append(("delta", self._open, text))

    def _tool(self, call: dict[str, Any], steps: list[tuple[StepKind, Block, str]]) -> None:
        fn = call.get("function") or {}
        args = str(fn.get("arguments") or "")
        index = call.get("index", len(self._tools))
        block = self._tools.get(index)
        if block is None:
            call_id = call.get("id") or self.new_call_id(len(self._tools))
            block = Block("tool", len(self.blocks), call_id=call_id, name=fn.get("name") or "")
            self._tools[index] = block
            self._start(block, steps)
        elif not block.name and fn.get("name"):
            block.name = fn["name"]
        if args:
            block.text += args
            if block is self._open:
                steps.append(("delta", block, args))


def completion_as_chunk(completion: dict[str, Any]) -> dict[str, Any]:
    """A ``chat.completion`` as one chunk, so answers and streams share :class:`BlockSequencer`."""
    choices = completion.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    calls = [{**c, "index": i} for i, c in enumerate(message.get("tool_calls") or [])]
    delta = {
        "reasoning_content": message.get("reasoning_content") or message.get("reasoning"),
        "content": message.get("content"),
        "tool_calls": calls,
    }
    return {
        "model": completion.get("model"),
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "finish_reason": choice.get("finish_reason"),
                "stop_reason": choice.get("stop_reason"),
            }
        ],
        "usage": completion.get("usage"),
    }


def token_count(value: object) -> int | None:
    """A provider's token count as an int, None when it is not a count (a string, a negative
    or fractional number, a bool, null): usage comes from upstreams the gateway does not
    control, and an odd field must cost the record one figure, never the answer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    return None


def cache_counts(usage: dict[str, Any]) -> tuple[int | None, int | None]:
    """(cache reads, cache writes) of an OpenAI-format usage object, None where it says nothing.

    Reads: OpenAI's ``prompt_tokens_details.cached_tokens``, unless the provider put them at the
    top, as DeepSeek does (``prompt_cache_hit_tokens``) and Anthropic-style answers do
    (``cache_read_input_tokens``), which litellm's ``Usage`` maps the same way. Writes (OpenAI
    has none): ``prompt_tokens_details.cache_creation_tokens`` or ``cache_write_tokens``, else
    ``cache_creation_input_tokens`` at the top (litellm's OpenAI-format answer for Anthropic)."""
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    read = token_count(details.get("cached_tokens"))
    for name in ("prompt_cache_hit_tokens", "cache_read_input_tokens"):
        found = token_count(usage.get(name))
        if found is not None:
            read = found
    written = token_count(details.get("cache_creation_tokens"))
    if written is None:
        written = token_count(details.get("cache_write_tokens"))
    if written is None:
        written = token_count(usage.get("cache_creation_input_tokens"))
    return read, written


def usage_counts(usage: dict[str, Any] | None) -> tuple[int, int, int, int]:
    """(prompt, completion, cached, reasoning) tokens of an OpenAI usage object (zeros if none)."""
    if not isinstance(usage, dict) or not usage:
        return 0, 0, 0, 0
    completion_details = usage.get("completion_tokens_details")
    reasoning = (
        completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else 0
    )
    return (
        token_count(usage.get("prompt_tokens")) or 0,
        token_count(usage.get("completion_tokens")) or 0,
        cache_counts(usage)[0] or 0,
        token_count(reasoning) or 0,
    )


def prompt_chars(body: dict[str, Any], *, tool_calls: bool = False) -> int:
    """Characters of prompt text in an internal body, the router's size estimate: message text of
    a chat body (``tool_calls``: add the calls' arguments too), or a completions ``prompt`` (a
    token id, or a batch entry that is not a string, counts 4)."""
    prompt = body.get("prompt")
    if prompt is not None:
        if isinstance(prompt, str):
            return len(prompt)
        if isinstance(prompt, list):
            return sum(len(x) if isinstance(x, str) else 4 for x in prompt)
        return 0
    total = 0
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
        if tool_calls:
            total += sum(len(c["function"]["arguments"]) for c in msg.get("tool_calls") or [])
    return total


def note(notes: dict[str, list[str]], key: str, value: str) -> None:
    """Add ``value`` under ``key`` once (what a translation left out, for the record)."""
    if value not in notes.setdefault(key, []):
        notes[key].append(value)
