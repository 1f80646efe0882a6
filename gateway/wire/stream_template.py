"""Reading a stream's text deltas without parsing each event: the events that differ only by
their text are read as one template and one JSON array of their texts.

Why: the writer process assembles every recorded stream, and a 16-token OpenAI stream's 18
events parsed as objects (one ``orjson.loads`` over the whole stream, then the assembler's loop
over 18 chunks) cost about a third of what the writer spends per streamed record
(docs/recording.md, "Reading a stream's text deltas"). Those events are byte for byte the same
but for the text (``{"id":..., "choices": [{"index":0,"delta":{"content":"<text>"},...}]}``),
so: take one event as the template, read it once, and read only the texts of the events that
match it. No library does this (a JSON parser reads every byte it is given into objects), and
the assembler's result is the same (tested over generated streams against the per-event
reading).

When is an event "the template with another text"? When it starts with the template's bytes
before the text and ends with its bytes after it, and what lies between reads, together with the
other texts, as exactly one JSON string each (one ``orjson.loads`` of ``[t1,t2,...]`` that yields
as many strings as there are events). The template itself is parsed with a sentinel text, which
shows that the text sits at a value position of the event and where (:func:`find_template`).
Anything else, an event that does not match or a stream that is not one ``data:`` line per
event, reads the usual way (:func:`gateway.wire.assemble.parse_stream`), so a malformed or
unusual stream costs what it did.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, NamedTuple

import orjson

_STRING: Final = re.compile(rb'"(?:[^"\\]|\\.)*"')  # one JSON string literal
_SENTINEL: Final = "\x00switchyard-template\x00"
_SENTINEL_JSON: Final = orjson.dumps(_SENTINEL)
_DATA: Final = b"data: "
_NEXT_DATA: Final = b"\n\ndata: "
_DONE: Final = b"[DONE]"
_EVENT: Final = b"event:"
_NAMED_DATA: Final = b"\ndata: "
_SEP: Final = b"\n\n"


class Template(NamedTuple):
    """An event cut around its text: ``before + <JSON string> + after``; ``event`` is the
    event parsed with the sentinel as its text (where the text is), ``blank`` with an empty
    text (what every matching event holds but its text)."""

    before: bytes
    after: bytes
    event: dict[str, Any]
    blank: dict[str, Any]


class TextRun(NamedTuple):
    """Consecutive events that are ``template`` with ``texts`` as their texts, in order."""

    template: Template
    texts: list[str]


def find_template(
    event: bytes, key: bytes, payload: Callable[[bytes], bytes | None] | None = None
) -> Template | None:
    """``event`` cut around the string value of its first ``key`` (``b'"content":'``), when
    that value is a JSON string at a value position of the event's JSON object (the event, or
    what ``payload`` takes of it)."""
    at = event.find(key)
    if at < 0:
        return None
    start = at + len(key)
    literal = _STRING.match(event, start)
    if literal is None:
        return None
    before, after = event[:start], event[literal.end() :]
    if not after:  # an object's text is followed by at least its closing brace
        return None
    marked, empty = before + _SENTINEL_JSON + after, before + b'""' + after
    if payload is not None:
        marked_data, empty_data = payload(marked), payload(empty)
        if marked_data is None or empty_data is None:
            return None
        marked, empty = marked_data, empty_data
    try:
        parsed = orjson.loads(marked)
        blank = orjson.loads(empty)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or not isinstance(blank, dict):
        return None
    return Template(before, after, parsed, blank)


def data_events(blob: bytes) -> list[bytes] | None:
    """The payloads of a stream whose every event is one ``data: `` line, LF only, the
    trailing ``[DONE]`` left out (OpenAI); None for any other shape."""
    if b"\r" in blob or not blob.startswith(_DATA):
        return None
    events = blob[len(_DATA) :].rstrip(b"\n").split(_NEXT_DATA)
    if events and events[-1] == _DONE:
        events.pop()
    return events


def named_events(blob: bytes) -> list[bytes] | None:
    """The whole events (``event: <name>\\ndata: <json>``) of a stream of named events, LF
    only (Anthropic); None for any other shape."""
    if b"\r" in blob or not blob.startswith(_EVENT):
        return None
    return blob.rstrip(b"\n").split(_SEP)


def data_payload(event: bytes) -> bytes | None:
    """A :func:`data_events` event's JSON (None: it is not one line)."""
    return None if b"\n" in event else event


def named_payload(event: bytes) -> bytes | None:
    """A :func:`named_events` event's JSON (None: not an ``event:`` line and a ``data:`` line)."""
    name, found, data = event.partition(_NAMED_DATA)
    if not found or not name.startswith(_EVENT) or b"\n" in name or b"\n" in data:
        return None
    return data


def read_events(
    events: list[bytes],
    template: Template,
    payload: Callable[[bytes], bytes | None] = data_payload,
) -> list[dict[str, Any] | TextRun] | None:
    """``events`` as parsed objects (the JSON ``payload`` gives), each run of events matching
    ``template`` as one :class:`TextRun`. An event whose JSON is not an object is left out (as
    the usual reading does); None when the texts do not read as one string each, or an event
    is not of the stream's shape (``payload`` gives None)."""
    before, after = template.before, template.after
    head, cut = len(before), -len(after)
    shortest = head - cut + 2
    texts = [
        e[head:cut] if len(e) >= shortest and e.startswith(before) and e.endswith(after) else None
        for e in events
    ]
    others = [i for i, t in enumerate(texts) if t is None]  # the few events read whole
    if len(others) == len(events):
        return None
    literals = [t for t in texts if t is not None] if others else texts
    try:
        strings = orjson.loads(b"[" + b",".join(literals) + b"]")  # type: ignore[arg-type]
    except orjson.JSONDecodeError:
        return None
    if len(strings) != len(literals) or set(map(type, strings)) != {str}:
        return None
    datas = [payload(events[i]) for i in others]
    if None in datas:
        return None
    values = _objects(datas)  # type: ignore[arg-type]
    out: list[dict[str, Any] | TextRun] = []
    done = 0  # events before this index are in ``out``
    taken = 0  # strings used
    for i, value in zip([*others, len(events)], [*values, None], strict=True):
        if i > done:  # events[done:i] all match the template
            out.append(TextRun(template, strings[taken : taken + i - done]))
            taken += i - done
        done = i + 1
        if isinstance(value, dict):
            out.append(value)
    return out


def _objects(datas: list[bytes]) -> list[Any]:
    """Each JSON text parsed (None where malformed): one ``orjson.loads`` when all are well
    formed, as :func:`gateway.wire.sse.plain_json_events` does."""
    if not datas:
        return []
    try:
        values = orjson.loads(b"[" + b",".join(datas) + b"]")
    except orjson.JSONDecodeError:
        values = None
    if isinstance(values, list) and len(values) == len(datas):
        return values
    out: list[Any] = []
    for data in datas:
        try:
            out.append(orjson.loads(data))
        except orjson.JSONDecodeError:
            out.append(None)
    return out


def sentinel_text(value: object) -> bool:
    """Whether ``value`` is the template's sentinel text."""
    return value == _SENTINEL
