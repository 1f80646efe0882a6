"""The back-end interface: async only (the work is I/O), two methods, one call struct.

``complete`` returns a whole answer; ``open_stream`` returns once the first bytes arrived, so a
failure before the first byte can still fail over to the next target. After that, a failure
surfaces to the client as an error event (see ``gateway.doors.pipeline``).
Both speak OpenAI's wire format to the gateway, whatever the provider's own format is, except
a pass-through: when the client's door and the provider speak the same non-OpenAI wire format
(the Messages door to Anthropic), the back-end sends the client's own body and answers in that
format, and says so (``UpstreamResult.native`` / ``UpstreamStream.native``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gateway.wire.blocks import cache_counts, token_count
from router.features import RequestFeatures

UpstreamEndpoint = Literal["chat.completions", "completions"]


@dataclass(slots=True)
class UpstreamCall:
    endpoint: UpstreamEndpoint
    body: dict[str, Any]
    features: RequestFeatures
    client_wants_usage: bool = False
    # The door's wire format and the client's own body and forwardable headers, for back-ends
    # that pass a request through unchanged when the provider speaks the door's format.
    wire_format: str = "openai.chat"
    client_body: dict[str, Any] | None = None
    client_headers: dict[str, str] = field(default_factory=dict)
    # A release carrying weights (router.decision.RouteDecision.release_weights): the version,
    # and whether this request must be served by it (candidate arm) or kept off it (live arm).
    weights_pin: tuple[str, bool] | None = None
    # The W3C traceparent (and tracestate) of this attempt's span, sent with the upstream
    # request so the upstream's spans join the trace (gateway.tracing); None: traces off.
    trace_headers: dict[str, str] | None = None


@dataclass(slots=True)
class Usage:
    """Token counts in OpenAI's convention: ``prompt_tokens`` counts every input token, cache
    reads (``cached_tokens``) and cache writes (``cache_creation_tokens``) included."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cache_creation_tokens: int | None = None

    @classmethod
    def from_openai(cls, usage: dict[str, Any] | None) -> Usage:
        """The counts of an OpenAI-format usage object; a field that is not a count is None."""
        if not isinstance(usage, dict) or not usage:
            return cls()
        read, written = cache_counts(usage)
        return cls(
            token_count(usage.get("prompt_tokens")),
            token_count(usage.get("completion_tokens")),
            read,
            written,
        )


@dataclass(slots=True)
class UpstreamResult:
    body: bytes
    parsed: dict[str, Any]
    usage: Usage
    served_model: str
    replica: str | None
    weights_version: str | None = None
    native: bool = False  # body and parsed are in the door's own wire format (pass-through)
    notes: dict[str, str] = field(default_factory=dict)  # see StreamOutcome.notes


@dataclass(slots=True)
class StreamOutcome:
    """Filled while the stream is consumed; read after it ended.

    ``response`` is the assembled answer when the stream assembled it itself (a native
    pass-through); otherwise the pipeline assembles it from ``chunks`` or ``raw``."""

    usage: Usage = field(default_factory=Usage)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    completed: bool = False
    error: str | None = None
    error_status: int | None = None  # the HTTP status an upstream error event carried
    response: dict[str, Any] | None = None
    # What a native pass-through changed in the client's body to make it acceptable to its
    # provider (recorded as ``note.*`` tags): known when the call was made.
    notes: dict[str, str] = field(default_factory=dict)


class UpstreamStream(Protocol):
    served_model: str
    replica: str | None
    weights_version: str | None
    outcome: StreamOutcome
    native: bool  # the events are in the door's own wire format (pass-through)

    def __aiter__(self) -> AsyncIterator[bytes]:
        """SSE bytes for the client, first block included; raises on a mid-stream failure."""
        ...

    async def aclose(self) -> None: ...


class Backend(Protocol):
    name: str
    kind: str

    async def complete(self, call: UpstreamCall) -> UpstreamResult: ...

    async def open_stream(self, call: UpstreamCall) -> UpstreamStream: ...

    async def aclose(self) -> None: ...
