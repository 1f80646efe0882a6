"""Request bodies shaped as real coding clients send them, with the answer the served model gives.

- Claude Code (``/v1/messages``): system blocks with ``cache_control``, 20+ tools, rounds of
  ``tool_use`` / ``tool_result`` (``is_error`` too, results as strings and as blocks), ``thinking``
  and ``redacted_thinking`` blocks, ``<system-reminder>`` text blocks, a mid-conversation system
  turn, typed tools (``web_search_*``), images (in a user turn and inside a tool result).
- Codex CLI (``/v1/responses``): ``instructions``, developer and user items with
  ``input_text`` parts, ``reasoning`` items with encrypted content, ``function_call`` /
  ``function_call_output`` pairs, a namespaced MCP tool and a call of it, ``local_shell_call``,
  built-in and custom tools, ``input_image``.
- Continue and aider (``/v1/chat/completions``): system + multi-turn chat, text parts, a tool
  round trip; Continue's autocomplete (``/v1/completions``): fill-in-the-middle with ``suffix``.

Each :class:`Case` names its door and the answer the model gives; ``refused`` is the reason an
export must give instead of a conversation (what ``traffic.export.conversation`` documents).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.gateway.served_conversation.served import Answer, Call


@dataclass(frozen=True)
class Case:
    name: str
    path: str  # the door
    body: dict[str, Any]
    answer: Answer
    refused: str | None = None


def _schema(*names: str) -> dict[str, Any]:
    props = {n: {"type": "string", "description": f"The {n}"} for n in names}
    return {"type": "object", "properties": props, "required": list(names[:1])}


CLAUDE_CODE_TOOLS = [
    {"name": name, "description": f"{name}: a Claude Code tool.", "input_schema": _schema(*args)}
    for name, args in [
        ("Task", ("description", "prompt", "subagent_type")),
        ("Bash", ("command", "timeout", "description")),
        ("Glob", ("pattern", "path")),
        ("Grep", ("pattern", "path", "glob", "output_mode")),
        ("LS", ("path",)),
        ("ExitPlanMode", ("plan",)),
        ("Read", ("file_path", "offset", "limit")),
        ("Edit", ("file_path", "old_string", "new_string")),
        ("MultiEdit", ("file_path", "edits")),
        ("Write", ("file_path", "content")),
        ("NotebookEdit", ("notebook_path", "new_source")),
        ("WebFetch", ("url", "prompt")),
        ("TodoWrite", ("todos",)),
        ("WebSearch", ("query",)),
        ("BashOutput", ("bash_id",)),
        ("KillShell", ("shell_id",)),
        ("SlashCommand", ("command",)),
        ("mcp__ide__getDiagnostics", ("uri",)),
        ("mcp__ide__executeCode", ("code",)),
        ("mcp__github__search_issues", ("query", "repo")),
        ("mcp__github__get_file", ("path", "ref")),
        ("AskUserQuestion", ("question",)),
    ]
]
CACHED = {"type": "ephemeral"}
SYSTEM = [
    {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
    {
        "type": "text",
        "text": "You are an interactive CLI tool that helps users with software engineering "
        "tasks.\n\n# Tone and style\nBe concise.\n\n<env>\nWorking directory: /repo\n</env>",
        "cache_control": CACHED,
    },
]
REMINDER = "<system-reminder>\nAs you answer, use the TodoWrite tool.\n</system-reminder>"
PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgoAAAANSUhEUg=="}


def _cc(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body = {
        "model": "m",
        "max_tokens": 32000,
        "system": SYSTEM,
        "messages": messages,
        "tools": CLAUDE_CODE_TOOLS,
        "metadata": {"user_id": "user_ab12_account__session_7f3e"},
        "temperature": 1,
    }
    return {**body, **extra}


CC_ROUNDS: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": REMINDER},
            {
                "type": "text",
                "text": "The test in tests/test_a.py fails; fix it.",
                "cache_control": CACHED,
            },
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Run the test first.", "signature": "EqQBCkgIARAB"},
            {"type": "text", "text": "I'll run the test."},
            {
                "type": "tool_use",
                "id": "toolu_01A",
                "name": "Bash",
                "input": {"command": "pytest tests/test_a.py -q", "description": "Run test"},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01A",
                "content": "FAILED tests/test_a.py::test_add - assert 3 == 4",
                "is_error": True,
            }
        ],
    },
    {
        "role": "assistant",
        "content": [
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
            {"type": "text", "text": "Let me read "},
            {"type": "text", "text": "both files."},
            {"type": "tool_use", "id": "toolu_01B", "name": "Read", "input": {"file_path": "a.py"}},
            {
                "type": "tool_use",
                "id": "toolu_01C",
                "name": "Read",
                "input": {"file_path": "tests/test_a.py", "limit": 200},
            },
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01B",
                "content": [{"type": "text", "text": "def add(a, b):\n    return a - b\n"}],
            },
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01C",
                "content": [
                    {"type": "text", "text": "from a import add"},
                    {"type": "text", "text": "def test_add():\n    assert add(1, 3) == 4"},
                ],
                "is_error": False,
                "cache_control": CACHED,
            },
            {"type": "text", "text": REMINDER},
        ],
    },
]
FIX = Answer(
    text=("The bug is ", "in `add`: it subtracts."),
    reasoning="add uses minus; change it to plus.",
    calls=(
        Call(
            "toolu_01D",
            "Edit",
            ('{"file_path": "a.py", ', '"old_string": "a - b", ', '"new_string": "a + b"}'),
        ),
    ),
)

CLAUDE_CODE = [
    Case("claude-code tool rounds", "/v1/messages", _cc(CC_ROUNDS), FIX),
    Case(
        "claude-code thinking, stream",
        "/v1/messages",
        _cc(CC_ROUNDS, thinking={"type": "enabled", "budget_tokens": 16000}, stream=True),
        FIX,
    ),
    Case(
        "claude-code mid-conversation system turn and typed tools",
        "/v1/messages",
        _cc(
            [
                *CC_ROUNDS[:3],
                {"role": "system", "content": "The user switched to plan mode."},
                {"role": "user", "content": "Continue."},
            ],
            tools=[*CLAUDE_CODE_TOOLS, {"type": "web_search_20250305", "name": "web_search"}],
        ),
        Answer(text=("Plan: change the operator.",)),
    ),
    Case(
        "claude-code image inside a tool result (dropped as served)",
        "/v1/messages",
        _cc(
            [
                {"role": "user", "content": "Look at the screenshot."},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "Read",
                            "input": {"file_path": "s.png"},
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [
                                {"type": "image", "source": PNG},
                                {"type": "text", "text": "s.png"},
                            ],
                        }
                    ],
                },
            ]
        ),
        Answer(text=("A login form.",)),
    ),
    Case(
        "claude-code image in a user turn",
        "/v1/messages",
        _cc(
            [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": PNG},
                        {"type": "text", "text": "What is this?"},
                    ],
                }
            ]
        ),
        Answer(text=("A cat.",)),
        refused="non_text_content",
    ),
    Case(
        "claude-code quota probe",
        "/v1/messages",
        {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "quota"}]},
        Answer(text=("ok",)),
    ),
]

WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "description": "Weather", "parameters": _schema("city")},
}
CHAT = [
    Case(
        "continue chat",
        "/v1/chat/completions",
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "You are a helpful coding assistant."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "```py\nx = 1\n```"},
                        {"type": "text", "text": "Explain."},
                    ],
                },
                {"role": "assistant", "content": "It binds x."},
                {"role": "user", "content": "And y?"},
            ],
            "temperature": 0.2,
            "stream": True,
        },
        Answer(text=("y is ", "unbound.")),
    ),
    Case(
        "aider edit round",
        "/v1/chat/completions",
        {
            "model": "m",
            "messages": [
                {
                    "role": "system",
                    "content": "Act as an expert software developer.\nAlways use best practices.",
                },
                {"role": "user", "content": "I added these files to the chat: a.py"},
                {
                    "role": "assistant",
                    "content": "Ok, any changes I propose will be to those files.",
                },
                {
                    "role": "user",
                    "content": "a.py\n```\ndef add(a, b):\n    return a - b\n```\nFix add.",
                },
            ],
            "temperature": 0,
        },
        Answer(
            text=(
                "a.py\n```\n<<<<<<< SEARCH\n    return a - b\n=======\n",
                "    return a + b\n>>>>>>> REPLACE\n```",
            )
        ),
    ),
    Case(
        "chat tool round trip",
        "/v1/chat/completions",
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "18C"},
            ],
            "tools": [WEATHER],
        },
        Answer(calls=(Call("c2", "get_weather", ('{"city":', '"Lyon"}')),)),
    ),
]
COMPLETIONS = [
    Case(
        "continue autocomplete (fill in the middle)",
        "/v1/completions",
        {
            "model": "m",
            "prompt": "def add(a, b):\n    ",
            "suffix": "\n\nprint(add(1, 2))\n",
            "max_tokens": 64,
            "temperature": 0.01,
            "stop": ["\n\n", "\ndef "],
            "stream": True,
        },
        Answer(text=("return ", "a + b")),
        refused="fim_suffix",
    ),
    Case(
        "plain completion",
        "/v1/completions",
        {"model": "m", "prompt": "# sum of a list\ndef total(xs):", "max_tokens": 32},
        Answer(text=("\n    return sum(xs)",)),
    ),
]
