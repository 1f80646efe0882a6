"""OpenTelemetry traces: one span per request with route attributes. Off by default.

When off, no tracer exists and the request path does no tracing work at all.
"""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Tracer, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

from gateway.config import TelemetryConfig


def build_tracer(
    config: TelemetryConfig, exporter: SpanExporter | None = None
) -> tuple[TracerProvider | None, Tracer | None]:
    """A provider of our own (not the global one) and its tracer, or (None, None) when off."""
    if config.traces == "off" and exporter is None:
        return None, None
    provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif config.traces == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = (config.otlp_endpoint or "http://127.0.0.1:4318").rstrip("/") + "/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    tracer = provider.get_tracer("switchyard.gateway")
    return provider, tracer  # type: ignore[return-value]
