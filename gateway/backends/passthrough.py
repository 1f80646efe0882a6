"""The frontier back-end: the client's request passed through where the provider speaks its format.

    door \\ provider        OpenAI-compatible             Anthropic
    OpenAI chat            body as sent (model renamed)   litellm's classes translate
    OpenAI completions     text-completion models only;   litellm (acompletion)
                           chat models: litellm
    Responses              OpenAI: the client's own body, litellm's classes translate
                           the answer as it came (native);  the door's chat body
                           others: the translated chat body
    Messages (-> chat)     the translated chat body       the client's own body, and the answer
                                                          in Anthropic's format (native)

A chat body to Anthropic is translated by litellm's own transformation classes and sent by the
same direct POST (:mod:`gateway.backends.anthropic_translate`; ``translation: acompletion`` on
the target, or a request whose ``http://`` image litellm would fetch, goes through
``litellm.acompletion`` instead); the record's tag ``note.translation`` says which path served it.
A direct call is one POST on the gateway's aiohttp session, the answer's bytes relayed as they
come (:mod:`gateway.backends.relay`): no per-call wrapper, no per-chunk objects. The Messages door
to Anthropic sends the client's body unchanged apart from ``model``: thinking blocks with their
signatures, ``cache_control``, ``metadata`` and any field the gateway does not know reach the
provider, with the client's ``anthropic-version`` and ``anthropic-beta`` headers (but for thinking
blocks Anthropic would refuse, which another target made: :mod:`gateway.wire.anthropic_thinking`).
Its answer names the model the client asked for (:func:`_asked_model`). The Responses door to
OpenAI sends the client's body likewise (reasoning items OpenAI cannot resolve left out:
:func:`gateway.wire.reasoning.reconcile_reasoning`), so the reasoning items Codex CLI
keeps with their ``encrypted_content`` reach the model again. A server behind an ``openai/``
target that has no Responses API (it answers the path with 404, 405 or 501, not a refusal of the
model) gets the translation instead, from that call on. A translated body (the Messages
door to an OpenAI-format provider, the Responses door to one without the Responses API) carries
only OpenAI's own chat fields: the translators also emit vLLM's (``continue_final_message``,
``top_k``), which OpenAI refuses.

Errors map exactly as every HTTP back-end's do (:func:`gateway.backends.vllm.upstream_status_
error`): a connection failure or timeout is retriable and counts against the breaker; a 4xx about
the input is passed back with its status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final, NamedTuple

import aiohttp
import orjson

from gateway.backends.anthropic_translate import AnswerState, AnthropicTranslator, translatable
from gateway.backends.base import UpstreamCall, UpstreamResult, UpstreamStream, Usage
from gateway.backends.frontier import LitellmBackend
from gateway.backends.provider_routes import FORWARDED_HEADERS, ProviderRoute, ProviderWire
from gateway.backends.relay import (
    AnthropicWatcher,
    EventWatcher,
    OpenAIWatcher,
    RelayStream,
    ResponsesWatcher,
    answer_timeouts,
    read_json_answer,
)
from gateway.config import BackendConfig
from gateway.errors import UpstreamTimeoutError, UpstreamUnavailableError, upstream_status_error
from gateway.wire.anthropic_thinking import reconcile_thinking
from gateway.wire.native import OPENAI_CHAT_FIELDS, chat_usage, usage_as_openai
from gateway.wire.reasoning import reconcile_reasoning

log = logging.getLogger(__name__)

_JSON = {"Content-Type": "application/json"}
LARGE_CONVERSATION: Final = 200  # messages: translated in a worker thread beyond this
# A native answer's usage in chat completions' shape, by the provider's wire format.
_NATIVE_USAGE: dict[ProviderWire, Callable[[Any], dict[str, Any] | None]] = {
    "anthropic": usage_as_openai,
    "openai": chat_usage,  # the Responses API's
}


class _Direct(NamedTuple):
    """A direct call: where, what, with which headers; whether the provider speaks the door's
    own format (``native``), and what was changed in the client's body for it (``notes``);
    ``translated``: a chat body sent to Anthropic through litellm's classes, and what reading
    its answer needs."""

    url: str
    payload: bytes
    headers: dict[str, str]
    native: bool
    notes: dict[str, str]
    translated: AnswerState | None = None


# The record's note of how a chat body reached Anthropic (tag ``note.translation``).
TRANSLATED_BY_CLASSES: Final = {"translation": "litellm-transforms"}
TRANSLATED_BY_ACOMPLETION: Final = {"translation": "litellm-acompletion"}


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
        # None once the provider showed it has no Responses API (see _no_such_path).
        self._responses_url = route.responses_url
        self._translator: AnthropicTranslator | None = None  # built once litellm is loaded

    def _headers_for(self, call: UpstreamCall) -> dict[str, str]:
        headers = self._headers
        if call.client_headers:
            sent = {k: v for k, v in call.client_headers.items() if k in self._forwarded}
            if sent:
                headers = {**headers, **sent}
        if call.trace_headers:  # the attempt's span: the provider may join the trace
            headers = {**headers, **call.trace_headers}
        return headers

    def _translates(self, call: UpstreamCall) -> bool:
        """A chat body to Anthropic, sent through litellm's transformation classes (not the
        Messages door's own body, and not a request litellm would have to fetch for)."""
        return (
            self.route.wire == "anthropic"
            and self.config.translation == "transforms"
            and call.endpoint == "chat.completions"
            and call.wire_format != "anthropic.messages"
            and bool(self.route.chat_url)
            and translatable(call.body)
        )

    async def _translated(self, call: UpstreamCall, stream: bool) -> _Direct:
        translator = self._translator
        if translator is None:
            lm = await self._fallback.loader.get()
            translator = self._translator = AnthropicTranslator(lm, self.name, self.route.model)
        body = {**call.body, "stream": stream}
        if len(body.get("messages") or ()) > LARGE_CONVERSATION:  # ~8 ms per 1,000 messages
            data, extra, state = await asyncio.to_thread(translator.request, body)
        else:
            data, extra, state = translator.request(body)
        headers = {**self._headers_for(call), **extra}
        payload = orjson.dumps(data)
        return _Direct(self.route.chat_url, payload, headers, False, TRANSLATED_BY_CLASSES, state)

    def _direct(self, call: UpstreamCall) -> _Direct | None:
        """The direct call to make; None: litellm's."""
        route = self.route
        headers = self._headers_for(call)
        if route.wire == "anthropic":
            if call.wire_format != "anthropic.messages" or call.client_body is None:
                return None
            body, notes = reconcile_thinking(call.client_body)
            body = {**body, "model": route.model}
            return _Direct(route.chat_url, orjson.dumps(body), headers, True, notes)
        own, responses_url = call.client_body, self._responses_url
        if responses_url and call.wire_format == "openai.responses" and own is not None:
            body, notes = reconcile_reasoning(own)
            body = {**body, "model": route.model}
            return _Direct(responses_url, orjson.dumps(body), headers, True, notes)
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

    async def _post(self, direct: _Direct, stream: bool) -> Any:
        """The provider's 200 answer; an UpstreamError for any other (``_NoResponsesApi`` when
        the call is one to the Responses API and the provider has none there)."""
        url, payload, headers = direct.url, direct.payload, direct.headers
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
            if direct.native and self.route.wire == "openai" and _no_such_path(resp.status, body):
                raise _NoResponsesApi
            raise upstream_status_error(
                self.name, resp.status, body, resp.headers.get("Retry-After")
            )
        return resp

    def _without_responses(self) -> None:
        """The provider has no Responses API: the Responses door's calls go translated."""
        if self._responses_url is None:  # another call found it out first
            return
        log.warning(
            "%s: %s answered that it has no such path: the Responses door is translated to chat "
            "completions for this target from now on (set responses_api: false to skip the try)",
            self.name,
            self._responses_url,
        )
        self._responses_url = None

    async def _call(self, call: UpstreamCall, stream: bool) -> tuple[_Direct, Any] | None:
        """The direct call made and the provider's 200 answer; None: litellm's call to make."""
        if self._translates(call):
            translated = await self._translated(call, stream)
            return translated, await self._post(translated, stream)
        direct = self._direct(call)
        if direct is None:
            return None
        try:
            return direct, await self._post(direct, stream)
        except _NoResponsesApi:
            self._without_responses()
            return await self._call(call, stream)  # translated now

    async def complete(self, call: UpstreamCall) -> UpstreamResult:
        made = await self._call(call, stream=False)
        if made is None:
            result = await self._fallback.complete(call)
            if self.route.wire == "anthropic":
                result.notes = {**result.notes, **TRANSLATED_BY_ACOMPLETION}
            return result
        direct, resp = made
        native, notes = direct.native, direct.notes
        body, parsed = await read_json_answer(resp, self.name, self.route.provider)
        if direct.translated is not None:
            assert self._translator is not None  # built by _translated
            parsed = self._translator.answer(parsed, direct.translated)
            body = orjson.dumps(parsed)
        asked = _asked_model(call) if native and self.route.wire == "anthropic" else None
        served = parsed.get("model")
        if asked is not None and isinstance(served, str) and served != asked:  # renamed
            parsed["model"] = asked
            body = orjson.dumps(parsed)
        raw_usage = parsed.get("usage")
        if native:
            raw_usage = _NATIVE_USAGE[self.route.wire](raw_usage)
        usage = Usage.from_openai(raw_usage)
        return UpstreamResult(
            body, parsed, usage, self.config.model, None, native=native, notes=notes
        )

    async def open_stream(self, call: UpstreamCall) -> UpstreamStream:
        made = await self._call(call, stream=True)
        if made is None:
            stream = await self._fallback.open_stream(call)
            if self.route.wire == "anthropic":
                stream.outcome.notes.update(TRANSLATED_BY_ACOMPLETION)
            return stream
        direct, resp = made
        native, notes = direct.native, direct.notes
        watcher: EventWatcher
        if direct.translated is not None:
            assert self._translator is not None  # built by _translated
            watcher = self._translator.watcher(direct.translated, not call.client_wants_usage)
        elif not native:
            watcher = OpenAIWatcher(strip_usage=not call.client_wants_usage)
        elif self.route.wire == "anthropic":
            watcher = AnthropicWatcher(_asked_model(call))
        else:
            watcher = ResponsesWatcher()
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


class _NoResponsesApi(Exception):
    """The provider answered a Responses API call as a path it does not have."""


def _no_such_path(status: int, body: bytes) -> bool:
    """Whether an error answer says the path does not exist (an OpenAI-compatible server without
    the Responses API: vLLM before it, Ollama, a proxy) rather than refusing the model, as
    OpenAI's own 404 ``model_not_found`` does."""
    if status not in (404, 405, 501):
        return False
    try:
        error = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return True
    return not (
        isinstance(error, dict)
        and (error.get("code") == "model_not_found" or error.get("param") == "model")
    )


def _asked_model(call: UpstreamCall) -> str | None:
    """The model name a Messages client asked for: its answer carries that name, as Anthropic's
    answers carry the id they were asked for. Claude Code keeps a turn's signed thinking only
    when the answer's model is the one it asks for (it strips thinking made by another model),
    so an alias such as ``auto`` answered under the provider's name would lose it."""
    model = call.client_body.get("model") if call.client_body is not None else None
    return model if isinstance(model, str) else None
