"""Every wire format maps to the same OpenAI chat conversation; odd shapes skip with a reason.

Responses and Messages records are read as the served model saw them: their canonical fields,
or (older records, as the synthetic ones are) the gateway's live translators run again; see
``tests/gateway/served_conversation`` for the same checked through a real gateway.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from tests.traffic.export import synthetic as syn
from traffic.export.conversation import (
    AssistantTurn,
    ToolCall,
    UnsupportedShape,
    answer_of,
    to_messages,
    tools_of,
)
from traffic.store import InferenceRecord, InferenceRow

Read = Callable[..., Any]


def _live(read: Read, row: InferenceRow) -> Any:
    """``read`` (to_messages, tools_of, answer_of) of ``row``, with the gateway's translators."""
    return read(row.inference, syn.LIVE)


def test_chat_with_tool_round_trip() -> None:
    r = syn.chat_tool_row(1)
    assert _live(to_messages, r) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
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
    ]
    assert _live(tools_of, r) == [syn.WEATHER_TOOL_CHAT]
    assert _live(answer_of, r) == AssistantTurn("18C and sunny.")


def test_chat_answer_with_tool_calls() -> None:
    call = {"id": "c9", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    r = syn.row(
        1,
        "openai.chat",
        {"messages": [{"role": "user", "content": "x"}]},
        syn.chat_response(None, [call]),
    )
    turn = _live(answer_of, r)
    assert turn == AssistantTurn(None, (ToolCall("c9", "f", "{}"),))
    assert turn.to_message() == {"role": "assistant", "content": None, "tool_calls": [call]}


def test_legacy_completion_prompt_is_one_user_message() -> None:
    r = syn.completions_row(1, "def add(a, b):", "\n    return a + b")
    assert _live(to_messages, r) == [{"role": "user", "content": "def add(a, b):"}]
    assert _live(tools_of, r) == []
    assert _live(answer_of, r) == AssistantTurn("\n    return a + b")


def test_responses_items_map_to_chat() -> None:
    r = syn.responses_row(1)
    assert _live(to_messages, r) == [
        {"role": "system", "content": "You are a coding assistant."},
        {"role": "user", "content": "ls"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "fc_1",
                    "type": "function",
                    "function": {"name": "shell", "arguments": '{"cmd":"ls"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "fc_1", "content": "a.py\nb.py"},
    ]
    assert _live(tools_of, r) == [
        {
            "type": "function",
            "function": {
                "name": "shell",
                "description": "Run a command",
                "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
            },
        }
    ]
    assert _live(answer_of, r) == AssistantTurn(
        "Two files.", (ToolCall("fc_2", "shell", '{"cmd":"cat a.py"}'),)
    )


def test_responses_plain_string_input() -> None:
    r = syn.row(
        1,
        "openai.responses",
        {"model": "m", "input": "hi"},
        {
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "hello"}],
                }
            ]
        },
    )
    assert _live(to_messages, r) == [{"role": "user", "content": "hi"}]
    assert _live(answer_of, r) == AssistantTurn("hello")


def test_anthropic_blocks_map_to_chat() -> None:
    r = syn.anthropic_row(1)
    assert _live(to_messages, r) == [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix test_a."},
        {
            "role": "assistant",
            "content": "Reading it.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path":"test_a.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "assert 1 == 2"},
        {"role": "user", "content": "Go on."},
    ]
    assert _live(tools_of, r) == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "write_file",
                "description": "Write a file",
                "parameters": syn.WRITE_FILE_TOOL["input_schema"],
            },
        },
    ]
    assert _live(answer_of, r) == AssistantTurn(
        "The assertion is wrong.",
        (ToolCall("toolu_2", "write_file", '{"path":"test_a.py","text":"assert 1 == 1"}'),),
    )


def test_parsing_does_not_mutate_the_row() -> None:
    r = syn.anthropic_row(1)
    before = copy.deepcopy(r)
    _live(to_messages, r)
    _live(tools_of, r)
    _live(answer_of, r)
    assert r == before


