"""What the simulator answers, independent of the wire format.

Both wire modules parse a request into a :class:`RequestView`; everything below decides the answer
from that view alone, so OpenAI and Anthropic endpoints behave the same:

- a registered agent task (``loadtests/agent``) offered with tools: the scripted agent's next
  step of the episode (``agent_policy.py``), a tool call or its final text;
- a tool call when tools are offered and the tool choice forces one, or when it is ``auto`` and
  the last message is a user message containing the word "tool" or "call" (except a registered
  IDE task prompt: an agent client offers its tools with every task, and the task shows all it
  needs, so a frontier model answers it in text);
- otherwise text from :func:`compose_answer`: the oracle's answer for a registered IDE task
  prompt (see ``oracle.py``), else filler deterministic given the model, the last user message, the
  request's seed, the choice index and the simulator's seed, so tests can assert on it. One
  whitespace-separated word is one token (its leading whitespace kept, so code keeps its
  layout); prompts cost ``len(text) // 4 + 1`` tokens.
- :func:`finish_answer` then applies stop sequences and the token limit.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from loadtests.frontier_sim.agent_policy import decide
from loadtests.frontier_sim.config import SimulatorConfig
from loadtests.frontier_sim.oracle import OracleBook, known_agent_task, known_task, oracle_answer
from loadtests.frontier_sim.transcript import ToolStep

ANSWER_PREFIX = "Simulated answer from {model}:"
ToolMode = Literal["auto", "none", "required"]
FinishKind = Literal["natural", "length", "stop"]

_TOKEN = re.compile(r"\s*\S+")
_TOOL_REQUEST_WORDS = re.compile(r"\b(tools?|calls?)\b", re.IGNORECASE)
_FILLER_WORDS: tuple[str, ...] = (
    "alpha", "buffer", "cache", "delta", "engine", "factor", "gateway", "handler",
    "index", "json", "kernel", "latency", "module", "node", "offset", "prefix",
    "queue", "replica", "schema", "token", "update", "vector", "worker", "yield",
    "async", "batch", "commit", "decode", "encode", "fetch", "graph", "hash",
    "iterate", "join", "key", "lookup", "merge", "parse", "query", "route",
    "shard", "thread", "union", "value", "window", "stream", "socket", "bytes",
)  # fmt: skip


class BadRequest(ValueError):
    """The request is malformed; answered with status 400 in the endpoint's error shape."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the client offers: its name and JSON-schema parameters."""

    name: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class RequestView:
    """Everything the answer depends on, parsed from either wire format."""

    model: str
    prompt_tokens: int
    last_user_text: str = ""
    tool_result: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_mode: ToolMode = "auto"
    forced_tool: str | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    choice_index: int = 0
    tool_steps: tuple[ToolStep, ...] = ()  # the tool calls made so far and their results


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call answer: the function, its arguments, and those arguments as JSON text."""

    name: str
    arguments: dict[str, Any]
    arguments_json: str

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.arguments_json)

    def argument_fragments(self, size: int = 8) -> list[str]:
        """The streamed pieces of :attr:`arguments_json`."""
        text = self.arguments_json
        return [text[i : i + size] for i in range(0, len(text), size)]


@dataclass(frozen=True, slots=True)
class FinishedAnswer:
    """A text answer after stop sequences and the token limit.

    ``words`` are the tokens with the whitespace before them (none before the first), so code
    answers keep their newlines and indentation.
    """

    words: tuple[str, ...]
    finish: FinishKind
    stop_sequence: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.words)

    @property
    def tokens(self) -> int:
        return len(self.words)

    def pieces(self) -> list[str]:
        """The streamed deltas, one per token; their concatenation is :attr:`text`."""
        return list(self.words)


def estimate_tokens(text: str) -> int:
    """Approximate token count of prompt text."""
    return len(text) // 4 + 1


def compose_answer(
    view: RequestView, config: SimulatorConfig, book: OracleBook | None = None
) -> str:
    """The full text answer (before stop sequences and max tokens) for ``view``.

    The one place answer text is made; ``book`` holds the registered IDE task prompts.
    """
    prefix = ANSWER_PREFIX.format(model=view.model)
    if view.tool_result is not None:
        return f"{prefix} the tool returned {view.tool_result}"
    salt = f"{view.seed}|{view.choice_index}"
    oracle = oracle_answer(view.last_user_text, config, book, salt)
    if oracle is not None:
        return oracle
    key = f"{config.seed}|{view.seed}|{view.choice_index}|{view.last_user_text}".encode()
    rng = random.Random(hashlib.blake2b(key, digest_size=16).digest())
    words = prefix.split()
    filler = rng.choices(_FILLER_WORDS, k=max(config.answer_tokens - len(words), 0))
    return " ".join([*words, *filler][: config.answer_tokens])


def finish_answer(text: str, view: RequestView) -> FinishedAnswer:
    """Cut ``text`` at the first stop sequence, then at ``view.max_tokens`` words."""
    stop_at, stop_sequence = len(text), None
    for candidate in view.stop:
        found = text.find(candidate) if candidate else -1
        if 0 <= found < stop_at:
            stop_at, stop_sequence = found, candidate
    words = tuple(_TOKEN.findall(text[:stop_at].lstrip()))
    if view.max_tokens is not None and len(words) > view.max_tokens:
        return FinishedAnswer(words[: view.max_tokens], "length")
    if stop_sequence is not None:
        return FinishedAnswer(words, "stop", stop_sequence)
    return FinishedAnswer(words, "natural")


def decide_tool_call(view: RequestView) -> ToolCall | None:
    """The tool call to answer with, or None for a text answer."""
    if not view.tools or view.tool_mode == "none":
        return None
    tool = view.tools[0]
    if view.forced_tool is not None:
        named = [t for t in view.tools if t.name == view.forced_tool]
        if not named:
            raise BadRequest(f"tool_choice names unknown tool {view.forced_tool!r}", "tool_choice")
        tool = named[0]
    elif view.tool_mode != "required" and (
        view.tool_result is not None or not _TOOL_REQUEST_WORDS.search(view.last_user_text)
    ):
        return None
    arguments = arguments_from_schema(tool.parameters)
    return ToolCall(tool.name, arguments, orjson.dumps(arguments).decode())


def arguments_from_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for an object schema: a plausible value for each required property."""
    properties = schema.get("properties") or {}
    required = schema.get("required") or []
    return {
        name: _value_for(name, properties.get(name) or {})
        for name in required
        if isinstance(name, str)
    }


def _value_for(name: str, schema: Mapping[str, Any]) -> Any:
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        return arguments_from_schema(schema)
    simple: dict[str, Any] = {"integer": 1, "number": 1.5, "boolean": True, "array": []}
    return simple.get(kind, f"sim-{name}")


Answer = FinishedAnswer | ToolCall


def answer_request(
    view: RequestView, config: SimulatorConfig, book: OracleBook | None = None
) -> Answer:
    """The complete answer for one choice: a tool call or finished text."""
    agent_task = known_agent_task(view.last_user_text, config, book)
    if agent_task is not None and view.tools and view.tool_mode != "none":
        tools = {tool.name: dict(tool.parameters) for tool in view.tools}
        move = decide(agent_task, view.tool_steps, tools, config)
        if move.call is not None:
            args = move.call.arguments
            return ToolCall(move.call.name, args, orjson.dumps(args).decode())
        return finish_answer(move.text, view)
    in_text = view.tool_mode == "auto" and known_task(view.last_user_text, config, book) is not None
    call = None if in_text else decide_tool_call(view)
    if call is not None:
        return call
    return finish_answer(compose_answer(view, config, book), view)
