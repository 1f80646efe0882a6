"""Synthetic traffic rows in all four wire formats, for the exporter tests.

Every factory returns the store's own :class:`InferenceRow` (an :class:`InferenceRecord` with its
feedback), whose id is a real UUIDv7 made from ``minute`` (minutes after a fixed epoch), so ids
sort by time exactly as the store's do. Responses and Messages rows are as a release before
migration 3 wrote them (no canonical fields): reading them takes the gateway's translators
(:data:`LIVE`).
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from gateway.admin.legacy_records import LIVE_TRANSLATOR
from traffic.store import FeedbackRecord, InferenceRecord, InferenceRow

LIVE = LIVE_TRANSLATOR

EPOCH = datetime(2025, 3, 1, tzinfo=UTC)

WEATHER_TOOL_CHAT = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "default": 1}},
            "required": ["city"],
        },
    },
}


def at(minute: float) -> datetime:
    return EPOCH + timedelta(minutes=minute)


def uuid7(minute: float, seq: int = 0) -> str:
    """A UUIDv7 for time ``at(minute)``; ``seq`` fills the random bits deterministically."""
    ms = int(at(minute).timestamp() * 1000)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= (seq & 0xFFF) << 64
    value |= 0b10 << 62
    value |= seq & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def feedback(
    kind: str, minute: float = 0.0, value: float | None = None, text: str | None = None
) -> FeedbackRecord:
    """Feedback on the row it is given to (its ``inference_id`` is set by :func:`row`)."""
    return FeedbackRecord(
        inference_id="",
        kind=kind,  # type: ignore[arg-type]
        value=value,
        payload={"text": text} if text is not None else None,
        ts=at(minute + 0.5),
    )


ENDPOINTS = {
    "openai.chat": "chat.completions",
    "openai.completions": "completions",
    "openai.responses": "responses",
    "anthropic.messages": "messages",
}


def row(
    minute: float,
    wire_format: str,
    request: dict[str, Any],
    response: dict[str, Any] | None,
    *,
    seq: int = 0,
    episode: str | None = None,
    fb: list[FeedbackRecord] | None = None,
    route_target: str = "frontier-openai",
    status: int = 200,
    tags: dict[str, str] | None = None,
) -> InferenceRow:
    record = InferenceRecord(
        id=uuid7(minute, seq),
        ts=at(minute),
        api_key_id="key-1",
        episode_id=episode,
        endpoint=ENDPOINTS.get(wire_format, "chat.completions"),
        wire_format=wire_format,
        request=request,
        response=response,
        route_target=route_target,
        served_model="gpt-x",
        status=status,
        latency_ms=100.0,
        tags=tags or {},
        cost_usd=0.001,
    )
    feedback = [dataclasses.replace(f, inference_id=record.id) for f in fb or []]
    return InferenceRow(record, feedback)


def chat_response(
    content: str | None, tool_calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"object": "chat.completion", "choices": [{"index": 0, "message": message}]}


def chat_row(
    minute: float, user: str, answer: str | None, *, system: str | None = None, **kw: Any
) -> InferenceRow:
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": user})
    response = chat_response(answer) if answer is not None else None
    return row(minute, "openai.chat", {"model": "m", "messages": messages}, response, **kw)


def chat_tool_row(minute: float, **kw: Any) -> InferenceRow:
    """A chat turn after a tool round trip, answered with text."""
    request = {
        "model": "m",
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
        ],
        "tools": [WEATHER_TOOL_CHAT],
    }
    return row(minute, "openai.chat", request, chat_response("18C and sunny."), **kw)


def completions_row(minute: float, prompt: str, text: str, **kw: Any) -> InferenceRow:
    request = {"model": "m", "prompt": prompt, "max_tokens": 16}
    response = {"object": "text_completion", "choices": [{"index": 0, "text": text}]}
    return row(minute, "openai.completions", request, response, **kw)


def responses_row(minute: float, **kw: Any) -> InferenceRow:
    request = {
        "model": "m",
        "instructions": "You are a coding assistant.",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ls"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "function_call",
                "call_id": "fc_1",
                "name": "shell",
                "arguments": '{"cmd":"ls"}',
            },
            {"type": "function_call_output", "call_id": "fc_1", "output": "a.py\nb.py"},
        ],
        "tools": [
            {
                "type": "function",
                "name": "shell",
                "description": "Run a command",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            }
        ],
    }
    response = {
        "object": "response",
        "output": [
            {"type": "reasoning", "id": "rs_2", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Two files."}],
            },
            {
                "type": "function_call",
                "call_id": "fc_2",
                "name": "shell",
                "arguments": '{"cmd":"cat a.py"}',
            },
        ],
    }
    return row(minute, "openai.responses", request, response, **kw)


WRITE_FILE_TOOL = {
    "name": "write_file",
    "description": "Write a file",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
    },
}


def anthropic_row(minute: float, **kw: Any) -> InferenceRow:
    request = {
        "model": "claude",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "You fix bugs."}],
        "messages": [
            {"role": "user", "content": "Fix test_a."},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "x"},
                    {"type": "text", "text": "Reading it."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "read_file",
                        "input": {"path": "test_a.py"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "assert 1 == 2"}],
                    },
                    {"type": "text", "text": "Go on."},
                ],
            },
        ],
        "tools": [
            {
                "name": "read_file",
                "description": "Read a file",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
            WRITE_FILE_TOOL,
        ],
    }
    response = {
        "type": "message",
        "role": "assistant",
        "content": [
            {"type": "text", "text": "The assertion is wrong."},
            {
                "type": "tool_use",
                "id": "toolu_2",
                "name": "write_file",
                "input": {"path": "test_a.py", "text": "assert 1 == 1"},
            },
        ],
        "stop_reason": "tool_use",
    }
    return row(minute, "anthropic.messages", request, response, **kw)
