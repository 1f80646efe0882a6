"""OpenTelemetry traces that follow a request across hops. Off by default.

``telemetry.traces``: ``off`` (no tracer exists; the request path does no tracing work and the
SDK is never imported), ``console`` or ``otlp`` (OTLP/HTTP protobuf to
``telemetry.otlp_endpoint`` + ``/v1/traces``). When on, each exchange gets a trace
(:mod:`gateway.tracing.spans` draws it): a child of the client's W3C ``traceparent`` when it
sent one, with spans for the routing decision, each upstream attempt and the record's
submission, GenAI semantic-convention attributes beside ``switchyard.*`` ones
(:mod:`gateway.tracing.genai`), and each attempt's ``traceparent`` sent upstream (vLLM, the
providers), so a vLLM replica started with its OTLP exporter
(``serving.vllm_config.OtlpTraces``) adds its span to the same trace. docs/telemetry.md: what a
trace holds, and what it costs on and off.

Sampling (``telemetry.sample_ratio``) is the W3C parent's when the client sent one, else that
share of trace ids; an unsampled request makes no spans and sends its ``traceparent`` upstream
with the sampled flag off. The provider is our own, never the global one: a library's spans do
not leak into ours.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Final

from gateway.config import TelemetryConfig

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from gateway.tracing.spans import Tracing

log = logging.getLogger(__name__)

# How long the shutdown waits for the last spans to be sent (gateway.app.stop_deadline_s).
TRACES_CLOSE_S: Final = 5.0
OTLP_TRACES_PATH: Final = "/v1/traces"  # OTLP/HTTP's path for spans (the OTLP spec)


def otlp_traces_url(config: TelemetryConfig) -> str:
    """Where ``otlp`` traces are posted."""
    return config.otlp_endpoint.rstrip("/") + OTLP_TRACES_PATH


def build_tracing(
    config: TelemetryConfig, exporter: SpanExporter | None = None
) -> tuple[TracerProvider | None, Tracing | None]:
    """A provider of our own and the requests' :class:`~gateway.tracing.spans.Tracing`, or
    (None, None) when off. ``exporter`` (tests) replaces the configured one, synchronously."""
    if config.traces == "off" and exporter is None:
        return None, None
    # Imported when traces are on: the SDK would slow every start-up (docs/hot_path.md).
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    from gateway.tracing.spans import Tracing

    provider = TracerProvider(
        resource=Resource.create({"service.name": config.service_name}),
        sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
    )
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif config.traces == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        otlp = OTLPSpanExporter(endpoint=otlp_traces_url(config))
        provider.add_span_processor(BatchSpanProcessor(otlp))
    return provider, Tracing(provider.get_tracer("switchyard.gateway"))


async def close_tracer(provider: TracerProvider, timeout_s: float = TRACES_CLOSE_S) -> bool:
    """Send the spans still queued and shut ``provider`` down, giving up after ``timeout_s``:
    True when it finished.

    Why the bound: with the collector down, the exporter's retries hold the SDK's shutdown for
    up to 30 s, past an orchestrator's grace period, and the records are flushed by then: only
    spans are at stake. The shutdown runs on a daemon thread, which does not hold the process's
    exit when it is given up on."""
    thread = threading.Thread(target=provider.shutdown, name="switchyard-traces-close", daemon=True)
    thread.start()
    await asyncio.to_thread(thread.join, timeout_s)
    if thread.is_alive():
        log.warning(
            "traces: the exporter did not finish within %.1f s; unsent spans dropped", timeout_s
        )
        return False
    return True
