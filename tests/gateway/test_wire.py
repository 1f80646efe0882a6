"""SSE cutting and stream assembly for the record."""

from __future__ import annotations

import orjson

from gateway.wire.assemble import assemble_chat, assemble_completion, parse_stream
from gateway.wire.sse import EventSplitter, drop_usage_only_events, encode_event


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
    assert b'"choices":[]' not in kept and kept.endswith(b"data: [DONE]\n\n")


def test_chat_stream_assembles_content_and_tool_call_fragments() -> None:
    chunks = [
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
