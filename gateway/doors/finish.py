"""The end of every exchange, exactly once: metrics, cost, the key's spend and tokens, the trace
span, and one record to the async writer. Sync and cheap: the record leaves as a draft
(:mod:`gateway.record_draft`) that the writer assembles and stores later.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson

from gateway.backends.base import Usage
from gateway.exchange import Exchange
from gateway.record_draft import Deferred, InferenceDraft, build_record, ready
from gateway.state import GatewayState
from router.features import RequestFeatures

log = logging.getLogger(__name__)


def finish(
    state: GatewayState,
    ex: Exchange,
    status: int,
    response: dict[str, Any] | Deferred | None,
    usage: Usage,
    *,
    error: str | None,
    stream: bool,
) -> float | None:
    """Metrics, trace span and the record; sync and cheap (the writer does the I/O later).

    ``response`` is the answer in the client's format, or a :class:`Deferred` computing it and
    the canonical answer in the writer (streams); a plain answer goes with
    ``ex.canonical_response``. Returns the request's cost in USD (None when unknown). A second
    call is a no-op."""
    if ex.finished:
        return None
    ex.finished = True
    latency = time.perf_counter() - ex.started
    state.live.pop(ex.id, None)
    # A fault in the figures must not cost the exchange its record, nor the key its budget
    # reservation: each part is tried on its own, and logged.
    cost = None
    try:
        cost = _measure(state, ex, status, usage, latency)
    except Exception:
        log.exception("exchange %s: metrics or cost failed; recorded without a cost", ex.id)
    try:
        _account(state, ex, usage, cost)
        if state.tracer is not None:
            _span(state, ex, status, latency)
    except Exception:
        log.exception("exchange %s: the key's spend or the trace span failed", ex.id)
    if state.recorder is None:
        return cost
    f = ex.features
    draft = InferenceDraft(
        ex.id,
        time.time(),
        ex.principal.key_id,  # known even when the body was refused
        f.episode_id if f else None,
        ex.endpoint,
        ex.wire_format,
        ex.request if ex.request is not None else {},
        ex.canonical_request,
        response if isinstance(response, Deferred) else ready(response, ex.canonical_response),
        ex.target or "",
        ex.served_model or "",
        ex.weights_version,
        ex.replica,
        ex.decision.policy_version if ex.decision else None,
        ex.decision.reason if ex.decision else None,
        status,
        error,
        stream,
        latency * 1000,
        ex.ttft_s * 1000 if ex.ttft_s is not None else None,
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.cached_tokens,
        usage.cache_creation_tokens,
        cost,
        _tags(f, ex),
        ex.attempts,
        ex.request_json,
    )
    submit_draft = getattr(state.recorder, "submit_draft", None)
    if submit_draft is not None:  # the record is built in the writer (gateway.record_draft)
        submit_draft(draft)
    else:  # a plain sink (tests): the record now
        state.recorder.submit(build_record(draft))
    return cost


def _measure(
    state: GatewayState, ex: Exchange, status: int, usage: Usage, latency: float
) -> float | None:
    """The exchange's metrics; its cost in USD (None: unknown)."""
    target = ex.target or "none"
    m = state.metrics
    m.child(m.requests, ex.endpoint, target, str(status)).inc()
    m.child(m.latency, ex.endpoint, target).observe(latency)
    if ex.ttft_s is not None:
        m.child(m.ttft, ex.endpoint, target).observe(ex.ttft_s)
    backend_cfg = state.config.backends.get(ex.target) if ex.target else None
    cost = None
    if usage.prompt_tokens is not None:
        m.child(m.tokens, target, "prompt").inc(usage.prompt_tokens)
        m.child(m.tokens, target, "completion").inc(usage.completion_tokens or 0)
        if usage.cached_tokens:
            m.child(m.tokens, target, "cached").inc(usage.cached_tokens)
        if usage.cache_creation_tokens:
            m.child(m.tokens, target, "cache_write").inc(usage.cache_creation_tokens)
        if backend_cfg is not None:
            cost = state.prices.cost_usd(backend_cfg, usage)
            if cost:
                m.child(m.cost, target).inc(cost)
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
