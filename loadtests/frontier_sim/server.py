"""The simulator's aiohttp application: routes, failure injection, latency and stream pacing.

Every answering endpoint runs the same pipeline (:func:`_serve`):
1. count the request, apply ``x-sim-*`` header overrides to the configured knobs;
2. parse the JSON body with the endpoint's wire module (malformed -> 400 in its error shape);
3. fail on purpose if asked to: model name containing "error" (500), "ratelimit" (429 with
   Retry-After), an unknown model when ``reject_unknown_models``, or a draw under ``error_rate``
   (``error_status``; the ``x-sim-error: <status>`` header forces one);
4. compute the answers and what the prompt read from and wrote to the provider's prompt cache
   (``prompt_cache.py``), wait ``ttft_ms`` (+ ``slow_model_ttft_ms`` for "slow" model names);
5. answer JSON once the whole answer is written (its tokens at ``tokens_per_s``), or stream SSE
   events paced at ``tokens_per_s`` and cut off after ``cut_stream_after_chunks`` events by
   closing the connection.
State (config, seeded RNG, counters, the oracle's registered task prompts, the prompt cache,
the last ``keep_request_bodies`` bodies received) lives on the app under :data:`STATE`.
``POST /sim/oracle`` is the oracle channel the gateway never sees (see ``oracle.py``): the IDE
client registers ``{"prompt_hash", "task_id"}`` (or an array of them) there before it sends the
task through the gateway.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import orjson
from aiohttp import web

from loadtests.frontier_sim import anthropic_wire, openai_wire, responses_wire
from loadtests.frontier_sim.answers import Answer, BadRequest, RequestView, answer_request
from loadtests.frontier_sim.config import KnobHeaderError, SimulatorConfig, apply_header_overrides
from loadtests.frontier_sim.oracle import OracleBook, RegistrationError
from loadtests.frontier_sim.prompt_cache import CacheablePrompt, CacheUse, PromptCache

JSON_TYPE = "application/json"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


@dataclass(slots=True)
class SimulatorStats:
    """Requests served per endpoint and per model, and failures answered per endpoint."""

    requests: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    models: Counter[str] = field(default_factory=Counter)

    def snapshot(self) -> dict[str, dict[str, int]]:
        return {
            "requests": dict(self.requests),
            "errors": dict(self.errors),
            "models": dict(self.models),
        }

    def clear(self) -> None:
        self.requests.clear()
        self.errors.clear()
        self.models.clear()


@dataclass(slots=True)
class SimulatorState:
    """Per-app state: the configured knobs, the seeded failure RNG, the counters, the
    oracle's registered task prompts and the prompt prefixes the provider has cached."""

    config: SimulatorConfig
    rng: random.Random
    oracle_book: OracleBook
    prompt_cache: PromptCache
    stats: SimulatorStats = field(default_factory=SimulatorStats)
    # (endpoint, body as received), newest last: config.keep_request_bodies of them
    received: deque[tuple[str, bytes]] = field(default_factory=deque)


STATE = web.AppKey("frontier_sim_state", SimulatorState)


class _Parsed(Protocol):
    @property
    def views(self) -> tuple[RequestView, ...]: ...

    @property
    def stream(self) -> bool: ...

    @property
    def cacheable(self) -> CacheablePrompt | None: ...

    def with_cache(self, cache: CacheUse) -> Any: ...


P = TypeVar("P", bound=_Parsed)


@dataclass(frozen=True, slots=True)
class _Wire(Generic[P]):
    """How one endpoint parses, answers and fails, in its own wire format."""

    endpoint: str
    body_limit: Callable[[SimulatorConfig], int]
    parse: Callable[[Any], P]
    body: Callable[[P, Sequence[Answer]], bytes]
    stream: Callable[[P, Sequence[Answer]], Iterator[bytes]]
    error: Callable[[int, str, str | None], bytes]


