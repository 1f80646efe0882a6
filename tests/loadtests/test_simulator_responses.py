"""The frontier simulator's Responses endpoint, driven by the official openai SDK on loopback."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import EasyInputMessageParam, Response, ResponseStreamEvent
from pydantic import TypeAdapter

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
    "strict": True,
}


@pytest.fixture(scope="module")
def oai(frontier_sim: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{frontier_sim.base_url}/v1", api_key="sk-sim", max_retries=0)


def test_text_response_is_deterministic_and_counts_tokens(oai: openai.OpenAI) -> None:
    first = oai.responses.create(model="gpt-4o-mini", input="Explain the cache", instructions="Hi")
    again = oai.responses.create(model="gpt-4o-mini", input="Explain the cache", instructions="Hi")
    assert first.status == "completed" and first.id.startswith("resp_")
    assert first.output_text == again.output_text
    assert first.output_text.startswith("Simulated answer from gpt-4o-mini:")
    assert first.usage is not None and first.usage.output_tokens == 16
    assert first.instructions == "Hi"


def test_max_output_tokens_makes_an_incomplete_response(oai: openai.OpenAI) -> None:
    response = oai.responses.create(model="m", input="Explain", max_output_tokens=4)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert len(response.output_text.split()) == 4


def test_stream_events_are_valid_and_numbered(frontier_sim: Any) -> None:
    body = {"model": "m", "input": [{"role": "user", "content": "Explain"}], "stream": True}
    with httpx.stream("POST", frontier_sim.base_url + "/v1/responses", json=body) as resp:
        assert resp.status_code == 200
        raw = resp.read().decode()
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    events = []
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        event = adapter.validate_python(json.loads(lines["data"]))
        assert event.type == lines["event"]
        events.append(event)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_sdk_stream_helper_gets_the_same_text(oai: openai.OpenAI) -> None:
    plain = oai.responses.create(model="m", input="Write a test")
    with oai.responses.stream(model="m", input="Write a test") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == plain.output_text


@pytest.mark.parametrize("stream", [False, True])
def test_function_call_round_trip(oai: openai.OpenAI, stream: bool) -> None:
    question: EasyInputMessageParam = {"role": "user", "content": "Call the tool for Paris"}
    first: Response
    if stream:
        with oai.responses.stream(model="m", input=[question], tools=[WEATHER]) as s:
            args = "".join(e.delta for e in s if e.type == "response.function_call_arguments.delta")
            first = s.get_final_response()
        assert args == first.output[0].arguments  # type: ignore[union-attr]
    else:
        first = oai.responses.create(model="m", input=[question], tools=[WEATHER])
    call = first.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "sim-city", "days": 1}
    second = oai.responses.create(
        model="m",
        input=[
            question,
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
        ],
        tools=[WEATHER],
    )
    assert second.output_text.endswith("the tool returned sunny")


def test_tool_choice_forces_or_forbids_a_call(oai: openai.OpenAI) -> None:
    forced = oai.responses.create(
        model="m",
        input="Hello",
        tools=[{"type": "web_search"}, WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    assert forced.output[0].type == "function_call"
    none = oai.responses.create(
        model="m", input="Call the tool", tools=[WEATHER], tool_choice="none"
    )
    assert none.output[0].type == "message"


def test_errors_use_the_openai_shape(oai: openai.OpenAI, frontier_sim: Any) -> None:
    with pytest.raises(openai.InternalServerError):
        oai.responses.create(model="model-error", input="x")
    with pytest.raises(openai.RateLimitError):
        oai.responses.create(model="ratelimit", input="x")
    resp = httpx.post(frontier_sim.base_url + "/v1/responses", json={"input": "x"})
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "model"


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_comes_first_and_sealed_when_asked(oai: openai.OpenAI, stream: bool) -> None:
    asked: Any = {
        "model": "gpt-5-codex",
        "input": "Explain the cache",
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "store": False,
    }
    if stream:
        with oai.responses.stream(**asked) as events:
            response = events.get_final_response()
    else:
        response = oai.responses.create(**asked)
    thought, answer = response.output
    assert thought.type == "reasoning" and thought.summary and thought.encrypted_content
    assert answer.type == "message"
    plain = oai.responses.create(**{**asked, "include": []})
    assert plain.output[0].type == "reasoning" and plain.output[0].encrypted_content is None
    unasked = oai.responses.create(model="gpt-5-codex", input="Explain the cache")
    assert [item.type for item in unasked.output] == ["message"]


def test_reasoning_sent_back_must_be_as_the_provider_sealed_it(oai: openai.OpenAI) -> None:
    first = oai.responses.create(
        model="gpt-5-codex",
        input="Explain the cache",
        reasoning={"effort": "low"},
        include=["reasoning.encrypted_content"],
        store=False,
    )
    thought: Any = first.output[0].model_dump(exclude_none=True)
    turn: Any = {"role": "user", "content": "Explain the cache"}
    again: Any = {"role": "user", "content": "And now?"}
    second = oai.responses.create(model="gpt-5-codex", input=[turn, thought, again], store=False)
    assert second.status == "completed"
    tampered: Any = {**thought, "encrypted_content": thought["encrypted_content"][:-4] + "AAA="}
    unsealed: Any = {k: v for k, v in thought.items() if k != "encrypted_content"}
    for bad, says in ((tampered, "could not be verified"), (unsealed, "not found")):
        with pytest.raises(openai.BadRequestError, match=says):
            oai.responses.create(model="gpt-5-codex", input=[turn, bad, again], store=False)
