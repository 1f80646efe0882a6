"""Upstream chat-completion traffic shared by the Responses and Messages translation tests.

One mixed answer (reasoning, text, then two tool calls whose arguments arrive in pieces) both as
a stream of chunks and as one ``chat.completion``, and a parser of the SSE the encoders write.
"""

from __future__ import annotations

import json
from typing import Any

EXCHANGE_ID = "01a20126-0ed3-72c1-9f33-fb17a5b459b6"


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
    return {"id": "c", "model": "served", "choices": [choice]}


USAGE = {
    "choices": [],
    "usage": {
        "prompt_tokens": 50,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 20},
        "completion_tokens_details": {"reasoning_tokens": 2},
    },
}
# Reasoning, text, then two tool calls whose arguments arrive in pieces.
MIXED_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "Think"}),
    chunk({"reasoning_content": "ing."}),
    chunk({"content": "Let me look."}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"pa'},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'th": "a.py"}'}}]}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "repo__grep", "arguments": "{}"},
                }
            ]
        }
    ),
    chunk({}, "tool_calls"),
    USAGE,
]
MIXED_COMPLETION = {
    "id": "c",
    "model": "served",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "reasoning_content": "Thinking.",
                "content": "Let me look.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "repo__grep", "arguments": "{}"},
                    },
                ],
            },
        }
    ],
    "usage": USAGE["usage"],
}


def sse(blob: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for raw in blob.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in raw.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out