class _Failure(Exception):
    """An error answer the simulator decided to give."""

    def __init__(self, status: int, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.retry_after_s = status, message, retry_after_s


def _anthropic_error(status: int, message: str, _param: str | None) -> bytes:
    return anthropic_wire.error_body(status, message)


_CHAT = _Wire(
    "chat_completions",
    lambda c: c.openai_max_body_bytes,
    openai_wire.parse_chat_request,
    openai_wire.chat_completion,
    openai_wire.chat_stream,
    openai_wire.error_body,
)
_COMPLETIONS = _Wire(
    "completions",
    lambda c: c.openai_max_body_bytes,
    openai_wire.parse_completion_request,
    openai_wire.text_completion,
    openai_wire.text_completion_stream,
    openai_wire.error_body,
)
_RESPONSES = _Wire(
    "responses",
    lambda c: c.openai_max_body_bytes,
    responses_wire.parse_responses_request,
    responses_wire.response_body,
    responses_wire.response_stream,
    openai_wire.error_body,
)
_MESSAGES = _Wire(
    "messages",
    lambda c: c.anthropic_max_body_bytes,
    anthropic_wire.parse_messages_request,
    lambda parsed, answers: anthropic_wire.message(parsed, answers[0]),
    lambda parsed, answers: anthropic_wire.message_stream(parsed, answers[0]),
    _anthropic_error,
)


def _check_failure(state: SimulatorState, knobs: SimulatorConfig, model: str) -> None:
    name = model.lower()
    if "ratelimit" in name:
        raise _Failure(429, f"Simulated rate limit for {model}", knobs.ratelimit_retry_after_s)
    if "error" in name:
        raise _Failure(500, f"Simulated failure of {model}")
    if knobs.reject_unknown_models and model not in knobs.models:
        raise _Failure(404, f"The model {model!r} does not exist")
    if knobs.error_rate >= 1 or (knobs.error_rate > 0 and state.rng.random() < knobs.error_rate):
        retry_after = knobs.ratelimit_retry_after_s if knobs.error_status == 429 else None
        raise _Failure(knobs.error_status, "Simulated upstream error", retry_after)


def _error_response(
    wire: _Wire[Any], state: SimulatorState, failure: _Failure, param: str | None = None
) -> web.Response:
    state.stats.errors[wire.endpoint] += 1
    headers = {"x-request-id": uuid.uuid4().hex}
    if failure.retry_after_s is not None:
        headers["Retry-After"] = str(failure.retry_after_s)
    return web.Response(
        status=failure.status,
        body=wire.error(failure.status, failure.message, param),
        content_type=JSON_TYPE,
        headers=headers,
    )


async def _serve(request: web.Request, wire: _Wire[Any]) -> web.StreamResponse:
    state = request.app[STATE]
    state.stats.requests[wire.endpoint] += 1
    try:
        knobs = apply_header_overrides(state.config, request.headers)
        raw = await request.read()
        if state.config.keep_request_bodies:
            state.received.append((wire.endpoint, raw))
        if len(raw) > wire.body_limit(knobs):
            raise _Failure(413, "Request exceeds the maximum allowed number of bytes.")
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"malformed JSON body: {exc}") from exc
        parsed = wire.parse(payload)
        model = parsed.views[0].model
        state.stats.models[model] += 1
        _check_failure(state, knobs, model)
        answers = [answer_request(view, knobs, state.oracle_book) for view in parsed.views]
        # Only answered requests reach the provider's cache, failures never do.
        parsed = parsed.with_cache(
            state.prompt_cache.use(parsed.cacheable, parsed.views[0].prompt_tokens)
        )
    except (BadRequest, KnobHeaderError) as exc:
        param = exc.param if isinstance(exc, BadRequest) else None
        return _error_response(wire, state, _Failure(400, str(exc)), param)
    except _Failure as failure:
        return _error_response(wire, state, failure)
    delay_ms = knobs.ttft_ms + (knobs.slow_model_ttft_ms if "slow" in model.lower() else 0)
    if delay_ms > 0:
        await asyncio.sleep(delay_ms / 1000)
    written = sum(a.tokens for a in answers)
    cost = knobs.cost_usd(parsed.views[0].prompt_tokens, written)
    request_id = uuid.uuid4().hex
    headers = {
        "x-sim-cost-usd": f"{cost:.8f}",
        "x-request-id": request_id,
        "request-id": request_id,
    }
    if not parsed.stream:
        if knobs.tokens_per_s > 0:  # a provider answers once the whole answer is written
            await asyncio.sleep(written / knobs.tokens_per_s)
        return web.Response(
            body=wire.body(parsed, answers), content_type=JSON_TYPE, headers=headers
        )
    return await _stream(request, wire.stream(parsed, answers), knobs, headers)


async def _stream(
    request: web.Request, events: Iterator[bytes], knobs: SimulatorConfig, headers: dict[str, str]
) -> web.StreamResponse:
    response = web.StreamResponse(headers={**headers, **SSE_HEADERS})
    await response.prepare(request)
    cut, pause = knobs.cut_stream_after_chunks, 0.0
    if knobs.tokens_per_s > 0:
        pause = 1 / knobs.tokens_per_s
    if cut is None and pause == 0:
        # Unpaced: one write keeps the hot path cheap.
        await response.write(b"".join(events))
        await response.write_eof()
        return response
    for sent, event in enumerate(events):
        if sent == cut:
            # Abrupt end: close the socket mid-body, so clients see a truncated stream, not EOF.
            if request.transport is not None:
                request.transport.close()
            return response
        if pause and sent:
            await asyncio.sleep(pause)
        await response.write(event)
    await response.write_eof()
    return response


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    return await _serve(request, _CHAT)


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _serve(request, _COMPLETIONS)


