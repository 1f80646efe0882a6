"""OpenTelemetry traces: one span per request with route attributes. Off by default.

When off, no tracer exists and the request path does no tracing work at all.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Final

from gateway.config import TelemetryConfig

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Tracer, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)

# How long the shutdown waits for the last spans to be sent (gateway.app.stop_deadline_s).
TRACES_CLOSE_S: Final = 5.0


def build_tracer(
    config: TelemetryConfig, exporter: SpanExporter | None = None
) -> tuple[TracerProvider | None, Tracer | None]:
    """A provider of our own (not the global one) and its tracer, or (None, None) when off."""
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
