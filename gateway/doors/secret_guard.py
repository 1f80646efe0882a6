"""Each target's ``secrets`` policy on the request path: ``allow`` (the default: sent as they
are), ``redact`` or ``block`` (gateway.config.BackendConfig).

    per attempt at a target whose policy is not allow (gateway.doors.pipeline._with_failover):
        the request scanned once per exchange (gateway.secrets.scanner; on a worker thread
        when its texts not seen before are long), the result kept on the exchange
        block  -> 400 SecretsInRequestError naming the kinds found, before any upstream call
        redact -> the attempt sends the redacted bodies (the internal one, and the client's own
                  for a native pass-through)
    the answer of a redacting target: each placeholder of the request replaced by its original,
        unary (every text of the answer: :func:`restored_result`) and streamed
        (:class:`RestoringStream`, gateway.secrets.stream), tool-call arguments included
    the record (:func:`as_recorded`, from gateway.doors.finish): the originals where the key's
        consent is ``allow``; otherwise the redacted request and the answer with each original
        masked by its placeholder (what the provider saw and wrote)

A target left at ``allow`` (local targets, unless set) costs nothing: no scan, no import of
the scrubber. The record's tag ``note.secrets`` says what was done (``redacted: github_token``,
``blocked: ...``): kinds only. docs/secrets.md, "The request path".
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import orjson

from gateway.backends.base import StreamOutcome, UpstreamCall, UpstreamResult, UpstreamStream
from gateway.doors.exchange import Exchange
from gateway.errors import SecretsInRequestError
from gateway.recording.draft import Deferred, ready
from gateway.routing.table import Routing
from gateway.secrets.scanner import Redaction
from gateway.secrets.stream import StreamRestorer, StreamWire
from gateway.secrets.texts import MASK, RESTORE, map_texts, recorded_answers
from gateway.state import GatewayState


async def guard(
    state: GatewayState, ex: Exchange, call: UpstreamCall, target: str, policy: str
) -> UpstreamCall:
    """The call to send ``target`` under ``policy`` (``redact`` or ``block``); raises
    :class:`SecretsInRequestError` for ``block`` when the request holds a secret."""
    if not ex.secrets_scanned:
        ex.redaction = await state.secrets.scan_async(call.body, call.client_body)
        ex.secrets_scanned = True
    redaction = ex.redaction
    if redaction is None:
        return call
    kinds = ", ".join(redaction.kinds)
    if policy == "block":
        ex.target = target
        ex.notes["secrets"] = f"blocked: {kinds}"
        ex.attempts.append({"target": target, "status": 400, "error": f"secrets ({kinds})"})
        raise SecretsInRequestError(redaction.kinds, target)
    ex.notes["secrets"] = f"redacted: {kinds}"
    return dataclasses.replace(call, body=redaction.body, client_body=redaction.client_body)


def _served_redacted(routing: Routing, ex: Exchange) -> Redaction | None:
    """The request's redaction when the target that answered was sent it."""
    redaction, target = ex.redaction, ex.target
    if redaction is None or target is None:
        return None
    config = routing.config.backends.get(target)
    return redaction if config is not None and config.secrets == "redact" else None


def restored_result(routing: Routing, ex: Exchange, result: UpstreamResult) -> UpstreamResult:
    """``result`` with the request's originals back in its texts, where it answered a redacted
    request."""
    redaction = _served_redacted(routing, ex)
    if redaction is None:
        return result
    parsed = map_texts(result.parsed, redaction.swap.restore)
    if parsed is not result.parsed:
        result.parsed, result.body = parsed, orjson.dumps(parsed)
    return result


class RestoringStream:
    """An upstream stream whose events get the request's originals back as they pass."""

    def __init__(self, inner: UpstreamStream, restorer: StreamRestorer) -> None:
        self._inner = inner
        self._restorer = restorer
        self.served_model: str = inner.served_model
        self.replica: str | None = inner.replica
        self.weights_version: str | None = inner.weights_version
        self.outcome: StreamOutcome = inner.outcome  # the provider's own events, for the record
        self.native: bool = inner.native

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for block in self._inner:
            out = self._restorer.feed(block)
            if out:
                yield out

    async def aclose(self) -> None:
        await self._inner.aclose()


def restoring_stream(routing: Routing, ex: Exchange, stream: UpstreamStream) -> UpstreamStream:
    """``stream`` restoring the request's originals, where it answers a redacted request."""
    redaction = _served_redacted(routing, ex)
    if redaction is None:
        return stream
    wire: StreamWire = "openai"
    if stream.native:
        wire = "anthropic" if ex.wire_format == "anthropic.messages" else "responses"
    return RestoringStream(stream, StreamRestorer(redaction.swap, wire))


def as_recorded(ex: Exchange, training_use: str) -> None:
    """What the record of a scanned exchange keeps (module docstring), set on ``ex``."""
    redaction = ex.redaction
    if redaction is None or (training_use == "allow" and not ex.stream):
        return  # a unary answer was restored before it went out (restored_result)
    answer = ex.answer
    inner = answer if isinstance(answer, Deferred) else ready(answer, ex.canonical_response)
    mode = RESTORE  # a stream's record is assembled from the provider's own events
    if training_use != "allow":
        mode = MASK
        client = redaction.client_body
        ex.request = client if client is not None else redaction.body
        ex.request_json = None  # the bytes as they came hold the originals
        if ex.canonical_request is not None:
            ex.canonical_request = redaction.body
    findings = redaction.swap.findings
    ex.answer = Deferred(recorded_answers, (mode, findings, inner.fn, *inner.args))
