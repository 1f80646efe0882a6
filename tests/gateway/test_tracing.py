"""Traces across hops, the gateway's half: a request's trace is a child of the client's
``traceparent``, holds the routing decision, each upstream attempt (a stream's with its first
token) and the record's submission, with GenAI attributes; each attempt's ``traceparent`` reaches
the upstream (vLLM and every provider path). Traces off: nothing is sent, nothing is made. The
last spans are sent at shutdown, within a bound. (vLLM's half: ``test_trace_vllm.py``.)"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.config import TelemetryConfig
from gateway.tracing import build_tracing, close_tracer
from loadtests.bench.sim_gateway import simulator_backends
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.fixtures.otlp_receiver import OtlpReceiver

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
CLIENT_HEADERS = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "tracestate": "ide=7"}
CHAT = {"model": "auto", "messages": [{"role": "user", "content": "trace me"}], "max_tokens": 8}


def test_traces_are_off_by_default() -> None:
    assert build_tracing(TelemetryConfig()) == (None, None)


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def _spans(exporter: InMemorySpanExporter, count: int) -> list[ReadableSpan]:
    """The finished spans once there are ``count`` (a stream's end after its last byte)."""
    deadline = time.monotonic() + 5
    while len(exporter.get_finished_spans()) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return list(exporter.get_finished_spans())


def _by_name(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def _parent(span: ReadableSpan) -> str:
    return _hex(span.parent.span_id, 16) if span.parent is not None else ""


def _id(span: ReadableSpan) -> str:
    assert span.context is not None
    return _hex(span.context.span_id, 16)


def test_a_request_is_a_child_of_the_clients_trace_with_its_hops(frontier_sim: Any) -> None:
    exporter = InMemorySpanExporter()
    with GatewayThread(gateway_config(frontier_sim.base_url), span_exporter=exporter) as gw:
        resp = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, headers=CLIENT_HEADERS)
        assert resp.status_code == 200
        spans = _by_name(_spans(exporter, 4))
    (root,) = spans["switchyard chat.completions"]
    (route,) = spans["switchyard.route"]
    (attempt,) = spans["chat sim-local"]
    (record,) = spans["switchyard.record"]
    assert root.context is not None and root.parent is not None
    assert {_hex(s.context.trace_id, 32) for s in (root, route, attempt, record)} == {CLIENT_TRACE}  # type: ignore[union-attr]
    assert _parent(root) == CLIENT_SPAN and root.parent.is_remote
    assert str(root.context.trace_state.to_header()) == "ide=7"
    assert {_parent(s) for s in (route, attempt, record)} == {_id(root)}
    assert (root.kind, attempt.kind) == (SpanKind.SERVER, SpanKind.CLIENT)
    a = dict(root.attributes or {})
    assert a["switchyard.request_id"] == resp.headers["x-request-id"]
    assert a["switchyard.route.target"] == "local"
    assert a["http.response.status_code"] == 200
    assert a["gen_ai.operation.name"] == "chat"
    assert (a["gen_ai.request.model"], a["gen_ai.response.model"]) == ("auto", "sim-local")
    assert a["gen_ai.provider.name"] == "vllm" and "x-request-id" not in a
    assert a["gen_ai.request.max_tokens"] == 8
    usage = resp.json()["usage"]
    assert a["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert a["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    b = dict(attempt.attributes or {})
    assert b["gen_ai.request.model"] == "sim-local"
    assert b["gen_ai.provider.name"] == b["gen_ai.system"] == "vllm"
    assert b["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
    assert b["switchyard.target"] == "local" and b["switchyard.attempt"] == 1
    assert b["switchyard.replica"] == frontier_sim.base_url
    r = dict(route.attributes or {})
    assert r["switchyard.decision.target"] == "local" and r["switchyard.decision.kind"]
    assert dict(record.attributes or {})["switchyard.request_id"] == a["switchyard.request_id"]


def test_a_stream_attempt_marks_its_first_token_and_ends_with_the_stream(
    frontier_sim: Any,
) -> None:
    exporter = InMemorySpanExporter()
    body = {**CHAT, "model": "gpt-4o-mini", "stream": True}
    with GatewayThread(gateway_config(frontier_sim.base_url), span_exporter=exporter) as gw:
        with httpx.stream("POST", gw.base_url + "/v1/chat/completions", json=body) as resp:
            assert resp.status_code == 200
            text = resp.read().decode()
        spans = _by_name(_spans(exporter, 4))
    assert "[DONE]" in text
    (root,) = spans["switchyard chat.completions"]
    (attempt,) = spans["chat gpt-4o-mini"]
    assert root.parent is None  # no traceparent: the gateway starts the trace
    (first,) = [e for e in attempt.events if e.name == "first_token"]
    assert attempt.start_time is not None and attempt.end_time is not None
    assert attempt.start_time < first.timestamp <= attempt.end_time
    b: dict[str, Any] = dict(attempt.attributes or {})
    assert b["gen_ai.provider.name"] == "openai" and b["gen_ai.request.stream"] is True
    assert b["gen_ai.usage.output_tokens"] > 0 and b["gen_ai.response.time_to_first_chunk"] > 0
    assert dict[str, Any](root.attributes or {})["gen_ai.response.time_to_first_chunk"] > 0


def test_each_failed_attempt_is_a_span_with_its_error(frontier_sim: Any) -> None:
    with socket.socket() as s:  # a replica nobody listens on: the local target fails over
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    backends = simulator_backends(frontier_sim.base_url)
    backends["local"]["replicas"] = [dead]
    config = gateway_config(frontier_sim.base_url, backends=backends)
    exporter = InMemorySpanExporter()
    with GatewayThread(config, span_exporter=exporter) as gw:
        resp = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT)
        assert resp.status_code == 200
        spans = _by_name(_spans(exporter, 5))
    (failed,) = spans["chat sim-local"]
    (served,) = spans["chat gpt-4o-mini"]
    assert failed.status.status_code == StatusCode.ERROR
    f = dict(failed.attributes or {})
    assert f["error.type"] == "UpstreamUnavailableError" and f["http.response.status_code"] == 503
    assert dict(served.attributes or {})["switchyard.attempt"] == 2
    (root,) = spans["switchyard chat.completions"]
    assert dict(root.attributes or {})["switchyard.attempts"] == 2
    assert root.status.status_code != StatusCode.ERROR


def test_an_invalid_traceparent_starts_a_trace(frontier_sim: Any) -> None:
    exporter = InMemorySpanExporter()
    with GatewayThread(gateway_config(frontier_sim.base_url), span_exporter=exporter) as gw:
        bad = {"traceparent": f"00-{'0' * 32}-{CLIENT_SPAN}-01"}  # an all-zero trace id
        assert httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, headers=bad).is_success
        spans = _by_name(_spans(exporter, 4))
    (root,) = spans["switchyard chat.completions"]
    assert root.parent is None and root.context is not None and root.context.trace_id != 0


# -- the traceparent upstream -------------------------------------------------------------------
_OPENAI_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "upstream-model",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
_ANTHROPIC_ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-haiku-4-5",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1},
}


