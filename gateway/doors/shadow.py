"""Shadow evaluation: for a sampled share of frontier-served requests the local model answers
too, off the user's path, and its answer is recorded next to the served one.

The sample is a stable hash of the request id, aimed where the learned scorer is least sure:
a request the scorer put near p_local = 0.5 is sampled at the full ``shadow.share``, one it is
sure of (near 0 or 1) at a quarter of it (``share * (0.25 + 3 p (1 - p))``); without a score
(no scorer, a rule decided) at the full share. The shadow call starts after the
client's answer is complete, runs as a background task with at most ``shadow.max_in_flight`` at
once (a sampled request beyond that is skipped and counted, never queued without bound), is never
streamed, and never touches the client. Its record carries the local answer and the facts needed
to compare later (latency, tokens); the verdict is added by whoever can verify it (the RL loop's
verifiers), since correctness is a property of the task, not of the gateway.

A release's shadow stage (``Canary.shadow``, a release of weights started with ``shadow``)
replaces the draw: every request, whatever served it, is shadowed at that share, and the shadow
is answered only by replicas serving the candidate's weights. Those answers, verified, are what
the candidate's routing is refitted on before it takes any user's request (rl_loop.release_stage).
"""

from __future__ import annotations

import logging
import time

from gateway.backends.base import UpstreamCall
from gateway.errors import UpstreamError
from gateway.state import GatewayState
from router.features import unit_hash
from router.scorer import shadow_share
from traffic.store import ShadowRecord

log = logging.getLogger(__name__)


def shadow_probability(
    state: GatewayState, served_target: str | None, p_local: float | None
) -> float | None:
    """The probability that a request served by ``served_target`` is shadowed (module
    docstring); None when no shadow is configured, 0 for a target that is never shadowed."""
    cfg = state.config.shadow
    pin = release_shadow(state)
    if pin is not None:
        return pin[1]
    if cfg.share <= 0 or cfg.target is None:
        return None
    served = state.config.backends.get(served_target) if served_target is not None else None
    if served is None or served.kind != "litellm":
        return 0.0
    return shadow_share(cfg.share, p_local)


def release_shadow(state: GatewayState) -> tuple[str, float] | None:
    """The candidate weights and share of a release in its shadow stage, else None."""
    canary = state.decider.canary
    if canary is None or canary.weights is None or canary.shadow <= 0:
        return None
    if state.config.shadow.target is None:
        return None
    return canary.weights, canary.shadow


def should_shadow(inference_id: str, share: float | None) -> bool:
    return share is not None and unit_hash(inference_id, "shadow") < share


def start_shadow(state: GatewayState, inference_id: str, call: UpstreamCall) -> bool:
    """Fire the shadow call if there is room (sync; the work happens in a task); False when it
    was skipped for want of room."""
    cfg = state.config.shadow
    if state.shadows_in_flight >= cfg.max_in_flight:
        state.metrics.shadows.labels("skipped").inc()
        return False
    state.shadows_in_flight += 1
    pin = release_shadow(state)
    weights = (pin[0], True) if pin is not None else None
    state.background.spawn(_run(state, inference_id, call, weights))
    return True


async def _run(
    state: GatewayState,
    inference_id: str,
    call: UpstreamCall,
    weights_pin: tuple[str, bool] | None,
) -> None:
    target = state.config.shadow.target
    assert target is not None
    body = {k: v for k, v in call.body.items() if k not in ("stream", "stream_options")}
    shadow_call = UpstreamCall(call.endpoint, body, call.features, weights_pin=weights_pin)
    t0 = time.perf_counter()
    try:
        backend = state.routing.backends[target]
        result = await backend.complete(shadow_call)
    except UpstreamError as exc:
        state.metrics.shadows.labels("error").inc()
        log.info("shadow call for %s failed: %s", inference_id, exc.message)
        return
    finally:
        state.shadows_in_flight -= 1
    state.metrics.shadows.labels("recorded").inc()
    if state.recorder is None:
        return
    state.recorder.submit_shadow(
        ShadowRecord(
            inference_id=inference_id,
            target=target,
            response=result.parsed,
            comparison={
                "latency_ms": (time.perf_counter() - t0) * 1000,
                "served_model": result.served_model,
                "replica": result.replica,
                "weights_version": result.weights_version,
                "completion_tokens": result.usage.completion_tokens,
            },
        )
    )
