"""Traces across hops, end to end: one request's trace, as a real OTLP/HTTP receiver on loopback
gets it, holds the client's parent, the gateway's spans and a real vLLM replica's span, with
matching ids and GenAI attributes.

The replica is its own (not the session's ``vllm_replica``): it must start with its OTLP
exporter pointed at this module's receiver (``VllmLaunchConfig.traces``), and with spans batched
every 200 ms instead of vLLM's 5 s. Slow: a vLLM CPU boot, about a minute.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from serving.build import ensure_demo_model
from serving.replica import VllmReplica, find_free_port
from serving.vllm_config import OtlpTraces, VllmLaunchConfig
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.fixtures.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.fixtures.vllm_fixture import READY_TIMEOUT_S, cache_dir

pytestmark = pytest.mark.slow

SERVER, CLIENT = 2, 3  # the OTLP proto's span kinds


@pytest.fixture(scope="module")
def traced_vllm() -> Iterator[tuple[OtlpReceiver, VllmReplica]]:
    cache = cache_dir()
    with OtlpReceiver() as receiver:
        config = VllmLaunchConfig(
            model_dir=ensure_demo_model(cache),
            cache_dir=cache,
            port=find_free_port(),
            device="cpu",
            enforce_eager=True,
            max_num_seqs=4,
            traces=OtlpTraces(endpoint=receiver.base_url),
        )
        env = {**os.environ, "OTEL_BSP_SCHEDULE_DELAY": "200"}
        replica = VllmReplica(config, log_path=cache / "logs" / "vllm-traces.log", base_env=env)
        replica.start()
        try:
            asyncio.run(replica.wait_ready(READY_TIMEOUT_S))
            yield receiver, replica
        finally:
            replica.stop()


def _complete(spans: list[ReceivedSpan]) -> bool:
    names = {s.name for s in spans}
    return "llm_request" in names and "switchyard chat.completions" in names


def test_one_requests_trace_holds_the_client_the_gateway_and_vllm(
    traced_vllm: tuple[OtlpReceiver, VllmReplica],
) -> None:
    receiver, replica = traced_vllm
    trace_id, client_span = secrets.token_hex(16), secrets.token_hex(8)
    backends = {
        "local": {
            "kind": "vllm",
            "model": replica.config.served_model_name,
            "replicas": [replica.base_url],
        }
    }
    config = gateway_config(
        replica.base_url,
        backends=backends,
        routing={"default": "local", "aliases": {"auto": "local"}},
        telemetry={"traces": "otlp", "otlp_endpoint": receiver.base_url},
    )
    body: dict[str, Any] = {
        "model": "auto",
        "messages": [{"role": "user", "content": "def fib(n):"}],
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"traceparent": f"00-{trace_id}-{client_span}-01"}
    with (
        GatewayThread(config) as gw,
        httpx.stream(
            "POST", gw.base_url + "/v1/chat/completions", json=body, headers=headers, timeout=120
        ) as resp,
    ):
        assert resp.status_code == 200
        text = resp.read().decode()
    assert "[DONE]" in text  # the gateway stopped: its spans were sent at shutdown
    spans = receiver.wait_for(_complete, trace_id, timeout_s=30)
    by_name = {s.name: s for s in spans}
    root = by_name["switchyard chat.completions"]
    attempt = by_name[f"chat {replica.config.served_model_name}"]
    vllm = by_name["llm_request"]
    assert {s.trace_id for s in spans} == {trace_id}
    # client -> gateway -> its attempt -> vLLM
    assert root.parent_span_id == client_span and root.kind == SERVER
    assert attempt.parent_span_id == root.span_id and attempt.kind == CLIENT
    assert vllm.parent_span_id == attempt.span_id and vllm.kind == SERVER
    assert by_name["switchyard.route"].parent_span_id == root.span_id
    assert by_name["switchyard.record"].parent_span_id == root.span_id
    assert (root.service, vllm.service) == ("switchyard-gateway", "switchyard-vllm")
    assert "first_token" in attempt.events
    # GenAI attributes on each side, and the two sides agree
    assert attempt.attributes["gen_ai.operation.name"] == "chat"
    assert attempt.attributes["gen_ai.provider.name"] == "vllm"
    assert attempt.attributes["gen_ai.request.max_tokens"] == 8
    assert root.attributes["gen_ai.request.model"] == "auto"
    assert root.attributes["gen_ai.response.model"] == replica.config.served_model_name
    output_tokens = attempt.attributes["gen_ai.usage.output_tokens"]
    assert output_tokens == root.attributes["gen_ai.usage.output_tokens"] > 0
    assert vllm.attributes["gen_ai.request.max_tokens"] == 8
    assert vllm.attributes["gen_ai.usage.completion_tokens"] == output_tokens
    assert (
        vllm.attributes["gen_ai.usage.prompt_tokens"]
        == root.attributes["gen_ai.usage.input_tokens"]
    )
    assert attempt.start_ns <= vllm.start_ns <= attempt.end_ns
