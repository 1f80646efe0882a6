"""What the simulator answers, independent of the wire format.

Both wire modules parse a request into a :class:`RequestView`; everything below decides the answer
from that view alone, so OpenAI and Anthropic endpoints behave the same. The simulator is the
demo's frontier model, so it behaves like one (:mod:`.instructions` reads what the user asked,
:mod:`.tool_use` which offered tool does what):

- a registered agent task (``loadtests/agent``) offered with tools: the scripted agent's next
  step of the episode (``agent_policy.py``), a tool call or its final text;
- a registered IDE task prompt: the oracle's answer in text (an agent client offers its tools
  with every task, and the task shows all it needs, so a frontier model answers it in text);
- a tool choice that forces a tool: that tool (``required``: the first ordinary one);
- otherwise, with tools offered and ``auto``, the user's latest own words decide (tagged context
  blocks that clients add are not the user's words):
  - "do not use any tools" and the like: text;
  - at most ``max_tool_rounds`` tool calls per user turn, then text;
  - a small task's steps (read, replace, create, run): one call per step on the tool made for
    it, then a final text that quotes the last command's output when asked to;
  - "use a sub-agent"/"delegate"/"in the background": one call of the delegating tool per turn,
    never from a sub-agent's own conversation;
  - the words "tool" or "call": one call of the tool the message names, else of the first
    ordinary (non-delegating) tool; once a tool result is in, text;
- text from :func:`compose_answer`: the oracle's answer for a registered IDE task prompt (see
  ``oracle.py``), else filler deterministic given the model, the last user message, the
  request's seed, the choice index and the simulator's seed, so tests can assert on it. One
  whitespace-separated word is one token (its leading whitespace kept, so code keeps its
  layout); prompts cost ``len(text) // 4 + 1`` tokens.
- :func:`finish_answer` then applies stop sequences and the token limit.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from loadtests.frontier_sim.agent_policy import decide
from loadtests.frontier_sim.config import SimulatorConfig
from loadtests.frontier_sim.edit_formats import (
    commit_message,
    edit_format,
    edit_reply,
    is_commit_request,
    user_request,
)
from loadtests.frontier_sim.instructions import Instruction, read_instruction
from loadtests.frontier_sim.oracle import OracleBook, known_agent_task, known_task, oracle_answer
from loadtests.frontier_sim.tool_use import (
    ToolSpec,
    arguments_from_schema,
    is_subagent,
    ordinary,
    role_of_name,
    roles,
    step_call,
    working_directory,
)
from loadtests.frontier_sim.transcript import PlannedCall, ToolStep

ANSWER_PREFIX = "Simulated answer from {model}:"
ToolMode = Literal["auto", "none", "required"]
FinishKind = Literal["natural", "length", "stop"]

_TOKEN = re.compile(r"\s*\S+")
_TOOL_REQUEST_WORDS = re.compile(r"\b(tools?|calls?)\b", re.IGNORECASE)
_DELEGATION_WORDS = re.compile(
    r"\b(?:use|start|spawn|launch)\s+(?:an?\s+|the\s+)?(?:sub-?agents?|agents?|background\s+"
    r"tasks?)\s*(?:to\s+)?|\bdelegate\s+(?:this\s+)?(?:to\s+an?\s+(?:sub-?)?agent\s*)?"
    r"|\bin\s+the\s+background\b",
    re.IGNORECASE,
)
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
    # The user's latest message with words of their own (context blocks removed), the tool
    # calls made since it, and every text of the prompt (system, developer and messages).
    instruction_text: str = ""
    turn_steps: tuple[ToolStep, ...] = ()
    context: tuple[str, ...] = ()


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
    instruction = read_instruction(view.instruction_text or view.last_user_text)
    if instruction.steps and view.turn_steps:
        return f"{prefix} {_report(instruction, view.turn_steps)}"
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


def _report(instruction: Instruction, steps: tuple[ToolStep, ...]) -> str:
    """The final answer after a small task's tool rounds: what was done, and the last command's
    output when the user asked what it printed."""
    done = ", ".join(f"{s.kind} {s.path or s.command}".strip() for s in instruction.steps)
    runs = [s for s in instruction.steps if s.kind == "run"]
    finished = [s for s in steps if s.result is not None]
    if instruction.report_output and runs and finished:
        output = _command_output(finished[-1].result or "")
        return f"I ran `{runs[-1].command}` and it printed:\n\n{output}"
    last = f"; the tool returned {finished[-1].result}" if finished else ""
    return f"Done: {done}{last}."


def _command_output(result: str) -> str:
    """What a command printed, from its tool result (Codex wraps it in a header ending in
    "Output:"; other clients send the output itself)."""
    _, marker, after = result.rpartition("Output:\n")
    text = after if marker else result
    return text.strip()[:2000]


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
            return _tool_call(move.call)
        return finish_answer(move.text, view)
    in_text = view.tool_mode == "auto" and known_task(view.last_user_text, config, book) is not None
    if not view.tools and not in_text:
        edited = _edit_format_answer(view)
        if edited is not None:
            return finish_answer(edited, view)
    call = None if in_text else decide_tool_call(view, config)
    if call is not None:
        return _tool_call(call)
    return finish_answer(compose_answer(view, config, book), view)


def _edit_format_answer(view: RequestView) -> str | None:
    """A text-editing client's answer (aider: :mod:`.edit_formats`), or None."""
    system = view.context[0] if view.context else ""
    if is_commit_request(system):
        return commit_message(view.context)
    fmt = edit_format(system)
    if fmt is None:
        return None
    return edit_reply(fmt, user_request(view.instruction_text or view.last_user_text), view.context)


