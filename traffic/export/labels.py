"""What a row's feedback says, reduced to the few facts the dataset builders need.

- ``verdict``: the latest of ``accepted``/``rejected`` (by feedback time), ``None`` if neither.
- ``edited_text`` / ``demonstration_text``: the latest non-empty ``payload["text"]`` of each kind.
- ``scores``: every ``score`` value in time order; ``mean_score`` their mean.

``grade`` orders answers to the same prompt for preference pairs: user-authored text (edit or
demonstration) and accepted answers rank 1, unlabelled 0, rejected -1; the mean score breaks
ties, and only when both sides have one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from traffic.store.records import FeedbackRecord

Verdict = Literal["accepted", "rejected"]


@dataclass(frozen=True)
class FeedbackSummary:
    accepted: int = 0
    rejected: int = 0
    edited: int = 0
    demonstrations: int = 0
    comments: int = 0
    scores: tuple[float, ...] = ()
    verdict: Verdict | None = None
    edited_text: str | None = None
    demonstration_text: str | None = None

    @property
    def mean_score(self) -> float | None:
        return sum(self.scores) / len(self.scores) if self.scores else None

    @property
    def user_text(self) -> str | None:
        """The answer the user wrote: a demonstration wins over an edit."""
        return self.demonstration_text or self.edited_text

    @property
    def is_labelled(self) -> bool:
        """Whether anyone judged the answer (accept, reject, edit, demonstration or score)."""
        return bool(self.verdict or self.user_text or self.scores)


@dataclass(frozen=True)
class Grade:
    """Rank of one candidate answer; ``better_than`` is a strict partial order."""

    label: int
    score: float | None = None

    def sort_key(self) -> tuple[int, float]:
        """Ascending from worst to best; a missing score sorts below any score."""
        return (self.label, float("-inf") if self.score is None else self.score)

    def better_than(self, other: Grade) -> bool:
        if self.label != other.label:
            return self.label > other.label
        return self.score is not None and other.score is not None and self.score > other.score


def summarize_feedback(items: Iterable[FeedbackRecord]) -> FeedbackSummary:
    """Fold feedback rows (any order) into a :class:`FeedbackSummary`; unknown kinds are ignored."""
    ordered = sorted(items, key=lambda f: (f.ts, f.kind))
    counts = {"accepted": 0, "rejected": 0, "edited": 0, "demonstration": 0, "comment": 0}
    scores: list[float] = []
    verdict: Verdict | None = None
    texts: dict[str, str] = {}
    for item in ordered:
        kind = item.kind
        if kind in counts:
            counts[kind] += 1
        if kind == "accepted" or kind == "rejected":
            verdict = kind
        elif kind == "score":
            value = item.value
            if isinstance(value, int | float) and not isinstance(value, bool):
                scores.append(float(value))
        elif kind in ("edited", "demonstration"):
            text = (item.payload or {}).get("text")
            if isinstance(text, str) and text.strip():
                texts[kind] = text
    return FeedbackSummary(
        accepted=counts["accepted"],
        rejected=counts["rejected"],
        edited=counts["edited"],
        demonstrations=counts["demonstration"],
        comments=counts["comment"],
        scores=tuple(scores),
        verdict=verdict,
        edited_text=texts.get("edited"),
        demonstration_text=texts.get("demonstration"),
    )


def answer_grade(summary: FeedbackSummary) -> Grade | None:
    """Grade of the row's *model* answer, ``None`` when nothing ranks it.

    An edit or demonstration means the model answer was not good enough as it was (-1).
    """
    if summary.user_text or summary.verdict == "rejected":
        return Grade(-1, summary.mean_score)
    if summary.verdict == "accepted":
        return Grade(1, summary.mean_score)
    if summary.scores:
        return Grade(0, summary.mean_score)
    return None
