"""An upstream's odd answer, or a fault of the gateway's own while finishing an exchange, costs
the record a figure at most: the client still gets its answer (or, mid-stream, an error event in
its door's shape), and the exchange is recorded.

The upstream is a real HTTP server on loopback (:class:`LoopbackServer`) answering OpenAI's chat
format with the usage object named by the request's last message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web

from gateway.doors.anthropic.render import MessagesStreamEncoder
from tests.fixtures.gateway_fixture import GatewayThread
from tests.fixtures.loopback_provider import ask_door, provider_gateway
from tests.fixtures.loopback_server import answer
from traffic.store.records import InferenceRecord

# Usage objects no provider should send, and one that is fine.
USAGES: dict[str, Any] = {
    "strings": {"prompt_tokens": "12", "completion_tokens": "x", "total_tokens": "y"},
    "fractions": {"prompt_tokens": 12.5, "completion_tokens": -3},
    "shapes": {"prompt_tokens": [1], "completion_tokens": {}, "prompt_tokens_details": [1]},
    "bools": {"prompt_tokens": True, "completion_tokens": 2, "prompt_cache_hit_tokens": True},
    "not-an-object": "12 tokens",
    "fine": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14},
}


def _chat_answer(model: str, usage: Any) -> tuple[dict[str, Any], list[bytes]]:
    head = {"id": "chatcmpl-1", "created": 1, "model": model}
    whole = {
        **head,
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi there"},
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }
    chunk = {**head, "object": "chat.completion.chunk"}
    events = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
        {**chunk, "choices": [{"index": 0, "delta": {"content": " there"}}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**chunk, "choices": [], "usage": usage},
    ]
    return whole, [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    last = body["messages"][-1]["content"]
    if last == "choices of strings":  # no door can render that
        whole, _ = _chat_answer(body["model"], USAGES["fine"])
        return web.json_response({**whole, "choices": ["hi there"]})
    if last == "json to a stream":  # a provider that ignores `stream`
        whole, _ = _chat_answer(body["model"], USAGES["fine"])
        return web.json_response(whole)
    if last == "json error to a stream":  # a proxy's error, sent with 200
        error = {"message": "model overloaded", "type": "server_error", "code": 503}
        return web.json_response({"error": error})
    whole, events = _chat_answer(body["model"], USAGES[last if isinstance(last, str) else "fine"])
    return await answer(request, body, whole, events)


async def _messages(request: web.Request) -> web.StreamResponse:
    """An Anthropic message without its usage: litellm's reading of it fails."""
    body = await request.json()
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [{"type": "text", "text": "hi there"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
    }
    return web.json_response(message)


@pytest.fixture(scope="module")
def gw() -> Iterator[GatewayThread]:
    with provider_gateway(_chat, _messages, "odd-upstream") as gateway:
        yield gateway


def _record(gw: GatewayThread, response: httpx.Response) -> InferenceRecord:
    record: InferenceRecord = gw.sink.wait_for(response.headers["x-request-id"])
    return record


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("door", ["chat", "messages", "responses"])
@pytest.mark.parametrize("usage", [u for u in USAGES if u != "fine"])
def test_an_upstreams_odd_usage_costs_the_record_its_counts_never_the_answer(
    gw: GatewayThread, door: str, usage: str, stream: bool
) -> None:
    response = ask_door(gw, door, usage, stream=stream)
    assert response.status_code == 200, response.text
    text = response.text
    assert "hi" in text and " there" in text
    assert "error" not in text.replace('"error":null', "")
    record = _record(gw, response)
    assert record.status == 200 and record.error is None
    # What is not a count is not recorded as one.
    assert record.completion_tokens in (None, 0, 2)
    assert record.prompt_tokens in (None, 0)
    assert record.cached_tokens in (None, 0)


def test_a_fault_while_translating_a_stream_ends_it_with_an_error_event_and_is_recorded(
    gw: GatewayThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: MessagesStreamEncoder, chunk: dict[str, Any]) -> bytes:
        raise RuntimeError("a fault of the gateway's own")

    monkeypatch.setattr(MessagesStreamEncoder, "encode", broken)
    response = ask_door(gw, "messages", "fine", stream=True)
    assert response.status_code == 200  # the stream had begun
    assert "event: error" in response.text and "internal error" in response.text
    record = _record(gw, response)
    assert record.status == 500 and record.error == "internal error (RuntimeError)"


def test_a_fault_in_the_exchanges_figures_still_records_it_and_answers(
    gw: GatewayThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> float:
        raise ZeroDivisionError("a fault of the gateway's own")

    monkeypatch.setattr(type(gw.state.prices), "cost_usd", broken)
    for stream in (False, True):
        response = ask_door(gw, "chat", "fine", stream=stream)
        assert response.status_code == 200 and "hi" in response.text
        record = _record(gw, response)
        assert record.status == 200 and record.prompt_tokens == 12 and record.cost_usd is None


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_an_answer_no_door_can_render_is_a_502_recorded_not_a_500(
    gw: GatewayThread, door: str
) -> None:
    response = ask_door(gw, door, "choices of strings", stream=False)
    assert response.status_code == 502
    assert "its answer could not be rendered" in response.text
    record = _record(gw, response)
    assert record.status == 502 and record.route_target == "openai"


def test_an_answer_litellm_cannot_read_is_the_providers_fault_without_a_traceback(
    gw: GatewayThread,
) -> None:
    """Not a 400 (the client's request was fine, and a client does not retry a 400)."""
    body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(gw.base_url + "/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 502, response.text
    message = response.json()["error"]["message"]
    assert "the provider's answer could not be read" in message
    assert "Traceback" not in message
    assert _record(gw, response).status == 502


@pytest.mark.parametrize(
    ("content", "status", "says"),
    [
        ("json error to a stream", 503, "model overloaded"),
        ("json to a stream", 502, "answered JSON, not a stream"),
    ],
)
@pytest.mark.parametrize("door", ["chat", "messages"])
def test_a_json_answer_to_a_stream_request_is_an_http_error_saying_why(
    gw: GatewayThread, door: str, content: str, status: int, says: str
) -> None:
    """Nothing was streamed yet: the client gets an HTTP error in its door's shape (and another
    target could still have answered), not a 200 stream that ends in "ended before its last
    event"."""
    response = ask_door(gw, door, content, stream=True)
    assert response.status_code == status, response.text
    assert says in response.text
    assert _record(gw, response).status == status