def _tool_call(call: PlannedCall) -> ToolCall:
    return ToolCall(call.name, call.arguments, orjson.dumps(call.arguments).decode())


def decide_tool_call(view: RequestView, config: SimulatorConfig) -> PlannedCall | None:
    """The tool call to answer with, or None for a text answer (see the module docstring)."""
    if not view.tools or view.tool_mode == "none":
        return None
    if view.forced_tool is not None:
        named = [t for t in view.tools if t.name == view.forced_tool]
        if not named:
            raise BadRequest(f"tool_choice names unknown tool {view.forced_tool!r}", "tool_choice")
        return PlannedCall(named[0].name, arguments_from_schema(named[0].parameters))
    ordinary_tools = ordinary(view.tools) or list(view.tools)
    instruction = read_instruction(view.instruction_text or view.last_user_text)
    if view.tool_mode == "required":
        planned = _next_step_call(view, instruction)
        tool = ordinary_tools[0]
        return planned or PlannedCall(tool.name, arguments_from_schema(tool.parameters))
    if instruction.forbids_tools or len(view.turn_steps) >= config.max_tool_rounds:
        return None
    if instruction.steps:
        return _next_step_call(view, instruction)
    if instruction.asks_delegation:
        return _delegation(view, instruction)
    if view.tool_result is not None or any(s.result is not None for s in view.turn_steps):
        return None
    if not _TOOL_REQUEST_WORDS.search(instruction.words):
        return None
    named = [t for t in ordinary_tools if re.search(rf"\b{re.escape(t.name)}\b", instruction.words)]
    tool = (named or ordinary_tools)[0]
    return PlannedCall(tool.name, arguments_from_schema(tool.parameters))


def _next_step_call(view: RequestView, instruction: Instruction) -> PlannedCall | None:
    """The call for the first step of the instruction this turn has not made yet."""
    found = roles(view.tools)
    cwd = working_directory(view.context)
    done = list(view.turn_steps)
    for step in instruction.steps:
        call = step_call(step, found, cwd, view.tool_steps)
        if call is None:
            continue  # no offered tool can do it: a model goes on without it
        made = next((i for i, s in enumerate(done) if call.made_in(s)), None)
        if made is None:
            return call
        del done[: made + 1]
    return None


def _delegation(view: RequestView, instruction: Instruction) -> PlannedCall | None:
    """One call of the delegating tool, when this turn made none and this is not a sub-agent."""
    tool = roles(view.tools).get("delegate")
    if tool is None or is_subagent(view.context[:1]):
        return None
    if any(role_of_name(view.tools, s.name) == "delegate" for s in view.turn_steps):
        return None
    task = _DELEGATION_WORDS.sub("", instruction.words).strip(" ,.:;") or instruction.words
    arguments = arguments_from_schema(tool.parameters)
    properties = tool.parameters.get("properties") if isinstance(tool.parameters, dict) else None
    for key in ("prompt", "description", "task", "instructions", "message"):
        if isinstance(properties, dict) and key in properties:
            arguments[key] = task
    return PlannedCall(tool.name, arguments)
