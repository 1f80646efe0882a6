"""Outcomes read from the traffic record: who answered what, and was it good?

An outcome is one verdict on one answer, for one arm (``local`` / ``frontier``) of one request
class (``router.learned.class_key`` of the recorded request's tags and tools):
- a live answer with user feedback: the latest of accepted / rejected (an edit follows a
  rejection); the arm is the route target's (``local_target`` or a frontier prefix);
- a step of an agent episode, which carries no feedback of its own: its credit from the
  episode's verdict (``rl_loop.episode_credit``, passed in by the caller);
- a shadow answer (the local model answering a frontier-served request off the user's path):
  its ``comparison["verdict"]`` when the RL loop recorded one, else the injected verifier's
  verdict (cached per shadow id in a :class:`VerdictCache`, since some verifiers run code).
``weights_version`` says which local weights produced a local answer, so a refit can count only
the weights served now.

Consent (``traffic.export.consent``): :func:`consented` leaves out the rows whose caller denied
training on them (with their shadows); a ``redact`` row's text is read scrubbed
(:func:`recorded_text`), so the scorer never learns from what the caller asked to redact.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from rl_loop.rewards import Verify
from router.chat_text import request_text
from router.features import RequestFeatures, recorded_features
from router.learned import class_key
from router.request_text import RequestText, ToolCallText
from traffic.export.config import DEFAULT_UNSTAMPED_TRAINING_USE
from traffic.export.consent import ConsentTally, consent_of, redacted
from traffic.export.conversation import canonical_body
from traffic.store import (
    InferenceFilter,
    InferenceRecord,
    InferenceRow,
    ShadowRecord,
    StoreBackend,
    json_object,
)

Arm = Literal["local", "frontier"]


def answer_text(response: Mapping[str, Any] | None) -> str:
    """The assistant text of a recorded response in any wire format ('' when none)."""
    if not response:
        return ""
    choices = response.get("choices")
    if isinstance(choices, list) and choices:
        first = choices[0]
        message = first.get("message")
        if isinstance(message, Mapping):
            return str(message.get("content") or "")
        return str(first.get("text") or "")
    content = response.get("content")
    if isinstance(content, list):  # anthropic messages
        return "".join(str(b.get("text") or "") for b in content if isinstance(b, Mapping))
    output = response.get("output")
    if isinstance(output, list):  # openai responses
        texts = []
        for item in output:
            for part in item.get("content") or [] if isinstance(item, Mapping) else []:
                if isinstance(part, Mapping) and "text" in part:
                    texts.append(str(part["text"]))
        return "".join(texts)
    return ""


Scrub = Callable[[str], str]


def features_of(inf: InferenceRecord, scrub: Scrub = redacted) -> RequestFeatures:
    """The router's view of a recorded request (prompt size estimated as the gateway does;
    its text as :func:`recorded_text` reads it)."""
    return recorded_features(
        inf.endpoint,
        json_object(inf.request) or {},
        recorded_text(inf, scrub),
        tags=inf.tags,
        api_key_id=inf.api_key_id,
        episode_id=inf.episode_id,
        request_id=inf.id,
    )


def recorded_text(inf: InferenceRecord, scrub: Scrub = redacted) -> RequestText:
    """What the scorer reads of a recorded request: the exporter's conversation (one shape for
    every wire format), read by the same reader as the gateway's (``router.chat_text``); its
    texts put through ``scrub`` when the row's consent is ``redact``."""
    text = request_text(inf.endpoint, canonical_body(inf))
    if consent_of(inf.training_use, DEFAULT_UNSTAMPED_TRAINING_USE)[0] != "redact":
        return text
    calls = tuple(ToolCallText(c.name, scrub(c.arguments), c.id) for c in text.last_calls)
    return replace(
        text, system=scrub(text.system), last_user=scrub(text.last_user), last_calls=calls
    )


def consented(rows: Iterable[InferenceRow]) -> tuple[list[InferenceRow], dict[str, int]]:
    """The rows their consent lets training read (``deny`` ones left out, with their shadow
    answers and feedback), and how many were withheld by reason."""
    tally = ConsentTally(DEFAULT_UNSTAMPED_TRAINING_USE)
    kept = [row for row in rows if tally.admit((row.inference.training_use,)) is not None]
    return kept, tally.counts()


def verdict_of(row: InferenceRow) -> bool | None:
    """The latest accepted / rejected feedback on the row's answer, None if neither."""
    verdict: bool | None = None
    for fb in sorted(row.feedback, key=lambda f: f.ts):
        if fb.kind == "accepted":
            verdict = True
        elif fb.kind == "rejected":
            verdict = False
    return verdict


