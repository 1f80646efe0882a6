"""The OpenAI front door against real servers on loopback, with the official openai SDK."""

from __future__ import annotations

from typing import cast

import httpx
import openai
import pytest
from openai.types.chat import (
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageToolCallUnionParam,
)

from tests.fixtures.gateway_fixture import GatewayThread

TOOLS: list[ChatCompletionFunctionToolParam] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


@pytest.fixture
def client(gateway: GatewayThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="sk-test", max_retries=0)


def test_chat_completion_on_auto_goes_to_the_default_target_with_route_headers(
    client: openai.OpenAI, gateway: GatewayThread
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "Explain this function"}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content is not None
    assert completion.choices[0].message.content.startswith("Simulated answer")
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    assert raw.headers["x-switchyard-target"] == "local"
    assert raw.headers["x-switchyard-model"] == "sim-local"
    assert raw.headers["x-switchyard-replica"].startswith("http://127.0.0.1:")
    record = gateway.sink.wait_for(raw.headers["x-request-id"])
    assert record.status == 200
    assert record.route_target == "local"
    assert record.response is not None
    content = completion.choices[0].message.content
    assert record.response["choices"][0]["message"]["content"] == content
    assert record.prompt_tokens == completion.usage.prompt_tokens


def test_content_parts_and_sampling_fields_are_accepted(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="switchyard-local",
        messages=[
            {"role": "system", "content": "You are a coding assistant."},
            {"role": "user", "content": [{"type": "text", "text": "Refactor this"}]},
        ],
        temperature=0.2,
        top_p=0.9,
        max_tokens=5,
        stop=["\n\n"],
        seed=7,
        n=2,
        user="dev-1",
        response_format={"type": "text"},
    )
    assert len(completion.choices) == 2
    assert completion.choices[0].finish_reason == "length"


def test_stream_ends_with_done_and_has_no_usage_chunk_unless_asked(gateway: GatewayThread) -> None:
    body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", gateway.base_url + "/v1/chat/completions", json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        text = "".join(resp.iter_text())
    events = [e for e in text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)
    assert '"choices":[]' not in text
    record = gateway.sink.wait_for(resp.headers["x-request-id"])
    assert record.stream and record.status == 200
    assert record.completion_tokens == 16  # usage was taken upstream even though not forwarded


@pytest.mark.parametrize("model", ["auto", "gpt-4o-mini", "claude-haiku-4-5"])
def test_stream_with_include_usage_through_every_backend_kind(
    client: openai.OpenAI, model: str
) -> None:
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Write a docstring"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Simulated answer")
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 16


@pytest.mark.parametrize("model", ["switchyard-local", "gpt-4o-mini", "claude-haiku-4-5"])
def test_tool_calls_stream_as_openai_deltas(client: openai.OpenAI, model: str) -> None:
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Use a tool to read main.py"}],
        tools=TOOLS,
        tool_choice="auto",
        stream=True,
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"name": "", "args": ""})
                if tc.function and tc.function.name:
                    slot["name"] += tc.function.name
                if tc.function and tc.function.arguments:
                    slot["args"] += tc.function.arguments
            finish = choice.finish_reason or finish
    assert calls[0]["name"] == "read_file"
    assert '"path"' in calls[0]["args"]
    assert finish == "tool_calls"


def test_tool_call_round_trip_non_streamed(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Call the tool to read setup.py"}],
        tools=TOOLS,
    )
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    second = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "user", "content": "Call the tool to read setup.py"},
            {
                "role": "assistant",
                "content": None,
                # The call as the SDK parsed it, sent back as its param.
                "tool_calls": [cast(ChatCompletionMessageToolCallUnionParam, call.model_dump())],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "print('hello')"},
        ],
        tools=TOOLS,
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content


def test_suffix_to_a_chat_only_frontier_model_is_refused_not_dropped(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="suffix"):
        client.completions.create(model="gpt-4o-mini", prompt="def add(a, b):", suffix="# end")


@pytest.mark.parametrize("model", ["switchyard-local", "instruct"])
def test_legacy_completions_pass_suffix(client: openai.OpenAI, model: str) -> None:
    completion = client.completions.create(model=model, prompt="def add(a, b):", suffix="# end")
    assert completion.choices[0].text.endswith("# end")
    stream = client.completions.create(model=model, prompt="def add(a, b):", stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices).startswith("Simulated")


def test_models_lists_every_alias_including_auto(client: openai.OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert ids[0] == "auto"
    assert {"switchyard-local", "gpt-4o-mini", "claude-haiku-4-5"} <= set(ids)


def test_route_header_rule_sends_to_frontier(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="auto",
        messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-switchyard-route": "frontier"},
    )
    assert raw.headers["x-switchyard-target"] == "frontier-openai"
    assert raw.headers["x-switchyard-route-reason"] == "rule:tagged-frontier"


def test_long_prompt_rule_uses_the_token_estimate(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "x = 1\n" * 2000}]
    )
    assert raw.headers["x-switchyard-target"] == "frontier-anthropic"


def test_metrics_count_requests_by_route_and_status(
    client: openai.OpenAI, gateway: GatewayThread
) -> None:
    client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "m"}])
    text = httpx.get(gateway.base_url + "/metrics").text
    labels = 'endpoint="chat.completions",status="200",target="local"'
    assert "switchyard_requests_total{" + labels + "}" in text
    assert "switchyard_request_latency_seconds_bucket" in text
    assert 'switchyard_breaker_state{target="local"} 0.0' in text
    assert 'switchyard_tokens_total{kind="completion",target="local"}' in text
