"""Whether a tool call is valid: it names an offered tool and its arguments are a JSON object
matching the tool's schema. One check for the episode export (``traffic.export.episodes``) and
the gateway's per-step routing (``gateway.episode_routing``); a module of its own so that the
gateway's start path does not import the export package (pyarrow and the dataset builders).
``jsonschema`` (~70 ms to import) is imported on the first check; the gateway warms it in a
thread at start-up (:func:`warm`).

A tool's schema is the client's: one the validator cannot read (not a schema, a ``$ref`` it
cannot resolve, a self-referencing one) judges nothing rather than raising.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


def warm() -> None:
    """Import the validator (blocking: call it in a thread)."""
    import jsonschema  # noqa: F401


@dataclass(frozen=True, slots=True)
class CallCheck:
    """One tool call of a step and what is wrong with it (``problem`` None: a valid call)."""

    id: str
    name: str
    arguments: str
    problem: str | None = None

    @property
    def valid(self) -> bool:
        return self.problem is None


def check_call(
    call_id: str, name: str, arguments: str, tools: Sequence[dict[str, Any]]
) -> CallCheck:
    """Whether a call names an offered tool with a JSON object matching its schema."""
    schema = next(
        (t["function"].get("parameters") for t in tools if t["function"]["name"] == name), None
    )
    known = any(t["function"]["name"] == name for t in tools)
    if not known:
        return CallCheck(call_id, name, arguments, "unknown_tool")
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
            return CallCheck(call_id, name, arguments, f"schema: {error.message}"[:200])
    return CallCheck(call_id, name, arguments)
