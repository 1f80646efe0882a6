"""Chat completions to an Anthropic target through litellm's own transformation classes.

    request   an OpenAI chat body -> ``AnthropicConfig.map_openai_params`` and
              ``transform_request`` -> the Messages body the gateway POSTs itself
    answer    Anthropic's JSON -> ``transform_parsed_response`` -> OpenAI's chat completion
              (cut to OpenAI's own fields: ``frontier.clean_response``)
    stream    each Anthropic event -> ``ModelResponseIterator.chunk_parser`` -> one
              ``chat.completion.chunk`` (:class:`ChatFromAnthropicWatcher`, a relay watcher)

litellm stays the source of what Anthropic's API takes and answers (field mapping, tool and
``response_format`` rewrites, tool-name limits, stop reasons, usage with cache counts); what is
left out is ``acompletion``'s per-call machinery (its logging object, callbacks, cost, retries and
per-chunk wrapper): about 4-6 ms of CPU a call and 1.3 ms a streamed chunk (docs/hot_path.md)
against about 0.3 ms a request, 0.3 ms an answer and 30-66 us an event through the classes alone
(docs/notes/issue45-research.md, measured on litellm 1.106). Hand-written here: only the
stream's finishing (the first chunk's role, empty chunks dropped, usage held to one last chunk
when the client asked for it, ``[DONE]``), which litellm does in its stream wrapper, and the
chunks of a plain text delta and of the stop reason, most of a stream's cost
(:meth:`ChatFromAnthropicWatcher._built`).

``AnthropicConfig`` is built without arguments: arguments set class-level defaults that every
later request of every target would carry. A request whose ``http://`` image litellm would fetch
synchronously goes to the ``acompletion`` path instead (:func:`translatable`).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, NamedTuple

import orjson

from gateway.backends.base import StreamOutcome
from gateway.backends.frontier import clean_chunk, clean_response
from gateway.backends.relay import AnthropicWatcher
from gateway.errors import UpstreamClientError, UpstreamError

REVERSE_MAP_KEY = "_anthropic_tool_name_map"  # litellm's ANTHROPIC_TOOL_NAME_REVERSE_MAP_KEY


class AnswerState(NamedTuple):
    """What the request's translation decided that reading its answer needs."""

    json_mode: bool  # response_format became a forced tool: its input is the answer's text
    reverse_map: dict[str, str] | None  # tool names litellm renamed for Anthropic's limits


def translatable(body: dict[str, Any]) -> bool:
    """Whether the transformation runs without I/O: no ``http://`` image (litellm downloads
    those inside ``transform_request``, blocking)."""
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            image = part.get("image_url") if isinstance(part, dict) else None
            url = image.get("url") if isinstance(image, dict) else image
            if isinstance(url, str) and url.startswith("http://"):
                return False
    return True


class AnthropicTranslator:
    """One Anthropic target's request, answer and stream translation (module docstring)."""

    def __init__(self, litellm: ModuleType, name: str, model: str) -> None:
        del litellm  # imported by the loader: the submodules below are loaded with it
        import httpx  # litellm's own dependency; not imported at the gateway's start-up
        from litellm.litellm_core_utils.core_helpers import map_finish_reason
        from litellm.llms.anthropic.chat.handler import ModelResponseIterator
        from litellm.llms.anthropic.chat.transformation import AnthropicConfig
        from litellm.types.utils import ModelResponse

        self.name = name
        self._model = model.split("/", 1)[1] if model.startswith("anthropic/") else model
        self._config = AnthropicConfig()  # no arguments: they would become class defaults
        self._supported = frozenset(self._config.get_supported_openai_params(self._model))
        self._iterator = ModelResponseIterator
        self._response = ModelResponse
        self._finish_reason: Any = map_finish_reason  # Anthropic's stop reason, as OpenAI's
        self._raw = httpx.Response(200)  # transform_parsed_response reads only its headers

    def request(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str], AnswerState]:
        """The Messages body for ``body`` (an OpenAI chat body), the headers litellm asks for
        (beta features), and what its answer's reading needs. A body Anthropic cannot be asked
        (litellm refuses it) is the client's 400."""
        params = {k: v for k, v in body.items() if k in self._supported}
        # OpenAI's `developer` role is the system prompt to every other provider; litellm maps
        # it in acompletion's common path, which this one skips.
        messages: Any = [  # litellm types them as its TypedDicts: the door validated them
            {**m, "role": "system"} if m.get("role") == "developer" else m
            for m in body.get("messages") or []
        ]
        try:
            optional = self._config.map_openai_params(params, {}, self._model, True)
            json_mode = bool(optional.pop("json_mode", False))
            litellm_params: dict[str, Any] = {}
            headers: dict[str, str] = {}
            data = self._config.transform_request(
                model=self._model,
                messages=messages,
                optional_params=optional,
                litellm_params=litellm_params,
                headers=headers,
            )
        except Exception as exc:  # litellm's prompt factory raises several kinds
            raise UpstreamClientError(
                f"{self.name}: the request cannot be sent to Anthropic: {exc}",
                backend=self.name,
                status=400,
            ) from exc
        reverse = litellm_params.get(REVERSE_MAP_KEY)
        return data, headers, AnswerState(json_mode, reverse if isinstance(reverse, dict) else None)

    def answer(self, parsed: dict[str, Any], state: AnswerState) -> dict[str, Any]:
        """Anthropic's answer as OpenAI's chat completion (an unreadable one: 502)."""
        try:
            response = self._config.transform_parsed_response(
                completion_response=parsed,
                raw_response=self._raw,
                model_response=self._response(),
                json_mode=state.json_mode,
                tool_name_reverse_map=state.reverse_map,
            )
        except Exception as exc:
            raise UpstreamError(
                f"{self.name}: the provider's answer could not be read ({type(exc).__name__}: "
                f"{exc})",
                backend=self.name,
            ) from exc
        return clean_response(response.model_dump())

    def watcher(self, state: AnswerState, strip_usage: bool) -> ChatFromAnthropicWatcher:
        parser = self._iterator(
            streaming_response=None,
            sync_stream=False,
            json_mode=state.json_mode,
            tool_name_reverse_map=state.reverse_map,
        )
        # json_mode: the answer's text comes as a forced tool's input, which the parser turns
        # into text deltas; every event goes through it then.
        fast = None if state.json_mode else self._finish_reason
        return ChatFromAnthropicWatcher(parser, strip_usage, fast)


