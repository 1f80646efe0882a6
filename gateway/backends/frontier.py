"""Frontier calls through ``litellm``'s ``acompletion``: where the provider's format differs.

The frontier back-end (:mod:`gateway.backends.passthrough`) posts OpenAI- and Anthropic-format
requests itself when the door and the provider speak the same format; everything else (another
provider, or a door whose format the provider does not speak) comes here, where litellm
translates. litellm's own retries are off (``num_retries=0``, ``max_retries=0``): failover, retry
budget and breakers belong to the gateway. litellm answers in OpenAI's format whatever the
provider, which is what the gateway speaks; it is imported in the background after start-up
(:mod:`gateway.backends.litellm_loader`) and a call awaits that import.
Every litellm call and stream step runs on the :class:`~gateway.backends.worker_loop.WorkerLoop`,
never on the gateway's event loop (litellm's per-message work is synchronous).
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

import aiohttp
import orjson

from gateway.backends.base import StreamOutcome, UpstreamCall, UpstreamResult, Usage
from gateway.backends.litellm_loader import LitellmLoader
from gateway.backends.worker_loop import WorkerLoop
from gateway.config import BackendConfig
from gateway.errors import (
    UpstreamClientError,
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnavailableError,
    upstream_error_for_status,
)
from gateway.wire.native import OPENAI_CHAT_FIELDS
from gateway.wire.sse import DONE_EVENT, encode_event

# Sampling and tool fields passed to litellm as they came from the client: OpenAI's own chat
# fields (litellm drops what a provider does not take); model and streaming are set here.
_CHAT_FIELDS = tuple(sorted(OPENAI_CHAT_FIELDS - {"model", "stream", "stream_options"}))
_COMPLETION_FIELDS = (
    "prompt",
    "suffix",
    "echo",
    "best_of",
    "temperature",
    "top_p",
    "max_tokens",
    "stop",
    "n",
    "seed",
    "user",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
)


TEXT_COMPLETION_PREFIXES = ("text-completion-openai/", "text-completion-codestral/")


def map_litellm_error(name: str, exc: Exception, litellm: ModuleType) -> UpstreamError:
    """litellm's exception as the gateway's upstream error.

    litellm wraps every failure, its own included, in OpenAI SDK exception types: a request it
    cannot translate (a token-id prompt for a chat model, an odd content shape) surfaces as an
    ``APIConnectionError`` with no network fault behind it. That is the client's input, not the
    provider's health: a non-retriable 400 that the breaker does not count. Statuses the provider
    really answered go through the one status mapping (:func:`upstream_error_for_status`).
    """
    ex = litellm.exceptions
    msg = f"{name}: {type(exc).__name__}: {_message(exc)}"[:1000]
    status = getattr(exc, "status_code", None)
    if isinstance(exc, ex.Timeout):
        return UpstreamTimeoutError(msg, backend=name)
    if isinstance(exc, ex.RateLimitError):
        status = 429
    elif isinstance(exc, ex.APIConnectionError | ex.InternalServerError) and _network_fault(exc):
        return UpstreamUnavailableError(msg, backend=name)
    elif isinstance(exc, ex.APIConnectionError) and _answer_fault(exc):
        # The provider answered, in a shape litellm could not read: the provider's fault.
        return UpstreamError(
            f"{name}: the provider's answer could not be read: {_message(exc)}"[:1000],
            backend=name,
        )
    elif isinstance(exc, ex.APIConnectionError):
        return UpstreamClientError(
            f"{name}: the request could not be translated for this provider: {_message(exc)}"[
                :1000
            ],
            backend=name,
            status=400,
        )
    if not isinstance(status, int):
        return UpstreamError(msg, backend=name)
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    retry_after = headers.get("retry-after") if headers is not None else None
    return upstream_error_for_status(name, status, msg, retry_after)


_NETWORK_ERRORS = (OSError, TimeoutError, aiohttp.ClientError)
# litellm's functions that read a provider's answer (litellm 1.x: the provider configs'
# transform_response, the stream iterators' chunk_parser).
_ANSWER_READERS = frozenset(
    {
        "transform_response",
        "transform_parsed_response",
        "convert_to_model_response_object",
        "chunk_parser",
    }
)


def _message(exc: BaseException) -> str:
    """litellm's message for ``exc`` without the traceback it appends to some."""
    text = str(getattr(exc, "message", exc))
    return text.split("\nTraceback (most recent call last)", 1)[0]


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it wraps, outermost first (at most 16: a chain may loop)."""
    cause: BaseException | None = exc
    for _ in range(16):
        if cause is None:
            return
        yield cause
        cause = cause.__cause__ or cause.__context__


def _answer_fault(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps) was raised while litellm read the provider's answer."""
    for cause in _chain(exc):
        tb = cause.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_name in _ANSWER_READERS:
                return True
            tb = tb.tb_next
    return False