class _Upstream(http.server.BaseHTTPRequestHandler):
    """An OpenAI- and Anthropic-format upstream that keeps each request's path and headers."""

    seen: list[tuple[str, dict[str, str]]]

    def do_GET(self) -> None:  # the replica pool's health probe
        self._answer(200 if self.path == "/health" else 404, {})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        answer = _ANTHROPIC_ANSWER if self.path.endswith("/messages") else _OPENAI_ANSWER
        self._answer(200, answer)

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    seen: list[tuple[str, dict[str, str]]] = []
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), type("Upstream", (_Upstream,), {"seen": seen})
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def _upstream_config(url: str, **overrides: Any) -> Any:
    backends = {
        "local": {"kind": "vllm", "model": "sim-local", "replicas": [url]},
        "openai": {"kind": "litellm", "model": "openai/gpt-4o-mini", "api_base": url + "/v1"},
        "anthropic": {"kind": "litellm", "model": "anthropic/claude-haiku-4-5", "api_base": url},
        "acompletion": {
            "kind": "litellm",
            "model": "anthropic/claude-haiku-4-5",
            "api_base": url,
            "translation": "acompletion",
        },
    }
    aliases = {name: name for name in backends}
    routing = {"default": "local", "aliases": aliases}
    return gateway_config(url, backends=backends, routing=routing, **overrides)


# (door path, model, upstream path): vLLM; OpenAI passed through; Anthropic passed through
# (the Messages door); a chat body to Anthropic through litellm's acompletion.
_PATHS = [
    ("/v1/chat/completions", "local", "/v1/chat/completions"),
    ("/v1/chat/completions", "openai", "/v1/chat/completions"),
    ("/v1/messages", "anthropic", "/v1/messages"),
    ("/v1/chat/completions", "acompletion", "/v1/messages"),
]


