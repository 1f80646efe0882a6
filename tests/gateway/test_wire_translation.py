"""Unit tests of the Responses and Anthropic translators and stream encoders (no servers).

Wire shapes are checked by validating against the official SDKs' own pydantic types, so a
missing or mistyped field fails here before a client sees it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.errors import InvalidRequestError
from gateway.wire.anthropic import (
    MessageContext,
    MessagesStreamEncoder,
    error_body,
    render_message,
    translate_messages,
)
from gateway.wire.blocks import BlockSequencer, prompt_chars
from gateway.wire.openai_requests import validate_chat
from gateway.wire.responses import (
    ResponseContext,
    ResponsesStreamEncoder,
    render_response,
    translate_request,
)

EXCHANGE_ID = "01a20126-0ed3-72c1-9f33-fb17a5b459b6"
FN = {"type": "function", "name": "read_file", "parameters": {"type": "object"}}
RESPONSE_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
MESSAGE_EVENT: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)


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


# Responses requests


def test_responses_items_become_chat_messages_with_tool_calls_and_results() -> None:
    body = {
        "model": "m",
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Python only."},
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Read a.py"},
                    {"type": "input_image", "image_url": "data:x"},
                ],
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Sure."}],
            },
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{}"},
            {
                "type": "function_call",
                "call_id": "call_2",
                "name": "grep",
                "namespace": "repo",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "x = 1"},
            {
                "type": "function_call_output",
                "call_id": "call_2",
                "output": [{"type": "input_text", "text": "a.py:1"}],
            },
            {"type": "local_shell_call", "id": "ls_1", "call_id": "call_3", "status": "completed"},
            {"type": "function_call_output", "call_id": "call_3", "output": "orphan"},
        ],
        "tools": [
            FN,
            {"type": "web_search"},
            {
                "type": "namespace",
                "name": "repo",
                "description": "",
                "tools": [{"type": "function", "name": "grep"}, {"type": "custom", "name": "x"}],
            },
        ],
        "tool_choice": {"type": "function", "name": "read_file"},
        "parallel_tool_calls": False,
        "max_output_tokens": 64,
        "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {}, "strict": True}},
        "prompt_cache_key": "conv-1",
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "some_future_field": 1,
    }
    tr = translate_request(body)
    msgs = tr.body["messages"]
    assert msgs[0] == {"role": "system", "content": "Be brief.\n\nPython only."}
    assert msgs[1]["content"][1] == {"type": "image_url", "image_url": {"url": "data:x"}}
    assert msgs[2]["content"] == "Sure."
    assert [c["id"] for c in msgs[2]["tool_calls"]] == ["call_1", "call_2"]
    assert msgs[2]["tool_calls"][1]["function"]["name"] == "repo__grep"
    assert msgs[3:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "x = 1"},
        {"role": "tool", "tool_call_id": "call_2", "content": "a.py:1"},
    ]
    assert [t["function"]["name"] for t in tr.body["tools"]] == ["read_file", "repo__grep"]
    assert tr.namespaced == {"repo__grep": ("repo", "grep")}
    assert tr.body["tool_choice"] == {"type": "function", "function": {"name": "read_file"}}
    assert tr.body["parallel_tool_calls"] is False
    assert tr.body["max_tokens"] == 64 and tr.body["reasoning_effort"] == "low"
    assert tr.body["response_format"]["json_schema"]["name"] == "out"
    assert tr.body["stream_options"] == {"include_usage": True}
    assert tr.cache_key == "conv-1"
    assert tr.notes == {
        "dropped_tools": ["web_search", "repo.custom"],
        "dropped_input": ["reasoning", "local_shell_call", "function_call_output"],
    }
    assert "some_future_field" not in tr.body and "store" not in tr.body
    validate_chat(tr.body)  # the internal body is a valid chat request


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("required", "required"),
        ("none", "none"),
        ({"type": "allowed_tools", "mode": "required", "tools": []}, "required"),
        ({"type": "web_search"}, "auto"),
        ({"type": "function", "name": "gone"}, "auto"),
    ],
)
def test_responses_tool_choice_mapping(choice: Any, expected: Any) -> None:
    tr = translate_request({"model": "m", "input": "x", "tools": [FN], "tool_choice": choice})
    assert tr.body["tool_choice"] == expected


def test_responses_without_servable_tools_sends_no_tool_fields() -> None:
    body = {"model": "m", "input": "x", "tools": [{"type": "file_search"}], "tool_choice": "auto"}
    tr = translate_request(body)
    assert "tools" not in tr.body and "tool_choice" not in tr.body
    assert tr.notes == {"dropped_tools": ["file_search"]}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 3}, "input"),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"model": "m", "input": "x", "background": True}, "background"),
        ({"model": "m", "input": "x", "tool_choice": "sometimes", "tools": [FN]}, "tool_choice"),
    ],
)
def test_responses_bad_requests(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        translate_request(body)
    assert info.value.status == 400 and (info.value.param or "").startswith(param)


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


def _response_ctx() -> ResponseContext:
    body = {"model": "asked", "input": "x", "tools": [FN], "store": False}
    return ResponseContext.build(EXCHANGE_ID, body, {"repo__grep": ("repo", "grep")})


def test_responses_stream_is_valid_sdk_events_and_matches_the_unary_render() -> None:
    ctx = _response_ctx()
    enc = ResponsesStreamEncoder(ctx)
    blob = b"".join(enc.encode(c) for c in MIXED_STREAM) + enc.finish()
    events = sse(blob)
    for name, data in events:
        assert RESPONSE_EVENT.validate_python(data).type == name
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    kinds = [n for n, _ in events]
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds.count("response.reasoning_text.delta") == 2
    assert kinds.count("response.function_call_arguments.delta") == 3
    assert kinds[-1] == "response.completed"
    final = enc.final_response()
    assert final is not None and final == events[-1][1]["response"]
    unary = render_response(ctx, MIXED_COMPLETION)
    for r in (final, unary):
        Response.model_validate(r)
        assert r["id"] == "resp_" + EXCHANGE_ID.replace("-", "")
        assert [i["type"] for i in r["output"]] == [
            "reasoning",
            "message",
            "function_call",
            "function_call",
        ]
        assert r["output"][3]["name"] == "grep" and r["output"][3]["namespace"] == "repo"
        assert r["output"][2]["call_id"] == "call_a"
        assert r["usage"]["input_tokens_details"]["cached_tokens"] == 20
        assert r["usage"]["output_tokens_details"]["reasoning_tokens"] == 2
        assert r["store"] is False and r["model"] == "served"
    assert {k: v for k, v in final.items() if k != "completed_at"} == {
        k: v for k, v in unary.items() if k != "completed_at"
    }


def test_responses_length_is_incomplete_and_failure_is_response_failed() -> None:
    ctx = _response_ctx()
    cut = {
        **MIXED_COMPLETION,
        "choices": [{**MIXED_COMPLETION["choices"][0], "finish_reason": "length"}],
    }
    rendered = render_response(ctx, cut)
    assert rendered["status"] == "incomplete"
    assert rendered["incomplete_details"] == {"reason": "max_output_tokens"}
    enc = ResponsesStreamEncoder(ctx)
    events = sse(enc.encode(MIXED_STREAM[3]) + enc.error("upstream broke"))
    assert [n for n, _ in events][-2:] == ["error", "response.failed"]
    for _, data in events:
        RESPONSE_EVENT.validate_python(data)
    assert events[-1][1]["response"]["error"]["message"] == "upstream broke"
    assert enc.final_response() == events[-1][1]["response"]
    early = ResponsesStreamEncoder(ctx)
    assert next(n for n, _ in sse(early.error("x"))) == "response.created"


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
    assert message.model == "served"


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
