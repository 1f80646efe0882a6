"""Local back-end: our vLLM replicas over HTTP, streamed straight through.

The hot path parses the request once (done by the caller) and the response as little as it can:
a non-streamed answer is read as bytes and sent as is (parsed once for usage); a stream is cut at
event boundaries and forwarded. Usage is always requested upstream; when the client did not ask
for it, the usage-only chunk is cut out again (found by a substring test, not by parsing every
chunk). A connection failure marks the replica down and tries the next healthy one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson

from gateway.backends.base import StreamOutcome, UpstreamCall, UpstreamResult, Usage
from gateway.backends.replica_pool import ReplicaPool
from gateway.config import BackendConfig
from gateway.errors import (
    UpstreamError,
    UpstreamTimeoutError,
    UpstreamUnavailableError,
    upstream_error_for_status,
)
from gateway.prompt_tokens import PromptTokenizer
from gateway.wire.sse import DONE_EVENT, EventSplitter, drop_usage_only_events
from router.replicas import NoHealthyReplicaError, ReplicaSelector

_PATHS = {"chat.completions": "/v1/chat/completions", "completions": "/v1/completions"}
_JSON_HEADERS = {"Content-Type": "application/json"}


def _error_message(body: bytes) -> str:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:300].decode(errors="replace")
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err)
    return str(data)


def upstream_status_error(
    name: str, status: int, body: bytes, retry_after: str | None
) -> UpstreamError:
    """The gateway error for a non-2xx answer from an OpenAI-compatible back-end."""
    msg = f"{name} answered {status}: {_error_message(body)}"
    return upstream_error_for_status(name, status, msg, retry_after)


class VllmStream:
    def __init__(
        self,
        resp: aiohttp.ClientResponse,
        first: bytes,
        splitter: EventSplitter,
        served_model: str,
        replica: str,
        weights_version: str | None,
        strip_usage: bool,
        pool: ReplicaPool,
    ) -> None:
        self._resp = resp
        self._first = first
        self._splitter = splitter
        self.served_model = served_model
        self.replica: str | None = replica
        self.weights_version = weights_version
        self._strip_usage = strip_usage
        self._pool = pool
        self.outcome = StreamOutcome()
        self.native = False
        self._released = False

    def _process(self, block: bytes) -> bytes:
        out = self._splitter.feed(block)
        if not out:
            return b""
        self.outcome.raw.append(out)
        if b'"usage":{' in out and b'"choices":[]' in out:
            stripped, usage = drop_usage_only_events(out)
            self.outcome.usage = Usage.from_openai(usage)
            if self._strip_usage:
                out = stripped
        if out.endswith(DONE_EVENT):
            self.outcome.completed = True
        return out

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            first = self._process(self._first)
            if first:
                yield first
            async for block in self._resp.content.iter_any():
                out = self._process(block)
                if out:
                    yield out
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.outcome.error = f"stream from {self.replica} broke: {type(exc).__name__}: {exc}"
            raise UpstreamError(self.outcome.error, backend=self.served_model) from exc
        finally:
            self._release()
        if not self.outcome.completed:
            self.outcome.error = f"stream from {self.replica} ended without [DONE]"
            raise UpstreamError(self.outcome.error, backend=self.served_model)

    def _release(self) -> None:
        if not self._released:
            self._released = True
            if self.replica is not None:
                self._pool.replicas[self.replica].in_flight -= 1
            self._resp.release()

    async def aclose(self) -> None:
        self._release()
        self._resp.close()


class VllmBackend:
    kind = "vllm"

    def __init__(
        self,
        name: str,
        config: BackendConfig,
        session: aiohttp.ClientSession,
        selector: ReplicaSelector,
        pool: ReplicaPool,
        tokenizer: PromptTokenizer | None = None,
    ) -> None:
        self.name = name
        self._tokenizer = tokenizer
        self.config = config
        self._session = session
        self._selector = selector
        self.pool = pool
        self._headers = {**_JSON_HEADERS, **config.extra_headers}
        self._timeout = aiohttp.ClientTimeout(
            total=config.timeout_s,
            sock_connect=config.connect_timeout_s,
            sock_read=config.first_byte_timeout_s,
        )

    def _prepare(self, call: UpstreamCall) -> bytes:
        body = dict(call.body)
        body["model"] = self.config.model
        if body.get("stream"):
            opts = dict(body.get("stream_options") or {})
            opts["include_usage"] = True
            body["stream_options"] = opts
        return orjson.dumps(body)

    async def _post(self, call: UpstreamCall) -> tuple[aiohttp.ClientResponse, str]:
        payload = self._prepare(call)
        path = _PATHS[call.endpoint]
        features = call.features
        if self._tokenizer is not None and features.prompt_token_ids is None:
            # Cache-aware choice hashes the prompt's tokens exactly as the replica will.
            ids = await self._tokenizer.atoken_ids(call.endpoint, call.body)
            features = dataclasses.replace(features, prompt_token_ids=ids)
        tried: set[str] = set()
        while True:
            views = [v for v in self.pool.views() if v.name not in tried]
            try:
                replica = self._selector.select_replica(self.name, views, features)
            except NoHealthyReplicaError as exc:
                raise UpstreamUnavailableError(
                    f"{self.name}: no healthy replica (tried {sorted(tried)})", backend=self.name
                ) from exc
            tried.add(replica)
            state = self.pool.replicas[replica]
            state.in_flight += 1
            try:
                resp = await self._session.post(
                    replica + path, data=payload, headers=self._headers, timeout=self._timeout
                )
            except TimeoutError as exc:  # first: aiohttp's ServerTimeoutError is both kinds
                state.in_flight -= 1
                raise UpstreamTimeoutError(
                    f"{self.name}: replica {replica} timed out", backend=self.name
                ) from exc
            except aiohttp.ClientConnectionError:
                state.in_flight -= 1
                self.pool.mark_down(replica)
                continue
            if resp.status != 200:
                try:
                    body = await resp.read()
                finally:
                    state.in_flight -= 1
                    resp.release()
                raise upstream_status_error(
                    self.name, resp.status, body, resp.headers.get("Retry-After")
                )
            return resp, replica

    async def complete(self, call: UpstreamCall) -> UpstreamResult:
        resp, replica = await self._post(call)
        state = self.pool.replicas[replica]
        try:
            body = await resp.read()
        except TimeoutError as exc:
            raise UpstreamTimeoutError(
                f"{self.name}: replica {replica} timed out mid-answer", backend=self.name
            ) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamError(
                f"{self.name}: replica {replica} failed mid-answer: {exc}", backend=self.name
            ) from exc
        finally:
            state.in_flight -= 1
            resp.release()
        try:
            parsed: dict[str, Any] = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise UpstreamError(
                f"{self.name}: replica {replica} answered with invalid JSON", backend=self.name
            ) from exc
        return UpstreamResult(
            body=body,
            parsed=parsed,
            usage=Usage.from_openai(parsed.get("usage")),
            served_model=self.config.model,
            replica=replica,
            weights_version=state.weights_version,
        )

    async def open_stream(self, call: UpstreamCall) -> VllmStream:
        resp, replica = await self._post(call)
        state = self.pool.replicas[replica]
        try:
            first = await resp.content.readany()
        except (aiohttp.ClientError, TimeoutError) as exc:
            state.in_flight -= 1
            resp.close()
            if isinstance(exc, TimeoutError):
                raise UpstreamTimeoutError(
                    f"{self.name}: no first byte from {replica}", backend=self.name
                ) from exc
            raise UpstreamError(f"{self.name}: {replica} failed: {exc}", backend=self.name) from exc
        if not first:
            state.in_flight -= 1
            resp.release()
            raise UpstreamError(f"{self.name}: {replica} sent an empty stream", backend=self.name)
        return VllmStream(
            resp,
            first,
            EventSplitter(),
            self.config.model,
            replica,
            state.weights_version,
            strip_usage=not call.client_wants_usage,
            pool=self.pool,
        )

    async def aclose(self) -> None:
        await self.pool.stop_probing()
