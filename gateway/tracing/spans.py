"""One request's trace, from the client's ``traceparent`` to the record's submission.

    [client span]                       traceparent/tracestate the client sent (W3C), if any
      switchyard <endpoint>   SERVER    the whole exchange; at its end: status, route, usage
        switchyard.route      INTERNAL  the routing decision, context-window fit included
        <op> <model>          CLIENT    one per upstream attempt (failed ones end with their
                                        error); a stream's carries a ``first_token`` event and
                                        ends with the stream; its traceparent goes upstream
          llm_request         SERVER    vLLM's own span (replicas started with traces on)
        switchyard.record     INTERNAL  the record's submission to the writer (a queue put);
                                        the writer process builds and stores the row later,
                                        outside the trace

Built only when traces are on (:func:`gateway.tracing.build_tracing` imports this module then);
with traces off the exchange holds no trace and the request path does no tracing work. Every
span carries GenAI attributes beside our ``switchyard.*`` ones (:mod:`gateway.tracing.genai`).
All calls are on the event loop, sync and cheap: spans end into the SDK's batch processor,
whose thread exports them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from gateway.config import BackendConfig
from gateway.tracing import genai
from router.decision import RouteDecision
from router.features import RequestFeatures

TRACEPARENT: Final = "traceparent"
_ROUTE_HEADER: Final = "x-switchyard-"
FIRST_TOKEN_EVENT: Final = "first_token"


class TokenCounts(Protocol):
    """An answer's usage (``gateway.backends.base.Usage``)."""

    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def completion_tokens(self) -> int | None: ...
    @property
    def cached_tokens(self) -> int | None: ...
    @property
    def cache_creation_tokens(self) -> int | None: ...


class Finished(Protocol):
    """What the trace reads of an exchange as it ends (``gateway.doors.exchange.Exchange``)."""

    @property
    def status(self) -> int: ...
    @property
    def error(self) -> str | None: ...
    @property
    def served_model(self) -> str | None: ...
    @property
    def usage(self) -> TokenCounts: ...
    @property
    def ttft_s(self) -> float | None: ...
    @property
    def features(self) -> RequestFeatures | None: ...
    @property
    def attempts(self) -> Sequence[Any]: ...
    @property
    def request(self) -> dict[str, Any] | None: ...
    @property
    def canonical_request(self) -> dict[str, Any] | None: ...
    def route_headers(self) -> dict[str, str]: ...


