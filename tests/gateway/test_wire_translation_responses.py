"""Unit tests of the Responses API translator and stream encoder (no servers).

Wire shapes are checked by validating against the official SDK's own pydantic types, so a
missing or mistyped field fails here before a client sees it.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from gateway.doors.openai.requests import validate_chat
from gateway.doors.responses.request import translate_request
from gateway.doors.responses.translate import (
    ResponseContext,
    ResponsesStreamEncoder,
    render_response,
)
from gateway.errors import InvalidRequestError
from tests.gateway.wire_translation_samples import (
    EXCHANGE_ID,
    MIXED_COMPLETION,
    MIXED_STREAM,
    sse,
)

FN = {"type": "function", "name": "read_file", "parameters": {"type": "object"}}
RESPONSE_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


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


# Answers and streams


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
    completion: dict[str, Any] = MIXED_COMPLETION
    cut = {
        **completion,
        "choices": [{**completion["choices"][0], "finish_reason": "length"}],
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
