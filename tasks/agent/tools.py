"""The agent's tools as real clients declare them, per client flavour.

``read_file``, ``list_dir``, ``search``, ``apply_patch`` and ``run_tests`` are the agent client
profile's tools (:data:`tasks.ide.clients.AGENT_TOOLS`, defined once there); ``edit`` is
Claude Code's exact-string edit (``old_string`` -> ``new_string``, optionally every occurrence).
Two flavours, as the clients they imitate send them:

- ``chat`` (a Claude-Code-like client on Chat Completions): read_file, list_dir, search, edit,
  run_tests;
- ``responses`` (a Codex-like client on the Responses API): read_file, list_dir, search,
  apply_patch (a unified diff), run_tests; declared in the Responses API's flat function shape.

:data:`AGENT_LOOP_SYSTEM_PROMPT` is the client's one system prompt (Codex sends it as
``instructions``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from tasks.ide.clients import AGENT_TOOLS

Flavour = Literal["chat", "responses"]

AGENT_LOOP_SYSTEM_PROMPT = (
    "You are Switchyard Agent, a coding agent working in the user's repository. Use the tools "
    "to look at the code before changing it: read files, list directories, search, edit files "
    "and run the tests. Make the smallest change that does what the user asks, never edit the "
    "tests unless asked to, and run the tests after a change. When you are done, answer with a "
    "short summary; when the user asks a question, answer it on one line."
)

EDIT_TOOL: Mapping[str, Any] = {
    "type": "function",
    "function": {
        "name": "edit",
        "description": "Replace an exact string in a workspace file. old_string must occur "
        "exactly once unless replace_all is true.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path relative to the workspace root."},
                "old_string": {"type": "string", "description": "The exact text to replace."},
                "new_string": {"type": "string", "description": "The text to put instead."},
                "replace_all": {"type": "boolean", "default": False},
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": False,
        },
    },
}

_BY_NAME: Mapping[str, Mapping[str, Any]] = {
    tool["function"]["name"]: tool for tool in (*AGENT_TOOLS, EDIT_TOOL)
}
FLAVOUR_TOOLS: Mapping[Flavour, tuple[str, ...]] = {
    "chat": ("read_file", "list_dir", "search", "edit", "run_tests"),
    "responses": ("read_file", "list_dir", "search", "apply_patch", "run_tests"),
}


def chat_tools(flavour: Flavour) -> list[dict[str, Any]]:
    """The flavour's tools as Chat Completions ``tools`` entries."""
    return [dict(_BY_NAME[name]) for name in FLAVOUR_TOOLS[flavour]]


def responses_tools(flavour: Flavour) -> list[dict[str, Any]]:
    """The flavour's tools in the Responses API's flat shape (``{"type": "function", "name",
    "description", "parameters"}``)."""
    return [{"type": "function", **_BY_NAME[name]["function"]} for name in FLAVOUR_TOOLS[flavour]]


def tool_schemas(names: tuple[str, ...]) -> dict[str, Mapping[str, Any]]:
    """Parameter schemas by tool name (what the sandbox validates arguments against)."""
    return {name: _BY_NAME[name]["function"]["parameters"] for name in names}
