"""Synthetic recorded traffic for the console's benchmark (a store of 1M inferences) and its
screenshots: weeks of a coding assistant's traffic in the store's own records. Never used on a
request path.

The model (seeded, so a store is reproducible):
- time: ``n`` requests spread uniformly over ``span`` ending at ``until``; ids are UUIDv7 of
  their time (:func:`traffic.store.ids.id_at`), so windows select them as they would live ones;
- classes (tag ``family``): :data:`CLASSES`, with the local model's and the frontier's chance of
  an accepted answer; ``learnable`` classes move local as the flywheel turns;
- the flywheel: the span is cut into :data:`ROUNDS` rounds; round ``k`` serves weights
  ``ft-r<k>`` under policy ``v1+fit-r<k>``, and the learnable classes' local share grows from
  25% to 80% over the span (exploration sends 5% of the rest local);
- decisions: 8% pin ``gpt-4o-mini`` (``alias:``), 5% offer tools and match a rule to
  ``frontier-anthropic``, the rest are ``auto`` and decided by the learned policy, whose reason
  carries ``p_local`` and the threshold as the gateway writes them;
- outcomes: latency lognormal around 350 ms (local) or 900 ms (frontier), a TTFT for the 40%
  streamed, frontier cost from token counts at gpt-4o-mini's price, 1.5% errors, 2% failovers
  (a failed first provider call), 40% of the answers judged (accepted / rejected, an edit after
  some rejections), episodes of about five requests, six API keys and some anonymous traffic.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, NamedTuple

from traffic.store import (
    ApiKeyRecord,
    FeedbackKind,
    FeedbackRecord,
    InferenceRecord,
    ModelVersionRecord,
)
from traffic.store.ids import id_at

ROUNDS: Final = 4
THRESHOLD: Final = 0.62
LOCAL, OPENAI, ANTHROPIC = "local", "frontier-openai", "frontier-anthropic"
PRICE_IN, PRICE_OUT = 0.15e-6, 0.6e-6  # USD per token (gpt-4o-mini)
SERVED_MODEL: Final = {LOCAL: "switchyard-local", OPENAI: "gpt-4o-mini", ANTHROPIC: "claude-haiku"}


@dataclass(frozen=True, slots=True)
class TrafficClass:
    name: str
    weight: float
    local_accept: float
    frontier_accept: float
    learnable: bool
    prompt: str


CLASSES: Final = (
    TrafficClass("complete", 0.34, 0.86, 0.9, True, "Complete this function:\ndef {f}(xs):\n"),
    TrafficClass("docstring", 0.16, 0.9, 0.92, True, "Write a docstring for {f}."),
    TrafficClass("explain", 0.2, 0.74, 0.88, True, "Explain what {f} does and why it fails."),
    TrafficClass("refactor", 0.18, 0.45, 0.84, False, "Refactor {f} into smaller functions."),
    TrafficClass("plan", 0.12, 0.3, 0.8, False, "Plan the migration of {f} to async I/O."),
)
FUNCTIONS: Final = ("parse_rows", "merge_spans", "load_config", "retry_call", "hash_blocks")


@dataclass(frozen=True, slots=True)
class Batch:
    inferences: list[InferenceRecord]
    feedback: list[FeedbackRecord]


DENIED_KEY: Final = "key-evals"  # the one key whose traffic may not be trained on


def api_keys(until: datetime) -> list[ApiKeyRecord]:
    """Six keys (hash placeholders: they authenticate nothing), one revoked, most budgeted; two
    in team ``ide``, and one (``evals``) that denies training on its traffic."""
    names = ("ide-team-a", "ide-team-b", "ci-bots", "agents", "evals", "retired-plugin")
    out = []
    for i, name in enumerate(names):
        out.append(
            ApiKeyRecord(
                id=f"key-{name}",
                name=name,
                key_hash=f"synthetic-{name}",
                prefix=f"sy-{name[:6]}",
                created_at=until - timedelta(days=40 - i),
                revoked_at=until - timedelta(days=3) if name == "retired-plugin" else None,
                rpm_limit=600 if i < 2 else None,
                budget_usd=(50.0, 80.0, 20.0, 120.0, None, 10.0)[i],
                spent_usd=(31.2, 77.9, 4.1, 65.0, 12.5, 9.8)[i],
                team_id="ide" if name.startswith("ide-") else None,
                training_use="deny" if f"key-{name}" == DENIED_KEY else None,
            )
        )
    return out


def model_versions(until: datetime, span: timedelta) -> list[ModelVersionRecord]:
    """The served model's lineage over the span: a base and one fine-tune per round."""
    start = until - span
    out = [
        ModelVersionRecord(
            id="base-0",
            created_at=start - timedelta(days=1),
            path="/models/base-0",
            status="retired",
            eval={"accept": 0.41},
        )
    ]
    for k in range(ROUNDS):
        status = "promoted" if k == ROUNDS - 1 else "retired"
        out.append(
            ModelVersionRecord(
                id=f"ft-r{k}",
                parent=out[-1].id,
                created_at=start + span * k / ROUNDS,
                path=f"/models/ft-r{k}",
                status=status,
                eval={"accept": round(0.55 + 0.08 * k, 3)},
                metadata={"kind": "flywheel-round", "round": k},
            )
        )
    out.append(
        ModelVersionRecord(
            id=f"ft-r{ROUNDS}-rejected",
            parent=f"ft-r{ROUNDS - 1}",
            created_at=until - timedelta(hours=2),
            path=f"/models/ft-r{ROUNDS}-rejected",
            status="rejected",
            eval={"accept": 0.71, "gate": "regressed on refactor"},
        )
    )
    return out


