"""The Anthropic stream watcher reads usage and the model's name from the events that carry
them, whatever the layout of the server-sent events (gateway.backends.relay)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import orjson
import pytest

from gateway.backends.base import StreamOutcome, Usage
from gateway.backends.relay import AnthropicWatcher
from gateway.wire.native import ANTHROPIC_ERROR_STATUS as ERROR_STATUS

START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-provider-name",
        "content": [],
        "usage": {
            "input_tokens": 12,
            "cache_creation_input_tokens": 5,
            "cache_read_input_tokens": 7,
            "output_tokens": 1,
        },
    },
}
DELTA = {
    "type": "message_delta",
    "delta": {"stop_reason": "end_turn"},
    "usage": {"output_tokens": 9},
}
QUOTING = {
    "type": "content_block_delta",
    "index": 0,
    "delta": {"type": "text_delta", "text": "an SSE line reads event: message_delta"},
}
EXPECTED = Usage(prompt_tokens=24, completion_tokens=9, cached_tokens=7, cache_creation_tokens=5)


def _event(name: str, payload: Mapping[str, object]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def _stream() -> bytes:
    return (
        _event("message_start", START)
        + _event("content_block_start", {"type": "content_block_start", "index": 0})
        + _event("content_block_delta", QUOTING)
        + _event("message_delta", DELTA)
        + _event("message_stop", {"type": "message_stop"})
    )


def _watch(block: bytes, model: str | None = "claude-asked") -> tuple[bytes, StreamOutcome]:
    outcome = StreamOutcome()
    return AnthropicWatcher(model).watch(block, outcome), outcome


def _without_cr(block: bytes) -> bytes:
    return block.replace(b"\r\n", b"\n")


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param(lambda b: b, id="as-anthropic-sends-it"),
        pytest.param(lambda b: b.replace(b"\n", b"\r\n"), id="crlf"),
        pytest.param(lambda b: b.replace(b"event: ", b"event:"), id="no-space-after-colon"),
        pytest.param(
            lambda b: b.replace(
                b"event: message_delta\ndata: " + orjson.dumps(DELTA),
                b"data: " + orjson.dumps(DELTA) + b"\nevent: message_delta",
            ),
            id="data-before-event",
        ),
        pytest.param(lambda b: b.replace(b"\n\nevent:", b"\n\n: a comment\nevent:"), id="comments"),
    ],
)
def test_usage_is_read_from_a_whole_stream_in_one_block(layout: Callable[[bytes], bytes]) -> None:
    block = layout(_stream())
    forwarded, outcome = _watch(block)
    assert outcome.usage == EXPECTED
    assert outcome.completed
    # message_start names the model the client asked for, whatever the provider called it
    assert b"claude-provider-name" not in forwarded
    assert _without_cr(forwarded).count(b'"model":"claude-asked"') == 1


def test_usage_is_read_event_by_event_and_the_latest_count_wins() -> None:
    watcher, outcome = AnthropicWatcher(None), StreamOutcome()
    for block in _stream().split(b"\n\n")[:-1]:
        watcher.watch(block + b"\n\n", outcome)
    assert outcome.usage == EXPECTED
    assert outcome.completed


def test_an_error_event_ends_what_is_forwarded_and_names_the_failure() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    block = _event("message_start", START) + _event("error", error)
    forwarded, outcome = _watch(block, None)
    assert forwarded == _event("message_start", START)
    assert outcome.error == "upstream stream error: busy"
    assert outcome.error_status == ERROR_STATUS["overloaded_error"]
