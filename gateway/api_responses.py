"""The OpenAI Responses front door: ``POST /v1/responses`` (what Codex CLI speaks).

A request is translated into the internal chat-completions body (:mod:`gateway.wire.responses`)
and then served by :mod:`gateway.pipeline` exactly like ``/v1/chat/completions``: same routing
rules, back-ends, failover, metrics and record. The answer goes back as a Responses object or as
Responses stream events. The record keeps the client's own body and the Responses-format answer;
what the translation left out (tools a back-end cannot serve, dropped input items) is in
``Exchange.notes``.

:func:`serve_translated` is the handler shape every translating door shares (the Anthropic door
uses it too): read, translate, route, serve, and answer any failure in the door's error shape.
"""

from __future__ import annotations

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
    parse_json_object,
    parse_tags,
    read_body,
)
from gateway.backends.base import UpstreamCall
from gateway.errors import GatewayError
from gateway.pipeline import (
    Exchange,
    FrontDoor,
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
    translate_request,
)
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
    )


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
            raw = await read_body(request, routing.config.gateway.limits.max_body_bytes)
            body = parse_json_object(raw)
            ex.request = body
            translated = translate(body, ex, request)
            ex.notes.update(translated.notes)
            ex.features = dataclasses.replace(
                translated.features, request_id=ex.id, api_key_id=ex.principal.key_id
            )
            ex.decision = state.decide(routing, ex.features)
        except (GatewayError, RoutingError) as exc:
            if ex.request is None:
                ex.request = {"_unparsed": raw.decode(errors="replace")}
            return error_response(state, ex, exc)
        ex.door = translated.door
        call = UpstreamCall(
            "chat.completions", translated.body, ex.features, client_wants_usage=True
        )
        if translated.stream:
            return await serve_stream(state, routing, ex, call)
        return await serve_unary(state, routing, ex, call)
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
