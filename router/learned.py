"""Learned routing: a request goes to the local model when what it says predicts it will be
answered well enough there.

Definitions
- Outcome: an answer with a verdict (accepted / rejected) from user feedback on live traffic, or
  from verifying a shadow answer (the local model answering a frontier-served request off the
  user's path), or from the RL loop's gate. Each is for one arm, ``local`` or ``frontier``, and
  carries the request's :class:`~router.request_text.RequestText` (what the scorer reads) and an
  evidence group (``class_key``: ops tags or a benchmark's labels, ``*`` without; used for
  reports and for the RL loop's evidence bookkeeping, never by a decision).
- Scorer (:mod:`router.scorer`): ``p_local(request)``, the probability that the local model's
  answer is accepted, a logistic regression over hashed features of the request text, fitted on
  the local outcomes; ``p_frontier``, the frontier's smoothed acceptance.
- Calibration: a held-out share of the local outcomes (``calibration_share``, drawn by a
  stable hash of their position) is scored by the fitted scorer and kept, with the chance each
  was observed, in its segment's pool, beside the scores of the latest live requests (the live
  mix). The threshold is derived from them when the policy is built (``router.calibration``:
  learn-then-test on lower bounds of the routed mix, weighted to the live mix), so changing
  ``quality_target`` needs no refit (docs/routing.md, "How the scorer learns").
Decision for an ``auto`` request (pinned aliases and matching rules keep priority; a rule that
matches request tags is how ops pin a tagged class to a target, and tags are never required)
The threshold and the exploration share are the request's segment's (plain / tools), set by
``router.calibration`` when the policy is built.
1. ``p_local >= threshold`` -> local, except ``frontier_check_share`` of them (a stable hash of
   the request id) kept at the frontier, so off-policy estimates have overlap both ways.
2. Otherwise frontier, except the exploration share of the requests (a stable hash of the
   request id, so a retried request lands the same way) go local to keep learning on live
   traffic. With no fitted scorer yet (cold start) every request is decided by 2.
Every decision's reason names the score, the threshold and the scorer version, and the decision
carries ``p_local`` for the shadow sampler (which aims where the scorer is least certain).
Pure: fitting is a function of outcomes; the gateway loads the fitted state from a file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from router.calibration import SEGMENTS, Knobs, Segment, SegmentPlan, SegmentPool, plan, segment_of
from router.config import LearnedConfig
from router.decision import DecisionKind, RouteDecision
from router.features import RequestFeatures, unit_hash
from router.policy import RulePolicy
from router.request_text import RequestText
from router.scorer import Example, Scorer, ScorerConfig
from router.scorer import fit as fit_scorer

Arm = Literal["local", "frontier"]

# Half the local outcomes with text are held out to set the threshold: its lower bounds need the
# evidence (a quarter left a flywheel round 100 verdicts, and 93 of 96 gate passes of its learnable
# families kept them at the frontier); the scorer ranks about as well on the other half. Scoring
# every outcome out of fold instead puts the pool on other models' scales than the deployed one.
CALIBRATION_SHARE = 0.5
_EMPTY = RequestText()


@dataclass(slots=True)
class ArmCounts:
    accepted: float = 0.0
    rejected: float = 0.0

    @property
    def n(self) -> float:
        return self.accepted + self.rejected

    def mean(self) -> float:
        return (1 + self.accepted) / (2 + self.n)


@dataclass(frozen=True, slots=True)
class Outcome:
    class_key: str
    arm: Arm
    accepted: bool
    weight: float = 1.0
    text: RequestText | None = None
    propensity: float = 1.0  # the chance this verdict was observed (router.calibration)


@dataclass(slots=True)
class LearnedState:
    """The fitted estimate; ``version`` is recorded with every decision it makes."""

    version: str
    classes: dict[str, dict[str, ArmCounts]] = field(default_factory=dict)
    scorer: Scorer | None = None
    calibration: dict[Segment, SegmentPool] = field(
        default_factory=lambda: {s: SegmentPool() for s in SEGMENTS}
    )
    _plans: dict[tuple[Segment, Knobs], SegmentPlan] = field(
        default_factory=dict, repr=False, compare=False
    )

    def plans(self, config: LearnedConfig) -> dict[Segment, SegmentPlan]:
        """Each segment's threshold plan under ``config`` (``router.calibration.plan``), built
        once per knob setting and kept: it takes tens of milliseconds on a large pool, so the
        reload authority builds it in a worker thread before a policy is swapped in."""
        scorer = self.scorer
        out: dict[Segment, SegmentPlan] = {}
        for segment in SEGMENTS:
            knobs = Knobs.of(config, segment)
            found = self._plans.get((segment, knobs))
            if found is None:
                pool = self.calibration[segment] if scorer is not None else SegmentPool()
                f = scorer.frontier.mean() if scorer is not None else 1.0
                found = self._plans[(segment, knobs)] = plan(pool, f, knobs)
            out[segment] = found
        return out

    def counts(self, class_key: str, arm: Arm) -> ArmCounts:
        return self.classes.get(class_key, {}).get(arm, ArmCounts())

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "classes": {
                c: {a: [v.accepted, v.rejected] for a, v in arms.items()}
                for c, arms in self.classes.items()
            },
            "scorer": self.scorer.to_json() if self.scorer is not None else None,
            "calibration": {s: pool.to_json() for s, pool in self.calibration.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LearnedState:
        scorer = data.get("scorer")
        cal = data.get("calibration") or {}
        if "scores" in cal:  # a state written before the segments: one pool, all plain
            cal = {"plain": cal}
        return cls(
            str(data["version"]),
            {
                c: {a: ArmCounts(float(v[0]), float(v[1])) for a, v in arms.items()}
                for c, arms in data.get("classes", {}).items()
            },
            Scorer.from_json(scorer) if scorer else None,
            {s: SegmentPool.from_json(cal.get(s) or {}) for s in SEGMENTS},
        )


def class_key(features: RequestFeatures, class_tags: Iterable[str]) -> str:
    """The evidence group of a request: its values of ``class_tags`` (``*`` without), with a
    ``|tools`` suffix when it offers tools. Reports and the RL loop's bookkeeping only."""
    values = [features.tags[t] for t in class_tags if t in features.tags]
    key = "|".join(values) if values else "*"
    return key + ("|tools" if features.has_tools else "")


