"""A chat body to an Anthropic target goes through litellm's own transformation classes and the
gateway's direct call (gateway.backends.anthropic_translate): the answer comes back in OpenAI's
shapes, unary and streamed, tool calls included, the record says which path served it, and
``translation: acompletion`` keeps litellm's whole call path. A real gateway (in-process, SQLite
store) in front of the frontier simulator's Anthropic route."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.backends.anthropic_translate import AnthropicTranslator
from loadtests.bench.sim_gateway import simulator_backends
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config

CHAT = {"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "Say hello."}]}
RUN: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "run_terminal_command",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
TOOLS: dict[str, Any] = {
    "model": "claude-haiku-4-5",
    "messages": [
        {"role": "system", "content": "You are a coding agent in /repo."},
        {"role": "user", "content": "Run `ls -la` in the terminal."},
    ],
    "tools": [RUN],
    "tool_choice": {"type": "function", "function": {"name": "run_terminal_command"}},
}


def _gateway(sim_url: str, translation: str) -> GatewayThread:
    """A gateway recording into memory (its sink) with the Anthropic target translated so."""
    backends = simulator_backends(sim_url)
    backends["frontier-anthropic"] = {**backends["frontier-anthropic"], "translation": translation}
    return GatewayThread(gateway_config(sim_url, backends=backends)).start()


@pytest.fixture
def translated(frontier_sim: Any) -> Iterator[GatewayThread]:
    gw = _gateway(frontier_sim.base_url, "transforms")
    yield gw
    gw.stop()


def _stream(gw: GatewayThread, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str, str]:
    chunks: list[dict[str, Any]] = []
    done = ""
    with httpx.stream("POST", gw.base_url + "/v1/chat/completions", json=body, timeout=30) as r:
        assert r.status_code == 200, r.read()
        rid = r.headers["x-request-id"]
        for line in r.iter_lines():
            if line == "data: [DONE]":
                done = line
            elif line.startswith("data: "):
                chunks.append(json.loads(line[6:]))
    return chunks, done, rid


def test_a_chat_request_to_anthropic_is_answered_in_openai_shape_through_the_classes(
    translated: GatewayThread,
) -> None:
    r = httpx.post(translated.base_url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"]
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["completion_tokens"] > 0
    assert set(body) <= {
        "id",
        "object",
        "created",
        "model",
        "system_fingerprint",
        "choices",
        "usage",
    }
    record = translated.sink.wait_for(r.headers["x-request-id"])
    assert record.tags["note.translation"] == "litellm-transforms"
    assert record.prompt_tokens == body["usage"]["prompt_tokens"]


def test_a_streamed_answer_is_openai_chunks_with_usage_last_when_asked(
    translated: GatewayThread,
) -> None:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    chunks, done, rid = _stream(translated, body)
    assert done == "data: [DONE]"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text and all(c["object"] == "chat.completion.chunk" for c in chunks)
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "stop" and all(f is None for f in finishes[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    record = translated.sink.wait_for(rid)
    assert record.tags["note.translation"] == "litellm-transforms"
    assert record.completion_tokens == chunks[-1]["usage"]["completion_tokens"]
    unasked, _, _ = _stream(translated, {**CHAT, "stream": True})
    assert all("usage" not in c for c in unasked)  # only when the client asked


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_come_back_as_openai_tool_calls(translated: GatewayThread, stream: bool) -> None:
    if stream:
        chunks, _, _ = _stream(translated, {**TOOLS, "stream": True})
        calls = [
            tc
            for c in chunks
            if c["choices"]
            for tc in c["choices"][0]["delta"].get("tool_calls", [])
        ]
        name = calls[0]["function"]["name"]
        arguments = "".join(tc["function"].get("arguments") or "" for tc in calls)
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1]
    else:
        r = httpx.post(translated.base_url + "/v1/chat/completions", json=TOOLS, timeout=30)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        (call,) = choice["message"]["tool_calls"]
        name, arguments, finish = (
            call["function"]["name"],
            call["function"]["arguments"],
            choice["finish_reason"],
        )
        assert call["id"] and call["type"] == "function"
    assert name == "run_terminal_command" and finish == "tool_calls"
    assert "command" in json.loads(arguments)


def test_the_acompletion_path_stays_a_switch_away(frontier_sim: Any) -> None:
    gw = _gateway(frontier_sim.base_url, "acompletion")
    try:
        r = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert r.status_code == 200, r.text
        record = gw.sink.wait_for(r.headers["x-request-id"])
        assert record.tags["note.translation"] == "litellm-acompletion"
    finally:
        gw.stop()


def test_a_tool_name_anthropic_refuses_is_renamed_there_and_back() -> None:
    import litellm

    translator = AnthropicTranslator(litellm, "t", "anthropic/claude-haiku-4-5")
    tool = {**RUN, "function": {**RUN["function"], "name": "mcp/fs.read"}}
    data, _, state = translator.request({**CHAT, "tools": [tool]})
    (sent,) = data["tools"]
    assert sent["name"] != "mcp/fs.read" and state.reverse_map == {sent["name"]: "mcp/fs.read"}
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": sent["name"], "input": {}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
    (call,) = translator.answer(answer, state)["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "mcp/fs.read"


def test_text_deltas_built_by_hand_match_litellms_parser() -> None:
    import litellm

    from gateway.backends.anthropic_translate import AnswerState
    from gateway.backends.base import StreamOutcome

    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": [], "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 1},
        }},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *[{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
          for t in ("Hel", "", "lo \u00e9", " world")],
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
         "usage": {"output_tokens": 4}},
        {"type": "message_stop"},
    ]  # fmt: skip
    block = b"".join(
        b"event: " + e["type"].encode() + b"\ndata: " + json.dumps(e).encode() + b"\n\n"
        for e in events
    )
    translator = AnthropicTranslator(litellm, "t", "anthropic/claude-haiku-4-5")

    def relayed(fast: bool) -> list[Any]:
        watcher = translator.watcher(AnswerState(False, None), strip_usage=False)
        if not fast:
            watcher._fast = None
        outcome = StreamOutcome()
        out = watcher.watch(block, outcome)
        assert outcome.completed and outcome.usage.completion_tokens == 4
        lines = [ln[6:] for ln in out.split(b"\n\n") if ln.startswith(b"data: {")]
        return [{k: v for k, v in json.loads(ln).items() if k not in ("id", "created")}
                for ln in lines]  # fmt: skip

    fast, parsed = relayed(True), relayed(False)
    assert fast == parsed
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in fast if c["choices"])
    assert text == "Hello \u00e9 world"


def test_only_a_plain_http_image_keeps_a_request_off_the_classes() -> None:
    from gateway.backends.anthropic_translate import translatable

    def image(url: str) -> dict[str, Any]:
        part = {"type": "image_url", "image_url": {"url": url}}
        return {"messages": [{"role": "user", "content": [part]}]}

    assert not translatable(image("http://example.com/a.png"))  # litellm would fetch it
    assert translatable(image("https://example.com/a.png"))
    assert translatable({"messages": [{"role": "user", "content": "see http://example.com"}]})