class VerdictCache:
    """Verifier verdicts of shadow answers by shadow id, kept in a JSON file between runs."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.data: dict[str, bool] = {}
        if path is not None and path.exists():
            self.data = {str(k): bool(v) for k, v in json.loads(path.read_text()).items()}

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        os.replace(tmp, self.path)


@dataclass(frozen=True, slots=True)
class RecordedOutcome:
    """One verdict on one answer, with where it came from."""

    inference_id: str
    class_key: str
    arm: Arm
    accepted: bool
    source: Literal["feedback", "shadow"]
    weights_version: str | None
    cost_usd: float
    latency_ms: float
    text: RequestText | None = None
    # The chance this verdict was observed at all (router.calibration weighs it by 1 / this):
    # a live answer, the probability its decision sent it to that arm (exploration: the
    # exploration share); a shadow, its sampling probability.
    propensity: float = 1.0


async def iter_rows(
    store: StoreBackend, filters: InferenceFilter | None = None
) -> AsyncIterator[InferenceRow]:
    async for row in store.iter_inferences(filters, with_shadows=True):
        yield row


def arm_of_target(target: str | None, local_target: str, frontier_prefix: str) -> Arm | None:
    if target == local_target:
        return "local"
    if target is not None and target.startswith(frontier_prefix):
        return "frontier"
    return None


def row_outcomes(
    row: InferenceRow,
    *,
    class_tags: list[str],
    local_target: str,
    frontier_prefix: str,
    cache: VerdictCache,
    credit: bool | None = None,
    scrub: Scrub = redacted,
) -> list[RecordedOutcome]:
    """The outcomes one recorded row gives (see the module docstring); ``credit`` is the
    verdict of a row that has none of its own (an agent step: ``rl_loop.episode_credit``);
    ``scrub``: how a ``redact`` row's text is scrubbed (a memo, for a whole window)."""
    inf = row.inference
    if not inf.ok:
        return []
    features = features_of(inf, scrub)
    key = class_key(features, class_tags)
    out: list[RecordedOutcome] = []
    arm = arm_of_target(inf.route_target, local_target, frontier_prefix)
    verdict = verdict_of(row)
    if verdict is None:
        verdict = credit
    if arm is not None and verdict is not None:
        out.append(
            RecordedOutcome(
                inf.id,
                key,
                arm,
                verdict,
                "feedback",
                inf.weights_version if arm == "local" else None,
                inf.cost_usd or 0.0,
                inf.latency_ms,
                features.text,
                _observed(inf.decision_propensity if arm == "local" else None),
            )
        )
    for shadow in row.shadows:
        if shadow.target != local_target:
            continue
        judged = shadow_verdict(shadow, cache)
        if judged is None:
            continue
        out.append(
            RecordedOutcome(
                inf.id,
                key,
                "local",
                judged,
                "shadow",
                _str_or_none(shadow.comparison.get("weights_version")),
                0.0,
                float(shadow.comparison.get("latency_ms") or 0.0),
                features.text,
                _observed(inf.shadow_p),
            )
        )
    return out


def shadow_verdict(shadow: ShadowRecord, cache: VerdictCache) -> bool | None:
    """The verdict recorded with the shadow answer, else the cached verifier verdict."""
    judged = shadow.comparison.get("verdict")
    return judged if isinstance(judged, bool) else cache.data.get(shadow.id)


def verify_shadows(
    rows: list[InferenceRow], verify: Verify, cache: VerdictCache, local_target: str
) -> int:
    """Verify every local shadow answer of ``rows`` that has no verdict yet (into ``cache``);
    returns how many were verified. Blocking (verifiers may run code): call it in a thread.

    A row with no tags is left unjudged, not cached as a failure: the task-based verifiers read
    its labels, which a client may join later (the flywheel keeps a batch's labels when the
    batch ends). Judging it early cached ~550-600 false rejections per release in
    run-20261207T164914 (its background traffic's shadows), which the scorer learned from."""
    done = 0
    for row in rows:
        if not row.inference.tags:
            continue
        for shadow in row.shadows:
            if shadow.target != local_target or shadow_verdict(shadow, cache) is not None:
                continue
            passed = verify(dict(row.inference.tags), answer_text(shadow.response))[0]
            cache.data[shadow.id] = bool(passed)
            done += 1
    return done


def _observed(p: float | None) -> float:
    """A recorded probability as a propensity: unknown (older rows, rules) or not positive
    counts as certain, so it never divides by zero."""
    return p if p is not None and 0 < p <= 1 else 1.0


def live_texts(rows: list[InferenceRow], limit: int, scrub: Scrub = redacted) -> list[RequestText]:
    """What the latest ``limit`` requests the learned policy decided said (the live mix
    ``router.calibration`` weights its pool to); rows decided before typed decisions count."""
    out: list[RequestText] = []
    for row in reversed(rows):
        kind = row.inference.decision_kind
        if kind is not None and not kind.startswith("learned"):
            continue
        out.append(recorded_text(row.inference, scrub))
        if len(out) >= limit:
            break
    return out


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
