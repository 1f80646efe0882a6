"""Dataset builders: parsed rows in, records in the trainers' exact formats out.

SFT (OpenAI fine-tuning chat JSONL)::

    {"messages": [...prompt, {"role": "assistant", "content": ..., "tool_calls"?: [...]}],
     "tools"?: [...]}

  Target, first that applies: the latest demonstration text, the latest edited text (both are
  user-written, so they stand even when the model's answer was rejected); otherwise the model's
  answer, unless the row has any ``rejected`` feedback, or its mean score is below
  ``min_score``; the answer must be ``accepted``, or, under ``label_policy
  "unlabelled_frontier"``, a successful answer of a frontier route nobody accepted or rejected.

Preference pairs, for one prompt (same normalized messages and tools):

- within a row: an edit or demonstration is chosen over the model's own answer;
- across rows: each row offers one candidate (its user-written text, ranked as accepted, or its
  model answer graded by :func:`gateway.export.labels.answer_grade`); the best candidate is
  chosen against up to ``max_pairs_per_prompt`` strictly worse ones from other rows, worst
  first. Identical answers never pair.

  TRL conversational: ``{"prompt": [...], "chosen": [assistant], "rejected": [assistant],
  "tools"?: [...]}``; OpenAI DPO: ``{"input": {"messages": [...], "tools"?: [...]},
  "preferred_output": [assistant], "non_preferred_output": [assistant]}``.

RL prompts: ``{"prompt": [...], "id": row id, "tags": {...}, "reward_context": {"feedback":
{accepted, rejected, edited, demonstrations, scores}, "reference_answer"?: text, <tag>?: value
for each of reward_context_tags}, "tools"?: [...]}``; ``tools`` is kept so the RL environment
offers the same tools production did.

Every prompt must end with a user or tool message (an Anthropic assistant prefill does not).
Rows that give nothing are counted in the builder's ``skipped`` counter by reason.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from gateway.export.config import BuildConfig, DatasetKind
from gateway.export.conversation import (
    AssistantTurn,
    Message,
    answer_of,
    to_messages,
    tools_of,
)
from gateway.export.dedup import normalize_text
from gateway.export.labels import FeedbackSummary, Grade, answer_grade, summarize_feedback
from gateway.export.rows import ExportRow
from gateway.export.writers import ColumnType


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


def example_of(row: ExportRow) -> Example:
    """Parse ``row``; raises :class:`~gateway.export.conversation.UnsupportedShape`."""
    return Example(
        row_id=row["id"],
        route_target=row.get("route_target"),
        tags=dict(sorted((row.get("tags") or {}).items())),
        prompt=to_messages(row),
        tools=tools_of(row),
        answer=answer_of(row),
        feedback=summarize_feedback(row.get("feedback") or []),
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
    """Feed examples with :meth:`add`, then call :meth:`finish` once."""

    skipped: Counter[str]

    def add(self, example: Example) -> list[BuiltRecord]: ...

    def finish(self) -> list[BuiltRecord]: ...


def columns_for(kind: DatasetKind) -> tuple[tuple[str, ColumnType], ...]:
    """Top-level fields of a record of ``kind`` in output order, with their Parquet type."""
    if kind == "sft":
        return (("messages", "json_list"), ("tools", "json_list"))
    if kind == "preference_trl":
        return (
            ("prompt", "json_list"),
            ("chosen", "json_list"),
            ("rejected", "json_list"),
            ("tools", "json_list"),
        )
    if kind == "preference_openai":
        return (
            ("input", "json"),
            ("preferred_output", "json_list"),
            ("non_preferred_output", "json_list"),
        )
    return (
        ("prompt", "json_list"),
        ("id", "string"),
        ("tags", "json"),
        ("reward_context", "json"),
        ("tools", "json_list"),
    )


def make_builder(kind: DatasetKind, config: BuildConfig) -> DatasetBuilder:
    """The builder for ``kind``."""
    if kind == "sft":
        return _PerRowBuilder(lambda ex: sft_record(ex, config))
    if kind == "rl_prompts":
        return _PerRowBuilder(lambda ex: rl_prompt_record(ex, config))
    return PreferenceBuilder(kind, config)


# ---------------------------------------------------------------- shared pieces


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


def _texts(
    prompt: list[Message], tools: list[dict[str, Any]], answers: list[Message]
) -> tuple[str, str]:
    tools_text = orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode() if tools else ""
    exact = render(prompt + answers) + "\n" + tools_text
    near = render(_last_turn(prompt) + answers)
    return exact, near


def _with_tools(record: dict[str, Any], tools: list[dict[str, Any]]) -> dict[str, Any]:
    if tools:
        record["tools"] = tools
    return record


class _PerRowBuilder:
    def __init__(self, build: Callable[[Example], BuiltRecord | str]) -> None:
        self._build = build
        self.skipped: Counter[str] = Counter()

    def add(self, example: Example) -> list[BuiltRecord]:
        result = self._build(example)
        if isinstance(result, str):
            self.skipped[result] += 1
            return []
        return [result]

    def finish(self) -> list[BuiltRecord]:
        return []


# ---------------------------------------------------------------- SFT


def sft_target(example: Example, config: BuildConfig) -> AssistantTurn | str:
    """The answer to train on, or the reason there is none (see the module docstring)."""
    fb = example.feedback
    if fb.user_text:
        return AssistantTurn(fb.user_text)
    if fb.rejected:
        return "rejected"
    if example.answer is None:
        return "no_answer"
    mean = fb.mean_score
    if config.min_score is not None and mean is not None and mean < config.min_score:
        return "low_score"
    if fb.verdict == "accepted":
        return example.answer
    if config.label_policy == "unlabelled_frontier":
        target = example.route_target or ""
        if target.startswith(config.frontier_route_prefixes):
            return example.answer
        return "not_frontier"
    return "unlabelled"


def sft_record(example: Example, config: BuildConfig) -> BuiltRecord | str:
    """OpenAI fine-tuning chat record, or a skip reason."""
    problem = prompt_problem(example)
    if problem:
        return problem
    target = sft_target(example, config)
    if isinstance(target, str):
        return target
    answer = [target.to_message()]
    record = _with_tools({"messages": example.prompt + answer}, example.tools)
    return BuiltRecord(record, (example.row_id,), *_texts(example.prompt, example.tools, answer))


# ---------------------------------------------------------------- RL prompts


def reference_answer(example: Example) -> str | None:
    """User-written text, else the text of an accepted, never rejected model answer."""
    fb = example.feedback
    if fb.user_text:
        return fb.user_text
    if fb.verdict == "accepted" and not fb.rejected and example.answer is not None:
        return example.answer.content
    return None


def rl_prompt_record(example: Example, config: BuildConfig) -> BuiltRecord | str:
    """RL prompt record with its reward context, or a skip reason."""
    problem = prompt_problem(example)
    if problem:
        return problem
    fb = example.feedback
    context: dict[str, Any] = {
        "feedback": {
            "accepted": fb.accepted,
            "rejected": fb.rejected,
            "edited": fb.edited,
            "demonstrations": fb.demonstrations,
            "scores": list(fb.scores),
        }
    }
    reference = reference_answer(example)
    if reference:
        context["reference_answer"] = reference
    for key in config.reward_context_tags:
        if key in example.tags:
            context[key] = example.tags[key]
    record = {
        "prompt": example.prompt,
        "id": example.row_id,
        "tags": dict(example.tags),
        "reward_context": context,
    }
    _with_tools(record, example.tools)
    return BuiltRecord(record, (example.row_id,), *_texts(example.prompt, example.tools, []))


# ---------------------------------------------------------------- preference pairs


def prompt_key(prompt: list[Message], tools: list[dict[str, Any]]) -> bytes:
    """Identity of a prompt: messages (content whitespace-normalized) and tools."""
    normalized = [
        {**m, "content": normalize_text(m["content"])} if isinstance(m.get("content"), str) else m
        for m in prompt
    ]
    blob = orjson.dumps([normalized, tools], option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(blob, digest_size=16).digest()


def _same_answer(a: AssistantTurn, b: AssistantTurn) -> bool:
    return normalize_text(a.content or "") == normalize_text(b.content or "") and (
        a.tool_calls == b.tool_calls
    )


@dataclass(frozen=True)
class _Candidate:
    row_id: str
    grade: Grade
    turn: AssistantTurn


@dataclass
class _Group:
    prompt: list[Message]
    tools: list[dict[str, Any]]
    candidates: list[_Candidate] = field(default_factory=list)


class PreferenceBuilder:
    """Preference pairs in TRL or OpenAI DPO format.

    Holds one candidate answer per graded row, grouped by prompt, until :meth:`finish`; rows
    without any preference signal are not kept.
    """

    def __init__(self, kind: DatasetKind, config: BuildConfig) -> None:
        if kind not in ("preference_trl", "preference_openai"):
            raise ValueError(f"PreferenceBuilder builds preference kinds, not {kind!r}")
        self._openai = kind == "preference_openai"
        self._config = config
        self._groups: dict[bytes, _Group] = {}
        self._paired: set[str] = set()
        self.skipped: Counter[str] = Counter()

    def add(self, example: Example) -> list[BuiltRecord]:
        problem = prompt_problem(example)
        if problem:
            self.skipped[problem] += 1
            return []
        fb, answer = example.feedback, example.answer
        records: list[BuiltRecord] = []
        candidate: _Candidate | None = None
        if fb.user_text:
            user_turn = AssistantTurn(fb.user_text)
            candidate = _Candidate(example.row_id, Grade(1, fb.mean_score), user_turn)
            if answer is not None and not _same_answer(user_turn, answer):
                records.append(
                    self._pair(example.prompt, example.tools, user_turn, answer, (example.row_id,))
                )
                self._paired.add(example.row_id)
        elif answer is not None:
            grade = answer_grade(fb)
            if grade is not None:
                candidate = _Candidate(example.row_id, grade, answer)
        if candidate is not None:
            key = prompt_key(example.prompt, example.tools)
            group = self._groups.setdefault(key, _Group(example.prompt, example.tools))
            group.candidates.append(candidate)
        elif not records:
            self.skipped["no_preference_signal"] += 1
        return records

    def finish(self) -> list[BuiltRecord]:
        records: list[BuiltRecord] = []
        candidate_rows: set[str] = set()
        for key in sorted(self._groups):
            group = self._groups[key]
            candidate_rows.update(c.row_id for c in group.candidates)
            records.extend(self._cross_row_pairs(group))
        self.skipped["unpaired"] += len(candidate_rows - self._paired)
        self._groups.clear()
        return records

    def _cross_row_pairs(self, group: _Group) -> list[BuiltRecord]:
        best = min(group.candidates, key=lambda c: (_descending(c.grade), c.row_id))
        worse = sorted(
            (
                c
                for c in group.candidates
                if best.grade.better_than(c.grade)
                and c.row_id != best.row_id
                and not _same_answer(c.turn, best.turn)
            ),
            key=lambda c: (c.grade.sort_key(), c.row_id),
        )
        pairs = []
        for loser in worse[: self._config.max_pairs_per_prompt]:
            sources = tuple(sorted({best.row_id, loser.row_id}))
            pairs.append(self._pair(group.prompt, group.tools, best.turn, loser.turn, sources))
            self._paired.update(sources)
        return pairs

    def _pair(
        self,
        prompt: list[Message],
        tools: list[dict[str, Any]],
        chosen: AssistantTurn,
        rejected: AssistantTurn,
        sources: tuple[str, ...],
    ) -> BuiltRecord:
        chosen_msgs, rejected_msgs = [chosen.to_message()], [rejected.to_message()]
        if self._openai:
            record: dict[str, Any] = {
                "input": _with_tools({"messages": prompt}, tools),
                "preferred_output": chosen_msgs,
                "non_preferred_output": rejected_msgs,
            }
        else:
            record = _with_tools(
                {"prompt": prompt, "chosen": chosen_msgs, "rejected": rejected_msgs}, tools
            )
        return BuiltRecord(record, sources, *_texts(prompt, tools, chosen_msgs + rejected_msgs))


def _descending(grade: Grade) -> tuple[int, float]:
    label, score = grade.sort_key()
    return (-label, -score)