async def _messages(request: web.Request) -> web.StreamResponse:
    return await _serve(request, _MESSAGES)


async def _responses(request: web.Request) -> web.StreamResponse:
    return await _serve(request, _RESPONSES)


async def _models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.stats.requests["models"] += 1
    models = state.config.models
    anthropic = "anthropic-version" in request.headers
    body = anthropic_wire.model_list(models) if anthropic else openai_wire.model_list(models)
    return web.Response(body=body, content_type=JSON_TYPE)


async def _health(_request: web.Request) -> web.Response:
    return web.Response(body=b'{"status":"ok"}', content_type=JSON_TYPE)


async def _stats(request: web.Request) -> web.Response:
    stats = request.app[STATE].stats
    if request.method == "DELETE":
        stats.clear()
    return web.Response(body=orjson.dumps(stats.snapshot()), content_type=JSON_TYPE)


async def _requests(request: web.Request) -> web.Response:
    """GET: the bodies kept as received (``[{"endpoint", "body"}]``, oldest first; a body that is
    not JSON as a string); DELETE: forget them."""
    received = request.app[STATE].received
    if request.method == "DELETE":
        received.clear()
    kept = []
    for endpoint, raw in received:
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw.decode(errors="replace")
        kept.append({"endpoint": endpoint, "body": body})
    return web.Response(body=orjson.dumps(kept), content_type=JSON_TYPE)


async def _prices(request: web.Request) -> web.Response:
    config = request.app[STATE].config
    prices = {
        "input_usd_per_mtok": config.input_usd_per_mtok,
        "output_usd_per_mtok": config.output_usd_per_mtok,
        "models": list(config.models),
    }
    return web.Response(body=orjson.dumps(prices), content_type=JSON_TYPE)


def _registrations(payload: Any) -> list[tuple[str, str]]:
    entries = payload if isinstance(payload, list) else [payload]
    out = []
    for entry in entries:
        digest = entry.get("prompt_hash") if isinstance(entry, dict) else None
        task_id = entry.get("task_id") if isinstance(entry, dict) else None
        if not isinstance(digest, str) or not isinstance(task_id, str):
            raise RegistrationError('each registration is {"prompt_hash": str, "task_id": str}')
        out.append((digest, task_id))
    return out


async def _oracle(request: web.Request) -> web.Response:
    """POST: register task prompts (object or array); DELETE: forget all; GET: how many."""
    book = request.app[STATE].oracle_book
    if request.method == "POST":
        try:
            book.register_all(_registrations(orjson.loads(await request.read())))
        except (orjson.JSONDecodeError, RegistrationError) as exc:
            body = openai_wire.error_body(400, f"bad oracle registration: {exc}", None)
            return web.Response(status=400, body=body, content_type=JSON_TYPE)
    elif request.method == "DELETE":
        book.clear()
    known = {"registered": len(book), "capacity": book.capacity}
    return web.Response(body=orjson.dumps(known), content_type=JSON_TYPE)


def build_app(config: SimulatorConfig | None = None) -> web.Application:
    """The simulator as an aiohttp application (serve it with any aiohttp runner).

    Routes: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses,
    POST /v1/messages, GET /v1/models, GET /health, GET|DELETE /sim/stats (DELETE resets the
    counters), GET /sim/prices, GET|POST|DELETE /sim/oracle (register task prompts, see
    :func:`_oracle`), GET|DELETE /sim/requests (the bodies received, when
    ``keep_request_bodies`` keeps them: :func:`_requests`).
    """
    config = config or SimulatorConfig()
    # aiohttp refuses beyond client_max_size in its own words; each endpoint's own limit is
    # checked in _serve, answered in the endpoint's error shape.
    limit = max(config.openai_max_body_bytes, config.anthropic_max_body_bytes)
    app = web.Application(client_max_size=limit)
    app[STATE] = SimulatorState(
        config=config,
        rng=random.Random(config.seed),
        oracle_book=OracleBook(config.oracle_capacity),
        prompt_cache=PromptCache(config.prompt_cache_size),
        received=deque(maxlen=config.keep_request_bodies),
    )
    app.router.add_post("/v1/chat/completions", _chat_completions)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/responses", _responses)
    app.router.add_post("/v1/messages", _messages)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    app.router.add_get("/sim/stats", _stats)
    app.router.add_delete("/sim/stats", _stats)
    app.router.add_get("/sim/prices", _prices)
    app.router.add_get("/sim/requests", _requests)
    app.router.add_delete("/sim/requests", _requests)
    app.router.add_get("/sim/oracle", _oracle)
    app.router.add_post("/sim/oracle", _oracle)
    app.router.add_delete("/sim/oracle", _oracle)
    return app