class Tracing:
    """The process's tracer and what every request's trace shares."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.propagator = TraceContextTextMapPropagator()

    def start(self, headers: Mapping[str, str], request_id: str, endpoint: str) -> RequestTrace:
        """The exchange's span, a child of the client's when it sent a valid ``traceparent``
        (an invalid one starts a trace, as the W3C spec asks)."""
        parent = self.propagator.extract(headers) if headers.get(TRACEPARENT) else None
        attributes: dict[str, AttributeValue] = {
            "switchyard.request_id": request_id,
            "switchyard.endpoint": endpoint,
            genai.OPERATION: genai.operation_name(endpoint),
        }
        span = self.tracer.start_span(
            f"switchyard {endpoint}", context=parent, kind=SpanKind.SERVER, attributes=attributes
        )
        return RequestTrace(self, span, request_id)


class RequestTrace:
    """The spans of one exchange (module docstring). At most one attempt is open at a time."""

    __slots__ = (
        "_attempt",
        "_attempt_ns",
        "_context",
        "_count",
        "_id",
        "_recording",
        "_tracing",
        "_unsampled_headers",
        "root",
    )

    def __init__(self, tracing: Tracing, root: Span, request_id: str) -> None:
        self._tracing = tracing
        self.root = root
        self._context = set_span_in_context(root)
        self._id = request_id
        self._attempt: Span | None = None
        self._attempt_ns = 0
        self._count = 0
        # Not sampled: no span is made, and upstreams get the root's context (flag off).
        self._recording = root.is_recording()
        self._unsampled_headers: dict[str, str] | None = None

    def routed(self, start_ns: int, decision: RouteDecision | None) -> None:
        """The decision's span, from ``start_ns`` (``time.time_ns()``) to now."""
        if not self._recording:
            return
        attributes: dict[str, AttributeValue] = {}
        if decision is not None:
            # The reason and policy version are the exchange's (switchyard.route.*).
            attributes = {
                "switchyard.decision.kind": decision.kind,
                "switchyard.decision.target": decision.decided_target,
                "switchyard.decision.targets": list(decision.targets),
            }
            for key, value in (
                ("switchyard.decision.propensity", decision.propensity),
                ("switchyard.decision.p_local", decision.p_local),
                ("switchyard.decision.threshold", decision.threshold),
                ("switchyard.release.id", decision.release_id),
                ("switchyard.release.arm", decision.release_arm),
            ):
                if value is not None:
                    attributes[key] = value
        span = self._tracing.tracer.start_span(
            "switchyard.route", context=self._context, start_time=start_ns, attributes=attributes
        )
        span.end()

    def attempt(
        self, target: str, config: BackendConfig, endpoint: str, body: Mapping[str, Any]
    ) -> dict[str, str]:
        """Open the span of one upstream attempt; the W3C headers that carry it upstream."""
        if not self._recording:
            if self._unsampled_headers is None:
                self._unsampled_headers = {}
                self._tracing.propagator.inject(self._unsampled_headers, context=self._context)
            return self._unsampled_headers
        self._end_attempt(None, None)  # none should be open: a stream fails over before its start
        self._count += 1
        model = genai.upstream_model(config)
        operation = genai.operation_name(endpoint)
        provider = genai.provider_name(config)
        attributes: dict[str, AttributeValue] = {
            genai.OPERATION: operation,
            genai.PROVIDER: provider,
            genai.SYSTEM: provider,
            genai.REQUEST_MODEL: model,
            "switchyard.target": target,
            "switchyard.attempt": self._count,
            **genai.request_attributes(body),
        }
        self._attempt_ns = time.time_ns()
        self._attempt = span = self._tracing.tracer.start_span(
            f"{operation} {model}",
            context=self._context,
            kind=SpanKind.CLIENT,
            start_time=self._attempt_ns,
            attributes=attributes,
        )
        headers: dict[str, str] = {}
        self._tracing.propagator.inject(headers, context=set_span_in_context(span))
        return headers

    def attempt_failed(self, status: int, error_type: str, message: str) -> None:
        """The open attempt ended with an error (a status, an exception's type name)."""
        self._end_attempt(status, message, error_type)

    def answered(
        self,
        usage: TokenCounts,
        response_model: object,
        response_id: object,
        replica: str | None,
    ) -> None:
        """The open attempt's whole answer arrived (a non-streamed call)."""
        span = self._attempt
        if span is None:
            return
        attributes = _usage(usage)
        if isinstance(response_model, str):
            attributes[genai.RESPONSE_MODEL] = response_model
        if isinstance(response_id, str):
            attributes[genai.RESPONSE_ID] = response_id
        if replica is not None:
            attributes["switchyard.replica"] = replica
        span.set_attributes(attributes)
        self._end_attempt(200, None)

    def first_token(self, replica: str | None) -> None:
        """The open attempt's stream sent its first event; the attempt stays open until the
        stream ends (:meth:`end`)."""
        span = self._attempt
        if span is None:
            return
        seconds = (time.time_ns() - self._attempt_ns) / 1e9
        span.add_event(FIRST_TOKEN_EVENT, {genai.TIME_TO_FIRST_CHUNK: seconds})
        attributes: dict[str, AttributeValue] = {genai.TIME_TO_FIRST_CHUNK: seconds}
        if replica is not None:
            attributes["switchyard.replica"] = replica
        span.set_attributes(attributes)

    def recorded(self, start_ns: int) -> None:
        """The record's submission to the writer, from ``start_ns`` to now."""
        if not self._recording:
            return
        span = self._tracing.tracer.start_span(
            "switchyard.record",
            context=self._context,
            start_time=start_ns,
            attributes={"switchyard.request_id": self._id},
        )
        span.end()

    def end(self, ex: Finished, config: BackendConfig | None, cost: float | None) -> None:
        """End the exchange's span (and a stream's attempt, with the usage it reported)."""
        if not self._recording:
            return
        status, usage = ex.status, ex.usage
        if self._attempt is not None:
            self._attempt.set_attributes(_usage(usage))
            self._end_attempt(status, ex.error)
        root = self.root
        attributes = _usage(usage)
        attributes[genai.HTTP_STATUS] = status
        attributes["switchyard.attempts"] = len(ex.attempts)
        for key, value in ex.route_headers().items():
            if key.startswith(_ROUTE_HEADER):  # not the request id again
                attributes["switchyard.route." + key[len(_ROUTE_HEADER) :]] = value
        features = ex.features
        if features is not None:
            attributes[genai.REQUEST_MODEL] = features.requested_model
            if features.episode_id is not None:
                attributes[genai.CONVERSATION_ID] = features.episode_id
        body = ex.canonical_request if ex.canonical_request is not None else ex.request
        attributes.update(genai.request_attributes(body))
        if ex.served_model is not None:
            attributes[genai.RESPONSE_MODEL] = ex.served_model
        if config is not None:
            attributes[genai.PROVIDER] = genai.provider_name(config)
        if ex.ttft_s is not None:
            attributes[genai.TIME_TO_FIRST_CHUNK] = ex.ttft_s
        if cost is not None:
            attributes["switchyard.cost_usd"] = cost
        if status >= 400:
            attributes[genai.ERROR_TYPE] = str(status)
        root.set_attributes(attributes)
        if status >= 500:  # a server span's error is the server's (4xx: the client's)
            root.set_status(Status(StatusCode.ERROR, ex.error))
        root.end()

    def _end_attempt(
        self, status: int | None, message: str | None, error_type: str | None = None
    ) -> None:
        span, self._attempt = self._attempt, None
        if span is None:
            return
        if status is not None:
            if status == 200:
                span.set_attribute(genai.HTTP_STATUS, status)
            else:
                span.set_attributes(
                    {genai.HTTP_STATUS: status, genai.ERROR_TYPE: error_type or str(status)}
                )
                span.set_status(Status(StatusCode.ERROR, message))
        span.end()


def _usage(usage: TokenCounts) -> dict[str, AttributeValue]:
    """The GenAI usage attributes of the counts an answer reported."""
    out: dict[str, AttributeValue] = {}
    for key, value in (
        (genai.INPUT_TOKENS, usage.prompt_tokens),
        (genai.OUTPUT_TOKENS, usage.completion_tokens),
        (genai.CACHE_READ_TOKENS, usage.cached_tokens),
        (genai.CACHE_WRITE_TOKENS, usage.cache_creation_tokens),
    ):
        if value is not None:
            out[key] = value
    return out
