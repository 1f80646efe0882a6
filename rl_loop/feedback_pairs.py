"""Preference pairs from answers with feedback, made by the exporter (``traffic.export``).

The model's answers are recorded as the gateway records a local answer (an OpenAI chat exchange,
``route_target`` local) with the feedback an IDE user posts on it, and the rows go through
:func:`traffic.export.build_dataset` with kind ``preference_trl``: the pairs are exactly those
``switchyard traffic export --kind preference_trl`` writes for such a record. Two sources:

- ``edited``: the user rejects the answer and types the right one; the edit is chosen over the
  answer (the chosen side is not the model's own text).
- ``graded`` (on-policy): several answers the model sampled for one prompt, each accepted or
  rejected (the task's verifier standing in for the user); the exporter pairs the best-graded
  answer of the prompt with up to ``max_pairs_per_prompt`` worse ones, so both sides are the
  policy's own samples.

Rows get consecutive times from ``start`` and ids made from them (``traffic.store.ids.id_at``),
so the same answers give the same pairs in the same order. Each row carries its answer's
``training_use`` (the consent of the recorded request its prompt came from), which the exporter
honours as for any recorded row (``traffic.export.consent``): ``deny`` never pairs, ``redact``
pairs scrubbed. :func:`pair_dataset` keeps the whole dataset, lineage included (the ids are
those rows' own: they are in no store).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from traffic.export import (
    BuildConfig,
    Dataset,
    DatasetConfig,
    DedupConfig,
    SplitConfig,
    build_dataset,
)
from traffic.store import FeedbackRecord, InferenceRecord, InferenceRow, TrainingUse
from traffic.store.ids import id_at

Messages = list[dict[str, Any]]
RECORD_START = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class RecordedAnswer:
    """One answer of the model to ``prompt`` and what the user did with it: accepted it,
    rejected it, or (``edit``) rejected it and typed ``edit`` instead. ``training_use``: the
    prompt's consent (None: as the exporter treats rows recorded without one)."""

    prompt: Messages
    answer: str
    accepted: bool
    edit: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    training_use: TrainingUse | None = None


def answer_rows(
    answers: Sequence[RecordedAnswer], *, start: datetime = RECORD_START
) -> list[InferenceRow]:
    """``answers`` as the store's rows: one local chat exchange each, with its feedback."""
    rows = []
    for i, a in enumerate(answers):
        ts = start + timedelta(seconds=i)
        record = InferenceRecord(
            id=id_at(ts, i),
            ts=ts,
            endpoint="chat.completions",
            wire_format="openai.chat",
            request={"model": "auto", "messages": a.prompt},
            response={
                "object": "chat.completion",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": a.answer}}],
            },
            route_target="local",
            served_model="local",
            status=200,
            latency_ms=0.0,
            tags=dict(a.tags),
            training_use=a.training_use,
        )
        at = ts + timedelta(milliseconds=500)
        if a.accepted and a.edit is None:
            feedback = [
                FeedbackRecord(id=id_at(at, i), inference_id=record.id, ts=at, kind="accepted")
            ]
        else:
            feedback = [
                FeedbackRecord(id=id_at(at, i), inference_id=record.id, ts=at, kind="rejected")
            ]
            if a.edit is not None:
                later = at + timedelta(milliseconds=1)
                feedback.append(
                    FeedbackRecord(
                        id=id_at(later, i),
                        inference_id=record.id,
                        ts=later,
                        kind="edited",
                        payload={"text": a.edit},
                    )
                )
        rows.append(InferenceRow(record, feedback))
    return rows


def export_pairs(
    answers: Sequence[RecordedAnswer], *, max_pairs_per_prompt: int = 1
) -> list[dict[str, Any]]:
    """The exporter's ``preference_trl`` pairs of ``answers`` (all in the train split; exact
    duplicates dropped, as the exporter does)."""
    dataset = pair_dataset(answers, max_pairs_per_prompt=max_pairs_per_prompt)
    return [*dataset.train, *dataset.eval]


def pair_dataset(answers: Sequence[RecordedAnswer], *, max_pairs_per_prompt: int = 1) -> Dataset:
    """:func:`export_pairs`'s dataset: the pairs, counts and lineage."""
    config = DatasetConfig(
        kind="preference_trl",
        split=SplitConfig(eval_fraction=0.0),
        dedup=DedupConfig(exact=True, near=False),
        build=BuildConfig(label_policy="explicit", max_pairs_per_prompt=max_pairs_per_prompt),
        scrub_pii=False,
    )
    return build_dataset(answer_rows(answers), config)
