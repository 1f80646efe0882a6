"""What the serving loop keeps of an exchange for the record, and the one function that turns it
into an :class:`~traffic.store.records.InferenceRecord`.

Why a draft: building the record where the exchange ends (assembling the answer from the stream's
bytes, the 29-field frozen record, then the row's encoding and the insert) was most of what
recording cost the serving loop (docs/recording.md, "What recording cost the serving process").
The loop now keeps only what it already holds, in a plain tuple (:class:`InferenceDraft`:
the request, the stream's raw bytes or chunks, usage, timings, the decision) and the writer calls
:func:`build_record` in its batch, in the writer process (:mod:`gateway.recording.process`), so
that the loop pays a tuple and a pipe write.

A draft is picklable: plain values, and the answer as :class:`Deferred` (a module-level function
and its arguments, which pickle by reference). Whatever builds the record, now or later, builds
the same one: there is one builder.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pickle import PickleBuffer
from typing import Any, Final, NamedTuple

import orjson

from gateway.wire.assemble import (
    assemble_chat,
    assemble_chat_stream,
    assemble_completion,
)
from gateway.wire.sse import parse_stream
from traffic.store import InferenceRecord, JsonField, JsonText
from traffic.store.spool import SpoolRecord

log = logging.getLogger(__name__)

Answer = dict[str, Any] | None
Answers = tuple[Answer, Answer]  # (response, canonical_response)


class Deferred(NamedTuple):
    """The record's ``(response, canonical_response)``, computed by ``fn(*args)`` when the
    record is built. ``fn`` is a module-level function (it pickles by reference)."""

    fn: Callable[..., Answers]
    args: tuple[Any, ...]

    def __call__(self) -> Answers:
        return self.fn(*self.args)


class InferenceDraft(NamedTuple):
    """An :class:`InferenceRecord` before its answer is assembled (field names are its own)."""

    id: str
    ts: float  # time.time() at the end of the exchange
    api_key_id: str | None
    episode_id: str | None
    endpoint: str
    wire_format: str
    request: JsonField
    canonical_request: JsonField | None
    answers: Deferred
    route_target: str
    served_model: str
    weights_version: str | None
    replica: str | None
    policy_version: str | None
    policy_reason: str | None
    status: int
    error: str | None
    stream: bool
    latency_ms: float
    ttft_ms: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    cache_creation_tokens: int | None
    cost_usd: float | None
    tags: dict[str, str]
    attempts: list[dict[str, Any]]
    request_json: bytes | None = None  # the body ``request`` was parsed from, as it came
    decision_kind: str | None = None
    decision_target: str | None = None
    decision_p_local: float | None = None
    decision_threshold: float | None = None
    decision_propensity: float | None = None
    decision_state_version: str | None = None
    release_id: str | None = None
    release_arm: str | None = None
    release_p: float | None = None
    release_other_target: str | None = None
    shadow_p: float | None = None
    shadow_skipped: bool | None = None
    training_use: str | None = None  # the caller's consent (gateway.auth.consent)


_ANSWERS: Final = InferenceDraft._fields.index("answers")
_REQUEST: Final = InferenceDraft._fields.index("request")
_CANONICAL: Final = InferenceDraft._fields.index("canonical_request")
# In the flat tuple (to_wire) the fields after ``answers`` are one further on: Deferred takes two.
_REQUEST_JSON: Final = InferenceDraft._fields.index("request_json") + 1
# What goes out of band, beside the batch's pickle (gateway.recording.process.Batch): a body or a
# stream's bytes this large (a 256-token stream is ~64 KB, a Claude Code body ~90 KB). Smaller
# ones are copied into the pickle and freed at the flush, as a 16-token stream's 4.5 KB: held
# until acknowledged (~0.3 s) instead, they gained nothing measurable (docs/recording.md).
OUT_OF_BAND_BYTES: Final = 16 * 1024


def to_wire(draft: InferenceDraft) -> tuple[Any, ...]:
    """The draft as one plain tuple, its answer's function and arguments in line: a batch of
    them pickles with about a quarter fewer instructions than the named tuples, on the serving
    loop (docs/recording.md, "What the serving loop pays a frame").

    The request goes as the bytes it came in and the canonical request as orjson's encoding
    (:class:`~traffic.store.records.JsonText`), which the writer stores as they are: a
    parsed body pickled cost the serving loop ~3x orjson's encoding and the writer process an
    unpickling, an encoding and the freeing of every object (docs/recording.md, the same
    section)."""
    fn, args = draft.answers
    values = [*draft[:_ANSWERS], fn, tuple(map(_aside, args)), *draft[_ANSWERS + 1 :]]
    body = draft.request_json
    if body is not None:
        # A large body goes out of band (pickle.PickleBuffer): the pipe carries it as it is,
        # never copied into the batch's pickle (gateway.recording.process.Batch); it arrives as
        # bytes.
        values[_REQUEST] = JsonText(
            PickleBuffer(body) if len(body) >= OUT_OF_BAND_BYTES else body  # type: ignore[arg-type]
        )
        values[_REQUEST_JSON] = None
    canonical = draft.canonical_request
    if canonical is not None and type(canonical) is not JsonText:
        # What orjson will not encode goes as it is (the store's encoder copes).
        with contextlib.suppress(orjson.JSONEncodeError, TypeError):
            values[_CANONICAL] = JsonText(orjson.dumps(canonical))
    return tuple(values)


def _aside(arg: Any) -> Any:
    """A stream's raw blocks (a list of bytes) marked to travel out of band when they add up
    to :data:`OUT_OF_BAND_BYTES`; anything else as it is."""
    if (
        type(arg) is list
        and arg
        and all(type(b) is bytes for b in arg)
        and sum(map(len, arg)) >= OUT_OF_BAND_BYTES
    ):
        return [PickleBuffer(b) for b in arg]
    return arg


def from_wire(values: tuple[Any, ...]) -> InferenceDraft:
    """The draft :func:`to_wire` flattened."""
    answers = Deferred(values[_ANSWERS], values[_ANSWERS + 1])
    return InferenceDraft._make((*values[:_ANSWERS], answers, *values[_ANSWERS + 2 :]))


def build_record(draft: InferenceDraft) -> InferenceRecord:
    """The record a draft stands for; its answer assembled now."""
    response, canonical_response = draft.answers()
    return InferenceRecord(
        id=draft.id,
        ts=datetime.fromtimestamp(draft.ts, UTC),
        api_key_id=draft.api_key_id,
        episode_id=draft.episode_id,
        endpoint=draft.endpoint,
        wire_format=draft.wire_format,
        request=draft.request,
        canonical_request=draft.canonical_request,
        response=response,
        canonical_response=canonical_response,
        route_target=draft.route_target,
        served_model=draft.served_model,
        weights_version=draft.weights_version,
        replica=draft.replica,
        policy_version=draft.policy_version,
        policy_reason=draft.policy_reason,
        status=draft.status,
        error=draft.error,
        stream=draft.stream,
        latency_ms=draft.latency_ms,
        ttft_ms=draft.ttft_ms,
        prompt_tokens=draft.prompt_tokens,
        completion_tokens=draft.completion_tokens,
        cached_tokens=draft.cached_tokens,
        cache_creation_tokens=draft.cache_creation_tokens,
        cost_usd=draft.cost_usd,
        tags=draft.tags,
        attempts=draft.attempts,
        decision_kind=draft.decision_kind,
        decision_target=draft.decision_target,
        decision_p_local=draft.decision_p_local,
        decision_threshold=draft.decision_threshold,
        decision_propensity=draft.decision_propensity,
        decision_state_version=draft.decision_state_version,
        release_id=draft.release_id,
        release_arm=draft.release_arm,
        release_p=draft.release_p,
        release_other_target=draft.release_other_target,
        shadow_p=draft.shadow_p,
        shadow_skipped=draft.shadow_skipped,
        training_use=draft.training_use,
    )


Item = InferenceDraft | SpoolRecord  # what a writer is handed: a draft, or a record already built


def as_record(item: Item) -> SpoolRecord:
    """What the store writes for an item: a draft built, other records as they are."""
    if not isinstance(item, InferenceDraft):
        return item
    try:
        return build_record(item)
    except Exception:  # an assembler's bug must not cost the record: keep it without answer
        log.exception("record writer: cannot assemble the answer of %s", item.id)
        tags = {**item.tags, "note.record_error": "answer not assembled"}
        return build_record(item._replace(answers=_NO_ANSWER, tags=tags))


# -- the answers, one function per way an exchange ends -------------------------------------
def given(response: Answer, canonical: Answer) -> Answers:
    """Answers already built (unary answers, errors, a door's stream encoder's own)."""
    return response, canonical


def ready(response: Answer, canonical: Answer) -> Deferred:
    return Deferred(given, (response, canonical))


_NO_ANSWER: Final = ready(None, None)


def from_chunks(endpoint: str, chunks: list[dict[str, Any]]) -> Answers:
    """A relayed OpenAI stream from its parsed chunks."""
    if not chunks:
        return None, None
    assemble = assemble_chat if endpoint == "chat.completions" else assemble_completion
    return assemble(chunks), None


def from_raw(endpoint: str, raw: list[bytes]) -> Answers:
    """A relayed OpenAI stream from the bytes sent to the client."""
    blob = b"".join(raw)
    if endpoint == "chat.completions":
        return assemble_chat_stream(blob), None
    return from_chunks(endpoint, parse_stream(blob))


def from_encoded(response: Answer, consumed: list[dict[str, Any]]) -> Answers:
    """A translating door's stream: its encoder's answer, and the chat chunks it consumed."""
    return response, assemble_chat(consumed) if consumed else None


def from_native_stream(
    assemble: Callable[[bytes], Answer] | None,
    as_chat: Callable[[dict[str, Any]], dict[str, Any]] | None,
    raw: list[bytes],
) -> Answers:
    """A stream in the door's own format (pass-through): assembled, then converted to chat."""
    response = assemble(b"".join(raw)) if assemble is not None else None
    return response, native_as_chat(as_chat, response)


def from_body(
    body: bytes,
    as_chat: Callable[[dict[str, Any]], dict[str, Any]] | None,
    canonical: Answer,
) -> Answers:
    """A unary answer passed through as the upstream sent it (``UpstreamResult.body``, the bytes
    of its ``parsed``: a copy of bytes is cheaper to hand over than the parsed object). An answer
    in the door's own format is converted to chat (``as_chat``) for the canonical side."""
    response = orjson.loads(body)
    if as_chat is not None:
        canonical = native_as_chat(as_chat, response)
    return response, canonical


def native_as_chat(
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None, native: Answer
) -> Answer:
    """A native answer as a chat completion; None without a converter or when the body is not
    an answer (``response`` keeps it; a converter never costs a record)."""
    if convert is None or native is None:
        return None
    try:
        return convert(native)
    except (ValueError, TypeError):
        return None
