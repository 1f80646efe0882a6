"""One request's way through the gateway: route, call with failover, answer, record.

    body -> validate -> RequestFeatures -> policy.decide -> [target, fallback...]
      for each target (at most retry.max_attempts, breaker closed, retry budget left):
          complete() / open_stream()   -> success: answer the client, stop
          UpstreamError retriable       -> breaker.failure, next target
          UpstreamError not retriable   -> answer with it (the input was refused)
          limits.request_timeout_s past -> 504, no further target (the deadline spans all tries,
                                           until the answer or a stream's first byte)
      none left -> AllBackendsFailedError (every attempt's error, last one's status)
    finally: metrics, trace span, one InferenceRecord to the async writer

A stream fails over only before its first byte. After that a failure is sent to the client as an
OpenAI error event (``data: {"error": ...}``) and no ``[DONE]``, so the SDK raises instead of
returning a silently truncated answer; the record says what happened.

A translating door's record also keeps what the served model saw (``canonical_request`` and
``canonical_response``): the translated body, and the answer the door rendered, or the chunks its
encoder consumed, or a native answer converted (``FrontDoor.native_as_chat``). The OpenAI doors'
bodies already are that: they store neither and do no extra work.

Shutdown: an exchange still in flight at the drain deadline is aborted (:meth:`Exchange.abort`
cancels the task serving it); the cancellation is caught where the exchange is served and turned
into a 503 ``server_shutting_down`` in the door's shape (a stream gets its error event), recorded
like any answer. Any other cancellation (the client went away) is recorded as 499. Every exchange
is finished, and recorded, exactly once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import orjson
from starlette.responses import Response, StreamingResponse

from gateway.auth.keys import ANONYMOUS, Principal
from gateway.backends.base import Backend, UpstreamCall, UpstreamResult, UpstreamStream, Usage
from gateway.errors import (
    AllBackendsFailedError,
    GatewayError,
    ShuttingDownError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnavailableError,
    error_body,
    error_response_parts,
)
from gateway.shadow import should_shadow, start_shadow
from gateway.state import GatewayState, Routing
from gateway.store.ids import new_id
from gateway.store.records import InferenceRecord
from gateway.wire.assemble import assemble_chat, assemble_completion, parse_stream
from gateway.wire.sse import encode_event
from router.decision import RouteDecision
from router.features import RequestFeatures

T = TypeVar("T")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class StreamEncoder(Protocol):
    """Turns the internal stream (OpenAI chat/completion chunks) into one wire format's events."""

    def encode(self, chunk: dict[str, Any]) -> bytes: ...

    def finish(self) -> bytes:
        """Events after the last chunk (the upstream sent ``[DONE]``)."""
        ...

    def error(self, message: str) -> bytes:
        """The event that tells the client the stream failed mid-answer."""
        ...

    def final_response(self) -> dict[str, Any] | None:
        """The whole response in this wire format, for the record."""
        ...


@dataclass(frozen=True, slots=True)
class FrontDoor:
    """How one API door speaks: the internal format is OpenAI's chat/completions.

    ``render``/``stream_encoder`` of ``None`` mean "pass the upstream bytes through" (the OpenAI
    doors: no re-encoding on the hot path). ``error_body`` reshapes an OpenAI error body.
    A back-end may answer natively in the door's own format (the Messages door to Anthropic):
    those bytes go through as they are too, ``assemble_native`` builds the record's answer
    from the stream's events once it ended, and ``native_as_chat`` converts that answer into a
    chat completion for the record's ``canonical_response`` (``ValueError`` when it cannot).
    """

    endpoint: str
    wire_format: str
    render: Callable[[dict[str, Any], Exchange], dict[str, Any]] | None = None
    stream_encoder: Callable[[Exchange], StreamEncoder] | None = None
    error_body: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None
    assemble_native: Callable[[bytes], dict[str, Any] | None] | None = None
    native_as_chat: Callable[[dict[str, Any]], dict[str, Any]] | None = None


