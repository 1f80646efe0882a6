"""SSE cutting and stream assembly for the record."""

from __future__ import annotations

import orjson

from gateway.backends.base import Usage
from gateway.wire.assemble import assemble_chat, assemble_completion
from gateway.wire.blocks import cache_counts, usage_counts
from gateway.wire.sse import (
    EventSplitter,
    drop_usage_only_events,
    encode_event,
    last_usage,
    parse_stream,
)


def _chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {
        "id": "c1",
        "created": 1,
        "model": "m",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def test_splitter_yields_only_whole_events_whatever_the_block_boundaries() -> None:
    blob = encode_event({"a": 1}) + encode_event({"b": 2}) + b"data: [DONE]\n\n"
    for cut in range(1, len(blob)):
        s = EventSplitter()
        out = s.feed(blob[:cut]) + s.feed(blob[cut:])
        assert out == blob and s.pending == b""


def test_usage_only_chunk_is_cut_out_and_returned() -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    blob = (
        encode_event(_chunk({"content": "x"}, "stop"))
        + encode_event({"id": "c1", "choices": [], "usage": usage})
        + b"data: [DONE]\n\n"
    )
    kept, found = drop_usage_only_events(blob)
    assert found == usage
    assert kept == encode_event(_chunk({"content": "x"}, "stop")) + b"data: [DONE]\n\n"
    # Text that mentions it, an empty-choices chunk without usage and a broken event all stay.
    others = (
        encode_event(_chunk({"content": 'say "choices":[] twice'}))
        + encode_event({"id": "c1", "choices": [], "usage": None})
        + b'data: {"choices":[], broken\n\n'
    )
    assert drop_usage_only_events(others + blob) == (others + kept, usage)
    assert drop_usage_only_events(others) == (others, None)


def test_chat_stream_assembles_content_and_tool_call_fragments() -> None:
    chunks: list[dict[str, object]] = [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Hel"}),
        _chunk({"content": "lo"}),
        _chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read", "arguments": ""},
                    }
                ]
            }
        ),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"p":'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"a"}'}}]}, "tool_calls"),
        {"id": "c1", "choices": [], "usage": {"prompt_tokens": 1}},
    ]
    blob = b"".join(encode_event(c) for c in chunks) + b"data: [DONE]\n\n"
    resp = assemble_chat(parse_stream(blob))
    msg = resp["choices"][0]["message"]
    assert msg["content"] == "Hello"
    assert msg["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"p":"a"}'}}
    ]
    assert orjson.loads(msg["tool_calls"][0]["function"]["arguments"]) == {"p": "a"}
    assert resp["choices"][0]["finish_reason"] == "tool_calls"
    assert resp["usage"] == {"prompt_tokens": 1} and resp["object"] == "chat.completion"


def test_completion_stream_assembles_text() -> None:
    chunks = [
        {"id": "t", "choices": [{"index": 0, "text": "a"}]},
        {"id": "t", "choices": [{"index": 0, "text": "b", "finish_reason": "length"}]},
    ]
    resp = assemble_completion(chunks)
    assert resp["choices"][0]["text"] == "ab"
    assert resp["choices"][0]["finish_reason"] == "length"


_CHUNK = b'{"id":"c1","choices":[{"index":0,"delta":{"content":"a\\n\\nb"}}]}'
_OTHER = b'{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'


def test_parse_stream_reads_every_shape_of_event_stream_alike() -> None:
    """The one-call path for plain single-line events and the per-event path agree, and streams
    that are not plain (comments, CRLF, [DONE] mid-stream, malformed or joinable events,
    non-object payloads) get the per-event reading."""
    from gateway.wire.sse import iter_events, json_objects, plain_json_events

    def _parse_events(blob: bytes) -> list[dict[str, object]]:  # the per-event reading
        return json_objects(iter_events(blob))

    expected = [orjson.loads(_CHUNK), orjson.loads(_OTHER)]
    plain = [
        b"data: " + _CHUNK + b"\n\ndata: " + _OTHER + b"\n\ndata: [DONE]\n\n",
        b"data: " + _CHUNK + b"\n\ndata: " + _OTHER + b"\n\n",
        b"event: a\ndata: " + _CHUNK + b"\n\nevent: b\ndata: " + _OTHER + b"\n\n",
    ]
    for blob in plain:
        assert plain_json_events(blob) == expected, blob
        assert parse_stream(blob) == _parse_events(blob) == expected, blob
    assert parse_stream(b"data: [DONE]\n\n") == []
    odd = [
        b": keep-alive\n\ndata: " + _CHUNK + b"\n\n",
        b"data: " + _CHUNK + b"\r\n\r\ndata: " + _OTHER + b"\r\n\r\n",
        b"data: " + _CHUNK + b"\n\ndata: [DONE]\n\ndata: " + _OTHER + b"\n\n",
        b'data: {"a":[1\n\ndata: 2]}\n\n',  # two broken events that would join into one object
        b"data: " + _CHUNK + b"\n\ndata: not json\n\n",
        b"data: [1, 2]\n\ndata: " + _CHUNK + b"\n\n",
        b"data: " + _CHUNK + b"\n\ndata:" + _OTHER + b"\n\n",
        b"data: " + _CHUNK + b"\ndata: " + _OTHER + b"\n\n",  # two data lines in one event
    ]
    for blob in odd:
        assert plain_json_events(blob) is None, blob
        assert parse_stream(blob) == _parse_events(blob), blob


