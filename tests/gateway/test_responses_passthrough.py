"""The Responses door to OpenAI passes the client's body through and relays OpenAI's answer as it
came: reasoning items with their ``encrypted_content`` (what Codex CLI sends back each turn, so
the model keeps its reasoning), item ids and fields the gateway does not know survive both ways;
the record keeps the answer and its chat-completion twin, usage and cached tokens included.

The upstream is :class:`tests.fixtures.loopback_provider.Upstream` (fixed bytes on loopback).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web

from gateway.backends.base import StreamOutcome
from gateway.backends.relay import AnthropicWatcher, ResponsesWatcher
from gateway.wire.sse import encode_named_event
from tests.fixtures.gateway_fixture import GatewayThread
from tests.fixtures.loopback_provider import (
    CHAT_ANSWER,
    OPENAI_KEY_ENV,
    RESPONSE,
    Upstream,
    chat_stream,
    loopback_gateway,
    responses_stream,
)
from tests.fixtures.loopback_server import LoopbackServer, answer


@pytest.fixture(scope="module")
def gateway(upstream: Upstream) -> Iterator[GatewayThread]:
    backends = {
        "openai": {
            "kind": "litellm",
            "model": "openai/gpt-5-codex",
            "api_base": upstream.url + "/v1",
            "api_key_env": OPENAI_KEY_ENV,
        },
        # Another OpenAI-compatible provider: chat completions only, so translated.
        "deepseek": {
            "kind": "litellm",
            "model": "deepseek/deepseek-chat",
            "api_base": upstream.url + "/v1",
        },
    }
    aliases = {"gpt-5-codex": "openai", "deepseek-chat": "deepseek"}
    with loopback_gateway(backends, {"default": "openai", "aliases": aliases}) as gw:
        yield gw


REASONING_ITEM = {
    "type": "reasoning",
    "id": "rs_turn1",
    "summary": [{"type": "summary_text", "text": "Look at a.py."}],
    "encrypted_content": "gAAAAABo-earlier-turn==",
}
CODEX_BODY: dict[str, Any] = {
    "model": "gpt-5-codex",
    "instructions": "You are Codex, a coding agent.",
    "input": [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "Fix a.py"}],
        },
        REASONING_ITEM,
        {
            "type": "function_call",
            "call_id": "call_0",
            "name": "shell",
            "arguments": '{"command":["ls"]}',
        },
        {"type": "function_call_output", "call_id": "call_0", "output": "a.py"},
    ],
    "tools": [
        {
            "type": "function",
            "name": "shell",
            "description": "Run a command",
            "strict": False,
            "parameters": {"type": "object", "properties": {"command": {"type": "array"}}},
        },
        {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark"}},
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "019a-session",
    "text": {"verbosity": "low"},
}


def test_responses_door_passes_the_clients_body_to_openai_unchanged(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    resp = httpx.post(
        gateway.base_url + "/v1/responses", json=CODEX_BODY, headers={"OpenAI-Beta": "responses=v1"}
    )
    assert resp.status_code == 200, resp.text
    assert resp.content == orjson.dumps(RESPONSE)  # OpenAI's answer, byte for byte
    path, headers, sent = upstream.requests[-1]
    assert path == "/v1/responses"
    assert sent == CODEX_BODY  # the reasoning item with its encrypted_content included
    assert headers["Authorization"] == "Bearer sk-openai-provider"
    assert headers["openai-beta"] == "responses=v1"
    record = gateway.sink.wait_for(resp.headers["x-request-id"])
    assert record.response == RESPONSE and record.request == CODEX_BODY
    assert (record.prompt_tokens, record.cached_tokens, record.completion_tokens) == (
        3000,
        2048,
        40,
    )
    assert record.canonical_response is not None
    (choice,) = record.canonical_response["choices"]
    assert choice["message"]["content"] == "I will read it."
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "shell"
    assert not any(k.startswith("note.") for k in record.tags)  # nothing was translated


def test_responses_stream_is_relayed_as_openai_sent_it(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    body = {**CODEX_BODY, "stream": True}
    with httpx.stream("POST", gateway.base_url + "/v1/responses", json=body) as resp:
        assert resp.status_code == 200
        got = resp.read()
        rid = resp.headers["x-request-id"]
    assert got == b"".join(responses_stream())
    assert upstream.requests[-1][2] == body
    record = gateway.sink.wait_for(rid)
    assert record.status == 200 and record.stream and record.response == RESPONSE
    assert (record.prompt_tokens, record.cached_tokens, record.completion_tokens) == (
        3000,
        2048,
        40,
    )


def test_a_response_that_fails_mid_stream_ends_as_openai_ends_one(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    upstream.mode = "error"
    try:
        with httpx.stream(
            "POST", gateway.base_url + "/v1/responses", json={**CODEX_BODY, "stream": True}
        ) as resp:
            text = resp.read()
            rid = resp.headers["x-request-id"]
    finally:
        upstream.mode = "ok"
    sent = responses_stream()[:5]
    assert text.startswith(b"".join(sent))
    events = [orjson.loads(e.split(b"data: ", 1)[1]) for e in text.strip().split(b"\n\n")]
    error, failed = events[-2:]
    assert error["type"] == "error" and "The model had an error" in error["message"]
    assert failed["type"] == "response.failed"
    assert [error["sequence_number"], failed["sequence_number"]] == [5, 6]  # numbered on
    assert failed["response"]["id"] == RESPONSE["id"]  # the provider's response failed
    assert failed["response"]["output"] == [RESPONSE["output"][0]]  # the item that was done
    record = gateway.sink.wait_for(rid)
    assert record.status == 502 and "The model had an error" in (record.error or "")


def test_reasoning_items_openai_cannot_resolve_are_left_out_and_noted(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    """A reasoning item with no encrypted_content (the local model's, rendered by this door)
    names nothing OpenAI knows: it is left out, and the record says so."""
    ours = {
        "type": "reasoning",
        "id": "rs_0123abcd0",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "local thoughts"}],
    }
    body = {**CODEX_BODY, "input": [*CODEX_BODY["input"], ours]}
    resp = httpx.post(gateway.base_url + "/v1/responses", json=body)
    assert resp.status_code == 200, resp.text
    assert upstream.requests[-1][2]["input"] == CODEX_BODY["input"]
    record = gateway.sink.wait_for(resp.headers["x-request-id"])
    assert "1 reasoning item" in record.tags["note.reasoning_items_dropped"]
    assert record.request == body  # the record keeps what the client sent


def test_responses_door_to_a_provider_without_the_responses_api_is_translated(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    resp = httpx.post(
        gateway.base_url + "/v1/responses", json={"model": "deepseek-chat", "input": "hi"}
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["object"] == "response"
    assert upstream.requests[-1][0] == "/v1/chat/completions"


@pytest.mark.parametrize(
    ("watcher", "event"),
    [
        (
            AnthropicWatcher(),
            {"type": "content_block_delta", "index": 0, "delta": {"text": "event: error"}},
        ),
        (ResponsesWatcher(), {"type": "response.output_text.delta", "delta": "event: error"}),
    ],
)
def test_a_text_that_quotes_an_error_event_is_no_error(
    watcher: AnthropicWatcher | ResponsesWatcher, event: dict[str, Any]
) -> None:
    block = encode_named_event(str(event["type"]), event)
    outcome = StreamOutcome()
    assert watcher.watch(block, outcome) == block
    assert outcome.error is None and not outcome.completed


def test_an_openai_target_without_the_responses_api_is_translated_from_its_first_call(
    frontier_sim: Any,
) -> None:
    """An ``openai/`` target whose server has no Responses API (vLLM before it, Ollama, a proxy)
    answers the path with a 404: that call and the next go translated to chat completions. A
    404 about the model (OpenAI's ``model_not_found``) is the model's error, not the path's."""
    calls: list[str] = []
    missing_model = True

    async def responses(request: web.Request) -> web.Response:
        calls.append(request.path)
        if missing_model:
            error = {"message": "The model `m` does not exist", "code": "model_not_found"}
            return web.json_response({"error": {**error, "param": None}}, status=404)
        return web.Response(status=404, text="404: Not Found")

    async def chat(request: web.Request) -> web.StreamResponse:
        calls.append(request.path)
        return await answer(request, await request.json(), CHAT_ANSWER, chat_stream())

    app = web.Application()
    app.router.add_post("/v1/responses", responses)
    app.router.add_post("/v1/chat/completions", chat)
    server = LoopbackServer(app, "no-responses-api").start()
    target = {"kind": "litellm", "model": "openai/m", "api_base": server.url + "/v1"}
    routing = {"default": "openai", "aliases": {"m": "openai"}}
    try:
        with loopback_gateway({"openai": target}, routing) as gw:
            refused = httpx.post(gw.base_url + "/v1/responses", json={"model": "m", "input": "hi"})
            assert refused.status_code == 502 and "does not exist" in refused.text
            missing_model = False
            for stream in (False, True, False):
                resp = httpx.post(
                    gw.base_url + "/v1/responses",
                    json={"model": "m", "input": "hi", "stream": stream},
                )
                assert resp.status_code == 200, resp.text
    finally:
        server.stop()
    assert calls == ["/v1/responses", "/v1/responses", *["/v1/chat/completions"] * 3]