@dataclass(slots=True)
class Exchange:
    """What the gateway knows about one request while serving it."""

    id: str
    endpoint: str
    wire_format: str
    started: float
    request: dict[str, Any] | None = None
    canonical_request: dict[str, Any] | None = None
    canonical_response: dict[str, Any] | None = None
    features: RequestFeatures | None = None
    decision: RouteDecision | None = None
    target: str | None = None
    served_model: str | None = None
    replica: str | None = None
    weights_version: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)
    ttft_s: float | None = None
    door: FrontDoor | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    # What translating the client's body to the internal one left out; moot (not recorded) when
    # the answer came from a native pass-through of the client's own body.
    translation_notes: dict[str, Any] = field(default_factory=dict)
    native: bool = False
    principal: Principal = ANONYMOUS
    task: asyncio.Task[Any] | None = None  # the task serving it now (abort cancels it)
    aborted: bool = False  # ended by shutdown past the drain deadline
    finished: bool = False

    def abort(self) -> None:
        """End this exchange now (shutdown): its server answers 503 and records it."""
        self.aborted = True
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def route_headers(self) -> dict[str, str]:
        h = {"x-request-id": self.id, "request-id": self.id}
        if self.target is not None:
            h["x-switchyard-target"] = self.target
        if self.served_model is not None:
            h["x-switchyard-model"] = self.served_model
        if self.replica is not None:
            h["x-switchyard-replica"] = self.replica
        if self.weights_version is not None:
            h["x-switchyard-weights-version"] = self.weights_version
        if self.decision is not None:
            h["x-switchyard-policy-version"] = self.decision.policy_version
            h["x-switchyard-route-reason"] = self.decision.reason
        return h


def new_exchange(state: GatewayState, door: FrontDoor) -> Exchange:
    """Start an exchange; :func:`finish` ends it (exactly once), which also ends its in-flight."""
    ex = Exchange(new_id(), door.endpoint, door.wire_format, time.perf_counter(), door=door)
    ex.task = asyncio.current_task()
    state.live[ex.id] = ex
    return ex


def answer_cancelled(state: GatewayState, ex: Exchange) -> Response | None:
    """After the task serving ``ex`` was cancelled: the 503 to send when shutdown aborted it
    (the cancellation is consumed so that the answer can go out); None when the client went
    away instead: recorded as 499, and the caller re-raises the cancellation."""
    task = asyncio.current_task()
    if ex.aborted and task is not None:
        task.uncancel()
        return error_response(
            state, ex, ShuttingDownError("The gateway is shutting down; retry the request.")
        )
    finish(state, ex, 499, None, Usage(), error="cancelled", stream=False)
    return None


async def _with_failover(
    state: GatewayState,
    routing: Routing,
    ex: Exchange,
    attempt: Callable[[Backend], Awaitable[T]],
) -> T:
    assert ex.decision is not None
    max_attempts = routing.config.gateway.retry.max_attempts
    deadline_s = routing.config.gateway.limits.request_timeout_s
    deadline = ex.started + deadline_s
    errors: list[UpstreamError] = []
    state.retry_budget.record_request()
    tried = 0
    for target in ex.decision.targets:
        if tried >= max_attempts:
            break
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            errors.append(_deadline_error(deadline_s))
            break
        breaker = state.breakers[target]
        if not breaker.allow():
            errors.append(UpstreamUnavailableError(f"{target}: circuit open", backend=target))
            ex.attempts.append({"target": target, "status": 503, "error": "circuit open"})
            continue
        if tried > 0:
            if not state.retry_budget.try_spend():
                breaker.release()
                break
            state.metrics.failovers.labels(ex.target or "").inc()
        tried += 1
        ex.target = target
        t0 = time.perf_counter()
        limit = asyncio.timeout(remaining)
        try:
            async with limit:
                result = await attempt(routing.backends[target])
        except TimeoutError as exc:
            if not limit.expired():
                raise
            # The whole request's deadline passed on this try: no other target is tried.
            ms = (time.perf_counter() - t0) * 1000
            err = _deadline_error(deadline_s)
            ex.attempts.append(
                {"target": target, "status": err.status, "error": err.message, "latency_ms": ms}
            )
            breaker.release()
            raise err from exc
        except UpstreamError as exc:
            ms = (time.perf_counter() - t0) * 1000
            ex.attempts.append(
                {"target": target, "status": exc.status, "error": exc.message, "latency_ms": ms}
            )
            state.metrics.backend_errors.labels(target, type(exc).__name__).inc()
            if not exc.retriable:
                breaker.record_success()  # the back-end answered; the input was the problem
                raise
            breaker.record_failure()
            errors.append(exc)
            continue
        except BaseException:
            breaker.release()
            raise
        breaker.record_success()
        ex.attempts.append(
            {"target": target, "status": 200, "latency_ms": (time.perf_counter() - t0) * 1000}
        )
        return result
    if not errors:
        raise UpstreamUnavailableError("no target could be tried", backend="none")
    if len(errors) == 1:
        raise errors[0]
    raise AllBackendsFailedError(errors)


