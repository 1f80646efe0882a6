"""Whether a tool call is valid: it names an offered tool and its arguments are a JSON object
matching the tool's schema. The one check of what a broken call is, for the episode export
(``traffic.export.episodes``), the gateway's per-step routing (``gateway.routing.episodes``), the
agent gate, its audits and routing evidence, and the agent trainers' rewards, hints and
distillation rows (``rl_loop.agent``); a module of its own so that the gateway's start path does
not import the export package (pyarrow and the dataset builders).

:func:`check_call` judges one call against tools in Chat Completions' shape; :func:`check_calls`
and :func:`first_problem` judge several against ``tools`` in any shape a caller holds (Chat
Completions' ``{"type": "function", "function": {...}}`` or the flat ``{"type": "function",
"name": ...}``), read once by :func:`offered_functions`.

``jsonschema``, slow to import (docs/recording.md, "Figures behind traffic/'s choices"), is
imported on the first check; the gateway warms it in a thread at start-up (:func:`warm`).

A tool's schema is the client's: one the validator cannot read (not a schema, a ``$ref`` it
cannot resolve, a self-referencing one) judges nothing rather than raising.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

ProblemKind = Literal["unknown_tool", "malformed_arguments", "schema"]


def warm() -> None:
    """Import the validator (blocking: call it in a thread)."""
    import jsonschema  # noqa: F401


@dataclass(frozen=True, slots=True)
class CallCheck:
    """One tool call of a step and what is wrong with it (``kind`` None: a valid call;
    ``detail``: what the schema found, for ``schema``)."""

    id: str
    name: str
    arguments: str
    kind: ProblemKind | None = None
    detail: str = ""

    @property
    def valid(self) -> bool:
        return self.kind is None

    @property
    def problem(self) -> str | None:
        """The problem as one text: ``unknown_tool``, ``malformed_arguments`` or
        ``schema: <the first error>``; None for a valid call."""
        if self.kind is None:
            return None
        return f"{self.kind}: {self.detail}" if self.detail else self.kind


class ToolCallLike(Protocol):
    """A tool call as the model made it (``arguments``: its JSON text)."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> str: ...


def offered_functions(tools: Any) -> list[dict[str, Any]]:
    """The function tools of a ``tools`` list in the shape :func:`check_call` reads
    (``{"function": {"name": ..., "parameters": ...}}``), from Chat Completions' entries or flat
    ones (``{"type": "function", "name": ..., "parameters": ...}``). Anything else is left out:
    ``tools`` not a list or tuple, an entry that is not a mapping, a ``function`` that is not
    one, a name that is not a non-empty string (a client's body may hold anything)."""
    if not isinstance(tools, list | tuple):
        return []
    out = []
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if isinstance(fn, Mapping) and isinstance(fn.get("name"), str) and fn["name"]:
            out.append({"function": fn})
    return out


def check_call(
    call_id: str, name: str, arguments: str, tools: Sequence[dict[str, Any]]
) -> CallCheck:
    """Whether a call names an offered tool with a JSON object matching its schema (``tools``:
    each with a ``function`` mapping, as :func:`offered_functions` gives them). The problem, in
    this order: ``unknown_tool``, ``malformed_arguments`` (not JSON, or not an object; empty
    text is ``{}``), ``schema: <the first error>``."""
    function = next((t["function"] for t in tools if t["function"]["name"] == name), None)
    if function is None:
        return CallCheck(call_id, name, arguments, "unknown_tool")
    schema = function.get("parameters")
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return CallCheck(call_id, name, arguments, "malformed_arguments")
    if not isinstance(parsed, dict):
        return CallCheck(call_id, name, arguments, "malformed_arguments")
    if isinstance(schema, dict):
        import jsonschema  # imported once (module docstring)
        import referencing.exceptions

        try:
            error = next(iter(jsonschema.Draft202012Validator(schema).iter_errors(parsed)), None)
        except (
            jsonschema.SchemaError,
            referencing.exceptions.Unresolvable,
            RecursionError,
            ValueError,
            TypeError,
        ):
            error = None  # a schema the validator cannot read judges nothing
        if error is not None:
            return CallCheck(call_id, name, arguments, "schema", error.message[:192])
    return CallCheck(call_id, name, arguments)


def check_calls(calls: Iterable[ToolCallLike], tools: Any) -> list[CallCheck]:
    """Each of ``calls`` checked against the offered ``tools`` (any shape
    :func:`offered_functions` reads), in order."""
    offered = offered_functions(tools)
    return [check_call(c.id, c.name, c.arguments, offered) for c in calls]


def first_problem(calls: Iterable[ToolCallLike], tools: Any) -> CallCheck | None:
    """The check of the first broken call of ``calls`` (None: every call is valid, or none was
    made; ``tools`` is only read when there is a call, as on the gateway's request path)."""
    offered: list[dict[str, Any]] | None = None
    for call in calls:
        if offered is None:
            offered = offered_functions(tools)
        check = check_call(call.id, call.name, call.arguments, offered)  # never raises
        if not check.valid:
            return check
    return None
