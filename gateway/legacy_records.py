"""The live doors' translators, as the exporters read records written before migration 3.

Such a Responses or Messages record has no canonical fields (``traffic.export.wire_formats``):
its body is translated again by the door's own translator
(:func:`gateway.wire.responses_request.translate_request`,
:func:`gateway.wire.anthropic.translate_messages`) and its answer converted back by the
converters the pipeline uses (:func:`gateway.wire.anthropic_answer.completion_of_message`,
:func:`gateway.wire.responses.completion_of_response`). The translators are the gateway's, and
``traffic`` imports nothing of the gateway, so whoever exports (the CLI, the admin API) hands
:data:`LIVE_TRANSLATOR` to the exporter.

What a translator refuses becomes an :class:`~traffic.export.turns.UnsupportedShape` the
exporter counts: ``stateful_conversation`` for server-side state (a door's
``unsupported_parameter``), ``malformed_request`` otherwise; an answer that is not one is
``malformed_response``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import Any, Final

from gateway.errors import GatewayError
from gateway.wire.anthropic import translate_messages
from gateway.wire.anthropic_answer import completion_of_message
from gateway.wire.responses import completion_of_response
from gateway.wire.responses_request import translate_request
from traffic.export import LegacyTranslator, UnsupportedShape

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
