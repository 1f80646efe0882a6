"""One request's way through the gateway: route, call with failover, answer, record.

    body -> validate -> RequestFeatures -> policy.decide -> [target, fallback...]
      for each target (at most retry.max_attempts, breaker closed, retry budget left):
          its `secrets` policy (gateway.doors.secret_guard): redacted call, or 400 for `block`
          complete() / open_stream()   -> success: answer the client, stop
          UpstreamError retriable       -> breaker.failure, next target
          UpstreamError not retriable   -> answer with it (the input was refused)
          limits.request_timeout_s past -> 504, no further target (the deadline spans all tries,
                                           until the answer or a stream's first byte)
      none left -> AllBackendsFailedError (every attempt's error, last one's status)
    finally: metrics, trace spans, one record draft to the writer (gateway.recording.draft)

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
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

import orjson
from starlette.responses import Response

from gateway.backends.base import Backend, UpstreamCall, UpstreamResult, UpstreamStream
from gateway.client_watch import WatchedStream
from gateway.doors.exchange import Exchange, StreamEncoder
from gateway.doors.finish import finish
from gateway.doors.secret_guard import guard, restored_result, restoring_stream
from gateway.doors.shadow import shadow_probability, should_shadow, start_shadow
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
from gateway.recording import draft as record_draft
from gateway.recording.draft import Deferred
from gateway.routing.table import Routing
from gateway.state import GatewayState
from gateway.wire.sse import encode_event, parse_stream

log = logging.getLogger(__name__)

T = TypeVar("T")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


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
    ex.settle(499, error="cancelled")
    return None


async def _with_failover(
    state: GatewayState,
    routing: Routing,
    ex: Exchange,
    call: UpstreamCall,
    attempt: Callable[[Backend, UpstreamCall], Awaitable[T]],
) -> T:
    assert ex.decision is not None
    trace = ex.trace
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
        sent = call
        policy = routing.config.backends[target].secrets
        if policy != "allow":  # scanned once per exchange; `block` raises before any call
            sent = await guard(state, ex, call, target, policy)
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
        if trace is not None:  # the attempt's span, sent upstream as its traceparent
            config = routing.config.backends[target]
            headers = trace.attempt(target, config, call.endpoint, sent.body)
            sent = dataclasses.replace(sent, trace_headers=headers)
        t0 = time.perf_counter()
        limit = asyncio.timeout(remaining)
        try:
            async with limit:
                result = await attempt(routing.backends[target], sent)
        except TimeoutError as exc:
            if not limit.expired():
                raise
            # The whole request's deadline passed on this try: no other target is tried.
            ms = (time.perf_counter() - t0) * 1000
            err = _deadline_error(deadline_s)
            if trace is not None:
                trace.attempt_failed(err.status, type(err).__name__, err.message)
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
            if trace is not None:
                trace.attempt_failed(exc.status, type(exc).__name__, exc.message)
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
    ex.settle(status, error=body["error"]["message"])
    if ex.door is not None and ex.door.error_body is not None:
        body = ex.door.error_body(status, body)
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


async def serve_unary(
    state: GatewayState, routing: Routing, ex: Exchange, call: UpstreamCall
) -> Response:
    try:
        result: UpstreamResult = await _with_failover(
            state, routing, ex, call, lambda b, c: b.complete(c)
        )
    except GatewayError as exc:
        return error_response(state, ex, exc)
    result = restored_result(routing, ex, result)  # a redacted request's originals back
    if ex.trace is not None:
        parsed = result.parsed
        ex.trace.answered(result.usage, parsed.get("model"), parsed.get("id"), result.replica)
    ex.served_model, ex.replica = result.served_model, result.replica
    ex.notes.update(result.notes)  # what a pass-through changed in the client's body
    ex.weights_version = result.weights_version
    ex.native = result.native
    door = ex.door
    _after_success(state, ex, call)
    if result.native or door is None or door.render is None:
        answer: dict[str, Any] | Deferred | None = result.parsed
        if state.recorder is not None:  # the body's bytes travel to the writer, which parses
            as_chat = door.native_as_chat if result.native and door is not None else None
            answer = Deferred(record_draft.from_body, (result.body, as_chat, ex.canonical_response))
        ex.settle(200, answer, result.usage)
        return Response(result.body, 200, ex.route_headers(), media_type="application/json")
    try:
        rendered = door.render(result.parsed, ex)
    except Exception as exc:  # an answer in a shape the door cannot render: not the client's
        log.exception("exchange %s: the answer of %s could not be rendered", ex.id, ex.target)
        fault = f"{ex.target}: its answer could not be rendered ({type(exc).__name__})"
        return error_response(state, ex, UpstreamError(fault, backend=ex.target or ""))
    ex.canonical_response = result.parsed  # the internal answer the door rendered
    ex.settle(200, rendered, result.usage)
    return Response(orjson.dumps(rendered), 200, ex.route_headers(), media_type="application/json")


def _after_success(state: GatewayState, ex: Exchange, call: UpstreamCall) -> None:
    """The shadow draw, kept on the exchange for the record (its probability, and whether a
    sampled shadow was skipped for want of room)."""
    p_local = ex.decision.p_local if ex.decision is not None else None
    ex.shadow_p = share = shadow_probability(state, ex.target, p_local)
    if should_shadow(ex.id, share):
        ex.shadow_skipped = not start_shadow(state, ex.id, call)


async def serve_stream(
    state: GatewayState, routing: Routing, ex: Exchange, call: UpstreamCall
) -> Response:
    try:
        stream: UpstreamStream = await _with_failover(
            state, routing, ex, call, lambda b, c: b.open_stream(c)
        )
    except GatewayError as exc:
        return error_response(state, ex, exc)
    stream = restoring_stream(routing, ex, stream)  # a redacted request's originals back
    ex.ttft_s = time.perf_counter() - ex.started
    if ex.trace is not None:  # the attempt stays open until the stream ends (finish)
        ex.trace.first_token(stream.replica)
    ex.served_model, ex.replica = stream.served_model, stream.replica
    ex.notes.update(stream.outcome.notes)  # what a pass-through changed in the client's body
    ex.weights_version = stream.weights_version
    ex.native = stream.native
    ex.task = None  # until the response's task starts relaying (see _relay)
    ex.relayed = True  # from here the relay owns the exchange's end, and its record
    return WatchedStream(
        _relay(state, ex, stream, call),
        200,
        {**SSE_HEADERS, **ex.route_headers()},
        media_type="text/event-stream",
    )


async def _relay(
    state: GatewayState, ex: Exchange, stream: UpstreamStream, call: UpstreamCall
) -> AsyncGenerator[bytes, None]:
    encoder = ex.door.stream_encoder(ex) if ex.door and ex.door.stream_encoder else None
    # The internal chunks the encoder consumed: the record's canonical answer (translating doors).
    consumed: list[dict[str, Any]] = []
    recording = state.recorder is not None
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
                if recording:
                    consumed.extend(chunks)
                encoded = b"".join(encoder.encode(c) for c in chunks)
                if encoded:
                    yield encoded
            yield encoder.finish()
    except UpstreamError as exc:
        status, error = 502, exc.message
        yield _stream_error(
            ex, stream, encoder, exc.message, "upstream_error", "stream_interrupted"
        )
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not ex.aborted or task is None:
            status, error = 499, "client disconnected"
            raise
        task.uncancel()  # shutdown ended it: tell the client, as for a broken upstream
        status, error = 503, "the gateway is shutting down"
        yield _stream_error(
            ex, stream, encoder, error, "service_unavailable", "server_shutting_down"
        )
    except Exception as exc:
        # A fault of the gateway's own (translating an answer it could not foresee): the client
        # gets the door's error event instead of a stream that just stops, and it is recorded.
        log.exception("stream %s failed in the gateway", ex.id)
        status, error = 500, f"internal error ({type(exc).__name__})"
        yield _stream_error(
            ex, stream, encoder, "internal error", "internal_error", "internal_error"
        )
    except BaseException:
        status, error = 499, "client disconnected"
        raise
    finally:
        # Recorded before the last await: a task cancelled again while closing still records.
        # The answer is assembled by the writer, from what the stream kept
        # (gateway.recording.draft).
        answers: Deferred | None = None
        if recording:  # the assembled answers exist only for the record
            try:
                answers = _stream_answers(ex, stream, encoder, consumed)
            except Exception:  # the record keeps the exchange, without its answer
                log.exception("stream %s: the answer could not be kept for the record", ex.id)
        ex.settle(status, answers, stream.outcome.usage, error, stream=True)
        if status == 200:  # before the record, which keeps the shadow draw
            try:
                _after_success(state, ex, call)
            except Exception:  # a shadow must never cost the exchange its record
                log.exception("stream %s: the shadow could not be started", ex.id)
        finish(state, ex)
        await _close_quietly(stream)


def _stream_answers(
    ex: Exchange,
    stream: UpstreamStream,
    encoder: StreamEncoder | None,
    consumed: list[dict[str, Any]],
) -> Deferred:
    """What the writer assembles the record's answers from (gateway.recording.draft)."""
    out = stream.outcome
    if stream.native:
        door = ex.door
        return Deferred(
            record_draft.from_native_stream,
            (
                door.assemble_native if door is not None else None,
                door.native_as_chat if door is not None else None,
                out.raw,
            ),
        )
    if encoder is not None:
        return Deferred(record_draft.from_encoded, (encoder.final_response(), consumed))
    if out.chunks:
        return Deferred(record_draft.from_chunks, (ex.endpoint, out.chunks))
    return Deferred(record_draft.from_raw, (ex.endpoint, out.raw))


def _stream_error(
    ex: Exchange,
    stream: UpstreamStream,
    encoder: StreamEncoder | None,
    message: str,
    kind: str,
    code: str,
) -> bytes:
    """The event that ends a stream with an error: the door's own (after a native stream's
    events, as its provider ends one), or OpenAI's error event."""
    door = ex.door
    if stream.native and door is not None and door.native_error is not None:
        return door.native_error(message, stream.outcome.raw)
    if encoder is not None:
        return encoder.error(message)
    return encode_event(error_body(message, kind, None, code))


async def _close_quietly(stream: UpstreamStream) -> None:
    try:
        await stream.aclose()
    except Exception:  # closing a broken upstream may fail again; the record already says why
        return
