"""The Anthropic front door: ``POST /v1/messages``, ``/v1/messages/count_tokens``, ``HEAD|GET /``.

What Claude Code speaks. A Messages request is translated into the internal chat-completions
body (:mod:`gateway.doors.anthropic.translate`) and served by :mod:`gateway.doors.pipeline` like
every other door (an Anthropic target gets the client's own body instead:
:mod:`gateway.backends.passthrough`); answers, stream events and errors go back in Anthropic's
shapes (``{"type": "error", "error": {"type", "message"}}``). ``?beta=true``, ``anthropic-version``
and ``anthropic-beta`` are accepted; the key may come as ``x-api-key`` or ``Authorization: Bearer``
(checked, when keys arrive, in the one shared place, not here). ``count_tokens`` answers an
estimate (characters / 4, as the router estimates) without calling a back-end.

The record keeps the translation (``canonical_request``) even when the body went natively to
Anthropic, and the provider's message converted to a chat completion
(:mod:`gateway.doors.anthropic.answer`, ``canonical_response``): training targets the local model,
and that is what the local model is sent and would answer in.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.doors.anthropic.answer import completion_of_message
from gateway.doors.anthropic.render import (
    MessageContext,
    MessagesStreamEncoder,
    error_body,
    render_message,
)
from gateway.doors.anthropic.stream import assemble_message
from gateway.doors.anthropic.translate import translate_messages
from gateway.doors.exchange import Exchange, FrontDoor
from gateway.doors.skeleton import (
    SHAPE_ERRORS,
    Translated,
    door_features,
    off_loop_if_large,
    parse_checked,
    read_body,
    serve_door,
    untranslatable,
)
from gateway.errors import (
    GatewayError,
    error_response_parts,
)
from gateway.state import GatewayState
from gateway.wire.blocks import prompt_chars
from router.errors import RoutingError
from router.features import RequestFeatures, estimate_tokens

MESSAGES_DOOR = FrontDoor(
    "messages",
    "anthropic.messages",
    error_body=error_body,
    assemble_native=assemble_message,
    native_as_chat=completion_of_message,
)
_JSON = "application/json"


def _translate(body: dict[str, Any], ex: Exchange, request: Request) -> Translated:
    tr = translate_messages(body)
    features = door_features(
        "messages",
        ex,
        request,
        tr.body,
        stream=tr.stream,
        metadata=None,
        cache_key=tr.user_id,
        claude_user_id=tr.user_id,
    )
    ctx = MessageContext(
        message_id="msg_" + ex.id.replace("-", ""),
        model=str(body["model"]),
        estimated_input_tokens=features.prompt_tokens,
        thinking=tr.thinking,
        stop_sequences=tr.stop_sequences,
    )
    door = replace(
        MESSAGES_DOOR,
        render=lambda completion, _ex: render_message(ctx, completion),
        stream_encoder=lambda _ex: MessagesStreamEncoder(ctx),
    )
    return Translated(tr.body, tr.stream, features, door, tr.notes)


async def create_message(request: Request) -> Response:
    return await serve_door(request, MESSAGES_DOOR, _translate)


async def count_tokens(request: Request) -> Response:
    """``{"input_tokens": N}``: characters of system, messages, tool calls and tools / 4.

    Not routed to a back-end and not recorded; an unknown model is a 404 as on ``/v1/messages``.
    """
    state: GatewayState = request.app.state.switchyard
    routing = state.routing
    try:
        await state.admission.admit(request.headers, limit=False)
        limits = routing.config.gateway.limits
        raw = await read_body(request, limits.max_body_bytes.messages)
        body = await off_loop_if_large(len(raw), limits, parse_checked, raw, limits)
        try:
            tr = translate_messages(body, count_only=True)
        except SHAPE_ERRORS as exc:
            raise untranslatable("messages.count_tokens", exc) from exc
        model = str(tr.body["model"])
        routing.policy.decide(RequestFeatures("messages", model, 0))  # unknown model -> 404
    except (GatewayError, RoutingError) as exc:
        status, headers, body = error_response_parts(exc)
        return Response(orjson.dumps(error_body(status, body)), status, headers, media_type=_JSON)
    tools = tr.body.get("tools")
    chars = prompt_chars(tr.body, tool_calls=True) + (len(orjson.dumps(tools)) if tools else 0)
    return Response(orjson.dumps({"input_tokens": estimate_tokens(chars)}), media_type=_JSON)


async def root(request: Request) -> Response:
    """Clients probe the base URL (``HEAD /``) before their first call."""
    return Response(b'{"status":"ok"}', media_type=_JSON)


def routes() -> list[BaseRoute]:
    return [
        Route("/v1/messages", create_message, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/", root, methods=["GET", "HEAD"]),
    ]
