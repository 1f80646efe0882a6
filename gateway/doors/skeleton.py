"""Every door's handler: read, translate, route, serve, answer any failure in the door's shape.

A door is a translation pair plugged into :func:`serve_door`: its ``translate`` turns the
client's body into the internal one (OpenAI chat/completions) with the router's features and
the door bound to this request's rendering context; the door renders answers and streams back
(:class:`~gateway.doors.exchange.FrontDoor`). The OpenAI doors translate by identity: the client's
body is the internal body, and the upstream's bytes go back unchanged.

    read body (413 past the limit) -> parse + bounds (400) -> translate (400 on a shape the
    translator did not foresee) -> features (one builder, :func:`door_features`), with the
    request's text only where the routing reads it (gateway.routing.decider) -> decide (404
    unknown model) -> prompt counted, fitted to context windows (400), the key's tokens and
    budget held (429, 403; gateway.doors.prompt_gate) -> serve_unary / serve_stream
    (gateway.doors.pipeline)

Parsing, bound checks and translation run on a worker thread for bodies over
``limits.offload_body_bytes``: they are pure Python, milliseconds of the loop for a long
conversation (docs/hot_path.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from gateway.backends.base import UpstreamCall, UpstreamEndpoint
from gateway.backends.provider_routes import FORWARDED_HEADERS
from gateway.client_watch import ClientWatch
from gateway.config import LimitsConfig
from gateway.doors.exchange import Exchange, FrontDoor, new_exchange
from gateway.doors.finish import finish
from gateway.doors.pipeline import answer_cancelled, error_response, serve_stream, serve_unary
from gateway.doors.prompt_gate import gate_prompt
from gateway.errors import (
    ClientDisconnectedError,
    GatewayError,
    InvalidRequestError,
    PayloadTooLargeError,
)
from gateway.routing.decider import Decider
from gateway.routing.episode_id import episode_of
from gateway.routing.table import RoutingView
from gateway.state import GatewayState
from gateway.wire.blocks import prompt_chars
from gateway.wire.bounds import check_bounds
from router.chat_text import request_text
from router.errors import RoutingError
from router.features import Endpoint, RequestFeatures, estimate_tokens

log = logging.getLogger(__name__)
T = TypeVar("T")

ROUTE_HEADER = "x-switchyard-route"
TAGS_HEADER = "x-switchyard-tags"
EPISODE_HEADER = "x-switchyard-episode"
# The request headers a door reads, by their raw names (ASGI gives them lower-case): its own,
# and the wire format's that a pass-through carries on (gateway.backends.provider_routes).
OWN_HEADERS: Final = {h.encode(): h for h in (ROUTE_HEADER, TAGS_HEADER, EPISODE_HEADER)}
CARRIED_HEADERS: Final = {h.encode(): h for names in FORWARDED_HEADERS.values() for h in names}

# What a translator raises on a body shape it did not foresee (a string where a list was due).
SHAPE_ERRORS = (TypeError, AttributeError, KeyError, IndexError, ValueError)


@dataclass(frozen=True, slots=True)
class Translated:
    """A client request in the internal format, with the door that renders its answer.

    ``identity``: the internal body is the client's own (the OpenAI doors): the record keeps it
    once, and nothing is rendered."""

    body: dict[str, Any]
    stream: bool
    features: RequestFeatures
    door: FrontDoor
    notes: dict[str, list[str]]
    endpoint: UpstreamEndpoint = "chat.completions"
    client_wants_usage: bool = True
    identity: bool = False


Translate = Callable[[dict[str, Any], Exchange, Request], Translated]


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
    """``fn(*args)`` on a worker thread when the body is over ``limits.offload_body_bytes``."""
    if size > limits.offload_body_bytes:
        return await asyncio.to_thread(fn, *args)
    return fn(*args)


def read_headers(request: Request, names: Mapping[bytes, str]) -> dict[str, str]:
    """The headers of ``names`` (raw name -> name) the request sent, the first of a repeated one
    (as Starlette's ``Headers.get``): one pass over its headers, not one scan per name."""
    found: dict[str, str] = {}
    for raw, value in request.scope["headers"]:
        name = names.get(raw)
        if name is not None and name not in found:
            found[name] = value.decode("latin-1")
    return found


def parse_tags(header: str | None, metadata: dict[str, str] | None) -> dict[str, str]:
    """The request's tags: its metadata, then the tags header's ``key=value`` pairs."""
    tags = dict(metadata or {})
    if header:
        for item in header.split(","):
            key, sep, value = item.partition("=")
            if sep and key.strip():
                tags[key.strip()] = value.strip()
    return tags


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
    ex: Exchange,
    request: Request,
    body: dict[str, Any],
    *,
    stream: bool,
    metadata: dict[str, str] | None,
    cache_key: str | None,
    claude_user_id: str | None = None,
    prompt_cache_key: object = None,
) -> RequestFeatures:
    """The router's features of an internal body, the same way for every door. The episode is
    ours when the client names one, else what the client already sends
    (:mod:`gateway.routing.episode_id`); ``ex`` gives the request's id and key. Without
    ``text``: :func:`_prepare` adds it where the routing reads it."""
    own = read_headers(request, OWN_HEADERS)
    tags = parse_tags(own.get(TAGS_HEADER), metadata)
    return RequestFeatures(
        endpoint=endpoint,
        requested_model=str(body["model"]),
        prompt_tokens=estimate_tokens(prompt_chars(body)),
        has_tools=bool(body.get("tools")),
        stream=stream,
        route_hint=own.get(ROUTE_HEADER) or tags.get("route"),
        tags=tags,
        episode_id=episode_of(
            own.get(EPISODE_HEADER) or tags.get("episode_id"),
            claude_user_id=claude_user_id,
            prompt_cache_key=prompt_cache_key,
        ),
        cache_key=cache_key,
        request_id=ex.id,
        api_key_id=ex.principal.key_id,
    )


