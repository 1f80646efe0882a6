"""Scrubbing for exported datasets: :mod:`traffic.scrub` applied to messages and turns.

Every exported text (message content, tool-call arguments, the answer) goes through
:func:`traffic.scrub.scrub`: each secret or PII span becomes a stable placeholder
(``<SECRET_OPENAI_KEY_1>``, ``<EMAIL_1>``), and the counts per category (``secret``,
``email``, ``credit_card``, ``ip``, ``phone``) go to the export's manifest. The detectors, what
they cover and what they miss: :mod:`traffic.scrub` and docs/secrets.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import traffic.scrub as scrubbing
from traffic.export.turns import AssistantTurn, ToolCall


def scrub_text(text: str) -> tuple[str, Counter[str]]:
    """``text`` with every detected secret/PII span replaced by its placeholder, and how many
    spans of each category (``secret``, ``email``, ``credit_card``, ``ip``, ``phone``) were
    replaced.

    Deterministic and idempotent: scrubbing the output again changes nothing.
    """
    scrubbed = scrubbing.scrub(text)
    return scrubbed.text, scrubbed.counts()


TextScrub = Callable[[str], tuple[str, Counter[str]]]


class CachingScrubber:
    """:func:`scrub_text` with a memo of recent texts, for one export run.

    Conversations resend their system prompt and whole history on every turn, so most texts of
    a traffic export have been scrubbed before. The memo holds at most ``max_chars`` characters
    of input and is emptied when full; results are identical to :func:`scrub_text`.
    """

    def __init__(self, max_chars: int = 1 << 23) -> None:
        self._memo: dict[str, tuple[str, Counter[str]]] = {}
        self._chars = 0
        self._max_chars = max_chars

    def __call__(self, text: str) -> tuple[str, Counter[str]]:
        hit = self._memo.get(text)
        if hit is None:
            hit = scrub_text(text)
            if self._chars + len(text) > self._max_chars:
                self._memo.clear()
                self._chars = 0
            self._memo[text] = hit
            self._chars += len(text)
        return hit[0], Counter(hit[1])


def scrub_messages(
    messages: Iterable[dict[str, Any]], scrub: TextScrub = scrub_text
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Copies of chat ``messages`` with string ``content`` and tool-call ``arguments`` scrubbed
    by ``scrub``.

    Roles, ids, tool names and tool definitions are left alone; the input is not mutated.
    """
    counts: Counter[str] = Counter()
    out: list[dict[str, Any]] = []
    for message in messages:
        copy = dict(message)
        if isinstance(copy.get("content"), str):
            copy["content"], found = scrub(copy["content"])
            counts.update(found)
        if copy.get("tool_calls"):
            calls = []
            for call in copy["tool_calls"]:
                fn = dict(call["function"])
                fn["arguments"], found = scrub(fn["arguments"])
                counts.update(found)
                calls.append({**call, "function": fn})
            copy["tool_calls"] = calls
        out.append(copy)
    return out, counts


def scrub_turn(
    answer: AssistantTurn | None, scrub: TextScrub, counts: Counter[str]
) -> AssistantTurn | None:
    """``answer`` with PII scrubbed from its text and tool-call arguments (found: ``counts``)."""
    if answer is None:
        return None
    content = answer.content
    if content is not None:
        content, found = scrub(content)
        counts.update(found)
    calls = []
    for call in answer.tool_calls:
        arguments, found = scrub(call.arguments)
        counts.update(found)
        calls.append(ToolCall(call.id, call.name, arguments))
    return AssistantTurn(content, tuple(calls))
