"""Secrets on the request path, against the frontier simulator over real HTTP on loopback: a
target with ``secrets: redact`` receives placeholders and the client gets its originals back
(unary and streamed, through each of the three doors, in texts and tool-call arguments); a
target with ``secrets: block`` answers 400 in the door's error shape and the provider receives
nothing; the local target is sent the request as it came; the record keeps the originals only
where the key's consent is ``allow``.

What the provider received is the simulator's own log (``keep_request_bodies``, GET
``/sim/requests``). The simulator plays a coding model: asked to ``run `CMD` and tell me what it
printed`` with a shell tool, it calls the tool with ``CMD`` (its arguments streamed 8
characters a delta: a placeholder is cut across deltas), then quotes the command and its output
in text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.wire.sse import iter_events
from loadtests.bench.sim_gateway import simulator_aliases, simulator_backends
from loadtests.frontier_sim import SimulatorConfig, ThreadedSimulator, run_in_thread
from serving.names import LOCAL_MODEL_NAME
from tests.fixtures.gateway_fixture import GatewayThread, ListSink, gateway_config

# Random, fake, shaped as real ones (the scrubber's kinds: github_token, private_key_pem).
TOKEN = "ghp_" + "Zq8LmN3pR5tV7xB9dF2hJ4kS6wY1cE0aG3iK"
PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACBvQm3x8kTqQ2vN9rYtL5hWcJ0sD7fXe4gKpUaZ1iHbMw==\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
COMMAND = f"export GITHUB_TOKEN={TOKEN}"
ASK = f"run `{COMMAND}` and tell me what it printed"
OUTPUT = f"GITHUB_TOKEN={TOKEN}\nkey:\n{PEM}\n"
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


@pytest.fixture(scope="module")
def sim() -> Iterator[ThreadedSimulator]:
    sim = run_in_thread(SimulatorConfig(keep_request_bodies=64))
    yield sim
    sim.stop()


def _config(sim_url: str, training_use: str = "allow") -> Any:
    backends = simulator_backends(sim_url)
    for name in ("frontier-openai", "frontier-anthropic"):
        backends[f"{name}-block"] = {**backends[name], "secrets": "block"}
        backends[name] = {**backends[name], "secrets": "redact"}
    aliases = {
        **simulator_aliases(),
        "gpt-4o-block": "frontier-openai-block",
        "claude-block": "frontier-anthropic-block",
    }
    return gateway_config(
        sim_url,
        backends=backends,
        routing={"default": "local", "aliases": aliases},
        auth={"required": False, "training_use": training_use},
    )


@pytest.fixture(scope="module")
def gateway(sim: ThreadedSimulator) -> Iterator[GatewayThread]:
    with GatewayThread(_config(sim.base_url)) as gw:
        yield gw


@pytest.fixture()
def received(sim: ThreadedSimulator) -> Iterator[list[dict[str, Any]]]:
    """What the simulator receives during the test (filled when read: call ``fetch``)."""
    httpx.delete(sim.base_url + "/sim/requests")
    bodies: list[dict[str, Any]] = []
    yield bodies


def provider_log(sim: ThreadedSimulator) -> list[dict[str, Any]]:
    log: list[dict[str, Any]] = httpx.get(sim.base_url + "/sim/requests").json()
    return log


# -- each door's request, first turn (the tool call) and second (the tool's output) -----------
def chat_body(model: str, turn: int, stream: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": ASK}]
    if turn == 2:
        arguments = orjson.dumps({"command": COMMAND}).decode()
        function = {"name": "Bash", "arguments": arguments}
        call = {"id": "call_1", "type": "function", "function": function}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": OUTPUT},
        ]
    tools = [{"type": "function", "function": {"name": "Bash", "parameters": SCHEMA}}]
    return {"model": model, "messages": messages, "tools": tools, "stream": stream}


def messages_body(model: str, turn: int, stream: bool) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": ASK}]
    if turn == 2:
        use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": COMMAND}}
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": OUTPUT}
        messages += [
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": [result]},
        ]
    return {
        "model": model,
        "max_tokens": 512,
        "system": [{"type": "text", "text": f"Deploy key for reference:\n{PEM}"}],
        "messages": messages,
        "tools": [{"name": "Bash", "input_schema": SCHEMA}],
        "stream": stream,
    }


def responses_body(model: str, turn: int, stream: bool) -> dict[str, Any]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": ASK}]}
    ]
    if turn == 2:
        arguments = orjson.dumps({"command": COMMAND}).decode()
        items += [
            {"type": "function_call", "call_id": "c1", "name": "Bash", "arguments": arguments},
            {"type": "function_call_output", "call_id": "c1", "output": OUTPUT},
        ]
    tools = [{"type": "function", "name": "Bash", "parameters": SCHEMA}]
    return {"model": model, "input": items, "tools": tools, "stream": stream}


DOORS = {
    "chat": ("/v1/chat/completions", chat_body),
    "messages": ("/v1/messages", messages_body),
    "responses": ("/v1/responses", responses_body),
}


def _post(gw: GatewayThread, door: str, body: dict[str, Any]) -> httpx.Response:
    path, _ = DOORS[door]
    return httpx.post(gw.base_url + path, json=body, timeout=60)


def _arguments(door: str, answer: httpx.Response, stream: bool) -> str:
    """The tool call's arguments the client got, streamed deltas joined."""
    if not stream:
        data = answer.json()
        if door == "chat":
            return str(data["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
        if door == "messages":
            use = next(b for b in data["content"] if b["type"] == "tool_use")
            return orjson.dumps(use["input"]).decode()
        call = next(i for i in data["output"] if i["type"] == "function_call")
        return str(call["arguments"])
    events = [orjson.loads(e) for e in iter_events(answer.content) if e.startswith(b"{")]
    if door == "chat":
        return "".join(
            c["function"].get("arguments", "")
            for e in events
            for ch in e.get("choices", [])
            for c in ch.get("delta", {}).get("tool_calls") or []
        )
    if door == "messages":
        return "".join(
            e["delta"]["partial_json"]
            for e in events
            if e.get("type") == "content_block_delta" and "partial_json" in e["delta"]
        )
    return "".join(
        e["delta"] for e in events if e.get("type") == "response.function_call_arguments.delta"
    )


def _text(door: str, answer: httpx.Response, stream: bool) -> str:
    """The answer's text the client got, streamed deltas joined."""
    if not stream:
        data = answer.json()
        if door == "chat":
            return str(data["choices"][0]["message"]["content"])
        if door == "messages":
            return "".join(b["text"] for b in data["content"] if b["type"] == "text")
        return "".join(
            c["text"] for i in data["output"] if i["type"] == "message" for c in i["content"]
        )
    events = [orjson.loads(e) for e in iter_events(answer.content) if e.startswith(b"{")]
    if door == "chat":
        return "".join(
            ch["delta"].get("content") or "" for e in events for ch in e.get("choices", [])
        )
    if door == "messages":
        return "".join(
            e["delta"]["text"]
            for e in events
            if e.get("type") == "content_block_delta" and "text" in e["delta"]
        )
    return "".join(e["delta"] for e in events if e.get("type") == "response.output_text.delta")


def _assert_provider_saw_no_secret(log: list[dict[str, Any]]) -> None:
    assert log, "the provider received nothing"
    sent = orjson.dumps([entry["body"] for entry in log]).decode()
    assert TOKEN not in sent and "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU" not in sent
    assert "<SECRET_GITHUB_TOKEN_1>" in sent  # redacted, not dropped


MODELS = {"chat": "gpt-4o-mini", "messages": "claude-haiku-4-5", "responses": "gpt-4o-mini"}


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("door", list(DOORS))
def test_redact_sends_placeholders_and_gives_the_client_its_originals_back(
    gateway: GatewayThread, sim: ThreadedSimulator, received: list[Any], door: str, stream: bool
) -> None:
    make = DOORS[door][1]
    first = _post(gateway, door, make(MODELS[door], 1, stream))
    assert first.status_code == 200, first.text
    assert orjson.loads(_arguments(door, first, stream)) == {"command": COMMAND}
    second = _post(gateway, door, make(MODELS[door], 2, stream))
    assert second.status_code == 200, second.text
    text = _text(door, second, stream)
    assert f"I ran `{COMMAND}`" in text and TOKEN in text and PEM in text
    for answer in (first, second):
        assert b"<SECRET_" not in answer.content  # every placeholder went back, events included
    log = provider_log(sim)
    assert len(log) == 2
    _assert_provider_saw_no_secret(log)


def test_a_translating_door_redacts_its_translation_too(
    gateway: GatewayThread, sim: ThreadedSimulator, received: list[Any]
) -> None:
    """The Messages door to an OpenAI-format target: the translated chat body is what goes."""
    for stream in (False, True):
        answer = _post(gateway, "messages", messages_body("gpt-4o-mini", 2, stream))
        assert answer.status_code == 200, answer.text
        assert TOKEN in _text("messages", answer, stream)
    log = provider_log(sim)
    assert [entry["endpoint"] for entry in log] == ["chat_completions"] * 2
    _assert_provider_saw_no_secret(log)


BLOCK_MODELS = {"chat": "gpt-4o-block", "messages": "claude-block", "responses": "gpt-4o-block"}


@pytest.mark.parametrize("door", list(DOORS))
def test_block_answers_400_in_the_doors_shape_before_any_upstream_call(
    gateway: GatewayThread, sim: ThreadedSimulator, received: list[Any], door: str
) -> None:
    answer = _post(gateway, door, DOORS[door][1](BLOCK_MODELS[door], 2, False))
    assert answer.status_code == 400
    body = answer.json()
    if door == "messages":
        assert body["type"] == "error"
        error = body["error"]
    else:
        error = body["error"]
        assert error["code"] == "secrets_in_request"
    assert error["type"] == "invalid_request_error"
    assert "github_token" in error["message"] and "private_key_pem" in error["message"]
    assert TOKEN not in answer.text and "b3BlbnNzaC1rZXk" not in answer.text
    assert provider_log(sim) == []
    clean = DOORS[door][1](BLOCK_MODELS[door], 1, False)
    clean["stream"] = False
    pem = orjson.dumps(PEM).decode()[1:-1]
    text = orjson.dumps(clean).decode().replace(COMMAND, "ls -la").replace(pem, "none")
    ok = _post(gateway, door, orjson.loads(text))  # no secret: served as usual
    assert ok.status_code == 200, ok.text


def test_the_local_target_is_sent_the_request_as_it_came(
    gateway: GatewayThread, sim: ThreadedSimulator, received: list[Any]
) -> None:
    answer = _post(gateway, "chat", chat_body(LOCAL_MODEL_NAME, 2, False))
    assert answer.status_code == 200, answer.text
    (entry,) = provider_log(sim)
    assert TOKEN in orjson.dumps(entry["body"]).decode()


def _record(gw: GatewayThread, answer: httpx.Response) -> Any:
    sink = gw.sink
    assert isinstance(sink, ListSink)
    return sink.wait_for(answer.headers["x-request-id"])


def test_the_record_keeps_originals_only_where_consent_allows(
    gateway: GatewayThread, sim: ThreadedSimulator, received: list[Any]
) -> None:
    for door, stream in (("messages", True), ("chat", False)):
        answer = _post(gateway, door, DOORS[door][1](MODELS[door], 2, stream))
        assert answer.status_code == 200
        allowed = _record(gateway, answer)
        assert allowed.tags["note.secrets"].startswith("redacted: github_token")
        assert TOKEN in orjson.dumps(allowed.request).decode()
        assert TOKEN in orjson.dumps(allowed.response).decode()
    with GatewayThread(_config(sim.base_url, training_use="redact")) as strict:
        for door, stream in (("messages", True), ("chat", False), ("responses", True)):
            body = DOORS[door][1](MODELS[door], 2, stream)
            answer = _post(strict, door, body)
            assert answer.status_code == 200 and TOKEN in _text(door, answer, stream)
            record = _record(strict, answer)
            parts = (record.request, record.canonical_request, record.response)
            kept = orjson.dumps([*parts, record.canonical_response]).decode()
            assert TOKEN not in kept and "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU" not in kept
            assert "<SECRET_GITHUB_TOKEN_1>" in kept
