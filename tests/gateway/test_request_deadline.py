"""``limits.request_timeout_s`` bounds the whole request, every try included: past it the client
gets a 504 at once and no further target is tried."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.config import parse_config
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
