"""A stream's text deltas read as one template: the record's answer is the per-event reading's,
whatever the stream holds, and the template is used where the stream allows it."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.doors.anthropic import stream as anthropic_stream
from gateway.wire.assemble import assemble_chat, assemble_chat_stream
from gateway.wire.sse import parse_stream
from gateway.wire.stream_template import TextRun, data_events, find_template, read_events

HEAD = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "m",
    "system_fingerprint": "fp",
    "usage": None,
}


def _chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {**HEAD, "choices": [choice]}


def _stream(chunks: list[dict[str, Any]], ascii_escapes: bool = False, done: bool = True) -> bytes:
    def dump(c: dict[str, Any]) -> bytes:
        if ascii_escapes:  # another encoder's bytes for the same text (\u escapes)
            return json.dumps(c, separators=(",", ":"), ensure_ascii=True).encode()
        return orjson.dumps(c)

    body = b"".join(b"data: " + dump(c) + b"\n\n" for c in chunks)
    return body + (b"data: [DONE]\n\n" if done else b"")


def _per_event(blob: bytes) -> dict[str, Any] | None:
    chunks = parse_stream(blob)
    return assemble_chat(chunks) if chunks else None


def _plain(texts: list[str]) -> list[dict[str, Any]]:
    usage = {"prompt_tokens": 3, "completion_tokens": len(texts), "total_tokens": 3 + len(texts)}
    return [
        _chunk({"role": "assistant", "content": "", "refusal": None}),
        *(_chunk({"content": t}) for t in texts),
        _chunk({}, "stop"),
        {**HEAD, "choices": [], "usage": usage},
    ]


def test_a_plain_text_stream_reads_its_deltas_as_one_template_run() -> None:
    blob = _stream(_plain(["Hel", "lo", ' "world"', "\\n", "é✓"]))
    events = data_events(blob)
    assert events is not None
    template = find_template(events[1], b'"content":')
    assert template is not None
    items = read_events(events, template)
    assert items is not None
    runs = [i for i in items if isinstance(i, TextRun)]
    assert [r.texts for r in runs] == [["Hel", "lo", ' "world"', "\\n", "é✓"]]
    answer = assemble_chat_stream(blob)
    assert answer == _per_event(blob)
    assert answer is not None
    assert answer["choices"][0]["message"]["content"] == 'Hello "world"\\né✓'
    assert answer["usage"]["completion_tokens"] == 5


def test_texts_that_look_like_json_structure_stay_texts() -> None:
    tricky = ['","', '"}]}', "\\", '{"content":"x"}', "data: [DONE]", ""]
    blob = _stream(_plain(tricky))
    assert assemble_chat_stream(blob) == _per_event(blob)


def test_an_event_that_is_the_template_plus_more_is_read_whole() -> None:
    """An event starting and ending like the template but holding another key between."""
    chunks = _plain(["a", "b"])
    blob = _stream(chunks)
    extra = _chunk({"content": "c", "refusal": "no"})
    blob = blob.replace(b"data: [DONE]", b"data: " + orjson.dumps(extra) + b"\n\ndata: [DONE]")
    assert assemble_chat_stream(blob) == _per_event(blob)
    got = assemble_chat_stream(blob)
    assert got is not None and got["choices"][0]["message"]["content"] == "abc"


def test_broken_event_shapes_read_as_the_per_event_reading_does() -> None:
    blob = _stream(_plain(["one", "two", "three"]))
    variants = [
        blob.replace(b'"two"', b'"two'),  # an unterminated text
        blob.replace(b'"two"', b"2"),  # not a string
        blob.replace(b'"two"', b'"tw","o"'),  # two values where one goes
        blob.replace(b"\n\n", b"\r\n\r\n"),  # CRLF
        b"event: x\n" + blob,  # named events
        blob.replace(b"data: [DONE]\n\n", b""),  # no [DONE]
        blob[: len(blob) // 2],  # cut mid-stream
        blob.replace(b'data: {"id"', b': keep-alive\ndata: {"id"', 1),  # a comment line
    ]
    for variant in variants:
        assert assemble_chat_stream(variant) == _per_event(variant), variant


def test_tool_call_and_reasoning_streams_keep_their_fragments() -> None:
    chunks = [
        _chunk({"role": "assistant", "content": None}),
        _chunk({"reasoning_content": "think"}),
        _chunk({"content": "x", "reasoning_content": "more"}),
        _chunk({"content": "y", "reasoning_content": "more"}),
        _chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
        _chunk({}, "tool_calls"),
    ]
    blob = _stream(chunks)
    answer = assemble_chat_stream(blob)
    assert answer == _per_event(blob)
    assert answer is not None
    message = answer["choices"][0]["message"]
    assert message["reasoning_content"] == "thinkmoremore"
    assert message["tool_calls"][0]["function"]["arguments"] == '{"a":1}'


_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_DELTA = st.one_of(
    st.builds(lambda t: {"content": t}, _TEXT),
    st.builds(lambda t: {"reasoning_content": t}, _TEXT),
    st.builds(lambda t: {"role": "assistant", "content": t}, _TEXT),
    st.just({}),
    st.builds(
        lambda a: {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": a}}]}, _TEXT
    ),
)
_CHUNK = st.builds(
    _chunk,
    _DELTA,
    st.sampled_from([None, None, None, "stop", "length"]),
    st.sampled_from([0, 0, 0, 1]),
)


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(_CHUNK, max_size=12),
    texts=st.lists(_TEXT, max_size=20),
    at=st.integers(min_value=0, max_value=12),
    ascii_escapes=st.booleans(),
    done=st.booleans(),
)
def test_generated_streams_assemble_as_the_per_event_reading_does(
    chunks: list[dict[str, Any]], texts: list[str], at: int, ascii_escapes: bool, done: bool
) -> None:
    plain = _plain(texts)
    mixed = plain[:1] + chunks[:at] + plain[1:] + chunks[at:]
    blob = _stream(mixed, ascii_escapes, done)
    assert assemble_chat_stream(blob) == _per_event(blob)


# -- Anthropic Messages streams ------------------------------------------------------------
def _named(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _delta(index: int, kind: str, key: str, text: str) -> bytes:
    delta = {"type": kind, key: text}
    return _named(
        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    )


def _messages_stream(texts: list[str], thinking: list[str], extra: list[bytes], at: int) -> bytes:
    start: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [],
    }
    start["usage"] = {"input_tokens": 5, "output_tokens": 1}
    out = [_named("message_start", {"type": "message_start", "message": start})]
    index = 0
    if thinking:
        block = {"type": "thinking", "thinking": ""}
        out.append(
            _named(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            )
        )
        out += [_delta(0, "thinking_delta", "thinking", t) for t in thinking]
        out.append(_delta(0, "signature_delta", "signature", "sig"))
        out.append(_named("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    block = {"type": "text", "text": ""}
    out.append(
        _named(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block},
        )
    )
    out.append(_named("ping", {"type": "ping"}))
    body = [_delta(index, "text_delta", "text", t) for t in texts]
    out += body[:at] + extra + body[at:]
    out.append(_named("content_block_stop", {"type": "content_block_stop", "index": index}))
    stop = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"output_tokens": 9},
    }
    out += [_named("message_delta", stop), _named("message_stop", {"type": "message_stop"})]
    return b"".join(out)


def _per_event_message(blob: bytes) -> dict[str, Any] | None:
    """Every event read whole: what the template reading must equal (called, not patched in,
    so that it holds where the module runs compiled, tests/gateway/test_accel.py)."""
    return anthropic_stream.assemble_items(parse_stream(blob))


def test_a_long_messages_stream_reads_its_text_deltas_as_one_template_run() -> None:
    texts = [f" word{i}" for i in range(80)] + [' "q"', "\\", "é✓"]
    blob = _messages_stream(texts, ["let me", " think"], [], 0)
    assert len(blob) >= anthropic_stream.TEMPLATE_MIN_BYTES
    items = anthropic_stream._template_events(blob)
    assert items is not None
    runs = [i.texts for i in items if isinstance(i, TextRun)]
    assert runs == [["let me", " think"]]  # the first kind streamed is the template's
    message = anthropic_stream.assemble_message(blob)
    assert message == _per_event_message(blob)
    assert message is not None
    assert message["content"][0] == {
        "type": "thinking",
        "thinking": "let me think",
        "signature": "sig",
    }
    assert message["content"][1]["text"] == "".join(texts)
    no_thinking = _messages_stream(texts, [], [], 0)
    items = anthropic_stream._template_events(no_thinking)
    assert items is not None and [i.texts for i in items if isinstance(i, TextRun)] == [texts]


_EXTRA = st.sampled_from(
    [
        _named("ping", {"type": "ping"}),
        _delta(0, "text_delta", "text", "other block"),
        _delta(1, "citations_delta", "citation", "c"),
        b"event: content_block_delta\ndata: {broken\n\n",
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":1,'
        b'"delta":{"type":"text_delta","text":"a","text":"b"}}\n\n',
        b"data: no event line\n\n",
    ]
)


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(_TEXT, min_size=0, max_size=80),
    thinking=st.lists(_TEXT, max_size=5),
    extra=st.lists(_EXTRA, max_size=3),
    at=st.integers(min_value=0, max_value=80),
    cut=st.integers(min_value=0, max_value=50),
)
def test_generated_messages_streams_assemble_as_the_per_event_reading_does(
    texts: list[str], thinking: list[str], extra: list[bytes], at: int, cut: int
) -> None:
    blob = _messages_stream([t * 8 for t in texts], thinking, extra, at)
    assert anthropic_stream.assemble_message(blob) == _per_event_message(blob)
    cut_blob = blob[: len(blob) - cut]
    assert anthropic_stream.assemble_message(cut_blob) == _per_event_message(cut_blob)
