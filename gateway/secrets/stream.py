"""A streamed answer's placeholders replaced by their originals as its events pass.

The events come in blocks of whole events (what every back-end's stream yields). A block is
passed on as it is unless it holds a ``<`` (raw or JSON-escaped) or a text is being held back;
otherwise each event is read and, where it changed, written again:

- the text deltas of one slot (OpenAI: a choice's ``content`` or ``text``, each tool call's
  ``arguments``; Anthropic: a content block's ``text_delta`` or ``input_json_delta``; Responses:
  ``response.output_text.delta`` per output and content part,
  ``response.function_call_arguments.delta`` per output) are one text cut anywhere: a
  placeholder may be split across events. Each delta is appended to what its slot held back, and
  the end of that text that could still become one of the request's placeholders (from its last
  ``<``, a proper prefix of one) is held back again; the rest goes out with every whole
  placeholder replaced (tool arguments: the original as JSON escapes it). Only such a prefix is
  ever held: at most one placeholder's length per slot, never the stream.
- what is held goes out when its slot ends: in the chunk that carries the choice's
  ``finish_reason`` (OpenAI), or as one more delta event just before ``content_block_stop``
  (Anthropic), before the ``.done`` event of that text or those arguments (Responses: the extra
  delta repeats the ``.done`` event's ``sequence_number``), or before ``[DONE]`` /
  ``message_stop`` / the response's end, whichever comes first.
- every other event (a whole message at its start, ``.done`` events and the final response
  with their full texts) has the placeholders in its texts replaced
  (:func:`~gateway.secrets.texts.map_texts`).

Reasoning deltas (``thinking_delta``, ``reasoning_content``, reasoning summaries) are left as
the provider wrote them: a client sends signed thinking back byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal, NamedTuple

import orjson

from gateway.secrets.texts import Swap, map_texts
from gateway.wire.sse import EVENT_SEP, encode_event, encode_named_event

StreamWire = Literal["openai", "anthropic", "responses"]
Slot = tuple[Any, ...]

_ANTHROPIC_DELTAS: Final = {
    "text_delta": ("text", False),
    "input_json_delta": ("partial_json", True),
}
_RESPONSES_DELTAS: Final = {
    "response.output_text.delta": False,
    "response.function_call_arguments.delta": True,
}
_RESPONSES_DONE: Final = {  # the end of a text: whether it is arguments
    "response.output_text.done": False,
    "response.function_call_arguments.done": True,
}
_RESPONSES_PLACE: Final[tuple[str, ...]] = ("item_id", "output_index", "content_index")
_OPENAI_HEAD: Final[tuple[str, ...]] = ("id", "object", "created", "model")
_RESPONSES_ENDS: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})


class _Held(NamedTuple):
    """What a slot holds back: the text, whether it is JSON text, where it goes (the locating
    fields of the last delta of its slot)."""

    text: str
    encoded: bool
    place: dict[str, Any]


class StreamRestorer:
    """One stream's restorer (module docstring); ``feed`` each block of whole events."""

    def __init__(self, swap: Swap, wire: StreamWire) -> None:
        self._swap = swap
        self._wire = wire
        self._placeholders = tuple(f.placeholder for f in swap.findings)
        self._longest = max((len(p) for p in self._placeholders), default=0)
        self._held: dict[Slot, _Held] = {}

    def feed(self, block: bytes) -> bytes:
        if not self._held and b"<" not in block and b"\\u003c" not in block:
            return block
        events = block.split(EVENT_SEP)
        out = [self._event(e) for e in events[:-1]]
        if events[-1]:  # not a whole event: passed on as it came
            out.append(events[-1])
        return b"".join(out)

    def _event(self, event: bytes) -> bytes:
        lines = event.split(b"\n")
        data = [i for i, line in enumerate(lines) if line.startswith(b"data:")]
        if len(data) != 1:
            return event + EVENT_SEP
        payload = lines[data[0]][5:].strip()
        if payload == b"[DONE]":
            return self._flush_openai() + event + EVENT_SEP
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return event + EVENT_SEP
        if not isinstance(obj, dict):
            return event + EVENT_SEP
        if self._wire == "anthropic":
            before, new = self._anthropic(obj)
        elif self._wire == "responses":
            before, new = self._responses(obj)
        else:
            before, new = b"", self._openai(obj)
        if new is obj and not before:
            return event + EVENT_SEP
        lines[data[0]] = b"data: " + orjson.dumps(new)
        return before + b"\n".join(lines) + EVENT_SEP

    # -- one slot's text ----------------------------------------------------------------------
    def _slot(self, slot: Slot, text: str, encoded: bool, place: dict[str, Any]) -> str:
        held = self._held.pop(slot, None)
        if held is not None:
            text = held.text + text
        cut = text.rfind("<")
        if cut >= 0 and len(text) - cut < self._longest:
            tail = text[cut:]
            if any(p.startswith(tail) and p != tail for p in self._placeholders):
                self._held[slot] = _Held(tail, encoded, place)
                text = text[:cut]
        return self._swap.restore(text, encoded)

    def _take(self, match: Callable[[Slot], bool]) -> list[tuple[Slot, _Held]]:
        """The held texts of the slots ``match`` accepts, taken out."""
        taken = [(slot, held) for slot, held in self._held.items() if match(slot)]
        for slot, _ in taken:
            del self._held[slot]
        return taken

    # -- OpenAI chat and completion chunks ----------------------------------------------------
    def _openai(self, obj: dict[str, Any]) -> dict[str, Any]:
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices:
            return obj
        head = {k: obj[k] for k in _OPENAI_HEAD if k in obj}
        out = [self._choice(c, head) if isinstance(c, dict) else c for c in choices]
        return obj if out == choices else {**obj, "choices": out}

    def _choice(self, choice: dict[str, Any], head: dict[str, Any]) -> dict[str, Any]:
        choice = dict(choice)
        i = choice.get("index", 0)
        delta = choice.get("delta")
        if isinstance(delta, dict):
            delta = choice["delta"] = dict(delta)
            if isinstance(delta.get("content"), str):
                delta["content"] = self._slot(("content", i), delta["content"], False, head)
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                delta["tool_calls"] = [self._tool_call(i, c, head) for c in calls]
        if isinstance(choice.get("text"), str):
            choice["text"] = self._slot(("text", i), choice["text"], False, head)
        if choice.get("finish_reason") is not None:
            for slot, held in self._take(lambda s: s[1] == i):
                _append(choice, slot, held.text)
        return choice

    def _tool_call(self, i: Any, call: Any, head: dict[str, Any]) -> Any:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
            return call
        slot = ("arguments", i, call.get("index", 0))
        arguments = self._slot(slot, fn["arguments"], True, head)
        return {**call, "function": {**fn, "arguments": arguments}}

    def _flush_openai(self) -> bytes:
        """A chunk per slot still holding text, before ``[DONE]``."""
        out = b""
        for slot, held in self._take(lambda s: True):
            choice: dict[str, Any] = {"index": slot[1], "finish_reason": None}
            if slot[0] != "text":
                choice["delta"] = {}
            _append(choice, slot, held.text)
            out += encode_event({**held.place, "choices": [choice]})
        return out

    # -- Anthropic Messages -------------------------------------------------------------------
    def _anthropic(self, obj: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
        kind = obj.get("type")
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if not isinstance(delta, dict):
                return b"", obj
            spec = _ANTHROPIC_DELTAS.get(delta.get("type"))  # type: ignore[arg-type]
            text = delta.get(spec[0]) if spec is not None else None
            if spec is None or not isinstance(text, str):
                return b"", obj
            key, encoded = spec
            restored = self._slot(("block", obj.get("index")), text, encoded, {})
            if restored is text:
                return b"", obj
            return b"", {**obj, "delta": {**delta, key: restored}}
        before = b""
        if kind in ("content_block_stop", "message_stop"):
            index = obj.get("index")
            for slot, held in self._take(lambda s: kind == "message_stop" or s[1] == index):
                key = "partial_json" if held.encoded else "text"
                delta = {"type": "input_json_delta" if held.encoded else "text_delta"}
                payload = {"type": "content_block_delta", "index": slot[1]}
                payload["delta"] = {**delta, key: held.text}
                before += encode_named_event("content_block_delta", payload)
        return before, map_texts(obj, self._swap.restore)

    # -- OpenAI Responses ---------------------------------------------------------------------
    def _responses(self, obj: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
        kind = obj.get("type")
        encoded = _RESPONSES_DELTAS.get(kind) if isinstance(kind, str) else None
        if encoded is not None:
            text = obj.get("delta")
            if not isinstance(text, str):
                return b"", obj
            place = {k: obj[k] for k in _RESPONSES_PLACE if k in obj}
            place["type"] = kind
            restored = self._slot(_responses_slot(obj, encoded), text, encoded, place)
            return b"", obj if restored is text else {**obj, "delta": restored}
        before = b""
        if isinstance(kind, str) and kind in _RESPONSES_DONE:
            slot = _responses_slot(obj, _RESPONSES_DONE[kind])
            before = _responses_deltas(self._take(lambda s: s == slot), obj)
        elif kind in _RESPONSES_ENDS:
            before = _responses_deltas(self._take(lambda s: True), obj)
        return before, map_texts(obj, self._swap.restore)


def _append(choice: dict[str, Any], slot: Slot, held: str) -> None:
    """A held text added to the end of its slot in an OpenAI ``choice``."""
    if slot[0] == "text":
        choice["text"] = (choice.get("text") or "") + held
        return
    delta = choice.setdefault("delta", {})
    if slot[0] == "content":
        delta["content"] = (delta.get("content") or "") + held
        return
    calls = delta["tool_calls"] = list(delta.get("tool_calls") or [])
    for n, call in enumerate(calls):
        if isinstance(call, dict) and call.get("index", 0) == slot[2]:
            fn = dict(call.get("function") or {})
            fn["arguments"] = (fn.get("arguments") or "") + held
            calls[n] = {**call, "function": fn}
            return
    calls.append({"index": slot[2], "function": {"arguments": held}})


def _responses_slot(obj: dict[str, Any], arguments: bool) -> Slot:
    if arguments:
        return ("arguments", obj.get("output_index"))
    return ("text", obj.get("output_index"), obj.get("content_index"))


def _responses_deltas(taken: list[tuple[Slot, _Held]], at: dict[str, Any]) -> bytes:
    """One more delta event per held text, numbered as the event ``at`` they precede."""
    out = b""
    for _, held in taken:
        kind = held.place["type"]
        payload = {**held.place, "sequence_number": at.get("sequence_number"), "delta": held.text}
        out += encode_named_event(kind, payload)
    return out
