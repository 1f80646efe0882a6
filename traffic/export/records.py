"""What every builder shares: the parsed row (:class:`Example`), the built record with its
dedup texts (:class:`BuiltRecord`), the builder protocol and small record helpers."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from traffic.export.conversation import AssistantTurn, LegacyTranslator, Message, conversation_of
from traffic.export.labels import FeedbackSummary, summarize_feedback
from traffic.store.records import InferenceRow


@dataclass(frozen=True)
class Example:
    """One row, parsed: prompt as chat messages, offered tools, model answer and feedback."""

    row_id: str
    route_target: str | None
    tags: Mapping[str, str]
    prompt: list[Message]
    tools: list[dict[str, Any]]
    answer: AssistantTurn | None
    feedback: FeedbackSummary


def example_of(row: InferenceRow, legacy: LegacyTranslator | None = None) -> Example:
    """Parse ``row``; raises :class:`~traffic.export.conversation.UnsupportedShape`."""
    record = row.inference
    prompt, tools, answer = conversation_of(record, legacy)
    return Example(
        row_id=record.id,
        route_target=record.route_target,
        tags=dict(sorted(record.tags.items())),
        prompt=prompt,
        tools=tools,
        answer=answer,
        feedback=summarize_feedback(row.feedback),
    )


@dataclass(frozen=True)
class BuiltRecord:
    """A finished record plus what dedup and split need: the rows it came from, the text that
    identifies it exactly (whole conversation and tools) and the text compared for near
    duplicates (the last turn, after the prompt's last assistant message, and the answers)."""

    record: dict[str, Any]
    source_ids: tuple[str, ...]
    exact_text: str
    near_text: str

    @property
    def sort_id(self) -> str:
        """Output position: when the record became complete (its latest row)."""
        return max(self.source_ids)


class DatasetBuilder(Protocol):
    """Feed examples with :meth:`add`, then call :meth:`finish` once; ``skipped`` counts the
    examples :meth:`add` turned away, by reason."""

    skipped: Counter[str]

    def skip_reason(self, example: Example) -> str | None:
        """Why :meth:`add` would surely give nothing for ``example`` (judged without reading
        its text, so the exporter can skip scrubbing it), else ``None``."""
        ...

    def add(self, example: Example) -> list[BuiltRecord]: ...

    def finish(self) -> list[BuiltRecord]: ...


def prompt_problem(example: Example) -> str | None:
    """Why the prompt cannot be trained on, or ``None`` when it can."""
    if not any(m["role"] == "user" for m in example.prompt):
        return "no_user_message"
    if example.prompt[-1]["role"] == "assistant":
        return "prompt_ends_with_assistant"
    return None


def render(messages: list[Message]) -> str:
    """Plain text of messages for hashing and shingling: ``role: content`` and tool calls."""
    lines: list[str] = []
    for m in messages:
        lines.append(f"{m['role']}: {m.get('content') or ''}")
        for call in m.get("tool_calls") or ():
            lines.append(f"call {call['function']['name']}({call['function']['arguments']})")
    return "\n".join(lines)


def _last_turn(prompt: list[Message]) -> list[Message]:
    last_assistant = max((i for i, m in enumerate(prompt) if m["role"] == "assistant"), default=-1)
    return [m for m in prompt[last_assistant + 1 :] if m["role"] != "system"]


def record_texts(
    prompt: list[Message], tools: list[dict[str, Any]], answers: list[Message]
) -> tuple[str, str]:
    """``(exact_text, near_text)`` of a record (see :class:`BuiltRecord`)."""
    tools_text = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode() if tools else ""
    exact = render(prompt + answers) + "\n" + tools_text
    near = render(_last_turn(prompt) + answers)
    return exact, near


def with_tools(record: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """``record`` with a ``tools`` field added when there are tools (never an empty list)."""
    if tools:
        record["tools"] = tools
    return record
