"""Server-sent events as the format allows them, not only as OpenAI and Anthropic write them:
CRLF or lone CR line ends, ``data:`` without its space, comment lines, JSON with spaces (Python's
``json.dumps``). Through every door, from an OpenAI-format and an Anthropic upstream: the
answer arrives whole, the usage is recorded, and the usage-only chunk the client did not ask
for is not sent to it.

The upstream is a real HTTP server on loopback that spells its stream as the request's last
message names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from tests.fixtures.gateway_fixture import GatewayThread
from tests.fixtures.loopback_provider import ask_door, provider_gateway

STYLES = ("crlf", "cr", "unspaced", "comments")
_LINE_END = {"crlf": b"\r\n", "cr": b"\r"}


def _event(style: str, data: dict[str, Any] | str, name: str | None = None) -> bytes:
    nl = _LINE_END.get(style, b"\n")
    sep = b"" if style == "unspaced" else b" "
    payload = data.encode() if isinstance(data, str) else json.dumps(data).encode()
    out = b": keep-alive" + nl + nl if style == "comments" else b""
    if name is not None:
        out += b"event:" + sep + name.encode() + nl
    return out + b"data:" + sep + payload + nl + nl


def _chat_events(style: str, model: str) -> list[bytes]:
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": model}
    chunks: list[dict[str, Any]] = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
        {**head, "choices": [{"index": 0, "delta": {"content": " there"}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}},
    ]
    return [*(_event(style, c) for c in chunks), _event(style, "[DONE]")]


def _message_events(style: str, model: str) -> list[bytes]:
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": message}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "hi there"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 2},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return [_event(style, data, name) for name, data in events]


async def _stream(request: web.Request, events: list[bytes]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for event in events:
        # Written in two pieces: a CRLF may be cut between blocks.
        await response.write(event[: len(event) // 2 + 1])
        await response.write(event[len(event) // 2 + 1 :])
    await response.write_eof()
    return response


def _style(body: dict[str, Any]) -> str:
    content = body["messages"][-1]["content"]
    return content if isinstance(content, str) else str(content[0]["text"])


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    return await _stream(request, _chat_events(_style(body), body["model"]))


async def _messages(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    return await _stream(request, _message_events(_style(body), body["model"]))


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewayThread]:
    with provider_gateway(_chat, _messages, "sse-spellings") as gateway:
        yield gateway


@pytest.mark.parametrize("door", ["chat", "messages", "responses"])
@pytest.mark.parametrize("model", ["gpt-4o-mini", "claude-sonnet-4-5"])
@pytest.mark.parametrize("style", STYLES)
def test_a_stream_spelled_as_sse_allows_is_relayed_whole_and_recorded(
    gw: GatewayThread, door: str, model: str, style: str
) -> None:
    response = ask_door(gw, door, style, stream=True, model=model)
    assert response.status_code == 200
    text = response.text
    assert "there" in text and "upstream_error" not in text
    assert '"choices":[]' not in text.replace(" ", "")  # usage was not asked for
    record = gw.sink.wait_for(response.headers["x-request-id"])
    assert record.status == 200 and record.error is None
    assert (record.prompt_tokens, record.completion_tokens) == (5, 2)
