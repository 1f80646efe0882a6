"""The three doors against the real local back-end: vLLM on the CPU behind the gateway, with the
official SDKs, streamed and not (the tiny model's text is noise; the wire formats are the test)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.fixtures.gateway_fixture import GatewayThread, gateway_config

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vllm_gateway(vllm_replica: Any, frontier_sim: Any) -> Iterator[GatewayThread]:
    cfg = gateway_config(
        frontier_sim.base_url,
        backends={
            "local": {
                "kind": "vllm",
                "model": vllm_replica.served_model_name,
                "replicas": [vllm_replica.base_url],
            },
        },
        routing={"default": "local", "aliases": {"auto": None}},
    )
    gw = GatewayThread(cfg).start()
    yield gw
    gw.stop()


def test_chat_completions_on_vllm_stream_and_not(vllm_gateway: GatewayThread) -> None:
    client = openai.OpenAI(base_url=vllm_gateway.base_url + "/v1", api_key="k", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "def add(a, b):"}], max_tokens=8
    )
    assert raw.headers["x-switchyard-target"] == "local"
    assert raw.parse().usage is not None
    chunks = list(
        client.chat.completions.create(
            model="auto",
            messages=[{"role": "user", "content": "x ="}],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_responses_door_on_vllm_stream_and_not(vllm_gateway: GatewayThread) -> None:
    client = openai.OpenAI(base_url=vllm_gateway.base_url + "/v1", api_key="k", max_retries=0)
    resp = client.responses.create(model="auto", input="def add(a, b):", max_output_tokens=16)
    assert resp.status in ("completed", "incomplete") and resp.usage is not None
    events = [
        e.type
        for e in client.responses.create(
            model="auto", input="x =", max_output_tokens=16, stream=True
        )
    ]
    assert events[0] == "response.created"
    assert events[-1] in ("response.completed", "response.incomplete")


def test_messages_door_on_vllm_stream_and_not(vllm_gateway: GatewayThread) -> None:
    client = anthropic.Anthropic(base_url=vllm_gateway.base_url, api_key="k", max_retries=0)
    msg = client.messages.create(
        model="auto", max_tokens=16, messages=[{"role": "user", "content": "def add(a, b):"}]
    )
    assert msg.type == "message" and msg.usage.output_tokens > 0
    with client.messages.stream(
        model="auto", max_tokens=16, messages=[{"role": "user", "content": "x ="}]
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason in ("end_turn", "max_tokens", "stop_sequence")


def test_a_stream_vllm_refuses_is_a_400_not_an_error_inside_a_200(
    vllm_gateway: GatewayThread,
) -> None:
    """vLLM checks a streamed request after its 200 and sends the refusal as the first event;
    the client gets it as the 400 it is (the SDK raises), before any byte of a stream."""
    client = openai.OpenAI(base_url=vllm_gateway.base_url + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="auto", prompt=[""], max_tokens=8, stream=True)
    assert "prompt cannot be empty" in str(refused.value)
    record = vllm_gateway.sink.wait_for(refused.value.response.headers["x-request-id"])
    assert record.status == 400 and record.route_target == "local"
