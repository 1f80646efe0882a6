"""The Responses door (``POST /v1/responses``) with the official openai SDK, on loopback.

Both back-end kinds answer: ``switchyard-local`` is a vLLM target pointed at the frontier
simulator (OpenAI chat, as vLLM speaks it), ``gpt-4o-mini`` and ``claude-haiku-4-5`` are litellm
targets (``openai/...``, ``anthropic/...``) pointed at the same simulator; ``gpt-4o-mini`` gets
the client's body on the simulator's Responses API (a pass-through), the others the translation.
"""

from __future__ import annotations

import json
from typing import Any, cast

import httpx
import openai
import pytest
from openai.types.responses import (
    EasyInputMessageParam,
    NamespaceToolParam,
    Response,
    ResponseInputItemParam,
)
from openai.types.responses.namespace_tool_param import ToolFunction

from loadtests.frontier_sim import SimulatorConfig, run_in_thread
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config

MODELS = ["switchyard-local", "gpt-4o-mini", "claude-haiku-4-5"]
READ_FILE: Any = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file of the repository",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
    "strict": False,
}


@pytest.fixture
def client(gateway: GatewayThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url + "/v1", api_key="sk-test", max_retries=0)


def _events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event line, data) of every SSE event in a Responses stream body."""
    out = []
    for raw in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in raw.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


@pytest.mark.parametrize("model", MODELS)
def test_text_answer_is_a_response_object_recorded_in_wire_format(
    client: openai.OpenAI, gateway: GatewayThread, model: str
) -> None:
    raw = client.responses.with_raw_response.create(
        model=model, input="Explain this function", instructions="Be brief.", store=False
    )
    response = raw.parse()
    assert response.status == "completed"
    assert response.output_text.startswith("Simulated answer")
    assert response.output[0].type == "message"
    assert response.usage is not None and response.usage.output_tokens == 16
    request_id = raw.headers["x-request-id"]
    if model != "gpt-4o-mini":  # translated: the door names the response after the record
        assert response.id == "resp_" + request_id.replace("-", "")
    else:  # OpenAI's Responses API, passed through: the answer and its id are the provider's
        assert raw.headers["x-switchyard-target"] == "frontier-openai"
        assert response.id.startswith("resp_") and request_id.replace("-", "") not in response.id
    record = gateway.sink.wait_for(request_id)
    assert (record.endpoint, record.wire_format, record.status) == (
        "responses",
        "openai.responses",
        200,
    )
    assert record.request["input"] == "Explain this function"  # the client's own body
    assert record.response is not None and record.response["id"] == response.id
    assert record.response["output"][0]["content"][0]["text"] == response.output_text
    assert record.completion_tokens == 16


def test_input_items_with_every_role_and_tolerated_fields(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="switchyard-local",
        input=[
            {"role": "developer", "content": "You write Python."},
            {"type": "message", "role": "system", "content": "Answer briefly."},
            {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            # An assistant turn in the short form (no id, no status) the SDK's types lack.
            cast(
                ResponseInputItemParam,
                {"role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]},
            ),
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"role": "user", "content": "Refactor this loop"},
        ],
        store=False,
        include=["reasoning.encrypted_content"],
        reasoning={"effort": "low", "summary": "auto"},
        prompt_cache_key="session-42",
        max_output_tokens=5,
        temperature=0.2,
        metadata={"team": "ide"},
        extra_body={"an_unknown_field": {"nested": True}, "service_tier": "auto"},
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.max_output_tokens == 5
    assert response.metadata == {"team": "ide"}


@pytest.mark.parametrize("model", MODELS)
def test_stream_sends_openai_event_sequence(gateway: GatewayThread, model: str) -> None:
    body = {"model": model, "input": "Write a docstring", "stream": True}
    with httpx.stream("POST", gateway.base_url + "/v1/responses", json=body) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = _events(resp.read().decode())
    kinds = [data["type"] for _, data in events]
    assert all(name == data["type"] for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    deltas = kinds.count("response.output_text.delta")
    assert deltas == 16
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * deltas,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    text = "".join(d["delta"] for _, d in events if d["type"] == "response.output_text.delta")
    final = events[-1][1]["response"]
    assert final["output"][0]["content"][0]["text"] == text
    assert final["usage"]["output_tokens"] == 16
    record = gateway.sink.wait_for(resp.headers["x-request-id"])
    assert record.stream and record.response == final


@pytest.mark.parametrize("model", MODELS)
def test_sdk_stream_helper_assembles_the_final_response(client: openai.OpenAI, model: str) -> None:
    with client.responses.stream(model=model, input="Explain the cache") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.output_text == "".join(deltas)
    assert final.output_text.startswith("Simulated answer")


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("stream", [False, True])
def test_tool_call_round_trip(client: openai.OpenAI, model: str, stream: bool) -> None:
    question: EasyInputMessageParam = {"role": "user", "content": "Call the tool to read setup.py"}
    first: Response
    if stream:
        with client.responses.stream(model=model, input=[question], tools=[READ_FILE]) as s:
            arg_deltas = [e.delta for e in s if e.type == "response.function_call_arguments.delta"]
            first = s.get_final_response()
        assert "".join(arg_deltas) == first.output[0].arguments  # type: ignore[union-attr]
    else:
        first = client.responses.create(
            model=model, input=[question], tools=[READ_FILE], tool_choice="auto"
        )
    call = first.output[0]
    assert call.type == "function_call"
    assert call.name == "read_file" and json.loads(call.arguments) == {"path": "setup.py"}
    assert call.call_id
    second = client.responses.create(
        model=model,
        input=[
            question,
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": "print('hi')"},
        ],
        tools=[READ_FILE],
        stream=False,
    )
    assert second.status == "completed"
    assert "the tool returned print('hi')" in second.output_text


def test_unservable_tools_are_left_out_and_namespaced_tools_flattened(
    client: openai.OpenAI,
) -> None:
    """On a target served the translation (here the local one; OpenAI itself gets the body as
    sent, namespaces and all)."""
    namespace: NamespaceToolParam = {
        "type": "namespace",
        "name": "repo",
        "description": "Repository tools",
        "tools": [cast(ToolFunction, {k: v for k, v in READ_FILE.items() if k != "strict"})],
    }
    response = client.responses.create(
        model="switchyard-local",
        input="Use a tool to read main.py",
        tools=[
            {"type": "web_search"},
            namespace,
            {"type": "custom", "name": "apply_patch", "description": "Patch files"},
        ],
        parallel_tool_calls=False,
    )
    call = response.output[0]
    assert call.type == "function_call"
    assert (call.name, call.namespace) == ("read_file", "repo")
    assert response.tools[0].type == "web_search"  # echoed as sent, like OpenAI


def test_tool_choice_none_answers_with_text(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="switchyard-local",
        input="Call the tool to read setup.py",
        tools=[READ_FILE],
        tool_choice="none",
    )
    assert response.output[0].type == "message"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi"}, "model"),
        ({"model": "auto"}, "input"),
        ({"model": "auto", "input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "auto", "input": [{"type": "function_call_output"}]}, "input[0]"),
        ({"model": "auto", "input": "hi", "previous_response_id": "resp_1"}, None),
    ],
)
def test_bad_requests_are_400_in_openai_shape(
    gateway: GatewayThread, body: dict[str, Any], param: str | None
) -> None:
    resp = httpx.post(gateway.base_url + "/v1/responses", json=body)
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param
    record = gateway.sink.wait_for(resp.headers["x-request-id"])
    assert record.status == 400 and record.request == body


def test_malformed_json_and_unknown_model(client: openai.OpenAI, gateway: GatewayThread) -> None:
    resp = httpx.post(
        gateway.base_url + "/v1/responses",
        content=b'{"model": ',
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_json"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="hi")


def test_route_header_and_metrics_are_shared_with_the_chat_door(
    client: openai.OpenAI, gateway: GatewayThread
) -> None:
    raw = client.responses.with_raw_response.create(
        model="auto", input="hi", extra_headers={"x-switchyard-route": "frontier"}
    )
    assert raw.headers["x-switchyard-target"] == "frontier-openai"
    assert raw.headers["x-switchyard-route-reason"] == "rule:tagged-frontier"
    text = httpx.get(gateway.base_url + "/metrics").text
    assert (
        'switchyard_requests_total{endpoint="responses",status="200",target="frontier-openai"}'
        in text
    )


@pytest.fixture(scope="module")
def cut_gateway(frontier_sim: Any) -> Any:
    """A gateway whose only target's streams break after three events (no fallback)."""
    cut = run_in_thread(SimulatorConfig(cut_stream_after_chunks=3))
    cfg = gateway_config(
        frontier_sim.base_url,
        backends={"cut": {"kind": "vllm", "model": "sim-local", "replicas": [cut.base_url]}},
        routing={"default": "cut", "aliases": {"auto": None}},
    )
    gw = GatewayThread(cfg).start()
    yield gw
    gw.stop()
    cut.stop()