def _bodies(
    rng: random.Random, cls: TrafficClass, model: str, tools: bool, stream: bool
) -> tuple[dict[str, Any], dict[str, Any], int, int]:
    f = rng.choice(FUNCTIONS)
    request: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a coding assistant in the user's IDE."},
            {"role": "user", "content": cls.prompt.format(f=f)},
        ],
        "stream": stream,
    }
    if tools:
        request["tools"] = [{"type": "function", "function": {"name": "read_file"}}]
    prompt_tokens = rng.randint(60, 2400)
    completion_tokens = rng.randint(20, 600)
    answer = f"Here is {cls.name} for {f}: ..."
    response = {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
    }
    return request, response, prompt_tokens, completion_tokens


EXPLORE_SHARE = 0.05  # what _decide sends local below the threshold


class _Decided(NamedTuple):
    model: str  # the model asked
    target: str
    reason: str
    columns: dict[str, Any]  # the typed decision the gateway records (``decision_*``)


def _decide(rng: random.Random, cls: TrafficClass, frac: float, k: int) -> _Decided:
    """One request's decision at ``frac`` of the span, round ``k``."""
    roll = rng.random()
    if roll < 0.08:
        return _pinned("gpt-4o-mini", OPENAI, "alias:gpt-4o-mini", "alias")
    if roll < 0.13:
        return _pinned("auto", ANTHROPIC, "rule:tools-to-frontier", "rule")
    share = 0.25 + 0.55 * frac if cls.learnable else 0.0
    goes_local = rng.random() < share
    p = rng.uniform(THRESHOLD, 0.99) if goes_local else rng.uniform(0.05, THRESHOLD)
    if goes_local:
        kind, target, propensity = "learned_local", LOCAL, 1.0
    elif rng.random() < EXPLORE_SHARE:
        kind, target, propensity = "learned_explore", LOCAL, EXPLORE_SHARE
    else:
        kind, target, propensity = "learned_frontier", OPENAI, EXPLORE_SHARE
    why = f"p_local={p:.3f} threshold={THRESHOLD:.3f} scorer=fit-r{k}"
    columns = {
        "decision_kind": kind,
        "decision_target": target,
        "decision_p_local": float(f"{p:.3f}"),  # as the reason shows it
        "decision_threshold": THRESHOLD,
        "decision_propensity": propensity,
        "decision_state_version": f"fit-r{k}",
    }
    return _Decided("auto", target, f"{kind.replace('_', ':', 1)} {why}", columns)


def _pinned(model: str, target: str, reason: str, kind: str) -> _Decided:
    columns = {"decision_kind": kind, "decision_target": target, "decision_propensity": 0.0}
    return _Decided(model, target, reason, columns)


