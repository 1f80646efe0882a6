"""Frontier pass-through: what the client sends reaches the provider unchanged where the formats
match, and what the provider answers reaches the client unchanged; recorded as usual.

The upstream is :class:`tests.fixtures.loopback_provider.Upstream`: a real HTTP server on
loopback that keeps every request and answers fixed bytes, so bytes compare on both sides.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.fixtures.gateway_fixture import GatewayThread
from tests.fixtures.loopback_provider import (
    ANTHROPIC_KEY_ENV,
    CHAT_ANSWER,
    MESSAGE,
    OPENAI_KEY_ENV,
    Upstream,
    anthropic_stream,
    chat_stream,
    loopback_gateway,
)


@pytest.fixture(scope="module")
def gateway(upstream: Upstream) -> Iterator[GatewayThread]:
    backends = {
        "anthropic": {
            "kind": "litellm",
            "model": "anthropic/claude-sonnet-4-5",
            "api_base": upstream.url,
            "api_key_env": ANTHROPIC_KEY_ENV,
        },
        "openai": {
            "kind": "litellm",
            "model": "openai/gpt-4o-mini",
            "api_base": upstream.url + "/v1",
            "api_key_env": OPENAI_KEY_ENV,
        },
    }
    aliases = {"claude-sonnet-4-5": "anthropic", "gpt-4o-mini": "openai"}
    with loopback_gateway(backends, {"default": "openai", "aliases": aliases}) as gw:
        yield gw


CLAUDE_CODE_BODY: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32000,
    "system": [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
    ],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Fix a.py"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Read it first.", "signature": "EqQBCkgIARAB=="},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
                {"type": "tool_use", "id": "toolu_0", "name": "Read", "input": {"path": "a.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_0",
                    "content": "print(1)",
                    "is_error": False,
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ],
    "tools": [
        {
            "name": "Read",
            "description": "Read a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
    ],
    "thinking": {"type": "enabled", "budget_tokens": 16000},
    "metadata": {"user_id": "user_abc_account__session_123"},
    "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},  # unknown here
    "temperature": 1,
}
CLIENT_HEADERS = {
    "x-api-key": "gateway-key-of-the-client",
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "interleaved-thinking-2025-05-14,context-management-2025-06-27",
}


def test_messages_door_passes_the_clients_body_to_anthropic_unchanged(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    resp = httpx.post(
        gateway.base_url + "/v1/messages", json=CLAUDE_CODE_BODY, headers=CLIENT_HEADERS
    )
    assert resp.status_code == 200
    assert resp.content == orjson.dumps(MESSAGE)  # the provider's answer, byte for byte
    path, headers, sent = upstream.requests[-1]
    assert path == "/v1/messages"
    assert sent == {**CLAUDE_CODE_BODY, "model": "claude-sonnet-4-5"}
    assert headers["anthropic-beta"] == CLIENT_HEADERS["anthropic-beta"]
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["x-api-key"] == "sk-ant-provider"  # the provider's key, never the client's
    record = gateway.sink.wait_for(resp.headers["x-request-id"])
    assert record.response == MESSAGE
    assert record.request == CLAUDE_CODE_BODY
    assert (record.prompt_tokens, record.cached_tokens) == (12 + 2048 + 4096, 4096)
    assert record.completion_tokens == 31
    assert not any(k.startswith("note.") for k in record.tags)  # nothing was translated


def test_messages_stream_is_relayed_as_the_provider_sent_it(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    body = {**CLAUDE_CODE_BODY, "stream": True}
    with httpx.stream(
        "POST", gateway.base_url + "/v1/messages", json=body, headers=CLIENT_HEADERS
    ) as resp:
        assert resp.status_code == 200
        got = resp.read()
        rid = resp.headers["x-request-id"]
    assert got == b"".join(anthropic_stream())
    assert upstream.requests[-1][2] == body
    record = gateway.sink.wait_for(rid)
    assert record.status == 200 and record.stream
    assert record.response is not None
    assert record.response["content"] == MESSAGE["content"]
    assert record.response["stop_reason"] == "tool_use"
    assert (record.prompt_tokens, record.cached_tokens, record.completion_tokens) == (
        12 + 2048 + 4096,
        4096,
        31,
    )


def test_an_error_event_mid_stream_reaches_the_client_in_anthropics_shape(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    upstream.mode = "error"
    try:
        with httpx.stream(
            "POST",
            gateway.base_url + "/v1/messages",
            json={**CLAUDE_CODE_BODY, "stream": True},
            headers=CLIENT_HEADERS,
        ) as resp:
            text = resp.read().decode()
            rid = resp.headers["x-request-id"]
    finally:
        upstream.mode = "ok"
    assert text.startswith("event: message_start")
    assert "event: message_stop" not in text
    last = text.strip().split("\n\n")[-1]
    assert last.startswith("event: error")
    error = orjson.loads(last.split("data: ", 1)[1])
    assert error["type"] == "error" and "Overloaded" in error["error"]["message"]
    record = gateway.sink.wait_for(rid)
    assert record.status == 502 and "Overloaded" in (record.error or "")


def test_a_stream_that_opens_with_an_error_event_is_an_http_error_in_the_doors_shape(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    """Nothing went to the client yet: the refusal is an HTTP error with the status the event
    carries (a 200 with an error inside is what vLLM sends), and the record says so."""
    upstream.mode = "refuse"
    try:
        messages = httpx.post(
            gateway.base_url + "/v1/messages",
            json={**CLAUDE_CODE_BODY, "stream": True},
            headers=CLIENT_HEADERS,
        )
        chat = httpx.post(
            gateway.base_url + "/v1/chat/completions",
            json={
                "model": "gpt-4o-mini",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
            },
        )
    finally:
        upstream.mode = "ok"
    assert messages.status_code == 503, messages.text  # overloaded: another target may serve
    error = messages.json()
    assert error["type"] == "error" and "Overloaded" in error["error"]["message"]
    assert chat.status_code == 400, chat.text  # the provider's refusal of the input, passed on
    assert "decoder prompt cannot be empty" in chat.json()["error"]["message"]
    for resp, status in ((messages, 503), (chat, 400)):
        record = gateway.sink.wait_for(resp.headers["x-request-id"])
        assert record.status == status and "upstream stream error" in (record.error or "")


def test_chat_door_fields_the_gateway_does_not_know_reach_openai(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hi"}],
        "store": True,
        "prediction": {"type": "content", "content": "ok"},
        "x_vendor_option": {"keep": [1, 2]},
    }
    resp = httpx.post(
        gateway.base_url + "/v1/chat/completions", json=body, headers={"OpenAI-Beta": "x=v1"}
    )
    assert resp.status_code == 200
    assert resp.content == orjson.dumps(CHAT_ANSWER)
    path, headers, sent = upstream.requests[-1]
    assert path == "/v1/chat/completions"
    assert sent == body
    assert headers["Authorization"] == "Bearer sk-openai-provider"
    assert headers["openai-beta"] == "x=v1"
    record = gateway.sink.wait_for(resp.headers["x-request-id"])
    assert (record.prompt_tokens, record.cached_tokens) == (2000, 1024)


def test_chat_stream_gets_usage_only_when_asked(gateway: GatewayThread, upstream: Upstream) -> None:
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    resp = httpx.post(gateway.base_url + "/v1/chat/completions", json=body)
    sent = upstream.requests[-1][2]
    assert sent["stream_options"] == {"include_usage": True}  # asked upstream for the record
    assert b'"usage"' not in resp.content and resp.content.endswith(b"data: [DONE]\n\n")
    record = gateway.sink.wait_for(resp.headers["x-request-id"])
    assert (record.prompt_tokens, record.completion_tokens) == (9, 2)
    asked = {**body, "stream_options": {"include_usage": True}}
    resp = httpx.post(gateway.base_url + "/v1/chat/completions", json=asked)
    assert resp.content == b"".join(chat_stream())


def test_messages_door_to_an_openai_provider_sends_only_openai_fields(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    body = {
        "model": "gpt-4o-mini",
        "max_tokens": 50,
        "top_k": 5,
        "messages": [
            {"role": "user", "content": "Complete this"},
            {"role": "assistant", "content": "def f("},  # prefill: vLLM's continue_final_message
        ],
    }
    resp = httpx.post(gateway.base_url + "/v1/messages", json=body, headers=CLIENT_HEADERS)
    assert resp.status_code == 200
    assert resp.json()["type"] == "message"  # translated back into Anthropic's shape
    path, headers, sent = upstream.requests[-1]
    assert path == "/v1/chat/completions"
    assert "continue_final_message" not in sent and "top_k" not in sent
    assert "anthropic-beta" not in headers  # an Anthropic header means nothing to OpenAI


def test_chat_door_to_anthropic_is_translated_by_litellm(
    gateway: GatewayThread, upstream: Upstream
) -> None:
    body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
    resp = httpx.post(gateway.base_url + "/v1/chat/completions", json=body, timeout=60)
    assert resp.status_code == 200
    answer = resp.json()
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "Read"
    path, headers, sent = upstream.requests[-1]
    assert path == "/v1/messages"
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert headers["x-api-key"] == "sk-ant-provider"
