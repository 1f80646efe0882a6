"""Answers in a door's wire format read back as the internal chat completion (no servers).

``completion_of_message`` (Anthropic) and ``completion_of_response`` (Responses) are the inverse
of the doors' renderers: what the record's ``canonical_response`` holds for a native
pass-through, and how the exporter reads answers recorded before that field existed.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gateway.doors.anthropic.answer import completion_of_message
from gateway.doors.anthropic.render import MessageContext, render_message
from gateway.doors.anthropic.translate import translate_messages
from gateway.doors.responses.translate import (
    ResponseContext,
    completion_of_response,
    render_response,
)
from tests.fixtures.loopback_provider import MESSAGE
from tests.gateway.wire_translation_samples import EXCHANGE_ID, MIXED_COMPLETION


def _message(completion: dict[str, Any]) -> dict[str, Any]:
    return dict(completion["choices"][0]["message"])


def test_a_native_anthropic_message_becomes_a_chat_completion() -> None:
    before = copy.deepcopy(MESSAGE)
    completion = completion_of_message(MESSAGE)
    assert before == MESSAGE  # the record's response is not touched
    assert completion["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "I will read it.",
                "reasoning_content": "Look at the file first.",
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "Read", "arguments": '{"path":"a.py"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
            "logprobs": None,
        }
    ]
    assert completion["model"] == "claude-sonnet-4-5"
    assert completion["usage"] == {
        "prompt_tokens": 12 + 2048 + 4096,
        "completion_tokens": 31,
        "total_tokens": 12 + 2048 + 4096 + 31,
        "prompt_tokens_details": {"cached_tokens": 4096, "cache_creation_tokens": 2048},
    }


def test_answer_text_is_joined_as_the_translator_joins_an_assistant_turn() -> None:
    """The next turn carries this answer as history through the Messages translator: the two
    must read the same text."""
    blocks = [
        {"type": "text", "text": "First."},
        {"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": 1}},
        {"type": "text", "text": "Second."},
        {"type": "redacted_thinking", "data": "xx"},
    ]
    answer = _message(completion_of_message({"content": blocks, "stop_reason": "end_turn"}))
    history = translate_messages(
        {
            "model": "m",
            "max_tokens": 1,
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": blocks},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
            ],
        }
    ).body["messages"][1]
    assert answer == history
    assert answer["content"] == "First.Second."


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        (None, None),
    ],
)
def test_stop_reasons_map_back(stop: str | None, finish: str | None) -> None:
    message = {"content": [{"type": "text", "text": "x"}], "stop_reason": stop}
    assert completion_of_message(message)["choices"][0]["finish_reason"] == finish


def test_a_rendered_message_reads_back_as_the_completion_it_rendered() -> None:
    ctx = MessageContext("msg_1", "m", 10, thinking=True)
    completion: dict[str, Any] = MIXED_COMPLETION
    back = _message(completion_of_message(render_message(ctx, completion)))
    original = completion["choices"][0]["message"]
    assert back["content"] == original["content"]
    assert back["reasoning_content"] == original["reasoning_content"]
    assert [c["id"] for c in back["tool_calls"]] == [c["id"] for c in original["tool_calls"]]
    assert [json.loads(c["function"]["arguments"]) for c in back["tool_calls"]] == [
        json.loads(c["function"]["arguments"]) for c in original["tool_calls"]
    ]


def test_a_rendered_response_reads_back_as_the_completion_it_rendered() -> None:
    namespaced = {"repo__grep": ("repo", "grep")}
    ctx = ResponseContext.build(EXCHANGE_ID, {"model": "m"}, namespaced)
    completion: dict[str, Any] = MIXED_COMPLETION
    rendered = render_response(ctx, completion)
    assert rendered["output"][-1]["namespace"] == "repo"  # what the client saw
    back = completion_of_response(rendered)
    original = completion["choices"][0]["message"]
    assert _message(back) == {
        "role": "assistant",
        "content": original["content"],
        "reasoning_content": original["reasoning_content"],
        "tool_calls": original["tool_calls"],  # arguments as the model wrote them; name flat
    }
    assert back["choices"][0]["finish_reason"] == "tool_calls"
    assert back["usage"]["prompt_tokens_details"] == {"cached_tokens": 20}


def test_an_incomplete_response_reads_back_as_length() -> None:
    response = {
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [
            {"type": "message", "content": [{"type": "output_text", "text": "cut"}]},
            {"type": "web_search_call", "id": "ws"},  # never rendered by the gateway: left out
        ],
    }
    back = completion_of_response(response)
    assert _message(back) == {"role": "assistant", "content": "cut"}
    assert back["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(
    "message",
    [
        {"content": "text"},
        {"content": [{"type": "tool_use", "input": {}}]},
        {"content": ["text"]},
    ],
)
def test_what_is_not_an_anthropic_message_is_a_value_error(message: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        completion_of_message(message)


@pytest.mark.parametrize(
    "response",
    [{"output": "text"}, {"output": [{"type": "message", "content": "x"}]}, {}],
)
def test_what_is_not_a_response_is_a_value_error(response: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        completion_of_response(response)
