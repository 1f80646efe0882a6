"""``limits.request_timeout_s`` bounds the whole request, every try included: past it the client
gets a 504 at once and no further target is tried. A back-end's ``first_byte_timeout_s`` bounds a
stream's silences only; a non-streamed answer has its whole ``timeout_s``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.config import parse_config
from loadtests.frontier_sim import SimulatorConfig, run_in_thread
from tests.fixtures.gateway_fixture import GatewayThread


@pytest.fixture
def slow_gateway(frontier_sim: Any) -> Iterator[GatewayThread]:
    # "slow" in a model name makes the simulator wait slow_model_ttft_ms (2 s) before answering.
    config = parse_config(
        {
            "backends": {
                "slow-a": {"kind": "vllm", "model": "slow-a", "replicas": [frontier_sim.base_url]},
                "slow-b": {"kind": "vllm", "model": "slow-b", "replicas": [frontier_sim.base_url]},
            },
            "routing": {"default": "slow-a", "fallbacks": {"slow-a": ["slow-b"]}},
            "gateway": {"limits": {"request_timeout_s": 0.3}},
            "store": {"enabled": False},
            "auth": {"required": False},
        }
    )
    gw = GatewayThread(config).start()
    yield gw
    gw.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_past_the_request_deadline_the_client_gets_504_and_no_other_target_is_tried(
    slow_gateway: GatewayThread, stream: bool
) -> None:
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    resp = httpx.post(slow_gateway.base_url + "/v1/chat/completions", json=body, timeout=30)
    assert resp.status_code == 504
    error = resp.json()["error"]
    assert error["code"] == "upstream_timeout"
    assert "request_timeout_s" in error["message"]
    record = slow_gateway.sink.wait_for(resp.headers["x-request-id"])
    assert record.status == 504
    assert [a["target"] for a in record.attempts] == ["slow-a"]  # slow-b was never tried
    assert slow_gateway.state.breakers["slow-a"].allow()  # the deadline is no verdict on it


@pytest.fixture(scope="module")
def writing_gateway() -> Iterator[GatewayThread]:
    """Targets on a simulator that writes 20 tokens a second, with a short silence limit."""
    sim = run_in_thread(SimulatorConfig(tokens_per_s=20))
    limits = {"first_byte_timeout_s": 0.3, "timeout_s": 10}
    config = parse_config(
        {
            "backends": {
                # Direct routes (pass-through) and a local target: the two HTTP clients.
                "writer": {
                    "kind": "litellm",
                    "model": "openai/gpt-4o-mini",
                    "api_base": sim.base_url + "/v1",
                    **limits,
                },
                # "slow" in a model name: 2 s before the first byte.
                "thinker": {
                    "kind": "litellm",
                    "model": "openai/sim-slow",
                    "api_base": sim.base_url + "/v1",
                    **limits,
                },
                "local-writer": {
                    "kind": "vllm",
                    "model": "m",
                    "replicas": [sim.base_url],
                    **limits,
                },
            },
            "routing": {
                "default": "writer",
                "aliases": {"writer": "writer", "thinker": "thinker", "local": "local-writer"},
            },
            "store": {"enabled": False},
            "auth": {"required": False},
        }
    )
    with GatewayThread(config) as gw:
        yield gw
    sim.stop()


@pytest.mark.parametrize("model", ["writer", "thinker", "local"])
def test_a_long_non_streamed_answer_is_bounded_by_timeout_s_not_by_the_silence_limit(
    writing_gateway: GatewayThread, model: str
) -> None:
    """A provider sends a non-streamed answer's first byte when it has written all of it (16
    tokens at 20 a second here: 0.8 s, past first_byte_timeout_s)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(writing_gateway.base_url + "/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 16


def test_a_stream_silent_past_the_limit_times_out_and_one_that_writes_does_not(
    writing_gateway: GatewayThread,
) -> None:
    url = writing_gateway.base_url + "/v1/chat/completions"
    for model, status in (("writer", 200), ("local", 200), ("thinker", 504)):
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}
        answer = httpx.post(url, json=body, timeout=30)
        assert answer.status_code == status, (model, answer.text)
        if status == 200:
            assert answer.text.rstrip().endswith("data: [DONE]")