def test_stream_broken_mid_answer_ends_with_response_failed(cut_gateway: GatewayThread) -> None:
    body = {"model": "auto", "input": "Explain the cache", "stream": True}
    with httpx.stream("POST", cut_gateway.base_url + "/v1/responses", json=body) as resp:
        events = _events(resp.read().decode())
    kinds = [d["type"] for _, d in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-2:] == ["error", "response.failed"]
    failed = events[-1][1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    record = cut_gateway.sink.wait_for(resp.headers["x-request-id"])
    assert record.status == 502 and record.response == failed


def test_openai_reasoning_survives_the_round_trip_and_another_targets_is_left_out(
    client: openai.OpenAI, gateway: GatewayThread
) -> None:
    """The simulator seals reasoning and checks it comes back unchanged, as OpenAI does: the
    sealed item of turn 1 reaches it again in turn 2, and a reasoning item another target made
    (no encrypted_content, which OpenAI would refuse) is left out on the way."""
    asked: Any = {
        "model": "gpt-4o-mini",
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "store": False,
    }
    question: Any = {"role": "user", "content": "Explain the cache"}
    first = client.responses.create(**asked, input=[question])
    thought = first.output[0].model_dump(exclude_none=True)
    assert thought["type"] == "reasoning" and thought["encrypted_content"]
    local: Any = {
        "type": "reasoning",
        "id": "rs_local0",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "thought by the local model"}],
    }
    follow_up: Any = {"role": "user", "content": "And the eviction?"}
    raw = client.responses.with_raw_response.create(
        **asked, input=[question, local, thought, follow_up]
    )
    assert raw.parse().status == "completed"
    record = gateway.sink.wait_for(raw.headers["x-request-id"])
    assert "1 reasoning item" in record.tags["note.reasoning_items_dropped"]