def test_anthropic_stream_assembles_alike_on_both_reading_paths() -> None:
    from gateway.doors.anthropic.stream import assemble_message

    events = [
        ("message_start", {"type": "message_start", "message": {"id": "m1", "content": []}}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "hi"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    blob = b"".join(b"event: %s\ndata: %s\n\n" % (n.encode(), orjson.dumps(d)) for n, d in events)
    message = assemble_message(blob)
    assert message is not None and message["content"] == [{"type": "text", "text": "hi"}]
    assert message["stop_reason"] == "end_turn"
    assert assemble_message(blob.replace(b"\n", b"\r\n")) == message  # the per-event path


def test_chat_assembly_leaves_out_text_deltas_that_are_not_strings() -> None:
    chunks = [
        {"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "ok"}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"content": ["not", "text"]}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {"reasoning": 5}, "finish_reason": "stop"}]},
    ]
    message = assemble_chat(chunks)["choices"][0]
    assert message["message"] == {"role": "assistant", "content": "ok"}
    assert message["finish_reason"] == "stop"


def test_cache_reads_and_writes_are_found_wherever_the_provider_puts_them() -> None:
    assert cache_counts({"prompt_tokens": 9}) == (None, None)
    openai = {"prompt_tokens": 900, "prompt_tokens_details": {"cached_tokens": 512}}
    assert cache_counts(openai) == (512, None)
    deepseek = {
        "prompt_tokens": 900,
        "prompt_cache_hit_tokens": 640,
        "prompt_cache_miss_tokens": 260,
    }
    assert cache_counts(deepseek) == (640, None)
    # litellm's OpenAI-shaped answer for Anthropic: reads at the top too, writes in either place.
    litellm_anthropic = {
        "prompt_tokens": 900,
        "prompt_tokens_details": {"cached_tokens": 0, "cache_creation_tokens": 300},
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 300,
    }
    assert cache_counts(litellm_anthropic) == (0, 300)
    assert cache_counts({"prompt_tokens_details": {"cache_write_tokens": 7}}) == (None, 7)
    # The record's usage and the doors' renderings read the same counts.
    usage = Usage.from_openai(deepseek)
    assert (usage.cached_tokens, usage.cache_creation_tokens) == (640, None)
    assert usage_counts(deepseek) == (900, 0, 640, 0)


def test_splitter_spells_events_as_openai_does_whatever_the_line_ends_and_cuts() -> None:
    lf = b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n'
    for blob in (
        lf.replace(b"\n", b"\r\n"),
        lf.replace(b"\n", b"\r"),
        lf.replace(b"data: ", b"data:"),
        lf.replace(b"data: ", b"data:").replace(b"\n", b"\r\n"),
    ):
        for cut in range(1, len(blob)):
            s = EventSplitter()
            out = s.feed(blob[:cut]) + s.feed(blob[cut:])
            assert out == lf, (blob, cut)
    # A colon inside a payload is not a field's: only line-leading `data:` gets its space.
    text = b'data: {"t":"data:{x}"}\n\n'
    assert EventSplitter().feed(text) == text


def test_usage_only_chunk_is_found_with_json_spaces_and_in_a_chunk_with_choices() -> None:
    spaced = (
        b'data: {"choices": [{"index": 0, "delta": {}}]}\n\n'
        b'data: {"choices": [], "usage": {"prompt_tokens": 3}}\n\ndata: [DONE]\n\n'
    )
    kept, usage = drop_usage_only_events(spaced)
    assert usage == {"prompt_tokens": 3}
    assert kept == b'data: {"choices": [{"index": 0, "delta": {}}]}\n\ndata: [DONE]\n\n'
    with_choices = b'data: {"choices":[{"index":0,"delta":{}}],"usage":{"prompt_tokens":4}}\n\n'
    assert drop_usage_only_events(with_choices) == (with_choices, None)
    assert last_usage(with_choices) == {"prompt_tokens": 4}
