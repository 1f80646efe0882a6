"""What a real client sends around a task: its client type's one system prompt and tool list.

A real IDE client does not tell the gateway which kind of question it asks: every request of one
client type carries the same system prompt (and, for an agent, the same tool list), whatever the
task family; only the user message differs. Two client types:

- ``ide_chat``: an editor's chat panel. One fixed system prompt for every family; the answer
  format (one line or one fenced code block) is asked for in the user message, as a user would
  ("Reply with just the type name.", "Reply with the whole function in one code block.").
- ``agent``: a coding agent. A fixed system prompt plus the tools real agents always send
  (``read_file``, ``list_dir``, ``search``, ``apply_patch``, ``run_tests``, JSON-schema
  parameters). The tasks show everything needed, so they are still answered in text; the tools
  are sent because real agent clients always send them.

The oracle channel: the IDE client registers each task with the frontier simulator directly
(never through the gateway), keyed by :func:`prompt_hash` of the user message's text, which the
gateway forwards unchanged, so the simulator recognises the prompt without any tag or marker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ClientType = Literal["ide_chat", "agent"]
CLIENT_TYPES: tuple[ClientType, ...] = ("ide_chat", "agent")

IDE_CHAT_SYSTEM_PROMPT = (
    "You are Switchyard Code, a coding assistant inside the user's IDE. Each request shows the "
    "file the user is editing and one instruction. Do exactly what the instruction asks: no "
    "explanations, no greetings, no alternatives. When the answer is code, reply with exactly "
    "one fenced code block (```python ... ```) and nothing outside it; when it is a name, a value "
    "or printed output, reply with it alone on a single line, with no code fence and no quotes."
)

AGENT_SYSTEM_PROMPT = (
    "You are Switchyard Agent, a coding agent working in the user's repository. You can read "
    "files, list directories, search the code, apply patches and run the tests with the tools "
    "provided. Call a tool only when you need something the conversation does not show; when "
    "the user's message already holds everything needed, answer directly without tools. Keep "
    "answers short: code in exactly one fenced code block (```python ... ```) and nothing "
    "outside it; a name, a value or printed output alone on a single line."
)


def _tool(
    name: str, description: str, properties: dict[str, Any], *required: str
) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(required),
                "additionalProperties": False,
            },
        },
    }


_PATH = {"type": "string", "description": "Path relative to the workspace root."}

AGENT_TOOLS: tuple[Mapping[str, Any], ...] = (
    _tool(
        "read_file",
        "Read a file of the workspace, whole or a range of lines.",
        {
            "path": _PATH,
            "start_line": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
            "end_line": {"type": "integer", "minimum": 1, "description": "Last line, inclusive."},
        },
        "path",
    ),
    _tool(
        "list_dir",
        "List the entries of a workspace directory.",
        {
            "path": _PATH,
            "depth": {"type": "integer", "minimum": 1, "maximum": 5, "default": 1},
        },
        "path",
    ),
    _tool(
        "search",
        "Search the workspace for text or a regular expression; returns matching lines.",
        {
            "query": {"type": "string", "description": "Text or pattern to look for."},
            "path": {**_PATH, "description": "Directory or file to search (default: all)."},
            "regex": {"type": "boolean", "default": False},
        },
        "query",
    ),
    _tool(
        "apply_patch",
        "Apply a unified diff to the workspace files.",
        {"patch": {"type": "string", "description": "The unified diff to apply."}},
        "patch",
    ),
    _tool(
        "run_tests",
        "Run the test suite, or some test files, with pytest; returns the report.",
        {
            "paths": {"type": "array", "items": {"type": "string"}, "description": "Test files."},
            "keyword": {"type": "string", "description": "Only tests matching this -k expression."},
        },
    ),
)


@dataclass(frozen=True, slots=True)
class ClientProfile:
    """What every request of one client type carries besides the user message."""

    name: ClientType
    system_prompt: str
    tools: tuple[Mapping[str, Any], ...] = ()


CLIENT_PROFILES: Mapping[str, ClientProfile] = {
    "ide_chat": ClientProfile("ide_chat", IDE_CHAT_SYSTEM_PROMPT),
    "agent": ClientProfile("agent", AGENT_SYSTEM_PROMPT, AGENT_TOOLS),
}


def client_profile(client: str) -> ClientProfile:
    """The profile of ``client``; raises ValueError naming the known types."""
    if client in CLIENT_PROFILES:
        return CLIENT_PROFILES[client]
    raise ValueError(f"unknown client type {client!r}; expected one of {', '.join(CLIENT_TYPES)}")


def canonical_prompt_text(user_text: str) -> str:
    """The form of a user message both sides hash: line endings as ``\\n``, ends stripped."""
    return user_text.replace("\r\n", "\n").strip()


def prompt_hash(user_text: str) -> str:
    """The oracle channel's key of a prompt: sha256 (hex) of its last user message's text."""
    return hashlib.sha256(canonical_prompt_text(user_text).encode()).hexdigest()