def _one(
    rng: random.Random, at: datetime, frac: float, key_id: str | None, episode: str
) -> tuple[InferenceRecord, list[FeedbackRecord]]:
    cls = rng.choices(CLASSES, [c.weight for c in CLASSES])[0]
    k = min(ROUNDS - 1, int(frac * ROUNDS))
    model, target, reason, decided = _decide(rng, cls, frac, k)
    stream = rng.random() < 0.4
    tools = reason.startswith("rule:")
    request, response, p_tok, c_tok = _bodies(rng, cls, model, tools, stream)
    local = target == LOCAL
    latency = rng.lognormvariate(math.log(350 if local else 900), 0.5)
    failed = rng.random() < 0.015
    failover = not failed and rng.random() < 0.02
    attempts: list[dict[str, Any]] = []
    if failover:
        first = ANTHROPIC if target == OPENAI else OPENAI
        attempts.append({"target": first, "status": 503, "error": "upstream unavailable"})
        latency += rng.uniform(50, 400)
    attempts.append({"target": target, "status": 502 if failed else 200, "latency_ms": latency})
    record = InferenceRecord(
        id=id_at(at, rng.getrandbits(62)),
        ts=at,
        api_key_id=key_id,
        episode_id=episode,
        endpoint="chat.completions",
        wire_format="openai.chat",
        request=request,
        response=None if failed else response,
        route_target=target,
        served_model=SERVED_MODEL[target],
        weights_version=f"ft-r{k}" if local else None,
        replica=f"http://10.0.0.{1 + rng.getrandbits(1)}:8000" if local else None,
        policy_version=f"v1+fit-r{k}",
        policy_reason=reason,
        **decided,
        status=502 if failed else 200,
        error="upstream error" if failed else None,
        stream=stream,
        latency_ms=latency,
        ttft_ms=latency * rng.uniform(0.15, 0.4) if stream else None,
        prompt_tokens=p_tok,
        completion_tokens=c_tok,
        cached_tokens=p_tok // 2 if rng.random() < 0.3 else 0,
        cost_usd=0.0 if local else p_tok * PRICE_IN + c_tok * PRICE_OUT,
        tags={"family": cls.name},
        attempts=attempts,
        training_use="deny" if key_id == DENIED_KEY else "allow",
    )
    feedback: list[FeedbackRecord] = []
    if not failed and rng.random() < 0.4:
        accept = cls.local_accept if local else cls.frontier_accept
        verdict: FeedbackKind = "accepted" if rng.random() < accept else "rejected"
        later = at + timedelta(seconds=rng.uniform(2, 60))
        fb_id = id_at(later, rng.getrandbits(62))
        feedback.append(FeedbackRecord(id=fb_id, inference_id=record.id, ts=later, kind=verdict))
        if verdict == "rejected" and rng.random() < 0.3:
            edit_at = later + timedelta(seconds=5)
            feedback.append(
                FeedbackRecord(
                    id=id_at(edit_at, rng.getrandbits(62)),
                    inference_id=record.id,
                    ts=edit_at,
                    kind="edited",
                    payload={"text": "the fixed answer"},
                )
            )
    return record, feedback


def generate(
    n: int, *, until: datetime, span: timedelta, seed: int = 0, batch_size: int = 5000
) -> Iterator[Batch]:
    """``n`` inferences (and their feedback) in time order, ``batch_size`` at a time."""
    rng = random.Random(seed)
    start = until - span
    seconds = span.total_seconds()
    offsets = sorted(rng.random() * seconds for _ in range(n))
    key_ids: list[str | None] = [*(k.id for k in api_keys(until)[:5]), None]
    episode, key, left = "", None, 0
    for begin in range(0, n, batch_size):
        inferences: list[InferenceRecord] = []
        feedback: list[FeedbackRecord] = []
        for offset in offsets[begin : begin + batch_size]:
            if left == 0:  # a new session: its key, and how many requests it makes
                episode, left = f"ep-{rng.getrandbits(48):012x}", rng.randint(1, 9)
                key = rng.choice(key_ids)
            left -= 1
            at = start + timedelta(seconds=offset)
            record, fb = _one(rng, at, offset / seconds, key, episode)
            inferences.append(record)
            feedback.extend(fb)
        yield Batch(inferences, feedback)
