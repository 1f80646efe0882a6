"""Preference pairs (TRL conversational or OpenAI DPO) from edits and from graded answers to the
same prompt; the rules are in :mod:`traffic.export.builders`."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from traffic.export.config import BuildConfig, DatasetKind
from traffic.export.conversation import AssistantTurn, Message
from traffic.export.dedup import normalize_text
from traffic.export.labels import Grade, answer_grade
from traffic.export.records import BuiltRecord, Example, prompt_problem, record_texts, with_tools


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

    def skip_reason(self, example: Example) -> str | None:
        problem = prompt_problem(example)
        if problem:
            return problem
        fb = example.feedback
        if fb.user_text or (example.answer is not None and answer_grade(fb) is not None):
            return None
        return "no_preference_signal"

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
                "input": with_tools({"messages": prompt}, tools),
                "preferred_output": chosen_msgs,
                "non_preferred_output": rejected_msgs,
            }
        else:
            record = with_tools(
                {"prompt": prompt, "chosen": chosen_msgs, "rejected": rejected_msgs}, tools
            )
        return BuiltRecord(
            record, sources, *record_texts(prompt, tools, chosen_msgs + rejected_msgs)
        )


def _descending(grade: Grade) -> tuple[int, float]:
    label, score = grade.sort_key()
    return (-label, -score)
