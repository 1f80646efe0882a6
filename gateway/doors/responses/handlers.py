"""The OpenAI Responses front door: ``POST /v1/responses`` (what Codex CLI speaks).

A request is translated into the internal chat-completions body
(:mod:`gateway.doors.responses.translate`) and then served by :mod:`gateway.doors.pipeline` exactly
like ``/v1/chat/completions``: same routing rules, back-ends, failover, metrics and record. The
answer goes back as a Responses object or as Responses stream events. The record keeps the client's
own body and the Responses-format answer, and beside them the translated chat body and the chat
answer (``canonical_request``, ``canonical_response``: what the served model saw, what training
reads); what the translation left out (tools a back-end cannot serve, dropped input items) is in
``Exchange.notes``.

A target that speaks the Responses API itself (OpenAI's) gets the client's own body instead,
and its answer goes back as it came (:mod:`gateway.backends.passthrough`): reasoning items with
their ``encrypted_content``, item ids and fields the gateway does not know survive; the record
then converts that answer (``canonical_response``).

The handler is the one door skeleton, :func:`gateway.doors.skeleton.serve_door`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.doors.exchange import Exchange, FrontDoor
from gateway.doors.responses.request import translate_request
from gateway.doors.responses.stream import assemble_response, failure_events
from gateway.doors.responses.translate import (
    ResponseContext,
    ResponsesStreamEncoder,
    completion_of_response,
    render_response,
)
from gateway.doors.skeleton import Translated, door_features, serve_door

RESPONSES_DOOR = FrontDoor(
    "responses",
    "openai.responses",
    assemble_native=assemble_response,
    native_as_chat=completion_of_response,
    native_error=failure_events,
)


def _translate(body: dict[str, Any], ex: Exchange, request: Request) -> Translated:
    tr = translate_request(body)
    features = door_features(
        "responses",
        ex,
        request,
        tr.body,
        stream=tr.stream,
        metadata=tr.metadata,
        cache_key=tr.cache_key,
        prompt_cache_key=body.get("prompt_cache_key"),
    )
    ctx = ResponseContext.build(ex.id, body, tr.namespaced)
    door = replace(
        RESPONSES_DOOR,
        render=lambda completion, _ex: render_response(ctx, completion),
        stream_encoder=lambda _ex: ResponsesStreamEncoder(ctx),
    )
    return Translated(tr.body, tr.stream, features, door, tr.notes)


async def create_response(request: Request) -> Response:
    return await serve_door(request, RESPONSES_DOOR, _translate)


def routes() -> list[BaseRoute]:
    return [Route("/v1/responses", create_response, methods=["POST"])]