def _is_network_error(exc: BaseException) -> bool:
    if isinstance(exc, _NETWORK_ERRORS):
        return True
    # httpx's errors come from litellm only, which imported httpx: not imported here, where it
    # would slow the gateway's start-up (docs/hot_path.md).
    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(exc, httpx.TransportError)


def _network_fault(exc: BaseException) -> bool:
    """Whether a network error (refused, reset, DNS, TLS, timeout) is behind ``exc``."""
    return any(_is_network_error(cause) for cause in _chain(exc))


def _dump(obj: Any) -> dict[str, Any]:
    data: dict[str, Any] = obj.model_dump(exclude_none=False)
    return data


_RESPONSE_KEYS = ("id", "object", "created", "model", "system_fingerprint", "choices", "usage")
_MESSAGE_KEYS = ("role", "content", "refusal", "tool_calls", "reasoning_content", "annotations")


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    return value


def clean_response(data: dict[str, Any]) -> dict[str, Any]:
    """litellm's ``ModelResponse`` dump reduced to the fields OpenAI itself sends."""
    out = {k: data.get(k) for k in _RESPONSE_KEYS}
    choices = []
    for ch in data.get("choices") or []:
        msg = ch.get("message")
        if msg is not None:
            msg = {k: msg.get(k) for k in _MESSAGE_KEYS if k in msg}
            msg.setdefault("content", None)
            if not msg.get("tool_calls"):
                msg.pop("tool_calls", None)
            for k in ("reasoning_content", "annotations"):
                if msg.get(k) is None:
                    msg.pop(k, None)
            choices.append(
                {
                    "index": ch.get("index", 0),
                    "message": msg,
                    "logprobs": ch.get("logprobs"),
                    "finish_reason": ch.get("finish_reason"),
                }
            )
        else:  # text completion choice
            choices.append({k: v for k, v in ch.items() if k != "provider_specific_fields"})
    out["choices"] = choices
    if out.get("usage"):
        out["usage"] = _drop_nulls(out["usage"])
    return out


def clean_chunk(chunk: dict[str, Any]) -> dict[str, Any]:
    """litellm's stream chunk reduced to OpenAI's ``chat.completion.chunk`` fields."""
    out: dict[str, Any] = {
        "id": chunk.get("id"),
        "object": "chat.completion.chunk",
        "created": chunk.get("created"),
        "model": chunk.get("model"),
        "system_fingerprint": chunk.get("system_fingerprint"),
        "choices": [],
    }
    for ch in chunk.get("choices") or []:
        delta = {k: v for k, v in (ch.get("delta") or {}).items() if v is not None}
        delta.pop("provider_specific_fields", None)
        delta.pop("function_call", None)
        if "tool_calls" in delta:
            delta["tool_calls"] = [
                {
                    k: v
                    for k, v in tc.items()
                    if v is not None and k in ("index", "id", "type", "function")
                }
                for tc in delta["tool_calls"]
            ]
        out["choices"].append(
            {
                "index": ch.get("index", 0),
                "delta": delta,
                "logprobs": ch.get("logprobs"),
                "finish_reason": ch.get("finish_reason"),
            }
        )
    if chunk.get("usage"):
        out["usage"] = _drop_nulls(chunk["usage"])
    return out


def _clean_text_chunk(chunk: dict[str, Any]) -> dict[str, Any]:
    """litellm's text-completion stream chunk as OpenAI's ``text_completion`` chunk."""
    out: dict[str, Any] = {
        "id": chunk.get("id"),
        "object": "text_completion",
        "created": chunk.get("created"),
        "model": chunk.get("model"),
        "system_fingerprint": chunk.get("system_fingerprint"),
        "choices": [
            {
                "index": ch.get("index", 0),
                "text": ch.get("text") or "",
                "logprobs": ch.get("logprobs"),
                "finish_reason": ch.get("finish_reason"),
            }
            for ch in chunk.get("choices") or []
        ],
    }
    if chunk.get("usage"):
        out["usage"] = _drop_nulls(chunk["usage"])
    return out