def _prepare(
    ex: Exchange,
    raw: bytes,
    translate: Translate,
    request: Request,
    limits: LimitsConfig,
    decider: Decider,
    view: RoutingView,
) -> Translated:
    """Parse, bound-check and translate the body; fill the exchange's request and features,
    with the request's text only where ``view`` reads it (``decider.reads_text``)."""
    body = parse_checked(raw, limits)
    ex.request = body  # only a body within bounds is kept parsed (the record can encode it)
    ex.request_json = raw  # what the record writer process stores (gateway.recording.draft)
    try:
        translated = translate(body, ex, request)
    except GatewayError:
        raise
    except SHAPE_ERRORS as exc:
        raise untranslatable(ex.endpoint, exc) from exc
    if not translated.identity:
        # What the served model is sent, before any provider's changes: what training reads.
        # Kept for a native pass-through too (it is what the local model would be sent).
        ex.canonical_request = translated.body
        ex.translation_notes.update(translated.notes)
    features = translated.features
    if decider.reads_text(view, features):
        text = request_text(features.endpoint, translated.body)
        features = dataclasses.replace(features, text=text)
    ex.features = features
    return translated


async def serve_door(request: Request, door: FrontDoor, translate: Translate) -> Response:
    """Read, translate, route and serve one request; every failure in the door's shape.

    ``door`` is the door before translation (its ``error_body`` shapes errors found while reading
    the request); ``translate`` returns the door bound to this request's rendering context.
    The exchange is recorded here, in ``finally``, unless a stream's relay took it over.
    """
    state: GatewayState = request.app.state.switchyard
    view = state.decider.view()  # fixed for this request even if a reload happens meanwhile
    routing = view.routing
    ex = new_exchange(state, door)
    if state.tracing is not None:  # traces on: a child of the client's traceparent, if any
        ex.trace = state.tracing.start(request.headers, ex.id, door.endpoint)
    raw = b""
    watch: ClientWatch | None = None
    response: Response | None = None
    try:
        try:
            ex.principal = await state.admission.admit(request.headers)
            limits = routing.config.gateway.limits
            raw = await read_body(request, limits.max_body_bytes.for_endpoint(door.endpoint))
            translated = await off_loop_if_large(
                len(raw), limits, _prepare, ex, raw, translate, request, limits, state.decider, view
            )
            assert ex.features is not None
            tools = translated.body.get("tools")
            routing_ns = time.time_ns() if ex.trace is not None else 0
            ex.decision = await state.decider.decide(view, ex.features, tools)
            offload = len(raw) > limits.offload_body_bytes
            ex.decision = await gate_prompt(state, routing, ex, translated.body, offload=offload)
            if ex.trace is not None:
                ex.trace.routed(routing_ns, ex.decision)
        except (GatewayError, RoutingError) as exc:
            if ex.request is None:
                # Kept whole (not truncated) so the record shows exactly what was refused.
                ex.request = {"_unparsed": raw.decode(errors="replace")}
            response = error_response(state, ex, exc)
            return response
        ex.door = translated.door
        call = UpstreamCall(
            translated.endpoint,
            translated.body,
            ex.features,
            client_wants_usage=translated.client_wants_usage,
            wire_format=door.wire_format,
            client_body=None if translated.identity else ex.request,
            client_headers=read_headers(request, CARRIED_HEADERS),
            weights_pin=ex.decision.weights_pin if ex.decision is not None else None,
        )
        watch = ClientWatch(request.receive)
        try:
            if translated.stream:
                response = await serve_stream(state, routing, ex, call)
            else:
                response = await serve_unary(state, routing, ex, call)
            return response
        finally:
            watch.stop()
    except asyncio.CancelledError:
        response = answer_cancelled(state, ex)
        if response is not None:
            return response
        if watch is None or not watch.gone:
            raise
        # Nobody reads this answer; uvicorn would log the cancellation as the app's error.
        cast(asyncio.Task[Any], asyncio.current_task()).uncancel()
        return Response(status_code=499)
    except Exception as exc:  # a bug must still answer in the door's shape and be recorded
        log.exception("unhandled error in %s", door.endpoint)
        response = error_response(state, ex, exc)
        return response
    finally:
        if not ex.relayed:
            cost = finish(state, ex)
            if cost is not None and response is not None and ex.status == 200:
                response.headers["x-switchyard-cost-usd"] = f"{cost:.8f}"
