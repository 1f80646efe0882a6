"""A vLLM replica gets its requests back: the replica's count of requests in flight (what cache-
and load-aware choice reads, and what a drain waits for) returns to zero whichever way a
stream's opening failed, and a request whose client left is dropped upstream too."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from gateway.client_watch import WATCH_AFTER_S
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.fixtures.loopback_server import LoopbackServer

FIRST_BYTE_TIMEOUT_S = 0.5
SLOW_S = 20.0
CHUNK = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
    b"data: [DONE]\n\n"
)
FIRST_CHUNK = (
    b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
)


class Replica:
    """A replica on loopback that opens each stream as ``mode`` says: "ok", "empty" (a 200 and
    no body), "refuse" (an error event first, as vLLM refuses a streamed request), "silent"
    (a 200 and no byte until its caller leaves), "trickle" (one chunk, then nothing until its
    caller leaves). A non-streamed request is answered only once its caller leaves, or after
    ``SLOW_S``; ``abandoned`` is set when a caller left."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.abandoned = threading.Event()
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/chat/completions", self._chat)
        self.server = LoopbackServer(app, "replica")

    async def _until_abandoned(self, request: web.Request) -> None:
        deadline = time.monotonic() + SLOW_S
        while time.monotonic() < deadline:
            if request.transport is None or request.transport.is_closing():
                self.abandoned.set()
                return
            await asyncio.sleep(0.02)

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            await self._until_abandoned(request)
            return web.json_response({"choices": []})
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        if self.mode == "ok":
            await resp.write(CHUNK)
        elif self.mode == "refuse":
            await resp.write(b'data: {"error":{"message":"bad prompt","code":400}}\n\n')
        elif self.mode == "silent":
            await self._until_abandoned(request)
        elif self.mode == "trickle":
            await resp.write(FIRST_CHUNK)
            await self._until_abandoned(request)
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
                "timeout_s": SLOW_S * 2,
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
    (state,) = gw.state.targets.pools()["local"].replicas.values()
    assert state.in_flight == 0


@pytest.mark.parametrize("stream", [False, True])
# After the gateway started watching its client, and before (the watch finds it gone).
@pytest.mark.parametrize("leaves_after_s", [FIRST_BYTE_TIMEOUT_S / 3, WATCH_AFTER_S / 2])
def test_a_client_that_leaves_before_its_answer_has_the_upstream_call_dropped(
    replica_gateway: tuple[GatewayThread, Replica], stream: bool, leaves_after_s: float
) -> None:
    gw, replica = replica_gateway
    replica.mode, before = "silent", len(gw.sink.records)
    replica.abandoned.clear()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    # The client gives up (and closes its socket) before the replica's first-byte timeout.
    client = httpx.Client(base_url=gw.base_url, timeout=leaves_after_s)
    with client, pytest.raises(httpx.ReadTimeout):
        client.post("/v1/chat/completions", json=body)
    assert replica.abandoned.wait(SLOW_S / 2)  # the gateway closed its call to the replica
    deadline = time.monotonic() + 10
    while len(gw.sink.records) == before:
        assert time.monotonic() < deadline, "the exchange was not recorded"
        time.sleep(0.02)
    (gone,) = gw.sink.records[before:]
    assert (gone.status, gone.error) == (499, "cancelled")  # not the first-byte timeout's 504
    (state,) = gw.state.targets.pools()["local"].replicas.values()
    assert state.in_flight == 0


def test_a_client_that_leaves_mid_stream_has_the_upstream_stream_dropped(
    replica_gateway: tuple[GatewayThread, Replica],
) -> None:
    gw, replica = replica_gateway
    replica.mode, before = "trickle", len(gw.sink.records)
    replica.abandoned.clear()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with (
        httpx.Client(base_url=gw.base_url, timeout=10) as client,
        client.stream("POST", "/v1/chat/completions", json=body) as got,
    ):
        assert got.status_code == 200
        assert b"hi" in next(got.iter_raw())
    # The client closed its connection with the stream unread: the gateway notices and closes
    # its own call, before the replica's silence (FIRST_BYTE_TIMEOUT_S) could end it as a 502.
    assert replica.abandoned.wait(FIRST_BYTE_TIMEOUT_S)
    deadline = time.monotonic() + 10
    while len(gw.sink.records) == before:
        assert time.monotonic() < deadline, "the exchange was not recorded"
        time.sleep(0.02)
    (gone,) = gw.sink.records[before:]
    assert (gone.status, gone.error) == (499, "client disconnected")
    (state,) = gw.state.targets.pools()["local"].replicas.values()
    assert state.in_flight == 0
