"""Providers compress their answers for a client that accepts it (OpenAI and Anthropic gzip
their JSON); the gateway's upstream calls accept gzip, so every path must read and relay the
plain answer: the pass-through (unary, streamed, an error body) and the translating doors.

The upstream is a real HTTP server on loopback that gzips whatever it answers when the request
accepts gzip, with the fixed answers of :mod:`tests.fixtures.loopback_provider`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web

from tests.fixtures.gateway_fixture import GatewayThread
from tests.fixtures.loopback_provider import (
    CHAT_ANSWER,
    MESSAGE,
    anthropic_stream,
    chat_stream,
    provider_gateway,
)

REFUSAL = {"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}


async def _compressed(
    request: web.Request, whole: dict[str, Any], events: list[bytes]
) -> web.StreamResponse:
    body = await request.json()
    assert "gzip" in request.headers.get("Accept-Encoding", "")  # what makes providers compress
    if body.get("max_tokens") == 999_999:
        refused = web.json_response(REFUSAL, status=400)
        refused.enable_compression(web.ContentCoding.gzip)
        return refused
    if not body.get("stream"):
        response = web.json_response(whole)
        response.enable_compression(web.ContentCoding.gzip)
        return response
    stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    stream.enable_compression(web.ContentCoding.gzip)
    await stream.prepare(request)
    for event in events:
        await stream.write(event)
    await stream.write_eof()
    return stream


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _compressed(request, CHAT_ANSWER, chat_stream())


async def _messages(request: web.Request) -> web.StreamResponse:
    return await _compressed(request, MESSAGE, anthropic_stream())


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewayThread]:
    with provider_gateway(_chat, _messages, "gzip-upstream") as gateway:
        yield gateway


def _post(gw: GatewayThread, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(gw.base_url + path, json=body, timeout=30)


HELLO = [{"role": "user", "content": "hello"}]


def test_a_gzipped_openai_answer_is_relayed_plain_and_recorded(gw: GatewayThread) -> None:
    unary = _post(gw, "/v1/chat/completions", {"model": "gpt-4o-mini", "messages": HELLO})
    assert unary.status_code == 200, unary.text
    assert "content-encoding" not in unary.headers
    assert orjson.loads(unary.content) == CHAT_ANSWER  # the provider's answer, byte for byte
    record = gw.sink.wait_for(unary.headers["x-request-id"])
    assert (record.prompt_tokens, record.cached_tokens) == (2000, 1024)

    body = {"model": "gpt-4o-mini", "messages": HELLO, "stream": True}
    streamed = _post(gw, "/v1/chat/completions", body)
    assert streamed.status_code == 200
    assert '"content":"o"' in streamed.text.replace(" ", "") and "data: [DONE]" in streamed.text
    assert gw.sink.wait_for(streamed.headers["x-request-id"]).status == 200


def test_a_gzipped_anthropic_answer_is_relayed_plain_to_both_doors(gw: GatewayThread) -> None:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": HELLO}
    unary = _post(gw, "/v1/messages", body)
    assert unary.status_code == 200, unary.text
    assert orjson.loads(unary.content)["content"] == MESSAGE["content"]
    streamed = _post(gw, "/v1/messages", {**body, "stream": True})
    assert streamed.status_code == 200
    assert "event: message_stop" in streamed.text
    assert 'read it."}' in streamed.text  # the provider's own text delta
    record = gw.sink.wait_for(streamed.headers["x-request-id"])
    assert record.status == 200 and record.cached_tokens == 4096
    # The chat door to Anthropic (litellm's translation, its own HTTP client).
    chat = _post(gw, "/v1/chat/completions", {"model": "claude-sonnet-4-5", "messages": HELLO})
    assert chat.status_code == 200, chat.text
    assert chat.json()["choices"][0]["message"]["content"] == "I will read it."


@pytest.mark.parametrize(
    ("path", "model"),
    [("/v1/chat/completions", "gpt-4o-mini"), ("/v1/messages", "claude-sonnet-4-5")],
)
def test_a_gzipped_refusal_reaches_the_client_readable(
    gw: GatewayThread, path: str, model: str
) -> None:
    refused = _post(gw, path, {"model": model, "max_tokens": 999_999, "messages": HELLO})
    assert refused.status_code == 400
    assert "max_tokens is too large" in refused.text
