"""The OpenAI-compatible front door: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

The identity door: the client's body, validated, is the internal body (no translation, nothing
rendered: the upstream's bytes go back as they came). Handlers are plain Starlette endpoints (no
per-request dependency injection or response model serialisation) on the one door skeleton,
:func:`gateway.door.serve_door`.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.door import Translated, door_features, serve_door
from gateway.errors import GatewayError, error_response_parts
from gateway.exchange import Exchange, FrontDoor
from gateway.state import GatewayState
from gateway.wire.openai_requests import validate_chat, validate_completion

CHAT_DOOR = FrontDoor("chat.completions", "openai.chat")
COMPLETIONS_DOOR = FrontDoor("completions", "openai.completions")


def _wants_usage(body: dict[str, Any]) -> bool:
    opts = body.get("stream_options") or {}
    return bool(opts.get("include_usage"))


def _chat(body: dict[str, Any], ex: Exchange, request: Request) -> Translated:
    req = validate_chat(body)
    features = door_features(
        "chat.completions",
        request,
        body,
        stream=bool(req.stream),
        metadata=req.metadata,
        cache_key=body.get("prompt_cache_key") or req.user,
    )
    return Translated(
        body,
        bool(req.stream),
        features,
        CHAT_DOOR,
        {},
        endpoint="chat.completions",
        client_wants_usage=_wants_usage(body),
        identity=True,
    )


def _completion(body: dict[str, Any], ex: Exchange, request: Request) -> Translated:
    req = validate_completion(body)
    features = door_features(
        "completions",
        request,
        body,
        stream=bool(req.stream),
        metadata=req.metadata,
        cache_key=body.get("prompt_cache_key") or req.user,
    )
    return Translated(
        body,
        bool(req.stream),
        features,
        COMPLETIONS_DOOR,
        {},
        endpoint="completions",
        client_wants_usage=_wants_usage(body),
        identity=True,
    )


async def chat_completions(request: Request) -> Response:
    return await serve_door(request, CHAT_DOOR, _chat)


async def completions(request: Request) -> Response:
    return await serve_door(request, COMPLETIONS_DOOR, _completion)


async def list_models(request: Request) -> Response:
    state: GatewayState = request.app.state.switchyard
    try:
        await state.admit(request.headers, limit=False)
    except GatewayError as exc:
        status, headers, body = error_response_parts(exc)
        return Response(orjson.dumps(body), status, headers, media_type="application/json")
    created = int(time.time())
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "switchyard"}
        for name in state.routing.policy.model_names()
    ]
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")
