"""The gateway application: built from a config, state created at startup, passed explicitly.

A FastAPI app: the admin API is typed FastAPI routes (:mod:`gateway.admin.router`: models, the
admin token as a dependency, its OpenAPI at ``/admin/openapi.json``); the inference doors,
``/health``, ``/ready``, ``/metrics``, feedback and the console are plain Starlette routes of it,
with no dependency or validation on their path. FastAPI's own ``/openapi.json`` and ``/docs``
are off.

Startup (lifespan): one aiohttp session for every back-end, litellm imported offline, the traffic
store opened with its async writer, metrics and tracer built. Shutdown: stop taking requests,
wait up to ``limits.drain_timeout_s`` for those in flight (streams included), flush the writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.admin import api as api_admin
from gateway.admin.operations import act_on_release
from gateway.admin.router import admin_router
from gateway.backends.pricing import PriceBook
from gateway.background import LeasedLoop
from gateway.config import LimitsConfig, SwitchyardConfig
from gateway.console.routes import Console
from gateway.doors import feedback as api_feedback
from gateway.doors.anthropic import handlers as api_anthropic
from gateway.doors.openai import handlers as api_openai
from gateway.doors.responses import handlers as api_responses
from gateway.memory_trim import trim_periodically
from gateway.metrics import GatewayMetrics
from gateway.recording.handle import RecorderHandle, open_recorder
from gateway.recording.process import CLOSE_DEADLINE_S
from gateway.recording.sink import RecordSink
from gateway.routing.release import LiveRelease
from gateway.startup import build_state, join_fleet
from gateway.state import GatewayState
from gateway.tracing import TRACES_CLOSE_S, build_tracing, close_tracer
from traffic.retention import scheduled_pass
from traffic.store import StoreError
from traffic.tool_calls import warm as warm_tool_calls

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger(__name__)

# After the drain deadline, how long aborted requests get to send their error and be recorded.
ABORT_GRACE_S = 5.0


def stop_deadline_s(limits: LimitsConfig) -> float:
    """The longest a gateway takes to stop after SIGTERM, its own deadlines added up: the drain
    (``limits.drain_timeout_s``), the aborted requests' grace, the record writer's close (its
    process's drain and exit), the last spans' export. The other steps of the shutdown (logged
    with their times) take milliseconds. What waits for a gateway to stop (the ``--workers``
    supervisor, the deploy manifests' grace periods) waits at least this long."""
    return limits.drain_timeout_s + ABORT_GRACE_S + CLOSE_DEADLINE_S + TRACES_CLOSE_S


def _live_gauges(
    state: GatewayState, recorder: RecorderHandle | None
) -> Callable[[], Iterable[tuple[str, str, dict[str, str], float]]]:
    def read() -> Iterable[tuple[str, str, dict[str, str], float]]:
        for name, breaker in state.breakers.items():
            yield (
                "switchyard_breaker_state",
                "Circuit breaker per back-end: 0 closed, 1 half-open, 2 open.",
                {"target": name},
                float(breaker.state),
            )
        for target, pool in state.targets.pools().items():
            for url, rep in pool.replicas.items():
                labels = {"target": target, "replica": url}
                yield (
                    "switchyard_replica_healthy",
                    "Replica health (1 up).",
                    labels,
                    float(rep.healthy),
                )
                yield (
                    "switchyard_replica_in_flight",
                    "Requests in flight per replica.",
                    labels,
                    float(rep.in_flight),
                )
        for target, replicas in state.targets.kv_event_counters().items():
            for url, counters in replicas.items():
                labels = {"target": target, "replica": url}
                for key, value in counters.items():
                    yield (
                        f"switchyard_kv_events_{key}",
                        f"KV cache event subscriber: {key} (a counter).",
                        labels,
                        value,
                    )
        if recorder is not None:
            for key, value in recorder.stats().items():
                yield (f"switchyard_store_{key}", f"Traffic store writer: {key}.", {}, value)
        limiter = state.admission.rate_limiter
        if limiter is not None:
            for key, value in limiter.stats().items():
                yield (f"switchyard_ratelimit_{key}", f"Rate limiter: {key}.", {}, value)

    return read


async def _step(name: str, step: Awaitable[object]) -> None:
    """One step of the shutdown, timed in the log: where an orchestrator's grace period went
    (the deploy manifests' grace periods add these up)."""
    began = time.monotonic()
    try:
        await step
    finally:
        log.info("shutdown: %s in %.2f s", name, time.monotonic() - began)


def _as_handle(sink: RecordSink | None) -> RecorderHandle | None:
    """An injected sink that is a full handle (tests pass one) also serves feedback."""
    return sink if isinstance(sink, RecorderHandle) else None


async def drain(state: GatewayState, timeout_s: float) -> None:
    """Wait for in-flight requests (streams included) to finish; past ``timeout_s`` (counted
    from :meth:`InFlightRequests.begin_drain`, which the server calls when shutdown starts) they are
    ended with an error in their door's shape and recorded."""
    requests = state.requests
    requests.begin_drain(timeout_s)
    deadline = time.monotonic() + timeout_s + ABORT_GRACE_S
    while requests.count > 0 and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    if requests.count:
        log.warning("drain timed out with %d requests in flight", requests.count)


def create_app(
    config: SwitchyardConfig,
    config_path: Path | None = None,
    recorder: RecordSink | None = None,
    span_exporter: SpanExporter | None = None,
) -> FastAPI:
    """Build the app. ``recorder`` overrides the store section, ``span_exporter`` the trace
    exporter (tests inject both)."""
    console = Console() if config.console.enabled else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        prices = await asyncio.to_thread(PriceBook.load)  # litellm's price map, read as data
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, enable_cleanup_closed=True)
        # Decompressed as it arrives: providers gzip their JSON answers (and may their streams)
        # for a client that accepts it, as aiohttp's requests say; a pass-through reads and
        # relays the plain bytes. An uncompressed answer (vLLM) goes through no decompressor.
        session = aiohttp.ClientSession(connector=connector, auto_decompress=True)
        handle: RecorderHandle | None = None
        sink = recorder
        if sink is None and config.store.enabled:
            handle = await open_recorder(config.store)
            sink = handle
        metrics = GatewayMetrics()
        state = build_state(config, config_path, session, sink, metrics, prices, handle)
        state.tracer_provider, state.tracing = build_tracing(config.telemetry, span_exporter)
        metrics.add_live_gauges(_live_gauges(state, handle))
        store = handle if handle is not None else _as_handle(sink)
        if store is not None:  # a promotion kept in the store outlives this process
            state.reloader.release = LiveRelease(store.backend)
        fleet = await join_fleet(state)  # the state other gateway processes share
        await state.reloader.restore()
        monitor = state.release_monitor
        if monitor is not None:  # its decisions carried out by the admin operations
            monitor.act = functools.partial(act_on_release, state, store)
        # The tool-call validator for agent steps' fallback, imported off the loop.
        warming = asyncio.get_running_loop().run_in_executor(None, warm_tool_calls)
        metrics.in_flight.set_function(lambda: state.requests.count)  # was declared, never set
        app.state.switchyard = state
        app.state.recorder = store
        if console is not None:
            console.start(app)
        retention: LeasedLoop | None = None
        if handle is not None:  # deletes what is past its key's window, on the fleet's lease
            from gateway.admin.legacy_records import LIVE_TRANSLATOR  # the doors' translators

            retention = LeasedLoop("retention pass", (StoreError, OSError))
            backend = handle.backend
            retention.start(
                lambda: scheduled_pass(backend, state.config.store, LIVE_TRANSLATOR),
                lambda: state.config.store.retention_interval_s,
                lambda lease_s: state.reloader.fleet.lead("retention", lease_s),
            )
        # Startup objects (litellm alone leaves ~300k) never die; keeping them out of the
        # collector's generations cut full-collection pauses from ~1 s to ~0.1 s under load.
        gc.collect()
        gc.freeze()
        trim_every = config.gateway.memory_trim_interval_s
        trimmer = asyncio.create_task(trim_periodically(trim_every)) if trim_every else None
        try:
            yield
        finally:
            if trimmer is not None:
                trimmer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await trimmer
            await warming
            await _step("drain", drain(state, state.config.gateway.limits.drain_timeout_s))
            if console is not None:
                await _step("console", console.aclose())  # a weight swap it started is stopped
            if retention is not None:
                await _step("retention", retention.aclose())
            await _step("fleet", fleet.aclose())
            await _step("back-ends", state.targets.aclose())
            await _step("episodes", state.decider.episodes.aclose())
            admission = state.admission
            if admission.rate_limiter is not None:
                await _step("rate limiter", admission.rate_limiter.close())
            if state.login_throttle is not None:
                await _step("login throttle", state.login_throttle.close())
            if admission.budget is not None:
                await _step("budget", admission.budget.close())
            if handle is not None:
                await _step("record writer", handle.aclose())
            if state.tracer_provider is not None:
                await _step("traces", close_tracer(state.tracer_provider))
            await session.close()

    async def health(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    async def ready(request: Request) -> Response:
        state: GatewayState = request.app.state.switchyard
        if state.requests.draining:
            return Response(b'{"status":"draining"}', 503, media_type="application/json")
        handle: RecorderHandle | None = request.app.state.recorder
        if handle is not None and not handle.writer.healthy:
            # Its tasks keep failing: what this process answers may go unrecorded (spooled or
            # dead-lettered at best), so a balancer should send traffic elsewhere.
            body = b'{"status":"recorder unhealthy"}'
            return Response(body, 503, media_type="application/json")
        return Response(b'{"status":"ready"}', media_type="application/json")

    async def metrics_endpoint(request: Request) -> Response:
        state: GatewayState = request.app.state.switchyard
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")

    # The doors first: the router tries the routes in order, a regex match each (~1 us here),
    # and /v1/messages behind the admin routes paid ~25 of them a request (3% of its CPU).
    routes: list[BaseRoute] = [
        Route("/v1/chat/completions", api_openai.chat_completions, methods=["POST"]),
        *api_anthropic.routes(),
        *api_responses.routes(),
        Route("/v1/completions", api_openai.completions, methods=["POST"]),
        Route("/v1/models", api_openai.list_models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        *admin_router().routes,
        *api_feedback.routes(),
        *(console.routes() if console is not None else []),
    ]
    app = FastAPI(lifespan=lifespan, routes=routes, openapi_url=None, docs_url=None, redoc_url=None)
    app.state.console = console
    api_admin.install_error_handlers(app)
    return app
