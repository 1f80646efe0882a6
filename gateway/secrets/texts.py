"""Where the texts of a request and of an answer are, in every wire format the doors speak, and
placeholders swapped for originals (and back) in them.

One walker, :func:`map_texts`, visits the strings a person or a model wrote: message contents
and their text parts, system prompts and instructions, tool results, tool-call arguments,
Responses input and output items, Anthropic content blocks, legacy prompts. It leaves alone what
only names or encodes: ids, roles, types, tool names, model names, media (``data``, image URLs,
files), cache markers, and reasoning a provider checks byte for byte or that a client keeps as
it came (Anthropic ``thinking`` blocks and their signatures, Responses ``reasoning`` items with
their ``encrypted_content``, chat ``reasoning_content``): a placeholder there is neither put in
nor taken out. A request is walked from its text fields (:data:`REQUEST_KEYS`: not its tool
definitions or sampling fields); an answer, or a stream event, whole.

A tool call's ``arguments`` is JSON text inside a string: the walker says so (``encoded``), and
an original goes back into it as JSON escapes it (a PEM block's newlines as ``\\n``). Anthropic's
tool ``input`` is an object: every string in it is walked, whatever its key.

The walk copies only what changes (the dicts and lists above a changed string): a body without
a secret comes back as the same object. A text function returns its argument itself when it
changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final

import orjson

if TYPE_CHECKING:
    from traffic.scrub import Finding

# (text, encoded) -> the text, or the same object when nothing changed.
TextFn = Callable[[str, bool], str]

REQUEST_KEYS: Final = ("messages", "system", "input", "instructions", "prompt", "suffix")
_OPAQUE_KEYS: Final = frozenset(
    {
        "type",
        "role",
        "id",
        "call_id",
        "tool_call_id",
        "tool_use_id",
        "item_id",
        "name",
        "model",
        "object",
        "status",
        "signature",
        "encrypted_content",
        "reasoning_content",
        "reasoning",
        "cache_control",
        "media_type",
        "data",
        "image_url",
        "file_data",
        "file_id",
        "file_url",
        "usage",
        "logprobs",
    }
)
_OPAQUE_TYPES: Final = frozenset(
    {
        "thinking",
        "redacted_thinking",
        "reasoning",
        "image",
        "image_url",
        "input_image",
        "input_audio",
        "input_file",
        "file",
    }
)
_ENCODED_KEYS: Final = frozenset({"arguments"})  # JSON text in a string
_FREE_KEYS: Final = frozenset({"input"})  # an object there is a tool's input: every string


def map_texts(value: Any, fn: TextFn, *, encoded: bool = False, free: bool = False) -> Any:
    """``value`` with ``fn`` applied to each of its texts (module docstring); ``free``: every
    string, whatever its key (a tool's input)."""
    if isinstance(value, str):
        return fn(value, encoded)
    if isinstance(value, list):
        out: list[Any] | None = None
        for i, item in enumerate(value):
            new = map_texts(item, fn, free=free)
            if new is not item:
                if out is None:
                    out = list(value)
                out[i] = new
        return value if out is None else out
    if not isinstance(value, dict):
        return value
    kind = value.get("type")
    if not free and isinstance(kind, str) and kind in _OPAQUE_TYPES:
        return value
    changed: dict[str, Any] | None = None
    for key, item in value.items():
        if free:
            new = map_texts(item, fn, free=True)
        elif key in _OPAQUE_KEYS:
            continue
        else:
            tool_input = key in _FREE_KEYS and isinstance(item, dict)
            new = map_texts(item, fn, encoded=key in _ENCODED_KEYS, free=tool_input)
        if new is not item:
            if changed is None:
                changed = dict(value)
            changed[key] = new
    return value if changed is None else changed


def map_request(body: dict[str, Any], fn: TextFn) -> dict[str, Any]:
    """``body`` (a request in any door's format) with ``fn`` applied to its texts."""
    out: dict[str, Any] | None = None
    for key in REQUEST_KEYS:
        if key in body:
            item = body[key]
            new = map_texts(item, fn)
            if new is not item:
                if out is None:
                    out = dict(body)
                out[key] = new
    return body if out is None else out


def escaped(value: str) -> str:
    """``value`` as it is written inside a JSON string."""
    return orjson.dumps(value).decode()[1:-1]


class Swap:
    """A request's placeholders and their originals, both ways, in plain and in JSON-encoded
    text. ``findings``: one per placeholder (:class:`traffic.scrub.Finding`)."""

    __slots__ = ("_masks", "escaped", "findings")

    def __init__(self, findings: Iterable[Finding]) -> None:
        self.findings = tuple(findings)
        self.escaped = tuple(dataclasses.replace(f, value=escaped(f.value)) for f in self.findings)
        pairs = zip(self.findings, self.escaped, strict=True)
        longest_first = sorted(pairs, key=lambda p: -len(p[0].value))
        self._masks = (
            tuple((f.value, f.placeholder) for f, _ in longest_first),
            tuple((e.value, e.placeholder) for _, e in longest_first),
        )

    def restore(self, text: str, encoded: bool) -> str:
        """``text`` with each placeholder of this request replaced by its original."""
        if "<" not in text:
            return text
        from traffic.scrub.scrubber import restore  # loaded: these findings came from it

        out = restore(text, self.escaped if encoded else self.findings)
        return text if out == text else out

    def mask(self, text: str, encoded: bool) -> str:
        """``text`` with each original of this request replaced by its placeholder."""
        out = text
        for value, placeholder in self._masks[encoded]:
            if value in out:
                out = out.replace(value, placeholder)
        return out


RESTORE: Final = "restore"
MASK: Final = "mask"


def recorded_answers(
    mode: str, findings: tuple[Finding, ...], fn: Callable[..., Any], *args: Any
) -> tuple[Any, Any]:
    """The record's ``(response, canonical_response)`` of an exchange whose request was
    scanned: ``fn(*args)`` (the draft's own way of assembling them) with every placeholder of
    the request put back (``mode`` :data:`RESTORE`) or every original masked (:data:`MASK`).
    Module-level: a draft carries it to the writer process (gateway.recording.draft.Deferred)."""
    response, canonical = fn(*args)
    swap = Swap(findings)
    apply = swap.restore if mode == RESTORE else swap.mask
    return map_texts(response, apply), map_texts(canonical, apply)
