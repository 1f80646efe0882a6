"""Every recorded wire format in the internal format (OpenAI chat, or legacy completions).

Training must read the conversation the served model saw, never a second translation of the
client's body that may disagree with the one that served it. So there is no parser of the
Responses or Messages wire formats here; a record is read as::

    wire format            request                               answer
    openai.chat            the client's body (it is internal)    ``response``
    openai.completions     the client's body (it is internal)    ``response``
    openai.responses,      ``canonical_request`` (the body the   ``canonical_response`` (the
    anthropic.messages     door's translation produced)          answer as a chat completion)

A Responses or Messages record written before migration 3 has neither canonical field: its body
is translated again by the live door's own translator (:func:`gateway.wire.responses_request.
translate_request`, :func:`gateway.wire.anthropic.translate_messages`) and its answer converted
back by the converters the pipeline uses (:func:`gateway.wire.anthropic_answer.
completion_of_message`, :func:`gateway.wire.responses.completion_of_response`). A body the
translator refuses raises :class:`~gateway.export.turns.UnsupportedShape`:
``stateful_conversation`` for server-side state (``previous_response_id`` and the like),
``malformed_request`` otherwise; an answer that is not one is ``malformed_response``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any, Final, Literal

from gateway.errors import GatewayError
from gateway.export.rows import ExportRow
from gateway.export.turns import UnsupportedShape
from gateway.wire.anthropic import translate_messages
from gateway.wire.anthropic_answer import completion_of_message
from gateway.wire.responses import completion_of_response
from gateway.wire.responses_request import translate_request

InternalKind = Literal["chat", "completions"]

#: Wire formats whose records hold a translation (their canonical fields, or one made again).
TRANSLATED_FORMATS: Final = frozenset({"openai.responses", "anthropic.messages"})

_CONVERTERS: Final = MappingProxyType(
    {"anthropic.messages": completion_of_message, "openai.responses": completion_of_response}
)
# What a translator or converter raises on a shape it does not read (the doors answer it 400).
_SHAPE_ERRORS: Final = (GatewayError, TypeError, AttributeError, KeyError, IndexError, ValueError)


def _translated(translate: Callable[[], dict[str, Any]], fmt: str) -> dict[str, Any]:
    try:
        return translate()
    except _SHAPE_ERRORS as exc:
        if isinstance(exc, GatewayError) and exc.code == "unsupported_parameter":
            raise UnsupportedShape("stateful_conversation", f"{fmt}: {exc}") from exc
        raise UnsupportedShape("malformed_request", f"{fmt}: {exc}") from exc


def internal_request(row: ExportRow) -> tuple[InternalKind, dict[str, Any]]:
    """``row``'s request in the internal format: ``("chat", body)`` or ``("completions", body)``."""
    canonical = row.get("canonical_request")
    if canonical is not None:
        if not isinstance(canonical, dict):
            raise UnsupportedShape("malformed_request", "canonical_request is not an object")
        return "chat", canonical
    request = row["request"]
    if not isinstance(request, dict):
        raise UnsupportedShape("malformed_request", "request is not an object")
    fmt = row.get("wire_format")
    if fmt == "openai.chat":
        return "chat", request
    if fmt == "openai.completions":
        return "completions", request
    if fmt == "anthropic.messages":
        return "chat", _translated(lambda: translate_messages(request).body, fmt)
    if fmt == "openai.responses":
        return "chat", _translated(lambda: translate_request(request).body, fmt)
    raise UnsupportedShape("unknown_wire_format", str(fmt))


def internal_answer(
    row: ExportRow, response: dict[str, Any]
) -> tuple[InternalKind, dict[str, Any]]:
    """The internal answer of ``row`` whose ``response`` is given: a chat completion (``"chat"``)
    or a text completion (``"completions"``)."""
    canonical = row.get("canonical_response")
    if canonical is not None:
        if not isinstance(canonical, dict):
            raise UnsupportedShape("malformed_response", "canonical_response is not an object")
        return (
            "completions" if canonical.get("object") == "text_completion" else "chat"
        ), canonical
    fmt = row.get("wire_format")
    if fmt == "openai.chat":
        return "chat", response
    if fmt == "openai.completions":
        return "completions", response
    convert = _CONVERTERS.get(str(fmt))
    if convert is None:
        raise UnsupportedShape("unknown_wire_format", str(fmt))
    try:
        return "chat", convert(response)
    except _SHAPE_ERRORS as exc:
        raise UnsupportedShape("malformed_response", f"{fmt}: {exc}") from exc
