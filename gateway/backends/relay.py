"""An upstream's server-sent events relayed to the client as they come, read as little as can be.

One implementation for every HTTP back-end that streams (our vLLM replicas and the frontier
pass-through): the response body is cut at event boundaries and forwarded; a *watcher* for the
wire format looks only at the events that matter and fills the :class:`StreamOutcome`:

- OpenAI (``data: {chunk}`` ... ``data: [DONE]``): the usage-only chunk is found by a substring
  test, parsed, and cut out when the client did not ask for usage; ``[DONE]`` completes it; an
  error event (``data: {"error": ...}``, what vLLM sends when a streamed request fails its
  checks) ends the stream as an upstream failure, as Anthropic's does.
- Anthropic Messages (``event: <type>\\ndata: {...}``): ``message_start`` and ``message_delta``
  carry the usage and are parsed (``message_start``'s ``model`` renamed to the one the client
  asked for); ``message_stop`` completes it; an ``error`` event ends the stream as an upstream
  failure (the pipeline tells the client in its door's shape).
- OpenAI Responses (named events too): ``response.completed`` / ``response.incomplete`` carry
  the usage and complete it; ``response.failed`` or ``error`` ends it as an upstream failure.

An error event that opens the stream (no event before it, no byte sent to the client) is the
upstream's refusal rather than a broken stream: :meth:`RelayStream.open` raises it
with the status it carries (vLLM's ``"code": 400``, Anthropic's error type), so the client gets
an HTTP error and the pipeline fails over where that status allows (overloaded, rate limited).

Every other event is forwarded without being parsed: per chunk the gateway does a buffer cut, a
few substring searches and one list append. The record's answer is assembled once, from the kept
bytes, after the stream ended.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import aiohttp
import orjson

from gateway.backends.base import StreamOutcome, Usage
from gateway.config import BackendConfig
from gateway.errors import UpstreamError, UpstreamTimeoutError, upstream_error_for_status
from gateway.wire.native import ANTHROPIC_ERROR_STATUS, chat_usage, usage_as_openai
from gateway.wire.sse import (
    DONE_EVENT,
    EVENT_SEP,
    EventSplitter,
    drop_usage_only_events,
    json_objects,
    last_usage,
)


class EventWatcher(Protocol):
    """Looks at whole events of one wire format; returns the bytes to forward."""

    def watch(self, block: bytes, outcome: StreamOutcome) -> bytes: ...


class OpenAIWatcher:
    __slots__ = ("_strip_usage",)

    def __init__(self, strip_usage: bool) -> None:
        self._strip_usage = strip_usage

    def watch(self, block: bytes, outcome: StreamOutcome) -> bytes:
        at = block.find(_OPENAI_ERROR)
        if at >= 0 and (at == 0 or block[at - 2 : at] == EVENT_SEP):  # at an event's start
            _note_error(outcome, _data_payload(block[at + 6 :].split(EVENT_SEP, 1)[0]))
            return block[:at]  # the pipeline sends the error, in the door's shape
        if b'"usage":{' in block or b'"usage": {' in block:  # compact, or Python's json.dumps
            stripped, usage = drop_usage_only_events(block)
            if usage is None:  # in a chunk with choices, as some providers send it
                usage = last_usage(block)
            if usage is not None:
                outcome.usage = Usage.from_openai(usage)
            if self._strip_usage:
                block = stripped
        if block.endswith(DONE_EVENT):
            outcome.completed = True
        return block


class AnthropicWatcher:
    """Anthropic's stream: usage from ``message_start`` (input, cache reads and writes) and
    ``message_delta`` (output, and input counts where the provider repeats them: the latest
    value of each count wins)."""

    __slots__ = ("_model", "_usage")

    def __init__(self, model: str | None = None) -> None:
        self._model = model  # the name message_start gives the model (None: the provider's)
        self._usage: dict[str, Any] = {}

    @property
    def usage(self) -> dict[str, Any] | None:
        """The usage read so far, in chat completions' shape (None: none yet)."""
        return usage_as_openai(self._usage) if self._usage else None

    def watch(self, block: bytes, outcome: StreamOutcome) -> bytes:
        if _USAGE_EVENTS.named_in(block):
            for data in _USAGE_EVENTS(block):
                message = data.get("message")
                message = message if isinstance(message, dict) else {}
                usage = data.get("usage") or message.get("usage") or {}
                if isinstance(usage, dict):
                    self._usage.update((k, v) for k, v in usage.items() if v is not None)
                served = message.get("model")
                if self._model is not None and isinstance(served, str) and served != self._model:
                    # message_start opens the stream: its "model" is the block's first
                    old, new = orjson.dumps(served), orjson.dumps(self._model)
                    block = block.replace(b'"model":' + old, b'"model":' + new, 1)
            outcome.usage = Usage.from_openai(usage_as_openai(self._usage))
        at = _ERROR_EVENTS.first_at(block)
        if at >= 0:
            for data in _ERROR_EVENTS(block):
                _note_error(outcome, data)
            outcome.error = outcome.error or "upstream stream error"
            # What came before the error event still goes out; the error event is the
            # pipeline's to send, in the door's shape, after the stream raised.
            return block[:at]
        if _STOP_EVENTS.first_at(block) >= 0:
            outcome.completed = True
        return block


