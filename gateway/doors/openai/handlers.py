"""The OpenAI-compatible front door: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

The identity door: the client's body, validated, is the internal body (no translation, nothing
rendered: the upstream's bytes go back as they came). Handlers are plain Starlette endpoints (no
per-request dependency injection or response model serialisation) on the one door skeleton,
:func:`gateway.doors.skeleton.serve_door`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.backends.base import UpstreamEndpoint
from gateway.doors.exchange import Exchange, FrontDoor
from gateway.doors.openai.requests import (
    ChatCompletionRequest,
    CompletionRequest,
    validate_chat,
    validate_completion,
)
from gateway.doors.skeleton import Translate, Translated, door_features, serve_door
from gateway.errors import GatewayError, json_error_response
from gateway.state import GatewayState

CHAT_DOOR = FrontDoor("chat.completions", "openai.chat")
COMPLETIONS_DOOR = FrontDoor("completions", "openai.completions")


def _wants_usage(body: dict[str, Any]) -> bool:
    opts = body.get("stream_options") or {}
    return bool(opts.get("include_usage"))


def _identity(
    endpoint: UpstreamEndpoint,
    door: FrontDoor,
    validate: Callable[[dict[str, Any]], ChatCompletionRequest | CompletionRequest],
) -> Translate:
    """The OpenAI doors' translation: the validated body itself."""

    def translate(body: dict[str, Any], ex: Exchange, request: Request) -> Translated:
        req = validate(body)
        features = door_features(
            endpoint,
            ex,
            request,
            body,
            stream=bool(req.stream),
            metadata=req.metadata,
            cache_key=body.get("prompt_cache_key") or req.user,
            prompt_cache_key=body.get("prompt_cache_key"),
        )
        return Translated(
            body,
            bool(req.stream),
            features,
            door,
            {},
            endpoint=endpoint,
            client_wants_usage=_wants_usage(body),
            identity=True,
        )

    return translate


_chat = _identity("chat.completions", CHAT_DOOR, validate_chat)
_completion = _identity("completions", COMPLETIONS_DOOR, validate_completion)


async def chat_completions(request: Request) -> Response:
    return await serve_door(request, CHAT_DOOR, _chat)


async def completions(request: Request) -> Response:
    return await serve_door(request, COMPLETIONS_DOOR, _completion)


async def list_models(request: Request) -> Response:
    state: GatewayState = request.app.state.switchyard
    try:
        await state.admission.admit(request.headers, limit=False)
    except GatewayError as exc:
        return json_error_response(exc)
    created = int(time.time())
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "switchyard"}
        for name in state.routing.policy.model_names()
    ]
    return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")