def _deadline_error(deadline_s: float) -> UpstreamTimeoutError:
    return UpstreamTimeoutError(
        f"the request did not get an answer within limits.request_timeout_s ({deadline_s:g} s)",
        backend="none",
    )


def error_response(state: GatewayState, ex: Exchange, exc: Exception) -> Response:
    status, headers, body = error_response_parts(exc)
    headers = {**headers, **ex.route_headers()}
    finish(state, ex, status, None, Usage(), error=body["error"]["message"], stream=False)
    if ex.door is not None and ex.door.error_body is not None:
        body = ex.door.error_body(status, body)
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


async def serve_unary(
    state: GatewayState, routing: Routing, ex: Exchange, call: UpstreamCall
) -> Response:
    try:
        result: UpstreamResult = await _with_failover(
            state, routing, ex, lambda b: b.complete(call)
        )
    except GatewayError as exc:
        return error_response(state, ex, exc)
    ex.served_model, ex.replica = result.served_model, result.replica
    ex.weights_version = result.weights_version
    ex.native = result.native
    door = ex.door
    _after_success(state, ex, call)
    if result.native or door is None or door.render is None:
        if result.native:
            ex.canonical_response = _native_as_chat(ex, result.parsed)
        cost = finish(state, ex, 200, result.parsed, result.usage, error=None, stream=False)
        return Response(result.body, 200, _with_cost(ex, cost), media_type="application/json")
    rendered = door.render(result.parsed, ex)
    ex.canonical_response = result.parsed  # the internal answer the door rendered
    cost = finish(state, ex, 200, rendered, result.usage, error=None, stream=False)
    return Response(
        orjson.dumps(rendered), 200, _with_cost(ex, cost), media_type="application/json"
    )


def _native_as_chat(ex: Exchange, native: dict[str, Any] | None) -> dict[str, Any] | None:
    """A native answer as a chat completion; None without a converter or when the body is not an
    answer (``response`` keeps it; a converter never costs a record)."""
    convert = ex.door.native_as_chat if ex.door is not None else None
    if convert is None or native is None:
        return None
    try:
        return convert(native)
    except (ValueError, TypeError):
        return None


def _with_cost(ex: Exchange, cost: float | None) -> dict[str, str]:
    headers = ex.route_headers()
    if cost is not None:
        headers["x-switchyard-cost-usd"] = f"{cost:.8f}"
    return headers


def _after_success(state: GatewayState, ex: Exchange, call: UpstreamCall) -> None:
    p_local = ex.decision.p_local if ex.decision is not None else None
    if should_shadow(state, ex.id, ex.target, p_local):
        start_shadow(state, ex.id, call)


