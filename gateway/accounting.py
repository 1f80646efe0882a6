"""The end of every exchange, exactly once: metrics, cost, the key's spend and tokens, the trace
span, and one record to the async writer. Sync and cheap: the writer does the I/O later.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import orjson

from gateway.backends.base import Usage
from gateway.exchange import Exchange
from gateway.state import GatewayState
from router.features import RequestFeatures
from traffic.store.records import InferenceRecord


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
    if state.budget is not None:  # also releases the call's budget reservation (any cost)
        state.budget.settle(principal, cost)
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