@pytest.mark.parametrize("status", [400, 500, 502])
def test_failed_call_has_no_answer(status: int) -> None:
    assert _live(answer_of, syn.chat_row(1, "q", "a", status=status)) is None
    assert _live(answer_of, syn.chat_row(1, "q", None)) is None


def test_empty_answer_is_none() -> None:
    assert _live(answer_of, syn.chat_row(1, "q", "")) is None


def _skip_reason(read: Read, row: InferenceRow, legacy: Any = syn.LIVE) -> str:
    with pytest.raises(UnsupportedShape) as info:
        read(row.inference, legacy)
    return info.value.reason


PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
IMAGE_CHAT = {
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this"},
                {"type": "image_url", "image_url": {"url": "data:..."}},
            ],
        }
    ]
}


@pytest.mark.parametrize(
    ("wire_format", "request_body", "reason"),
    [
        ("openai.chat", IMAGE_CHAT, "non_text_content"),
        ("openai.chat", {"messages": "hi"}, "malformed_request"),
        ("openai.chat", {"messages": [{"role": "wizard", "content": "x"}]}, "unknown_role"),
        (
            "openai.chat",
            {"messages": [{"role": "function", "name": "f", "content": "1"}]},
            "legacy_function_call",
        ),
        ("openai.completions", {"prompt": ["a", "b"]}, "batched_prompt"),
        ("openai.completions", {"prompt": [1, 2, 3]}, "batched_prompt"),
        ("openai.completions", {"prompt": "def f(", "suffix": "return x"}, "fim_suffix"),
        (
            "openai.responses",
            {"model": "m", "input": "x", "previous_response_id": "resp_1"},
            "stateful_conversation",
        ),
        (
            "openai.responses",
            {"model": "m", "input": "x", "background": True},
            "stateful_conversation",
        ),
        ("openai.responses", {"input": "no model"}, "malformed_request"),
        (
            "openai.responses",
            {
                "model": "m",
                "input": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": "what is this"},
                            {"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
                        ],
                    }
                ],
            },
            "non_text_content",
        ),
        (
            "anthropic.messages",
            {
                "model": "claude",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": [{"type": "image", "source": PNG}]}],
            },
            "non_text_content",
        ),
        ("anthropic.messages", {"model": "claude", "messages": []}, "malformed_request"),
        ("weird.format", {"messages": []}, "unknown_wire_format"),
    ],
)
def test_unsupported_requests(wire_format: str, request_body: dict[str, Any], reason: str) -> None:
    r = syn.row(1, wire_format, request_body, None)
    assert _skip_reason(to_messages, r) == reason


def test_non_function_tools_are_skipped() -> None:
    tools = [{"type": "custom", "custom": {"name": "x"}}]
    r = syn.row(1, "openai.chat", {"messages": [], "tools": tools}, None)
    assert _skip_reason(tools_of, r) == "non_function_tool"


@pytest.mark.parametrize(
    ("wire_format", "request_body", "answer"),
    [
        (
            "openai.responses",
            {"model": "m", "input": "x", "tools": [{"type": "web_search"}]},
            {"output": [{"type": "function_call", "call_id": "c", "name": "web_search"}]},
        ),
        (
            "anthropic.messages",
            {
                "model": "claude",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "bash_20250124", "name": "bash"}],
            },
            {"content": [{"type": "tool_use", "id": "t", "name": "bash", "input": {}}]},
        ),
        (  # the provider's own search, on a pass-through: its call is a call of a dropped tool
            "anthropic.messages",
            {
                "model": "claude",
                "max_tokens": 10,
                "messages": [{"role": "user", "content": "x"}],
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            },
            {
                "content": [
                    {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}},
                    {"type": "web_search_tool_result", "tool_use_id": "s", "content": []},
                    {"type": "text", "text": "Found it."},
                ]
            },
        ),
    ],
)
def test_typed_tools_are_left_out_as_served_and_answers_calling_them_skipped(
    wire_format: str, request_body: dict[str, Any], answer: dict[str, Any]
) -> None:
    """The translating doors drop typed and built-in tools (the served model is not offered
    them), so the conversation has none; an answer that calls one cannot be trained on."""
    r = syn.row(1, wire_format, request_body, answer)
    assert _live(tools_of, r) == []
    assert _live(to_messages, r)[-1] == {"role": "user", "content": "x"}
    assert _skip_reason(answer_of, r) == "non_function_tool"


