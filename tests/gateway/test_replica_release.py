"""A vLLM replica whose stream fails before its first event gets its request back: the replica's
count of requests in flight (what cache- and load-aware choice reads, and what a drain waits
for) returns to zero whichever way the stream's opening failed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.fixtures.loopback_server import LoopbackServer

FIRST_BYTE_TIMEOUT_S = 0.5
CHUNK = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


class Replica:
    """A replica on loopback that opens each stream as ``mode`` says: "ok", "empty" (a 200 and
    no body), "refuse" (an error event first, as vLLM refuses a streamed request), "silent"
    (a 200 and no byte past the first-byte timeout)."""

    def __init__(self) -> None:
        self.mode = "ok"
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/chat/completions", self._chat)
        self.server = LoopbackServer(app, "replica")

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        if self.mode == "ok":
            await resp.write(CHUNK)
        elif self.mode == "refuse":
            await resp.write(b'data: {"error":{"message":"bad prompt","code":400}}\n\n')
        elif self.mode == "silent":
            await asyncio.sleep(FIRST_BYTE_TIMEOUT_S * 4)
        await resp.write_eof()
        return resp


@pytest.fixture(scope="module")
def replica_gateway(frontier_sim: Any) -> Iterator[tuple[GatewayThread, Replica]]:
    replica = Replica()
    replica.server.start()
    config = gateway_config(
        frontier_sim.base_url,
        backends={
            "local": {
                "kind": "vllm",
                "model": "m",
                "replicas": [replica.server.url],
                "first_byte_timeout_s": FIRST_BYTE_TIMEOUT_S,
            }
        },
        routing={"default": "local", "aliases": {"m": "local"}},
    )
    try:
        with GatewayThread(config) as gw:
            yield gw, replica
    finally:
        replica.server.stop()


@pytest.mark.parametrize(
    ("mode", "status"), [("ok", 200), ("empty", 502), ("refuse", 400), ("silent", 504)]
)
def test_a_stream_that_fails_at_its_opening_gives_the_replica_its_request_back(
    replica_gateway: tuple[GatewayThread, Replica], mode: str, status: int
) -> None:
    gw, replica = replica_gateway
    replica.mode = mode
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.Client(base_url=gw.base_url, timeout=30) as client:
        for _ in range(3):
            got = client.post("/v1/chat/completions", json=body)
            assert got.status_code == status, got.text
    (state,) = gw.state.pools()["local"].replicas.values()
    assert state.in_flight == 0
