"""The request path's scanner and restorer, in process: which texts of each wire format are
scanned, the placeholders' numbering across a request and from turn to turn, tool arguments kept
in their own spelling, what is never touched (PII, signed thinking, media, ids), and a streamed
answer's placeholders put back whatever the cuts between its events."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from gateway.secrets.scanner import Redaction, SecretScanner
from gateway.secrets.stream import StreamRestorer, StreamWire
from gateway.secrets.texts import MASK, RESTORE, map_texts, recorded_answers
from gateway.wire.sse import encode_event, encode_named_event, iter_events

TOKEN = "ghp_" + "Zq8LmN3pR5tV7xB9dF2hJ4kS6wY1cE0aG3iK"
OTHER = "sk-ant-api03-" + "Xv4Tq9Lm2Np7Rs5Wb8Yc1Zd6Fg3Hj0Kk4Mn7Pq2Rt5"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----"
)


@pytest.fixture(scope="module")
def scanner() -> Iterator[SecretScanner]:
    found = SecretScanner()
    asyncio.run(found.ready())
    yield found


def scan(scanner: SecretScanner, body: dict[str, Any], client: Any = None) -> Redaction:
    redaction = scanner.scan(body, client)
    assert redaction is not None
    return redaction


def test_a_body_without_secrets_is_not_copied(scanner: SecretScanner) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "mail a@corp.io from 8.8.8.8"}]}
    assert scanner.scan(body, None) is None  # PII stays: the request path acts on secrets


def test_one_secret_one_placeholder_across_messages_and_both_bodies(
    scanner: SecretScanner,
) -> None:
    chat: dict[str, Any] = {
        "messages": [
            {"role": "system", "content": f"token {TOKEN}"},
            {"role": "user", "content": [{"type": "text", "text": f"{OTHER} then {TOKEN}"}]},
        ]
    }
    client = {"system": f"token {TOKEN}", "messages": [{"role": "user", "content": OTHER}]}
    redaction = scan(scanner, chat, client)
    assert redaction.body["messages"][0]["content"] == "token <SECRET_GITHUB_TOKEN_1>"
    assert redaction.body["messages"][1]["content"][0]["text"] == (
        "<SECRET_ANTHROPIC_KEY_1> then <SECRET_GITHUB_TOKEN_1>"
    )
    assert redaction.client_body == {
        "system": "token <SECRET_GITHUB_TOKEN_1>",
        "messages": [{"role": "user", "content": "<SECRET_ANTHROPIC_KEY_1>"}],
    }
    assert redaction.kinds == ("anthropic_key", "github_token")
    assert chat["messages"][0]["content"] == f"token {TOKEN}"  # the client's body untouched


def test_a_secret_keeps_its_placeholder_on_the_next_turn(scanner: SecretScanner) -> None:
    turn = [{"role": "user", "content": f"use {TOKEN}"}]
    first = scan(scanner, {"messages": turn})
    later = [
        *turn,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": f"and {OTHER}, not {TOKEN}"},
    ]
    second = scan(scanner, {"messages": later})
    assert second.body["messages"][0] == first.body["messages"][0]
    assert second.body["messages"][2]["content"] == (
        "and <SECRET_ANTHROPIC_KEY_1>, not <SECRET_GITHUB_TOKEN_1>"
    )


def test_a_placeholder_already_in_the_request_is_never_given_to_a_secret(
    scanner: SecretScanner,
) -> None:
    body = {"messages": [{"role": "user", "content": f"<SECRET_GITHUB_TOKEN_1> is not {TOKEN}"}]}
    text = scan(scanner, body).body["messages"][0]["content"]
    assert text == "<SECRET_GITHUB_TOKEN_1> is not <SECRET_GITHUB_TOKEN_2>"


def test_tool_arguments_keep_their_spelling_and_json_escapes(scanner: SecretScanner) -> None:
    arguments = orjson.dumps({"command": f"echo {TOKEN}", "key": PEM}).decode()
    spaced = arguments.replace('":"', '": "').replace('","', '", "')  # a model's spelling
    call = {"id": "c", "type": "function", "function": {"name": "Bash", "arguments": spaced}}
    body = {"messages": [{"role": "assistant", "tool_calls": [call]}]}
    redaction = scan(scanner, body)
    sent = redaction.body["messages"][0]["tool_calls"][0]["function"]["arguments"]
    pem = orjson.dumps(PEM).decode()[1:-1]  # as JSON writes it: \\n for each newline
    assert pem in spaced
    placeholders = spaced.replace(TOKEN, "<SECRET_GITHUB_TOKEN_1>")
    assert sent == placeholders.replace(pem, "<SECRET_PRIVATE_KEY_PEM_1>")
    # the answer that repeats them gets the originals back, escaped as JSON escapes them
    answer = {"choices": [{"message": {"tool_calls": [{"function": {"arguments": sent}}]}}]}
    back = map_texts(answer, redaction.swap.restore)
    assert back["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == spaced


def test_signed_thinking_media_and_ids_are_never_touched(scanner: SecretScanner) -> None:
    thinking = {"type": "thinking", "thinking": f"the user pasted {TOKEN}", "signature": "sig"}
    image = {"type": "image", "source": {"type": "base64", "data": TOKEN * 3}}
    use = {"type": "tool_use", "id": TOKEN, "name": "Bash", "input": {"data": f"x {TOKEN}"}}
    body = {
        "messages": [
            {"role": "assistant", "content": [thinking, use]},
            {"role": "user", "content": [image, {"type": "text", "text": TOKEN}]},
        ],
        "tools": [{"name": "Bash", "description": f"default token {TOKEN}"}],
    }
    redaction = scan(scanner, body)
    assistant, user = redaction.body["messages"]
    assert assistant["content"][0] is thinking and user["content"][0] is image
    assert assistant["content"][1]["id"] == TOKEN
    assert assistant["content"][1]["input"] == {"data": "x <SECRET_GITHUB_TOKEN_1>"}
    assert redaction.body["tools"] is body["tools"]  # definitions are not the conversation
    # an answer's thinking keeps its placeholder: a client sends it back, signed, as it came
    answer = {"content": [{"type": "thinking", "thinking": "<SECRET_GITHUB_TOKEN_1>"}]}
    assert map_texts(answer, redaction.swap.restore) is answer


def test_every_door_format_is_walked(scanner: SecretScanner) -> None:
    responses = {
        "instructions": f"deploy with {TOKEN}",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": OTHER}]},
            {"type": "function_call_output", "call_id": "c", "output": f"TOKEN={TOKEN}"},
            {"type": "reasoning", "id": "r", "encrypted_content": TOKEN, "summary": []},
        ],
    }
    sent = orjson.dumps(scan(scanner, {"messages": []}, responses).client_body).decode()
    assert sent.count(TOKEN) == 1 and OTHER not in sent  # left: the encrypted reasoning's
    completion = {"prompt": [f"key {OTHER}", "plain"], "suffix": f"and {TOKEN}"}
    sent = orjson.dumps(scan(scanner, completion).body).decode()
    assert TOKEN not in sent and OTHER not in sent


def test_detections_are_memoised_per_text(
    scanner: SecretScanner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traffic.scrub import scrubber

    calls: list[str] = []
    detect = scrubber.detect

    def counted(text: str, *, pii: bool = True) -> Any:
        assert not pii  # the request path acts on secrets: the PII rules are not run
        calls.append(text)
        return detect(text, pii=pii)

    monkeypatch.setattr(scrubber, "detect", counted)
    history = [{"role": "user", "content": f"new text number one with {TOKEN}"}]
    scan(scanner, {"messages": history})
    history.append({"role": "user", "content": "and a second, new, text"})
    scanner.scan({"messages": history}, None)
    assert calls == [history[0]["content"], history[1]["content"]]


def test_long_new_texts_are_scanned_off_the_event_loop(
    scanner: SecretScanner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traffic.scrub import scrubber

    threads: list[str] = []
    detect = scrubber.detect

    def watched(text: str, *, pii: bool = True) -> Any:
        threads.append(threading.current_thread().name)
        return detect(text, pii=pii)

    monkeypatch.setattr(scrubber, "detect", watched)
    long = f"{TOKEN} " + "x = compute(value) + 1\n" * 2000  # never seen, > OFF_LOOP_CHARS

    async def scan_twice() -> tuple[Any, Any]:
        first = await scanner.scan_async({"messages": [{"role": "user", "content": long}]}, None)
        short = {"role": "user", "content": "and one more short line"}
        body = {"messages": [{"role": "user", "content": long}, short]}
        return first, await scanner.scan_async(body, None)

    first, second = asyncio.run(scan_twice())
    assert first is not None and second is not None
    main = threading.main_thread().name
    assert threads[0] != main  # the long text, on a worker thread
    assert threads[1:] == [main]  # the next turn: only the short new text, on the loop


def test_the_record_restores_or_masks(scanner: SecretScanner) -> None:
    redaction = scan(scanner, {"messages": [{"role": "user", "content": f"{TOKEN} {PEM}"}]})
    findings = redaction.swap.findings
    args = orjson.dumps({"key": PEM}).decode()
    said = {"content": f"saw {TOKEN}", "tool_calls": [{"function": {"arguments": args}}]}
    response, canonical = recorded_answers(MASK, findings, lambda: (said, None))
    assert response["content"] == "saw <SECRET_GITHUB_TOKEN_1>"
    assert response["tool_calls"][0]["function"]["arguments"] == (
        '{"key":"<SECRET_PRIVATE_KEY_PEM_1>"}'
    )
    back, _ = recorded_answers(RESTORE, findings, lambda: (response, canonical))
    assert back == said


# -- streams ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def redaction(scanner: SecretScanner) -> Redaction:
    return scan(scanner, {"messages": [{"role": "user", "content": f"{TOKEN} and {PEM}"}]})


ANSWER = "Set <SECRET_GITHUB_TOKEN_1>, then <SECRET_PRIVATE_KEY_PEM_1> ends <SECRET_GIT"
RESTORED = f"Set {TOKEN}, then {PEM} ends <SECRET_GIT"  # not a placeholder: as written
ARGS = orjson.dumps(
    {"command": "echo <SECRET_GITHUB_TOKEN_1>", "key": "<SECRET_PRIVATE_KEY_PEM_1>"}
)
RESTORED_ARGS = {"command": f"echo {TOKEN}", "key": PEM}


def _cuts(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def openai_events(size: int) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return encode_event({"id": "c", "model": "m", "choices": [choice]})

    out = [chunk({"content": p}) for p in _cuts(ANSWER, size)]
    call = {"index": 0, "id": "t", "type": "function", "function": {"name": "Bash"}}
    out.append(chunk({"tool_calls": [{**call, "function": {"name": "Bash", "arguments": ""}}]}))
    for piece in _cuts(ARGS.decode(), size):
        out.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
    return [*out, chunk({}, "tool_calls"), b"data: [DONE]\n\n"]


def anthropic_events(size: int) -> list[bytes]:
    def event(payload: dict[str, Any]) -> bytes:
        return encode_named_event(str(payload["type"]), payload)

    out = [event({"type": "message_start", "message": {"content": []}})]
    out.append(event({"type": "content_block_start", "index": 0, "content_block": {}}))
    for piece in _cuts(ANSWER, size):
        delta = {"type": "text_delta", "text": piece}
        out.append(event({"type": "content_block_delta", "index": 0, "delta": delta}))
    out.append(event({"type": "content_block_stop", "index": 0}))
    for piece in _cuts(ARGS.decode(), size):
        delta = {"type": "input_json_delta", "partial_json": piece}
        out.append(event({"type": "content_block_delta", "index": 1, "delta": delta}))
    out.append(event({"type": "content_block_stop", "index": 1}))
    return [*out, event({"type": "message_stop"})]


def responses_events(size: int) -> list[bytes]:
    seq = iter(range(1000))

    def event(kind: str, **payload: Any) -> bytes:
        return encode_named_event(kind, {"type": kind, "sequence_number": next(seq), **payload})

    at = {"item_id": "m", "output_index": 0, "content_index": 0}
    out = [event("response.output_text.delta", **at, delta=p) for p in _cuts(ANSWER, size)]
    out.append(event("response.output_text.done", **at, text=ANSWER))
    call_at = {"item_id": "f", "output_index": 1}
    for piece in _cuts(ARGS.decode(), size):
        out.append(event("response.function_call_arguments.delta", **call_at, delta=piece))
    out.append(event("response.function_call_arguments.done", **call_at, arguments=ARGS.decode()))
    done = {"output": [{"type": "message", "content": [{"type": "output_text", "text": ANSWER}]}]}
    return [*out, event("response.completed", response=done)]


def _read(wire: StreamWire, blob: bytes) -> tuple[str, str, list[dict[str, Any]]]:
    """The text and the arguments the client reads from a stream, and its events."""
    events = [orjson.loads(e) for e in iter_events(blob) if e.startswith(b"{")]
    text, args = "", ""
    for e in events:
        if wire == "openai":
            for ch in e["choices"]:
                text += ch["delta"].get("content") or ""
                for call in ch["delta"].get("tool_calls") or []:
                    args += call["function"].get("arguments") or ""
        elif wire == "anthropic" and e["type"] == "content_block_delta":
            text += e["delta"].get("text", "")
            args += e["delta"].get("partial_json", "")
        elif wire == "responses":
            if e["type"] == "response.output_text.delta":
                text += e["delta"]
            elif e["type"] == "response.function_call_arguments.delta":
                args += e["delta"]
    return text, args, events


STREAMS = {"openai": openai_events, "anthropic": anthropic_events, "responses": responses_events}


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, 40])
@pytest.mark.parametrize("wire", list(STREAMS))
def test_a_stream_gets_its_originals_back_however_it_is_cut(
    redaction: Redaction, wire: StreamWire, size: int
) -> None:
    events = STREAMS[wire](size)
    restorer = StreamRestorer(redaction.swap, wire)
    for per_block in (1, 3):  # a block of one event, or of several
        restorer = StreamRestorer(redaction.swap, wire)
        blocks = [b"".join(events[i : i + per_block]) for i in range(0, len(events), per_block)]
        out = [restorer.feed(block) for block in blocks]
        text, args, seen = _read(wire, b"".join(out))
        assert text == RESTORED
        assert orjson.loads(args) == RESTORED_ARGS
        if wire == "responses":
            done = [e for e in seen if e["type"].endswith(".done")]
            assert done[0]["text"] == RESTORED
            assert orjson.loads(done[1]["arguments"]) == RESTORED_ARGS
            final = seen[-1]["response"]["output"][0]["content"][0]["text"]
            assert final == RESTORED


def test_a_stream_without_placeholders_passes_as_it_came(redaction: Redaction) -> None:
    restorer = StreamRestorer(redaction.swap, "openai")
    block = encode_event({"choices": [{"index": 0, "delta": {"content": "plain a < b"}}]})
    assert restorer.feed(block) == block  # read, unchanged: its bytes as they came
    plain = encode_event({"choices": [{"index": 0, "delta": {"content": "no angle"}}]})
    assert restorer.feed(plain) is plain
