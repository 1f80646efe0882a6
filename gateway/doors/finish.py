"""The end of every exchange, exactly once: metrics, cost, the key's spend and tokens, one record
to the writer, and the trace's last spans. Sync and cheap: the record leaves as a draft
(:mod:`gateway.recording.draft`) that the writer assembles and stores later.
"""

from __future__ import annotations

import logging
import time
from typing import Final

import orjson

from gateway.backends.base import Usage
from gateway.doors.exchange import Exchange
from gateway.doors.secret_guard import as_recorded
from gateway.recording.draft import Deferred, InferenceDraft, ready
from gateway.state import GatewayState
from router.calibration import segment_of
from router.features import RequestFeatures

log = logging.getLogger(__name__)


def finish(state: GatewayState, ex: Exchange) -> float | None:
    """Metrics, trace spans and the record of ``ex`` as it ended (:meth:`Exchange.settle`);
    sync and cheap (the writer does the I/O later). Called once per exchange: by the door's
    ``finally`` (unary answers, errors, refusals), or by a stream's relay when it ends. Returns
    the request's cost in USD (None when unknown)."""
    latency = time.perf_counter() - ex.started
    state.requests.live.pop(ex.id, None)
    usage, status = ex.usage, ex.status
    # A fault in the figures must not cost the exchange its record, nor the key its budget
    # reservation: each part is tried on its own, and logged.
    cost = None
    try:
        cost = _measure(state, ex, status, usage, latency)
    except Exception:
        log.exception("exchange %s: metrics or cost failed; recorded without a cost", ex.id)
    try:
        _account(state, ex, usage, cost)
        _calibrate(state, ex, usage)
    except Exception:
        log.exception("exchange %s: the key's spend failed", ex.id)
    decision = ex.decision
    monitor = state.release_monitor
    if decision is not None and decision.release_id is not None and monitor is not None:
        # the release's test waits for its verdict
        segment = segment_of(ex.features.has_tools if ex.features is not None else False)
        monitor.observe(ex.id, decision, segment, local=ex.replica is not None)
    trace = ex.trace
    if state.recorder is None:
        if trace is not None:
            _end_trace(state, ex, cost)
        return cost
    # the key's consent, else its team's (gateway.auth.consent), else the config's default
    training_use = ex.principal.training_use or state.config.auth.training_use
    if ex.redaction is not None:  # secrets were found: what the record may keep of them
        as_recorded(ex, training_use)
    f, answer = ex.features, ex.answer
    d = decision if decision is not None else _UNDECIDED
    draft = InferenceDraft(
        id=ex.id,
        ts=time.time(),
        api_key_id=ex.principal.key_id,  # known even when the body was refused
        episode_id=f.episode_id if f else None,
        endpoint=ex.endpoint,
        wire_format=ex.wire_format,
        request=ex.request if ex.request is not None else {},
        canonical_request=ex.canonical_request,
        answers=answer if isinstance(answer, Deferred) else ready(answer, ex.canonical_response),
        route_target=ex.target or "",
        served_model=ex.served_model or "",
        weights_version=ex.weights_version,
        replica=ex.replica,
        policy_version=decision.policy_version if decision else None,
        policy_reason=decision.reason if decision else None,
        status=status,
        error=ex.error,
        stream=ex.stream,
        latency_ms=latency * 1000,
        ttft_ms=ex.ttft_s * 1000 if ex.ttft_s is not None else None,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
        cache_creation_tokens=usage.cache_creation_tokens,
        cost_usd=cost,
        tags=_tags(f, ex),
        attempts=ex.attempts,
        request_json=ex.request_json,
        shadow_p=ex.shadow_p,
        shadow_skipped=ex.shadow_skipped,
        decision_kind=d.kind,
        decision_target=d.decided_target,
        decision_p_local=d.p_local,
        decision_threshold=d.threshold,
        decision_propensity=d.propensity,
        decision_state_version=d.state_version,
        release_id=d.release_id,
        release_arm=d.release_arm,
        release_p=d.release_p,
        release_other_target=d.release_other,
        training_use=training_use,
    )
    submitted_ns = time.time_ns() if trace is not None else 0
    state.recorder.submit_draft(draft)  # the record is built where it is written
    if trace is not None:
        _end_trace(state, ex, cost, submitted_ns)
    return cost


class _Undecided:
    """The decision columns of a request refused before routing: none. (Keywords straight from
    the decision, not a dict unpacked into them: 0.3 us less a request on the serving loop.)"""

    kind = decided_target = p_local = threshold = propensity = state_version = None
    release_id = release_arm = release_p = release_other = None


_UNDECIDED: Final = _Undecided()


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
    """Spend against the key's budget now, replacing what the call held of it; tokens against
    its per-minute limit: what the call used beyond the prompt tokens it held (or, negative,
    what it held and did not use), so that each token counts once."""
    principal = ex.principal
    if principal.key_id is None:
        return
    admission, hold = state.admission, ex.hold
    if admission.budget is not None:  # also releases the call's budget reservation (any cost)
        admission.budget.settle(principal, cost, hold.budget if hold is not None else None)
    if admission.rate_limiter is not None and principal.tpm_limit is not None:
        held = hold.tokens if hold is not None else 0
        tokens = _used_tokens(ex, usage, held) - held
        if tokens:
            state.background.spawn(admission.rate_limiter.record_tokens(principal, tokens))


def _used_tokens(ex: Exchange, usage: Usage, held: int) -> int:
    """The tokens a call used: as the upstream reported them; else, when it was tried, its held
    (counted) prompt tokens or the router's estimate; none when no upstream was tried."""
    completion = usage.completion_tokens or 0
    if usage.prompt_tokens is not None:
        return usage.prompt_tokens + completion
    if not ex.attempts:
        return 0
    return (held or (ex.features.prompt_tokens if ex.features is not None else 0)) + completion


def _calibrate(state: GatewayState, ex: Exchange, usage: Usage) -> None:
    """The served target's estimate learns from the prompt tokens it reported."""
    counts, target = ex.prompt_counts, ex.target
    if counts is None or target is None or ex.status != 200 or not usage.prompt_tokens:
        return
    count = counts.get(target)
    if count is not None:
        state.prompt_counter.observe(target, count, usage.prompt_tokens)


def _tags(f: RequestFeatures | None, ex: Exchange) -> dict[str, str]:
    tags = dict(f.tags) if f else {}
    notes = ex.notes if ex.native else {**ex.translation_notes, **ex.notes}
    for key, value in notes.items():
        tags[f"note.{key}"] = value if isinstance(value, str) else orjson.dumps(value).decode()
    return tags


def _end_trace(
    state: GatewayState, ex: Exchange, cost: float | None, submitted_ns: int | None = None
) -> None:
    """The record's submission span (from ``submitted_ns``; none when nothing is recorded) and
    the end of the exchange's span. A fault here costs the trace, never the exchange."""
    trace = ex.trace
    assert trace is not None
    try:
        if submitted_ns is not None:
            trace.recorded(submitted_ns)
        config = state.config.backends.get(ex.target) if ex.target else None
        trace.end(ex, config, cost)
    except Exception:
        log.exception("exchange %s: its trace could not be ended", ex.id)
