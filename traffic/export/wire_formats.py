"""Every recorded wire format in the internal format (OpenAI chat, or legacy completions).

Training must read the conversation the served model saw, never a second translation of the
client's body that may disagree with the one that served it. So there is no parser of the
Responses or Messages wire formats here; a record is read as::

    wire format            request                               answer
    openai.chat            the client's body (it is internal)    ``response``
    openai.completions     the client's body (it is internal)    ``response``
    openai.responses,      ``canonical_request`` (the body the   ``canonical_response`` (the
    anthropic.messages     door's translation produced)          answer as a chat completion)

A Responses or Messages record written before migration 3 has neither canonical field. Only the
live door's own translator may read it again, and the doors are the gateway's: the caller passes
them as a :class:`LegacyTranslator` (``gateway.admin.legacy_records.LIVE_TRANSLATOR``; the gateway's
CLI and admin API do). Without one, such a record is skipped as ``untranslated_legacy_record``.
A translator raises :class:`~traffic.export.turns.UnsupportedShape`: ``stateful_conversation``
for server-side state (``previous_response_id`` and the like), ``malformed_request`` otherwise;
an answer it cannot convert is ``malformed_response``.

A record whose ``canonical_request`` is set but ``canonical_response`` is not, while it has an
answer, is one whose answer the gateway could not convert when it served it: without a
translator that is ``malformed_response``.
"""

from __future__ import annotations

from typing import Any, Final, Literal, Protocol

from traffic.export.turns import UnsupportedShape
from traffic.store.records import InferenceRecord, WireFormat

InternalKind = Literal["chat", "completions"]

#: Wire formats whose records hold a translation (their canonical fields, or one made again).
TRANSLATED_FORMATS: Final[frozenset[WireFormat]] = frozenset(
    {"openai.responses", "anthropic.messages"}
)


class LegacyTranslator(Protocol):
    """The live doors' translators, for records written before their canonical fields were."""

    def request(self, wire_format: str, body: dict[str, Any]) -> dict[str, Any]:
        """The chat body the door of ``wire_format`` makes of the client's ``body``."""
        ...

    def answer(self, wire_format: str, body: dict[str, Any]) -> dict[str, Any]:
        """A provider's answer in ``wire_format`` as an OpenAI chat completion."""
        ...


def _untranslated(record: InferenceRecord, what: str) -> UnsupportedShape:
    return UnsupportedShape(
        "untranslated_legacy_record",
        f"{record.wire_format} {what} recorded without its translation; read it with the "
        "gateway's translators (switchyard traffic export)",
    )


def internal_request(
    record: InferenceRecord, legacy: LegacyTranslator | None = None
) -> tuple[InternalKind, dict[str, Any]]:
    """``record``'s request in the internal format: ``("chat", body)`` or ``("completions",
    body)``."""
    canonical = record.canonical_request
    if canonical is not None:
        if not isinstance(canonical, dict):
            raise UnsupportedShape("malformed_request", "canonical_request is not an object")
        return "chat", canonical
    request = record.request
    if not isinstance(request, dict):
        raise UnsupportedShape("malformed_request", "request is not an object")
    fmt = record.wire_format
    if fmt == "openai.chat":
        return "chat", request
    if fmt == "openai.completions":
        return "completions", request
    if fmt not in TRANSLATED_FORMATS:
        raise UnsupportedShape("unknown_wire_format", str(fmt))
    if legacy is None:
        raise _untranslated(record, "request")
    return "chat", legacy.request(fmt, request)


def internal_answer(
    record: InferenceRecord, response: dict[str, Any], legacy: LegacyTranslator | None = None
) -> tuple[InternalKind, dict[str, Any]]:
    """The internal answer of ``record`` whose ``response`` is given: a chat completion
    (``"chat"``) or a text completion (``"completions"``)."""
    canonical = record.canonical_response
    if canonical is not None:
        if not isinstance(canonical, dict):
            raise UnsupportedShape("malformed_response", "canonical_response is not an object")
        return (
            "completions" if canonical.get("object") == "text_completion" else "chat"
        ), canonical
    fmt = record.wire_format
    if fmt == "openai.chat":
        return "chat", response
    if fmt == "openai.completions":
        return "completions", response
    if fmt not in TRANSLATED_FORMATS:
        raise UnsupportedShape("unknown_wire_format", str(fmt))
    if legacy is None:
        if record.canonical_request is not None:
            raise UnsupportedShape("malformed_response", f"{fmt}: the gateway could not convert it")
        raise _untranslated(record, "answer")
    return "chat", legacy.answer(fmt, response)
