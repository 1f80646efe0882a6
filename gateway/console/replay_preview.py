"""A routing change previewed on recorded traffic: the live policy and the candidate replayed
side by side (:func:`router.replay.replay`) on the newest successful exchanges of a window.

Each recorded exchange becomes a :class:`router.replay.ReplayItem`: the router's view of the
recorded request (:func:`features_of`, the reading ``python -m rl_loop.replay`` makes:
prompt size estimated from the messages, tags without ``note.*``, the scorer's text from the
exporter's conversation), the arm that served it (a ``vllm`` target is local, any other
frontier), the user's verdict (the latest accepted / rejected feedback), its cost and latency,
the verdict of a shadow answer when the RL loop recorded one (``comparison["verdict"]``), and
the logged propensity (``decision_propensity``). The class of an item is the console's class
tag. Only the newest served weights' local verdicts count (:func:`served_weights`; the others
are left out and counted). Beside the replay, the candidate's off-policy estimate
(:func:`router.ope.off_policy`: doubly robust accept and SNIPS cost with 95% intervals, the
share the replay imputes).

Reading the rows is the store's work; replaying is pure CPU and runs on a worker thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from router.chat_text import request_text
from router.features import RequestFeatures, recorded_features
from router.learned import class_key
from router.ope import OffPolicy, off_policy
from router.policy import RoutingPolicy
from router.replay import Arm, ReplayItem, ReplayReport, replay
from traffic.export.conversation import canonical_body
from traffic.export.labels import summarize_feedback
from traffic.store import InferenceRecord, InferenceRow, StoreBackend, json_object
from traffic.store.console_queries import Window, recent_ok


@dataclass(frozen=True, slots=True)
class Preview:
    live: ReplayReport
    candidate: ReplayReport
    replayed: int  # recorded exchanges replayed
    judged: int  # of which with a user verdict or a shadow verdict
    off_policy: OffPolicy  # the candidate by its logged propensities (router.ope)
    weights: str | None  # the local weights whose verdicts count (the newest served)
    replaced: int  # local verdicts of other weights left out


def features_of(inf: InferenceRecord) -> RequestFeatures:
    """The router's view of a recorded request, as ``python -m rl_loop.replay`` reads it."""
    return recorded_features(
        inf.endpoint,
        json_object(inf.request) or {},
        request_text(inf.endpoint, canonical_body(inf)),
        tags=inf.tags,
        api_key_id=inf.api_key_id,
        episode_id=inf.episode_id,
        request_id=inf.id,
    )


def served_weights(rows: Sequence[InferenceRow], arms: Mapping[str, Arm]) -> str | None:
    """The weights version of the newest locally served row (``rows`` newest first)."""
    for row in rows:
        inf = row.inference
        if arms.get(inf.route_target) == "local" and inf.weights_version:
            return inf.weights_version
    return None


def replay_items(
    rows: Sequence[InferenceRow],
    arms: Mapping[str, Arm],
    class_tag: str,
    weights: str | None = None,
) -> tuple[list[ReplayItem], int]:
    """One item per recorded exchange served by a known target, and how many local verdicts
    (a locally served answer's feedback, a shadow's verdict) were left out for coming from
    other weights than ``weights`` (None: none left out): replaced weights say little of
    the served ones."""
    items = []
    replaced = 0
    for row in rows:
        inf = row.inference
        arm = arms.get(inf.route_target)
        if arm is None:
            continue
        verdict = summarize_feedback(row.feedback).verdict
        if (
            weights is not None
            and arm == "local"
            and verdict is not None
            and inf.weights_version not in (None, weights)
        ):
            verdict = None
            replaced += 1
        shadow: bool | None = None
        for s in row.shadows:
            recorded = s.comparison.get("verdict")
            version = s.comparison.get("weights_version")
            if weights is not None and isinstance(version, str) and version != weights:
                replaced += isinstance(recorded, bool)
                continue
            if isinstance(recorded, bool):
                shadow = recorded
        features = features_of(inf)
        items.append(
            ReplayItem(
                features=features,
                served_arm=arm,
                accepted=None if verdict is None else verdict == "accepted",
                cost_usd=inf.cost_usd or 0.0,
                latency_ms=inf.latency_ms,
                shadow_accepted=shadow,
                class_key=class_key(features, [class_tag]),
                logged_local_p=inf.decision_propensity,
            )
        )
    return items, replaced


def _compare(
    rows: Sequence[InferenceRow],
    arms: Mapping[str, Arm],
    class_tag: str,
    live: RoutingPolicy,
    candidate: RoutingPolicy,
) -> Preview:
    weights = served_weights(rows, arms)
    items, replaced = replay_items(rows, arms, class_tag, weights)

    def arm_of(target: str) -> Arm:
        return arms.get(target, "frontier")

    judged = sum(1 for i in items if i.accepted is not None or i.shadow_accepted is not None)
    oldest_first = items[::-1]  # recent_ok reads newest first; cross-fitting folds by time
    return Preview(
        replay(live, items, arm_of),
        replay(candidate, items, arm_of),
        len(items),
        judged,
        off_policy(candidate, oldest_first, arm_of),
        weights,
        replaced,
    )


async def preview(
    store: StoreBackend,
    window: Window,
    sample: int,
    arms: Mapping[str, Arm],
    class_tag: str,
    live: RoutingPolicy,
    candidate: RoutingPolicy,
) -> Preview:
    """Replay ``live`` and ``candidate`` on the newest ``sample`` successful exchanges."""
    rows = await recent_ok(store, window, sample)
    return await asyncio.to_thread(_compare, rows, arms, class_tag, live, candidate)
