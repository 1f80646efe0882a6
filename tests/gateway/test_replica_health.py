"""A replica is taken out of rotation when it is down, not when it is busy: a health probe that
times out counts against it only a few times in a row (a replica loading new weights, or on cores
saturated by prefill, answers `/health` late and still serves); a refused connection or an error
status takes it out at once; a connection closed under a request once (a kept-alive connection
the replica had just timed out) is tried again, a second cut takes the replica out."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from gateway.config import ConfigFileError, parse_config
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.fixtures.loopback_provider import loopback_gateway
from tests.fixtures.loopback_server import LoopbackServer

PROBE_TIMEOUT_S = 0.2
SLOW_PROBES_DOWN = 3
ANSWER = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


class Replica:
    """A replica on loopback: `/health` answers after `health_delay_s` with `health_status`;
    the next `cuts` chat requests have their connection closed before any answer."""

    def __init__(self) -> None:
        self.health_delay_s = 0.0
        self.health_status = 200
        self.cuts = 0
        self.chats = 0
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/chat/completions", self._chat)
        self.server = LoopbackServer(app, "replica")

    async def _health(self, request: web.Request) -> web.Response:
        await asyncio.sleep(self.health_delay_s)
        return web.Response(status=self.health_status, text="")

    async def _chat(self, request: web.Request) -> web.Response:
        await request.read()
        self.chats += 1
        if self.cuts > 0:
            self.cuts -= 1
            assert request.transport is not None
            request.transport.close()
        return web.json_response(ANSWER)


@pytest.fixture
def replica_gateway() -> Iterator[tuple[GatewayThread, Replica]]:
    replica = Replica()
    replica.server.start()
    health = {
        "interval_s": 0.05,
        "timeout_s": PROBE_TIMEOUT_S,
        "slow_probes_down": SLOW_PROBES_DOWN,
    }
    local = {"kind": "vllm", "model": "m", "replicas": [replica.server.url], "health": health}
    try:
        with loopback_gateway(
            {"local": local}, {"default": "local", "aliases": {"m": "local"}}
        ) as gw:
            yield gw, replica
    finally:
        replica.server.stop()


def healthy(gw: GatewayThread) -> bool:
    (state,) = gw.state.targets.pools()["local"].replicas.values()
    return state.healthy


def wait_for(condition: Callable[[], bool], within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.01)


def ask(gw: GatewayThread) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=gw.base_url, timeout=30) as client:
        return client.post("/v1/chat/completions", json=body)


def test_a_replica_answering_health_late_stays_in_rotation_until_too_many_probes_time_out(
    replica_gateway: tuple[GatewayThread, Replica],
) -> None:
    gw, replica = replica_gateway
    pool = gw.state.targets.pools()["local"]
    (state,) = pool.replicas.values()
    replica.health_delay_s = PROBE_TIMEOUT_S * 2
    wait_for(lambda: state.slow_probes >= 1)
    assert state.healthy and ask(gw).status_code == 200  # slow, not down: it still serves
    wait_for(lambda: not state.healthy)
    assert state.slow_probes >= SLOW_PROBES_DOWN
    refused = ask(gw)
    assert refused.status_code == 503 and "no healthy replica" in refused.text
    replica.health_delay_s = 0.0
    wait_for(lambda: state.healthy)  # one good probe brings it back
    assert state.slow_probes == 0 and ask(gw).status_code == 200


def test_an_error_status_on_health_takes_a_replica_out_at_once(
    replica_gateway: tuple[GatewayThread, Replica],
) -> None:
    gw, replica = replica_gateway
    (state,) = gw.state.targets.pools()["local"].replicas.values()
    replica.health_status = 503
    wait_for(lambda: not healthy(gw))
    assert state.slow_probes == 0
    replica.health_status = 200
    wait_for(lambda: healthy(gw))


def test_a_connection_closed_under_a_request_once_is_tried_again(
    replica_gateway: tuple[GatewayThread, Replica],
) -> None:
    gw, replica = replica_gateway
    replica.cuts = 1
    got = ask(gw)
    assert got.status_code == 200, got.text
    assert replica.chats == 2 and healthy(gw)


def test_a_second_cut_takes_the_replica_out_of_rotation(
    replica_gateway: tuple[GatewayThread, Replica],
) -> None:
    gw, replica = replica_gateway
    replica.cuts = 2
    got = ask(gw)
    assert got.status_code == 503 and "no healthy replica" in got.text
    assert replica.chats == 2


def test_health_is_a_vllm_setting_and_a_dumped_config_validates_again(frontier_sim: Any) -> None:
    config = gateway_config(frontier_sim.base_url)
    assert parse_config(config.model_dump(mode="json")) == config  # a fleet publishes dumps
    frontier = {"kind": "litellm", "model": "openai/gpt-4o-mini", "health": {"timeout_s": 5}}
    with pytest.raises(ConfigFileError, match="`health` applies to `vllm` backends only"):
        parse_config({"backends": {"f": frontier}, "routing": {"default": "f"}})
