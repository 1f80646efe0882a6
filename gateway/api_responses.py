"""The OpenAI Responses front door: ``POST /v1/responses`` (what Codex CLI speaks).

A request is translated into the internal chat-completions body (:mod:`gateway.wire.responses`)
and then served by :mod:`gateway.pipeline` exactly like ``/v1/chat/completions``: same routing
rules, back-ends, failover, metrics and record. The answer goes back as a Responses object or as
Responses stream events. The record keeps the client's own body and the Responses-format answer,
and beside them the translated chat body and the chat answer (``canonical_request``,
``canonical_response``: what the served model saw, what training reads); what the translation
left out (tools a back-end cannot serve, dropped input items) is in ``Exchange.notes``.

:func:`serve_translated` is the handler shape every translating door shares (the Anthropic door
uses it too): read, translate, route, serve, and answer any failure in the door's error shape.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.api_openai import (
    EPISODE_HEADER,
    ROUTE_HEADER,
    off_loop_if_large,
    parse_checked,
    parse_tags,
    read_body,
)
from gateway.backends.base import UpstreamCall
from gateway.backends.provider_routes import forwarded_headers
from gateway.config import LimitsConfig
from gateway.errors import GatewayError, InvalidRequestError
from gateway.pipeline import (
    Exchange,
    FrontDoor,
    answer_cancelled,
    error_response,
    new_exchange,
    serve_stream,
    serve_unary,
)
from gateway.state import GatewayState
from gateway.wire.blocks import prompt_chars
from gateway.wire.responses import (
    ResponseContext,
    ResponsesStreamEncoder,
    render_response,
)
from gateway.wire.responses_request import translate_request
from router.chat_text import request_text
from router.errors import RoutingError
from router.features import Endpoint, RequestFeatures, estimate_tokens

log = logging.getLogger(__name__)

RESPONSES_DOOR = FrontDoor("responses", "openai.responses")


@dataclass(frozen=True, slots=True)
class Translated:
    """A client request in the internal format, with the door that renders its answer."""

    body: dict[str, Any]
    stream: bool
    features: RequestFeatures
    door: FrontDoor
    notes: dict[str, list[str]]


Translate = Callable[[dict[str, Any], Exchange, Request], Translated]

# What a translator raises on a body shape it did not foresee (a string where a list was due).
SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError, ValueError)


def untranslatable(endpoint: str, exc: Exception) -> InvalidRequestError:
    """A body the translator could not read is the client's input, not a server fault: a 400
    naming what failed, logged with its traceback so the translator can learn the shape."""
    log.warning("%s: untranslatable body", endpoint, exc_info=exc)
    return InvalidRequestError(
        f"The request body has a shape this endpoint cannot read ({type(exc).__name__}: {exc})"[
            :500
        ],
        code="invalid_request_shape",
    )


def door_features(
    endpoint: Endpoint,
    request: Request,
    body: dict[str, Any],
    *,
    stream: bool,
    metadata: dict[str, str] | None,
    cache_key: str | None,
) -> RequestFeatures:
    """Router features of an internal chat body, read the way the chat door reads its own."""
    tags = parse_tags(request, metadata)
    return RequestFeatures(
        endpoint=endpoint,
        requested_model=str(body["model"]),
        prompt_tokens=estimate_tokens(prompt_chars(body)),
        has_tools=bool(body.get("tools")),
        stream=stream,
        route_hint=request.headers.get(ROUTE_HEADER) or tags.get("route"),
        tags=tags,
        episode_id=request.headers.get(EPISODE_HEADER) or tags.get("episode_id"),
        cache_key=cache_key,
        text=request_text(endpoint, body),
    )


def _prepare(
    ex: Exchange, raw: bytes, translate: Translate, request: Request, limits: LimitsConfig
) -> Translated:
    """Parse, bound-check and translate the body; fill the exchange's request and features."""
    body = parse_checked(raw, limits)
    ex.request = body  # only a body within bounds is kept parsed (the record can encode it)
    try:
        translated = translate(body, ex, request)
    except GatewayError:
        raise
    except (TypeError, AttributeError, KeyError, IndexError, ValueError) as exc:
        # A body shape the translator did not foresee is the client's input, not a server
        # fault: a 400 naming what failed (logged, so the translator can learn the shape).
        log.warning("%s: untranslatable body", ex.endpoint, exc_info=True)
        raise InvalidRequestError(
            f"The request body has a shape this endpoint cannot read ({type(exc).__name__}: {exc})"[
                :500
            ],
            code="invalid_request_shape",
        ) from exc
    # What the served model is sent, before any provider's changes: what training reads. Kept
    # for a native pass-through too (it is what the local model would be sent).
    ex.canonical_request = translated.body
    ex.translation_notes.update(translated.notes)
    ex.features = dataclasses.replace(
        translated.features, request_id=ex.id, api_key_id=ex.principal.key_id
    )
    return translated


async def serve_translated(request: Request, door: FrontDoor, translate: Translate) -> Response:
    """Read, translate, route and serve one request of a translating door; errors in its shape.

    ``door`` is the door before translation (its ``error_body`` shapes errors found while reading
    the request); ``translate`` returns the door bound to this request's rendering context.
    """
    state: GatewayState = request.app.state.switchyard
    routing = state.routing  # fixed for this request even if a reload happens meanwhile
    ex = new_exchange(state, door)
    raw = b""
    try:
        try:
            ex.principal = await state.admit(request.headers)
            limits = routing.config.gateway.limits
            raw = await read_body(request, limits.max_body_bytes)
            translated = await off_loop_if_large(
                len(raw), limits, _prepare, ex, raw, translate, request, limits
            )
            assert ex.features is not None
            ex.decision = state.decide(routing, ex.features)
        except (GatewayError, RoutingError) as exc:
            if ex.request is None:
                ex.request = {"_unparsed": raw.decode(errors="replace")}
            return error_response(state, ex, exc)
        ex.door = translated.door
        call = UpstreamCall(
            "chat.completions",
            translated.body,
            ex.features,
            client_wants_usage=True,
            wire_format=door.wire_format,
            client_body=ex.request,
            client_headers=forwarded_headers(request.headers),
        )
        if translated.stream:
            return await serve_stream(state, routing, ex, call)
        return await serve_unary(state, routing, ex, call)
    except asyncio.CancelledError:
        answer = answer_cancelled(state, ex)
        if answer is None:
            raise
        return answer
    except Exception as exc:  # a bug must still answer in the door's shape and be recorded
        log.exception("unhandled error in %s", door.endpoint)
        return error_response(state, ex, exc)


def _translate(body: dict[str, Any], ex: Exchange, request: Request) -> Translated:
    tr = translate_request(body)
    features = door_features(
        "responses",
        request,
        tr.body,
        stream=tr.stream,
        metadata=tr.metadata,
        cache_key=tr.cache_key,
    )
    ctx = ResponseContext.build(ex.id, body, tr.namespaced)
    door = replace(
        RESPONSES_DOOR,
        render=lambda completion, _ex: render_response(ctx, completion),
        stream_encoder=lambda _ex: ResponsesStreamEncoder(ctx),
    )
    return Translated(tr.body, tr.stream, features, door, tr.notes)


async def create_response(request: Request) -> Response:
    return await serve_translated(request, RESPONSES_DOOR, _translate)


def routes() -> list[BaseRoute]:
    return [Route("/v1/responses", create_response, methods=["POST"])]
