"""The model trains on exactly what it served: one conversation per exchange.

Every door (chat, completions, Responses, Messages) is driven through a real gateway at a served
model on loopback that keeps the body it got and answers with a scripted answer. The exported
training conversation (messages, tools, answer) of the record must equal what that model was
sent (read by the internal format's parser) and what it answered (built from the script alone):
for the record as written now (its canonical fields, read without the gateway's translators),
and for the same record as an older release wrote it (canonical fields None: the exporter
translates it again with the live translators it is given, ``gateway.admin.legacy_records``). A
native pass-through (the Messages door to an Anthropic provider, the Responses door to OpenAI)
is compared with the translation the local model would be sent, the target of training.

Client bodies: a corpus of real client shapes (:mod:`.client_corpus`) and generated Claude Code
and Codex conversations (:mod:`.client_strategies`), in this folder.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.admin.legacy_records import LIVE_TRANSLATOR
from gateway.config import parse_config
from gateway.doors.anthropic.translate import translate_messages
from gateway.doors.responses.request import translate_request
from gateway.wire.anthropic_thinking import reconcile_thinking
from gateway.wire.assemble import assemble_chat
from gateway.wire.reasoning import reconcile_reasoning
from tests.fixtures.gateway_fixture import GatewayThread
from tests.gateway.served_conversation import client_strategies as gen
from tests.gateway.served_conversation.client_corpus import CHAT, CLAUDE_CODE, COMPLETIONS, Case
from tests.gateway.served_conversation.codex_corpus import CODEX
from tests.gateway.served_conversation.served import (
    Answer,
    ServedModel,
    chat_chunks,
    chat_completion,
)
from traffic.export.chat_format import chat_messages, chat_tools, completion_messages
from traffic.export.conversation import conversation_of
from traffic.export.turns import AssistantTurn, Message, ToolCall, UnsupportedShape
from traffic.store import InferenceRecord

CORPUS = [*CLAUDE_CODE, *CODEX, *CHAT, *COMPLETIONS]
EMPTY_TEXT = "[System: Empty message content sanitised to satisfy protocol]"  # litellm's
KEY_ENV = "SWITCHYARD_TEST_SERVED_KEY"
# Model name a client sends -> the target serving it (a vLLM replica, an OpenAI-format provider
# passed through, natively on the Responses door too; an Anthropic provider passed through
# natively on the Messages door).
MODELS = {"local": "switchyard-local", "openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-5"}
TARGETS = {
    "/v1/chat/completions": ("local", "openai", "anthropic"),
    "/v1/completions": ("local",),
    "/v1/responses": ("local", "openai", "anthropic"),
    "/v1/messages": ("local", "openai", "anthropic"),
}
Conversation = tuple[list[Message], list[dict[str, Any]], AssistantTurn | None]


@dataclasses.dataclass(frozen=True)
class Native:
    """A door passed through natively: what the provider is sent of the client's body (and the
    notes on it), and the translation the local model would be sent instead."""

    reconcile: Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, str]]]
    translate: Callable[[dict[str, Any]], dict[str, Any]]


# By the path the served model was called on.
NATIVE = {
    "/v1/messages": Native(reconcile_thinking, lambda body: translate_messages(body).body),
    "/v1/responses": Native(reconcile_reasoning, lambda body: translate_request(body).body),
}


@pytest.fixture(scope="module")
def served() -> Iterator[ServedModel]:
    model = ServedModel().start()
    yield model
    model.stop()


@pytest.fixture(scope="module")
def gateway(served: ServedModel) -> Iterator[GatewayThread]:
    mp = pytest.MonkeyPatch()
    mp.setenv(KEY_ENV, "sk-provider")
    config = parse_config(
        {
            "backends": {
                "local": {"kind": "vllm", "model": "served-local", "replicas": [served.url]},
                "openai": {
                    "kind": "litellm",
                    "model": "openai/gpt-4o-mini",
                    "api_base": served.url + "/v1",
                    "api_key_env": KEY_ENV,
                },
                "anthropic": {
                    "kind": "litellm",
                    "model": "anthropic/claude-sonnet-4-5",
                    "api_base": served.url,
                    "api_key_env": KEY_ENV,
                },
            },
            "routing": {"default": "local", "aliases": {v: k for k, v in MODELS.items()}},
            "store": {"enabled": False},
            "auth": {"required": False},
        }
    )
    gw = GatewayThread(config).start()
    yield gw
    gw.stop()
    mp.undo()


def _serve(
    gateway: GatewayThread, served: ServedModel, path: str, body: dict[str, Any], answer: Answer
) -> tuple[InferenceRecord, str, dict[str, Any]]:
    """Send ``body`` to the door at ``path``; the record, and where and what the model got."""
    served.answer = answer
    before = len(served.received)
    with httpx.stream("POST", gateway.base_url + path, json=body, timeout=30) as resp:
        resp.read()
        assert resp.status_code == 200, resp.text
        rid = resp.headers["x-request-id"]
    record = gateway.sink.wait_for(rid)
    assert len(served.received) == before + 1
    got_path, got = served.received[before]
    return record, got_path, got


def _what_was_served(path: str, got: dict[str, Any], answer: Answer) -> Conversation:
    """The conversation the served model saw, read from what it got and what it said (a chat
    body litellm translated for Anthropic is read back by the Messages door's translator)."""
    if path in NATIVE:  # the provider got the client's own body; the local model would get this
        got = NATIVE[path].translate(got)
    if path.endswith("/v1/completions"):
        return completion_messages(got), [], answer.turn()
    return chat_messages(got), chat_tools(got), answer.turn(native=path == "/v1/messages")


def _translated(record: InferenceRecord, path: str) -> bool:
    """A chat body litellm's classes translated for Anthropic (gateway.backends.
    anthropic_translate): the served model got a Messages body on an OpenAI door's record."""
    return path.endswith("/v1/messages") and record.wire_format != "anthropic.messages"


def _merged(messages: list[Message]) -> list[Message]:
    """Messages as Anthropic's protocol lets them differ from a chat body and still say the same:
    consecutive user turns of text as one (the roles must alternate; the Messages door reads
    such a turn back with its texts joined by a line), an empty user or assistant text as none
    (litellm fills it with a placeholder, as Anthropic refuses empty content), and a call's
    arguments as compact JSON (Anthropic holds them as an object)."""
    out: list[Message] = []
    for m in messages:
        content = m.get("content")
        if m["role"] in ("user", "assistant") and (content is None or isinstance(content, str)):
            text = "\n".join(t for t in (content or "").split("\n") if t != EMPTY_TEXT)
            m = {**m, "content": text if text.strip() else None}  # blank counts as empty there
        if m.get("tool_calls"):  # the arguments as an object there: the same JSON, any spacing
            m = {**m, "tool_calls": [_compact(c) for c in m["tool_calls"]]}
        last = out[-1] if out else None
        if last is not None and last["role"] == m["role"] == "user" and not m.get("tool_calls"):
            joined = [t for t in (last.get("content"), m.get("content")) if isinstance(t, str)]
            plain = all(isinstance(t, str | None) for t in (last.get("content"), m.get("content")))
            if plain:
                out[-1] = {**last, "content": "\n".join(joined) or None}
                continue
        out.append(m)
    return out


def _compact(call: dict[str, Any]) -> dict[str, Any]:
    try:
        arguments = json.dumps(json.loads(call["function"]["arguments"]), separators=(",", ":"))
    except (KeyError, TypeError, ValueError):
        return call
    return {**call, "function": {**call["function"], "arguments": arguments}}


def _as_older_release_wrote_it(record: InferenceRecord) -> InferenceRecord:
    return dataclasses.replace(record, canonical_request=None, canonical_response=None)


def _parsed_arguments(turn: AssistantTurn | None) -> Any:
    """A turn with its calls' arguments parsed: a Messages answer a client saw carries a call's
    arguments as an object, so an older record keeps them only up to JSON formatting."""
    if turn is None:
        return None
    calls = [(c.id, c.name, json.loads(c.arguments)) for c in turn.tool_calls]
    return turn.content, calls


def _check(
    record: InferenceRecord, path: str, got: dict[str, Any], answer: Answer, stream: bool
) -> None:
    expected = _what_was_served(path, got, answer)
    exported = conversation_of(record)
    if _translated(record, path):
        # Anthropic got consecutive user turns as one, in blocks; a call's arguments came back
        # as litellm serialises Anthropic's input object (the same JSON, other spacing).
        assert _merged(exported[0]) == _merged(expected[0]) and exported[1] == expected[1]
        assert _parsed_arguments(exported[2]) == _parsed_arguments(expected[2])
    else:
        assert exported == expected
    older = conversation_of(_as_older_release_wrote_it(record), LIVE_TRANSLATOR)
    if _translated(record, path):
        older, expected = (_merged(older[0]), *older[1:]), (_merged(expected[0]), *expected[1:])
    assert older[:2] == expected[:2]  # the live translator, run again, reads the same prompt
    if record.wire_format == "anthropic.messages" or _translated(record, path):
        assert _parsed_arguments(older[2]) == _parsed_arguments(expected[2])
    else:
        assert older[2] == expected[2]
    _check_canonical_fields(record, path, got, answer, stream)


def _check_canonical_fields(
    record: InferenceRecord, path: str, got: dict[str, Any], answer: Answer, stream: bool
) -> None:
    """Raw: the canonical request is the body sent (before the provider's changes), the canonical
    response what the model answered; the OpenAI doors store neither."""
    if _translated(record, path):
        # The conversation check above read what Anthropic got; the record says how it went.
        assert record.tags["note.translation"] == "litellm-transforms"
        return
    if record.wire_format in ("openai.chat", "openai.completions"):
        assert record.canonical_request is None and record.canonical_response is None
        assert isinstance(record.request, dict)
        sent = {**record.request, "model": got["model"]}
        if stream:  # usage is always asked for
            sent["stream_options"] = {**sent.get("stream_options", {}), "include_usage": True}
        assert got == sent
        return
    canonical = record.canonical_request
    assert canonical is not None and record.canonical_response is not None
    if path in NATIVE:
        # As sent, but for what the provider would refuse (noted in the record's tags).
        assert isinstance(record.request, dict)
        sent, notes = NATIVE[path].reconcile(record.request)
        assert got == {**sent, "model": got["model"]}
        assert {f"note.{k}": v for k, v in notes.items()}.items() <= record.tags.items()
        assert canonical == NATIVE[path].translate(record.request)
        return
    assert isinstance(canonical, dict)
    assert canonical["messages"] == got["messages"]
    assert canonical.get("tools") == got.get("tools")
    if stream:
        assert record.canonical_response == assemble_chat(chat_chunks(answer))
    else:
        assert record.canonical_response == chat_completion(answer)


def _cases() -> list[Any]:
    return [
        pytest.param(
            case, target, stream, id=f"{case.name}-{target}-{'stream' if stream else 'unary'}"
        )
        for case in CORPUS
        for target in TARGETS[case.path]
        for stream in (False, True)
    ]


@pytest.mark.parametrize(("case", "target", "stream"), _cases())
def test_real_client_bodies_export_as_served(
    gateway: GatewayThread, served: ServedModel, case: Case, target: str, stream: bool
) -> None:
    body = {**case.body, "model": MODELS[target], "stream": stream}
    record, path, got = _serve(gateway, served, case.path, body, case.answer)
    if case.refused is None:
        _check(record, path, got, case.answer, stream)
        return
    for version in (record, _as_older_release_wrote_it(record)):
        with pytest.raises(UnsupportedShape) as info:
            conversation_of(version, LIVE_TRANSLATOR)
        assert info.value.reason == case.refused


def test_the_live_translation_differences_reach_the_export(
    gateway: GatewayThread, served: ServedModel
) -> None:
    """What the old second parser got wrong, now read as served: an error result's "Error: "
    prefix, an assistant turn's text joined with nothing between, one leading system message,
    namespaced tools flattened (a Codex session is no longer dropped)."""
    cc = next(c for c in CORPUS if c.name == "claude-code tool rounds")
    body = {**cc.body, "model": MODELS["local"]}
    record, _, _ = _serve(gateway, served, cc.path, body, cc.answer)
    prompt, _, _ = conversation_of(record)
    error = "Error: FAILED tests/test_a.py::test_add - assert 3 == 4"
    assert {"role": "tool", "tool_call_id": "toolu_01A", "content": error} in prompt
    assert "Let me read both files." in [m["content"] for m in prompt if m["role"] == "assistant"]
    codex = next(c for c in CORPUS if c.name == "codex items and namespaced tools")
    body = {**codex.body, "model": MODELS["local"]}
    record, _, _ = _serve(gateway, served, codex.path, body, codex.answer)
    prompt, tools, answer = conversation_of(record)
    assert [m["role"] for m in prompt].count("system") == 1 and prompt[0]["role"] == "system"
    assert "github__search_issues" in {t["function"]["name"] for t in tools}
    assert answer is not None and answer.tool_calls[0] == ToolCall(
        "call_9", "github__search_issues", '{"q":"lint rule E501"}'
    )


def test_an_answer_that_cannot_be_converted_costs_no_record(
    gateway: GatewayThread, served: ServedModel
) -> None:
    """A provider's body that is not a message still reaches the client and the record; only
    its conversion is missing, and the export says why it skips the row."""
    body = {**CLAUDE_CODE[-1].body, "model": MODELS["anthropic"]}
    served.broken = {"type": "message", "content": "not a list of blocks"}
    try:
        record, _, _ = _serve(gateway, served, "/v1/messages", body, Answer())
    finally:
        served.broken = None
    assert record.response == {"type": "message", "content": "not a list of blocks"}
    assert record.canonical_response is None
    assert record.canonical_request == translate_messages(body).body
    with pytest.raises(UnsupportedShape) as info:
        conversation_of(record)
    assert info.value.reason == "malformed_response"


def test_a_refused_upstream_call_keeps_the_translation_and_no_answer(
    gateway: GatewayThread,
) -> None:
    body = {**CODEX[-1].body, "model": "no-such-model"}
    resp = httpx.post(gateway.base_url + "/v1/responses", json=body, timeout=30)
    assert resp.status_code == 404
    record = gateway.sink.wait_for(resp.headers["x-request-id"])
    assert record.canonical_request is not None and record.canonical_response is None
    assert conversation_of(record)[2] is None


GENERATED = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@GENERATED
@given(data=st.data())
def test_generated_claude_code_conversations_export_as_served(
    gateway: GatewayThread, served: ServedModel, data: st.DataObject
) -> None:
    body, answer = data.draw(gen.claude_code_exchange())
    target = data.draw(st.sampled_from(TARGETS["/v1/messages"]))
    stream = data.draw(st.booleans())
    body = {**body, "model": MODELS[target], "stream": stream}
    record, path, got = _serve(gateway, served, "/v1/messages", body, answer)
    _check(record, path, got, answer, stream)


@GENERATED
@given(data=st.data())
def test_generated_codex_conversations_export_as_served(
    gateway: GatewayThread, served: ServedModel, data: st.DataObject
) -> None:
    body, answer = data.draw(gen.codex_exchange())
    target = data.draw(st.sampled_from(TARGETS["/v1/responses"]))
    stream = data.draw(st.booleans())
    body = {**body, "model": MODELS[target], "stream": stream}
    record, path, got = _serve(gateway, served, "/v1/responses", body, answer)
    _check(record, path, got, answer, stream)
