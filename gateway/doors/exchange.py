"""One request while the gateway serves it (:class:`Exchange`), and how its door speaks
(:class:`FrontDoor`): the values the pipeline, the doors and the record share.

The internal format is OpenAI's chat/completions; a door that speaks another format renders
answers and streams from it, unless a back-end answered natively in the door's own format.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gateway.auth.admission import Hold
from gateway.auth.keys import ANONYMOUS, Principal
from gateway.backends.base import Usage
from gateway.backends.prompt_count import PromptCount
from gateway.recording.draft import Deferred
from gateway.secrets.scanner import Redaction
from gateway.state import GatewayState
from router.decision import RouteDecision
from router.features import RequestFeatures
from traffic.store.ids import new_id

if TYPE_CHECKING:
    from gateway.tracing.spans import RequestTrace


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
    A back-end may answer natively in the door's own format (the Messages door to Anthropic,
    the Responses door to OpenAI):
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
    # The events that end a native stream with an error, given the blocks relayed so far
    # (None: the stream encoder's ``error``, which needs no state of the stream).
    native_error: Callable[[str, Sequence[bytes]], bytes] | None = None


@dataclass(slots=True)
class Exchange:
    """What the gateway knows about one request while serving it."""

    id: str
    endpoint: str
    wire_format: str
    started: float
    request: dict[str, Any] | None = None
    request_json: bytes | None = None  # the body ``request`` was parsed from, as it came
    canonical_request: dict[str, Any] | None = None
    canonical_response: dict[str, Any] | None = None
    features: RequestFeatures | None = None
    decision: RouteDecision | None = None
    target: str | None = None
    served_model: str | None = None
    replica: str | None = None
    weights_version: str | None = None
    shadow_p: float | None = None  # the shadow draw's probability (None: no shadow configured)
    shadow_skipped: bool | None = None  # a sampled shadow skipped for want of room
    attempts: list[dict[str, Any]] = field(default_factory=list)
    ttft_s: float | None = None
    door: FrontDoor | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    # What translating the client's body to the internal one left out; moot (not recorded) when
    # the answer came from a native pass-through of the client's own body.
    translation_notes: dict[str, Any] = field(default_factory=dict)
    native: bool = False
    principal: Principal = ANONYMOUS
    # The prompt counted before the call, by target (gateway.doors.prompt_gate; None: not
    # counted), and what the call holds of its key's limits until it settles.
    prompt_counts: dict[str, PromptCount] | None = None
    hold: Hold | None = None
    # The request's secrets, once a target with a `secrets` policy was tried
    # (gateway.doors.secret_guard; None: none found, or not scanned).
    redaction: Redaction | None = None
    secrets_scanned: bool = False
    task: asyncio.Task[Any] | None = None  # the task serving it now (abort cancels it)
    aborted: bool = False  # ended by shutdown past the drain deadline
    # How it ended (:meth:`settle`), read once by gateway.doors.finish when the record is made.
    status: int = 0
    answer: dict[str, Any] | Deferred | None = None
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    stream: bool = False
    relayed: bool = False  # a stream's relay owns its end (the door's does otherwise)
    trace: RequestTrace | None = None  # its spans (None: traces off; gateway.tracing.spans)

    def settle(
        self,
        status: int,
        answer: dict[str, Any] | Deferred | None = None,
        usage: Usage | None = None,
        error: str | None = None,
        *,
        stream: bool = False,
    ) -> None:
        """How this exchange ended: the status, the answer in the client's format (or the
        :class:`~gateway.recording.draft.Deferred` the writer assembles it from), its usage
        and error. The last call wins; the record is made once, after the answer."""
        self.status, self.answer, self.error, self.stream = status, answer, error, stream
        if usage is not None:
            self.usage = usage

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
    """Start an exchange; :func:`gateway.doors.finish.finish` ends it (once: the door's
    ``finally``, or a stream's relay), which also takes it off the requests in flight."""
    ex = Exchange(new_id(), door.endpoint, door.wire_format, time.perf_counter(), door=door)
    ex.task = asyncio.current_task()
    state.requests.live[ex.id] = ex
    return ex