@pytest.mark.parametrize(
    ("wire_format", "response"),
    [
        ("openai.chat", {"choices": []}),
        ("openai.chat", {"choices": [{"message": {"role": "assistant", "content": 5}}]}),
        ("openai.completions", {"choices": [{"index": 0}]}),
        ("openai.responses", {"output": "text"}),
        ("anthropic.messages", {"content": "text"}),
    ],
)
def test_malformed_responses(wire_format: str, response: dict[str, Any]) -> None:
    r = syn.row(1, wire_format, {}, response)
    assert _skip_reason(answer_of, r) == "malformed_response"


def test_missing_tool_call_ids_get_stable_fallbacks() -> None:
    request = {
        "messages": [
            {"role": "user", "content": "x"},
            {
                "role": "assistant",
                "tool_calls": [
                    {"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
                ],
            },
        ]
    }
    r = syn.row(1, "openai.chat", request, None)
    first = _live(to_messages, r)
    assert first == _live(to_messages, r)
    call = first[1]["tool_calls"][0]
    assert call["id"] == "call_messages_1_0"
    assert call["function"]["arguments"] == '{"a":1}'


def test_responses_items_the_translator_drops_are_left_out() -> None:
    request = {
        "model": "m",
        "input": [
            {"type": "web_search_call", "id": "w", "status": "completed"},
            {"type": "reasoning", "id": "rs", "summary": []},
            {"role": "user", "content": "go on"},
        ],
    }
    assert _live(to_messages, syn.row(1, "openai.responses", request, None)) == [
        {"role": "user", "content": "go on"}
    ]


def _with(row: InferenceRow, **fields: Any) -> InferenceRecord:
    return dataclasses.replace(row.inference, **fields)


def test_canonical_fields_are_read_instead_of_the_clients_body() -> None:
    r = syn.anthropic_row(1)
    served = _with(
        r,
        canonical_request={
            "model": "claude",
            "messages": [{"role": "user", "content": "as served"}],
            "tools": [syn.WEATHER_TOOL_CHAT],
        },
        canonical_response=syn.chat_response("served answer"),
    )
    for legacy in (None, syn.LIVE):  # the translators are not needed, nor used
        assert to_messages(served, legacy) == [{"role": "user", "content": "as served"}]
        assert tools_of(served, legacy) == [syn.WEATHER_TOOL_CHAT]
        assert answer_of(served, legacy) == AssistantTurn("served answer")
    older = r.inference  # an older record: translated again
    assert to_messages(older, syn.LIVE)[0] == {"role": "system", "content": "You fix bugs."}
    assert answer_of(older, syn.LIVE) == AssistantTurn(
        "The assertion is wrong.",
        (ToolCall("toolu_2", "write_file", '{"path":"test_a.py","text":"assert 1 == 1"}'),),
    )


@pytest.mark.parametrize("row", [syn.anthropic_row(1), syn.responses_row(1)])
def test_an_older_record_is_not_read_without_the_gateways_translators(row: InferenceRow) -> None:
    assert _skip_reason(to_messages, row, None) == "untranslated_legacy_record"
    assert _skip_reason(answer_of, row, None) == "untranslated_legacy_record"
    served_request = _with(row, canonical_request={"messages": [{"role": "user", "content": "x"}]})
    assert to_messages(served_request) == [{"role": "user", "content": "x"}]
    with pytest.raises(UnsupportedShape) as info:  # the gateway could not convert the answer
        answer_of(served_request)
    assert info.value.reason == "malformed_response"
