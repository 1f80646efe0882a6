"""Unit tests of the Anthropic Messages translator and stream encoder (no servers).

Wire shapes are checked by validating against the official SDK's own pydantic types, so a
missing or mistyped field fails here before a client sees it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from pydantic import TypeAdapter

from gateway.doors.anthropic.render import (
    MessageContext,
    MessagesStreamEncoder,
    error_body,
    render_message,
)
from gateway.doors.anthropic.translate import translate_messages
from gateway.doors.openai.requests import validate_chat
from gateway.errors import InvalidRequestError
from gateway.wire.blocks import BlockSequencer, prompt_chars
from tests.gateway.wire_translation_samples import (
    EXCHANGE_ID,
    MIXED_COMPLETION,
    MIXED_STREAM,
    chunk,
    sse,
)

MESSAGE_EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


# Anthropic requests


def test_messages_blocks_become_chat_messages() -> None:
    body = {
        "model": "m",
        "max_tokens": 100,
        "system": [
            {"type": "text", "text": "A"},
            {"type": "text", "text": "B", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAA"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"p": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "is_error": True,
                        "content": [{"type": "text", "text": "missing"}, {"type": "image"}],
                    },
                    {"type": "text", "text": "again"},
                ],
            },
        ],
        "tools": [
            {"name": "read_file", "input_schema": {"type": "object"}},
            {"type": "bash_20250124", "name": "bash"},
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "stop_sequences": ["END"],
        "top_k": 5,
        "stream": True,
        "metadata": {"user_id": "u-1"},
        "thinking": {"type": "enabled", "budget_tokens": 2000},
    }
    tr = translate_messages(body)
    msgs = tr.body["messages"]
    assert msgs[0] == {
        "role": "system",
        "content": [
            {"type": "text", "text": "A"},
            {"type": "text", "text": "B", "cache_control": {"type": "ephemeral"}},
        ],
    }
    assert msgs[1]["content"][1]["image_url"]["url"] == "data:image/png;base64,AAA"
    assert msgs[2]["content"] == "Reading."
    assert msgs[2]["tool_calls"] == [
        {
            "id": "toolu_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"p":1}'},
        }
    ]
    assert msgs[3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: missing"}
    assert msgs[4] == {"role": "user", "content": "again"}
    assert tr.body["tool_choice"] == "required" and tr.body["parallel_tool_calls"] is False
    assert [t["function"]["name"] for t in tr.body["tools"]] == ["read_file"]
    assert tr.body["stop"] == ["END"] and tr.body["top_k"] == 5 and tr.body["max_tokens"] == 100
    assert tr.stream and tr.thinking and tr.user_id == "u-1"
    assert tr.notes == {
        "dropped_content": ["assistant.thinking", "tool_result.image"],
        "dropped_tools": ["bash_20250124"],
    }
    assert "metadata" not in tr.body and "thinking" not in tr.body
    validate_chat(tr.body)


def test_messages_assistant_prefill_is_continued_on_vllm() -> None:
    body = {
        "model": "m",
        "max_tokens": 5,
        "messages": [
            {"role": "user", "content": "Name a colour"},
            {"role": "assistant", "content": "The colour is"},
        ],
    }
    tr = translate_messages(body)
    assert tr.body["continue_final_message"] is True
    assert tr.body["add_generation_prompt"] is False
    validate_chat(tr.body)


def test_messages_tool_choice_tool_and_none() -> None:
    base = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"name": "f", "input_schema": {}}],
    }
    named = translate_messages({**base, "tool_choice": {"type": "tool", "name": "f"}})
    assert named.body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert translate_messages({**base, "tool_choice": {"type": "none"}}).body["tool_choice"] == (
        "none"
    )


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        {"model": "m", "max_tokens": 5, "messages": [{"role": "robot", "content": "x"}]},
        {
            "model": "m",
            "max_tokens": 5,
            "temperature": 1.5,
            "messages": [{"role": "user", "content": "x"}],
        },
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": [{"type": "tool_result"}]}],
        },
    ],
)
def test_messages_bad_requests(body: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError):
        translate_messages(body)


def test_count_tokens_needs_no_max_tokens() -> None:
    tr = translate_messages(
        {"model": "m", "system": "abcd", "messages": [{"role": "user", "content": "efgh"}]},
        count_only=True,
    )
    assert prompt_chars(tr.body) == 8


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (504, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_anthropic_error_types_by_status(status: int, kind: str) -> None:
    body = error_body(status, {"error": {"message": "boom", "type": "x"}})
    assert body == {"type": "error", "error": {"type": kind, "message": "boom"}}


# Answers and streams


def test_sequencer_keeps_late_fragments_of_closed_calls() -> None:
    seq = BlockSequencer(False, lambda i: f"gen_{i}")
    seq.feed(
        chunk(
            {
                "reasoning_content": "dropped",
                "tool_calls": [{"index": 0, "function": {"name": "a", "arguments": "{"}}],
            }
        )
    )
    seq.feed(chunk({"tool_calls": [{"index": 1, "id": "x", "function": {"name": "b"}}]}))
    steps = seq.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}))
    assert steps == []
    assert [(b.kind, b.call_id, b.text) for b in seq.blocks] == [
        ("tool", "gen_0", "{}"),
        ("tool", "x", ""),
    ]


def _message_ctx(thinking: bool) -> MessageContext:
    return MessageContext("msg_" + EXCHANGE_ID.replace("-", ""), "asked", 12, thinking, ("END",))


@pytest.mark.parametrize("thinking", [False, True])
def test_messages_stream_is_valid_sdk_events_and_matches_the_unary_render(thinking: bool) -> None:
    ctx = _message_ctx(thinking)
    enc = MessagesStreamEncoder(ctx)
    blob = b"".join(enc.encode(c) for c in MIXED_STREAM) + enc.finish()
    events = sse(blob)
    for name, data in events:
        if name != "ping":  # the SDK handles pings apart from its event union
            assert MESSAGE_EVENT.validate_python(data).type == name
    kinds = [n for n, _ in events]
    assert kinds[:3] == ["message_start", "content_block_start", "ping"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert events[0][1]["message"]["usage"]["input_tokens"] == 12  # the estimate
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    expected = ["text", "tool_use", "tool_use"]
    assert starts == (["thinking", *expected] if thinking else expected)
    indexes = [d["index"] for n, d in events if n == "content_block_start"]
    assert indexes == list(range(len(starts)))
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] == "tool_use"
    assert delta["usage"] == {
        "input_tokens": 30,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 20,
        "output_tokens": 7,
    }
    final = enc.final_response()
    unary = render_message(ctx, MIXED_COMPLETION)
    assert final == unary
    message = Message.model_validate(unary)
    assert message.content[-2].type == "tool_use"
    assert message.content[-2].id == "call_a" and message.content[-2].input == {"path": "a.py"}
    assert message.model == "asked"  # the name the client asked for (Claude Code checks it)


def test_messages_stop_sequence_named_by_vllm_and_missing_ids() -> None:
    ctx = _message_ctx(False)
    completion = {
        "model": "served",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "stop_reason": "END",
                "message": {"role": "assistant", "content": "done", "tool_calls": None},
            }
        ],
    }
    rendered = render_message(ctx, completion)
    assert (rendered["stop_reason"], rendered["stop_sequence"]) == ("stop_sequence", "END")
    no_id = {
        "model": "s",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"type": "function", "function": {"name": "f", "arguments": "oops"}}
                    ],
                },
            }
        ],
    }
    use = render_message(ctx, no_id)["content"][0]
    assert use["id"].startswith("toolu_") and use["input"] == {}


def test_messages_error_event_and_interrupted_record() -> None:
    enc = MessagesStreamEncoder(_message_ctx(False))
    enc.encode(MIXED_STREAM[3])
    ((name, data),) = sse(enc.error("broken"))
    assert name == "error" and data == {
        "type": "error",
        "error": {"type": "api_error", "message": "broken"},
    }
    final = enc.final_response()
    assert final is not None and final["stop_reason"] is None
    assert final["content"] == [{"type": "text", "text": "Let me look."}]


def test_messages_system_turns_inside_messages_become_system_messages() -> None:
    # Claude Code sends mid-conversation instructions as role "system" inside `messages`.
    tr = translate_messages(
        {
            "model": "auto",
            "max_tokens": 64,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "system", "content": [{"type": "text", "text": "Agent types: ..."}]},
                {"role": "user", "content": "go on"},
            ],
        }
    )
    roles = [m["role"] for m in tr.body["messages"]]
    assert roles == ["user", "system", "user"]
    assert "Agent types" in json.dumps(tr.body["messages"][1])
