"""The live doors' translators, as the exporters read records written before migration 3.

Such a Responses or Messages record has no canonical fields (``traffic.export.wire_formats``):
its body is translated again by the door's own translator
(:func:`gateway.doors.responses.request.translate_request`,
:func:`gateway.doors.anthropic.translate.translate_messages`) and its answer converted back by the
converters the pipeline uses (:func:`gateway.doors.anthropic.answer.completion_of_message`,
:func:`gateway.doors.responses.translate.completion_of_response`). The translators are the
gateway's, and ``traffic`` imports nothing of the gateway, so whoever exports (the CLI, the admin
API) hands :data:`LIVE_TRANSLATOR` to the exporter.

What a translator refuses becomes an :class:`~traffic.export.turns.UnsupportedShape` the
exporter counts: ``stateful_conversation`` for server-side state (a door's
``unsupported_parameter``), ``malformed_request`` otherwise; an answer that is not one is
``malformed_response``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any, Final

from gateway.doors.anthropic.answer import completion_of_message
from gateway.doors.anthropic.translate import translate_messages
from gateway.doors.responses.request import translate_request
from gateway.doors.responses.translate import completion_of_response
from gateway.errors import GatewayError
from traffic.export import LegacyTranslator, UnsupportedShape
from traffic.store import InferenceFilter, StoreBackend, json_object

_TRANSLATORS: Final[MappingProxyType[str, Callable[[dict[str, Any]], dict[str, Any]]]] = (
    MappingProxyType(
        {
            "anthropic.messages": lambda body: translate_messages(body).body,
            "openai.responses": lambda body: translate_request(body).body,
        }
    )
)
_CONVERTERS: Final[MappingProxyType[str, Callable[[dict[str, Any]], dict[str, Any]]]] = (
    MappingProxyType(
        {"anthropic.messages": completion_of_message, "openai.responses": completion_of_response}
    )
)
# What a translator or converter raises on a shape it does not read (the doors answer it 400).
_SHAPE_ERRORS: Final = (GatewayError, TypeError, AttributeError, KeyError, IndexError, ValueError)


class LiveTranslator:
    """:class:`~traffic.export.LegacyTranslator` of the gateway's live doors."""

    def request(self, wire_format: str, body: dict[str, Any]) -> dict[str, Any]:
        translate = _TRANSLATORS.get(wire_format)
        if translate is None:
            raise UnsupportedShape("unknown_wire_format", wire_format)
        try:
            return translate(body)
        except _SHAPE_ERRORS as exc:
            if isinstance(exc, GatewayError) and exc.code == "unsupported_parameter":
                raise UnsupportedShape("stateful_conversation", f"{wire_format}: {exc}") from exc
            raise UnsupportedShape("malformed_request", f"{wire_format}: {exc}") from exc

    def answer(self, wire_format: str, body: dict[str, Any]) -> dict[str, Any]:
        convert = _CONVERTERS.get(wire_format)
        if convert is None:
            raise UnsupportedShape("unknown_wire_format", wire_format)
        try:
            return convert(body)
        except _SHAPE_ERRORS as exc:
            raise UnsupportedShape("malformed_response", f"{wire_format}: {exc}") from exc


LIVE_TRANSLATOR: Final[LegacyTranslator] = LiveTranslator()


LEGACY_ENDPOINTS: Final = {"responses": "openai.responses", "messages": "anthropic.messages"}


async def backfill_canonical(
    backend: StoreBackend, translator: LegacyTranslator = LIVE_TRANSLATOR
) -> dict[str, int]:
    """Write the canonical conversation into Responses and Messages records stored before it
    existed (migration 3), with the live doors' translators, so that every reader, the RL loop
    included, reads them like new ones. Idempotent; returns counts by outcome."""
    counts = {"written": 0, "already_canonical": 0, "untranslatable": 0}
    for endpoint in LEGACY_ENDPOINTS:
        async for row in backend.iter_inferences(InferenceFilter(endpoint=endpoint)):
            record = row.inference
            if record.canonical_request is not None:
                counts["already_canonical"] += 1
                continue
            try:
                request = translator.request(record.wire_format, json_object(record.request) or {})
            except UnsupportedShape:
                counts["untranslatable"] += 1
                continue
            response = None
            if record.response is not None:
                try:
                    response = translator.answer(record.wire_format, record.response)
                except UnsupportedShape:
                    response = None  # read as malformed_response, as when it was served
            if await backend.set_canonical(record.id, request, response):
                counts["written"] += 1
            else:
                counts["already_canonical"] += 1
    return counts