class LitellmStream:
    def __init__(
        self,
        first: Any,
        rest: AsyncIterator[Any],
        served_model: str,
        want_usage: bool,
        name: str,
        litellm: ModuleType,
        worker: WorkerLoop,
        text: bool = False,
    ) -> None:
        self._clean = _clean_text_chunk if text else clean_chunk
        self._worker = worker
        self._first = first
        self._rest = rest
        self.served_model = served_model
        self.replica: str | None = None
        self.weights_version: str | None = None
        self.outcome = StreamOutcome()
        self.native = False
        self._want_usage = want_usage
        self._name = name
        self._litellm = litellm
        self._usage_chunk: dict[str, Any] | None = None

    def _encode(self, raw: Any) -> bytes:
        chunk = self._clean(_dump(raw))
        if "usage" in chunk:
            self.outcome.usage = Usage.from_openai(chunk["usage"])
            if all(
                not c.get("delta") and not c.get("text") and not c["finish_reason"]
                for c in chunk["choices"]
            ):
                chunk["choices"] = []
                self._usage_chunk = chunk
                return b""
            chunk = {k: v for k, v in chunk.items() if k != "usage"}
        self.outcome.chunks.append(chunk)
        return encode_event(chunk)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        out = self._encode(self._first)
        if out:
            yield out
        try:
            async for raw in self._worker.iterate(self._rest):
                out = self._encode(raw)
                if out:
                    yield out
        except Exception as exc:  # litellm raises provider errors of many types mid-stream
            err = map_litellm_error(self._name, exc, self._litellm)
            self.outcome.error = err.message
            raise err from exc
        if self._usage_chunk is not None:
            self.outcome.chunks.append(self._usage_chunk)
            if self._want_usage:
                yield encode_event(self._usage_chunk)
        self.outcome.completed = True
        yield DONE_EVENT

    async def aclose(self) -> None:
        await self._worker.aclose_iterator(self._rest)


class LitellmBackend:
    kind = "litellm"

    def __init__(
        self, name: str, config: BackendConfig, litellm: LitellmLoader, worker: WorkerLoop
    ) -> None:
        self.name = name
        self.config = config
        self._loader = litellm
        self._worker = worker
        self._api_key = os.environ.get(config.api_key_env) if config.api_key_env else None

    @property
    def loader(self) -> LitellmLoader:
        """The background import of litellm this back-end calls through."""
        return self._loader

    def _params(self, call: UpstreamCall, stream: bool) -> dict[str, Any]:
        fields = _CHAT_FIELDS if call.endpoint == "chat.completions" else _COMPLETION_FIELDS
        params = {k: call.body[k] for k in fields if k in call.body}
        params.update(
            model=self.config.model,
            stream=stream,
            timeout=self.config.timeout_s,
            num_retries=0,
            max_retries=0,
        )
        if stream:
            params["stream_options"] = {"include_usage": True}
        if self.config.api_base:
            params["api_base"] = self.config.api_base
        params["api_key"] = self._api_key or "sk-no-key"
        if self.config.extra_headers or call.trace_headers:  # trace: the attempt's span
            params["extra_headers"] = {**self.config.extra_headers, **(call.trace_headers or {})}
        return params

    async def _call(self, call: UpstreamCall, stream: bool) -> Any:
        lm = await self._loader.get()
        if (
            call.endpoint == "completions"
            and call.body.get("suffix")
            and not self.config.model.startswith(TEXT_COMPLETION_PREFIXES)
        ):
            # litellm turns legacy completions for chat models into chat calls, which would
            # drop the suffix silently; refuse instead, naming the fix.
            raise UpstreamClientError(
                f"{self.name}: `suffix` needs a text-completion model; configure it as "
                f"`text-completion-openai/<model>` or route this request to a local target",
                backend=self.name,
                status=400,
                param="suffix",
            )
        fn = lm.acompletion if call.endpoint == "chat.completions" else lm.atext_completion
        try:
            return await self._worker.run(fn(**self._params(call, stream)))
        except Exception as exc:  # litellm's exception tree is wide; mapped by type and status
            raise map_litellm_error(self.name, exc, lm) from exc

    async def complete(self, call: UpstreamCall) -> UpstreamResult:
        resp = await self._call(call, stream=False)
        parsed = clean_response(_dump(resp))
        return UpstreamResult(
            body=orjson.dumps(parsed),
            parsed=parsed,
            usage=Usage.from_openai(parsed.get("usage")),
            served_model=self.config.model,
            replica=None,
        )

    async def open_stream(self, call: UpstreamCall) -> LitellmStream:
        wrapper = await self._call(call, stream=True)
        rest = wrapper.__aiter__()
        lm = await self._loader.get()
        try:
            first = await self._worker.step(rest)
        except StopAsyncIteration as exc:
            raise UpstreamError(f"{self.name}: empty stream", backend=self.name) from exc
        except Exception as exc:  # first-byte failure: mapped so the chain can fail over
            raise map_litellm_error(self.name, exc, lm) from exc
        return LitellmStream(
            first,
            rest,
            self.config.model,
            call.client_wants_usage,
            self.name,
            lm,
            self._worker,
            text=call.endpoint == "completions",
        )

    async def aclose(self) -> None:
        return None
