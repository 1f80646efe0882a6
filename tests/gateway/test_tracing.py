"""One OpenTelemetry span per request, carrying the route taken."""

from __future__ import annotations

import httpx
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.config import TelemetryConfig
from gateway.tracing import build_tracer
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