async def serve_stream(
    state: GatewayState, routing: Routing, ex: Exchange, call: UpstreamCall
) -> Response:
    try:
        stream: UpstreamStream = await _with_failover(
            state, routing, ex, lambda b: b.open_stream(call)
        )
    except GatewayError as exc:
        return error_response(state, ex, exc)
    ex.ttft_s = time.perf_counter() - ex.started
    ex.served_model, ex.replica = stream.served_model, stream.replica
    ex.weights_version = stream.weights_version
    ex.native = stream.native
    ex.task = None  # until the response's task starts relaying (see _relay)
    return StreamingResponse(
        _relay(state, ex, stream, call),
        200,
        {**SSE_HEADERS, **ex.route_headers()},
        media_type="text/event-stream",
    )


async def _relay(
    state: GatewayState, ex: Exchange, stream: UpstreamStream, call: UpstreamCall
) -> AsyncIterator[bytes]:
    encoder = ex.door.stream_encoder(ex) if ex.door and ex.door.stream_encoder else None
    # The internal chunks the encoder consumed: the record's canonical answer (translating doors).
    consumed: list[dict[str, Any]] = []
    status, error = 200, None
    ex.task = asyncio.current_task()  # the response's task now serves it (abort cancels it)
    try:
        if ex.aborted:  # shutdown came between the first byte and this task's start
            raise asyncio.CancelledError
        if encoder is None or stream.native:
            async for block in stream:
                yield block
        else:
            async for block in stream:
                chunks = parse_stream(block)
                consumed.extend(chunks)
                encoded = b"".join(encoder.encode(c) for c in chunks)
                if encoded:
                    yield encoded
            yield encoder.finish()
    except UpstreamError as exc:
        status, error = 502, exc.message
        yield _stream_error(encoder, exc.message, "upstream_error", "stream_interrupted")
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not ex.aborted or task is None:
            status, error = 499, "client disconnected"
            raise
        task.uncancel()  # shutdown ended it: tell the client, as for a broken upstream
        status, error = 503, "the gateway is shutting down"
        yield _stream_error(encoder, error, "service_unavailable", "server_shutting_down")
    except BaseException:
        status, error = 499, "client disconnected"
        raise
    finally:
        # Recorded before the last await: a task cancelled again while closing still records.
        out = stream.outcome
        if stream.native:
            assemble_native = ex.door.assemble_native if ex.door is not None else None
            response = assemble_native(b"".join(out.raw)) if assemble_native else None
            ex.canonical_response = _native_as_chat(ex, response)
        elif encoder is not None:
            response = encoder.final_response()
            ex.canonical_response = assemble_chat(consumed) if consumed else None
        else:
            chunks = out.chunks or parse_stream(b"".join(out.raw))
            assemble = assemble_chat if ex.endpoint == "chat.completions" else assemble_completion
            response = assemble(chunks) if chunks else None
        finish(state, ex, status, response, out.usage, error=error, stream=True)
        if status == 200:
            _after_success(state, ex, call)
        await _close_quietly(stream)


def _stream_error(encoder: StreamEncoder | None, message: str, kind: str, code: str) -> bytes:
    """The event that ends a stream with an error: the door's own, or OpenAI's error event."""
    if encoder is not None:
        return encoder.error(message)
    return encode_event(error_body(message, kind, None, code))


async def _close_quietly(stream: UpstreamStream) -> None:
    try:
        await stream.aclose()
    except Exception:  # closing a broken upstream may fail again; the record already says why
        return


