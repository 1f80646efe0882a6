"""The OpenAI-compatible front door: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

Handlers are plain Starlette endpoints (no per-request dependency injection or response model
serialisation): the hot path reads the body once, validates it, routes it and hands it to
:mod:`gateway.pipeline`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway.backends.base import UpstreamCall, UpstreamEndpoint
from gateway.backends.provider_routes import forwarded_headers
from gateway.config import LimitsConfig
from gateway.errors import (
    ClientDisconnectedError,
    GatewayError,
    InvalidRequestError,
    PayloadTooLargeError,
    error_response_parts,
)
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
from gateway.wire.bounds import check_bounds
from gateway.wire.openai_requests import (
    ChatCompletionRequest,
    CompletionRequest,
    prompt_chars,
    validate_chat,
    validate_completion,
)
from router.chat_text import request_text
from router.errors import RoutingError
from router.features import Endpoint, RequestFeatures, estimate_tokens

log = logging.getLogger(__name__)
T = TypeVar("T")

CHAT_DOOR = FrontDoor("chat.completions", "openai.chat")
COMPLETIONS_DOOR = FrontDoor("completions", "openai.completions")

ROUTE_HEADER = "x-switchyard-route"
TAGS_HEADER = "x-switchyard-tags"
EPISODE_HEADER = "x-switchyard-episode"


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than ``limit`` bytes without reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"request body of {declared} bytes exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLargeError(f"request body exceeds {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect as exc:
        log.info("client disconnected after %d bytes of its request body", size)
        raise ClientDisconnectedError(
            f"client disconnected after {size} bytes of the request body"
        ) from exc
    return b"".join(chunks)


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(
            f"We could not parse the JSON body of your request: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.", code="invalid_json")
    return body


def parse_checked(raw: bytes, limits: LimitsConfig) -> dict[str, Any]:
    """A JSON object body within the input bounds (:mod:`gateway.wire.bounds`), else 400."""
    body = parse_json_object(raw)
    check_bounds(body, limits)
    return body


async def off_loop_if_large(size: int, limits: LimitsConfig, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a worker thread when the body is over ``limits.offload_body_bytes``.

    Parsing, bound checks, validation and translation are pure Python per message (~10 ms per
    1,000 messages here): for a large body they would hold the event loop, and every other
    request, for tens or hundreds of milliseconds.
    """
    if size > limits.offload_body_bytes:
        return await asyncio.to_thread(fn, *args)
    return fn(*args)


def parse_tags(request: Request, metadata: dict[str, str] | None) -> dict[str, str]:
    tags = dict(metadata or {})
    header = request.headers.get(TAGS_HEADER)
    if header:
        for item in header.split(","):
            key, sep, value = item.partition("=")
            if sep and key.strip():
                tags[key.strip()] = value.strip()
    return tags


def build_features(
    endpoint: Endpoint,
    req: ChatCompletionRequest | CompletionRequest,
    request: Request,
    body: dict[str, Any],
    request_id: str | None = None,
    api_key_id: str | None = None,
) -> RequestFeatures:
    tags = parse_tags(request, req.metadata)
    has_tools = bool(getattr(req, "tools", None))
    return RequestFeatures(
        endpoint=endpoint,
        requested_model=req.model,
        prompt_tokens=estimate_tokens(prompt_chars(req)),
        has_tools=has_tools,
        stream=bool(req.stream),
        route_hint=request.headers.get(ROUTE_HEADER) or tags.get("route"),
        tags=tags,
        episode_id=request.headers.get(EPISODE_HEADER) or tags.get("episode_id"),
        cache_key=body.get("prompt_cache_key") or req.user,
        request_id=request_id,
        api_key_id=api_key_id,
        text=request_text(endpoint, body),
    )


def _prepare(
    ex: Exchange, raw: bytes, endpoint: UpstreamEndpoint, request: Request, limits: LimitsConfig
) -> ChatCompletionRequest | CompletionRequest:
    """Parse, bound-check and validate the body; fill the exchange's request and features."""
    body = parse_checked(raw, limits)
    ex.request = body  # only a body within bounds is kept parsed (the record can encode it)
    req = validate_chat(body) if endpoint == "chat.completions" else validate_completion(body)
    ex.features = build_features(endpoint, req, request, body, ex.id, ex.principal.key_id)
    return req


async def _handle(request: Request, endpoint: UpstreamEndpoint) -> Response:
    state: GatewayState = request.app.state.switchyard
    routing = state.routing  # fixed for this request even if a reload happens meanwhile
    ex = new_exchange(state, CHAT_DOOR if endpoint == "chat.completions" else COMPLETIONS_DOOR)
    raw = b""
    try:
        try:
            ex.principal = await state.admit(request.headers)
            limits = routing.config.gateway.limits
            raw = await read_body(request, limits.max_body_bytes)
            req = await off_loop_if_large(
                len(raw), limits, _prepare, ex, raw, endpoint, request, limits
            )
            assert ex.request is not None and ex.features is not None
            ex.decision = state.decide(routing, ex.features)
        except (GatewayError, RoutingError) as exc:
            if ex.request is None:
                # Kept whole (not truncated) so the record shows exactly what was refused.
                ex.request = {"_unparsed": raw.decode(errors="replace")}
            return error_response(state, ex, exc)
        body = ex.request
        opts = body.get("stream_options") or {}
        call = UpstreamCall(
            endpoint,
            body,
            ex.features,
            client_wants_usage=bool(opts.get("include_usage")),
            wire_format=ex.wire_format,
            client_headers=forwarded_headers(request.headers),
        )
        if req.stream:
            return await serve_stream(state, routing, ex, call)
        return await serve_unary(state, routing, ex, call)
    except asyncio.CancelledError:
        answer = answer_cancelled(state, ex)
        if answer is None:
            raise
        return answer
    except Exception as exc:  # a bug must still answer in OpenAI's shape and be recorded
        log.exception("unhandled error in %s", endpoint)
        return error_response(state, ex, exc)


async def chat_completions(request: Request) -> Response:
    return await _handle(request, "chat.completions")


async def completions(request: Request) -> Response:
    return await _handle(request, "completions")


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
