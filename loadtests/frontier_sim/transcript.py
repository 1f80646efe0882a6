"""The tool calls a conversation made so far and their results, whatever the wire format.

Each wire module feeds a :class:`StepCollector` while it parses a request: a call (OpenAI chat
``tool_calls``, Anthropic ``tool_use``, Responses ``function_call``) with its id, name and
arguments, and a result (a ``tool`` message, a ``tool_result`` block, a
``function_call_output``) with the id it answers. The collector gives :class:`ToolStep` tuples in
call order; the scripted agent (``agent_policy.py``) reads where it is in its task from them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolStep:
    """One tool call of the conversation: the tool, its arguments as JSON text, its result
    (None while no result for it has been sent)."""

    name: str
    arguments: str
    result: str | None = None

    def parsed_arguments(self) -> Any:
        """The arguments as JSON, or None when they are not valid JSON."""
        try:
            return json.loads(self.arguments) if self.arguments.strip() else {}
        except json.JSONDecodeError:
            return None


class StepCollector:
    """Builds the :class:`ToolStep` list of one request while its wire module parses it."""

    def __init__(self) -> None:
        self._steps: list[ToolStep] = []
        self._by_id: dict[str, int] = {}
        self._turn_start = 0

    def turn(self) -> None:
        """A user message with words of its own: a new turn starts after the calls so far."""
        self._turn_start = len(self._steps)

    def call(self, call_id: Any, name: Any, arguments: Any) -> None:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        if isinstance(call_id, str) and call_id:
            self._by_id[call_id] = len(self._steps)
        self._steps.append(ToolStep(str(name or ""), text))

    def result(self, call_id: Any, text: str) -> None:
        """The result of the call ``call_id`` (else of the first call without one)."""
        index = self._by_id.get(call_id) if isinstance(call_id, str) else None
        if index is None:
            index = next((i for i, s in enumerate(self._steps) if s.result is None), None)
        if index is not None:
            step = self._steps[index]
            self._steps[index] = ToolStep(step.name, step.arguments, text)

    def steps(self) -> tuple[ToolStep, ...]:
        return tuple(self._steps)

    def turn_steps(self) -> tuple[ToolStep, ...]:
        """The calls made since the last :meth:`turn`."""
        return tuple(self._steps[self._turn_start :])


@dataclass(frozen=True, slots=True)
class PlannedCall:
    """A tool call a scripted model makes: the tool and its arguments."""

    name: str
    arguments: dict[str, Any]

    def matches(self, step: ToolStep) -> bool:
        """Whether ``step`` is exactly this call (arguments as made, nothing added)."""
        return step.name == self.name and step.parsed_arguments() == self.arguments

    def made_in(self, step: ToolStep) -> bool:
        """Whether ``step`` is this call as a client sends it back: clients add the defaults of
        optional arguments (Claude Code's ``replace_all: false``) and reorder keys."""
        made = step.parsed_arguments()
        return (
            step.name == self.name
            and isinstance(made, dict)
            and all(made.get(k) == v for k, v in self.arguments.items())
        )