class ChatFromAnthropicWatcher:
    """Anthropic's events in, OpenAI's chunks out. Usage, completion and error events are read
    by :class:`~gateway.backends.relay.AnthropicWatcher` (one reading of that format: an
    opening error still becomes the provider's HTTP refusal, and the usage chunk is the one
    the native path records); each event it lets through is translated by litellm's parser,
    but for the two that make most of a stream's cost: a plain text delta, and the stop reason
    (mapped by litellm's ``map_finish_reason``, given as ``fast``; None: every event parsed,
    as for ``json_mode``, where the parser turns a forced tool's input into text)."""

    __slots__ = ("_fast", "_first", "_head", "_native", "_parser", "_strip_usage")

    def __init__(self, parser: Any, strip_usage: bool, fast: Any = None) -> None:
        self._native = AnthropicWatcher()
        self._parser = parser
        self._strip_usage = strip_usage
        self._first = True
        self._head: dict[str, Any] | None = None  # the last parsed chunk's id, model, created
        self._fast = fast

    def watch(self, block: bytes, outcome: StreamOutcome) -> bytes:
        passed = self._native.watch(block, outcome)  # up to an error event, if any
        out: list[bytes] = []
        for event in passed.split(b"\n\n"):
            at = event.find(b"data:")
            if at < 0:
                continue
            try:
                data = orjson.loads(event[at + 5 :])
                built = self._built(data)
                if built is not None:  # the bulk of a stream: built here, not by the parser
                    if built:
                        out.append(built)
                    continue
                chunk = clean_chunk(self._parser.chunk_parser(data).model_dump())
            except Exception as exc:  # an event litellm cannot read: the stream is broken
                outcome.error = f"upstream stream error: unreadable event ({exc})"
                break
            chunk.pop("usage", None)  # the native watcher's reading is the one sent
            self._head = {k: v for k, v in chunk.items() if k != "choices"}
            self._finish(chunk, out)
            if isinstance(data, dict) and data.get("type") == "message_stop":
                usage = self._native.usage
                if not self._strip_usage and usage:
                    tail = {**chunk, "choices": [], "usage": usage}
                    out.append(b"data: " + orjson.dumps(tail) + b"\n\n")
                out.append(b"data: [DONE]\n\n")
        return b"".join(out)

    def _built(self, data: Any) -> bytes | None:
        """The chunk of a plain text delta or of the stop reason, built here once a parsed
        chunk gave the stream's id (b"": an empty text, nothing to send; None: an event for
        litellm's parser). Measured: 26 us a text delta through the parser and its pydantic
        chunk, about 250 us its ``message_delta`` (its usage step builds an ``AnthropicConfig``),
        about 3 us each built here; the tests hold both readings to the same chunks."""
        if self._fast is None or self._head is None or self._first or not isinstance(data, dict):
            return None
        kind, delta = data.get("type"), data.get("delta")
        if not isinstance(delta, dict):
            return None
        if kind == "content_block_delta" and delta.get("type") == "text_delta":
            text = delta.get("text")
            if not isinstance(text, str):
                return None
            return self._chunk({"content": text}, None) if text else b""
        if kind == "message_delta":
            stop = delta.get("stop_reason")
            return self._chunk({}, self._fast(stop if isinstance(stop, str) and stop else "stop"))
        return None

    def _chunk(self, delta: dict[str, Any], finish: str | None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return b"data: " + orjson.dumps({**(self._head or {}), "choices": [choice]}) + b"\n\n"

    def _finish(self, chunk: dict[str, Any], out: list[bytes]) -> None:
        """The chunk as OpenAI sends one: the role first, no empty chunk, no empty reason."""
        for choice in chunk["choices"]:
            if choice["delta"].get("content") == "":
                choice["delta"].pop("content")
            if choice["finish_reason"] == "":
                choice["finish_reason"] = None
        if self._first and chunk["choices"]:
            delta = chunk["choices"][0]["delta"]
            chunk["choices"][0]["delta"] = {"role": "assistant", "content": "", **delta}
            self._first = False
        elif not any(c["delta"] or c["finish_reason"] for c in chunk["choices"]):
            return
        out.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