def test_each_attempts_traceparent_reaches_its_upstream(
    upstream: tuple[str, list[tuple[str, dict[str, str]]]],
) -> None:
    url, seen = upstream
    exporter = InMemorySpanExporter()
    with GatewayThread(_upstream_config(url), span_exporter=exporter) as gw:
        for door, model, _ in _PATHS:
            body = {**CHAT, "model": model}
            resp = httpx.post(gw.base_url + door, json=body, headers=CLIENT_HEADERS, timeout=60)
            assert resp.status_code == 200, resp.text
        spans = _spans(exporter, 4 * len(_PATHS))
    attempts = [s for s in spans if s.kind == SpanKind.CLIENT]
    assert len(attempts) == len(_PATHS) == len(seen)
    for (_, model, path), (seen_path, headers), attempt in zip(_PATHS, seen, attempts, strict=True):
        assert seen_path == path
        assert headers["traceparent"] == f"00-{CLIENT_TRACE}-{_id(attempt)}-01", model
        assert headers["tracestate"] == "ide=7"
        assert dict(attempt.attributes or {})["switchyard.target"] == model


def test_with_traces_off_nothing_is_traced_or_sent_upstream(
    upstream: tuple[str, list[tuple[str, dict[str, str]]]],
) -> None:
    url, seen = upstream
    with GatewayThread(_upstream_config(url)) as gw:
        assert gw.state.tracing is None
        body = {**CHAT, "model": "local"}
        resp = httpx.post(gw.base_url + "/v1/chat/completions", json=body, headers=CLIENT_HEADERS)
        assert resp.status_code == 200
    ((_, headers),) = seen
    assert "traceparent" not in headers and "tracestate" not in headers


def test_unsampled_requests_make_no_spans_and_tell_the_upstream_so(
    upstream: tuple[str, list[tuple[str, dict[str, str]]]],
) -> None:
    """``sample_ratio: 0``: a request of its own is not recorded, and its traceparent upstream
    has the sampled flag off (vLLM records nothing either); a client's sampled flag decides."""
    url, seen = upstream
    exporter = InMemorySpanExporter()
    config = _upstream_config(url, telemetry={"sample_ratio": 0.0})
    body = {**CHAT, "model": "local"}
    with GatewayThread(config, span_exporter=exporter) as gw:
        assert httpx.post(gw.base_url + "/v1/chat/completions", json=body).is_success
        assert exporter.get_finished_spans() == ()
        sampled = httpx.post(
            gw.base_url + "/v1/chat/completions", json=body, headers=CLIENT_HEADERS
        )
        assert sampled.is_success
        spans = _spans(exporter, 4)
    (_, unsampled_headers), (_, sampled_headers) = seen
    version, trace, _, flags = unsampled_headers["traceparent"].split("-")
    assert version == "00" and trace != CLIENT_TRACE and int(flags, 16) & 1 == 0
    assert sampled_headers["traceparent"].startswith(f"00-{CLIENT_TRACE}-")
    assert {_hex(s.context.trace_id, 32) for s in spans} == {CLIENT_TRACE}  # type: ignore[union-attr]


def test_otlp_traces_reach_a_collector_over_http(frontier_sim: Any) -> None:
    """The configured exporter (OTLP/HTTP protobuf, batched), decoded by a real receiver."""
    with OtlpReceiver() as receiver:
        telemetry = {"traces": "otlp", "otlp_endpoint": receiver.base_url}
        with GatewayThread(gateway_config(frontier_sim.base_url, telemetry=telemetry)) as gw:
            resp = httpx.post(
                gw.base_url + "/v1/chat/completions", json=CHAT, headers=CLIENT_HEADERS
            )
            assert resp.status_code == 200
        # the gateway's shutdown sent the batch
        spans = receiver.wait_for(lambda s: len(s) >= 4, CLIENT_TRACE, timeout_s=10)
    (root,) = [s for s in spans if s.name == "switchyard chat.completions"]
    assert root.parent_span_id == CLIENT_SPAN and root.service == "switchyard-gateway"
    assert root.attributes["gen_ai.response.model"] == "sim-local"


# -- shutdown -----------------------------------------------------------------------------------
def _one_span(endpoint: str) -> TracerProvider:
    provider, tracing = build_tracing(TelemetryConfig(traces="otlp", otlp_endpoint=endpoint))
    assert provider is not None and tracing is not None
    with tracing.tracer.start_as_current_span("a request"):
        pass
    return provider


async def test_closing_the_tracer_sends_the_queued_spans() -> None:
    with OtlpReceiver() as receiver:
        assert await close_tracer(_one_span(receiver.base_url))
        assert receiver.exports == 1
        assert [s.name for s in receiver.spans()] == ["a request"]


async def test_a_collector_that_never_answers_does_not_hold_the_shutdown() -> None:
    """It accepts the connection and never answers (a hung collector): the close gives up at
    its bound, and the exporter's thread, a daemon, does not hold the process's exit."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        provider = _one_span(f"http://127.0.0.1:{silent.getsockname()[1]}")
        assert not await close_tracer(provider, timeout_s=0.2)
        stuck = [t for t in threading.enumerate() if t.name == "switchyard-traces-close"]
        assert stuck and all(t.daemon for t in stuck)