class ResponsesWatcher:
    """OpenAI's Responses stream: ``response.completed`` or ``response.incomplete`` completes
    it (its ``response`` carries the usage); ``response.failed`` or an ``error`` event ends it
    as an upstream failure, cut out of what is forwarded: the pipeline ends the stream in the
    door's shape (:func:`gateway.doors.responses.stream.failure_events`)."""

    __slots__ = ()

    def watch(self, block: bytes, outcome: StreamOutcome) -> bytes:
        at = _RESPONSE_FAILURES.first_at(block)
        if at >= 0:
            for data in _RESPONSE_FAILURES(block):
                failed = data.get("response")
                error = failed.get("error") if isinstance(failed, dict) else data
                _note_error(outcome, {"error": error})
            outcome.error = outcome.error or "upstream stream error"
            return block[:at]
        if _RESPONSE_ENDS.first_at(block) >= 0:
            for data in _RESPONSE_ENDS(block):
                response = data.get("response")
                if isinstance(response, dict):
                    outcome.usage = Usage.from_openai(chat_usage(response.get("usage")))
            outcome.completed = True
        return block


_OPENAI_ERROR = b'data: {"error"'


def _data_payload(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _note_error(outcome: StreamOutcome, payload: Any) -> None:
    """An error event's message and status (None when it carries none) on ``outcome``."""
    err = payload.get("error") if isinstance(payload, dict) else None
    message = err.get("message") if isinstance(err, dict) else err
    outcome.error = f"upstream stream error: {message}" if message else "upstream stream error"
    if isinstance(err, dict):
        code = err.get("code")
        if type(code) is int and 400 <= code <= 599:
            outcome.error_status = code
        elif isinstance(err.get("type"), str):
            outcome.error_status = ANTHROPIC_ERROR_STATUS.get(err["type"])


class _NamedEvents:
    """The JSON payloads of the events in a block of whole events whose ``event:`` line names
    one of ``names``.

    Anthropic sends each event as ``event: <name>\\ndata: <json>\\n\\n``: those are found by a
    regex scan (in C) instead of splitting every event and line of the block in Python (about a
    third of the time, per stream: docs/hot_path.md). The patterns have no
    ``^`` anchor, which would cost the scan its literal-prefix search (5x slower); a match
    must start a line, checked after (line ends are LF by then: :class:`EventSplitter`). When
    the scan found fewer events than the block mentions ``event:`` with those names (``data``
    before ``event``, data over several lines, a text that quotes one), the block is read line
    by line instead (each event's last ``data:``
    line)."""

    __slots__ = ("_line", "_mentions", "_quick", "_spellings")

    def __init__(self, *names: bytes) -> None:
        # Each name's line as Anthropic writes it, and as the SSE format also allows it.
        self._spellings = [b"event:" + sep + n for n in names for sep in (b" ", b"")]
        alternatives = b"(?:" + b"|".join(re.escape(n) for n in names) + b")"
        self._quick = re.compile(rb"event: ?" + alternatives + rb"\ndata: ?([^\n]*)\n\n")
        self._mentions = re.compile(rb"event:[ \t]*" + alternatives)
        self._line = re.compile(rb"event:[ \t]*" + alternatives + rb"[ \t]*$")

    def named_in(self, block: bytes) -> bool:
        """Whether ``block`` may hold such an event (substring tests: cheap on every block)."""
        return any(s in block for s in self._spellings)

    def first_at(self, block: bytes) -> int:
        """Where the first such event's name line starts in ``block``; -1 when none does. Only
        a line's start counts: a text that quotes one (``"text":"event: error"``) is no event."""
        first = -1
        for spelling in self._spellings:
            at = block.find(spelling)
            while at > 0 and block[at - 1] != 0x0A:
                at = block.find(spelling, at + 1)
            if at >= 0 and (first < 0 or at < first):
                first = at
        return first

    def __call__(self, block: bytes) -> list[dict[str, Any]]:
        found = [
            m.group(1)
            for m in self._quick.finditer(block)
            if m.start() == 0 or block[m.start() - 1] == 0x0A  # at a line's start
        ]
        if len(found) != len(self._mentions.findall(block)):
            return self._read_lines(block)
        return json_objects(found)

    def _read_lines(self, block: bytes) -> list[dict[str, Any]]:
        found: list[bytes] = []
        for raw in block.replace(b"\r\n", b"\n").split(EVENT_SEP):
            data = b""
            named = False
            for line in raw.split(b"\n"):
                if line.startswith(b"event:"):
                    named = self._line.match(line) is not None
                elif line.startswith(b"data:"):
                    data = line[5:].strip()
            if named and data:
                found.append(data)
        return json_objects(found)


_USAGE_EVENTS = _NamedEvents(b"message_start", b"message_delta")
_ERROR_EVENTS = _NamedEvents(b"error")
_STOP_EVENTS = _NamedEvents(b"message_stop")
_RESPONSE_ENDS = _NamedEvents(b"response.completed", b"response.incomplete")
_RESPONSE_FAILURES = _NamedEvents(b"response.failed", b"error")


class RelayStream:
    """An open upstream stream; iterate it for the client's bytes (the first block included)."""

    def __init__(
        self,
        resp: aiohttp.ClientResponse,
        watcher: EventWatcher,
        *,
        served_model: str,
        source: str,
        replica: str | None = None,
        weights_version: str | None = None,
        native: bool = False,
        on_release: Callable[[], None] | None = None,
        notes: dict[str, str] | None = None,
    ) -> None:
        """Use :meth:`open`: a stream is relayed once its opening was read."""
        self._resp = resp
        self._splitter = EventSplitter()
        self._watcher = watcher
        self._source = source
        self._on_release = on_release
        self._released = False
        self.served_model = served_model
        self.replica = replica
        self.weights_version = weights_version
        self.native = native
        self.outcome = StreamOutcome(notes=notes or {})
        self._opening = b""  # the opening's events as forwarded

    @classmethod
    async def open(
        cls, resp: aiohttp.ClientResponse, watcher: EventWatcher, *, name: str, **kw: Any
    ) -> RelayStream:
        """The stream of ``resp`` (``name``: the back-end; ``kw``: the constructor's), read up
        to its first whole event. Raised before any byte went to the client, so the pipeline
        may still fail over, the response closed and ``on_release`` called: no first byte in
        time (:class:`UpstreamTimeoutError`), a broken or empty stream (:class:`UpstreamError`),
        or an error event first, as an HTTP error of the status it carries (502 without one).
        An error after other events stays a mid-stream failure."""
        stream = cls(resp, watcher, **kw)
        try:
            await stream._read_opening(name)
        except BaseException:  # failed, or cancelled (the client left): nobody will iterate it
            await stream.aclose()
            raise
        return stream

    async def _read_opening(self, name: str) -> None:
        if self._resp.content_type == "application/json":
            raise await self._json_instead(name)
        out, read = b"", False
        while not out and self.outcome.error is None and not self.outcome.completed:
            try:
                block = await self._resp.content.readany()
            except (aiohttp.ClientError, TimeoutError) as exc:
                if isinstance(exc, TimeoutError) and not read:
                    raise UpstreamTimeoutError(
                        f"{name}: no first byte from {self._source}", backend=name
                    ) from exc
                raise UpstreamError(f"{name}: {self._source} failed: {exc}", backend=name) from exc
            if not block:
                if not read:
                    raise UpstreamError(
                        f"{name}: {self._source} sent an empty stream", backend=name
                    )
                break
            read = True
            out = self._process(block)
        self._opening = out
        if self.outcome.error is None or out:
            return
        raise self._refusal(name)

    def _refusal(self, name: str) -> UpstreamError:
        """The error event noted on the outcome, as the HTTP error of the status it carries."""
        status = self.outcome.error_status or 502
        return upstream_error_for_status(name, status, f"{self._source}: {self.outcome.error}")

    async def _json_instead(self, name: str) -> UpstreamError:
        """The error for a JSON answer to a stream request (a proxy's or provider's error sent
        with 200, or a provider that ignored ``stream``): the error it carries, with its status,
        else a 502; raised before any byte went out, so another target may still answer."""
        try:
            _, parsed = await read_json_answer(self._resp, name, self._source)
        except UpstreamError as exc:
            return exc
        if "error" not in parsed:
            return UpstreamError(
                f"{name}: {self._source} answered JSON, not a stream", backend=name
            )
        _note_error(self.outcome, parsed)
        return self._refusal(name)

    def _process(self, block: bytes) -> bytes:
        out = self._splitter.feed(block)
        if not out:
            return b""
        out = self._watcher.watch(out, self.outcome)
        if out:
            self.outcome.raw.append(out)
        return out

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            if self._opening:
                yield self._opening
            if self.outcome.error is None:
                async for block in self._resp.content.iter_any():
                    out = self._process(block)
                    if out:
                        yield out
                    if self.outcome.error is not None:  # the upstream sent an error event
                        break
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.outcome.error = f"stream from {self._source} broke: {type(exc).__name__}: {exc}"
            raise UpstreamError(self.outcome.error, backend=self.served_model) from exc
        finally:
            self._release()
        if self.outcome.error is not None:
            raise UpstreamError(self.outcome.error, backend=self.served_model)
        if not self.outcome.completed:
            self.outcome.error = f"stream from {self._source} ended before its last event"
            raise UpstreamError(self.outcome.error, backend=self.served_model)

    def _release(self) -> None:
        if not self._released:
            self._released = True
            if self._on_release is not None:
                self._on_release()
            self._resp.release()

    async def aclose(self) -> None:
        self._release()
        self._resp.close()


def answer_timeouts(config: BackendConfig) -> tuple[aiohttp.ClientTimeout, aiohttp.ClientTimeout]:
    """The timeouts of an HTTP back-end's call, indexed by whether it streams.

    Both end the call at ``timeout_s`` and bound the connection at ``connect_timeout_s``. Only
    a stream has ``first_byte_timeout_s`` as the longest silence between reads: a provider
    sends a non-streamed answer's first byte when the whole answer is generated, so that limit
    would cut every answer that takes longer to write."""
    unary = aiohttp.ClientTimeout(total=config.timeout_s, sock_connect=config.connect_timeout_s)
    stream = aiohttp.ClientTimeout(
        total=config.timeout_s,
        sock_connect=config.connect_timeout_s,
        sock_read=config.first_byte_timeout_s,
    )
    return unary, stream


async def read_json_answer(
    resp: aiohttp.ClientResponse, name: str, source: str
) -> tuple[bytes, dict[str, Any]]:
    """A non-streamed answer's bytes and JSON object; the response is released. ``name`` is the
    back-end, ``source`` where the answer came from (a replica, or the back-end itself)."""
    try:
        body = await resp.read()
    except TimeoutError as exc:
        raise UpstreamTimeoutError(f"{name}: {source} timed out mid-answer", backend=name) from exc
    except aiohttp.ClientError as exc:
        raise UpstreamError(f"{name}: {source} failed mid-answer: {exc}", backend=name) from exc
    finally:
        resp.release()
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise UpstreamError(f"{name}: {source} answered invalid JSON", backend=name) from exc
    if not isinstance(parsed, dict):
        raise UpstreamError(f"{name}: {source} answered a non-object", backend=name)
    return body, parsed