def finish(
    state: GatewayState,
    ex: Exchange,
    status: int,
    response: dict[str, Any] | None,
    usage: Usage,
    *,
    error: str | None,
    stream: bool,
) -> float | None:
    """Metrics, trace span and the record; sync and cheap (the writer does the I/O later).

    Returns the request's cost in USD (None when unknown). A second call is a no-op."""
    if ex.finished:
        return None
    ex.finished = True
    latency = time.perf_counter() - ex.started
    state.live.pop(ex.id, None)
    target = ex.target or "none"
    m = state.metrics
    m.requests.labels(ex.endpoint, target, str(status)).inc()
    m.latency.labels(ex.endpoint, target).observe(latency)
    if ex.ttft_s is not None:
        m.ttft.labels(ex.endpoint, target).observe(ex.ttft_s)
    backend_cfg = state.config.backends.get(ex.target) if ex.target else None
    cost = None
    if usage.prompt_tokens is not None:
        m.tokens.labels(target, "prompt").inc(usage.prompt_tokens)
        m.tokens.labels(target, "completion").inc(usage.completion_tokens or 0)
        if usage.cached_tokens:
            m.tokens.labels(target, "cached").inc(usage.cached_tokens)
        if usage.cache_creation_tokens:
            m.tokens.labels(target, "cache_write").inc(usage.cache_creation_tokens)
        if backend_cfg is not None:
            cost = state.prices.cost_usd(backend_cfg, usage)
            if cost:
                m.cost.labels(target).inc(cost)
    _account(state, ex, usage, cost)
    if state.tracer is not None:
        _span(state, ex, status, latency)
    if state.recorder is None:
        return cost
    f = ex.features
    state.recorder.submit(
        InferenceRecord(
            id=ex.id,
            ts=datetime.now(UTC),
            api_key_id=ex.principal.key_id,  # known even when the body was refused
            episode_id=f.episode_id if f else None,
            endpoint=ex.endpoint,
            wire_format=ex.wire_format,
            request=ex.request if ex.request is not None else {},
            canonical_request=ex.canonical_request,
            response=response,
            canonical_response=ex.canonical_response,
            route_target=ex.target or "",
            served_model=ex.served_model or "",
            weights_version=ex.weights_version,
            replica=ex.replica,
            policy_version=ex.decision.policy_version if ex.decision else None,
            policy_reason=ex.decision.reason if ex.decision else None,
            status=status,
            error=error,
            stream=stream,
            latency_ms=latency * 1000,
            ttft_ms=ex.ttft_s * 1000 if ex.ttft_s is not None else None,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cached_tokens=usage.cached_tokens,
            cache_creation_tokens=usage.cache_creation_tokens,
            cost_usd=cost,
            tags=_tags(f, ex),
            attempts=ex.attempts,
        )
    )
    return cost


def _account(state: GatewayState, ex: Exchange, usage: Usage, cost: float | None) -> None:
    """Spend against the key's budget now; tokens against its per-minute limit."""
    principal = ex.principal
    if principal.key_id is None:
        return
    if state.budget is not None and cost:
        state.budget.record_spend(principal.key_id, cost)
    if state.rate_limiter is not None and principal.tpm_limit is not None:
        tokens = (usage.prompt_tokens or (ex.features.prompt_tokens if ex.features else 0)) + (
            usage.completion_tokens or 0
        )
        if tokens:
            state.spawn(state.rate_limiter.record_tokens(principal, tokens))


def _tags(f: RequestFeatures | None, ex: Exchange) -> dict[str, str]:
    tags = dict(f.tags) if f else {}
    notes = ex.notes if ex.native else {**ex.translation_notes, **ex.notes}
    for key, value in notes.items():
        tags[f"note.{key}"] = value if isinstance(value, str) else orjson.dumps(value).decode()
    return tags


def _span(state: GatewayState, ex: Exchange, status: int, latency: float) -> None:
    assert state.tracer is not None
    start_ns = time.time_ns() - int(latency * 1e9)
    span = state.tracer.start_span(f"switchyard {ex.endpoint}", start_time=start_ns)
    span.set_attribute("switchyard.request_id", ex.id)
    span.set_attribute("switchyard.endpoint", ex.endpoint)
    span.set_attribute("http.response.status_code", status)
    for key, value in ex.route_headers().items():
        span.set_attribute(key.replace("x-switchyard-", "switchyard.route."), value)
    span.set_attribute("switchyard.attempts", len(ex.attempts))
    span.end()
