"""Codex CLI's request shapes (Responses API: input items, function calls and their outputs,
namespaced tools, reasoning items) for the served-conversation property test."""

from __future__ import annotations

from typing import Any

from tests.gateway.served_conversation.client_corpus import Case, _schema
from tests.gateway.served_conversation.served import Answer, Call

CODEX_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "shell",
        "description": "Runs a shell command and returns its output.",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "array", "items": {"type": "string"}}},
            "required": ["command"],
            "additionalProperties": False,
        },
    },
    {
        "type": "function",
        "name": "update_plan",
        "description": "Updates the plan.",
        "parameters": _schema("plan"),
    },
    {
        "type": "namespace",
        "name": "github",
        "tools": [
            {
                "type": "function",
                "name": "search_issues",
                "description": "Search issues.",
                "parameters": _schema("q"),
            },
            {"type": "web_search"},
        ],
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Apply a patch.",
        "format": {"type": "grammar"},
    },
    {"type": "web_search"},
    {"type": "local_shell"},
]
CODEX_INPUT: list[dict[str, Any]] = [
    {
        "type": "message",
        "role": "developer",
        "content": [{"type": "input_text", "text": "<permissions>workspace-write</permissions>"}],
    },
    {
        "type": "message",
        "role": "user",
        "content": [
            {
                "type": "input_text",
                "text": "<environment_context>\n  <cwd>/repo</cwd>\n</environment_context>",
            }
        ],
    },
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "Why does CI fail?"}],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Checking logs"}],
        "encrypted_content": "gAAAAB...",
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "shell",
        "arguments": '{"command":["bash","-lc","cat ci.log"]}',
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "error: lint failed\nexit 1"},
    {
        "type": "local_shell_call",
        "id": "lsh_1",
        "call_id": "call_2",
        "status": "completed",
        "action": {"type": "exec", "command": ["ls"]},
    },
    {"type": "function_call_output", "call_id": "call_2", "output": "a.py"},
    {
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "output_text", "text": "Lint fails. "},
            {"type": "output_text", "text": "Checking issues."},
        ],
    },
    {
        "type": "function_call",
        "call_id": "call_3",
        "name": "search_issues",
        "namespace": "github",
        "arguments": '{"q":"lint"}',
    },
    {
        "type": "function_call_output",
        "call_id": "call_3",
        "output": [{"type": "input_text", "text": "#12 lint rule"}],
    },
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it."}]},
]


def _codex(**extra: Any) -> dict[str, Any]:
    body = {
        "model": "m",
        "instructions": "You are Codex, based on GPT-5. You are running as a coding agent.",
        "input": CODEX_INPUT,
        "tools": CODEX_TOOLS,
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a1b2-session",
    }
    return {**body, **extra}


PATCH = Answer(
    text=("I'll search for the rule.",),
    reasoning="Find the lint rule first.",
    calls=(
        Call("call_9", "github__search_issues", ('{"q":', '"lint rule E501"}')),
        Call("call_10", "shell", ('{"command":["bash","-lc",', '"ruff check ."]}')),
    ),
)
CODEX = [
    Case("codex items and namespaced tools", "/v1/responses", _codex(), PATCH),
    Case("codex stream", "/v1/responses", _codex(stream=True), PATCH),
    Case(
        "codex image",
        "/v1/responses",
        _codex(
            input=[
                {
                    "type": "message",
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What does this show?"},
                        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0K"},
                    ],
                }
            ]
        ),
        Answer(text=("A chart.",)),
        refused="non_text_content",
    ),
    Case(
        "codex plain string input",
        "/v1/responses",
        {"model": "m", "input": "Say hi.", "instructions": "Be terse."},
        Answer(text=("hi",)),
    ),
]
