"""The frontier back-end: the client's request passed through where the provider speaks its format.

    door \\ provider        OpenAI-compatible             Anthropic
    OpenAI chat            body as sent (model renamed)   litellm translates
    OpenAI completions     text-completion models only;   litellm translates
                           chat models: litellm
    Responses (-> chat)    the translated chat body       litellm translates
    Messages (-> chat)     the translated chat body       the client's own body, and the answer
                                                          in Anthropic's format (native)

A direct call is one POST on the gateway's aiohttp session, the answer's bytes relayed as they
come (:mod:`gateway.backends.relay`): no per-call wrapper, no per-chunk objects. The Messages door
to Anthropic sends the client's body unchanged apart from ``model``: thinking blocks with their
signatures, ``cache_control``, ``metadata`` and any field the gateway does not know reach the
provider, with the client's ``anthropic-version`` and ``anthropic-beta`` headers (but for thinking
blocks Anthropic would refuse, which another target made: :mod:`gateway.wire.anthropic_thinking`).
Its answer names the model the client asked for (:func:`_asked_model`). A translated
body (the Messages or Responses door to an OpenAI-format provider) carries only OpenAI's own chat
fields: the translators also emit vLLM's (``continue_final_message``, ``top_k``), which OpenAI
refuses.

Errors map exactly as every HTTP back-end's do (:func:`gateway.backends.vllm.upstream_status_
error`): a connection failure or timeout is retriable and counts against the breaker; a 4xx about
the input is passed back with its status.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import aiohttp
import orjson

from gateway.backends.base import UpstreamCall, UpstreamResult, UpstreamStream, Usage
from gateway.backends.frontier import LitellmBackend
from gateway.backends.provider_routes import FORWARDED_HEADERS, ProviderRoute
from gateway.backends.relay import (
    AnthropicWatcher,
    EventWatcher,
    OpenAIWatcher,
    RelayStream,
    answer_timeouts,
    read_json_answer,
)
from gateway.backends.vllm import upstream_status_error
from gateway.config import BackendConfig
from gateway.errors import UpstreamTimeoutError, UpstreamUnavailableError
from gateway.wire.anthropic_answer import usage_as_openai
from gateway.wire.anthropic_thinking import reconcile_thinking
from gateway.wire.openai_requests import OPENAI_CHAT_FIELDS

_JSON = {"Content-Type": "application/json"}


class _Direct(NamedTuple):
    """A direct call: where, what, with which headers; whether the provider speaks the door's
    own format (``native``), and what was changed in the client's body for it (``notes``)."""

    url: str
    payload: bytes
    headers: dict[str, str]
    native: bool
    notes: dict[str, str]


class PassThroughBackend:
    """A ``kind: litellm`` back-end with a direct route; litellm for the calls it cannot pass."""

    kind = "litellm"

    def __init__(
        self,
        name: str,
        config: BackendConfig,
        route: ProviderRoute,
        session: aiohttp.ClientSession,
        fallback: LitellmBackend,
    ) -> None:
        self.name = name
        self.config = config
        self.route = route
        self._session = session
        self._fallback = fallback
        self._forwarded = FORWARDED_HEADERS[route.wire]
        self._headers = {**_JSON, **route.headers}
        self._timeouts = answer_timeouts(config)

    def _direct(self, call: UpstreamCall) -> _Direct | None:
        """The direct call to make; None: litellm's."""
        route = self.route
        headers = self._headers
        if call.client_headers:
            sent = {k: v for k, v in call.client_headers.items() if k in self._forwarded}
            if sent:
                headers = {**headers, **sent}
        if route.wire == "anthropic":
            if call.wire_format != "anthropic.messages" or call.client_body is None:
                return None
            body, notes = reconcile_thinking(call.client_body)
            body = {**body, "model": route.model}
            return _Direct(route.chat_url, orjson.dumps(body), headers, True, notes)
        if call.endpoint == "chat.completions" and route.chat_url:
            url = route.chat_url
            if call.wire_format == "openai.chat":
                body = dict(call.body)
            else:
                body = {k: v for k, v in call.body.items() if k in OPENAI_CHAT_FIELDS}
        elif call.endpoint == "completions" and route.completions_url:
            url, body = route.completions_url, dict(call.body)
        else:
            return None
        body["model"] = route.model
        if body.get("stream"):
            opts = dict(body.get("stream_options") or {})
            opts["include_usage"] = True
            body["stream_options"] = opts
        return _Direct(url, orjson.dumps(body), headers, False, {})

    async def _post(self, url: str, payload: bytes, headers: dict[str, str], stream: bool) -> Any:
        try:
            resp = await self._session.post(
                url, data=payload, headers=headers, timeout=self._timeouts[stream]
            )
        except TimeoutError as exc:  # first: aiohttp's ServerTimeoutError is both kinds
            raise UpstreamTimeoutError(f"{self.name}: timed out", backend=self.name) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailableError(
                f"{self.name}: {type(exc).__name__}: {exc}", backend=self.name
            ) from exc
        if resp.status != 200:
            try:
                body = await resp.read()
            except (aiohttp.ClientError, TimeoutError):
                body = b""
            finally:
                resp.release()
            raise upstream_status_error(
                self.name, resp.status, body, resp.headers.get("Retry-After")
            )
        return resp

    async def complete(self, call: UpstreamCall) -> UpstreamResult:
        direct = self._direct(call)
        if direct is None:
            return await self._fallback.complete(call)
        url, payload, headers, native, notes = direct
        resp = await self._post(url, payload, headers, stream=False)
        body, parsed = await read_json_answer(resp, self.name, self.route.provider)
        asked, served = _asked_model(call) if native else None, parsed.get("model")
        if asked is not None and isinstance(served, str) and served != asked:  # renamed
            parsed["model"] = asked
            body = orjson.dumps(parsed)
        raw_usage = parsed.get("usage")
        usage = Usage.from_openai(usage_as_openai(raw_usage) if native else raw_usage)
        return UpstreamResult(
            body, parsed, usage, self.config.model, None, native=native, notes=notes
        )

    async def open_stream(self, call: UpstreamCall) -> UpstreamStream:
        direct = self._direct(call)
        if direct is None:
            return await self._fallback.open_stream(call)
        url, payload, headers, native, notes = direct
        resp = await self._post(url, payload, headers, stream=True)
        watcher: EventWatcher = (
            AnthropicWatcher(_asked_model(call))
            if native
            else OpenAIWatcher(strip_usage=not call.client_wants_usage)
        )
        return await RelayStream.open(
            resp,
            watcher,
            name=self.name,
            served_model=self.config.model,
            source=self.route.provider,
            native=native,
            notes=notes,
        )

    async def aclose(self) -> None:
        return None


def _asked_model(call: UpstreamCall) -> str | None:
    """The model name a Messages client asked for: its answer carries that name, as Anthropic's
    answers carry the id they were asked for. Claude Code keeps a turn's signed thinking only
    when the answer's model is the one it asks for (it strips thinking made by another model),
    so an alias such as ``auto`` answered under the provider's name would lose it."""
    model = call.client_body.get("model") if call.client_body is not None else None
    return model if isinstance(model, str) else None
