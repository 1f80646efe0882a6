"""Local back-end: our vLLM replicas over HTTP, streamed straight through.

The hot path parses the request once (done by the caller) and the response as little as it can:
a non-streamed answer is read as bytes and sent as is (parsed once for usage); a stream is cut at
event boundaries and forwarded. Usage is always requested upstream; when the client did not ask
for it, the usage-only chunk is cut out again (found by a substring test, not by parsing every
chunk). A connection failure marks the replica down and tries the next healthy one.
"""

from __future__ import annotations

import dataclasses

import aiohttp
import orjson

from gateway.backends.base import UpstreamCall, UpstreamResult, Usage
from gateway.backends.relay import (
    OpenAIWatcher,
    RelayStream,
    answer_timeouts,
    read_json_answer,
)
from gateway.backends.replica_pool import ReplicaPool
from gateway.config import BackendConfig
from gateway.errors import (
    UpstreamTimeoutError,
    UpstreamUnavailableError,
    upstream_status_error,
)
from gateway.local.prompt_tokens import PromptTokenizer
from router.replicas import NoHealthyReplicaError, ReplicaSelector

_PATHS = {"chat.completions": "/v1/chat/completions", "completions": "/v1/completions"}
_JSON_HEADERS = {"Content-Type": "application/json"}


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
        self._timeouts = answer_timeouts(config)

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
        headers = self._headers
        if call.trace_headers:  # vLLM's own span joins the trace (started with traces on)
            headers = {**headers, **call.trace_headers}
        tried: set[str] = set()
        cut: set[str] = set()  # replicas whose connection closed under a request once
        while True:
            views = [
                v for v in self.pool.views() if v.name not in tried and self._arm(call, v.name)
            ]
            try:
                replica = self._selector.select_replica(self.name, views, features)
            except NoHealthyReplicaError as exc:
                raise UpstreamUnavailableError(
                    f"{self.name}: no healthy replica (tried {sorted(tried)})", backend=self.name
                ) from exc
            tried.add(replica)
            self.pool.acquire(replica)
            try:
                resp = await self._session.post(
                    replica + path,
                    data=payload,
                    headers=headers,
                    timeout=self._timeouts[bool(call.body.get("stream"))],
                )
            except BaseException as exc:  # no answer, cancelled (the client left) included
                self.pool.release(replica)
                if isinstance(exc, TimeoutError):  # first: aiohttp's ServerTimeoutError is both
                    raise UpstreamTimeoutError(
                        f"{self.name}: replica {replica} timed out", backend=self.name
                    ) from exc
                if isinstance(exc, aiohttp.ClientConnectorError):  # nothing listens there
                    self.pool.mark_down(replica)
                    continue
                if isinstance(exc, aiohttp.ClientConnectionError):
                    # Closed before any answer: most often a kept-alive connection the replica's
                    # server had just timed out (uvicorn closes idle ones after 5 s). The replica
                    # may serve: it is tried again; a second cut takes it out of rotation.
                    if replica in cut:
                        self.pool.mark_down(replica)
                    else:
                        cut.add(replica)
                        tried.discard(replica)
                    continue
                raise
            if resp.status != 200:
                try:
                    body = await resp.read()
                finally:
                    self.pool.release(replica)
                    resp.release()
                raise upstream_status_error(
                    self.name, resp.status, body, resp.headers.get("Retry-After")
                )
            return resp, replica

    def _arm(self, call: UpstreamCall, replica: str) -> bool:
        """Whether ``replica`` may serve ``call``'s release arm (every replica: no release with
        weights). No replica of the arm's weights is no healthy replica: the request fails over
        down its chain rather than reach the other arm's weights."""
        if call.weights_pin is None:
            return True
        version, serve_it = call.weights_pin
        return (self.pool.replicas[replica].weights_version == version) == serve_it

    async def complete(self, call: UpstreamCall) -> UpstreamResult:
        resp, replica = await self._post(call)
        try:
            body, parsed = await read_json_answer(resp, self.name, f"replica {replica}")
        finally:
            self.pool.release(replica)
        return UpstreamResult(
            body=body,
            parsed=parsed,
            usage=Usage.from_openai(parsed.get("usage")),
            served_model=self.config.model,
            replica=replica,
            weights_version=self.pool.replicas[replica].weights_version,
        )

    async def open_stream(self, call: UpstreamCall) -> RelayStream:
        resp, replica = await self._post(call)
        return await RelayStream.open(  # releases the replica when it raises
            resp,
            OpenAIWatcher(strip_usage=not call.client_wants_usage),
            name=self.name,
            served_model=self.config.model,
            source=replica,
            replica=replica,
            weights_version=self.pool.replicas[replica].weights_version,
            on_release=lambda: self.pool.release(replica),
        )

    async def aclose(self) -> None:
        await self.pool.stop_probing()