def fit(
    outcomes: Iterable[Outcome],
    version: str,
    *,
    seed: int = 0,
    config: ScorerConfig | None = None,
    calibration_share: float = CALIBRATION_SHARE,
    live: Iterable[RequestText] = (),
) -> LearnedState:
    """Counts per evidence group and arm, the scorer fitted on the outcomes that carry text
    (but the calibration share), that share scored into its segment's pool with its
    propensity, and the ``live`` requests' scores as each segment's live mix
    (``router.calibration``)."""
    state = LearnedState(version)
    local_seen = 0
    fitted: list[Example] = []
    held_out: list[Outcome] = []
    for o in outcomes:
        arms = state.classes.setdefault(o.class_key, {})
        counts = arms.setdefault(o.arm, ArmCounts())
        if o.accepted:
            counts.accepted += o.weight
        else:
            counts.rejected += o.weight
        if o.text is None:
            continue
        local_seen += o.arm == "local"
        if o.arm == "local" and _held_out(local_seen, calibration_share):
            held_out.append(o)
        else:
            fitted.append(Example(o.text, o.accepted, o.arm, o.weight))
    if any(e.arm == "local" for e in fitted):
        scorer = fit_scorer(fitted, version, seed=seed, config=config)
        state.scorer = scorer
        for o in held_out:
            assert o.text is not None
            pool = state.calibration[segment_of(o.text.has_tools)]
            pool.add(scorer.predict_local(o.text), o.accepted, o.propensity)
        live_scores: dict[Segment, list[float]] = {s: [] for s in SEGMENTS}
        for text in live:
            live_scores[segment_of(text.has_tools)].append(scorer.predict_local(text))
        for segment, scores in live_scores.items():
            state.calibration[segment].set_live(scores)
    return state


def _held_out(nth: int, share: float) -> bool:
    # By a stable hash of the position, not every k-th: periodic traffic (a client alternating
    # two kinds of request) would otherwise put a single kind in the held-out share.
    return unit_hash(str(nth), "calibration") < share


class LearnedPolicy:
    """Rules first (pinned aliases, matching rules); ``auto`` traffic by the request's score."""

    def __init__(self, rules: RulePolicy, config: LearnedConfig, state: LearnedState) -> None:
        self._rules = rules
        self._config = config
        self._state = state
        self._version = f"{rules.version}+{state.version}"
        self.plans: dict[Segment, SegmentPlan] = state.plans(config)

    @property
    def threshold(self) -> float:
        """The plain segment's threshold (the console's headline; each segment has its own)."""
        return self.plans["plain"].threshold

    @property
    def version(self) -> str:
        return self._version

    @property
    def state(self) -> LearnedState:
        return self._state

    def model_names(self) -> list[str]:
        return self._rules.model_names()

    def chain(self, target: str) -> tuple[str, ...]:
        return self._rules.chain(target)

    def predict_local_accept(self, features: RequestFeatures) -> float | None:
        """Estimated probability that the local model's answer is accepted (None: no scorer)."""
        scorer = self._state.scorer
        return None if scorer is None else scorer.predict_local(features.text or _EMPTY)

    def decide(self, features: RequestFeatures) -> RouteDecision:
        base = self._rules.decide(features)
        cfg = self._config
        if base.kind != "default":
            local = 1.0 if base.target == cfg.local_target else 0.0
            return self._decision(base.target, base.reason, None, base.kind, local, None)
        p = self.predict_local_accept(features)
        scorer = self._state.scorer
        segment = segment_of(features.has_tools)
        cut = self.plans[segment]
        if p is None or scorer is None:
            why = f"p_local=none (no scorer fitted yet) segment={segment}"
        else:
            why = (
                f"p_local={p:.3f} threshold={cut.threshold:.3f} segment={segment} "
                f"scorer={scorer.version}"
            )
            if p >= cut.threshold:
                # A would-be-local request goes local with probability 1 - the check share.
                stay = 1.0 - cfg.frontier_check_share
                if unit_hash(features.request_id or "", "frontier-check") >= stay:
                    return self._decision(
                        cfg.frontier_target, f"learned:check {why}", p, "learned_check", stay, cut
                    )
                return self._decision(
                    cfg.local_target, f"learned:local {why}", p, "learned_local", stay, cut
                )
        # Below the cut, local only by the exploration draw: its probability is the propensity.
        explore = cut.exploration_share
        if unit_hash(features.request_id or "", "explore") < explore:
            return self._decision(
                cfg.local_target, f"learned:explore {why}", p, "learned_explore", explore, cut
            )
        return self._decision(
            cfg.frontier_target, f"learned:frontier {why}", p, "learned_frontier", explore, cut
        )

    def _decision(
        self,
        target: str,
        reason: str,
        p_local: float | None,
        kind: DecisionKind,
        propensity: float,
        cut: SegmentPlan | None,
    ) -> RouteDecision:
        threshold = cut.threshold if cut is not None and math.isfinite(cut.threshold) else None
        return RouteDecision(
            self._rules.chain(target),
            reason,
            self._version,
            p_local,
            kind=kind,
            threshold=threshold,
            propensity=propensity,
            state_version=self._state.version,
        )
