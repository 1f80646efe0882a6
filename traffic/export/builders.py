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
  model answer graded by :func:`traffic.export.labels.answer_grade`); the best candidate is
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

from collections import Counter
from collections.abc import Callable
from typing import Any

from traffic.export.config import BuildConfig, DatasetKind
from traffic.export.conversation import AssistantTurn
from traffic.export.preference import PreferenceBuilder
from traffic.export.records import (
    BuiltRecord,
    DatasetBuilder,
    Example,
    example_of,
    prompt_problem,
    record_texts,
    with_tools,
)
from traffic.export.writers import ColumnType

__all__ = [
    "BuiltRecord",
    "DatasetBuilder",
    "Example",
    "PreferenceBuilder",
    "columns_for",
    "example_of",
    "make_builder",
    "prompt_problem",
    "reference_answer",
    "rl_prompt_record",
    "sft_record",
    "sft_target",
]


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
        return _PerRowBuilder(
            lambda ex: sft_record(ex, config),
            lambda ex: prompt_problem(ex) or _reason(sft_target(ex, config)),
        )
    if kind == "rl_prompts":
        return _PerRowBuilder(lambda ex: rl_prompt_record(ex, config), prompt_problem)
    return PreferenceBuilder(kind, config)


def _reason(result: object) -> str | None:
    return result if isinstance(result, str) else None


class _PerRowBuilder:
    """A builder whose records each come from one row (SFT, RL prompts)."""

    def __init__(
        self,
        build: Callable[[Example], BuiltRecord | str],
        skip_reason: Callable[[Example], str | None],
    ) -> None:
        self._build = build
        self.skip_reason = skip_reason
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
    record = with_tools({"messages": example.prompt + answer}, example.tools)
    return BuiltRecord(
        record, (example.row_id,), *record_texts(example.prompt, example.tools, answer)
    )


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
    with_tools(record, example.tools)
    return BuiltRecord(record, (example.row_id,), *record_texts(example.prompt, example.tools, []))
