"""One OpenTelemetry span per request, carrying the route taken; the last spans sent at
shutdown, within a bound."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.config import TelemetryConfig
from gateway.tracing import build_tracer, close_tracer
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config


def test_traces_are_off_by_default() -> None:
    assert build_tracer(TelemetryConfig()) == (None, None)


def test_each_request_exports_one_span_with_route_attributes(frontier_sim) -> None:  # type: ignore[no-untyped-def]
    exporter = InMemorySpanExporter()
    gw = GatewayThread(gateway_config(frontier_sim.base_url), span_exporter=exporter).start()
    try:
        resp = httpx.post(
            gw.base_url + "/v1/chat/completions",
            json={"model": "auto", "messages": [{"role": "user", "content": "trace me"}]},
        )
        assert resp.status_code == 200
    finally:
        gw.stop()
    spans = exporter.get_finished_spans()
    assert len(spans) == 1
    attrs = dict(spans[0].attributes or {})
    assert attrs["switchyard.request_id"] == resp.headers["x-request-id"]
    assert attrs["switchyard.route.target"] == "local"
    assert attrs["http.response.status_code"] == 200


class _Collector(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector on loopback: keeps each export's body, answers 200."""

    bodies: list[bytes]

    def do_POST(self) -> None:
        self.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    bodies: list[bytes] = []
    handler = type("Handler", (_Collector,), {"bodies": bodies})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", bodies
    server.shutdown()
    server.server_close()


def _one_span(endpoint: str) -> TracerProvider:
    provider, tracer = build_tracer(TelemetryConfig(traces="otlp", otlp_endpoint=endpoint))
    assert provider is not None and tracer is not None
    with tracer.start_as_current_span("a request"):
        pass
    return provider


async def test_closing_the_tracer_sends_the_queued_spans(
    collector: tuple[str, list[bytes]],
) -> None:
    url, bodies = collector
    assert await close_tracer(_one_span(url))
    assert len(bodies) == 1 and b"a request" in bodies[0]


async def test_a_collector_that_never_answers_does_not_hold_the_shutdown() -> None:
    """It accepts the connection and never answers (a hung collector): the close gives up at
    its bound, and the exporter's thread, a daemon, does not hold the process's exit."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        provider = _one_span(f"http://127.0.0.1:{silent.getsockname()[1]}")
        assert not await close_tracer(provider, timeout_s=0.2)
        stuck = [t for t in threading.enumerate() if t.name == "switchyard-traces-close"]
        assert stuck and all(t.daemon for t in stuck)
